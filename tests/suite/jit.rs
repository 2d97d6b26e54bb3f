//! JIT frames named from perf maps and jitdumps, for processes that exited
//! before symbolization, and the same files planted by a hostile local
//! user (run as root; `nobody` plays the other user).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

const COMM: &str = "fx_jit";

/// Runs a shell script as nobody, asserting it succeeds.
fn as_nobody(script: &str) {
    let st = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .status()
        .expect("run setpriv");
    assert!(st.success(), "as nobody: {script}");
}

/// What one profile of the held JIT fixture gave.
struct Run {
    lines: Vec<Folded>,
    stderr: String,
    /// Peak RSS of bprof (and its command), KiB.
    max_rss_kib: i64,
    pid: u32,
}

impl Run {
    fn share(&self, frame: &str) -> f64 {
        pct(
            with_frame(&self.lines, COMM, frame),
            total_for(&self.lines, COMM),
        )
    }
    fn text(&self) -> String {
        let folded: Vec<String> = self.lines.iter().map(|l| l.frames.join(";")).collect();
        format!("{}\n{}", folded.join("\n"), self.stderr)
    }
}

/// `bprof -v -o FILE ARGS -- fx_jit SECS FLAGS+h` under `timeout -s KILL`
/// (a hang fails instead of stalling). The fixture prints its pid and code
/// address and waits: `plant(pid, addr)` runs then, before it writes its
/// own files and runs its code.
fn held(name: &str, args: &[&str], secs: &str, flags: &str, plant: impl FnOnce(u32, u64)) -> Run {
    held_env(name, args, &[], secs, flags, plant)
}

/// [`held`] with environment variables for the fixture.
fn held_env(
    name: &str,
    args: &[&str],
    env: &[(&str, &Path)],
    secs: &str,
    flags: &str,
    plant: impl FnOnce(u32, u64),
) -> Run {
    let dir = scratch(name);
    let folded = dir.join("out.folded");
    // GNU time reports bprof's peak RSS (with its command's): the rusage of
    // a process this test spawns would hold the test's own, which its child
    // inherits at exec.
    let rss = dir.join("maxrss");
    // Waited for with wait4 below.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("timeout")
        .args(["-s", "KILL", "60", "/usr/bin/time", "-f", "%M", "-o"])
        .arg(&rss)
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(["-F", "499", "-v", "--no-counts", "-o"])
        .arg(&folded)
        .args(args)
        .arg("--")
        .arg(fixture("jit"))
        .args([secs, &format!("{flags}h")])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .expect("fixture's first line");
    let mut words = first.split_whitespace();
    let pid: u32 = words.next().and_then(|w| w.parse().ok()).expect("pid");
    let addr = words
        .next()
        .and_then(|w| u64::from_str_radix(w, 16).ok())
        .expect("address");
    plant(pid, addr);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();

    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: child.id() is our unwaited child; both pointers are valid.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(r, child.id() as i32);
    let stderr = stderr_thread.join().unwrap();
    let st = std::process::ExitStatus::from_raw(status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(st.success(), "bprof failed ({st}): {stderr}");
    let text = std::fs::read_to_string(&folded).expect("folded output");
    let max_rss_kib = std::fs::read_to_string(&rss)
        .ok()
        .and_then(|t| t.lines().last()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS from time(1) in {}", rss.display()));
    Run {
        lines: parse_folded(&text),
        stderr,
        max_rss_kib,
        pid,
    }
}

fn map_path(pid: u32) -> String {
    format!("/tmp/perf-{pid}.map")
}

/// The frames of the fixture that perf names `name`, in percent of its
/// samples, from `perf record -g` + `perf script` of the same command.
fn perf_share(dir: &Path, cmd: &[&str], name: &str) -> f64 {
    let data = dir.join("perf.data");
    perf_record(&data, "499", cmd);
    let script = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .output()
        .expect("run perf script");
    let text = String::from_utf8_lossy(&script.stdout);
    // Samples are blank-line separated: a header line, then frames.
    let (mut total, mut named) = (0u64, 0u64);
    for sample in text.split("\n\n").filter(|s| s.starts_with(COMM)) {
        total += 1;
        if sample
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(name))
        {
            named += 1;
        }
    }
    pct(named, total)
}

#[test]
fn perf_map_of_an_exited_command_is_read_as_perf_does() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("jit_exited_keep");
    // Keeps its map at exit: perf names the frames too (at report time).
    let (argv, _maps) = keeping_its_map(&dir, "2");
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let perf = perf_share(&dir, &argv, "jit_spin");
    let out = run(bprof().args(["-F", "499", "-f", "-v", "--"]).args(&argv));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let ours = pct(
        with_frame(&lines, COMM, "jit_spin"),
        total_for(&lines, COMM),
    );
    assert!(perf > 80.0, "perf names {perf:.1}%");
    assert!(
        ours > 80.0,
        "bprof names {ours:.1}% (perf {perf:.1}%): {stderr}"
    );
    assert!(
        (ours - perf).abs() < 10.0,
        "bprof {ours:.1}% vs perf {perf:.1}%"
    );
}

