//! `bprof top` in a real terminal: tmux runs it in a pane, the tests type
//! keys with send-keys and read the screen with capture-pane.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A tmux server of its own (its own socket) with one 120x40 pane running
/// a plain shell; killed, and its socket removed, when the test ends.
pub(crate) struct Tmux {
    socket: String,
    /// Where tmux put the socket (`/tmp/tmux-UID/NAME`).
    path: PathBuf,
}

impl Tmux {
    pub(crate) fn new(tag: &str) -> Tmux {
        let mut t = Tmux {
            socket: format!("bprof-test-{}-{tag}", std::process::id()),
            path: PathBuf::new(),
        };
        let st = t
            .cmd()
            .args(["new-session", "-d", "-x", "120", "-y", "40"])
            .arg("env PS1='$ ' bash --norc --noprofile")
            .status()
            .expect("run tmux (scripts/install-deps.sh installs it)");
        assert!(st.success(), "tmux new-session failed");
        let out = t
            .cmd()
            .args(["display-message", "-p", "#{socket_path}"])
            .output()
            .expect("tmux display-message");
        t.path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        t.wait_for("shell prompt", Duration::from_secs(10), |s| s.contains('$'));
        t
    }

    pub(super) fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).stdin(Stdio::null());
        c
    }

    /// Types `text` literally, then Enter.
    pub(super) fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    /// send-keys with tmux key names (`q`, `Space`, `C-c`, `Enter`, `Escape`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let st = self
            .cmd()
            .args(["send-keys", "-t", "0"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(st.success());
    }

    pub(super) fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "0"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the pane shows its alternate screen (a TUI left it on).
    pub(super) fn alternate_on(&self) -> bool {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "0", "#{alternate_on}"])
            .output()
            .expect("tmux display-message");
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Polls the screen until `ok` holds; fails with the screen if it never does.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.capture();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "never saw {what}; screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
        if self.path.file_name().is_some() {
            let _ = std::fs::remove_file(&self.path);
            // tmux's directory for this user, if nothing else is in it.
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// The header's "last X s: N samples" count.
pub(super) fn interval_total(screen: &str) -> Option<u64> {
    let rest = screen.split_once(" s: ")?.1;
    rest.split_whitespace().next()?.parse().ok()
}

/// The header's "since start: C counted, S shown" numbers.
pub(super) fn since_start(screen: &str) -> Option<(u64, u64)> {
    let rest = screen.split_once("since start: ")?.1;
    let mut w = rest.split_whitespace();
    let counted = w.next()?.parse().ok()?;
    w.next()?;
    let shown = w.next()?.parse().ok()?;
    Some((counted, shown))
}

/// Function rows: (self %, total %, self count, total count, name); the
/// module is the fifth column (see [`function_modules`]).
pub(super) fn function_rows(screen: &str) -> Vec<(f64, f64, u64, u64, String)> {
    function_modules(screen)
        .into_iter()
        .map(|(a, b, c, d, _, name)| (a, b, c, d, name))
        .collect()
}

/// Function rows with their module: (self %, total %, self count, total
/// count, module, name).
pub(super) fn function_modules(screen: &str) -> Vec<(f64, f64, u64, u64, String, String)> {
    screen
        .lines()
        .filter_map(|l| {
            let l = l.trim_matches(|c: char| c == '│' || c.is_whitespace());
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 6 {
                return None;
            }
            Some((
                w[0].strip_suffix('%')?.parse().ok()?,
                w[1].strip_suffix('%')?.parse().ok()?,
                w[2].parse().ok()?,
                w[3].parse().ok()?,
                w[4].to_string(),
                w[5].to_string(),
            ))
        })
        .collect()
}

/// The terminal settings as `stty -g` prints them inside the pane, through
/// a file so the screen's wrapping does not matter.
pub(super) fn stty(t: &Tmux, file: &Path) -> String {
    let _ = std::fs::remove_file(file);
    t.line(&format!("stty -g > {}", file.display()));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "stty never ran:\n{}",
            t.capture()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `bprof top ARGS` in the pane (stderr to `err`, its exit status
/// printed as EXIT=N after) and waits until it has shown `refreshes`
/// refreshes with samples.
pub(crate) fn start_top(t: &Tmux, args: &str, env: &str, err: &Path) -> String {
    t.line("clear");
    t.line(&format!(
        "{env} {} top {args} 2>{}; echo EXIT=$?",
        env!("CARGO_BIN_EXE_bprof"),
        err.display()
    ));
    t.wait_for("a refresh with samples", Duration::from_secs(60), |s| {
        interval_total(s).is_some_and(|n| n > 0)
    })
}

pub(crate) fn exit_status(t: &Tmux) -> i32 {
    // The echo's own line, not the typed command's `EXIT=$?`. The echo
    // may land on a line the shell had drawn before the view took the
    // screen (`EXIT=0/main/target/...`): its digits end the status.
    let code = |s: &str| {
        s.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("EXIT=")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<i32>().ok()
        })
    };
    let s = t.wait_for("bprof top's exit", Duration::from_secs(60), |s| {
        code(s).is_some()
    });
    code(&s).unwrap()
}

/// The final stderr line: counted = shown + after the last refresh.
pub(super) fn check_final_totals(err: &Path) {
    let text = std::fs::read_to_string(err).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("bprof top: "))
        .unwrap_or_else(|| panic!("no final line in:\n{text}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // counted, shown, after the last refresh, lost
    assert_eq!(nums.len(), 4, "{line}");
    assert_eq!(nums[0], nums[1] + nums[2], "{line}");
    assert_eq!(nums[3], 0, "nothing lost here: {line}");
    assert!(!text.contains("accounting error"), "{text}");
}

#[test]
// Long on purpose: one live view driven through its keys in order; each step reads the screen the last one left.
fn top_shows_631_like_a_folded_profile_and_its_keys_work() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("top_631");
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("30"));
    let pid = work.id();
    let t = Tmux::new("631");
    let before = stty(&t, &dir.join("stty-before"));
    let err = dir.join("top.err");

    // A folded profile of the same workload over the same seconds.
    let ready = ready_path();
    let mut folded = bprof()
        .args(["-p", &pid.to_string(), "-F", "999", "-f", "--no-counts"])
        .arg("--ready-file")
        .arg(&ready)
        .arg("8")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut folded);
    // 3-second refreshes: enough samples for shares within a few points
    // even when other work on the machine takes half the workload's CPU.
    let first = start_top(&t, &format!("-p {pid} -F 999 -d 3"), "", &err);
    let first = since_start(&first).expect("since start");
    assert_eq!(first.0, first.1, "counted = shown at every refresh");
    let first = first.0;
    // The next refresh: a whole interval.
    let screen = t.wait_for("the next refresh", Duration::from_secs(10), |s| {
        since_start(s).is_some_and(|c| c.0 > first)
    });
    let folded = folded.wait_with_output().unwrap();
    assert!(folded.status.success());
    let lines = parse_folded(&String::from_utf8_lossy(&folded.stdout));
    let ftotal = total_for(&lines, "fx_work631");
    // At 999 Hz for 8 s, less what the machine's other work takes from it.
    assert!(ftotal > 2000, "{ftotal}");

    // The rows add up to the header's interval total, and the view shows
    // exactly what the kernel counted into the maps drained so far (each
    // map's own total, see count() in profile.bpf.c).
    let rows = function_rows(&screen);
    let n = interval_total(&screen).unwrap();
    assert!(n > 800, "too few samples in 3 s at 999 Hz: {screen}");
    assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), n, "{screen}");
    let (counted, shown) = since_start(&screen).unwrap();
    assert_eq!(counted, shown, "{screen}");
    for (name, want) in [("heavy", 60.0), ("medium", 30.0), ("light", 10.0)] {
        let row = rows
            .iter()
            .find(|r| r.4 == name)
            .unwrap_or_else(|| panic!("no {name} row:\n{screen}"));
        let leaf: u64 = lines
            .iter()
            .filter(|l| l.frames.last().is_some_and(|f| f == name))
            .map(|l| l.count)
            .sum();
        let folded_share = pct(leaf, ftotal);
        assert!(
            (row.0 - want).abs() <= 5.0 && (row.0 - folded_share).abs() <= 5.0,
            "{name}: top {:.1}%, folded {folded_share:.1}%, want {want}%\n{screen}",
            row.0
        );
    }
    assert!(rows.iter().any(|r| r.4 == "main" && r.1 > 95.0), "{screen}");

    // Sort: total, then name.
    t.keys(&["s"]);
    let s = t.wait_for("sort by total", Duration::from_secs(5), |s| {
        s.contains("sort: total")
    });
    let rows = function_rows(&s);
    assert!(
        rows[0].1 > 95.0,
        "the first row is main's caller or main: {s}"
    );
    t.keys(&["s"]);
    // A capture can catch the terminal between two frames' rows (the old
    // frame's below the new one's): wait for a whole frame in name order.
    let names = |s: &str| -> Vec<String> { function_rows(s).into_iter().map(|r| r.4).collect() };
    let s = t.wait_for("rows sorted by name", Duration::from_secs(5), |s| {
        s.contains("sort: name") && names(s).windows(2).all(|w| w[0] <= w[1])
    });
    // Kernel rows (interrupts on a busy machine) can push some of the four
    // below the pane: page down, each page sorted too, until all are seen.
    let want = ["heavy", "light", "main", "medium"];
    let mut seen = names(&s);
    let mut page = s;
    for _ in 0..10 {
        if want.iter().all(|n| seen.iter().any(|r| r == n)) {
            break;
        }
        let top_row = names(&page).first().cloned();
        t.keys(&["PageDown"]);
        page = t.wait_for(
            "the next page, sorted by name",
            Duration::from_secs(5),
            |s| {
                let n = names(s);
                s.contains("sort: name")
                    && n.first() != top_row.as_ref()
                    && n.windows(2).all(|w| w[0] <= w[1])
            },
        );
        seen.extend(names(&page));
    }
    t.keys(&["Home"]);
    assert!(
        want.iter().all(|n| seen.iter().any(|r| r == n)),
        "{seen:?}\n{page}"
    );
    // Stacks, then back to functions.
    t.keys(&["f"]);
    t.wait_for("whole stacks", Duration::from_secs(5), |s| {
        s.contains("fx_work631;") && s.contains("main;heavy")
    });
    t.keys(&["f"]);
    t.wait_for("functions again", Duration::from_secs(5), |s| {
        s.contains("FUNCTION")
    });
    // Narrow to the process: pick it, Enter; Esc shows all again.
    t.keys(&["p"]);
    t.wait_for("the process picker", Duration::from_secs(5), |s| {
        s.contains("pick one")
    });
    t.keys(&["Enter"]);
    t.wait_for("narrowed to the process", Duration::from_secs(5), |s| {
        s.contains(&format!("(pid {pid})")) && s.contains(&format!("*{pid}"))
    });
    t.keys(&["Escape"]);
    t.wait_for("all processes", Duration::from_secs(5), |s| {
        s.contains("(all)")
    });
    // Pause: the numbers stay while samples keep coming.
    t.keys(&["Space"]);
    let paused = t.wait_for("paused", Duration::from_secs(5), |s| s.contains("[PAUSED]"));
    let (counted, shown) = since_start(&paused).unwrap();
    assert_eq!(counted, shown, "{paused}");
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(since_start(&t.capture()), since_start(&paused));
    t.keys(&["Space"]);
    t.wait_for("running again", Duration::from_secs(8), |s| {
        !s.contains("[PAUSED]") && since_start(s) != since_start(&paused)
    });

    t.keys(&["q"]);
    assert_eq!(
        exit_status(&t),
        0,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    assert!(!t.alternate_on(), "alternate screen left on");
    assert_eq!(stty(&t, &dir.join("stty-after")), before, "terminal modes");
    check_final_totals(&err);
}

