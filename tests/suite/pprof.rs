//! --pprof output read by a real consumer, `go tool pprof` (Debian's
//! golang-go, from scripts/install-deps.sh), on real fixtures: every file
//! must parse, its stacks (rebuilt from `-raw`) must equal bprof's folded
//! output of the same run, line for line, and `-top` must agree with the
//! folded leaves. Run as root.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use crate::common::*;

/// What `go tool pprof -raw` shows of a profile.
#[derive(Debug, Default)]
pub(crate) struct Raw {
    /// `type/unit` of each value.
    types: Vec<String>,
    /// Sampling period.
    period: u64,
    /// Values, location ids (leaf first), comm label.
    pub(crate) samples: Vec<(Vec<u64>, Vec<u64>, String)>,
    /// Each sample's numeric labels (pid, tid), in `samples`' order.
    pub(crate) tasks: Vec<(Option<u64>, Option<u64>)>,
    /// Location id → (mapping id, (name, system name) innermost first).
    pub(crate) locations: HashMap<u64, (u64, Vec<(String, String)>)>,
    /// Mapping id → (file, build ID).
    mappings: BTreeMap<u64, (String, String)>,
}

pub(crate) fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run go tool pprof (apt-get install golang-go)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed on {}: {stderr}",
        file.display()
    );
    assert!(
        !stderr.contains("symbolization failed") && !stderr.contains("Local symbolization"),
        "pprof tried to re-symbolize: {stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One `name file:line s=N[(system name)]` of a location.
fn parse_line(text: &str) -> (String, String) {
    let (left, right) = text
        .rsplit_once(" s=")
        .unwrap_or_else(|| panic!("no s= in {text:?}"));
    let (name, _file_line) = left
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("no file:line in {text:?}"));
    let sys = right
        .split_once('(')
        .map_or(name, |(_, s)| s.strip_suffix(')').unwrap_or(s));
    (name.to_string(), sys.to_string())
}

// Long on purpose: one pass over `go tool pprof -raw`, a case per section of its text.
pub(crate) fn pprof_raw(file: &Path) -> Raw {
    let text = go_pprof(&["-raw"], file);
    let mut raw = Raw::default();
    let mut section = "";
    let mut last_loc = 0;
    for l in text.lines() {
        match l {
            "Samples:" | "Locations" | "Mappings" => {
                section = l;
                continue;
            }
            _ => {}
        }
        if let Some(p) = l.strip_prefix("Period: ") {
            raw.period = p.trim().parse().unwrap();
        }
        match section {
            "Samples:" if raw.types.is_empty() => {
                raw.types = l
                    .split_whitespace()
                    .map(|t| t.trim_end_matches("[dflt]").to_string())
                    .collect();
            }
            "Samples:" => {
                let t = l.trim();
                // String labels share a line: `cgroup:[/x] comm:[name]`.
                if let Some(comm) = t.split("comm:[").nth(1) {
                    let comm = comm.split(']').next().unwrap_or_default();
                    raw.samples.last_mut().unwrap().2 = comm.to_string();
                } else if t.starts_with("pid:[") || t.starts_with("tid:[") {
                    // Numeric labels share their own line: `pid:[1] tid:[2]`.
                    let num = |key: &str| {
                        let v = t.split(&format!("{key}:[")).nth(1)?;
                        v.split(']').next()?.parse::<u64>().ok()
                    };
                    *raw.tasks.last_mut().unwrap() = (num("pid"), num("tid"));
                } else if t.contains(":[") {
                    // Other string labels (cgroup).
                } else if let Some((vals, ids)) = t.split_once(':') {
                    if let Ok(v) = vals
                        .split_whitespace()
                        .map(str::parse)
                        .collect::<Result<Vec<u64>, _>>()
                    {
                        let ids = ids.split_whitespace().map(|i| i.parse().unwrap());
                        raw.samples.push((v, ids.collect(), String::new()));
                        raw.tasks.push((None, None));
                    }
                }
            }
            "Locations" => {
                let t = l.trim_start();
                let first = t
                    .split_once(": 0x")
                    .filter(|(id, _)| id.chars().all(|c| c.is_ascii_digit()));
                if let Some((id, rest)) = first {
                    last_loc = id.parse().unwrap();
                    let (_addr, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
                    let mut mapping = 0;
                    if let Some(m) = rest.strip_prefix("M=") {
                        let (n, r) = m.split_once(' ').unwrap_or((m, ""));
                        mapping = n.parse().unwrap();
                        rest = r;
                    }
                    let lines = if rest.is_empty() {
                        vec![]
                    } else {
                        vec![parse_line(rest)]
                    };
                    raw.locations.insert(last_loc, (mapping, lines));
                } else {
                    raw.locations
                        .get_mut(&last_loc)
                        .unwrap()
                        .1
                        .push(parse_line(t));
                }
            }
            "Mappings" => {
                // `ID: start/limit/offset FILE BUILDID FLAGS`
                let f: Vec<&str> = l.split(' ').collect();
                if f.len() >= 4 {
                    let id = f[0].trim_end_matches(':').parse().unwrap();
                    raw.mappings
                        .insert(id, (f[2].to_string(), f[3].to_string()));
                }
            }
            _ => {}
        }
    }
    assert!(!raw.samples.is_empty(), "no samples in:\n{text}");
    raw
}

/// The samples rebuilt as folded lines (`comm;root;...;leaf`), value `vi`.
fn refold(raw: &Raw, vi: usize) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (values, ids, comm) in &raw.samples {
        let mut frames: Vec<String> = ids
            .iter()
            .flat_map(|id| raw.locations[id].1.iter().map(|(n, _)| n.replace(';', ":")))
            .collect();
        frames.reverse();
        let mut line = comm.clone();
        for f in frames {
            line.push(';');
            line.push_str(&f);
        }
        if values[vi] > 0 {
            *out.entry(line).or_default() += values[vi];
        }
    }
    out
}

