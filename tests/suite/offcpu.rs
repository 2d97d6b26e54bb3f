//! Off-CPU and wall-clock profiles on real fixtures (run as root).

use std::process::{Command, Stdio};

use crate::common::*;

fn is_bpf_frame(f: &str) -> bool {
    [
        "bpf_prog_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
        "bpf_trampoline_",
    ]
    .iter()
    .any(|p| f.starts_with(p))
}

fn folded(args: &[&str]) -> (Vec<Folded>, String) {
    let out = run(bprof().args(args));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (parse_folded(&String::from_utf8_lossy(&out.stdout)), stderr)
}

#[test]
fn blocked_time_is_charged_to_the_sleeping_function() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("spinsleep");
    let (lines, stderr) = folded(&["--off-cpu", "-f", "--", bin.to_str().unwrap(), "3"]);
    let total = total_for(&lines, "fx_spinsleep");
    let sleeping = with_frame(&lines, "fx_spinsleep", "sleep_phase");
    // Counts are microseconds: half of 3 s is blocked.
    assert!(
        (1_200_000..=1_800_000).contains(&total),
        "off-CPU total {total} us\n{stderr}"
    );
    assert!(
        pct(sleeping, total) >= 95.0,
        "{sleeping} of {total} us under sleep_phase: {lines:?}"
    );
    for l in &lines {
        assert!(
            !l.frames.iter().any(|f| is_bpf_frame(f)),
            "BPF frame in {l:?}"
        );
    }
    // The kernel part is where the thread blocked: the scheduler is the leaf.
    let top = lines.iter().max_by_key(|l| l.count).unwrap();
    assert_eq!(
        top.frames.last().map(String::as_str),
        Some("__schedule_[k]"),
        "{top:?}"
    );
}

#[test]
fn measured_skip_matches_a_raw_stack() {
    root_or_skip!();
    // Both runs' hottest sleep must take the same kernel path: on a busy
    // machine a wake-up can come another way.
    let _g = exclusive();
    let bin = fixture("spinsleep");
    let (measured, stderr) = folded(&["--off-cpu", "-v", "-f", "--", bin.to_str().unwrap(), "1"]);
    let skip = measured_skip(&stderr);
    assert!(
        skip > 0,
        "inside a tracepoint program there are BPF frames to skip"
    );
    let (raw, _) = folded(&[
        "--off-cpu",
        "--stack-skip",
        "0",
        "-f",
        "--",
        bin.to_str().unwrap(),
        "1",
    ]);
    // The hottest stack where the fixture sleeps (on a busy machine other
    // stacks block too: waits to run again after a preemption).
    let hot = |lines: &[Folded]| {
        lines
            .iter()
            .filter(|l| l.frames.iter().any(|f| f == "sleep_phase"))
            .max_by_key(|l| l.count)
            .expect("a stack under sleep_phase")
            .frames
            .clone()
    };
    let (m, r) = (hot(&measured), hot(&raw));
    // The raw stack is the measured one plus exactly `skip` frames at the leaf.
    assert_eq!(r.len(), m.len() + skip, "raw {r:?} vs measured {m:?}");
    assert_eq!(&r[..m.len()], &m[..]);
    assert!(
        r[m.len()..].iter().any(|f| is_bpf_frame(f)),
        "skipped frames {:?}",
        &r[m.len()..]
    );
}

#[test]
fn a_second_session_on_sched_switch_shows_no_tracepoint_frame() {
    root_or_skip!();
    let _g = parallel();
    // sched_switch calls one attached program straight and several through
    // its iterator, a frame more: the first session measured its skip
    // alone (unless another test's was attached), the second with two.
    // Neither may show the iterator once both are attached.
    let work = Workload::start(Command::new(fixture("spinsleep")).arg("60"));
    let pid = work.id().to_string();
    let ready = ready_path();
    let mut first = bprof()
        .args(["--off-cpu", "-v", "-f", "-p", &pid, "--ready-file"])
        .arg(&ready)
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut first);
    let second = folded(&["--off-cpu", "-v", "-f", "-p", &pid, "1"]);
    let out = first.wait_with_output().expect("wait for bprof");
    drop(work);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let first = (parse_folded(&String::from_utf8_lossy(&out.stdout)), stderr);
    for (lines, stderr) in [first, second] {
        assert!(
            with_frame(&lines, "fx_spinsleep", "sleep_phase") > 0,
            "{stderr}"
        );
        for l in &lines {
            assert!(
                !l.frames.iter().any(|f| is_bpf_frame(f)),
                "BPF frame in {l:?}\n{stderr}"
            );
        }
    }
}

