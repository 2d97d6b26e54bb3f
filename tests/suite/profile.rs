//! End-to-end profiles of real fixtures with real BPF (run as root).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

fn folded_of(args: &[&str], cmd: &[&str]) -> (Vec<Folded>, String, std::process::ExitStatus) {
    let out = run(bprof().args(args).arg("-f").arg("--").args(cmd));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        parse_folded(&String::from_utf8_lossy(&out.stdout)),
        stderr,
        out.status,
    )
}

#[test]
fn shares_631_match_the_workload_and_perf() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("work631");
    let (lines, stderr, status) = folded_of(&["-F", "999"], &[bin.to_str().unwrap(), "3"]);
    assert!(status.success(), "{stderr}");
    let total = total_for(&lines, "fx_work631");
    assert!(total > 1000, "too few samples: {total}\n{stderr}");
    let share = |f| pct(with_frame(&lines, "fx_work631", f), total);
    let (h, m, l) = (share("heavy"), share("medium"), share("light"));
    for (got, want, name) in [(h, 60.0, "heavy"), (m, 30.0, "medium"), (l, 10.0, "light")] {
        assert!(
            (got - want).abs() <= 4.0,
            "{name}: {got:.1}% (want {want}%)\n{lines:?}"
        );
    }
    // The workers' samples are under main: the whole stack was walked. A
    // sample in a function's first instruction, before it pushes its frame
    // pointer, skips its caller (as with perf), so allow a handful.
    let workers = |under_main: bool| -> u64 {
        lines
            .iter()
            .filter(|l| {
                l.frames
                    .last()
                    .is_some_and(|x| ["heavy", "medium", "light"].contains(&x.as_str()))
            })
            .filter(|l| l.frames.iter().any(|x| x == "main") == under_main)
            .map(|l| l.count)
            .sum()
    };
    assert!(workers(false) * 100 <= workers(true), "{lines:?}");

    let dir = scratch("shares_perf");
    let perf = perf_shares(&bin, "3", &dir);
    for (got, name) in [(h, "heavy"), (m, "medium"), (l, "light")] {
        let p = perf.get(name).copied().unwrap_or(0.0);
        assert!(
            (got - p).abs() <= 5.0,
            "{name}: bprof {got:.1}% vs perf {p:.1}%"
        );
    }
}

#[test]
fn folded_format_is_exact_and_starts_with_comm() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("threads");
    let (lines, stderr, status) = folded_of(&["-F", "499"], &[bin.to_str().unwrap(), "1"]);
    assert!(status.success(), "{stderr}");
    // Threads are named by pthread_setname_np: the first frame is the comm.
    assert!(with_frame(&lines, "alpha", "alpha_spin") > 100, "{lines:?}");
    assert!(with_frame(&lines, "beta", "beta_spin") > 100, "{lines:?}");
    assert_eq!(with_frame(&lines, "alpha", "beta_spin"), 0);
    assert_eq!(with_frame(&lines, "beta", "alpha_spin"), 0);
    // Identical lines are merged: each stack text appears once.
    let mut seen = std::collections::HashSet::new();
    for l in &lines {
        assert!(seen.insert(l.frames.join(";")), "duplicate line {l:?}");
    }
}

#[test]
fn delimiter_and_kernel_annotations() {
    root_or_skip!();
    let _g = parallel();
    // dd from /dev/zero to /dev/null spends its time in the kernel.
    let (lines, stderr, status) = folded_of(
        &["-F", "499", "-d", "-a"],
        &[
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64k",
            "count=200000",
        ],
    );
    assert!(status.success(), "{stderr}");
    let dd: Vec<&Folded> = lines.iter().filter(|l| l.frames[0] == "dd").collect();
    let with_delim: Vec<&&Folded> = dd
        .iter()
        .filter(|l| l.frames.iter().any(|f| f == "-"))
        .collect();
    assert!(!with_delim.is_empty(), "no delimited stacks: {dd:?}");
    for l in with_delim {
        let at = l.frames.iter().position(|f| f == "-").unwrap();
        assert!(
            l.frames[1..at].iter().all(|f| !f.ends_with("_[k]")),
            "user frame annotated: {l:?}"
        );
        assert!(
            l.frames[at + 1..].iter().all(|f| f.ends_with("_[k]")),
            "kernel frame not annotated: {l:?}"
        );
    }
}

#[test]
fn user_only_and_kernel_only() {
    root_or_skip!();
    let _g = parallel();
    let dd = [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=64k",
        "count=100000",
    ];
    let (user, stderr, status) = folded_of(&["-F", "499", "-U", "-a"], &dd);
    assert!(status.success(), "{stderr}");
    assert!(
        user.iter()
            .all(|l| l.frames.iter().all(|f| !f.ends_with("_[k]"))),
        "{user:?}"
    );
    // Every sample of dd is there, with its user stack alone.
    assert!(total_for(&user, "dd") > 50, "{user:?}\n{stderr}");
    let (kernel, stderr, status) = folded_of(&["-F", "499", "-K", "-a"], &dd);
    assert!(status.success(), "{stderr}");
    let dd_lines: Vec<&Folded> = kernel.iter().filter(|l| l.frames[0] == "dd").collect();
    assert!(total_for(&kernel, "dd") > 50, "{kernel:?}\n{stderr}");
    assert!(
        dd_lines
            .iter()
            .all(|l| l.frames[1..].iter().all(|f| f.ends_with("_[k]"))),
        "{dd_lines:?}"
    );
}

