//! Python frames: CPython walked by bprof's BPF program, on every
//! interpreter this machine has (Debian's static /usr/bin/python3.11 and
//! each pyenv CPython 3.10 to 3.13, shared libpython builds without frame
//! pointers), against the known shapes of fixtures/py631.py and against
//! py-spy 0.4 (scripts/install-deps.sh installs it) on the same runs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// Where pyenv keeps its versions.
fn pyenv_root() -> PathBuf {
    std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"))
}

/// Every interpreter bprof walks that this machine has: Debian's
/// python3.11, then pyenv's 3.10 to 3.13 (all patch releases present).
fn interpreters() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let debian = PathBuf::from("/usr/bin/python3.11");
    if debian.exists() {
        out.push(debian);
    }
    let mut pyenv: Vec<PathBuf> = std::fs::read_dir(pyenv_root().join("versions"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    pyenv.sort();
    for v in pyenv {
        let Some(name) = v.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        let minor: Vec<&str> = name.split('.').collect();
        if minor.len() < 2 || minor[0] != "3" || !["10", "11", "12", "13"].contains(&minor[1]) {
            continue;
        }
        let bin = v.join("bin").join(format!("python3.{}", minor[1]));
        if bin.exists() {
            out.push(bin);
        }
    }
    assert!(
        !out.is_empty(),
        "no CPython 3.10-3.13 here (Debian's python3.11 or pyenv)"
    );
    out
}

/// fixtures/py631.py.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/py631.py")
}

/// The comm of an interpreter's process: its file name, cut to 15 bytes.
fn comm(python: &Path) -> String {
    let name = python.file_name().unwrap().to_string_lossy().to_string();
    name.chars().take(15).collect()
}

/// py-spy's binary: on PATH, else in a pyenv version.
fn py_spy() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("py-spy"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let pyenv: Vec<PathBuf> = std::fs::read_dir(pyenv_root().join("versions"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin/py-spy"))
                .collect()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(pyenv)
        .find(|p| p.is_file())
        .expect("py-spy not found: pip install 'py-spy>=0.4,<0.5' (scripts/install-deps.sh)")
}

/// The name of a Python frame without its place: `heavy` of
/// `heavy (py631.py:42)`.
fn function(frame: &str) -> Option<&str> {
    let (name, place) = frame.rsplit_once(" (")?;
    place.ends_with(')').then_some(name)
}

/// The line of a Python frame in py631.py: 42 of `heavy (py631.py:42)`.
fn line_of(frame: &str) -> Option<u32> {
    frame
        .rsplit_once("(py631.py:")?
        .1
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// Samples of lines holding a Python frame named `name` (any line).
fn samples_in(lines: &[Folded], name: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| function(f) == Some(name)))
        .map(|l| l.count)
        .sum()
}

/// Shares (percent) of heavy, medium and light among the samples of the
/// three.
fn shares_631(lines: &[Folded]) -> [f64; 3] {
    let n = ["heavy", "medium", "light"].map(|f| samples_in(lines, f));
    let all: u64 = n.iter().sum();
    n.map(|x| pct(x, all))
}

/// The line (from 1) in the fixture where `what` (maybe several lines)
/// begins.
fn fixture_line(what: &str) -> u32 {
    let src = std::fs::read_to_string(script()).unwrap();
    let at = src
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in the fixture"));
    src[..at].matches('\n').count() as u32 + 1
}

/// A py631.py workload, started and ready.
fn start(python: &Path, mode: &str, secs: &str) -> Workload {
    Workload::start(Command::new(python).arg(script()).args([mode, secs]))
}

/// `bprof ARGS -v -o FILE` to completion; the folded lines and stderr,
/// after checking the totals add up (samples, or microseconds off-CPU:
/// what the outputs hold is what the kernel counted) and nothing was lost.
fn bprof_folded(dir: &Path, args: &[&str]) -> (Vec<Folded>, String) {
    bprof_folded_with(bprof(), dir, args)
}

/// [`bprof_folded`] with `cmd` as the bprof to run.
fn bprof_folded_with(mut cmd: Command, dir: &Path, args: &[&str]) -> (Vec<Folded>, String) {
    let out_file = dir.join("out.folded");
    let json = dir.join("stats.json");
    let out = run(cmd
        .args(["-v", "--no-counts", "-o"])
        .arg(&out_file)
        .arg("--stats-json")
        .arg(&json)
        .args(args));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "bprof {args:?} failed: {stderr}");
    let lines = parse_folded(&std::fs::read_to_string(&out_file).unwrap_or_default());
    let stats = std::fs::read_to_string(&json).expect("--stats-json");
    let number = |key: &str| -> u64 {
        let at = stats.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
        let digits: String = stats[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect(key)
    };
    assert_eq!(number("lost"), 0, "{stderr}");
    assert_eq!(total(&lines), number("counted_weight"), "{stderr}");
    (lines, stderr)
}

/// `bprof -F 499 -- PYTHON py631.py MODE SECS` through [`bprof_folded`].
fn profile_mode(dir: &Path, python: &Path, mode: &str, secs: &str) -> (Vec<Folded>, String) {
    bprof_folded(
        dir,
        &[
            "-F",
            "499",
            "--",
            python.to_str().unwrap(),
            script().to_str().unwrap(),
            mode,
            secs,
        ],
    )
}

/// The samples (or microseconds) of a profile's folded lines.
fn total(lines: &[Folded]) -> u64 {
    lines.iter().map(|l| l.count).sum()
}

/// The `-v` line on the Python walks.
fn python_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("bprof: python:"))
        .unwrap_or_else(|| panic!("no python line: {stderr}"))
}

