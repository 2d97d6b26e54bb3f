//! Frames named from the file the process really mapped: a binary or
//! library replaced or deleted while it runs, one replaced after it
//! exited, a program run from a memfd, programs in a container's mount
//! namespace and root (a chroot, an overlayfs root), and many short
//! programs whose first milliseconds come before their tables (run as
//! root).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// `fixtures/twonames.c` built with PREFIX `name` (alpha, beta), with or
/// without a GNU build ID.
fn twonames(name: &str, build_id: bool) -> PathBuf {
    let def = format!("-DPREFIX={name}");
    let out = format!("{name}{}", if build_id { "" } else { "_noid" });
    let mut extra = vec![def.as_str()];
    if !build_id {
        extra.push("-Wl,--build-id=none");
    }
    c_fixture("twonames", &out, &extra)
}

fn folded(out: &std::process::Output) -> (Vec<Folded>, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    (lines, err)
}

/// Samples of `comm` whose user stack is whole: its outermost frame is
/// `root`, and no frame says the walk ended early.
fn whole(lines: &[Folded], comm: &str, root: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames[0] == comm)
        .filter(|l| l.frames.get(1).is_some_and(|f| f == root))
        .filter(|l| !l.frames.iter().any(|f| f == "[truncated]"))
        .map(|l| l.count)
        .sum()
}

/// Samples of `comm` with a frame starting with `prefix`.
fn with_prefix(lines: &[Folded], comm: &str, prefix: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames[0] == comm && l.frames.iter().any(|f| f.starts_with(prefix)))
        .map(|l| l.count)
        .sum()
}

/// Samples of `comm` with a frame no file was known for: `[unknown]`
/// without a module.
fn without_module(lines: &[Folded], comm: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames[0] == comm && l.frames.iter().any(|f| f == "[unknown]"))
        .map(|l| l.count)
        .sum()
}

