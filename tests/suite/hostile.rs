//! Root on a shared machine: outputs are never destroyed, the profiled
//! command never outlives bprof by surprise (run as root). Every bprof that
//! could hang runs under an outer `timeout -s KILL`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A filter no sample passes: a profile of nothing.
const NOTHING: &str = "period > 0xffffffffffff";

fn bounded(args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(args);
    c
}

fn wait_for_pid(file: &Path) -> u32 {
    for _ in 0..1000 {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} never written", file.display());
}

/// Whether `pid` is gone (or a zombie nobody will ever wait for... it is
/// reaped by init once bprof is gone, so give it a moment).
fn gone(pid: u32) -> bool {
    for _ in 0..200 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        if state.is_none_or(|s| s.contains(") Z")) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn hostile_empty_profiles_leave_existing_outputs_and_symlinks_alone() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    let dir = scratch("hostile_empty");
    let folded = dir.join("old.folded");
    std::fs::write(&folded, "old 1\n").unwrap();
    let target = dir.join("target.svg");
    std::fs::write(&target, "precious").unwrap();
    let link = dir.join("link.svg");
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let out = run(
        bounded(&["--no-counts", "-F", "499", "--filter", NOTHING, "-o"])
            .arg(&folded)
            .arg("--svg")
            .arg(&link)
            .arg("--")
            .arg(&bin)
            .arg("0.3"),
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("bprof: 0 samples"), "{err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(std::fs::read_to_string(&folded).unwrap(), "old 1\n");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    // Nothing else (no temporary) left beside them.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);

    // A special file: written in place, never removed.
    let out = run(bounded(&[
        "--no-counts",
        "-F",
        "499",
        "--filter",
        NOTHING,
        "--svg",
        "/dev/stdout",
        "--",
    ])
    .arg(&bin)
    .arg("0.3"));
    assert!(!out.status.success());
    assert!(Path::new("/dev/stdout").exists());
    assert!(std::fs::symlink_metadata("/dev/stdout")
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn hostile_one_file_for_two_outputs_is_refused_before_anything_runs() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_same");
    let a = dir.join("a");
    std::fs::write(&a, "keep").unwrap();
    std::fs::hard_link(&a, dir.join("hard")).unwrap();
    for svg in [a.clone(), dir.join(".").join("a"), dir.join("hard")] {
        let out = run(bprof().arg("-o").arg(&a).arg("--svg").arg(&svg).arg("1"));
        assert_eq!(out.status.code(), Some(2));
        let line = assert_one_line_error(&out);
        assert!(line.contains("are the same file"), "{line}");
    }
    let new = dir.join("new");
    let out = run(bprof()
        .arg("-o")
        .arg(&new)
        .arg("--svg")
        .arg(dir.join("..").join("hostile_same").join("new"))
        .arg("1"));
    assert!(assert_one_line_error(&out).contains("are the same file"));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "keep");
    assert!(!new.exists());
}

#[test]
fn hostile_a_killed_profile_leaves_the_old_output_whole() {
    root_or_skip!();
    let _g = parallel();
    let bin = fixture("work631");
    let dir = scratch("hostile_killed");
    let out_file = dir.join("out.folded");
    std::fs::write(&out_file, "old 1\n").unwrap();
    let ready = ready_path();
    let mut b = bprof()
        .args(["--no-counts", "-F", "499", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&out_file)
        .arg("--")
        .arg(&bin)
        .arg("5")
        .stderr(Stdio::null())
        .spawn_guarded();
    wait_ready(&ready, &mut b);
    let _ = (b.kill(), b.wait());
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "old 1\n");
}

#[test]
fn hostile_a_closed_pipe_is_success_and_stops_the_command() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_pipe");
    let pidf = dir.join("pid");
    let svg = dir.join("f.svg");
    let json = dir.join("stats.json");
    // The reader is gone before bprof writes (`true` reads nothing), so the
    // write to stdout fails for certain; `head -1` would take a first line
    // that may well fit in the pipe buffer along with the rest.
    let cmd = format!(
        "{} --no-counts -F 499 -f --svg {} --stats-json {} -- sh -c 'echo $$ > {}; exec {} 1' | true; exit ${{PIPESTATUS[0]}}",
        env!("CARGO_BIN_EXE_bprof"),
        svg.display(),
        json.display(),
        pidf.display(),
        fixture("work631").display()
    );
    let out = run(Command::new("timeout").args(["-s", "KILL", "60", "bash", "-c", &cmd]));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(gone(wait_for_pid(&pidf)));
    // Files are written before stdout: the closed pipe costs none of them,
    // and the summary still goes to stderr; the graph holds every sample.
    let (samples, lost, _) = summary_numbers(&err);
    assert_eq!(lost, 0, "{err}");
    let graph = std::fs::read_to_string(&svg).unwrap();
    let in_graph: u64 = graph
        .split_once("total_samples=\"")
        .and_then(|(_, r)| r.split('"').next()?.parse().ok())
        .expect("the flame graph still written, with its total");
    assert_eq!(in_graph, samples, "{err}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary["samples"]["counted"], samples);

    // bprof stat printing intervals (on stderr, as perf stat) into a closed
    // pipe: stops, exit 0, the command is not left running.
    let cmd = format!(
        "{} stat -I 200 -e task-clock -- sh -c 'echo $$ > {}; exec sleep 60' 2>&1 >/dev/null | head -1 > /dev/null; exit ${{PIPESTATUS[0]}}",
        env!("CARGO_BIN_EXE_bprof"),
        pidf.display(),
    );
    let _ = std::fs::remove_file(&pidf);
    let t = Instant::now();
    let out = run(Command::new("timeout").args(["-s", "KILL", "60", "bash", "-c", &cmd]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(gone(wait_for_pid(&pidf)), "the command outlived bprof");
}

#[test]
fn hostile_sighup_writes_the_outputs_and_stops_the_command() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_hup");
    let pidf = dir.join("pid");
    let folded = dir.join("out.folded");
    let ready = ready_path();
    let mut b = bprof()
        .args(["--no-counts", "-F", "499", "--ready-file"])
        .arg(&ready)
        .arg("-o")
        .arg(&folded)
        .arg("--")
        .args(["sh", "-c"])
        .arg(format!(
            "echo $$ > {}; exec {} 30",
            pidf.display(),
            fixture("work631").display()
        ))
        .stderr(Stdio::piped())
        .spawn_guarded();
    let pid = wait_for_pid(&pidf);
    wait_ready(&ready, &mut b);
    // Recording time, not a barrier: the outputs must hold samples.
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(b.id() as i32, libc::SIGHUP) };
    let t = Instant::now();
    let status = b.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(20));
    assert!(gone(pid));
    let lines = parse_folded(&std::fs::read_to_string(&folded).unwrap());
    assert!(
        lines.iter().map(|l| l.count).sum::<u64>() > 50,
        "{status:?}"
    );
}

