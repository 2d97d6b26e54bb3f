//! Bad input: one clear line on stderr, a non-zero exit, never a panic.

use std::process::Command;

use crate::common::*;

fn err_of(args: &[&str]) -> String {
    assert_one_line_error(&run(bprof().args(args)))
}

#[test]
fn unknown_pid() {
    root_or_skip!();
    let line = err_of(&["-p", "4000000", "1"]);
    assert!(line.contains("no such process: 4000000"), "{line}");
    let line = err_of(&["-p", "abc", "1"]);
    assert!(line.contains("invalid PID 'abc'"), "{line}");
}

#[test]
fn bad_frequency_period_duration_and_event() {
    for (args, want) in [
        (&["-F", "0", "1"][..], "invalid frequency '0'"),
        (&["-F", "abc", "1"][..], "invalid frequency 'abc'"),
        (&["-F", "-5", "1"][..], "unexpected argument '-5'"),
        // Above the kernel's limit it is lowered, not refused (habits.rs).
        (
            &["-e", "cycles:x", "1"][..],
            "invalid modifier in event 'cycles:x'",
        ),
        (&["-c", "0", "1"][..], "invalid period '0'"),
        (&["-F", "99", "-c", "100", "1"][..], "cannot be used with"),
        (&["0"][..], "invalid duration '0'"),
        (&["soon"][..], "invalid duration 'soon'"),
        (&["-e", "bogus", "1"][..], "unknown event 'bogus'"),
        (&["-C", "9999", "1"][..], "CPU 9999 is not online"),
        (&["-C", "1-x", "1"][..], "invalid CPU list"),
        (
            &["--stack-storage-size", "0", "1"][..],
            "invalid --stack-storage-size",
        ),
        (&["-U", "-K", "1"][..], "cannot be used with"),
        (&["--bogus-flag"][..], "unexpected argument"),
    ] {
        let line = err_of(args);
        assert!(line.contains(want), "{args:?}: {line}");
    }
}

#[test]
fn command_not_found() {
    root_or_skip!();
    let _g = parallel();
    let line = err_of(&["-f", "--", "/definitely/not/here"]);
    assert!(line.contains("command not found"), "{line}");
    let line = err_of(&["-f", "--", "no-such-command-bprof"]);
    assert!(
        line.contains("command not found: no-such-command-bprof"),
        "{line}"
    );
}

#[test]
fn unwritable_output() {
    root_or_skip!();
    let line = err_of(&["-o", "/nonexistent-dir/out.folded", "1"]);
    assert!(
        line.contains("cannot write /nonexistent-dir/out.folded"),
        "{line}"
    );
    let line = err_of(&["--svg", "/proc/flame.svg", "1"]);
    assert!(line.contains("cannot write /proc/flame.svg"), "{line}");
}

#[test]
fn not_privileged() {
    root_or_skip!();
    let _g = parallel();
    let out = run(Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .arg("1"));
    let line = assert_one_line_error(&out);
    assert!(line.contains("not privileged"), "{line}");
    assert!(
        line.contains("CAP_BPF") && line.contains("CAP_PERFMON"),
        "{line}"
    );
    assert!(line.contains("perf_event_paranoid"), "{line}");
}

#[test]
fn kernel_without_btf() {
    root_or_skip!();
    let _g = parallel();
    let out = run(bprof()
        .env("BPROF_KERNEL_BTF", "/nonexistent/btf/vmlinux")
        .arg("1"));
    let line = assert_one_line_error(&out);
    assert!(line.contains("kernel without BTF"), "{line}");
}

/// Numbers at the edges, under a 1 GiB address-space limit so an expansion
/// before the check would fail loudly: one line naming what was wrong,
/// exit 2, never a panic (101) or an abort (134).
#[test]
fn hostile_numeric_extremes_are_refused_before_use() {
    let _g = parallel();
    for (args, want) in [
        (&["1e300"][..], "invalid duration '1e300'"),
        (&["nan"][..], "invalid duration 'nan'"),
        (&["inf"][..], "invalid duration 'inf'"),
        (&["1e-400"][..], "invalid duration '1e-400'"),
        (&["40000000"][..], "at most a year"),
        (
            &["stat", "-I", "1e22", "1"][..],
            "invalid interval (-I) '1e22'",
        ),
        (
            &["stat", "-I", "nan", "1"][..],
            "invalid interval (-I) 'nan'",
        ),
        (&["stat", "-a", "1e300"][..], "invalid duration '1e300'"),
        (
            &["-C", "0-4294967295", "1"][..],
            "CPU 4294967295 is not online",
        ),
        (
            &["stat", "-C", "0-4294967295", "1"][..],
            "CPU 4294967295 is not online",
        ),
        (&["-p", "99999999999", "1"][..], "invalid PID"),
        (
            &["-c", "18446744073709551615", "1"][..],
            "(-c): must be below 2^63",
        ),
        (
            &["--off-cpu", "-F", "99", "1"][..],
            "-F, -c and -e do not apply",
        ),
        (
            &["--stack-storage-size", "16777216", "1"][..],
            "at most 1024 MiB",
        ),
    ] {
        let out = run(Command::new("prlimit")
            .arg("--as=1073741824")
            .arg(env!("CARGO_BIN_EXE_bprof"))
            .args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let line = assert_one_line_error(&out);
        assert!(line.contains(want), "{args:?}: {line}");
    }
}
