//! The profile program's fallbacks for features older kernels lack, forced
//! on with `BPROF_FALLBACK` on this kernel, which has them all: each
//! profiles one process beside the normal path, on the same run, and the
//! two must agree.

use std::process::{Command, Stdio};

use crate::common::*;

/// One profile's output: folded lines and stderr.
struct Run {
    lines: Vec<Folded>,
    stderr: String,
}

impl Run {
    /// The share (percent) of the samples under `f`.
    fn share(&self, f: &str) -> f64 {
        pct(
            with_frame(&self.lines, "fx_spinsleep", f),
            total_for(&self.lines, "fx_spinsleep"),
        )
    }

    /// The number before `suffix` in the `-v` line on stored stacks.
    fn stored(&self, suffix: &str) -> u64 {
        let line = self
            .stderr
            .lines()
            .find(|l| l.contains(" user stacks stored"))
            .unwrap_or_else(|| panic!("no stored-stacks line: {}", self.stderr));
        number_before(line, suffix)
    }

    /// The hottest stack that sleeps in sleep_phase.
    fn hottest_sleep(&self) -> &[String] {
        &self
            .lines
            .iter()
            .filter(|l| l.frames.iter().any(|f| f == "sleep_phase"))
            .max_by_key(|l| l.count)
            .unwrap_or_else(|| panic!("no stack under sleep_phase: {:?}", self.lines))
            .frames
    }
}

/// `bprof ARGS -v -f` twice at once, with `BPROF_FALLBACK=fallback` and
/// without: both checked (success, totals add up, nothing lost or left
/// unresolved, and only the forced one says it took a fallback).
fn with_and_without(fallback: &str, args: &[&str]) -> [Run; 2] {
    let dir = scratch(&format!("fallback-{fallback}"));
    let json = |forced: bool| dir.join(format!("{forced}.json"));
    let start = |forced: bool| {
        let mut cmd = bprof();
        cmd.args(["-v", "-f", "--stats-json"])
            .arg(json(forced))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if forced {
            cmd.env("BPROF_FALLBACK", fallback);
        }
        cmd.spawn_guarded()
    };
    let runs = [(true, start(true)), (false, start(false))];
    let runs = runs.map(|(forced, child)| {
        let out = child.wait_with_output().expect("wait for bprof");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{fallback}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        // What the output holds is what the kernel counted (samples, or
        // microseconds of wall time), and nothing was lost.
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(json(forced)).expect("--stats-json"))
                .expect("stats JSON");
        let n = |key: &str| stats["samples"][key].as_u64().expect(key);
        assert_eq!(n("lost"), 0, "{stderr}");
        let total: u64 = lines.iter().map(|l| l.count).sum();
        assert_eq!(total, n("counted_weight"), "{stderr}");
        assert!(stderr.contains("; 0 unresolved"), "{stderr}");
        // Two sessions share sched_switch: neither shows its frames.
        for l in lines
            .iter()
            .filter(|l| l.frames.last().is_some_and(|f| f == "[off-cpu]"))
        {
            assert!(
                !l.frames
                    .iter()
                    .any(|f| f.contains("bpf_") || f.contains("__traceiter_")),
                "{l:?}"
            );
        }
        Run { lines, stderr }
    });
    let _ = std::fs::remove_dir_all(&dir);
    runs
}

/// A wall-clock profile (on-CPU samples and off-CPU switches, kernel and
/// user stacks, the skip measured at start) of spinsleep, half spinning
/// and half asleep, with `fallback` forced and without, each with `args`.
fn spinsleep_agrees_under(fallback: &str, said: &str, args: &[&str]) {
    let work = Workload::start(Command::new(fixture("spinsleep")).arg("60"));
    let pid = work.id().to_string();
    let args = [args, &["--wall", "-p", &pid, "2"]].concat();
    let [forced, normal] = with_and_without(fallback, &args);
    drop(work);
    assert!(forced.stderr.contains(said), "{}", forced.stderr);
    assert!(!normal.stderr.contains("fallbacks:"), "{}", normal.stderr);
    for run in [&forced, &normal] {
        // Two seconds of one thread's wall time, in microseconds.
        let total = total_for(&run.lines, "fx_spinsleep");
        assert!(total > 1_500_000, "{total} us\n{}", run.stderr);
        let sleep = run.share("sleep_phase");
        assert!(
            (25.0..=75.0).contains(&sleep),
            "{sleep:.1}% asleep: {}",
            run.stderr
        );
        assert!(run.stored(" kernel and ") > 0, "{}", run.stderr);
        assert!(run.stored(" user stacks stored") > 0, "{}", run.stderr);
    }
    // The two windows differ by start-up (what else ran beside them, which
    // --wall counts as waiting to run): a few points, not a broken path's
    // tens.
    for f in ["sleep_phase", "spin_phase", "main"] {
        let (a, b) = (forced.share(f), normal.share(f));
        assert!(
            (a - b).abs() <= 5.0,
            "{f}: {a:.1}% with {fallback}, {b:.1}% without"
        );
    }
    assert_eq!(measured_skip(&forced.stderr), measured_skip(&normal.stderr));
    assert_eq!(forced.hottest_sleep(), normal.hottest_sleep());
}