#[test]
fn hostile_a_command_ignoring_sigterm_gets_sigkill_and_dies_with_bprof() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_term");
    let pidf = dir.join("pid");
    // The duration ends first; SIGTERM is ignored; SIGKILL follows.
    let t = Instant::now();
    let out = run(bounded(&["--no-counts", "-F", "99", "-o"])
        .arg(dir.join("out.folded"))
        .arg("1")
        .arg("--")
        .args(["sh", "-c"])
        .arg(format!(
            "trap '' TERM; echo $$ > {}; exec sleep 60",
            pidf.display()
        )));
    assert!(t.elapsed() < Duration::from_secs(20), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(it ended with signal 9)"),
        "{}",
        stderr(&out)
    );
    assert!(gone(wait_for_pid(&pidf)));

    // bprof itself killed: the command goes with it (PR_SET_PDEATHSIG).
    let _ = std::fs::remove_file(&pidf);
    let mut b = bprof()
        .args(["--no-counts", "-F", "99", "--"])
        .args(["sh", "-c"])
        .arg(format!(
            "trap '' TERM; echo $$ > {}; exec sleep 60",
            pidf.display()
        ))
        .stderr(Stdio::null())
        .spawn_guarded();
    let pid = wait_for_pid(&pidf);
    let _ = (b.kill(), b.wait());
    assert!(gone(pid), "the command outlived a killed bprof");
}