/// Folded lines as pprof names their frames: a kernel frame's `_[k]` is
/// its mapping there.
fn folded_map(lines: &[Folded]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in lines {
        let frames: Vec<&str> = l
            .frames
            .iter()
            .map(|f| f.trim_end_matches("_[k]"))
            .collect();
        *out.entry(frames.join(";")).or_default() += l.count;
    }
    out
}

/// `go tool pprof -top`'s flat value per function.
fn pprof_top(file: &Path, sample_index: &str) -> BTreeMap<String, u64> {
    let text = go_pprof(
        &[
            "-top",
            "-nodefraction=0",
            "-nodecount=100000",
            // Raw microseconds, not scaled to ms or s.
            if sample_index == "samples" {
                "-unit=minimum"
            } else {
                "-unit=us"
            },
            &format!("-sample_index={sample_index}"),
        ],
        file,
    );
    let mut out = BTreeMap::new();
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1);
    for row in rows {
        let w: Vec<&str> = row.split_whitespace().collect();
        if w.len() < 6 {
            continue;
        }
        let flat: u64 = w[0]
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse()
            .unwrap_or_else(|_| panic!("flat value in {row:?}"));
        if flat > 0 {
            // pprof marks functions inlined at that location.
            let name = w[5..].join(" ");
            let name = name.strip_suffix(" (inline)").unwrap_or(&name);
            *out.entry(name.to_string()).or_default() += flat;
        }
    }
    out
}

/// The folded leaves' totals per frame (lines with no frame but the comm
/// have no leaf function).
fn leaf_sums(lines: &[Folded]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in lines.iter().filter(|l| l.frames.len() > 1) {
        let leaf = l.frames.last().unwrap().trim_end_matches("_[k]");
        *out.entry(leaf.to_string()).or_default() += l.count;
    }
    out
}

/// The GNU build ID of an ELF file, by readelf.
fn readelf_build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no build ID in {}", path.display()))
}

/// The summary line's first number: samples (on-CPU) or blocks counted.
fn summary_count(stderr: &str) -> u64 {
    stderr
        .lines()
        .find(|l| l.contains(" unique stacks"))
        .and_then(|l| l.strip_prefix("bprof: ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {stderr}"))
}

