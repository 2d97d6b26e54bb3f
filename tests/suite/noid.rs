//! Files without a GNU build ID: Go programs (Go writes only its own build
//! note), with and without their symbols, and C built `--build-id=none`;
//! compared with perf on the same run where perf can name them (run as
//! root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;

/// The Go fixture as `go build` leaves it (symbols, DWARF, no GNU build ID).
fn go_plain() -> PathBuf {
    go_fixture("gohot", "gohot", "")
}

/// Without .symtab and DWARF (`-ldflags='-s -w'`), as containers ship Go.
fn go_stripped() -> PathBuf {
    go_fixture("gohot", "gohot_s", "-s -w")
}

/// Stripped, with a GNU build ID added, so frames are kept by build ID.
fn go_stripped_build_id() -> PathBuf {
    go_fixture(
        "gohot",
        "gohot_sb",
        "-s -w -B 0x5a1c0ffee0ddba11ab1e5eedfacade0123456789",
    )
}

fn folded(out: &Output) -> (Vec<Folded>, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    (lines, err)
}

/// bprof -p and `perf record -p` on the same live process for `secs`:
/// bprof's folded lines and perf's report (self samples by symbol).
fn profile_live_with_perf(bin: &Path, dir: &Path) -> (Vec<Folded>, String) {
    let work = Workload::start(Command::new(bin).arg("6"));
    let pid = work.id().to_string();
    let data = dir.join("perf.data");
    // User samples only, no build-ID cache: see names.rs.
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "--no-bpf-event",
            "-B",
            "-N",
            "-e",
            "cpu-clock:u",
        ])
        .args(["-F", "999", "-g", "-p", &pid, "-o"])
        .arg(&data)
        .args(["--", "sleep", "2"])
        .spawn_guarded();
    let (lines, _) = folded(&run(bprof().args(["-F", "999", "-f", "-p", &pid, "2"])));
    assert!(perf.wait().expect("perf").success(), "perf record failed");
    let rep = run(Command::new("perf")
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
    (lines, String::from_utf8_lossy(&rep.stdout).into_owned())
}

/// Column `col` of `report`'s lines for symbol `sym`.
fn perf_column<'r>(report: &'r str, sym: &str, col: usize) -> impl Iterator<Item = &'r str> {
    let end = format!("[.] {sym}");
    report
        .lines()
        .filter(move |l| l.trim_end().ends_with(&end))
        .filter_map(move |l| l.split_whitespace().nth(col))
}

/// perf's share (percent of self samples) of symbol `sym` in `report`.
fn perf_share(report: &str, sym: &str) -> f64 {
    perf_column(report, sym, 0)
        .filter_map(|w| w.trim_end_matches('%').parse::<f64>().ok())
        .sum()
}

/// perf's self samples in `sym` from a report made with `-n`.
fn perf_samples(report: &str, sym: &str) -> u64 {
    perf_column(report, sym, 1)
        .filter_map(|w| w.parse::<u64>().ok())
        .sum()
}

/// A Go program is named under `-p` while it lives, from its symbols (as
/// perf names it on the same run) and, stripped of them, from its own
/// function table (which perf cannot read), inlined calls included.
#[test]
fn go_programs_are_named_under_p_with_and_without_symbols() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("noid_go_live");
    let (lines, report) = profile_live_with_perf(&go_plain(), &dir);
    let total = total_for(&lines, "fx_gohot");
    let hot = with_frame(&lines, "fx_gohot", "main.hotLoop");
    assert!(total > 100, "{total}: {lines:?}");
    assert!(pct(hot, total) >= 95.0, "{hot} of {total}: {lines:?}");
    let perf = perf_share(&report, "main.hotLoop");
    assert!(
        (pct(hot, total) - perf).abs() < 5.0,
        "bprof {hot}/{total}, perf {perf}%\n{report}"
    );

    let (lines, report) = profile_live_with_perf(&go_stripped(), &dir);
    let total = total_for(&lines, "fx_gohot_s");
    let hot = with_frame(&lines, "fx_gohot_s", "main.hotLoop");
    let inlined = with_frame(&lines, "fx_gohot_s", "main.mix");
    assert!(total > 100, "{total}: {lines:?}");
    assert!(pct(hot, total) >= 95.0, "{hot} of {total}: {lines:?}");
    // main.mix runs inlined in hotLoop's loop: most samples are in it.
    assert!(
        pct(inlined, total) > 50.0,
        "{inlined} of {total}: {lines:?}"
    );
    // perf has no symbol to name it by.
    assert!(perf_share(&report, "main.hotLoop") < 1.0, "{report}");
}