/// A program replaced at its path while it runs (the new file renamed over
/// it, as a package upgrade does), or deleted, is named from the file it
/// mapped, under `-p`, with whole stacks; with and without a build ID.
#[test]
fn a_running_program_replaced_or_deleted_is_named_from_the_file_it_mapped() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("mapped_replaced");
    for build_id in [true, false] {
        for replace in [true, false] {
            let prog = dir.join("fx_prog");
            std::fs::copy(twonames("alpha", build_id), &prog).unwrap();
            let work = Workload::start(Command::new(&prog).arg("4"));
            if replace {
                let new = dir.join("fx_prog.new");
                std::fs::copy(twonames("beta", build_id), &new).unwrap();
                std::fs::rename(&new, &prog).unwrap();
            } else {
                std::fs::remove_file(&prog).unwrap();
            }
            let pid = work.id().to_string();
            let (lines, err) = folded(&run(bprof().args(["-F", "499", "-f", "-p", &pid, "1"])));
            let total = total_for(&lines, "fx_prog");
            let named = with_frame(&lines, "fx_prog", "alpha_inner");
            let how = format!("build ID {build_id}, replaced {replace}");
            assert!(total > 50, "{how}: {lines:?}\n{err}");
            assert_eq!(
                with_prefix(&lines, "fx_prog", "beta_"),
                0,
                "{how}: {lines:?}"
            );
            assert!(pct(named, total) >= 95.0, "{how}: {lines:?}");
            assert!(
                pct(whole(&lines, "fx_prog", "_start"), total) >= 95.0,
                "{how}: {lines:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A library replaced while a process has it loaded is named from the
/// file the process mapped.
#[test]
fn a_loaded_library_replaced_on_disk_is_named_from_the_file_it_mapped() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("mapped_lib_replaced");
    let bin = dir.join("fx_dlnoid");
    std::fs::copy(
        c_fixture("dlnoid", "dlnoid", &["-Wl,--build-id=none"]),
        &bin,
    )
    .unwrap();
    let lib = dir.join("fx_dlnoid_lib.so");
    std::fs::copy(
        c_fixture(
            "dlnoid_lib",
            "dlnoid_lib.so",
            &["-shared", "-fPIC", "-Wl,--build-id=none"],
        ),
        &lib,
    )
    .unwrap();
    // The same code under another name, renamed over the loaded one.
    let other = c_fixture(
        "dlnoid_lib",
        "dlnoid_lib_other.so",
        &[
            "-shared",
            "-fPIC",
            "-Wl,--build-id=none",
            "-Ddlnoid_hot=other_hot",
        ],
    );
    let work = Workload::start(Command::new(&bin).arg("8"));
    let new = dir.join("lib.new");
    std::fs::copy(other, &new).unwrap();
    std::fs::rename(&new, &lib).unwrap();
    let pid = work.id().to_string();
    let (lines, _) = folded(&run(bprof().args(["-F", "499", "-f", "-p", &pid, "1"])));
    let total = total_for(&lines, "fx_dlnoid");
    assert!(total > 50, "{lines:?}");
    assert_eq!(with_frame(&lines, "fx_dlnoid", "other_hot"), 0, "{lines:?}");
    let hot = with_frame(&lines, "fx_dlnoid", "dlnoid_hot");
    assert!(pct(hot, total) >= 95.0, "{lines:?}");
    assert!(
        pct(whole(&lines, "fx_dlnoid", "_start"), total) >= 95.0,
        "{lines:?}"
    );
    drop(work);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binary rebuilt at its path after its process exited (within the
/// profile) never names that process's frames: they are named from the
/// file the process mapped, or not at all; under both call-graph modes.
#[test]
fn a_binary_replaced_after_its_process_exited_never_names_its_frames() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("mapped_rebuilt");
    for build_id in [false, true] {
        for mode in ["dwarf", "fp"] {
            let prog = dir.join("fx_prog");
            std::fs::copy(twonames("alpha", build_id), &prog).unwrap();
            let beta = twonames("beta", build_id);
            // Run, then rebuild: the new file written over the old path
            // (a new inode, which may reuse the old one's number).
            let script = format!(
                "{p} 1; rm -f {p}; cp {b} {p}; sleep 0.2",
                p = prog.display(),
                b = beta.display()
            );
            let (lines, err) = folded(&run(bprof()
                .args(["-F", "499", "-f", "--call-graph", mode, "--", "sh", "-c"])
                .arg(&script)));
            let how = format!("build ID {build_id}, {mode}");
            let total = total_for(&lines, "fx_prog");
            assert!(total > 50, "{how}: {lines:?}\n{err}");
            assert_eq!(
                with_prefix(&lines, "fx_prog", "beta_"),
                0,
                "{how}: {lines:?}"
            );
            // Kept open since it ran: named all the same.
            let named = with_frame(&lines, "fx_prog", "alpha_inner");
            assert!(pct(named, total) >= 95.0, "{how}: {lines:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program run from a memfd (its only name `/memfd:NAME (deleted)`) is
/// named and walked whole, under `-- COMMAND` and under `-p`.
#[test]
fn a_program_run_from_a_memfd_is_named() {
    root_or_skip!();
    let _g = exclusive();
    let runner = fixture("memexec");
    let prog = twonames("alpha", false);
    let (lines, err) = folded(&run(bprof()
        .args(["-F", "499", "-f", "--"])
        .arg(&runner)
        .arg(&prog)
        .arg("1")));
    // The comm of a program exec'd from a memfd is the memfd's name on
    // newer kernels, its descriptor's number on older ones.
    let comm_of = |lines: &[Folded]| {
        lines
            .iter()
            .find(|l| l.frames.iter().any(|f| f == "alpha_inner"))
            .map(|l| l.frames[0].clone())
            .unwrap_or_else(|| panic!("alpha_inner never named: {lines:?}"))
    };
    let comm = &comm_of(&lines);
    let total = total_for(&lines, comm);
    assert!(total > 100, "{lines:?}\n{err}");
    assert!(
        pct(with_frame(&lines, comm, "alpha_inner"), total) >= 95.0,
        "{lines:?}"
    );
    assert!(
        pct(whole(&lines, comm, "_start"), total) >= 90.0,
        "{lines:?}"
    );

    let work = Workload::start(Command::new(&runner).arg(&prog).arg("4"));
    let pid = work.id().to_string();
    let (lines, _) = folded(&run(bprof().args(["-F", "499", "-f", "-p", &pid, "1"])));
    let comm = &comm_of(&lines);
    let total = total_for(&lines, comm);
    assert!(total > 50, "{lines:?}");
    assert!(
        pct(with_frame(&lines, comm, "alpha_inner"), total) >= 95.0,
        "{lines:?}"
    );
    assert!(
        pct(whole(&lines, comm, "_start"), total) >= 95.0,
        "{lines:?}"
    );
}

/// Twenty short programs (each a new file, so no table of it is loaded
/// before it runs) started by a script, and a library loaded with dlopen
/// and closed again: every frame has at least its module.
#[test]
fn short_programs_and_a_dlopened_library_have_no_frame_without_a_module() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("mapped_short");
    let mut script = String::new();
    for i in 0..20 {
        let p = dir.join(format!("fx_short{i:02}"));
        std::fs::copy(twonames("alpha", i % 2 == 0), &p).unwrap();
        script += &format!("{} 0.05\n", p.display());
    }
    let (lines, err) = folded(&run(bprof()
        .args(["-F", "999", "-f", "-v", "--", "sh", "-c"])
        .arg(&script)));
    let mut total = 0;
    for i in 0..20 {
        let comm = format!("fx_short{i:02}");
        total += total_for(&lines, &comm);
        assert_eq!(without_module(&lines, &comm), 0, "{comm}: {lines:?}\n{err}");
    }
    assert!(total > 200, "{total}: {lines:?}");
    let named: u64 = (0..20)
        .map(|i| with_frame(&lines, &format!("fx_short{i:02}"), "alpha_inner"))
        .sum();
    assert!(pct(named, total) >= 95.0, "{named} of {total}: {lines:?}");

    let bin = c_fixture("dlnoid", "dlnoid", &["-Wl,--build-id=none"]);
    c_fixture(
        "dlnoid_lib",
        "dlnoid_lib.so",
        &["-shared", "-fPIC", "-Wl,--build-id=none"],
    );
    let (lines, _) = folded(&run(bprof()
        .args(["-F", "999", "-f", "--"])
        .arg(&bin)
        .arg("1")));
    assert_eq!(without_module(&lines, "fx_dlnoid"), 0, "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A mount made for a test, unmounted when it ends however it ends.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// One container-like root: `dir` holding the programs, used as is (a
/// chroot) or as the lower layer of an overlayfs the test mounts.
struct Root {
    dir: PathBuf,
    _mount: Option<Mounted>,
}

fn roots(base: &Path, programs: &[(PathBuf, &str)]) -> Vec<Root> {
    let plain = base.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for (bin, name) in programs {
        std::fs::copy(bin, plain.join(name)).unwrap();
    }
    let (upper, work, merged) = (base.join("upper"), base.join("work"), base.join("merged"));
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        plain.display(),
        upper.display(),
        work.display()
    );
    let ok = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .status()
        .expect("run mount");
    assert!(ok.success(), "mounting an overlayfs");
    vec![
        Root {
            dir: plain,
            _mount: None,
        },
        Root {
            dir: merged.clone(),
            _mount: Some(Mounted(merged)),
        },
    ]
}

/// `unshare -m -p -f chroot ROOT /NAME SECS`, as a container runs it.
fn in_container(root: &Path, name: &str, secs: &str) -> Command {
    // The comm of /NAME is NAME.
    let mut c = Command::new("unshare");
    c.args(["-m", "-p", "-f", "chroot"])
        .arg(root)
        .arg(format!("/{name}"))
        .arg(secs);
    c
}

/// The pid of the program a container runs (unshare's child), once it
/// says it is ready (`/ready` inside its root).
fn container_pid(unshare: u32, ready: &Path) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ready.exists() {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = run(Command::new("pgrep").args(["-P", &unshare.to_string()]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("the container's program")
}

/// Programs in their own mount namespace and root (a chroot, and an
/// overlayfs root the test mounts, as container runtimes do), profiled
/// live (`-p`) and under `-- COMMAND` until they exit: static programs
/// without frame pointers with and without a build ID, and a Go program
/// with and without its symbols. Stacks whole, names found, and a fixed
/// loop in few unique stacks.
#[test]
fn programs_in_containers_are_walked_and_named_live_and_after_they_exit() {
    root_or_skip!();
    let _g = exclusive();
    let base = scratch("mapped_containers");
    let stat = ["-O2", "-fomit-frame-pointer", "-static"];
    let noid = [&stat[..], &["-Wl,--build-id=none"]].concat();
    let programs: Vec<(PathBuf, &str, &str, &str)> = vec![
        (
            c_fixture("crunch", "crunch_static", &stat),
            "cprog",
            "_start",
            "crunch",
        ),
        (
            c_fixture("crunch", "crunch_static_noid", &noid),
            "cprognoid",
            "_start",
            "crunch",
        ),
        (
            go_fixture("gohot", "gohot", ""),
            "goprog",
            "runtime.goexit",
            "main.hotLoop",
        ),
        (
            go_fixture("gohot", "gohot_s", "-s -w"),
            "goprog_s",
            "runtime.goexit",
            "main.hotLoop",
        ),
    ];
    let files: Vec<(PathBuf, &str)> = programs.iter().map(|p| (p.0.clone(), p.1)).collect();
    for root in roots(&base, &files) {
        for (_, name, outer, hot) in &programs {
            // Live: -p on the running program.
            let ready = root.dir.join("ready");
            let _ = std::fs::remove_file(&ready);
            let work = Workload(
                in_container(&root.dir, name, "4")
                    .env("BPROF_READY", "/ready")
                    .spawn()
                    .unwrap(),
            );
            let pid = container_pid(work.0.id(), &ready).to_string();
            let (live, err) = folded(&run(bprof().args(["-F", "499", "-f", "-p", &pid, "1.5"])));
            drop(work);
            // Exiting: the whole run under -- COMMAND.
            let (exited, err2) = folded(&run(bprof()
                .args([
                    "-F", "499", "-f", "--", "unshare", "-m", "-p", "-f", "chroot",
                ])
                .arg(&root.dir)
                .args([format!("/{name}").as_str(), "1.5"])));
            for (how, lines, err) in [("live", &live, &err), ("exited", &exited, &err2)] {
                let what = format!("{} {name} {how}", root.dir.display());
                let total = total_for(lines, name);
                assert!(total > 100, "{what}: {lines:?}\n{err}");
                let named = with_frame(lines, name, hot);
                assert!(
                    pct(named, total) >= 95.0,
                    "{what}: {named}/{total} {lines:?}"
                );
                let w = whole(lines, name, outer);
                assert!(pct(w, total) >= 95.0, "{what}: {w}/{total} {lines:?}");
                let stacks = lines.iter().filter(|l| l.frames[0] == *name).count();
                assert!(stacks <= 50, "{what}: {stacks} unique stacks: {lines:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// `bprof -- rustc` on a generated file: rustc's own libraries
/// (librustc_driver, BOLT-optimized, without a GNU build ID) name most of
/// its samples after it exits. Skipped where there is no Rust toolchain.
#[test]
fn rustc_is_named_after_it_exits() {
    root_or_skip!();
    let Ok(out) = Command::new("rustc").arg("--version").output() else {
        eprintln!("skipped: no rustc");
        return;
    };
    if !out.status.success() {
        eprintln!("skipped: no rustc");
        return;
    }
    let _g = exclusive();
    let dir = scratch("mapped_rustc");
    let src = dir.join("gen.rs");
    let mut text = String::from("#![allow(dead_code)]\n");
    for i in 0..400 {
        text += &format!(
            "pub fn f{i}<T: std::fmt::Debug + Clone>(x: T, n: usize) -> Vec<String> {{\n\
             (0..n).map(|k| format!(\"{{:?}} {{}} {{}}\", x.clone(), k, {i})).filter(|s| s.len() % 3 != {m}).collect()\n}}\n",
            m = i % 3
        );
    }
    text += "fn main() {\n";
    for i in 0..400 {
        text += &format!("    println!(\"{{:?}}\", f{i}(\"{i}\", {}));\n", i % 7);
    }
    text += "}\n";
    std::fs::write(&src, text).unwrap();
    let (lines, err) = folded(&run(bprof()
        .args([
            "-F",
            "499",
            "-f",
            "--",
            "rustc",
            "--crate-type",
            "lib",
            "-o",
        ])
        .arg(dir.join("gen.rlib"))
        .arg(&src)));
    let _ = std::fs::remove_dir_all(&dir);
    // Every thread of the compiler (its comm is "rustc" and its workers').
    let total: u64 = lines.iter().map(|l| l.count).sum();
    // A rustc crate's function, free or in an impl (`<rustc_middle::...`).
    let rustc: u64 = lines
        .iter()
        .filter(|l| {
            l.frames
                .iter()
                .any(|f| f.trim_start_matches(['<', '&']).starts_with("rustc_"))
        })
        .map(|l| l.count)
        .sum();
    assert!(total > 100, "{total}\n{err}");
    assert!(pct(rustc, total) >= 50.0, "{rustc} of {total}\n{err}");
}