/// The command line of `fx_jit SECS k PIDS`, which keeps its perf map at
/// exit (perf reads it after the run) and notes its pid in PIDS; and a
/// guard that removes the maps of every such run from /tmp when the test
/// ends, however it ends.
fn keeping_its_map(dir: &Path, secs: &str) -> (Vec<String>, KeptMaps) {
    let pids = dir.join("kept-map-pids");
    let argv = [
        fixture("jit").display().to_string(),
        secs.into(),
        "k".into(),
        pids.display().to_string(),
    ];
    (argv.into(), KeptMaps(pids))
}

/// Removes the perf maps of the pids listed in its file.
struct KeptMaps(std::path::PathBuf);

impl Drop for KeptMaps {
    fn drop(&mut self) {
        for pid in std::fs::read_to_string(&self.0).unwrap_or_default().lines() {
            let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", pid.trim()));
        }
    }
}

#[test]
fn dwarf_walks_jit_code_by_its_frame_pointer_to_main_as_perf_cannot() {
    root_or_skip!();
    let _g = exclusive();
    // The default call graph: dwarf. The JIT code has no table, so the
    // walker follows its frame pointer there (the fixture's code keeps
    // one), then main's .eh_frame up to _start.
    let r = held("jit_dwarf", &["-U"], "2", "", |_, _| {});
    let samples = assert_totals(&r.stderr, &r.lines);
    let total = total_for(&r.lines, COMM);
    assert!(total > 250, "{}", r.text());
    let jit = with_frame(&r.lines, COMM, "jit_spin");
    assert!(pct(jit, total) > 80.0, "{}", r.text());
    // Through the JIT frame to main and the root, frame for frame.
    let whole = [
        "_start",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "main",
        "jit_spin",
    ];
    let rooted: u64 = r
        .lines
        .iter()
        .filter(|l| l.frames[0] == COMM && l.frames[1..] == whole)
        .map(|l| l.count)
        .sum();
    assert!(
        rooted * 100 >= jit * 95,
        "{rooted} of {jit} JIT samples walked to _start\n{}",
        r.text()
    );
    let line = dwarf_line(&r.stderr);
    // One frame-pointer step per such stack: the JIT frame's.
    let by_fp = number_before(line, " by frame pointer");
    assert!(by_fp >= rooted, "{line}");
    // The JIT mapping is known from the side band's mmap record: the walk
    // does not ask the kernel for it every sample (only the samples before
    // that record was read may).
    let asked = number_before(line, " mappings asked of the kernel");
    assert!(asked * 20 < samples, "{line}");

    // perf --call-graph dwarf on the same command (its map kept for perf
    // script): it names the JIT frame as often, but cannot unwind code
    // without CFI, so its stacks end there; bprof's hottest stack is
    // perf's hottest continued to the root.
    let dir = scratch("jit_dwarf_perf");
    let (argv, _maps) = keeping_its_map(&dir, "2");
    let theirs = crate::unwind::perf_stacks(&dir, COMM, &argv);
    let perf_total: u64 = theirs.values().sum();
    let perf_jit: u64 = theirs
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|f| f == "jit_spin"))
        .map(|(_, n)| n)
        .sum();
    let (perf_hot, _) = theirs.iter().max_by_key(|(_, n)| **n).expect("perf stacks");
    let perf_hot: Vec<&str> = perf_hot.iter().map(String::as_str).collect();
    assert!(
        (pct(perf_jit, perf_total) - pct(jit, total)).abs() < 10.0,
        "jit_spin: perf {perf_jit} of {perf_total}, bprof {jit} of {total}"
    );
    assert!(
        !perf_hot.is_empty() && whole.ends_with(&perf_hot),
        "perf's hottest {perf_hot:?} is not the tail of {whole:?}"
    );
}

#[test]
fn perf_map_deleted_at_exit_is_still_read() {
    root_or_skip!();
    let _g = parallel();
    let r = held("jit_deleted", &[], "2", "", |_, _| {});
    assert!(
        !Path::new(&map_path(r.pid)).exists(),
        "the fixture deletes its map"
    );
    assert!(r.share("jit_spin") > 80.0, "{}", r.text());
}

#[test]
fn jitdump_loads_and_moves_name_frames() {
    root_or_skip!();
    let _g = parallel();
    let r = held("jit_dump", &[], "2", "d", |_, _| {});
    assert!(!Path::new(&format!("/tmp/jit-{}.dump", r.pid)).exists());
    // Named at the address the code moved to.
    assert!(r.share("jit_moved") > 80.0, "{}", r.text());
}