/// py-spy's raw (folded) output, root first, as folded lines with a
/// leading `-` for the comm bprof's lines have.
fn py_spy_lines(file: &Path) -> Vec<Folded> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let prefixed: String = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("-;{l}\n"))
        .collect();
    parse_folded(&prefixed)
}

#[test]
// Long on purpose: one run per interpreter, each checked for shares, order, lines and py-spy's agreement.
fn python_631_has_its_shares_order_and_lines_on_every_interpreter_as_py_spy_sees_them() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("py631");
    let spy = py_spy();
    // heavy() at its entry, its loop or its call of unit(); work631 at
    // its call of heavy() (or the loop's test, between calls).
    let def_heavy = fixture_line("def heavy");
    let heavy_lines = [def_heavy, def_heavy + 1, def_heavy + 2];
    let work_lines = [
        fixture_line("    while time.monotonic() < end:\n        heavy"),
        fixture_line("        heavy()"),
    ];
    for python in interpreters() {
        // Started before bprof (-p), profiled by bprof and py-spy at once.
        let work = start(&python, "631", "12");
        let pid = work.id().to_string();
        let spy_out = dir.join("spy.txt");
        let spy_run = Command::new(&spy)
            .args([
                "record", "-p", &pid, "-d", "4", "-r", "199", "-f", "raw", "-o",
            ])
            .arg(&spy_out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_guarded();
        let (lines, stderr) = bprof_folded(&dir, &["-F", "499", "-p", &pid, "4"]);
        let spied = spy_run.wait_with_output().unwrap();
        assert!(
            spied.status.success(),
            "py-spy on {}: {}",
            python.display(),
            String::from_utf8_lossy(&spied.stderr)
        );
        drop(work);
        let total = total(&lines);
        let what = format!("{}: {stderr}", python.display());
        assert!(total > 500, "{what}");
        let comm = comm(&python);
        assert_eq!(total_for(&lines, &comm), total, "{what}");
        // Nearly every sample is in Python code, and walked to its root.
        let walked = samples_in(&lines, "<module>");
        assert!(pct(walked, total) > 90.0, "{walked} of {total}: {what}");
        assert!(
            python_line(&stderr).contains("reached the outermost frame"),
            "{what}"
        );
        let ours = shares_631(&lines);
        for (s, want) in ours.iter().zip([60.0, 30.0, 10.0]) {
            assert!((s - want).abs() < 6.0, "shares {ours:?}: {what}");
        }
        // Caller before callee, native root before Python, C leaves after.
        for l in lines
            .iter()
            .filter(|l| l.frames.iter().any(|f| f.starts_with("heavy (")))
        {
            let at = |name: &str| {
                l.frames
                    .iter()
                    .position(|f| function(f) == Some(name))
                    .unwrap_or_else(|| panic!("no {name} in {:?}: {what}", l.frames))
            };
            assert!(at("<module>") < at("main") && at("main") < at("work631"));
            assert!(at("work631") < at("heavy"), "{:?}", l.frames);
            let heavy = &l.frames[at("heavy")];
            let work631 = &l.frames[at("work631")];
            assert!(
                work_lines.contains(&line_of(work631).unwrap()),
                "{:?}",
                l.frames
            );
            assert!(
                heavy_lines.contains(&line_of(heavy).unwrap()),
                "{:?}",
                l.frames
            );
            if let Some(u) = l.frames.iter().position(|f| function(f) == Some("unit")) {
                assert!(u > at("heavy"));
                // Nothing of Python's below unit: its leaves are C.
                assert!(l.frames[u + 1..].iter().all(|f| function(f).is_none()));
            }
        }
        // py-spy on the same process over the same seconds.
        let spy_lines = py_spy_lines(&spy_out);
        let theirs = shares_631(&spy_lines);
        // Two samplings of one split differ by chance too: 6 points, or
        // 3.5 standard deviations of the difference where the samples are
        // few (py-spy's ~800 and bprof's ~2000 give about 6.6 for 60 %).
        let spied = spy_lines.iter().map(|l| l.count).sum::<u64>() as f64;
        for ((a, b), want) in ours.iter().zip(theirs).zip([0.6, 0.3, 0.1]) {
            let sd = (want * (1.0 - want) * (1.0 / spied + 1.0 / total as f64)).sqrt() * 100.0;
            assert!(
                (a - b).abs() < f64::max(6.0, 3.5 * sd),
                "bprof {ours:?}, py-spy {theirs:?} ({spied} samples): {what}"
            );
        }
        // The same line, most often, for each function.
        let busiest = |lines: &[Folded], name: &str| {
            let mut by_place: BTreeMap<&str, u64> = BTreeMap::new();
            for l in lines {
                for f in l.frames.iter().filter(|f| function(f) == Some(name)) {
                    *by_place.entry(f.as_str()).or_default() += l.count;
                }
            }
            by_place
                .into_iter()
                .max_by_key(|&(_, n)| n)
                .map(|(f, _)| f.to_string())
        };
        for name in ["heavy", "medium", "light", "work631", "main", "<module>"] {
            assert_eq!(
                busiest(&lines, name),
                busiest(&spy_lines, name),
                "{name}: {what}"
            );
        }
    }
}