/// Runs bprof with `args` plus `--pprof` and `-o` into `dir`; returns the
/// folded lines, the pprof path and stderr.
fn profile(
    dir: &Path,
    args: &[&str],
    command: &[&str],
) -> (Vec<Folded>, std::path::PathBuf, String) {
    let pb = dir.join("out.pb.gz");
    let fo = dir.join("out.folded");
    let out = run(bprof()
        .args(args)
        .arg("--pprof")
        .arg(&pb)
        .arg("-o")
        .arg(&fo)
        .arg("--")
        .args(command));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{args:?}: {stderr}");
    let lines = parse_folded(&std::fs::read_to_string(&fo).unwrap());
    (lines, pb, stderr)
}

#[test]
fn pprof_of_a_known_workload_reads_back_as_its_folded_stacks() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("pprof-oncpu");
    let bin = fixture("work631");
    let (lines, pb, stderr) = profile(&dir, &["-F", "199"], &[bin.to_str().unwrap(), "2"]);
    let raw = pprof_raw(&pb);
    assert_eq!(raw.types, ["samples/count", "cpu/nanoseconds"]);
    // Same stacks, same counts, and they add up to what was counted.
    let folded = folded_map(&lines);
    assert_eq!(refold(&raw, 0), folded);
    let total: u64 = folded.values().sum();
    assert_eq!(total, summary_count(&stderr), "{stderr}");
    // Not 398: the fixture shares 2 CPUs with whatever else runs.
    assert!(total > 100, "{total} samples of 2 s at 199 Hz");
    // Each sample's CPU time is its period (1/199 s).
    assert_eq!(raw.period, 1_000_000_000 / 199);
    for (v, _, _) in &raw.samples {
        assert_eq!(v[1], v[0] * raw.period);
    }
    // -top: the known 6:3:1 shape, flat values equal to the folded leaves.
    let top = pprof_top(&pb, "samples");
    assert_eq!(top, leaf_sums(&lines));
    let heavy = top["heavy"] as f64 / total as f64;
    assert!((0.5..0.7).contains(&heavy), "heavy {heavy}: {top:?}");
    // The executable is the first mapping, with its build ID.
    let (file, id) = &raw.mappings[&1];
    assert_eq!(Path::new(file), bin.as_path(), "{:?}", raw.mappings);
    assert_eq!(id, &readelf_build_id(&bin));
}

#[test]
fn pprof_of_an_exited_process_whose_file_is_gone_keeps_its_build_id() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("pprof-gone");
    let bin = dir.join("fx_gone");
    std::fs::copy(fixture("work631"), &bin).unwrap();
    let id = readelf_build_id(&bin);
    // The fixture exits and its file is removed before bprof symbolizes.
    let script = format!("{0} 1; rm -f {0}; sleep 0.5", bin.display());
    let (lines, pb, stderr) = profile(&dir, &["-F", "199"], &["sh", "-c", &script]);
    assert!(!bin.exists());
    assert!(total_for(&lines, "fx_gone") > 50, "{lines:?}\n{stderr}");
    let raw = pprof_raw(&pb);
    assert_eq!(refold(&raw, 0), folded_map(&lines));
    assert_eq!(
        folded_map(&lines).values().sum::<u64>(),
        summary_count(&stderr)
    );
    // Its samples' user frames lie in a mapping that names the file and
    // carries the build ID the kernel recorded: enough to symbolize later.
    let mappings: std::collections::BTreeSet<u64> = raw
        .samples
        .iter()
        .filter(|(_, _, comm)| comm == "fx_gone")
        .flat_map(|(_, ids, _)| ids.iter().map(|l| raw.locations[l].0))
        .collect();
    let gone = mappings
        .iter()
        // (A frame with no file, such as an unwinder's [truncated] mark,
        // has no mapping.)
        .filter_map(|m| raw.mappings.get(m))
        .find(|(_, b)| *b == id)
        .unwrap_or_else(|| panic!("no mapping with {id}: {:?}", raw.mappings));
    assert_eq!(Path::new(&gone.0), bin.as_path());
}

