//! `--filter`: perf's filter language compiled into BPF map entries and
//! evaluated in the kernel, on real fixtures (run as root).

use std::process::Command;

use crate::common::*;

/// A 1 s system-wide profile with `args` while process `pid` runs, and the
/// CPU time (ms) the kernel gave `pid` inside it (see `run_beside`).
fn profile_beside(pid: u32, args: &[&str]) -> (Vec<Folded>, f64) {
    let (out, _, inside) = run_beside(pid, bprof().args(["-F", "499", "-f"]).args(args), "1");
    (parse_folded(&String::from_utf8_lossy(&out.stdout)), inside)
}

fn profile(args: &[&str]) -> (Vec<Folded>, String) {
    let out = run(bprof().args(["-F", "499", "-f"]).args(args));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (parse_folded(&String::from_utf8_lossy(&out.stdout)), stderr)
}

fn dropped(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("bprof: ")?
                .strip_suffix(" samples dropped by filter")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no dropped count in {stderr}"))
}

#[test]
fn tid_eq_and_ne_split_the_two_threads() {
    root_or_skip!();
    let _g = parallel();
    // Four profiles of 1 s each, plus start-up and symbolization: the
    // threads run until killed, long enough for all of them on a busy
    // machine.
    let (child, tids) = threads("600");
    let (a, b) = (&tids["alpha"], &tids["beta"]);
    let (eq, stderr) = profile(&["--filter", &format!("tid == {a}"), "1"]);
    assert!(with_frame(&eq, "alpha", "alpha_spin") > 80, "{eq:?}");
    assert!(eq.iter().all(|l| l.frames[0] == "alpha"), "{eq:?}");
    assert!(dropped(&stderr) > 0);

    let pid = child.id().to_string();
    let (ne, _) = profile(&["-p", &pid, "--filter", &format!("tid!={a}"), "1"]);
    assert!(with_frame(&ne, "beta", "beta_spin") > 80, "{ne:?}");
    assert_eq!(total_for(&ne, "alpha"), 0, "{ne:?}");

    // An OR group keeps both; a second --filter ANDs with it.
    let (or, _) = profile(&["--filter", &format!("tid == {a} || tid == {b}"), "1"]);
    assert!(
        total_for(&or, "alpha") > 80 && total_for(&or, "beta") > 80,
        "{or:?}"
    );
    assert!(or
        .iter()
        .all(|l| l.frames[0] == "alpha" || l.frames[0] == "beta"));
    let (and, _) = profile(&[
        "--filter",
        &format!("tid == {a} || tid == {b}"),
        "--filter",
        &format!("tid != {b}"),
        "1",
    ]);
    assert!(total_for(&and, "alpha") > 60, "{and:?}");
    assert_eq!(total_for(&and, "beta"), 0);
    drop(child);
}

#[test]
fn cpu_filter_keeps_only_that_cpu() {
    root_or_skip!();
    let _g = parallel();
    // Named apart from the fixtures other tests run meanwhile.
    let spawn = |cpu: &str, name: &str, comm: &str| {
        Workload::start(
            Command::new("taskset")
                .args(["-c", cpu])
                .arg(fixture_as(name, comm))
                // Killed when dropped: long enough for any start-up.
                .arg("30"),
        )
    };
    let on0 = spawn("0", "work631", "fx_on_cpu0");
    let on1 = spawn("1", "rust_work", "fx_on_cpu1");
    let (lines, _) = profile(&["--filter", "cpu == 1", "1"]);
    drop((on0, on1));
    assert!(total_for(&lines, "fx_on_cpu1") > 150, "{lines:?}");
    assert_eq!(total_for(&lines, "fx_on_cpu0"), 0, "{lines:?}");
}

