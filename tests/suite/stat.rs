//! `bprof stat`: counting through shared per-CPU counters (run as root).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::*;

const PIN_DIR: &str = "/sys/fs/bpf/bprof-stat";

/// Parses `-x ,` output: event name → (value, unit); `None` for <not supported>.
fn csv(out: &Output) -> Vec<(String, Option<f64>)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert!(f.len() >= 7, "short CSV line {l:?}");
            (f[2].to_string(), f[0].parse().ok())
        })
        .collect()
}

fn value(rows: &[(String, Option<f64>)], event: &str) -> f64 {
    rows.iter()
        .find(|(e, _)| e == event)
        .and_then(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {event} in {rows:?}"))
}

fn stat(args: &[&str]) -> Output {
    let out = run(bprof().arg("stat").args(args));
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn perf_csv(args: &[&str]) -> Vec<(String, Option<f64>)> {
    let out = run(Command::new("perf").args(["stat", "-x", ","]).args(args));
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.len() >= 3).then(|| (f[2].to_string(), f[0].parse().ok()))
        })
        .collect()
}

fn within(a: f64, b: f64, pct: f64) -> bool {
    (a - b).abs() <= b.abs() * pct / 100.0
}

/// task-clock (ms) that `bprof stat` counts for one run of `bin ARGS`.
fn task_clock_of(bin: &Path, args: &[&str]) -> f64 {
    let mut a = vec!["-x", ",", "-e", "task-clock", "--", bin.to_str().unwrap()];
    a.extend(args);
    value(&csv(&stat(&a)), "task-clock")
}

/// BPF_MAP_TYPE_PERF_EVENT_ARRAY.
const PERF_EVENT_ARRAY: u32 = 4;

/// Ids of the BPF maps of this type that process `pid` holds an fd of.
fn bpf_maps_of(pid: u32, map_type: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.trim().parse::<u32>().ok())
            };
            (field("map_type:")? == map_type).then(|| field("map_id:"))?
        })
        .collect()
}

fn nothing_pinned() -> bool {
    !Path::new(PIN_DIR).exists()
}

#[test]
fn software_counts_agree_with_perf_stat() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("spinsleep");
    let ev = "task-clock,context-switches,page-faults";
    let ours = csv(&stat(&[
        "-x",
        ",",
        "-e",
        ev,
        "--",
        bin.to_str().unwrap(),
        "1",
    ]));
    let perf = perf_csv(&["-e", ev, "--", bin.to_str().unwrap(), "1"]);
    assert!(
        within(value(&ours, "task-clock"), value(&perf, "task-clock"), 10.0),
        "{ours:?} vs {perf:?}"
    );
    assert!(
        within(
            value(&ours, "page-faults"),
            value(&perf, "page-faults"),
            20.0
        ),
        "{ours:?} vs {perf:?}"
    );
    // ~100 sleeps: about 100 switches either way.
    assert!(
        within(
            value(&ours, "context-switches"),
            value(&perf, "context-switches"),
            30.0
        ),
        "{ours:?} vs {perf:?}"
    );
    assert!(nothing_pinned());
}

/// perf stat counts a command from its exec (enable_on_exec); so must we:
/// the fork that runs it first executes bprof's code (glibc's post-fork
/// handlers, the wait for the go signal), whose page faults are not the
/// command's. /bin/true faults ~50 times, so those few extra stand out;
/// medians of several runs hide the odd outlier either way.
#[test]
fn a_command_is_counted_from_its_exec() {
    root_or_skip!();
    let _g = exclusive();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let args = ["-e", "page-faults", "--", "/bin/true"];
    let ours = median(
        (0..7)
            .map(|_| {
                value(
                    &csv(&stat(&[&["-x", ","][..], &args[..]].concat())),
                    "page-faults",
                )
            })
            .collect(),
    );
    let perf = median(
        (0..7)
            .map(|_| value(&perf_csv(&args), "page-faults"))
            .collect(),
    );
    assert!(
        (ours - perf).abs() <= 2.0,
        "page faults: bprof {ours}, perf {perf}"
    );
    assert!(nothing_pinned());
}