/// The pids the processes panel lists (the left half of its rows).
fn process_panel_pids(screen: &str) -> Vec<u32> {
    screen
        .lines()
        .skip_while(|l| !l.contains(" processes "))
        .skip(2)
        .take_while(|l| !l.starts_with('└'))
        .filter_map(|l| l.split('│').nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn top_off_cpu_takes_targets_and_filters_as_a_profile_does() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("top_offcpu");
    let bin = fixture("spinsleep");
    // Two targets; the filter keeps one. Each blocks half its time, all
    // of it under sleep_phase, and never blocks while spinning.
    let kept = Workload::start(Command::new(&bin).arg("40"));
    let dropped = Workload::start(Command::new(&bin).arg("40"));
    let t = Tmux::new("offcpu");
    let err = dir.join("top.err");
    let first = start_top(
        &t,
        &format!(
            "--off-cpu -p {},{} --filter 'tid == {}' -d 2",
            kept.id(),
            dropped.id(),
            kept.id()
        ),
        "",
        &err,
    );
    assert!(first.contains("off-CPU time"), "{first}");
    let before = since_start(&first).unwrap().0;
    // The next refresh: a whole 2 s interval.
    let screen = t.wait_for("the next refresh", Duration::from_secs(10), |s| {
        since_start(s).is_some_and(|c| c.0 > before)
    });
    let (counted, shown) = since_start(&screen).unwrap();
    assert_eq!(counted, shown, "{screen}");
    assert!(screen.contains("us blocked"), "{screen}");
    // About half of 2 s blocked (more when the CPUs are busy: waiting to run
    // again after the sleep counts too).
    let us = interval_total(&screen).unwrap();
    assert!(
        (600_000..=1_900_000).contains(&us),
        "{us} us blocked of 2 s:\n{screen}"
    );
    let rows = function_rows(&screen);
    assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), us, "{screen}");
    let total = |name: &str| rows.iter().find(|r| r.4 == name).map_or(0.0, |r| r.1);
    assert!(total("sleep_phase") > 95.0, "{screen}");
    assert!(total("main") > 95.0, "{screen}");
    assert!(total("spin_phase") < 5.0, "{screen}");
    // The filter in the kernel: only the kept process is listed.
    assert_eq!(process_panel_pids(&screen), [kept.id()], "{screen}");

    t.keys(&["q"]);
    assert_eq!(
        exit_status(&t),
        0,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    check_final_totals(&err);
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(text.contains("us blocked counted"), "{text}");
    drop((kept, dropped));
}