#[test]
fn svg_is_well_formed_and_holds_hot_frames() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("svg");
    let svg = dir.join("flame.svg");
    let folded = dir.join("out.folded");
    let bin = fixture("work631");
    let out = run(bprof()
        .args(["-F", "499", "--svg"])
        .arg(&svg)
        .arg("-o")
        .arg(&folded)
        .arg("--")
        .arg(&bin)
        .arg("1"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut depth = 0i64;
    let mut elements = 0;
    loop {
        match reader.read_event().expect("well-formed SVG") {
            quick_xml::events::Event::Start(_) => {
                depth += 1;
                elements += 1;
            }
            quick_xml::events::Event::End(_) => depth -= 1,
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced SVG");
    assert!(elements > 10);
    for f in ["heavy", "medium", "light", "main", "fx_work631"] {
        assert!(text.contains(f), "SVG lacks {f}");
    }
    assert!(
        text.contains("bprof: command"),
        "title should say what was profiled"
    );
    assert!(text.contains("499 Hz"), "subtitle should give the rate");
    // The folded file was written in the same run.
    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    assert!(with_frame(&lines, "fx_work631", "heavy") > 0);
}

#[test]
fn short_lived_process_is_named_after_it_exited() {
    root_or_skip!();
    // System-wide: its 40 short runs must get the CPU they ask for.
    let _g = exclusive();
    let bin = fixture("shortlived");
    let ready = ready_path();
    let mut prof = bprof()
        .args(["-F", "999", "-f", "--ready-file"])
        .arg(&ready)
        .arg("5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut prof);
    for _ in 0..40 {
        assert!(Command::new(&bin).status().unwrap().success());
    }
    let out = prof.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total = total_for(&lines, "fx_shortlived");
    let named = with_frame(&lines, "fx_shortlived", "shortlived_work");
    assert!(total > 400, "only {total} samples of the short-lived runs");
    assert!(pct(named, total) > 80.0, "{named} of {total} samples named");
}

/// User stacks are cached by raw addresses (see user_stack_id in
/// profile.bpf.c); when a library is swapped for another at the same
/// addresses, the same raw stack must get the new library's names.
#[test]
fn a_library_swapped_in_at_the_same_address_gets_its_own_names() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("dlswap");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/dlswap_lib.c");
    let libs: Vec<String> = ["alpha", "beta"]
        .iter()
        .map(|n| {
            let lib = dir.join(format!("libdl_{n}.so"));
            let ok = Command::new("gcc")
                .args(["-O1", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC"])
                .arg(format!("-DSPIN={n}_spin"))
                .arg("-o")
                .arg(&lib)
                .arg(&src)
                .status()
                .unwrap()
                .success();
            assert!(ok, "building {n}");
            lib.to_string_lossy().into_owned()
        })
        .collect();
    let bin = fixture("dlswap");
    let (lines, stderr, status) = folded_of(
        &["-F", "499"],
        &[bin.to_str().unwrap(), "0.2", "4", &libs[0], &libs[1]],
    );
    assert!(status.success(), "{stderr}");
    // The premise: both libraries were loaded at one address.
    let bases: std::collections::BTreeSet<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(dir.to_str().unwrap()))
        .filter_map(|l| l.split(' ').nth(1))
        .collect();
    assert_eq!(
        bases.len(),
        1,
        "libraries loaded at several addresses: {stderr}"
    );
    let total = total_for(&lines, "fx_dlswap");
    let alpha = with_frame(&lines, "fx_dlswap", "alpha_spin");
    let beta = with_frame(&lines, "fx_dlswap", "beta_spin");
    assert!(total > 200, "{total} samples\n{stderr}");
    // Each library spins half the time, and neither stack is lost (a
    // kernel stack-trace map would bucket beta's with alpha's, by address).
    let missed = with_frame(&lines, "fx_dlswap", "[Missed User Stack]");
    let counts = format!("alpha {alpha}, beta {beta}, missed {missed} of {total}");
    assert!(pct(alpha, total) > 35.0, "{counts}");
    assert!(pct(beta, total) > 35.0, "{counts}");
    assert_eq!(missed, 0, "{counts}");
}

#[test]
fn command_is_followed_into_children_and_its_status_returned() {
    root_or_skip!();
    let _g = parallel();
    let forker = fixture("forker");
    let work = fixture("work631");
    let (lines, stderr, status) = folded_of(
        &["-F", "499"],
        &[forker.to_str().unwrap(), "1", work.to_str().unwrap(), "1"],
    );
    assert!(status.success(), "{stderr}");
    assert!(
        with_frame(&lines, "fx_forker", "child_work") > 50,
        "forked child missing: {lines:?}"
    );
    assert!(
        with_frame(&lines, "fx_work631", "heavy") > 50,
        "exec'd grandchild missing: {lines:?}"
    );
    assert!(stderr.contains("command exited with status 0"), "{stderr}");

    let (_, stderr, status) = folded_of(&[], &["sh", "-c", "exit 3"]);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("command exited with status 3"), "{stderr}");
}

#[test]
fn pid_sees_only_that_process() {
    root_or_skip!();
    let _g = parallel();
    // Long enough for two runs however slowly bprof starts on a busy
    // machine; stopped when the test ends.
    let a = Workload::start(Command::new(fixture("work631")).arg("60"));
    let b = Workload::start(Command::new(fixture("rust_work")).arg("60"));
    // Up to 8 processes are compared in the program; more are looked up
    // in the target map: both ways see the one working process alone.
    let mut sleepers: Vec<std::process::Child> = (0..8)
        .map(|_| Command::new("sleep").arg("10").spawn().expect("sleep"))
        .collect();
    let many: Vec<String> = std::iter::once(a.id())
        .chain(sleepers.iter().map(std::process::Child::id))
        .map(|p| p.to_string())
        .collect();
    for pids in [a.id().to_string(), many.join(",")] {
        // As many samples as the kernel ran it, however busy the machine.
        let (out, _, ran) = run_beside(a.id(), bprof().args(["-F", "499", "-f", "-p", &pids]), "1");
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        assert!(ran > 100.0, "the process barely ran: {ran} ms");
        assert!(
            total_for(&lines, "fx_work631") >= least_samples(ran, 499.0),
            "-p {pids}, {ran} ms of CPU: {lines:?}"
        );
        assert!(
            lines.iter().all(|l| l.frames[0] == "fx_work631"),
            "-p {pids}: other processes leaked in: {lines:?}"
        );
    }
    drop((a, b));
    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

#[test]
fn tid_sees_only_that_thread() {
    root_or_skip!();
    let _g = parallel();
    let (child, tids) = threads("4");
    let out = run(bprof().args(["-F", "499", "-f", "-L", &tids["beta"], "1.5"]));
    drop(child);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert!(with_frame(&lines, "beta", "beta_spin") > 80, "{lines:?}");
    assert!(lines.iter().all(|l| l.frames[0] == "beta"), "{lines:?}");
}

#[test]
fn cpu_list_samples_only_those_cpus() {
    root_or_skip!();
    let _g = parallel();
    // Pinned to CPU 1: sampling only CPU 0 must not see it; CPU 1 must.
    let w = Workload::start(
        Command::new("taskset")
            .arg("-c")
            .arg("1")
            .arg(fixture("work631"))
            .arg("4"),
    );
    let pid = (w.id()).to_string();
    // On CPU 1, as many samples as the kernel ran it there.
    let (on1, _, ran) = run_beside(
        w.id(),
        bprof().args(["-F", "499", "-f", "-C", "1", "-p", &pid]),
        "1",
    );
    let on0 = run(bprof().args(["-F", "499", "-f", "-C", "0", "-p", &pid, "1"]));
    drop(w);
    for out in [&on1, &on0] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        // The profile ran and counted (none, on CPU 0).
        summary_numbers(&stderr);
    }
    let on1 = parse_folded(&String::from_utf8_lossy(&on1.stdout));
    let on0 = parse_folded(&String::from_utf8_lossy(&on0.stdout));
    assert!(ran > 100.0, "the process barely ran: {ran} ms");
    assert!(
        total_for(&on1, "fx_work631") >= least_samples(ran, 499.0),
        "{ran} ms of CPU: {on1:?}"
    );
    assert_eq!(total_for(&on0, "fx_work631"), 0, "{on0:?}");
}

#[test]
fn deep_recursion_is_walked() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("recurse");
    let (lines, stderr, _) = folded_of(&["-F", "499"], &[bin.to_str().unwrap(), "1", "60"]);
    let deep = lines
        .iter()
        .filter(|l| l.frames.last().is_some_and(|f| f == "bottom"))
        .map(|l| l.frames.iter().filter(|f| *f == "recurse").count())
        .max()
        .unwrap_or(0);
    assert_eq!(deep, 61, "{stderr}");
}

#[test]
fn rust_names_are_demangled() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("rust_work");
    let (lines, stderr, _) = folded_of(&["-F", "499"], &[bin.to_str().unwrap(), "1"]);
    assert!(
        with_frame(&lines, "fx_rust_work", "rust_work::hot::spin_rust") > 100,
        "{stderr}\n{lines:?}"
    );
    assert!(with_frame(&lines, "fx_rust_work", "rust_work::main") > 100);
}

#[test]
fn jit_frames_named_through_perf_map() {
    root_or_skip!();
    let _g = parallel();
    let jit = Workload::start(Command::new(fixture("jit")).arg("3"));
    let map = format!("/tmp/perf-{}.map", jit.id());
    let out = run(bprof().args(["-F", "499", "-f", "-p", &jit.id().to_string(), "1"]));
    // Killed, it cannot delete its map: the test does.
    drop(jit);
    let _ = std::fs::remove_file(map);
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total = total_for(&lines, "fx_jit");
    assert!(
        pct(with_frame(&lines, "fx_jit", "jit_spin"), total) > 80.0,
        "{lines:?}"
    );
}

#[test]
fn sigint_still_writes_every_output_and_leaves_nothing() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("sigint");
    let svg = dir.join("flame.svg");
    let folded = dir.join("out.folded");
    let w = Workload::start(Command::new(fixture("work631")).arg("5"));
    let ready = ready_path();
    let mut child = bprof()
        .args(["-F", "499", "-p", &w.id().to_string(), "--svg"])
        .arg(&svg)
        .arg("-o")
        .arg(&folded)
        .arg("--ready-file")
        .arg(&ready)
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut child);
    // Recording time, not a barrier: the outputs must hold samples.
    std::thread::sleep(Duration::from_millis(1000));
    let programs = bpf_programs_of(child.id());
    assert!(!programs.is_empty(), "no BPF programs while recording");
    interrupt(child.id());
    let out = child.wait_with_output().unwrap();
    drop(w);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    assert!(with_frame(&lines, "fx_work631", "heavy") > 50);
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .trim_end()
        .ends_with("</svg>"));
    assert!(
        !any_program_loaded(&programs),
        "BPF programs {programs:?} left loaded after exit"
    );
}