#[test]
fn a_command_running_as_another_user_gets_its_own_map_read() {
    root_or_skip!();
    // setpriv execs the fixture as nobody in the same process: the user
    // that counts is the one the process has when it writes its map.
    let _g = parallel();
    let out = run(bprof()
        .args(["-F", "499", "-f", "-v", "--no-counts", "--"])
        .args([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            fixture("jit").to_str().unwrap(),
            "1",
        ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let ours = pct(
        with_frame(&lines, COMM, "jit_spin"),
        total_for(&lines, COMM),
    );
    assert!(ours > 80.0, "{ours:.1}%: {stderr}");
    assert!(!stderr.contains("bprof: skipped"), "{stderr}");
}

#[test]
fn a_jitdump_is_found_where_the_process_mapped_it() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("jit_dump_dir_files");
    let r = held_env(
        "jit_dump_dir",
        &[],
        &[("JITDUMP_DIR", &dir)],
        "1",
        "d",
        |_, _| {},
    );
    let dump = dir.join(format!("jit-{}.dump", r.pid));
    assert!(dump.exists(), "left in place: {}", dump.display());
    assert!(!Path::new(&format!("/tmp/jit-{}.dump", r.pid)).exists());
    assert!(r.share("jit_moved") > 80.0, "{}", r.text());
}

#[test]
fn a_planted_map_of_the_processs_own_user_is_used() {
    root_or_skip!();
    // The control for the hostile cases below: planting works.
    let _g = parallel();
    let r = held("jit_planted_ok", &[], "1", "n", |pid, addr| {
        std::fs::write(map_path(pid), format!("{addr:x} 10 planted_by_owner\n")).unwrap();
    });
    let _ = std::fs::remove_file(map_path(r.pid));
    assert!(r.share("planted_by_owner") > 80.0, "{}", r.text());
}

#[test]
fn hostile_a_fifo_at_the_perf_map_path_does_not_hang() {
    root_or_skip!();
    let _g = parallel();
    let r = held("jit_fifo", &[], "1", "n", |pid, _| {
        as_nobody(&format!("mkfifo {}", map_path(pid)));
    });
    let _ = std::fs::remove_file(map_path(r.pid));
    let line = format!("bprof: skipped {}: not a regular file", map_path(r.pid));
    assert!(r.stderr.contains(&line), "{}", r.stderr);
    // Not named: anonymous executable memory without a usable map.
    assert!(r.share("[jit]") > 80.0, "{}", r.text());
}

#[test]
fn hostile_a_symlink_to_a_root_only_file_does_not_leak_it() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("jit_symlink");
    let secret = dir.join("secret");
    let r = held("jit_symlink_run", &[], "1", "n", |pid, addr| {
        // Root-only, and shaped like a perf map entry for the JIT code.
        std::fs::write(&secret, format!("{addr:x} 10 SECRET_s3cr3t\n")).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        as_nobody(&format!("ln -s {} {}", secret.display(), map_path(pid)));
    });
    let _ = std::fs::remove_file(map_path(r.pid));
    assert!(!r.text().contains("s3cr3t"), "{}", r.text());
    let line = format!("bprof: skipped {}: a symlink", map_path(r.pid));
    assert!(r.stderr.contains(&line), "{}", r.stderr);
}

#[test]
fn hostile_a_map_of_another_user_is_not_used() {
    root_or_skip!();
    let _g = parallel();
    let r = held("jit_other_user", &[], "1", "n", |pid, addr| {
        as_nobody(&format!(
            "printf '%x 10 forged_by_nobody\\n' {addr} > {}",
            map_path(pid)
        ));
    });
    let _ = std::fs::remove_file(map_path(r.pid));
    assert!(!r.text().contains("forged_by_nobody"), "{}", r.text());
    assert!(
        r.stderr.contains(&format!(
            "bprof: skipped {}: owned by uid 65534",
            map_path(r.pid)
        )),
        "{}",
        r.stderr
    );
}

/// A 200 MB map (sparse: one real line, then NULs without a newline).
fn plant_huge(pid: u32, addr: u64) {
    let f = std::fs::File::create(map_path(pid)).unwrap();
    (&f).write_all(format!("{addr:x} 10 huge_map_entry\n").as_bytes())
        .unwrap();
    f.set_len(200 << 20).unwrap();
}

#[test]
fn hostile_an_oversize_map_is_skipped_and_memory_stays_small() {
    root_or_skip!();
    let _g = parallel();
    let r = held("jit_huge", &[], "1", "n", plant_huge);
    let _ = std::fs::remove_file(map_path(r.pid));
    assert!(
        r.stderr.contains(&format!(
            "bprof: skipped {}: 209715200 bytes, over the size limit",
            map_path(r.pid)
        )),
        "{}",
        r.stderr
    );
    assert!(!r.text().contains("huge_map_entry"));
    eprintln!("peak RSS, 200 MB map skipped: {} KiB", r.max_rss_kib);
    assert!(r.max_rss_kib < 100 << 10, "peak RSS {} KiB", r.max_rss_kib);

    // Allowed, it is streamed: named, and memory still small.
    let r = held(
        "jit_huge_allowed",
        &["--max-perf-map-size", "300000000"],
        "1",
        "n",
        plant_huge,
    );
    let _ = std::fs::remove_file(map_path(r.pid));
    assert!(r.share("huge_map_entry") > 80.0, "{}", r.text());
    eprintln!("peak RSS, 200 MB map read: {} KiB", r.max_rss_kib);
    assert!(
        r.stderr.contains("1 malformed perf map lines"),
        "the NUL tail is one overlong line: {}",
        r.stderr
    );
    assert!(r.max_rss_kib < 100 << 10, "peak RSS {} KiB", r.max_rss_kib);
}

#[test]
fn a_map_in_another_mount_namespace_is_read_through_its_root() {
    root_or_skip!();
    let _g = parallel();
    // The command gets a private /tmp; bprof's /tmp never has its map.
    // The binary must stay reachable under the new /tmp (a checkout may
    // itself live in /tmp): run a copy from /var/tmp.
    let copy_dir =
        &std::path::PathBuf::from(format!("/var/tmp/bprof-jit-ns-{}", std::process::id()));
    std::fs::create_dir_all(copy_dir).unwrap();
    let _gone = RemovedAtEnd(copy_dir.clone());
    let bin = copy_dir.join("fx_jit");
    std::fs::copy(fixture("jit"), &bin).unwrap();
    let script = format!("mount -t tmpfs none /tmp && exec {} 2", bin.display());
    let out = run(bprof().args([
        "-F",
        "499",
        "-f",
        "-v",
        "--",
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let ours = pct(
        with_frame(&lines, COMM, "jit_spin"),
        total_for(&lines, COMM),
    );
    assert!(ours > 80.0, "{ours:.1}%: {lines:?} {stderr}");
}

#[test]
fn node_perf_basic_prof_frames_named_after_exit() {
    root_or_skip!();
    if Command::new("node").arg("--version").output().is_err() {
        panic!("node is not installed (scripts/install-deps.sh installs it)");
    }
    let _g = parallel();
    let dir = scratch("jit_node");
    let js = dir.join("fib.js");
    // node leaves /tmp/perf-PID.map behind: the one naming this fib.js goes.
    let _maps = NodeMaps(js.clone());
    std::fs::write(
        &js,
        "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
         const end = Date.now() + 2000; let s = 0;\n\
         while (Date.now() < end) s += fib(25);\n",
    )
    .unwrap();
    // node writes its isolate-*-v8.log into its working directory.
    let out = run(bprof()
        .args(["-F", "499", "-f", "--", "node", "--perf-basic-prof"])
        .arg(&js)
        .current_dir(&dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let node: Vec<&Folded> = lines.iter().filter(|l| l.frames[0] == "node").collect();
    let total: u64 = node.iter().map(|l| l.count).sum();
    let fib: u64 = node
        .iter()
        .filter(|l| {
            l.frames
                .iter()
                .any(|f| f.starts_with("JS:") && f.contains("fib"))
        })
        .map(|l| l.count)
        .sum();
    assert!(
        pct(fib, total) > 70.0,
        "{fib} of {total} samples in JS fib: {stderr}"
    );
}

#[test]
fn hostile_a_fifo_does_not_hang_a_profile_of_a_live_pid() {
    root_or_skip!();
    // -p: the process still runs at symbolization, where a blocking open
    // of its perf map would wait forever.
    let _g = parallel();
    let mut jit = Command::new(fixture("jit"))
        .args(["3", "nh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn_guarded();
    let mut first = String::new();
    BufReader::new(jit.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let pid = jit.id();
    as_nobody(&format!("mkfifo {}", map_path(pid)));
    jit.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = run(Command::new("timeout")
        .args(["-s", "KILL", "30"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args([
            "-F",
            "499",
            "-v",
            "-f",
            "--no-counts",
            "-p",
            &pid.to_string(),
            "1",
        ]));
    let _ = jit.wait();
    let _ = std::fs::remove_file(map_path(pid));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains(&format!(
            "bprof: skipped {}: not a regular file",
            map_path(pid)
        )),
        "{stderr}"
    );
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert!(total_for(&lines, COMM) > 100, "{lines:?}");
}

#[test]
fn a_bad_size_cap_is_one_line() {
    root_or_skip!();
    let out = run(bprof().args(["--max-perf-map-size", "64MiB", "-f", "1"]));
    let line = assert_one_line_error(&out);
    assert!(line.contains("--max-perf-map-size '64MiB'"), "{line}");
}