#[test]
fn period_beyond_any_sample_keeps_nothing_and_says_so() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    let out = run(bprof()
        .args([
            "-F",
            "499",
            "-f",
            "--filter",
            "period > 0xffffffffffff",
            "--",
        ])
        .arg(&bin)
        // Fixed work, about a CPU-second: as many samples on a busy machine.
        .args(["0", "40"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "samples kept: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(dropped(&stderr) > 150, "{stderr}");
    assert!(stderr.contains("bprof: 0 samples"), "{stderr}");
    // A flame graph of nothing is not written, and the summary says why.
    let svg = scratch("period-svg").join("empty.svg");
    let out = run(bprof()
        .args(["-F", "499", "--filter", "period > 0xffffffffffff", "--svg"])
        .arg(&svg)
        .arg("--")
        .arg(&bin)
        .arg("0.5"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("samples dropped by filter"), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with(&format!("no flame graph was written to {}", svg.display())),
        "{stderr}"
    );
    assert!(!svg.exists());
}

#[test]
fn ip_below_kernel_keeps_no_kernel_leaf() {
    root_or_skip!();
    let _g = parallel();
    // dd's time is mostly the kernel's; then fixed user-mode work (10
    // rounds of work631): what a user-only filter keeps.
    let script = format!(
        "dd if=/dev/zero of=/dev/null bs=64k count=200000 && exec {} 0 10",
        fixture_as("work631", "fx_user_spin").display()
    );
    let dd = ["--", "sh", "-c", &script];
    let (all, _) = profile(&[&["-a"][..], &dd[..]].concat());
    let kernel_leaf = |lines: &[Folded]| {
        lines
            .iter()
            .filter(|l| l.frames.last().is_some_and(|f| f.ends_with("_[k]")))
            .map(|l| l.count)
            .sum::<u64>()
    };
    assert!(
        kernel_leaf(&all) > 50,
        "dd should spend time in the kernel: {all:?}"
    );
    let (user, stderr) =
        profile(&[&["-a", "--filter", "ip < 0xffff800000000000"][..], &dd[..]].concat());
    assert_eq!(kernel_leaf(&user), 0, "{user:?}");
    assert!(dropped(&stderr) > 50);
    assert!(total_for(&user, "fx_user_spin") > 50, "{user:?}");
    // The `user` shorthand means the same.
    let (mode, stderr) = profile(&[&["-a", "--filter", "user"][..], &dd[..]].concat());
    assert_eq!(kernel_leaf(&mode), 0, "{mode:?}");
    assert!(dropped(&stderr) > 50);
    assert!(total_for(&mode, "fx_user_spin") > 50, "{mode:?}");
    // `kernel`: dd's kernel time, and none of its user time.
    let (kern, stderr) = profile(&[&["-a", "--filter", "kernel"][..], &dd[..]].concat());
    assert!(kern.iter().filter(|l| l.frames[0] == "dd").all(|l| l
        .frames
        .last()
        .unwrap()
        .ends_with("_[k]")));
    assert!(total_for(&kern, "dd") > 50, "{kern:?}");
    assert!(dropped(&stderr) > 50);
}

#[test]
fn cgroup_filter_keeps_that_cgroup() {
    root_or_skip!();
    let _g = parallel();
    let cg = TestCgroup::new("filter");
    // Named apart from the fixtures other tests run meanwhile.
    // Killed when dropped: long enough for any start-up.
    let inside = Workload::start(Command::new(fixture_as("rust_work", "fx_cg_inside")).arg("60"));
    cg.add(inside.id());
    let outside = Workload::start(Command::new(fixture_as("work631", "fx_cg_outside")).arg("60"));
    // As many samples as the kernel ran each process, however busy.
    let (lines, ran_in) = profile_beside(
        inside.id(),
        &["--filter", &format!("cgroup == {}", cg.name)],
    );
    let (rest, ran_out) = profile_beside(
        outside.id(),
        &["--filter", &format!("cgroup != {}", cg.name)],
    );
    drop((inside, outside, cg));
    assert!(
        ran_in > 20.0 && ran_out > 20.0,
        "barely ran: {ran_in}, {ran_out} ms"
    );
    assert!(
        total_for(&lines, "fx_cg_inside") >= least_samples(ran_in, 499.0),
        "{ran_in} ms: {lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.frames[0] == "fx_cg_inside"),
        "{lines:?}"
    );
    assert_eq!(total_for(&rest, "fx_cg_inside"), 0);
    assert!(total_for(&rest, "fx_cg_outside") >= least_samples(ran_out, 499.0));
}

#[test]
fn comm_filter() {
    root_or_skip!();
    let _g = parallel();
    // Killed when dropped: long enough for any start-up.
    let a = Workload::start(Command::new(fixture("work631")).arg("60"));
    let b = Workload::start(Command::new(fixture("rust_work")).arg("60"));
    // As many samples as the kernel ran each process, however busy.
    let (lines, ran_b) = profile_beside(b.id(), &["--filter", "comm == fx_rust_work"]);
    let (quoted, ran_a) = profile_beside(a.id(), &["--filter", "comm==\"fx_work631\" && pid > 0"]);
    drop((a, b));
    assert!(
        ran_a > 20.0 && ran_b > 20.0,
        "barely ran: {ran_a}, {ran_b} ms"
    );
    assert!(
        total_for(&lines, "fx_rust_work") >= least_samples(ran_b, 499.0),
        "{ran_b} ms: {lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.frames[0] == "fx_rust_work"),
        "{lines:?}"
    );
    assert!(
        total_for(&quoted, "fx_work631") >= least_samples(ran_a, 499.0),
        "{ran_a} ms: {quoted:?}"
    );
    assert!(
        quoted.iter().all(|l| l.frames[0] == "fx_work631"),
        "{quoted:?}"
    );
}

#[test]
fn malformed_filters_exit_2_with_one_line_pointing_at_the_column() {
    for (filter, want) in [
        (
            "tid === 3",
            "invalid filter 'tid === 3': unexpected '=' at column 7",
        ),
        ("", "empty filter"),
        ("   ", "empty filter"),
        ("foo == 1", "unknown term 'foo'"),
        ("tid ==", "missing value"),
        ("tid == 3 ,", "expected a term after ','"),
        ("tid == 3 ||", "expected a term after '||'"),
        ("tid == 99999999999999999999", "number too big"),
        ("tid == -1", "negative value"),
        ("tid == 4294967296", "too big for tid"),
        ("(tid == 1)", "unsupported syntax"),
        ("mem_op == 1", "needs a memory-sampling event"),
        ("comm < x", "not allowed for comm"),
        ("cgroup == /no-such-cgroup-bprof", "no such cgroup"),
    ] {
        let out = run(bprof().args(["--filter", filter, "1"]));
        let line = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(2), "{filter:?}: {line}");
        assert!(line.contains(want), "{filter:?}: {line}");
    }
    let many = vec!["cpu == 0"; 65].join(", ");
    let out = run(bprof().args(["--filter", &many, "1"]));
    let line = assert_one_line_error(&out);
    assert!(line.contains("too complex"), "{line}");
    assert_eq!(out.status.code(), Some(2));
}