#[test]
fn stacks_report_lists_stacks_hottest_last() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    // Fixed work, about a CPU-second: as many samples on a busy machine.
    let out = run(bprof()
        .args(["-F", "499", "--stacks", "--"])
        .arg(&bin)
        .args(["0", "40"]));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let blocks: Vec<&str> = text
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .collect();
    let last = blocks.last().expect("a report");
    assert!(
        last.contains("    heavy\n"),
        "hottest stack should be last: {last}"
    );
    assert!(last.contains("-                fx_work631 ("), "{last}");
    let count: u64 = last.lines().last().unwrap().trim().parse().unwrap();
    assert!(count > 100);
}

#[test]
fn tiny_maps_count_and_report_every_loss() {
    root_or_skip!();
    let _g = parallel();
    // Two map slots cannot hold the stacks of a whole system: losses must be
    // counted in the kernel and reported, not silently dropped. The
    // manystacks fixture makes nearly every sample a new user stack (a
    // repeated one is found in the walk's per-CPU memo, never lost), and a
    // new thread every 5 ms makes new count keys: more than the CPUs' count
    // caches hold, so keys they evict find the count map full.
    let bin = fixture("manystacks");
    let w = Workload::start(Command::new(&bin).args(["3", "2", "17", "5"]));
    let out = run(bprof().args(["-F", "999", "-f", "-I", "--stack-storage-size", "2", "1.5"]));
    drop(w);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("samples lost: the count map was full"),
        "{stderr}"
    );
    // Two user stacks fit: the rest are lost, and said to be.
    let user_lost: u64 = stderr
        .lines()
        .find_map(|l| {
            l.split(" kernel and ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no stack loss reported: {stderr}"));
    assert!(user_lost > 0, "{stderr}");
    // The count map is drained every tick, so more than two stacks reach
    // the output; what did reach it adds up to the samples counted.
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let (samples, _, _) = summary_numbers(&stderr);
    assert_eq!(
        lines.iter().map(|l| l.count).sum::<u64>(),
        samples,
        "{stderr}"
    );
}