#[test]
fn instructions_of_a_known_loop() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("insns");
    let out = stat(&[
        "-x",
        ",",
        "-e",
        "instructions:u",
        "--",
        bin.to_str().unwrap(),
        "50000000",
    ]);
    let rows = csv(&out);
    let perf = perf_csv(&[
        "-e",
        "instructions:u",
        "--",
        bin.to_str().unwrap(),
        "50000000",
    ]);
    match perf
        .iter()
        .find(|(e, _)| e == "instructions:u")
        .and_then(|(_, v)| *v)
    {
        Some(p) => {
            let ours = value(&rows, "instructions:u");
            assert!(ours >= 100_000_000.0, "{ours}");
            assert!(within(ours, p, 0.5), "bprof {ours} vs perf {p}");
        }
        None => {
            // No PMU on this machine: bprof must say so, not invent a count.
            assert_eq!(rows[0], ("instructions:u".to_string(), None), "{rows:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("cannot count instructions:u (no hardware PMU here)"),
                "{stderr}"
            );
            assert!(String::from_utf8_lossy(&out.stdout)
                .starts_with("<not supported>,,instructions:u,"));
        }
    }
}

#[test]
// Long on purpose: ten sessions started, checked while sharing, then each one's counts checked.
fn ten_sessions_share_one_set_of_counters_and_stay_exact() {
    root_or_skip!();
    let _g = exclusive();
    assert!(nothing_pinned());
    let children: Vec<_> = (0..10)
        .map(|_| {
            bprof()
                .args([
                    "stat",
                    "-v",
                    "-x",
                    ",",
                    "-e",
                    "task-clock,context-switches",
                    "-a",
                    "2",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn_guarded()
        })
        .collect();
    // Ready when every session holds the shared array: read from the
    // sessions' own fds, not from every map on the machine.
    let arrays = |pid: u32| -> Vec<u32> { bpf_maps_of(pid, PERF_EVENT_ARRAY) };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while children.iter().any(|c| arrays(c.id()).is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "sessions never attached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // One shared array of perf events, whatever the number of sessions, and
    // no session holds a perf event fd of its own.
    let mut ids: Vec<u32> = children.iter().flat_map(|c| arrays(c.id())).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        1,
        "perf event arrays held by the sessions: {ids:?}"
    );
    let perf_fds = children
        .iter()
        .map(|c| {
            std::fs::read_dir(format!("/proc/{}/fd", c.id()))
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy().contains("perf_event"))
                .count()
        })
        .sum::<usize>();
    assert_eq!(perf_fds, 0);
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let ncpus = online
        .trim()
        .split(',')
        .map(|r| {
            r.split_once('-').map_or(1, |(a, b)| {
                b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1
            })
        })
        .sum::<usize>();
    let mut created = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("(2 slots opened by this session, 0 reused)") {
            created += 1;
        }
        // Every session sees all CPUs busy or idle for its 2 s: exact time.
        let ms = value(&csv(&out), "task-clock");
        assert!(
            within(ms, 2000.0 * ncpus as f64, 3.0),
            "{ms} ms over {ncpus} CPUs\n{stderr}"
        );
    }
    assert_eq!(created, 1, "exactly one session opens the counters");
    assert!(nothing_pinned(), "the last session must remove the pins");
}

#[test]
fn counts_with_and_without_sharing_agree() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("work631");
    let alone = task_clock_of(&bin, &["1"]);
    let ready = ready_path();
    let mut other = bprof()
        .args(["stat", "-e", "task-clock", "-a", "5", "--ready-file"])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn_guarded();
    wait_ready(&ready, &mut other);
    let shared = task_clock_of(&bin, &["1"]);
    interrupt(other.id());
    let _ = other.wait();
    assert!(
        within(shared, alone, 5.0),
        "alone {alone} ms, shared {shared} ms"
    );
    assert!(within(alone, 1000.0, 10.0), "{alone}");
}