#[test]
fn python_frames_are_the_same_under_the_kernel_fallbacks() {
    root_or_skip!();
    let _g = parallel();
    // Every fallback (BPROF_FALLBACK=all, as on 5.10): Python stacks' ids
    // from per-CPU counters, every map preallocated, the task read by its
    // address, and the frame walk, thread search and announcements in
    // open-coded loops of global functions (no bpf_loop), beside the normal
    // path on the same process, both with the dwarf walk.
    let python = interpreters().remove(0);
    let work = start(&python, "631", "12");
    let pid = work.id().to_string();
    let args = ["-F", "999", "-p", &pid, "4"];
    let dirs = [scratch("py-fallback-on"), scratch("py-fallback-off")];
    let [forced, normal] = std::thread::scope(|s| {
        let forced = s.spawn(|| {
            let mut cmd = bprof();
            cmd.env("BPROF_FALLBACK", "all");
            bprof_folded_with(cmd, &dirs[0], &args)
        });
        let normal = bprof_folded(&dirs[1], &args);
        [forced.join().expect("the forced run"), normal]
    });
    drop(work);
    assert!(
        forced
            .1
            .contains("bprof: fallbacks: ids from per-CPU counters (no atomic fetch), preallocated hash maps (no BPF memory allocator), the current task read by address (no bpf_get_current_task_btf, bpf_task_pt_regs), open-coded loops"),
        "{}",
        forced.1
    );
    let [a, b] = [&forced, &normal].map(|(lines, stderr)| {
        assert!(total(lines) > 500, "{stderr}");
        assert!(python_line(stderr).contains(", 0 lost"), "{stderr}");
        assert!(
            pct(samples_in(lines, "<module>"), total(lines)) > 90.0,
            "{stderr}"
        );
        shares_631(lines)
    });
    // Two samplers of interleaved work: each share is within ~1.25 points
    // of the other's (one sigma) at ~3000 samples of the three.
    for ((x, y), want) in a.iter().zip(&b).zip([60.0, 30.0, 10.0]) {
        assert!(
            (x - y).abs() <= 4.0,
            "with the fallbacks {a:?}, without {b:?}"
        );
        assert!((x - want).abs() <= 6.0, "with the fallbacks {a:?}");
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn python_c_extension_frames_sit_under_their_python_caller() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyhash");
    for python in interpreters() {
        let (lines, stderr) = profile_mode(&dir, &python, "hash", "2");
        let what = format!("{}: {stderr}", python.display());
        let digest: Vec<&Folded> = lines
            .iter()
            .filter(|l| l.frames.iter().any(|f| function(f) == Some("digest")))
            .collect();
        let n: u64 = digest.iter().map(|l| l.count).sum();
        assert!(n > 200, "{n} samples in digest: {what}");
        // Under digest: native frames only (the hash's C code), and on
        // most samples some.
        let mut with_c = 0;
        for l in &digest {
            let d = l
                .frames
                .iter()
                .position(|f| function(f) == Some("digest"))
                .unwrap();
            assert!(
                l.frames[d + 1..].iter().all(|f| function(f).is_none()),
                "Python under C: {:?}",
                l.frames
            );
            let caller = l.frames[..d].iter().rev().find_map(|f| function(f));
            assert_eq!(caller, Some("hashing"), "{:?}", l.frames);
            if l.frames.len() > d + 1 {
                with_c += l.count;
            }
        }
        assert!(pct(with_c, n) > 90.0, "{with_c} of {n}: {what}");
        let hashing_code = digest.iter().any(|l| {
            l.frames.iter().any(|f| {
                ["sha", "SHA", "EVP", "libcrypto", "hashlib", "_hashlib"]
                    .iter()
                    .any(|k| f.contains(k))
            })
        });
        assert!(hashing_code, "no hashing code under digest: {what}");
    }
}

#[test]
fn python_stacks_past_the_depth_limit_keep_their_leaf_side_frames() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pytall");
    for python in interpreters() {
        // tall() recurses 200 calls deep with frames of ~280 bytes: the
        // walker's 128 frames lie on several pages and, from 3.11, in more
        // than one of the thread's data stack chunks (16 KiB each).
        let (lines, stderr) = profile_mode(&dir, &python, "tall", "2");
        let what = format!("{}: {stderr}", python.display());
        let py = python_line(&stderr);
        // While the recursion winds up and down the stack is shallower:
        // only the unit loop's samples are 200 deep.
        let n = samples_in(&lines, "unit_until");
        assert!(
            pct(n, total(&lines)) > 80.0,
            "{n} samples in unit_until: {what}"
        );
        for l in lines
            .iter()
            .filter(|l| l.frames.iter().any(|f| function(f) == Some("unit_until")))
        {
            // Root first: the 128 frames nearest the leaf, tall's calls
            // and then the unit loop's (unit_until, maybe unit).
            let names: Vec<&str> = l.frames.iter().filter_map(|f| function(f)).collect();
            assert_eq!(names.len(), 128, "{:?}: {what}", l.frames);
            let talls = names.iter().take_while(|n| **n == "tall").count();
            assert!(
                talls >= 126
                    && names[talls..]
                        .iter()
                        .all(|n| ["unit_until", "unit"].contains(n)),
                "{names:?}: {what}"
            );
        }
        for why in [
            "ended at a failed read",
            "ended at a bad pointer",
            "ended at a frame whose code was not a code object",
            "ended at a frame linked to itself",
        ] {
            assert!(!py.contains(why), "{why}: {what}");
        }
        let walks = number_before(py, " walks");
        let deep = number_before(py, " ended at the depth limit");
        assert!(pct(deep, walks) > 80.0, "{deep} of {walks}: {what}");
    }
}