#[test]
fn idle_is_skipped_unless_asked() {
    root_or_skip!();
    let _g = exclusive();
    // Idle is a system-wide matter: profile all CPUs, and read the
    // kernel's idle time of all CPUs (/proc/stat, ms) around the profile
    // and inside its recording.
    let idle_ms = || -> f64 {
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let cpu: Vec<f64> = stat.lines().next().unwrap()[4..]
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        // SAFETY: sysconf has no memory-safety preconditions.
        let tick_ms = 1000.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // idle and iowait
        (cpu[3] + cpu[4]) * tick_ms
    };
    let json = scratch_root().join("idle-stats.json");
    let runs = |args: &[&str]| {
        let before = idle_ms();
        let ready = ready_path();
        let mut child = bprof()
            .args(["-F", "199", "-f", "-K", "--stats-json"])
            .arg(&json)
            .args(args)
            .arg("--ready-file")
            .arg(&ready)
            // Long enough that perf's start-up and its 0.8 s end inside it.
            .arg("3")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn_guarded();
        wait_ready(&ready, &mut child);
        let at_ready = idle_ms();
        // perf's idle samples over 0.8 s inside the recording: a CPU's
        // timer that does not fire while it idles (as on some VMs' CPUs)
        // gives neither of them samples, however idle the kernel says it was.
        let data = scratch_root().join("idle-perf.data");
        perf_record_with(
            &data,
            &["-B", "-a", "-e", "cpu-clock", "-F", "199"],
            &["sleep", "0.8"],
        );
        let inside = idle_ms() - at_ready;
        let script = Command::new("perf")
            .args(["script", "-F", "comm", "-i"])
            .arg(&data)
            .output()
            .expect("perf script");
        let _ = std::fs::remove_file(&data);
        assert!(
            script.status.success(),
            "perf script: {}",
            String::from_utf8_lossy(&script.stderr)
        );
        let perfs = String::from_utf8_lossy(&script.stdout)
            .lines()
            .filter(|l| l.trim().starts_with("swapper"))
            .count() as u64;
        let out = child.wait_with_output().unwrap();
        let around = idle_ms() - before;
        assert!(out.status.success());
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let samples = &stats["samples"];
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(
            lines.iter().map(|l| l.count).sum::<u64>(),
            samples["counted"].as_u64().unwrap(),
            "{stats}"
        );
        (
            lines,
            samples["idle"].as_u64().unwrap(),
            perfs,
            inside,
            around,
        )
    };
    let (no_idle, skipped, _, _, _) = runs(&[]);
    assert!(
        no_idle.iter().all(|l| !l.frames[0].starts_with("swapper")),
        "{no_idle:?}"
    );
    // The timer's idle samples are dropped by the kernel (exclude_idle),
    // before the program runs: none reaches its own idle check.
    assert_eq!(skipped, 0);
    let (idle, skipped, perfs, inside, around) = runs(&["-I"]);
    // With -I the idle tasks' samples are there: at least those perf saw
    // in part of the same recording, at most what the kernel's idle time
    // allows, however busy the machine was.
    let swapper: u64 = idle
        .iter()
        .filter(|l| l.frames[0].starts_with("swapper"))
        .map(|l| l.count)
        .sum();
    let figures = format!("{swapper} idle samples, perf's {perfs} in 0.8 s of it; the kernel's idle {inside} ms inside the recording, {around} ms around it");
    assert!(swapper >= perfs * 9 / 10, "{figures}");
    assert!(swapper as f64 <= around * 0.199 * 1.2 + 5.0, "{figures}");
    assert_eq!(skipped, 0);
}