#[test]
fn top_restores_the_terminal_on_ctrl_c_sigterm_and_panic() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("top_restore");
    let bin = fixture("work631");
    let _work = Workload::start(Command::new(&bin).arg("60"));
    let t = Tmux::new("restore");
    let before = stty(&t, &dir.join("stty-before"));
    let pidfile: PathBuf = dir.join("top.pid");
    for how in ["ctrl-c", "sigterm", "panic"] {
        let err = dir.join(format!("{how}.err"));
        let env = if how == "panic" {
            "BPROF_TOP_TEST_PANIC=1"
        } else {
            ""
        };
        let _ = std::fs::remove_file(&pidfile);
        // `exec` keeps the pid the shell wrote.
        t.line("clear");
        t.line(&format!(
            "sh -c 'echo $$ > {}; exec env {env} {} top -p {} 2>{}'; echo EXIT=$?",
            pidfile.display(),
            env!("CARGO_BIN_EXE_bprof"),
            _work.id(),
            err.display()
        ));
        let code = if how == "panic" {
            exit_status(&t)
        } else {
            t.wait_for("a refresh", Duration::from_secs(60), |s| {
                interval_total(s).is_some_and(|n| n > 0)
            });
            if how == "ctrl-c" {
                t.keys(&["C-c"]);
            } else {
                let pid: i32 = std::fs::read_to_string(&pidfile)
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            exit_status(&t)
        };
        let stderr = std::fs::read_to_string(&err).unwrap();
        if how == "panic" {
            assert_eq!(code, 101, "{stderr}");
            assert!(stderr.contains("BPROF_TOP_TEST_PANIC"), "{stderr}");
        } else {
            assert_eq!(code, 0, "{how}: {stderr}");
            check_final_totals(&err);
        }
        assert!(!t.alternate_on(), "{how}: alternate screen left on");
        assert_eq!(
            stty(&t, &dir.join(format!("stty-{how}"))),
            before,
            "{how}: terminal modes"
        );
    }
}