#[test]
fn python_threads_each_have_their_own_frames() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pythreads");
    for python in interpreters() {
        let (lines, stderr) = profile_mode(&dir, &python, "threads", "2");
        let total = total(&lines);
        let what = format!("{}: {stderr}", python.display());
        let (a, b) = (
            samples_in(&lines, "worker_a"),
            samples_in(&lines, "worker_b"),
        );
        // Two threads share the GIL: each holds it about half the time.
        assert!(
            pct(a, a + b) > 30.0 && pct(b, a + b) > 30.0,
            "{a} / {b}: {what}"
        );
        assert!(pct(a + b, total) > 70.0, "{a} + {b} of {total}: {what}");
        for l in &lines {
            let has = |n: &str| l.frames.iter().any(|f| function(f) == Some(n));
            assert!(!(has("worker_a") && has("worker_b")), "{:?}", l.frames);
            if has("worker_a") || has("worker_b") {
                // A thread's own root: the thread module's bootstrap, never
                // the main thread's <module>.
                assert!(!has("<module>"), "{:?}", l.frames);
                assert!(
                    l.frames.iter().any(|f| f.contains("_bootstrap")),
                    "{:?}",
                    l.frames
                );
            }
        }
    }
}

#[test]
fn python_names_outlive_a_process_that_exits_before_the_profile_ends() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyexit");
    for python in interpreters() {
        // The child interpreter runs 631 for 1.5 s and exits; its parent
        // sleeps 1.5 s more before the profile ends.
        let (lines, stderr) = profile_mode(&dir, &python, "child", "1.5");
        let what = format!("{}: {stderr}", python.display());
        let ours = shares_631(&lines);
        for (s, want) in ours.iter().zip([60.0, 30.0, 10.0]) {
            assert!((s - want).abs() < 8.0, "shares {ours:?}: {what}");
        }
        // Every Python frame named: none waited for a process gone.
        assert!(
            lines
                .iter()
                .all(|l| !l.frames.iter().any(|f| f == "[unknown python]")),
            "{what}"
        );
    }
}

