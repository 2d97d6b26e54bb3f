//! The everyday path, as a perf user walks it: perf's flags and idioms, the
//! default rate, the default table of functions, kernel frames marked and
//! coloured, inlined frames, `bprof stat` on stderr, exit statuses, the
//! progress line beside a command's output, `bprof top` under `timeout`
//! and in the background, and the README's examples run as written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::top::{
    check_final_totals, exit_status, function_modules, interval_total, since_start, stty, Tmux,
};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs bprof, asserting it succeeded; returns its output.
fn ok(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(out.status.success(), "{:?}: {}", cmd, stderr(&out));
    out
}

/// A process's CPU time (user + system) so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    let rest = stat.rsplit_once(')').expect("comm").1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15; here, after the state, 11 and 12.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// The "over N s" of the summary line.
fn seconds_over(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(" unique stacks"))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    let rest = line.split_once(" over ").expect("over").1;
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// The rate the summary line states ("999 Hz").
fn rate_said(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(" unique stacks"))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    number_before(line, " Hz")
}

#[test]
fn perf_idioms_work_as_in_perf() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("60"));
    let pid = work.id().to_string();

    // -g: stacks are always taken.
    let out = ok(bprof().args(["-g", "-p", &pid, "-f", "1"]));
    let lines = parse_folded(&stdout(&out));
    assert_totals(&stderr(&out), &lines);
    assert!(
        with_frame(&lines, "fx_work631", "main") > 0,
        "{}",
        stdout(&out)
    );

    // -p PID -- sleep 2: the process, for as long as sleep runs.
    let t = Instant::now();
    let out = ok(bprof().args(["-p", &pid, "-f", "--", "sleep", "2"]));
    let took = t.elapsed();
    let err = stderr(&out);
    let lines = parse_folded(&stdout(&out));
    assert_totals(&err, &lines);
    assert!(!lines.is_empty(), "{err}");
    assert!(
        lines.iter().all(|l| l.frames[0] == "fx_work631"),
        "{}",
        stdout(&out)
    );
    assert!(
        err.contains(&format!("PID {pid}, while 'sleep 2' ran")),
        "{err}"
    );
    let over = seconds_over(&err);
    assert!((1.9..2.6).contains(&over), "{over} s: {err}");
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(!err.contains("cannot be combined"), "{err}");

    // -a -- sleep 1: every process while it runs; the old meaning of -a
    // (annotations) is noted once.
    let out = ok(bprof().args(["-a", "-f", "--", "sleep", "1"]));
    let err = stderr(&out);
    let lines = parse_folded(&stdout(&out));
    assert_totals(&err, &lines);
    assert!(total_for(&lines, "fx_work631") > 0, "{err}");
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("-a means every CPU now"))
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("all processes, while 'sleep 1' ran"), "{err}");

    // bprof stat -p PID -- sleep 1: counts the process while sleep runs.
    let out = ok(bprof().args([
        "stat",
        "-x",
        ",",
        "-e",
        "task-clock",
        "-p",
        &pid,
        "--",
        "sleep",
        "1",
    ]));
    let counts = stderr(&out);
    let ms: f64 = counts
        .lines()
        .find(|l| l.contains(",task-clock,"))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no task-clock: {counts}"));
    assert!(ms > 50.0 && ms < 2600.0, "{ms} ms: {counts}");

    // The same event syntax as bprof stat: :u samples user mode only.
    let out = ok(bprof().args(["-e", "cpu-clock:u", "-p", &pid, "-f", "1"]));
    let err = stderr(&out);
    let lines = parse_folded(&stdout(&out));
    assert_totals(&err, &lines);
    assert!(!lines.is_empty(), "{err}");
    assert!(err.contains("cpu-clock:u"), "{err}");
    assert!(
        lines
            .iter()
            .all(|l| l.frames.iter().all(|f| !f.ends_with("_[k]"))),
        "{}",
        stdout(&out)
    );

    // Old spellings work, with a note: -I for --include-idle.
    let out = ok(bprof().args(["-I", "-p", &pid, "-f", "0.5"]));
    assert!(stderr(&out).contains("-I is the old spelling of --include-idle"));
    let out = ok(bprof().args(["-a", "-p", &pid, "-f", "0.5"]));
    let err = stderr(&out);
    assert!(err.contains("-a means every CPU now"), "{err}");
    assert_totals(&err, &parse_folded(&stdout(&out)));

    // -F above the kernel's limit: lowered, said, and the duration kept.
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let out = ok(bprof().args(["-F", "1000000000", "-p", &pid, "-f", "1"]));
    let err = stderr(&out);
    assert!(err.contains("above the kernel's limit"), "{err}");
    assert_eq!(rate_said(&err), max, "{err}");
    assert!((0.95..1.3).contains(&seconds_over(&err)), "{err}");
    assert_totals(&err, &parse_folded(&stdout(&out)));
}

#[test]
fn kernel_only_samples_are_all_kernel_frames() {
    root_or_skip!();
    let _g = parallel();
    // mmapchurn spends much of its time in mmap and munmap.
    let bin = fixture("mmapchurn");
    let out = ok(bprof()
        .args(["-e", "cpu-clock:k", "-f", "--"])
        .arg(&bin)
        .arg("2"));
    let err = stderr(&out);
    let lines = parse_folded(&stdout(&out));
    assert_totals(&err, &lines);
    let mine: Vec<&Folded> = lines
        .iter()
        .filter(|l| l.frames[0] == "fx_mmapchurn")
        .collect();
    assert!(mine.iter().map(|l| l.count).sum::<u64>() >= 20, "{err}");
    for l in &mine {
        let leaf = l.frames.last().unwrap();
        assert!(
            leaf.ends_with("_[k]"),
            "a :k sample's leaf is in the kernel: {l:?}"
        );
    }
}