#[test]
fn atomic_fetch_fallback_profiles_as_the_normal_path() {
    root_or_skip!();
    let _g = parallel();
    spinsleep_agrees_under("atomic-fetch", "fallbacks: ids from per-CPU counters", &[]);
}

#[test]
fn prealloc_fallback_profiles_as_the_normal_path() {
    root_or_skip!();
    let _g = parallel();
    spinsleep_agrees_under(
        "prealloc",
        "fallbacks: preallocated hash maps (no BPF memory allocator)",
        &[],
    );
}

#[test]
fn task_btf_fallback_profiles_as_the_normal_path() {
    root_or_skip!();
    let _g = parallel();
    // The dwarf walk: its off-CPU walks start from the user registers
    // found at the top of the task's kernel stack (no bpf_task_pt_regs),
    // which the hottest sleeping stack, walked from there, checks.
    spinsleep_agrees_under(
        "task-btf",
        "fallbacks: the current task read by address",
        &[],
    );
    // Frame-pointer stacks: the raw-stack cache's key (the task's mm, its
    // layout generation, tgid and exec id) read through the task's address.
    spinsleep_agrees_under(
        "task-btf",
        "fallbacks: the current task read by address",
        &["--call-graph", "fp"],
    );
}

#[test]
fn bpf_loop_fallback_profiles_as_the_normal_path() {
    root_or_skip!();
    let _g = parallel();
    // The programs built with open-coded loops, as on a kernel before 5.17:
    // the dwarf walk, and frame-pointer stacks.
    for args in [&[][..], &["--call-graph", "fp"]] {
        spinsleep_agrees_under(
            "bpf-loop",
            "fallbacks: open-coded loops, mappings without the kernel's lookup (no bpf_loop, bpf_find_vma)",
            args,
        );
    }
    // Intervals empty the CPUs' count caches with the open-coded flush:
    // the files add up to what was counted.
    let dir = scratch("fallback-intervals");
    let json = dir.join("stats.json");
    let out = run(bprof()
        .env("BPROF_FALLBACK", "all")
        .args([
            "--call-graph",
            "fp",
            "-F",
            "999",
            "--every",
            "1",
            "--no-counts",
            "-o",
        ])
        .arg(dir.join("%n.folded"))
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(fixture("work631"))
        .arg("3"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("--stats-json")).unwrap();
    let mut files = 0;
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "folded") {
            files += 1;
            lines.extend(parse_folded(&std::fs::read_to_string(e.path()).unwrap()));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(files >= 2, "{files} intervals: {stderr}");
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert_eq!(
        total,
        stats["samples"]["counted_weight"].as_u64().unwrap(),
        "{stderr}"
    );
    assert_eq!(stats["samples"]["lost"].as_u64(), Some(0), "{stderr}");
    let heavy = pct(with_frame(&lines, "fx_work631", "heavy"), total);
    assert!((heavy - 60.0).abs() <= 5.0, "heavy {heavy:.1}%: {stderr}");
}

#[test]
fn an_unknown_fallback_is_refused_in_one_line() {
    root_or_skip!();
    let _g = parallel();
    let out = run(bprof()
        .env("BPROF_FALLBACK", "atomic-fetch,nope")
        .args(["-f", "--", "true"]));
    let line = assert_one_line_error(&out);
    assert!(
        line.contains("BPROF_FALLBACK") && line.contains("\"nope\""),
        "{line}"
    );
}