/// A stripped Go program with a GNU build ID is named from its file after
/// it exits (`-- COMMAND`): its frames are kept by build ID, and its table
/// read from the file the side band saw mapped.
#[test]
fn a_stripped_go_program_with_a_build_id_is_named_after_it_exits() {
    root_or_skip!();
    let _g = exclusive();
    let bin = go_stripped_build_id();
    let (lines, _) = folded(&run(bprof()
        .args(["-F", "999", "-f", "--"])
        .arg(&bin)
        .arg("1.5")));
    let total = total_for(&lines, "fx_gohot_sb");
    let hot = with_frame(&lines, "fx_gohot_sb", "main.hotLoop");
    assert!(total > 100, "{total}: {lines:?}");
    assert!(pct(hot, total) >= 95.0, "{hot} of {total}: {lines:?}");
}

/// A C program linked without a build ID is named under `-p` while it
/// lives, as perf names it on the same run.
#[test]
fn a_program_without_a_build_id_is_named_under_p_while_it_lives() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("noid_c_live");
    let bin = c_fixture("nobuildid", "nobuildid", &["-Wl,--build-id=none"]);
    let (lines, report) = profile_live_with_perf(&bin, &dir);
    let total = total_for(&lines, "fx_nobuildid");
    let hot = with_frame(&lines, "fx_nobuildid", "nbid_hot");
    assert!(total > 100, "{total}: {lines:?}");
    assert!(pct(hot, total) >= 95.0, "{hot} of {total}: {lines:?}");
    let perf = perf_share(&report, "nbid_hot");
    assert!(
        (pct(hot, total) - perf).abs() < 5.0,
        "bprof {hot}/{total}, perf {perf}%\n{report}"
    );
}

/// The fixtures' names after their processes exit, and of a library
/// without a build ID closed before the profile ends: what the file
/// identities of mappings without a build ID are for.
#[test]
fn files_without_a_build_id_are_named_after_their_processes_exit() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("noid_exit");
    for (bin, comm, hot, perf_names) in [
        (go_plain(), "fx_gohot", "main.hotLoop", true),
        (go_stripped(), "fx_gohot_s", "main.hotLoop", false),
        (
            c_fixture("nobuildid", "nobuildid", &["-Wl,--build-id=none"]),
            "fx_nobuildid",
            "nbid_hot",
            true,
        ),
    ] {
        for mode in ["dwarf", "fp"] {
            let (lines, _) = folded(&run(bprof()
                .args(["-F", "999", "-f", "--call-graph", mode, "--"])
                .arg(&bin)
                .arg("1")));
            let total = total_for(&lines, comm);
            let named = pct(with_frame(&lines, comm, hot), total);
            assert!(named >= 95.0, "{mode}: {lines:?}");
            // perf on the same work (its own run), where it can name it.
            if perf_names && mode == "dwarf" {
                let perf = perf_shares(&bin, "1", &dir);
                let theirs = perf.get(hot).copied().unwrap_or(0.0);
                assert!(
                    (named - theirs).abs() < 5.0,
                    "bprof {named}%, perf {perf:?}"
                );
            }
        }
    }
    let bin = dlnoid();
    let (lines, _) = folded(&run(bprof()
        .args(["-F", "999", "-f", "--"])
        .arg(&bin)
        .arg("2")));
    let total = total_for(&lines, "fx_dlnoid");
    let lib = with_frame(&lines, "fx_dlnoid", "dlnoid_hot");
    let tail = with_frame(&lines, "fx_dlnoid", "main_tail");
    assert!(
        pct(lib, total) > 40.0 && pct(tail, total) > 40.0,
        "{lines:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// perf's report (self samples by symbol) of `perf record -p PID` while
/// `prof` runs: both profilers on the same process at once.
fn with_perf_on(pid: u32, dir: &Path, prof: impl FnOnce() -> Output) -> (Output, String) {
    let data = dir.join("perf.data");
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "--no-bpf-event",
            "-B",
            "-N",
            "-e",
            "cpu-clock:u",
        ])
        .args(["-F", "999", "-g", "-p", &pid.to_string(), "-o"])
        .arg(&data)
        .spawn_guarded();
    let out = prof();
    assert!(perf.wait().expect("perf").success(), "perf record failed");
    let rep = run(Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-n",
            "-s",
            "sym",
            "-q",
            "-i",
        ])
        .arg(&data));
    (out, String::from_utf8_lossy(&rep.stdout).into_owned())
}