#[test]
fn mistyped_flags_get_a_suggestion() {
    let _g = parallel();
    // Refused before anything is loaded: no root needed.
    for (args, want) in [
        (&["--frequncy", "99"][..], "did you mean '--frequency'?"),
        (
            &["stat", "--intervl", "10"][..],
            "did you mean '--interval-print'?",
        ),
        (&["top", "--dealy", "1"][..], "did you mean '--delay'?"),
        (&["--svgg", "x.svg"][..], "did you mean '--svg'?"),
    ] {
        let out = run(bprof().args(args));
        let line = assert_one_line_error(&out);
        assert!(line.contains(want), "{args:?}: {line}");
        assert_eq!(out.status.code(), Some(2));
    }
    // -g takes no value: the next word is still the duration.
    let out = run(bprof().args(["-g", "nan"]));
    let line = assert_one_line_error(&out);
    assert!(line.contains("invalid duration 'nan'"), "{line}");
}

#[test]
fn help_states_both_default_rates() {
    let _g = parallel();
    let out = run(bprof().arg("--help"));
    let help = stdout(&out);
    assert!(
        help.contains("[default: 999 for a") && help.contains("99 system-wide"),
        "{help}"
    );
    let top = stdout(&run(bprof().args(["top", "--help"])));
    assert!(top.contains("the view shows it and its children"), "{top}");
    assert!(
        !top.contains("perf stat"),
        "top's COMMAND in stat's words: {top}"
    );
}

#[test]
fn default_rate_gives_a_busy_process_1000_samples_in_3_s() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("60"));
    let pid = work.id();
    let ready = ready_path();
    let mut prof = bprof()
        .args(["-p", &pid.to_string(), "-f", "--no-counts", "--ready-file"])
        .arg(&ready)
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut prof);
    let cpu0 = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(3));
    let cpu = cpu_seconds(pid) - cpu0;
    let out = prof.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&ready);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let samples = assert_totals(&err, &parse_folded(&stdout(&out)));
    assert_eq!(rate_said(&err), 999, "{err}");
    // A sample per 1/999 s of the process's CPU time: 2997 in 3 s of one
    // busy thread; fewer here only as far as the machine's other work
    // takes the CPU from it.
    let per_cpu_second = samples as f64 / cpu.max(0.01);
    assert!(
        (800.0..1200.0).contains(&per_cpu_second),
        "{samples} samples over {cpu:.2} s of CPU: {per_cpu_second:.0} a CPU-second\n{err}"
    );
    if cpu >= 1.2 {
        assert!(samples >= 1000, "{samples} samples over {cpu:.2} s of CPU");
    }
    // A command is a process too; system-wide is gentler.
    let out = ok(bprof().args(["-f", "--no-counts", "--", "true"]));
    assert_eq!(rate_said(&stderr(&out)), 999);
    let out = ok(bprof().args(["-a", "-f", "--no-counts", "0.3"]));
    assert_eq!(rate_said(&stderr(&out)), 99);
    let out = ok(bprof().args(["-f", "--no-counts", "0.3"]));
    assert_eq!(rate_said(&stderr(&out)), 99);
}

/// The DURATION ends the samples on time even when bprof's own thread is
/// busy with a flood of them: no more samples than the rate allows.
#[test]
fn a_high_rate_system_wide_keeps_its_duration() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("work631");
    let _work = Workload::start(Command::new(&bin).arg("60"));
    let dir = scratch("high_rate");
    let json = dir.join("s.json");
    let out = ok(bprof()
        .args(["-F", "20000", "-a", "--no-counts", "-o"])
        .arg(dir.join("f.folded"))
        .arg("--stats-json")
        .arg(&json)
        .arg("1"));
    let err = stderr(&out);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = j["samples"]["program_runs"].as_u64().unwrap();
    let ncpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(
        runs <= 20_000 * ncpus * 115 / 100,
        "{runs} sample runs in a 1 s profile at 20 kHz on {ncpus} CPUs: {err}"
    );
    let lines = parse_folded(&std::fs::read_to_string(dir.join("f.folded")).unwrap());
    let (samples, lost, _) = summary_numbers(&err);
    assert_eq!(lines.iter().map(|l| l.count).sum::<u64>(), samples, "{err}");
    assert_eq!(j["samples"]["lost"].as_u64(), Some(lost));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows of the default table: (self %, total %, self count, module, name).
fn table_rows(text: &str) -> Vec<(f64, f64, u64, String, String)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() < 5 {
                return None;
            }
            Some((
                w[0].strip_suffix('%')?.parse().ok()?,
                w[1].strip_suffix('%')?.parse().ok()?,
                w[2].parse().ok()?,
                w[3].to_string(),
                w[4..].join(" "),
            ))
        })
        .collect()
}

/// The footer's "(N more functions: C samples self, ...)" count.
fn footer_self(text: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with('(') && l.contains(" more function"))
        .map_or(0, |l| number_before(l, " samples self"))
}