#[test]
fn pprof_of_wall_and_off_cpu_time_has_microseconds_and_the_kernel_build_id() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("pprof-wall");
    let bin = fixture("spinsleep");
    let (lines, pb, _) = profile(&dir, &["--wall"], &[bin.to_str().unwrap(), "2"]);
    let raw = pprof_raw(&pb);
    assert_eq!(
        raw.types,
        [
            "wall/microseconds",
            "cpu/microseconds",
            "off-cpu/microseconds"
        ]
    );
    // Wall time rebuilt equals the folded lines ([off-cpu] leaves included).
    assert_eq!(refold(&raw, 0), folded_map(&lines));
    for (v, _, _) in &raw.samples {
        assert_eq!(v[0], v[1] + v[2]);
    }
    let off: u64 = raw.samples.iter().map(|(v, _, _)| v[2]).sum();
    let off_folded: u64 = lines
        .iter()
        .filter(|l| l.frames.last().map(String::as_str) == Some("[off-cpu]"))
        .map(|l| l.count)
        .sum();
    assert_eq!(off, off_folded);
    assert_eq!(pprof_top(&pb, "wall"), leaf_sums(&lines));
    // Blocked stacks end in the kernel, whose mapping has its build ID.
    let perf = Command::new("perf")
        .args(["buildid-list", "-k"])
        .output()
        .unwrap();
    let kernel_id = String::from_utf8_lossy(&perf.stdout).trim().to_string();
    let kernel = raw
        .mappings
        .values()
        .find(|(f, _)| f == "[kernel.kallsyms]")
        .expect("a kernel mapping");
    assert_eq!(kernel.1, kernel_id);

    let dir = scratch("pprof-offcpu");
    let (lines, pb, _) = profile(&dir, &["--off-cpu"], &[bin.to_str().unwrap(), "1"]);
    let raw = pprof_raw(&pb);
    assert_eq!(raw.types, ["off-cpu/microseconds"]);
    assert_eq!(refold(&raw, 0), folded_map(&lines));
    assert_eq!(pprof_top(&pb, "off-cpu"), leaf_sums(&lines));
}

#[test]
fn pprof_keeps_mangled_names_and_inlined_functions() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("pprof-rust");
    let bin = fixture("rust_work");
    let (lines, pb, _) = profile(&dir, &["-F", "199"], &[bin.to_str().unwrap(), "1"]);
    let raw = pprof_raw(&pb);
    assert_eq!(refold(&raw, 0), folded_map(&lines));
    assert_eq!(pprof_top(&pb, "samples"), leaf_sums(&lines));
    let lines_of = |f: &dyn Fn(&(String, String)) -> bool| {
        raw.locations
            .values()
            .flat_map(|(_, l)| l)
            .find(|l| f(l))
            .cloned()
    };
    let (name, sys) = lines_of(&|(n, _)| n == "rust_work::hot::spin_rust")
        .unwrap_or_else(|| panic!("no spin_rust in {:?}", raw.locations));
    assert_ne!(name, sys);
    assert!(sys.starts_with("_ZN") || sys.starts_with("_R"), "{sys}");
    // Optimized Rust inlines: some location holds several functions.
    assert!(
        raw.locations.values().any(|(_, l)| l.len() > 1),
        "no inlined frames: {:?}",
        raw.locations
    );
}