#[test]
fn python_that_forks_or_execs_later_is_walked() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyfork");
    let python = interpreters().pop().unwrap();
    // A shell that execs Python after a while, whose Python forks a child
    // that runs the work without exec.
    let cmd = format!(
        "sleep 0.5; exec {} {} fork 2",
        python.display(),
        script().display()
    );
    let (lines, stderr) = bprof_folded(&dir, &["-F", "499", "--", "sh", "-c", &cmd]);
    let forked = samples_in(&lines, "forked");
    let ours = shares_631(&lines);
    for (s, want) in ours.iter().zip([60.0, 30.0, 10.0]) {
        assert!((s - want).abs() < 8.0, "shares {ours:?}: {stderr}");
    }
    assert!(forked > 300, "{forked}: {stderr}");
    assert!(
        python_line(&stderr).contains("1 processes learned"),
        "the child took its parent's entry: {stderr}"
    );
}

#[test]
fn python_in_a_mount_namespace_is_found_through_its_own_view() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyns");
    // The interpreter at a path only its mount namespace has: /tmp/x here
    // is an empty directory, the process sees a pyenv version there.
    let python = interpreters()
        .into_iter()
        .rfind(|p| p.starts_with(pyenv_root()))
        .expect("a pyenv CPython");
    let version_dir = python.parent().unwrap().parent().unwrap();
    let empty = tempdir("bprof-pyns");
    let inside = empty.join("bin").join(python.file_name().unwrap());
    let cmd = format!(
        "mount --bind {} {} && exec {} {} 631 2",
        version_dir.display(),
        empty.display(),
        inside.display(),
        script().display()
    );
    let (lines, stderr) = bprof_folded(
        &dir,
        &[
            "-F",
            "499",
            "--",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &cmd,
        ],
    );
    std::fs::remove_dir(&empty).unwrap();
    let ours = shares_631(&lines);
    for (s, want) in ours.iter().zip([60.0, 30.0, 10.0]) {
        assert!((s - want).abs() < 8.0, "shares {ours:?}: {stderr}");
    }
}

/// A fresh empty directory in /tmp (removed by the caller).
fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    d
}