#[test]
fn the_default_answer_is_a_table_of_the_hottest_functions() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("default_table");
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("60"));
    let pid = work.id().to_string();
    // perf on the same process over the same seconds.
    let data = dir.join("perf.data");
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "--no-bpf-event",
            "-F",
            "999",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_guarded();
    let out = ok(bprof().args(["-p", &pid, "--no-counts", "3"]));
    let perf = perf.wait_with_output().unwrap();
    assert!(perf.status.success(), "perf: {}", stderr(&perf));
    let (text, err) = (stdout(&out), stderr(&out));
    // It fits a screen: the header, at most 20 rows and the footer.
    assert!(text.lines().count() <= 22, "{text}");
    assert!(
        text.starts_with(" SELF%  TOTAL%  SAMPLES  MODULE"),
        "{text}"
    );
    let rows = table_rows(&text);
    let (samples, lost, _) = summary_numbers(&err);
    assert_eq!(lost, 0, "{err}");
    // Every sample has one leaf: the rows' self counts and the footer's add up.
    assert_eq!(
        rows.iter().map(|r| r.2).sum::<u64>() + footer_self(&text),
        samples,
        "{text}\n{err}"
    );
    let names: Vec<&str> = rows.iter().take(3).map(|r| r.4.as_str()).collect();
    assert_eq!(names, ["heavy", "medium", "light"], "{text}");
    assert!(rows.iter().take(3).all(|r| r.3 == "fx_work631"), "{text}");
    let perf_rep = run(Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-s",
            "sym",
            "-q",
            "-i",
        ])
        .arg(&data));
    let mut perf_shares: BTreeMap<String, f64> = BTreeMap::new();
    for line in stdout(&perf_rep).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let (Some(p), Some(sym)) = (w.first(), w.get(2)) {
            if let Ok(p) = p.trim_end_matches('%').parse::<f64>() {
                *perf_shares.entry(sym.to_string()).or_default() += p;
            }
        }
    }
    for ((name, want), row) in [("heavy", 60.0), ("medium", 30.0), ("light", 10.0)]
        .iter()
        .zip(&rows)
    {
        let perf = perf_shares.get(*name).copied().unwrap_or(0.0);
        assert!(
            (row.0 - want).abs() <= 5.0 && (row.0 - perf).abs() <= 5.0,
            "{name}: bprof {:.1}%, perf {perf:.1}%, want {want}%\n{text}",
            row.0
        );
        // A leaf function: its total is its self share.
        assert!((row.1 - row.0).abs() <= 1.0, "{text}");
    }
    assert!(
        rows.iter().any(|r| r.4 == "main" && r.1 > 95.0) || text.contains("more function"),
        "{text}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("bprof: next: --svg FILE")),
        "{err}"
    );
    // The profile.py dump stays, under --stacks, kernel frames marked.
    let out = ok(bprof().args(["-p", &pid, "--no-counts", "--stacks", "1"]));
    let text = stdout(&out);
    assert!(text.contains("    -                fx_work631 ("), "{text}");
    assert!(!text.contains("SELF%"), "{text}");
    assert!(!stderr(&out).contains("bprof: next:"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `(title name, fill (r, g, b))` of every frame of an SVG flame graph.
fn svg_fills(svg: &str) -> Vec<(String, (u8, u8, u8))> {
    let mut out = Vec::new();
    for g in svg.split("<g>").skip(1) {
        let Some(title) = g
            .split_once("<title>")
            .and_then(|(_, r)| r.split_once("</title>"))
        else {
            continue;
        };
        let name = title.0.rsplit_once(" (").map_or(title.0, |(n, _)| n);
        let Some(fill) = g
            .split_once("fill=\"rgb(")
            .and_then(|(_, r)| r.split_once(")\""))
        else {
            continue;
        };
        let c: Vec<u8> = fill
            .0
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        if c.len() == 3 {
            out.push((unescape(name), (c[0], c[1], c[2])));
        }
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn is_user_colour((r, g, b): (u8, u8, u8)) -> bool {
    // Red (C and the like) or yellow (C++ and Rust paths).
    (r >= 200 && g == b && g < 131) || (r >= 175 && r == g && b <= 70)
}
fn is_kernel_colour((r, g, b): (u8, u8, u8)) -> bool {
    r >= 190 && b == 0 && (90..=155).contains(&g)
}
fn is_jit_colour((r, g, b): (u8, u8, u8)) -> bool {
    g >= 200 && r == b && r <= 110
}
fn is_off_cpu_colour((r, g, b): (u8, u8, u8)) -> bool {
    b >= 190 && r == g && r <= 140
}

#[test]
fn kernel_frames_are_marked_and_coloured_apart() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("kernel_marked");
    // Much of mmapchurn's time is in mmap and munmap.
    let bin = fixture("mmapchurn");
    let (folded, svg) = (dir.join("f.folded"), dir.join("f.svg"));
    let out = ok(bprof()
        .arg("-o")
        .arg(&folded)
        .arg("--svg")
        .arg(&svg)
        .arg("--")
        .arg(&bin)
        .arg("2"));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("bprof: wrote {}", folded.display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("bprof: wrote {}", svg.display())),
        "{err}"
    );
    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    assert_totals(&err, &lines);
    let (mut kernel, mut user) = (HashSet::new(), HashSet::new());
    for l in &lines {
        // Kernel frames are the leaf end of a stack, each marked.
        let at = l.frames.iter().position(|f| f.ends_with("_[k]"));
        if let Some(at) = at {
            assert!(l.frames[at..].iter().all(|f| f.ends_with("_[k]")), "{l:?}");
        }
        let end = at.unwrap_or(l.frames.len());
        for f in &l.frames[1..end] {
            user.insert(f.clone());
        }
        for f in &l.frames[end..] {
            kernel.insert(f.trim_end_matches("_[k]").to_string());
        }
    }
    assert!(
        kernel.len() >= 3 && user.contains("spin"),
        "{kernel:?} {user:?}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("colours: user red/yellow, kernel orange"),
        "no legend in the subtitle"
    );
    let fills = svg_fills(&text);
    let (mut k, mut u) = (0, 0);
    for (name, c) in &fills {
        if kernel.contains(name) && !user.contains(name) {
            assert!(is_kernel_colour(*c), "kernel frame {name}: {c:?}");
            k += 1;
        } else if user.contains(name) && !kernel.contains(name) {
            assert!(is_user_colour(*c), "user frame {name}: {c:?}");
            u += 1;
        }
    }
    assert!(k >= 3 && u >= 2, "{k} kernel and {u} user frames coloured");

    // --no-annotations leaves them bare.
    let out = ok(bprof()
        .args(["--no-annotations", "-f", "--"])
        .arg(&bin)
        .arg("1"));
    let lines = parse_folded(&stdout(&out));
    assert_totals(&stderr(&out), &lines);
    assert!(lines
        .iter()
        .all(|l| l.frames.iter().all(|f| !f.ends_with("_[k]"))));
    assert!(lines
        .iter()
        .any(|l| l.frames.iter().any(|f| kernel.contains(f))));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn off_cpu_and_jit_frames_have_colours_of_their_own() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("colours_offcpu_jit");
    // --wall: spinsleep blocks half its time, all of it under sleep_phase.
    let (svg, folded) = (dir.join("wall.svg"), dir.join("wall.folded"));
    let out = ok(bprof()
        .args(["--wall", "--no-counts", "--svg"])
        .arg(&svg)
        .arg("-o")
        .arg(&folded)
        .arg("--")
        .arg(fixture("spinsleep"))
        .arg("2"));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("off-CPU blue"), "{}", stderr(&out));
    let fills = svg_fills(&text);
    let of = |name: &str| -> Vec<(u8, u8, u8)> {
        fills
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, c)| *c)
            .collect()
    };
    let off = of("[off-cpu]");
    assert!(
        !off.is_empty() && off.iter().all(|&c| is_off_cpu_colour(c)),
        "{off:?}"
    );
    // User frames seen only in blocked stacks are blue too; those of
    // stacks on a CPU keep a user colour.
    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    let (mut on, mut blocked) = (HashSet::new(), HashSet::new());
    for l in &lines {
        let set = if l.frames.last().is_some_and(|f| f == "[off-cpu]") {
            &mut blocked
        } else {
            &mut on
        };
        set.extend(
            l.frames[1..]
                .iter()
                .filter(|f| !f.ends_with("_[k]"))
                .cloned(),
        );
    }
    let only_blocked: Vec<&String> = blocked
        .difference(&on)
        .filter(|f| *f != "[off-cpu]")
        .collect();
    // (sleep_phase is one, unless a sample caught its thread on a CPU in
    // the kernel's half of the sleep, as one can.)
    for f in only_blocked {
        assert!(
            of(f).iter().all(|&c| is_off_cpu_colour(c)),
            "{f}: {:?}",
            of(f)
        );
    }
    let spin = of("spin_phase");
    assert!(
        !spin.is_empty() && spin.iter().all(|&c| is_user_colour(c)),
        "{spin:?}"
    );

    // JIT code: named from its perf map, or [jit] without one; both green.
    let jit = fixture("jit");
    for (flags, name) in [("", "jit_spin"), ("n", "[jit]")] {
        let svg = dir.join(format!("jit{flags}.svg"));
        let folded = dir.join(format!("jit{flags}.folded"));
        let out = ok(bprof()
            .args(["--no-counts", "--svg"])
            .arg(&svg)
            .arg("-o")
            .arg(&folded)
            .arg("--")
            .arg(&jit)
            .args(["2", flags]));
        let err = stderr(&out);
        let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
        assert_totals(&err, &lines);
        let leaf: u64 = lines
            .iter()
            .filter(|l| l.frames.last().is_some_and(|f| f == name))
            .map(|l| l.count)
            .sum();
        assert!(leaf * 2 > total_for(&lines, "fx_jit"), "{name}: {err}");
        let text = std::fs::read_to_string(&svg).unwrap();
        let c: Vec<(u8, u8, u8)> = svg_fills(&text)
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, c)| c)
            .collect();
        assert!(
            !c.is_empty() && c.iter().all(|&c| is_jit_colour(c)),
            "{name}: {c:?}"
        );
        assert!(text.contains("JIT green"));
        // Without a perf map the summary says what would name them.
        let said = err.contains("[jit] is JIT code without a perf map to name it");
        assert_eq!(said, flags == "n", "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// node's JIT code without `--perf-basic-prof` is `[jit]`, and the summary
/// names the flag; with it, bprof names the JIT functions.
#[test]
fn node_jit_frames_say_which_flag_names_them() {
    root_or_skip!();
    let _g = parallel();
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("node is not installed: skipped");
        return;
    }
    let dir = scratch("node_flag");
    let script = dir.join("fib_flag.js");
    std::fs::write(
        &script,
        "function fib(n){return n<2?n:fib(n-1)+fib(n-2)}\n\
         const end=Date.now()+2000; let s=0; while(Date.now()<end){s+=fib(22)}\n",
    )
    .unwrap();
    // node leaves /tmp/perf-PID.map behind: the one naming this script goes.
    let _maps = NodeMaps(script.clone());
    let jit_share = |flags: &[&str]| -> (f64, String) {
        let out = ok(bprof()
            .args(["--no-counts", "-f", "--", "node"])
            .args(flags)
            .arg(&script)
            .current_dir(&dir));
        let err = stderr(&out);
        let lines = parse_folded(&stdout(&out));
        let total = assert_totals(&err, &lines);
        let jit: u64 = lines
            .iter()
            .filter(|l| l.frames.last().is_some_and(|f| f == "[jit]"))
            .map(|l| l.count)
            .sum();
        (pct(jit, total), err)
    };
    let (bare, err) = jit_share(&[]);
    assert!(bare > 30.0, "{bare}% [jit] leaves: {err}");
    assert!(
        err.contains(
            "[jit] is JIT code without a perf map to name it: run node with --perf-basic-prof"
        ),
        "{err}"
    );
    assert!(err.contains("[jit] "), "{err}");
    let (named, err) = jit_share(&["--perf-basic-prof"]);
    assert!(
        named < bare / 4.0,
        "{named}% [jit] leaves with the perf map: {err}"
    );
    assert!(
        !err.contains("[jit] is JIT code without a perf map"),
        "{err}"
    );
    drop(_maps);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inlined_functions_are_frames_as_perf_shows_them() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("inlined");
    let bin = fixture("inlined");
    // perf's leaves, named as perf names inlined frames (addr2line -i).
    // The same process over the same seconds (perf 6.1 here aborts on
    // some commands it starts itself, not on -p).
    let work = Workload::start(Command::new(&bin).arg("30"));
    let pid = work.id().to_string();
    let data = dir.join("perf.data");
    let folded = dir.join("f.folded");
    let ours = bprof()
        .args(["-p", &pid, "--no-counts", "-o"])
        .arg(&folded)
        .arg("2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_guarded();
    perf_record_with(&data, &["-F", "999", "-p", &pid], &["sleep", "2"]);
    let ours = ours.wait_with_output().unwrap();
    assert!(ours.status.success(), "{}", stderr(&ours));
    // Leaves as sym+offset, made file addresses with nm.
    let script = run(Command::new("perf")
        .args(["script", "-F", "ip,sym,symoff", "-i"])
        .arg(&data));
    let nm = stdout(&run(Command::new("nm").arg(&bin)));
    let symbol = |name: &str| -> Option<u64> {
        nm.lines().find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && w[2] == name)
                .then(|| u64::from_str_radix(w[0], 16).ok())
                .flatten()
        })
    };
    let ips: Vec<String> = stdout(&script)
        .lines()
        .filter_map(|l| {
            let (sym, off) = l.split_whitespace().last()?.rsplit_once("+0x")?;
            let at = symbol(sym)? + u64::from_str_radix(off, 16).ok()?;
            Some(format!("{at:x}"))
        })
        .collect();
    assert!(
        ips.len() > 100,
        "{} perf samples: {}",
        ips.len(),
        stdout(&script)
    );
    let mut uniq: Vec<&String> = ips.iter().collect();
    uniq.sort();
    uniq.dedup();
    let a2l = run(Command::new("addr2line")
        .args(["-f", "-i", "-a", "-e"])
        .arg(&bin)
        .args(uniq.iter().map(|ip| format!("0x{ip}"))));
    // Output: 0xADDR, then (function, file:line) pairs innermost first.
    let mut innermost: HashMap<String, String> = HashMap::new();
    let text = stdout(&a2l);
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some(addr) = l.strip_prefix("0x") {
            if let Some(f) = lines.next() {
                innermost.insert(addr.trim_start_matches('0').to_string(), f.to_string());
            }
        }
    }
    let perf_mix = ips
        .iter()
        .filter(|ip| {
            innermost
                .get(ip.trim_start_matches('0'))
                .is_some_and(|f| f == "mix")
        })
        .count();
    let perf_share = pct(perf_mix as u64, ips.len() as u64);

    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    let total = assert_totals(&stderr(&ours), &lines);
    let ours: u64 = lines
        .iter()
        .filter(|l| l.frames.ends_with(&["outer".into(), "mix".into()]))
        .map(|l| l.count)
        .sum();
    let our_share = pct(ours, total_for(&lines, "fx_inlined"));
    assert!(perf_share > 90.0, "perf's leaf is mix in {perf_share:.1}%");
    assert!(
        (our_share - perf_share).abs() <= 5.0,
        "mix under outer: bprof {our_share:.1}%, perf {perf_share:.1}%"
    );
    assert!(total > 0);
    // The table's hottest function is perf's leaf.
    let out = ok(bprof().args(["--no-counts", "--"]).arg(&bin).arg("1"));
    let rows = table_rows(&stdout(&out));
    assert_eq!(rows[0].4, "mix", "{}", stdout(&out));
    // --no-inline folds them away.
    let out = ok(bprof().args(["--no-inline", "-f", "--"]).arg(&bin).arg("1"));
    let lines = parse_folded(&stdout(&out));
    assert_totals(&stderr(&out), &lines);
    assert!(lines.iter().all(|l| !l.frames.iter().any(|f| f == "mix")));
    assert!(with_frame(&lines, "fx_inlined", "outer") > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stat_counts_go_to_stderr_or_to_a_file() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("stat_stderr");
    let out = ok(bprof().args(["stat", "-e", "task-clock", "--", "sh", "-c", "echo hello"]));
    assert_eq!(
        stdout(&out),
        "hello\n",
        "the command's output alone on stdout"
    );
    let err = stderr(&out);
    assert!(
        err.contains("Performance counter stats for 'sh -c echo hello'")
            && err.contains("task-clock"),
        "{err}"
    );
    let file = dir.join("counts.txt");
    let out = ok(bprof()
        .args(["stat", "-e", "task-clock", "-o"])
        .arg(&file)
        .args(["--", "sh", "-c", "echo hello"]));
    assert_eq!(stdout(&out), "hello\n");
    let err = stderr(&out);
    assert!(!err.contains("task-clock"), "{err}");
    assert!(
        err.contains(&format!("bprof: wrote {}", file.display())),
        "{err}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("task-clock") && text.contains("seconds time elapsed"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_duration_that_stops_the_command_exits_0() {
    root_or_skip!();
    let _g = parallel();
    let out = run(bprof().args(["-f", "--no-counts", "1", "--", "sleep", "10"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "the duration passed, so bprof stopped the command, as asked (it ended with signal 15)"
        ),
        "{err}"
    );
    assert_totals(&err, &parse_folded(&stdout(&out)));
    let out = run(bprof().args(["stat", "-e", "task-clock", "1", "--", "sleep", "10"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A command that ends on its own still gives its status.
    let out = run(bprof().args(["-f", "--no-counts", "--", "sh", "-c", "exit 3"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("command exited with status 3"));
}

#[test]
fn the_progress_line_never_shares_a_line_with_the_commands_output() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("progress_line");
    let t = Tmux::new("progress");
    let folded = dir.join("f.folded");
    t.line("clear");
    t.line(&format!(
        "{} -o {} 3 -- sh -c 'for i in 1 2 3 4; do echo line$i; sleep 0.4; done; sleep 5'; echo EXIT=$?",
        env!("CARGO_BIN_EXE_bprof"),
        folded.display()
    ));
    assert_eq!(exit_status(&t), 0, "{}", t.capture());
    let screen = t.capture();
    for i in 1..=4 {
        let l = screen
            .lines()
            .find(|l| l.contains(&format!("line{i}")) && !l.contains("echo"))
            .unwrap_or_else(|| panic!("no line{i}:\n{screen}"));
        assert_eq!(l.trim(), format!("line{i}"), "{screen}");
    }
    assert!(!screen.contains("recording"), "{screen}");
    // Without a command the progress line is there.
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("60"));
    t.line("clear");
    t.line(&format!(
        "{} -p {} -o {} 3; echo EXIT=$?",
        env!("CARGO_BIN_EXE_bprof"),
        work.id(),
        folded.display()
    ));
    t.wait_for("the progress line", Duration::from_secs(60), |s| {
        s.contains("recording")
    });
    assert_eq!(exit_status(&t), 0, "{}", t.capture());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_runs_under_timeout_and_in_the_background() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("top_bg");
    let bin = fixture("work631");
    let work = Workload::start(Command::new(&bin).arg("120"));
    let pid = work.id();
    let t = Tmux::new("bg");
    let before = stty(&t, &dir.join("stty-before"));
    let top = env!("CARGO_BIN_EXE_bprof");

    // Under timeout from a script: a process group the terminal does not
    // have in the foreground. The view refreshes; keys are off.
    let err = dir.join("timeout.err");
    t.line("clear");
    t.line(&format!(
        "sh -c 'timeout 10 {top} top -p {pid} -d 1 2>{}'; echo EXIT=$?",
        err.display()
    ));
    let first = t.wait_for("a refresh with samples", Duration::from_secs(60), |s| {
        interval_total(s).is_some_and(|n| n > 0)
    });
    assert!(
        first.contains("no keys: not the terminal's foreground process"),
        "{first}"
    );
    assert!(first.contains("MODULE"), "{first}");
    let counted = since_start(&first).unwrap().0;
    let s = t.wait_for("the next refresh", Duration::from_secs(20), |s| {
        since_start(s).is_some_and(|c| c.0 > counted)
    });
    assert!(
        function_modules(&s)
            .iter()
            .any(|r| r.5 == "heavy" && r.4 == "fx_work631"),
        "{s}"
    );
    assert_eq!(
        exit_status(&t),
        124,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    check_final_totals(&err);
    assert!(!t.alternate_on(), "alternate screen left on");
    assert_eq!(
        stty(&t, &dir.join("stty-timeout")),
        before,
        "terminal modes"
    );

    // In the background (`&`), then brought to the foreground: keys work.
    let err = dir.join("bg.err");
    t.line("clear");
    t.line(&format!("{top} top -p {pid} -d 1 2>{} &", err.display()));
    let s = t.wait_for(
        "a refresh in the background",
        Duration::from_secs(60),
        |s| interval_total(s).is_some_and(|n| n > 0),
    );
    assert!(s.contains("no keys"), "{s}");
    t.line("fg");
    t.wait_for(
        "keys, once in the foreground",
        Duration::from_secs(20),
        |s| s.contains("q quit"),
    );
    t.keys(&["q"]);
    // Typed once the shell has the terminal again, not into the view.
    let deadline = Instant::now() + Duration::from_secs(30);
    while t.alternate_on() {
        assert!(Instant::now() < deadline, "bprof top never left");
        std::thread::sleep(Duration::from_millis(100));
    }
    t.line("echo EXIT=$?");
    assert_eq!(
        exit_status(&t),
        0,
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    check_final_totals(&err);
    assert!(!t.alternate_on(), "alternate screen left on");
    assert_eq!(stty(&t, &dir.join("stty-bg")), before, "terminal modes");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example command lines of the README: every indented line that
/// starts with `bprof ` (or `$ bprof `), without the synopsis lines, each
/// with its comment cut off.
fn readme_examples() -> Vec<String> {
    let readme = include_str!("../../README.md");
    readme
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .map(|l| l.trim_start_matches("$ "))
        .filter(|l| l.starts_with("bprof ") && !l.contains("[OPTIONS]") && !l.contains("[-e "))
        .filter(|l| !l.starts_with("bprof top [") && !l.starts_with("bprof stat ["))
        .map(|l| match l.find("   ") {
            Some(at) => l[..at].trim_end().to_string(),
            None => l.trim_end().to_string(),
        })
        .collect()
}

/// Every README example, run as written in a fresh directory that holds
/// `./my-program`, `./prog` and `app.py`; `PID` (and the example's 1234) name a
/// running fixture. One that runs until Ctrl-C gets SIGINT after 10 s.
/// The examples run three at a time (each has its own directory, target and
/// tmux session); the OTLP ones one after another in a lane of their own,
/// as each is checked by what the receivers got while it ran.
#[test]
fn readme_examples_run_as_written() {
    root_or_skip!();
    let _g = parallel();
    let examples = readme_examples();
    assert!(examples.len() >= 12, "{examples:?}");
    let dir = scratch("readme");
    std::fs::copy(fixture("work631"), dir.join("my-program")).unwrap();
    std::fs::copy(fixture("spinsleep"), dir.join("prog")).unwrap();
    // The fleet examples' collector: the OTLP tests' receivers on this
    // machine (gRPC, and OTLP/HTTP without TLS, which otlp.rs tests).
    let grpc = crate::otlp::Receiver::start("grpc", 0);
    let http = crate::otlp::Receiver::start("http", 0);
    let (otlp, rest): (Vec<_>, Vec<_>) = examples
        .iter()
        .enumerate()
        .partition(|(_, e)| e.contains("--otlp"));
    let queue = std::sync::Mutex::new(rest);
    let failures = std::sync::Mutex::new(Vec::new());
    let run = |i: usize, example: &str| {
        if let Err(e) = run_example(&dir, i, example, &grpc, &http) {
            failures.lock().unwrap().push(e);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for (i, example) in &otlp {
                run(*i, example);
            }
        });
        for _ in 0..3 {
            s.spawn(|| loop {
                let next = queue.lock().unwrap().pop();
                let Some((i, example)) = next else { break };
                run(i, example);
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "README examples failed:\n{}",
        failures.join("\n")
    );
}

/// Runs README example `i` in its own directory under `dir`, against a
/// fresh target; `Err` says what went wrong.
fn run_example(
    dir: &Path,
    i: usize,
    example: &str,
    grpc: &crate::otlp::Receiver,
    http: &crate::otlp::Receiver,
) -> Result<(), String> {
    // It spins and blocks: on-CPU and off-CPU examples both have samples.
    // A fresh target for each: examples that end with their target do.
    let work = Workload::start(Command::new(fixture("spinsleep")).arg("6"));
    let pid = work.id().to_string();
    let line = example
        .replace("PID", &pid)
        .replace("1234", &pid)
        .replace(
            "http://collector:4317",
            &format!("http://127.0.0.1:{}", grpc.port),
        )
        .replace(
            "http://127.0.0.1:4317",
            &format!("http://127.0.0.1:{}", grpc.port),
        )
        .replace(
            "https://collector:4318",
            &format!("http://127.0.0.1:{}", http.port),
        );
    let received = grpc.requests().len() + http.requests().len();
    let cwd = dir.join(format!("ex{i}"));
    std::fs::create_dir_all(&cwd).unwrap();
    for f in ["my-program", "prog"] {
        std::fs::copy(dir.join(f), cwd.join(f)).unwrap();
    }
    // The Python example's app.py: the 6:3:1 work, 2 s.
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/py631.py"),
        cwd.join("app.py"),
    )
    .unwrap();
    let script = line.replacen("bprof ", &format!("{} ", env!("CARGO_BIN_EXE_bprof")), 1);
    // Without a duration or a target that ends, an example runs until
    // Ctrl-C: it gets SIGINT once it has surely begun recording.
    let ends = line.contains("-p ")
        || line.contains(" -- ")
        || line.starts_with("bprof --filter 'tid ===")
        || line
            .split_whitespace()
            .last()
            .is_some_and(|w| w.parse::<f64>().is_ok());
    let (code, text) = if line.starts_with("bprof top") {
        run_in_tmux(&cwd, &script, i)
    } else {
        run_shell(&cwd, &script, (!ends).then_some(Duration::from_secs(10)))
    };
    // The README shows one refused on purpose.
    let want = if line.contains("tid ===") { 2 } else { 0 };
    if code != Some(want) {
        return Err(format!("{line}: exit {code:?}, not {want}: {text}"));
    }
    check_example(&line, &cwd, &text).map_err(|e| format!("{line}: {e}"))?;
    if line.contains("--otlp") {
        // The receiver prints what it decoded a moment after the answer.
        let deadline = Instant::now() + Duration::from_secs(10);
        while grpc.requests().len() + http.requests().len() == received && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        if grpc.requests().len() + http.requests().len() == received {
            return Err(format!("{line}: the receiver got nothing: {text}"));
        }
    }
    drop(work);
    Ok(())
}

/// Runs `script` with sh in `cwd`; SIGINT after `interrupt_after` (the
/// examples that run until Ctrl-C). Returns its exit code and its stdout
/// and stderr.
fn run_shell(cwd: &Path, script: &str, interrupt_after: Option<Duration>) -> (Option<i32>, String) {
    let (out, err) = (cwd.join("ex.out"), cwd.join("ex.err"));
    let mut child = Command::new("sh")
        .args(["-c", &format!("exec {script}")])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn_guarded();
    let t = Instant::now();
    let mut interrupted = false;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if !interrupted && interrupt_after.is_some_and(|d| t.elapsed() >= d) {
            interrupt(child.id());
            interrupted = true;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "{script} never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default()
        + &std::fs::read_to_string(&err).unwrap_or_default();
    (status.code(), text)
}

/// Runs `script` in a tmux pane in `cwd`, quits it with `q` after its first
/// refresh with samples; returns its exit code and the screen and stderr.
fn run_in_tmux(cwd: &Path, script: &str, n: usize) -> (Option<i32>, String) {
    let t = Tmux::new(&format!("readme{n}"));
    t.line(&format!("cd {}", cwd.display()));
    t.line(&format!("{script} 2>top.err; echo EXIT=$?"));
    let screen = t.wait_for("a refresh", Duration::from_secs(60), |s| {
        interval_total(s).is_some_and(|n| n > 0)
    });
    t.keys(&["q"]);
    let code = exit_status(&t);
    let err = std::fs::read_to_string(cwd.join("top.err")).unwrap_or_default();
    (Some(code), format!("{screen}{err}"))
}

/// What an example should have made: its files, its output.
fn check_example(line: &str, cwd: &Path, text: &str) -> Result<(), String> {
    let file = |name: &str| -> Result<PathBuf, String> {
        let p = cwd.join(name);
        match std::fs::metadata(&p) {
            Ok(m) if m.len() > 0 => Ok(p),
            _ => Err(format!("no {name}: {text}")),
        }
    };
    if line.contains("> out.folded") {
        let lines = parse_folded(&std::fs::read_to_string(file("out.folded")?).unwrap());
        if lines.is_empty() {
            return Err("empty out.folded".into());
        }
    }
    for svg in ["flame.svg", "off.svg", "wall.svg"] {
        if line.contains(svg) {
            let t = std::fs::read_to_string(file(svg)?).unwrap();
            if !t.contains("</svg>") {
                return Err(format!("{svg} is not whole"));
            }
        }
    }
    if line.contains("cpu.pb.gz") {
        file("cpu.pb.gz")?;
    }
    if line.contains("'out/") {
        let n = std::fs::read_dir(cwd.join("out")).map_or(0, |d| d.count());
        if n == 0 {
            return Err(format!("nothing in out/: {text}"));
        }
    }
    if line.contains("tid ===") && !text.contains("invalid filter 'tid === 3'") {
        return Err(text.to_string());
    }
    // The default answer: the table of functions.
    if !line.contains(" -f")
        && !line.contains("--svg")
        && !line.contains("--pprof")
        && !line.contains(" -o ")
        && !line.contains("--otlp")
        && !line.starts_with("bprof stat")
        && !line.starts_with("bprof top")
        && !line.contains("tid ===")
        && !text.contains("SELF%  TOTAL%")
    {
        return Err(format!("no table: {text}"));
    }
    Ok(())
}

/// A `perf record` taken while bprof profiles the whole machine reads back
/// whole. bprof's side band does not ask for build IDs in mmap records:
/// on 6.18 that marks other sessions' records as carrying them over their
/// device and inode, and perf 6.1's `perf script` aborts on such a
/// recording. Both see the same work631 run, in the same shares.
#[test]
fn a_perf_record_beside_bprof_reads_back_whole() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("beside_perf");
    let bin = fixture("work631");
    let folded = dir.join("bprof.folded");
    let bprof_run = bprof()
        .args(["-a", "-F", "99", "-f", "-o"])
        .arg(&folded)
        .arg("5")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bprof");
    // Its side band open before perf starts.
    std::thread::sleep(Duration::from_millis(1500));
    let data = dir.join("perf.data");
    // perf's defaults otherwise (build IDs collected at the end); no BPF
    // events: perf aborts reading some loaded programs' info.
    let rec = Command::new("perf")
        .args(["record", "-q", "--no-bpf-event", "-g", "-F", "999", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg("1")
        .output()
        .expect("perf record");
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let out = bprof_run.wait_with_output().expect("bprof");
    assert!(out.status.success(), "{}", stderr(&out));
    let script = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .output()
        .expect("perf script");
    let text = String::from_utf8_lossy(&script.stdout);
    assert!(
        script.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&script.stderr)
    );
    let perf_heavy = text.split("\n\n").filter(|s| s.contains("heavy")).count();
    let perf_total = text
        .split("\n\n")
        .filter(|s| s.contains("fx_work631"))
        .count();
    assert!(perf_total > 300, "{perf_total} perf samples of work631");
    let lines = parse_folded(&std::fs::read_to_string(&folded).expect("bprof's output"));
    let mine: Vec<_> = lines
        .iter()
        .filter(|l| l.frames[0] == "fx_work631")
        .collect();
    let total: u64 = mine.iter().map(|l| l.count).sum();
    let heavy: u64 = mine
        .iter()
        .filter(|l| l.frames.iter().any(|f| f == "heavy"))
        .map(|l| l.count)
        .sum();
    assert!(total > 30, "{total} bprof samples of work631");
    let (p, b) = (pct(perf_heavy as u64, perf_total as u64), pct(heavy, total));
    assert!((p - b).abs() < 15.0, "heavy: perf {p:.1}%, bprof {b:.1}%");
    let _ = std::fs::remove_dir_all(&dir);
}