#[test]
// Long on purpose: one run's files checked in turn (each interval, how they tile, their sum).
fn every_interval_gets_its_own_files_and_together_they_hold_every_sample() {
    root_or_skip!();
    // Its interval count and samples assume the fixture's full rate.
    let _g = exclusive();
    let dir = scratch("pprof-every");
    let bin = fixture("work631");
    let out = run(bprof()
        .args(["-F", "199", "--every", "1", "--pprof"])
        .arg(dir.join("%n-%t.pb.gz"))
        .arg("-o")
        .arg(dir.join("%n.folded"))
        .arg("--")
        .arg(&bin)
        .arg("3.5"));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let pprofs: Vec<&String> = names.iter().filter(|n| n.ends_with(".pb.gz")).collect();
    // 3.5 s in 1 s intervals: 4 (the last one short), maybe 5 with start-up.
    assert!((4..=5).contains(&pprofs.len()), "{names:?}");
    let mut total = 0;
    // (start, length) of the previous interval, in seconds of the day.
    let mut previous: Option<(f64, f64)> = None;
    let mut lengths = 0.0;
    for (i, p) in pprofs.iter().enumerate() {
        let n = format!("{:06}", i + 1);
        assert!(p.starts_with(&format!("{n}-2")), "{p}: %n then %t");
        let folded =
            parse_folded(&std::fs::read_to_string(dir.join(format!("{n}.folded"))).unwrap());
        let raw = pprof_raw(&dir.join(p));
        // Each interval's pprof is its folded file.
        assert_eq!(refold(&raw, 0), folded_map(&folded), "interval {n}");
        total += folded.iter().map(|l| l.count).sum::<u64>();
        // Each says when it started (-raw: `Time: 2026-11-25 12:00:01.5 +0000
        // UTC`) and how long it ran (-top, with its unit).
        let text = go_pprof(&["-raw"], &dir.join(p));
        let clock = text
            .lines()
            .find_map(|l| l.strip_prefix("Time: "))
            .and_then(|t| t.split(' ').nth(1))
            .unwrap();
        let hms: Vec<f64> = clock.split(':').map(|x| x.parse().unwrap()).collect();
        let start = hms[0] * 3600.0 + hms[1] * 60.0 + hms[2];
        let top = go_pprof(&["-top"], &dir.join(p));
        let d = top
            .lines()
            .find_map(|l| l.strip_prefix("Duration: "))
            .and_then(|l| l.split(',').next())
            .unwrap();
        let length: f64 = match d.strip_suffix("ms") {
            Some(ms) => ms.parse::<f64>().unwrap() / 1e3,
            None => d.trim_end_matches('s').parse().unwrap(),
        };
        assert!(length > 0.0, "interval {n}: {d}");
        // The intervals tile the run: each starts where the last ended
        // (-top rounds lengths to 10 ms).
        if let Some((s0, l0)) = previous {
            assert!(
                (start - (s0 + l0)).abs() < 0.011,
                "interval {n} starts at {start}, the last ended at {}",
                s0 + l0
            );
        }
        previous = Some((start, length));
        lengths += length;
    }
    // Together they cover the recording (the summary's duration).
    let elapsed: f64 = stderr
        .lines()
        .find(|l| l.contains(" unique stacks"))
        .and_then(|l| l.split(" over ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {stderr}"));
    assert!(
        (lengths - elapsed).abs() < 0.1,
        "intervals sum to {lengths} s of {elapsed} s"
    );
    // Together the intervals hold everything counted: nothing falls
    // between two files.
    assert_eq!(total, summary_count(&stderr), "{stderr}");
    // ~700 at full rate.
    assert!(total > 300, "{total}");
}