#[test]
fn binary_of_another_mount_namespace_resolves_through_proc_root() {
    root_or_skip!();
    let _g = parallel();
    // The binary exists only inside the child's private tmpfs mount, as in
    // a container: bprof must open it through /proc/PID/root.
    let dir = scratch("mntns");
    let script = format!(
        "mount -t tmpfs none {d} && cp {bin} {d}/fx_hidden && exec {d}/fx_hidden 4",
        d = dir.display(),
        bin = fixture("work631").display()
    );
    let hidden = Workload::start(Command::new("unshare").args(["-m", "sh", "-c", &script]));
    assert!(
        !dir.join("fx_hidden").exists(),
        "the file must not be visible here"
    );
    let out = run(bprof().args(["-F", "499", "-f", "-p", &hidden.id().to_string(), "1"]));
    drop(hidden);
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert!(with_frame(&lines, "fx_hidden", "heavy") > 50, "{lines:?}");
}

#[test]
fn progress_bar_only_on_a_terminal() {
    root_or_skip!();
    let _g = parallel();
    // script(1) gives bprof a pseudo-terminal for stderr.
    let cmd = format!("{} -F 99 -f 1.5 > /dev/null", env!("CARGO_BIN_EXE_bprof"));
    let tty = run(Command::new("script").args(["-qec", &cmd, "/dev/null"]));
    assert!(
        String::from_utf8_lossy(&tty.stdout).contains("recording"),
        "no progress bar on a terminal"
    );
    let piped = run(bprof().args(["-F", "99", "-f", "1"]));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !stderr.contains("recording"),
        "decoration on a pipe: {stderr}"
    );
}

/// The numbers of the `-v` drains line: (drains, entries read from count
/// maps and from the count caches at the end, stacks deleted).
fn drain_numbers(stderr: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(" drains read "))
        .unwrap_or_else(|| panic!("no drains line: {stderr}"));
    let words: Vec<&str> = line.split([' ', ',', ';']).collect();
    let before = |w: &str| -> u64 {
        let i = words.iter().position(|x| *x == w).unwrap();
        words[i - 1].parse().unwrap()
    };
    (
        before("drains"),
        before("count-map") + before("keys"),
        before("copied"),
    )
}

/// Levels of the manystacks fixture in a line, root first: (level, bit).
fn tree_levels(l: &Folded) -> Vec<(u32, u32)> {
    l.frames
        .iter()
        .filter_map(|f| {
            let (lv, bit) = f.strip_prefix("lv")?.split_once('_')?;
            Some((lv.parse().ok()?, bit.parse().ok()?))
        })
        .collect()
}

/// Seconds since the epoch of a UTC time as bprof prints an interval's
/// start: `2026-11-26T21:52:03.390Z`.
fn utc_seconds(t: &str) -> f64 {
    let (date, time) = t.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let hms: Vec<f64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from 1970-01-01 to a civil date (the proleptic Gregorian rule).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days as f64 * 86_400.0 + hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]
}

#[test]
fn each_interval_holds_what_perf_saw_in_it_though_samples_wait_in_the_cpus_count_caches() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("manystacks");
    let dir = scratch("every-cached");
    // One thread, 2^10 paths at 999 Hz: hundreds of keys an interval, most
    // of them still in a CPU's count cache when it ends, and more new ones
    // than one run of flush_counts can insert (the count map takes new
    // elements from a small per-CPU cache the kernel refills after a run).
    let w = Workload::start(Command::new(&bin).args(["30", "1", "10"]));
    let pid = w.id().to_string();
    // perf samples the same process, its times on the realtime clock:
    // bprof dates its intervals in UTC. Both see the same machine load.
    let data = dir.join("perf.data");
    let perf = Command::new("perf")
        .args(["record", "-q", "--no-bpf-event", "-e", "cpu-clock"])
        .args(["-F", "999", "-k", "realtime", "-p", &pid, "-o"])
        .arg(&data)
        .args(["--", "sleep", "7"])
        .spawn_guarded();
    let out = run(bprof()
        .args(["-v", "-F", "999", "--every", "1", "-p", &pid, "-o"])
        .arg(dir.join("%n.folded"))
        .arg("4.5"));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert!(perf.wait_with_output().unwrap().status.success());
    // "bprof: interval 2: 2026-11-26T21:52:03.390Z + 1.00 s, 1001 counted, 961 stacks"
    let intervals: Vec<(f64, f64, u64)> = stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("bprof: interval ")?.split_once(": ")?.1;
            let (start, rest) = rest.split_once(" + ")?;
            let (len, rest) = rest.split_once(" s, ")?;
            let counted = rest.split(' ').next()?.parse().ok()?;
            Some((utc_seconds(start), len.parse().ok()?, counted))
        })
        .collect();
    assert!((4..=6).contains(&intervals.len()), "{stderr}");
    let script = Command::new("perf")
        .args(["script", "-F", "time", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let perf_times: Vec<f64> = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(':').parse().ok())
        .collect();
    let mut total = 0;
    for (i, &(start, len, counted)) in intervals.iter().enumerate() {
        let file = dir.join(format!("{:06}.folded", i + 1));
        let lines = parse_folded(&std::fs::read_to_string(&file).unwrap());
        let sum: u64 = lines.iter().map(|l| l.count).sum();
        assert_eq!(sum, counted, "interval {}: {stderr}", i + 1);
        total += sum;
        // A whole interval (not the first, which holds the start, nor the
        // last, cut short) holds the samples of its own second, as perf
        // saw them, not what the caches held back from the one before.
        if i > 0 && i + 1 < intervals.len() {
            let seen = perf_times
                .iter()
                .filter(|&&t| t >= start && t < start + len)
                .count() as f64;
            let got = counted as f64;
            assert!(
                seen > 100.0 && (got - seen).abs() <= (0.1 * seen).max(30.0),
                "interval {}: bprof {counted} samples, perf {seen} in its {len} s\n{stderr}",
                i + 1
            );
        }
    }
    let (samples, lost, _) = summary_numbers(&stderr);
    assert_eq!(lost, 0, "{stderr}");
    assert_eq!(total, samples, "{stderr}");
}