#[test]
fn python_system_wide_sees_every_interpreter() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyall");
    let pythons = interpreters();
    let works: Vec<Workload> = pythons.iter().map(|p| start(p, "631", "30")).collect();
    // Frame-pointer user stacks: no unwind tables for every process of the
    // machine, and Python frames do not need them.
    let (lines, stderr) = bprof_folded(&dir, &["-a", "-F", "499", "--call-graph", "fp", "3"]);
    drop(works);
    for p in &pythons {
        let mine: Vec<Folded> = lines
            .iter()
            .filter(|l| l.frames[0] == comm(p))
            .cloned()
            .collect();
        let heavy = samples_in(&mine, "heavy");
        assert!(heavy > 50, "{}: {heavy}: {stderr}", p.display());
    }
}

#[test]
fn python_off_cpu_and_wall_time_show_where_python_blocks() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyoff");
    let python = interpreters().pop().unwrap();
    let py = python.to_str().unwrap();
    let sc = script();
    let sc = sc.to_str().unwrap();
    let (lines, stderr) = bprof_folded(&dir, &["--off-cpu", "--", py, sc, "sleep", "2"]);
    let total = total(&lines);
    let sleeping: u64 = lines
        .iter()
        .filter(|l| {
            let m = l.frames.iter().position(|f| function(f) == Some("main"));
            m.is_some_and(|m| l.frames[m + 1..].iter().any(|f| f.contains("sleep")))
        })
        .map(|l| l.count)
        .sum();
    assert!(
        pct(sleeping, total) > 80.0,
        "{sleeping} of {total} us: {stderr}"
    );
    // --wall: the main thread waits in join() while the workers run.
    let (lines, stderr) =
        bprof_folded(&dir, &["--wall", "-F", "499", "--", py, sc, "threads", "2"]);
    let join = lines
        .iter()
        .filter(|l| {
            l.frames
                .iter()
                .any(|f| function(f) == Some("Thread.join") || function(f) == Some("join"))
        })
        .filter(|l| l.frames.last().is_some_and(|f| f == "[off-cpu]"))
        .map(|l| l.count)
        .sum::<u64>();
    assert!(join > 1_000_000, "{join} us in join: {stderr}");
    assert!(samples_in(&lines, "worker_a") > 0 && samples_in(&lines, "worker_b") > 0);
}

#[test]
fn python_in_every_interval_and_in_pprof_with_function_file_and_line() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyevery");
    let python = interpreters().pop().unwrap();
    let pattern = dir.join("%n.folded");
    let pb = dir.join("%n.pb.gz");
    let out = run(bprof()
        .args(["-F", "499", "--no-counts", "--every", "1", "-o"])
        .arg(&pattern)
        .arg("--pprof")
        .arg(&pb)
        .arg("--")
        .arg(&python)
        .arg(script())
        .args(["631", "3.5"]));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let (samples, _, _) = summary_numbers(&stderr);
    let mut sum = 0;
    let mut intervals = 0;
    for n in 1.. {
        let f = dir.join(format!("{n:06}.folded"));
        let Ok(text) = std::fs::read_to_string(&f) else {
            break;
        };
        let lines = parse_folded(&text);
        sum += total(&lines);
        intervals += 1;
        assert!(samples_in(&lines, "heavy") > 0, "interval {n}: {lines:?}");
        // pprof: the Python frames as functions with their file and lines.
        let raw_text = crate::pprof::go_pprof(&["-raw"], &dir.join(format!("{n:06}.pb.gz")));
        let heavy = raw_text
            .lines()
            .filter(|l| l.contains(" heavy ") && l.contains("py631.py:"))
            .count();
        assert!(heavy > 0, "no heavy with its file in:\n{raw_text}");
    }
    assert!(intervals >= 2, "{intervals} intervals: {stderr}");
    assert_eq!(sum, samples, "{stderr}");
    // go tool pprof -top names the functions, each with its own total.
    let top = crate::pprof::go_pprof(&["-top"], &dir.join("000001.pb.gz"));
    for f in ["heavy", "medium", "light", "unit"] {
        assert!(
            top.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f}:\n{top}"
        );
    }
}