#[test]
fn every_needs_a_pattern_per_file() {
    for (args, says) in [
        (&["--every", "10", "--pprof", "a.pb.gz"][..], "its own file"),
        (&["--every", "10", "-f"][..], "-o FILE"),
        (&["--every", "10"][..], "writes files"),
        (&["--every", "0.5", "-o", "%t"][..], "at least 1 second"),
        (&["--every", "10", "-o", "%q"][..], "unknown escape"),
    ] {
        let out = run(bprof().args(args).arg("1"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(assert_one_line_error(&out).contains(says), "{args:?}");
    }
}

#[test]
fn pprof_labels_each_sample_with_its_cgroup() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("pprof-cgroup");
    let cg = TestCgroup::new("pprof");
    let inside = Workload::start(Command::new(fixture("rust_work")).arg("6"));
    cg.add(inside.id());
    let outside = Workload::start(Command::new(fixture("work631")).arg("6"));
    let pb = dir.join("out.pb.gz");
    let pids = format!("{},{}", inside.id(), outside.id());
    let out = run(bprof()
        .args(["-F", "199", "-p", &pids, "--pprof"])
        .arg(&pb)
        .arg("1.5"));
    drop((inside, outside));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The label pprof shows, with the cgroup's path below the v2 root.
    let tags = go_pprof(&["-tags"], &pb);
    assert!(
        tags.contains("cgroup:") && tags.contains(&cg.name),
        "{tags}"
    );
    // Focused on that cgroup, only the process inside it remains.
    let focus = format!("-tagfocus=cgroup={}", cg.name);
    let top = go_pprof(&["-top", &focus], &pb);
    assert!(top.contains("spin_rust"), "{top}");
    assert!(!top.contains("heavy"), "{top}");
    let rest = go_pprof(&["-top", &format!("-tagignore=cgroup={}", cg.name)], &pb);
    assert!(
        rest.contains("heavy") && !rest.contains("spin_rust"),
        "{rest}"
    );
}

/// The flame graph's samples per frame name, summed over its frames (from
/// inferno's `<title>NAME (N samples, P%)</title>`).
fn svg_counts(svg: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for t in svg.split("<title>").skip(1) {
        let t = t.split("</title>").next().unwrap();
        let Some((name, rest)) = t.rsplit_once(" (") else {
            continue;
        };
        let Some(n) = rest.split(' ').next() else {
            continue;
        };
        if let Ok(n) = n.replace(',', "").parse::<u64>() {
            *out.entry(name.to_string()).or_default() += n;
        }
    }
    out
}

#[test]
fn pprof_with_f_and_svg_of_one_run_holds_the_same_stacks_and_labels_each_task() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("pprof-all-outputs");
    // Killed when dropped: long enough for any start-up.
    let work = Workload::start(Command::new(fixture("work631")).arg("60"));
    let pid = work.id();
    let (pb, svg) = (dir.join("out.pb.gz"), dir.join("out.svg"));
    // Three outputs of one recording, of one known process (-o instead of
    // -f: the other tests here), and what the kernel ran it meanwhile.
    let (out, _, ran) = run_beside(
        pid,
        bprof()
            .args(["-F", "199", "-p", &pid.to_string(), "-f", "--pprof"])
            .arg(&pb)
            .arg("--svg")
            .arg(&svg),
        "1.5",
    );
    drop(work);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let file = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let folded = folded_map(&file);
    let total = assert_totals(&stderr, &file);
    assert!(ran > 100.0, "the process barely ran: {ran} ms");
    assert!(
        total >= least_samples(ran, 199.0),
        "{total} samples of {ran} CPU-ms at 199 Hz"
    );
    let raw = pprof_raw(&pb);
    assert_eq!(refold(&raw, 0), folded, "--pprof and -f differ");
    // The flame graph: its root holds every sample, each function what the
    // folded lines holding it do (work631's functions do not recurse).
    let flame = svg_counts(&std::fs::read_to_string(&svg).unwrap());
    assert_eq!(flame.get("all"), Some(&total), "{flame:?}");
    for f in ["main", "heavy", "medium", "light"] {
        let want: u64 = file
            .iter()
            .filter(|l| l.frames.iter().any(|x| x == f))
            .map(|l| l.count)
            .sum();
        assert!(want > 0, "no {f} in {file:?}");
        assert_eq!(flame.get(f), Some(&want), "{f}: {flame:?}");
    }
    // Every pprof sample carries the process's pid and its (only) thread's
    // tid, as labels pprof reads back.
    assert_eq!(raw.tasks.len(), raw.samples.len());
    for (i, t) in raw.tasks.iter().enumerate() {
        assert_eq!(
            *t,
            (Some(u64::from(pid)), Some(u64::from(pid))),
            "sample {i}"
        );
    }
    // Functions carry their source file (and the line, from DWARF).
    let text = go_pprof(&["-raw"], &pb);
    assert!(
        text.lines()
            .any(|l| l.contains(" heavy ") && l.contains("fixtures/work631.c:")),
        "no source file for heavy:\n{text}"
    );
    let tags = go_pprof(&["-tags"], &pb);
    assert!(
        tags.contains("pid:") && tags.contains(&pid.to_string()),
        "{tags}"
    );
}