/// The fixtures profiled with `-p` past their exit (the process exits
/// mid-profile), perf on the same process: their hot functions named in
/// at least 95% of their samples after they are gone (the stripped Go
/// program's by its own table: perf has no symbol for it), as perf names
/// them where it can; and the library closed before the end.
#[test]
fn files_without_a_build_id_are_named_when_their_process_exits_during_p() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("noid_p_exit");
    let c = c_fixture("nobuildid", "nobuildid", &["-Wl,--build-id=none"]);
    for (bin, comm, hot, perf_names) in [
        (go_plain(), "fx_gohot", "main.hotLoop", true),
        (go_stripped(), "fx_gohot_s", "main.hotLoop", false),
        (c, "fx_nobuildid", "nbid_hot", true),
    ] {
        for mode in ["dwarf", "fp"] {
            let work = Workload::start(Command::new(&bin).arg("1.5"));
            let pid = work.id();
            let (out, report) = with_perf_on(pid, &dir, || {
                run(bprof()
                    .args(["-F", "999", "-f", "--call-graph", mode, "-p"])
                    .arg(pid.to_string())
                    .arg("4"))
            });
            drop(work);
            let (lines, _) = folded(&out);
            let total = total_for(&lines, comm);
            let named = with_frame(&lines, comm, hot);
            assert!(total > 100, "{comm} {mode}: {total}: {lines:?}");
            assert!(pct(named, total) >= 95.0, "{comm} {mode}: {lines:?}");
            if perf_names {
                let perf = perf_share(&report, hot);
                assert!(
                    (pct(named, total) - perf).abs() < 5.0,
                    "{comm} {mode}: bprof {named}/{total}, perf {perf}%\n{report}"
                );
            }
        }
    }
    let bin = dlnoid();
    let work = Workload::start(Command::new(&bin).arg("2"));
    let pid = work.id();
    let (out, report) = with_perf_on(pid, &dir, || {
        run(bprof().args(["-F", "999", "-f", "-p", &pid.to_string(), "4"]))
    });
    drop(work);
    let (lines, _) = folded(&out);
    let total = total_for(&lines, "fx_dlnoid");
    let lib = with_frame(&lines, "fx_dlnoid", "dlnoid_hot");
    let tail = with_frame(&lines, "fx_dlnoid", "main_tail");
    assert!(
        pct(lib, total) > 35.0 && pct(lib + tail, total) >= 95.0,
        "{lines:?}"
    );
    // The two profilers attach at different moments of the library's
    // phase, so their shares of it differ by that gap; the closing phase
    // is seen whole by both: its samples agree, and perf names the
    // library too.
    let perf_tail = perf_samples(&report, "main_tail");
    assert!(
        perf_share(&report, "dlnoid_hot") > 20.0
            && (tail as f64 - perf_tail as f64).abs() <= 6.0 + 0.06 * perf_tail as f64,
        "bprof {lib} + {tail} of {total}, perf {perf_tail} in main_tail\n{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The dlopen fixture and its library, built without a build ID, side by
/// side (it loads `fx_dlnoid_lib.so` from its own directory).
fn dlnoid() -> PathBuf {
    c_fixture(
        "dlnoid_lib",
        "dlnoid_lib.so",
        &["-shared", "-fPIC", "-Wl,--build-id=none"],
    );
    c_fixture("dlnoid", "dlnoid", &["-Wl,--build-id=none"])
}

/// The dlopen fixture runs: it loads its library, spins in it, closes it
/// and spins in itself (the library's frames are named while it is loaded).
#[test]
fn the_dlopen_fixture_loads_and_closes_its_library() {
    root_or_skip!();
    let _g = exclusive();
    let bin = dlnoid();
    let work = Workload::start(Command::new(&bin).arg("4"));
    let pid = work.id().to_string();
    let (lines, _) = folded(&run(bprof().args(["-F", "999", "-f", "-p", &pid, "1"])));
    let total = total_for(&lines, "fx_dlnoid");
    let lib = with_frame(&lines, "fx_dlnoid", "dlnoid_hot");
    assert!(total > 100 && pct(lib, total) >= 95.0, "{lines:?}");
    let mut work = work;
    assert!(work.0.wait().expect("fixture").success());
}