#[test]
fn more_than_20000_distinct_stacks_all_counted() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("manystacks");
    let dir = scratch("manystacks");
    let out_file = dir.join("out.folded");
    // 2^17 paths, two threads at 2999 Hz: nearly every sample is a new
    // stack, more than the default 16384-entry maps hold at once. perf
    // records the same run, so both see the same machine load.
    // Killed when dropped: it outlives both 16-s recordings however slow
    // their start.
    let w = Workload::start(Command::new(&bin).args(["60", "2", "17"]));
    let pid = w.id().to_string();
    let data = dir.join("perf.data");
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "--no-bpf-event",
            "-F",
            "999",
            "-g",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", "16"])
        .spawn_guarded();
    // 16 s: with another busy CPU the two threads share one, and still
    // make more than 20 000 distinct stacks.
    let out = run(bprof()
        .args(["-v", "-F", "2999", "-d", "16", "-p", &pid, "-o"])
        .arg(&out_file));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&std::fs::read_to_string(&out_file).unwrap());
    let (samples, lost, unique) = summary_numbers(&stderr);
    assert!(unique > 20_000, "only {unique} unique stacks\n{stderr}");
    assert_eq!(lost, 0, "{stderr}");
    assert!(!stderr.contains("[Missed"), "{stderr}");
    // Every counted sample is in the output, once.
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert_eq!(total, samples, "{stderr}");
    let (drains, entries, _) = drain_numbers(&stderr);
    assert!(drains >= 2 && entries >= unique, "{stderr}");
    // Each drain's aggregate went to the spill file and was merged back at
    // the end: what follows checks the merged counts against perf.
    assert!(stderr.contains("keys spilled to disk in"), "{stderr}");
    // The known shape: samples in leaf() sit under all 17 levels, in order,
    // each level's bit chosen independently (so each half of lv0 ~ 50 %).
    let fx = total_for(&lines, "fx_manystacks");
    let in_leaf: Vec<&Folded> = lines
        .iter()
        .filter(|l| l.frames[0] == "fx_manystacks" && l.frames.last().is_some_and(|f| f == "leaf"))
        .collect();
    let leaf_total: u64 = in_leaf.iter().map(|l| l.count).sum();
    let full: u64 = in_leaf
        .iter()
        .filter(|l| tree_levels(l).iter().map(|&(lv, _)| lv).eq(0..17))
        .map(|l| l.count)
        .sum();
    assert!(
        pct(full, leaf_total) >= 99.0,
        "{full} of {leaf_total} leaf samples with all levels"
    );
    let half = pct(with_frame(&lines, "fx_manystacks", "lv0_0"), fx);
    assert!((half - 50.0).abs() <= 5.0, "lv0_0 has {half:.1}%");

    // perf on the same run: the share of samples in leaf() itself. Timer
    // sampling on this VM moves it by up to ~8 points between two samplers
    // of one run (and between the two threads of one profile), so the
    // bound is loose; a wrong leaf frame would move it far more.
    let leaf_share = pct(leaf_total, fx);
    let perf = perf_leaf_share(perf, &data);
    assert!(
        (leaf_share - perf).abs() <= 12.0,
        "leaf: bprof {leaf_share:.1}% vs perf {perf:.1}%"
    );
}

/// The self share of leaf() once `perf` (recording into `data`) ends.
fn perf_leaf_share(mut perf: Spawned, data: &std::path::Path) -> f64 {
    let st = perf.wait().expect("wait for perf record");
    assert!(st.success(), "perf record failed: {st}");
    let rep = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-s",
            "sym",
            "-q",
            "-g",
            "none",
            "-i",
        ])
        .arg(data)
        .output()
        .expect("run perf report");
    String::from_utf8_lossy(&rep.stdout)
        .lines()
        .filter(|l| l.split_whitespace().last() == Some("leaf"))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum()
}