#[test]
fn wall_adds_up_to_wall_time() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("spinsleep");
    let (lines, stderr) = folded(&[
        "--wall",
        "-F",
        "999",
        "-f",
        "--",
        bin.to_str().unwrap(),
        "2",
    ]);
    let total = total_for(&lines, "fx_spinsleep");
    // Within 20%: on-CPU time is samples x period, and a vCPU the host
    // preempts (steal time) takes no samples while its wall time runs on.
    assert!(
        (1_600_000..=2_200_000).contains(&total),
        "wall total {total} us for 2 s\n{stderr}"
    );
    let off: u64 = lines
        .iter()
        .filter(|l| l.frames[0] == "fx_spinsleep" && l.frames.last().unwrap() == "[off-cpu]")
        .map(|l| l.count)
        .sum();
    // Half the time sleeps; --wall also counts waiting to run as off-CPU,
    // which grows when the machine is busy, so only the floor is fixed.
    assert!(
        pct(off, total) > 40.0 && pct(off, total) < 90.0,
        "off {off} of {total}"
    );
    assert!(
        with_frame(&lines, "fx_spinsleep", "spin_phase") > 500_000,
        "{lines:?}"
    );
    // Off-CPU stacks are taken inside bprof's tracepoint program: none may
    // show it. An on-CPU sample may land in some other tool's BPF program
    // (real CPU time, as perf shows it too), never in bprof's own.
    for l in &lines {
        let off = l.frames.last().is_some_and(|f| f == "[off-cpu]");
        assert!(
            !l.frames.iter().any(|f| if off {
                is_bpf_frame(f)
            } else {
                f.contains("do_sample") || f.contains("offcpu_switch")
            }),
            "bprof's BPF frame in {l:?}"
        );
    }
    let out = run(bprof().args(["--wall", "-e", "cycles", "1"]));
    assert!(assert_one_line_error(&out).contains("--wall counts time"));
}

#[test]
fn block_thresholds_and_filters_apply() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("spinsleep");
    // 10 ms sleeps are below a 20 ms minimum and above a 5 ms maximum. Half a
    // second of them is blocked in 1 s; a few may be split by an early
    // wake-up or stretched by a busy host, so allow under 20% of that.
    let (lines, stderr) = folded(&[
        "--off-cpu",
        "--min-block",
        "20000",
        "-f",
        "--",
        bin.to_str().unwrap(),
        "1",
    ]);
    // Kept below the threshold, and the rest there: counted and ignored.
    let ignored = |stderr: &str| -> u64 {
        let line = stderr
            .lines()
            .find(|l| l.contains("blocks outside --min-block/--max-block ignored"))
            .unwrap_or_else(|| panic!("no ignored blocks: {stderr}"));
        number_before(line, " blocks outside")
    };
    assert!(total_for(&lines, "fx_spinsleep") < 100_000, "{lines:?}");
    assert!(ignored(&stderr) >= 25, "{stderr}");
    let (lines, stderr) = folded(&[
        "--off-cpu",
        "--max-block",
        "5000",
        "-f",
        "--",
        bin.to_str().unwrap(),
        "1",
    ]);
    assert!(total_for(&lines, "fx_spinsleep") < 100_000, "{lines:?}");
    assert!(ignored(&stderr) >= 25, "{stderr}");

    // Killed when dropped: long enough for any start-up.
    let a = Workload::start(Command::new(&bin).arg("30"));
    let b = Workload::start(Command::new(&bin).arg("30"));
    let out = run(bprof().args([
        "--off-cpu",
        "--stacks",
        "--filter",
        &format!("pid == {}", a.id()),
        "1",
    ]));
    let (a, b) = (a.id(), b.id());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        report.contains(&format!("fx_spinsleep ({a}) [off-cpu us]")),
        "{report}"
    );
    assert!(!report.contains(&format!("({b})")), "{report}");

    let out = run(bprof().args(["--off-cpu", "--filter", "ip < 0xffff800000000000", "1"]));
    let line = assert_one_line_error(&out);
    assert!(line.contains("does not apply to off-CPU time"), "{line}");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn kernel_threads_only_when_asked() {
    root_or_skip!();
    let _g = parallel();
    let is_kthread = |l: &Folded| {
        [
            "kworker/",
            "ksoftirqd/",
            "rcu_",
            "migration/",
            "kcompactd",
            "khugepaged",
        ]
        .iter()
        .any(|p| l.frames[0].starts_with(p))
    };
    let (without, _) = folded(&["--off-cpu", "-f", "1"]);
    assert!(!without.iter().any(is_kthread), "{without:?}");
    let (with, _) = folded(&["--off-cpu", "--kernel-threads", "-f", "2"]);
    assert!(with.iter().any(is_kthread), "{with:?}");
}