#[test]
fn python_frames_can_drop_their_line() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pynoline");
    let python = interpreters().pop().unwrap();
    let (lines, _) = bprof_folded(
        &dir,
        &[
            "-F",
            "499",
            "--no-lineno",
            "--",
            python.to_str().unwrap(),
            script().to_str().unwrap(),
            "631",
            "1",
        ],
    );
    let frames: Vec<&String> = lines.iter().flat_map(|l| l.frames.iter()).collect();
    assert!(
        frames.iter().any(|f| *f == "heavy (py631.py)"),
        "{frames:?}"
    );
    assert!(
        !frames.iter().any(|f| f.contains("py631.py:")),
        "{frames:?}"
    );
}

#[test]
fn python_in_top_is_named_as_in_a_profile() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pytop");
    let python = interpreters().pop().unwrap();
    let work = start(&python, "631", "30");
    let t = crate::top::Tmux::new("py");
    let err = dir.join("top.err");
    crate::top::start_top(&t, &format!("-p {} -F 499 -d 1", work.id()), "", &err);
    // By self time: unit, the Python leaf, named as a profile names it.
    t.wait_for("unit in the view", Duration::from_secs(20), |s| {
        s.contains("unit (py631.py:")
    });
    // By total time: its callers too.
    t.keys(&["s"]);
    t.wait_for("heavy by total", Duration::from_secs(20), |s| {
        s.contains("sort: total")
            && s.contains("heavy (py631.py:")
            && s.contains("<module> (py631.py:")
    });
    t.keys(&["q"]);
    assert_eq!(crate::top::exit_status(&t), 0);
}

#[test]
fn an_unknown_python_is_said_once_and_profiled_natively() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyold");
    let old = std::fs::read_dir(pyenv_root().join("versions"))
        .ok()
        .and_then(|d| {
            d.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("3.9"))
            })
        });
    let Some(old) = old else {
        eprintln!("no pyenv CPython 3.9 here: skipped");
        return;
    };
    let python = old.join("bin/python3.9");
    let (lines, stderr) = profile_mode(&dir, &python, "child", "1");
    // Two processes of it, one line.
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot walk"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].contains("3.9") && said[0].contains("native frames only"),
        "{stderr}"
    );
    assert!(
        lines.iter().any(|l| l
            .frames
            .iter()
            .any(|f| f.starts_with("_PyEval_EvalFrameDefault"))),
        "native frames: {lines:?}"
    );
    assert!(lines
        .iter()
        .all(|l| l.frames.iter().all(|f| function(f).is_none())));
}

#[test]
fn python_perf_trampolines_are_walked_to_main() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyperf");
    for python in interpreters()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("3.12") || p.to_string_lossy().contains("3.13"))
    {
        let (lines, stderr) = bprof_folded(
            &dir,
            &[
                "-F",
                "499",
                "--",
                python.to_str().unwrap(),
                "-X",
                "perf",
                script().to_str().unwrap(),
                "631",
                "2",
            ],
        );
        let total = total(&lines);
        let whole: u64 = lines
            .iter()
            .filter(|l| {
                l.frames
                    .iter()
                    .any(|f| f == "main" || f == "__libc_start_call_main")
            })
            .filter(|l| l.frames.iter().any(|f| f.starts_with("py::")))
            .map(|l| l.count)
            .sum();
        assert!(
            pct(whole, total) > 80.0,
            "{whole} of {total} through trampolines to main: {stderr}"
        );
        let ours = shares_631(&lines);
        assert!((ours[0] - 60.0).abs() < 8.0, "{ours:?}");
    }
    remove_perf_maps();
}