#[test]
fn tiny_maps_drain_at_the_fill_threshold_and_lose_nothing() {
    root_or_skip!();
    // Its thresholds assume the fixture's full rate of new stacks.
    let _g = exclusive();
    let bin = fixture("manystacks");
    // 512 entries, thousands of distinct stacks: the maps are drained each
    // time they are half full (checked every 100 ms), so nothing is lost.
    let out = run(bprof()
        .args(["-v", "-F", "999", "-f", "--stack-storage-size", "512", "--"])
        .args([bin.to_str().unwrap(), "3", "1", "15"]));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let (samples, lost, unique) = summary_numbers(&stderr);
    assert_eq!(lost, 0, "{stderr}");
    assert!(!stderr.contains("stacks lost"), "{stderr}");
    // Twice as many stacks as the maps hold, and more (~2 700 at full rate).
    assert!(unique > 1000, "{stderr}");
    assert_eq!(
        lines.iter().map(|l| l.count).sum::<u64>(),
        samples,
        "{stderr}"
    );
    let (drains, entries, deleted) = drain_numbers(&stderr);
    // Drains at the fill threshold (the 10 s timer makes none in 3 s; the
    // last drain is one: ~10 at full rate, fewer when samples are slow to
    // come), and stacks removed from the kernel maps after they were copied.
    assert!(drains >= 4, "{stderr}");
    assert!(entries >= unique && deleted > 1000, "{stderr}");
    // After each drain the aggregate went to the spill file, with the
    // copies of the stacks the kernel had deleted (later keys name those by
    // id), and every stack resolved.
    assert!(stderr.contains("keys spilled to disk in"), "{stderr}");
    assert!(stderr.contains("; 0 unresolved"), "{stderr}");
    // Merged back, the counts keep the fixture's shape: each half of the
    // tree gets half of the samples.
    let fx = total_for(&lines, "fx_manystacks");
    assert!(fx * 10 >= samples * 9, "{stderr}");
    for half in ["lv0_0", "lv0_1"] {
        let share = pct(with_frame(&lines, "fx_manystacks", half), fx);
        assert!((share - 50.0).abs() <= 6.0, "{half}: {share:.1}%");
    }
}

#[test]
fn thousands_of_kernel_stacks_none_missed() {
    root_or_skip!();
    let _g = parallel();
    // Walking and reading a directory tree makes thousands of distinct
    // kernel stacks: stored by content, none is dropped for sharing a hash
    // bucket (a 16384-entry STACK_TRACE map lost some at 2-4k stacks).
    let out = run(bprof().args(["-v", "-K", "-F", "4999", "-f", "--", "sh", "-c"]).arg(
        "for i in 1 2 3; do find /usr -xdev > /dev/null; cat /usr/lib/x86_64-linux-gnu/*.so* > /dev/null 2>&1; done",
    ));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let (samples, lost, _) = summary_numbers(&stderr);
    assert_eq!(lost, 0, "{stderr}");
    assert!(!stderr.contains("stacks lost"), "{stderr}");
    assert!(lines
        .iter()
        .all(|l| l.frames.iter().all(|f| !f.starts_with("[Missed"))));
    assert_eq!(
        lines.iter().map(|l| l.count).sum::<u64>(),
        samples,
        "{stderr}"
    );
    let stored: u64 = stderr
        .lines()
        .find_map(|l| l.split("; ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no stored count: {stderr}"));
    assert!(stored > 1000, "only {stored} kernel stacks\n{stderr}");
}