/// `bprof ARGS` with a terminal (script(1)'s) on stdin, stdout and
/// stderr: its exit status and the lines it wrote there.
fn on_a_terminal(args: &str) -> (Option<i32>, Vec<String>) {
    let cmd = format!("{} {args}", env!("CARGO_BIN_EXE_bprof"));
    let out = run(Command::new("script").args(["-qec", &cmd, "/dev/null"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text
        .lines()
        .map(|l| l.trim_end_matches('\r').to_string())
        .filter(|l| !l.is_empty())
        .collect();
    (out.status.code(), lines)
}

#[test]
fn top_without_a_terminal_is_one_line_and_status_2() {
    // Before anything is loaded: no root needed.
    let out = run(bprof().args(["top", "1"]).stdout(Stdio::piped()));
    let line = assert_one_line_error(&out);
    assert!(line.contains("needs a terminal"), "{line}");
    assert_eq!(out.status.code(), Some(2));
    // Options a live view cannot take are refused on a terminal too, each
    // with its own reason.
    for (args, want) in [
        ("top --svg x.svg", "bprof top shows a live view only"),
        (
            "top --every 10 --pprof x.pb.gz",
            "bprof top shows a live view only",
        ),
        ("top -d 0.01", "invalid --delay: at least 0.1 seconds"),
    ] {
        let (code, lines) = on_a_terminal(args);
        assert_eq!(code, Some(2), "{args}: {lines:?}");
        assert_eq!(lines.len(), 1, "{args}: {lines:?}");
        assert!(
            lines[0].starts_with("bprof: ") && lines[0].contains(want),
            "{args}: {lines:?}"
        );
    }
}

#[test]
fn hostile_top_shows_control_characters_in_names_as_escapes() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("top_hostile");
    let bin = hostile_named_work631(&dir);
    let work = Workload::start(Command::new(&bin).arg("60"));
    let t = Tmux::new("hostile");
    let err = dir.join("top.err");
    start_top(&t, &format!("-p {} -F 999 -d 1", work.id()), "", &err);
    let (heavy, medium) = (folded_form(HOSTILE_HEAVY), folded_form(HOSTILE_MEDIUM));
    let screen = t.wait_for("the functions, escaped", Duration::from_secs(30), |s| {
        s.contains(&heavy) && s.contains(&medium)
    });
    assert!(screen.contains(&folded_form(HOSTILE_LIGHT)), "{screen}");
    // The stacks view shows the thread name, escaped too.
    t.keys(&["f"]);
    let comm = folded_form(HOSTILE_FILE_NAME);
    t.wait_for("the comm, escaped", Duration::from_secs(10), |s| {
        s.contains(&comm)
    });
    // Nothing reached the terminal raw: it was neither retitled nor cleared.
    let title = t
        .cmd()
        .args(["display-message", "-p", "-t", "0", "#{pane_title}"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&title.stdout).contains("pwned"),
        "the pane was retitled"
    );
    t.keys(&["q"]);
    assert_eq!(
        exit_status(&t),
        0,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    check_final_totals(&err);
}