#[test]
// Long on purpose: the three scopes (-p, --, -C) one after another, each a few lines of setup and checks.
fn pid_children_and_cpu_scopes() {
    root_or_skip!();
    let _g = exclusive();
    // -p: a live process that spins half of the time.
    let s = Workload::start(Command::new(fixture("spinsleep")).arg("4"));
    let ms = value(
        &csv(&stat(&[
            "-x",
            ",",
            "-e",
            "task-clock",
            "-p",
            &s.id().to_string(),
            "1",
        ])),
        "task-clock",
    );
    drop(s);
    assert!(within(ms, 500.0, 20.0), "{ms}");

    // --: the command's children count too, and its status is returned.
    let forker = fixture("forker");
    let ms = value(
        &csv(&stat(&[
            "-x",
            ",",
            "-e",
            "task-clock",
            "--",
            forker.to_str().unwrap(),
            "1",
        ])),
        "task-clock",
    );
    assert!(
        within(ms, 1000.0, 15.0),
        "child_work's second is missing: {ms}"
    );
    let out = run(bprof().args(["stat", "-e", "task-clock", "--", "sh", "-c", "exit 3"]));
    assert_eq!(out.status.code(), Some(3));

    // -C: a process pinned to CPU 1 has no time on CPU 0.
    let w = Workload::start(
        Command::new("taskset")
            .args(["-c", "1"])
            .arg(fixture("work631"))
            .arg("4"),
    );
    let pid = w.id().to_string();
    let on1 = value(
        &csv(&stat(&[
            "-x",
            ",",
            "-e",
            "task-clock",
            "-C",
            "1",
            "-p",
            &pid,
            "1",
        ])),
        "task-clock",
    );
    let on0 = value(
        &csv(&stat(&[
            "-x",
            ",",
            "-e",
            "task-clock",
            "-C",
            "0",
            "-p",
            &pid,
            "1",
        ])),
        "task-clock",
    );
    drop(w);
    assert!(within(on1, 1000.0, 10.0), "{on1}");
    assert!(on0 < 20.0, "{on0}");
}