/// The perf maps `-X perf` left in /tmp by the fixture's interpreters.
fn remove_perf_maps() {
    let me = std::process::id();
    for e in std::fs::read_dir("/tmp").unwrap().filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("perf-")
            .and_then(|r| r.strip_suffix(".map"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // Only maps of processes gone that this suite's children made.
        let gone = !Path::new(&format!("/proc/{pid}")).exists();
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        if gone && pid != me && text.contains("py631.py") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The script a hostile user runs: it corrupts its own frame chain under
/// its spinning function, in four ways, each for a while.
const HOSTILE: &str = r#"
import ctypes, sys, time

PREV = {prev}

def spin(secs, bad):
    f = sys._getframe()
    iframe = ctypes.c_void_p.from_address(id(f) + 24).value
    prev = ctypes.c_void_p.from_address(iframe + PREV)
    saved = prev.value
    prev.value = bad(iframe)
    end = time.monotonic() + secs
    while time.monotonic() < end:
        pass
    prev.value = saved

fake = ctypes.create_string_buffer(256)
not_code = 12345678901234567890

def fake_frame(iframe):
    base = (ctypes.addressof(fake) + 7) & ~7
    ctypes.c_void_p.from_address(base + {code}).value = id(not_code)
    return base

def main():
    spin(1.0, lambda i: 0x7ff0_0000_0000)
    spin(1.0, lambda i: i)
    spin(1.0, fake_frame)
    spin(1.0, lambda i: 0x1235)

main()
"#;

#[test]
fn hostile_python_frame_chains_end_counted_and_never_name_a_wrong_frame() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyhostile");
    // Debian's interpreter (nobody can run it; pyenv's lives under /root).
    let python = Path::new("/usr/bin/python3.11");
    if !python.exists() {
        eprintln!("no /usr/bin/python3.11: skipped");
        return;
    }
    // 3.11: _PyInterpreterFrame.previous at 48, f_code at 32.
    let text = HOSTILE.replace("{prev}", "48").replace("{code}", "32");
    let tmp = tempdir("bprof-pyhostile");
    let file = tmp.join("hostile.py");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (lines, stderr) = bprof_folded(
        &dir,
        &[
            "-F",
            "499",
            "--",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            python.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
    );
    std::fs::remove_dir_all(&tmp).unwrap();
    let py = python_line(&stderr);
    for why in [
        "ended at a failed read",
        "ended at a frame linked to itself",
        "ended at a frame whose code was not a code object",
        "ended at a bad pointer",
    ] {
        let n = number_before(py, &format!(" {why}"));
        assert!(n > 50, "{why}: {py}");
    }
    // Walks that ended early show the frames read before the tear (spin
    // alone), never a frame of what the pointers led to.
    let (mut spin, mut torn) = (0, 0);
    for l in &lines {
        let names: Vec<&str> = l.frames.iter().filter_map(|f| function(f)).collect();
        assert!(
            !l.frames.iter().any(|f| f == "[unknown python]"),
            "{:?}",
            l.frames
        );
        if !names.contains(&"spin") {
            continue;
        }
        spin += l.count;
        assert!(
            names
                .iter()
                .all(|n| ["spin", "main", "<module>"].contains(n)),
            "{:?}",
            l.frames
        );
        if names == ["spin"] {
            torn += l.count;
        }
    }
    assert!(spin > 500, "{spin}: {stderr}");
    assert!(pct(torn, spin) > 90.0, "{torn} of {spin}: {stderr}");
}

#[test]
fn a_code_object_made_at_a_freed_ones_address_never_takes_its_name() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pyreuse");
    for python in interpreters() {
        // fn_000, fn_001, ... each run alone in a thread of its own, made
        // after the one before was freed: their code objects share a few
        // addresses. Each sample's thread says which function it ran.
        let pb = dir.join("out.pb.gz");
        let out = run(bprof()
            .args(["-F", "999", "--no-counts", "--pprof"])
            .arg(&pb)
            .arg("--")
            .arg(&python)
            .arg(script())
            .args(["reuse", "2"]));
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let printed = String::from_utf8_lossy(&out.stdout).to_string();
        let mut by_tid = BTreeMap::new();
        let mut addresses: BTreeMap<String, u32> = BTreeMap::new();
        for l in printed.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            by_tid.insert(w[0].parse::<u64>().unwrap(), w[1].to_string());
            *addresses.entry(w[2].to_string()).or_default() += 1;
        }
        assert!(by_tid.len() > 10, "{printed}");
        assert!(
            addresses.values().any(|&n| n > 1),
            "no address was reused, nothing tested: {printed}"
        );
        let raw = crate::pprof::pprof_raw(&pb);
        let mut checked = 0;
        for ((_, locs, _), (_, tid)) in raw.samples.iter().zip(&raw.tasks) {
            let Some(want) = tid.and_then(|t| by_tid.get(&t)) else {
                continue;
            };
            for id in locs {
                for (name, _) in &raw.locations[id].1 {
                    if name.starts_with("fn_") {
                        assert_eq!(name, want, "thread {tid:?}: {}", python.display());
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100, "{checked} frames checked: {stderr}");
    }
}