#[test]
fn user_stacks_stored_by_content_when_the_layout_cache_misses() {
    root_or_skip!();
    // Its thresholds assume the fixture's full rate of new stacks.
    let _g = exclusive();
    let bin = fixture("mmapchurn");
    // The layout cache is the frame-pointer walk's (dwarf walks every
    // sample and counts its own memo's hits in the same -v number).
    // Under a shell that then notes the CPU time it collected from the
    // fixture: the kernel's figure of what there was to sample.
    let times = scratch("layout_cache_miss").join("stat");
    let script = format!(
        "{} 2; cat /proc/$$/stat > {}",
        bin.display(),
        times.display()
    );
    let out = run(bprof()
        .args(["-v", "-U", "--call-graph", "fp", "-F", "999", "-f", "--"])
        .args(["sh", "-c", &script]));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let (samples, lost, _) = summary_numbers(&stderr);
    let ran = collected_cpu_ms(&times);
    assert!(ran > 500.0, "the fixture barely ran: {ran} ms");
    assert!(
        samples >= least_samples(ran, 999.0) && lost == 0,
        "{ran} CPU-ms\n{stderr}"
    );
    let cached: u64 = stderr
        .lines()
        .find_map(|l| l.split("user stacks from the cache ").nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no cache count: {stderr}"));
    let stored: u64 = stderr
        .lines()
        .find_map(|l| {
            l.split(" user stacks stored")
                .next()?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no stored count: {stderr}"));
    // Every sample missed the layout cache, yet the same few stacks were
    // stored once each, not once per sample.
    assert!(cached * 10 < samples, "{stderr}");
    assert!(stored <= 50, "{stored} user stacks stored\n{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert!(
        with_frame(&lines, "fx_mmapchurn", "spin") * 2 > samples,
        "{lines:?}"
    );
}

#[test]
fn other_processes_mappings_are_skipped_when_the_profile_has_targets() {
    root_or_skip!();
    let _g = parallel();
    // The side band reports every process's mappings; a -p profile keeps
    // only its target's (each other one cost ~13 us of bprof's CPU). A loop
    // of short commands beside the target makes hundreds.
    let target = Workload::start(Command::new(fixture("work631")).arg("8"));
    let busy = Workload::start(
        Command::new("sh").args(["-c", "touch \"$BPROF_READY\"; while :; do /bin/true; done"]),
    );
    let json = scratch_root().join("sideband-stats.json");
    let stats = |args: &[&str]| {
        // With what the kernel gave the target while it was profiled.
        let (out, _, ran) = run_beside(
            target.id(),
            bprof()
                .args(["-F", "499", "-f", "--stats-json"])
                .arg(&json)
                .args(args),
            "1",
        );
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(
            lines.iter().map(|l| l.count).sum::<u64>(),
            stats["samples"]["counted"].as_u64().unwrap(),
            "{stats}"
        );
        (lines, stats, ran)
    };
    let (lines, s, ran) = stats(&["-p", &target.id().to_string()]);
    let (read, skipped) = (
        s["mmap_records"].as_u64().unwrap(),
        s["mmap_records_of_other_processes"].as_u64().unwrap(),
    );
    assert!(skipped > 100 && skipped <= read, "{s}");
    // heavy() is 60% of the target's work: at least half its samples.
    assert!(ran > 100.0, "the target barely ran: {ran} ms");
    assert!(
        with_frame(&lines, "fx_work631", "heavy") >= least_samples(ran, 499.0) / 2,
        "{ran} ms of CPU: {lines:?}"
    );
    // System-wide, every process is the profile's: nothing is skipped.
    let (_, s, _) = stats(&["-a"]);
    assert!(s["mmap_records"].as_u64().unwrap() > 100, "{s}");
    assert_eq!(
        s["mmap_records_of_other_processes"].as_u64(),
        Some(0),
        "{s}"
    );
    drop(busy);
    drop(target);
}

/// bprof's own cost in the kernel, as the kernel times its programs
/// (`kernel.bpf_stats_enabled`): in `--stats-json` and `-v`, every run
/// counted (the sample program's runs are the summary's program runs; the
/// exec learner runs at every exec of the machine), the kernel's own
/// figures (`bpftool prog show`) of bprof's programs just before it
/// stops, and `null` with a one-line hint when the kernel does not time
/// them.
#[test]
// Long on purpose: one timed profile read three ways, then an untimed one.
fn bprofs_own_bpf_time_is_reported_when_the_kernel_times_it() {
    root_or_skip!();
    let _g = exclusive();
    let sysctl = "/proc/sys/kernel/bpf_stats_enabled";
    let before = std::fs::read_to_string(sysctl).expect("bpf_stats_enabled");
    let json = scratch_root().join("bpf-time.json");
    // Runs and run time of programs `ids`, as bpftool shows them (one
    // listing of every program: the profile runs on meanwhile).
    let kernel_figures = |ids: &[u32]| -> (u64, u64) {
        let out = Command::new("bpftool")
            .args(["prog", "show", "-j"])
            .output()
            .expect("run bpftool");
        let all: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("bpftool: {}", String::from_utf8_lossy(&out.stderr)));
        let ours = all
            .as_array()
            .expect("a list of programs")
            .iter()
            .filter(|p| {
                p["id"]
                    .as_u64()
                    .is_some_and(|id| ids.contains(&(id as u32)))
            });
        ours.fold((0, 0), |(runs, ns), p| {
            (
                runs + p["run_cnt"].as_u64().unwrap_or(0),
                ns + p["run_time_ns"].as_u64().unwrap_or(0),
            )
        })
    };
    // A profile of a busy process, interrupted; with the kernel's figures
    // of its programs read just before the interrupt.
    let profile = |stats: &str| {
        std::fs::write(sysctl, stats).expect("set bpf_stats_enabled");
        let target = Workload::start(Command::new(fixture("work631")).arg("30"));
        let pid = target.0.id().to_string();
        let ready = ready_path();
        let mut child = bprof()
            .args(["-v", "-F", "999", "-o", "/dev/null", "--stats-json"])
            .arg(&json)
            .args(["-p", &pid, "--ready-file"])
            .arg(&ready)
            .arg("30")
            .stderr(Stdio::piped())
            .spawn_guarded();
        wait_ready(&ready, &mut child);
        std::thread::sleep(Duration::from_millis(1500));
        let kernel = kernel_figures(&bpf_programs_of(child.id()));
        interrupt(child.id());
        let out = child.wait_with_output().unwrap();
        std::fs::write(sysctl, before.trim()).expect("restore bpf_stats_enabled");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (j, stderr, kernel)
    };
    let (j, stderr, (kernel_runs, kernel_ns)) = profile("1");
    let runs = j["bpf"]["runs"].as_u64().expect("bpf.runs");
    let ns = j["bpf"]["run_time_ns"].as_u64().expect("bpf.run_time_ns");
    let program_runs = j["samples"]["program_runs"].as_u64().unwrap();
    assert!(program_runs > 500, "{stderr}");
    assert!(
        runs >= program_runs,
        "{runs} runs timed, {program_runs} sample program runs"
    );
    // The exec learner runs at every exec of the machine; no other
    // program's runs are counted.
    assert!(
        runs <= 2 * program_runs + 1000,
        "{runs} runs timed, {program_runs} sample program runs"
    );
    // The kernel's figures a moment before the end: bprof's totals hold
    // them, and the little more its last instants ran (a tenth of what
    // the 1.5 s before ran, at most).
    let figures = format!("bprof {runs} runs, {ns} ns; the kernel's {kernel_runs}, {kernel_ns}");
    assert!(kernel_runs > 500, "{figures}");
    assert!(
        runs >= kernel_runs && runs <= kernel_runs + kernel_runs / 10,
        "{figures}"
    );
    assert!(
        ns >= kernel_ns && ns <= kernel_ns + kernel_ns / 10,
        "{figures}"
    );
    assert!(
        stderr.contains(&format!("its BPF programs ran {runs} times")),
        "{stderr}"
    );
    let (j, stderr, _) = profile("0");
    assert!(j["bpf"].is_null(), "{j}");
    assert!(
        stderr.contains("sysctl kernel.bpf_stats_enabled=1"),
        "{stderr}"
    );
}