/// `-a -- COMMAND` counts every CPU for as long as the command runs (what
/// `perf stat -a -- sleep N` users expect), and says so in the header.
#[test]
fn system_wide_while_a_command_runs() {
    root_or_skip!();
    let _g = exclusive();
    let out = stat(&["-x", ",", "-e", "task-clock", "-a", "--", "sleep", "0.5"]);
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let f: Vec<&str> = line.trim().split(',').collect();
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    let utilized: f64 = f[5].parse().unwrap();
    assert!((utilized - cpus).abs() < 0.1 * cpus, "{line}");
    let ms: f64 = f[0].parse().unwrap();
    assert!((500.0 * cpus..700.0 * cpus).contains(&ms), "{line}");
    let human = stat(&["-e", "task-clock", "-a", "--", "true"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("stats for 'system wide'"), "{text}");
    let bad = run(bprof().args(["stat", "-p", "1", "--", "true"]));
    assert_one_line_error(&bad);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn for_each_cgroup() {
    root_or_skip!();
    let _g = exclusive();
    let root = cgroup2_root();
    let busy = format!("bprof-stat-busy-{}", std::process::id());
    let idle = format!("bprof-stat-idle-{}", std::process::id());
    let child = format!("{busy}/inner");
    for d in [&busy, &idle, &child] {
        std::fs::create_dir_all(Path::new(&root).join(d)).unwrap();
    }
    let w = Workload::start(Command::new(fixture("work631")).arg("4"));
    std::fs::write(
        Path::new(&root).join(&child).join("cgroup.procs"),
        w.id().to_string(),
    )
    .unwrap();
    let groups = format!("/{busy},/{idle}");
    // The process's own CPU time around the count (bprof's start-up and exit
    // included): the busy cgroup's count can only be less.
    let ran_ms = || -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{}/schedstat", w.id())).unwrap();
        s.split(' ').next().unwrap().parse::<f64>().unwrap() / 1e6
    };
    let before = ran_ms();
    let out = stat(&[
        "-x",
        ",",
        "-e",
        "task-clock",
        "--for-each-cgroup",
        &groups,
        "1",
    ]);
    let ran = ran_ms() - before;
    drop(w);
    for d in [&child, &busy, &idle] {
        let _ = std::fs::remove_dir(Path::new(&root).join(d));
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let ms_of = |cg: &str| -> f64 {
        text.lines()
            .find(|l| l.split(',').nth(3) == Some(cg))
            .and_then(|l| l.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no line for {cg} in {text}"))
    };
    // Hierarchical: the process is in a child of the busy cgroup, and it is
    // the only one there. It ran `ran` ms in all, of which about a second
    // (less steal and other load) inside the counting window.
    let busy_ms = ms_of(&format!("/{busy}"));
    assert!(
        busy_ms <= ran * 1.02,
        "busy {busy_ms} ms > {ran} ms run\n{text}"
    );
    assert!(
        busy_ms >= ran.min(1000.0) * 0.6,
        "busy {busy_ms} of {ran} ms\n{text}"
    );
    assert!(ms_of(&format!("/{idle}")) < 5.0, "{text}");
}

#[test]
fn interval_output_is_monotonic() {
    root_or_skip!();
    let _g = exclusive();
    let out = stat(&[
        "-x",
        ",",
        "-I",
        "200",
        "-e",
        "task-clock,context-switches",
        "-a",
        "1.1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let stamps: Vec<f64> = text
        .lines()
        .filter(|l| l.split(',').nth(3) == Some("task-clock"))
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(stamps.len() >= 5, "{text}");
    assert!(stamps.windows(2).all(|w| w[1] > w[0]), "{stamps:?}");
    // Each full interval holds ~200 ms per CPU of task-clock.
    let first: f64 = text
        .lines()
        .next()
        .unwrap()
        .split(',')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(first > 100.0, "{text}");
}

#[test]
fn human_and_json_output() {
    root_or_skip!();
    let _g = exclusive();
    let out = stat(&["-e", "task-clock,context-switches,cycles", "-a", "0.5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Performance counter stats for 'system wide':"),
        "{text}"
    );
    assert!(text.contains("msec task-clock"), "{text}");
    assert!(text.contains("CPUs utilized"), "{text}");
    assert!(text.contains("seconds time elapsed"), "{text}");
    let out = stat(&["-j", "-e", "task-clock", "-a", "0.3"]);
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(
        line.starts_with("{\"counter-value\" : \"") && line.contains("\"event\" : \"task-clock\""),
        "{line}"
    );
}

#[test]
fn stale_pins_of_a_crashed_session_are_replaced() {
    root_or_skip!();
    let _g = exclusive();
    let ready = ready_path();
    let mut crashed = bprof()
        .args(["stat", "-e", "task-clock", "-a", "30", "--ready-file"])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn_guarded();
    wait_ready(&ready, &mut crashed);
    // SIGKILL: a crash, which cannot clean up.
    let _ = (crashed.kill(), crashed.wait());
    assert!(
        Path::new(PIN_DIR).exists(),
        "a killed session cannot clean up"
    );
    let out = stat(&["-v", "-x", ",", "-e", "task-clock", "-a", "0.5"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("(1 slots opened by this session, 0 reused)")
    );
    assert!(within(value(&csv(&out), "task-clock"), 1000.0, 10.0));
    assert!(nothing_pinned());
}

#[test]
fn bad_stat_input() {
    let _g = exclusive();
    for (args, want) in [
        (&["stat", "-e", "bogus", "1"][..], "unknown event 'bogus'"),
        (&["stat", "-e", "", "1"][..], "empty event list"),
        (
            &["stat", "-e", "cycles,,instructions", "1"][..],
            "empty event name",
        ),
        (&["stat", "-e", "cycles:x", "1"][..], "invalid modifier"),
        (&["stat", "-C", "0-x", "1"][..], "invalid CPU list"),
        (
            &["stat", "-p", "4000000", "1"][..],
            "no such process: 4000000",
        ),
        (&["stat", "-I", "5", "1"][..], "at least 10 ms"),
        (&["stat", "-a", "-p", "1", "1"][..], "choose one of"),
        (
            &["stat", "--for-each-cgroup", "/no-such-bprof-cg", "1"][..],
            "no such cgroup",
        ),
    ] {
        let out = run(bprof().args(args));
        let line = assert_one_line_error(&out);
        assert!(line.contains(want), "{args:?}: {line}");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

// --- hostile: a local user plays against root's `bprof stat` -------------

/// `cmd` as user nobody.
fn as_nobody(cmd: &str) -> Output {
    run(Command::new("setpriv").args([
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "sh",
        "-c",
        cmd,
    ]))
}

/// A short `bprof stat` under an outer SIGKILL timeout, so a hang fails.
fn bounded_stat(args: &[&str]) -> Output {
    run(Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .arg("stat")
        .args(args))
}

#[test]
fn hostile_lock_paths_are_not_followed_and_a_held_lock_is_bounded() {
    root_or_skip!();
    let _g = exclusive();
    // Where the lock used to live: a symlink planted there must not make root
    // truncate its target (the lock now lives in root's own 0700 directory).
    let dir = scratch("hostile_lock");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let old = "/run/lock/bprof_sys_fs_bpf_bprof_stat.lock";
    let _ = std::fs::remove_file(old);
    if Path::new("/run/lock").is_dir() {
        std::os::unix::fs::symlink(&victim, old).unwrap();
    }
    let out = bounded_stat(&["-x", ",", "-e", "task-clock", "-a", "0.2"]);
    let _ = std::fs::remove_file(old);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let state = std::fs::symlink_metadata("/run/bprof").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert!(state.is_dir() && state.uid() == 0 && state.mode() & 0o777 == 0o700);

    // A process that holds the lock forever: bprof gives up, names it.
    let lock = "/run/bprof/lock_sys_fs_bpf_bprof_stat";
    // This test process holds it, as a stuck or hostile holder would.
    let held = std::fs::File::open(lock).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd this test owns.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let t = std::time::Instant::now();
    let out = bounded_stat(&["-e", "task-clock", "-a", "0.2"]);
    let waited = t.elapsed();
    drop(held);
    let line = assert_one_line_error(&out);
    assert!(
        line.contains("lock") && line.contains("giving up"),
        "{line}"
    );
    assert!(
        line.contains(&format!("process {}", std::process::id())),
        "names the holder: {line}"
    );
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    assert!(nothing_pinned());
}

#[test]
fn hostile_pin_dir_made_by_another_user_is_refused() {
    root_or_skip!();
    let _g = exclusive();
    assert!(nothing_pinned());
    use std::os::unix::fs::MetadataExt;
    // /sys/fs/bpf is world-writable (1777): nobody pre-creates the pin dir.
    let made = as_nobody(&format!("mkdir -m 777 {PIN_DIR}"));
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let out = bounded_stat(&["-e", "task-clock", "-a", "0.2"]);
    let owner = std::fs::symlink_metadata(PIN_DIR).map(|m| m.uid()).ok();
    let entries = std::fs::read_dir(PIN_DIR).map(|d| d.count()).ok();
    let _ = std::fs::remove_dir(PIN_DIR);
    let line = assert_one_line_error(&out);
    assert!(
        line.contains(PIN_DIR) && line.contains("refusing"),
        "{line}"
    );
    // Their directory is left as it was: not removed, nothing pinned in it.
    assert_eq!((owner, entries), (Some(65534), Some(0)));

    // A symlink to a directory of theirs: refused too.
    let made = as_nobody(&format!(
        "mkdir -p /tmp/bprof-hostile-pins && ln -s /tmp/bprof-hostile-pins {PIN_DIR}"
    ));
    let out = bounded_stat(&["-e", "task-clock", "-a", "0.2"]);
    let _ = std::fs::remove_file(PIN_DIR);
    let _ = std::fs::remove_dir_all("/tmp/bprof-hostile-pins");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let line = assert_one_line_error(&out);
    assert!(line.contains("not a real directory"), "{line}");
}

#[test]
fn hostile_a_session_in_a_pid_namespace_keeps_the_host_sessions_pins() {
    root_or_skip!();
    let _g = exclusive();
    let ready = ready_path();
    let mut host = bprof()
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            "task-clock",
            "-a",
            "30",
            "--ready-file",
        ])
        .arg(&ready)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut host);
    // Inside a new PID namespace the host session's pid means nothing.
    let inner = run(Command::new("timeout")
        .args(["-s", "KILL", "60", "unshare", "-p", "-f", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(["stat", "-x", ",", "-e", "task-clock", "-a", "0.3"]));
    assert!(
        inner.status.success(),
        "{}",
        String::from_utf8_lossy(&inner.stderr)
    );
    let pins_left = Path::new(&format!("{PIN_DIR}/events")).exists();
    interrupt(host.id());
    let out = host.wait_with_output().unwrap();
    assert!(
        pins_left,
        "the namespaced session removed the live host session's pins"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(value(&csv(&out), "task-clock") > 0.0);
    assert!(nothing_pinned());
}

#[test]
fn hostile_modes_do_not_depend_on_the_umask() {
    root_or_skip!();
    let _g = exclusive();
    use std::os::unix::fs::MetadataExt;
    let ready = ready_path();
    let mut s = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 000; exec {} stat -e task-clock -a 30 --ready-file {}",
            env!("CARGO_BIN_EXE_bprof"),
            ready.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn_guarded();
    wait_ready(&ready, &mut s);
    let mode = |p: &str| std::fs::symlink_metadata(p).unwrap().mode() & 0o777;
    let (dir, state, pin) = (
        mode(PIN_DIR),
        mode("/run/bprof"),
        mode(&format!("{PIN_DIR}/events")),
    );
    interrupt(s.id());
    let _ = s.wait();
    assert_eq!((dir, state), (0o700, 0o700));
    assert_eq!(pin & 0o077, 0, "pin mode {pin:o}");
    assert!(nothing_pinned());
}
