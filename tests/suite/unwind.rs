//! `--call-graph dwarf`: user stacks of code built -O2 WITHOUT frame
//! pointers, walked with .eh_frame inside the BPF program, compared whole
//! with `perf record --call-graph dwarf` on the same fixture.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::common::{
    assert_totals, bprof, dwarf_line, exclusive, folded_form, fresh_path, is_root, number_before,
    parallel, parse_folded, pct, perf_record_with, run, scratch, Workload,
};

/// fixtures/unwind.c and its library, built -O2 -fomit-frame-pointer:
/// (executable linked with libfx_unwind.so, a copy of the library to dlopen).
fn fixtures() -> (PathBuf, PathBuf) {
    static BUILT: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = built.as_ref() {
        return b.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures/unwind");
    std::fs::create_dir_all(&out).unwrap();
    let gcc = |args: &[&str]| {
        let st = Command::new("gcc")
            .args(["-O2", "-g", "-fomit-frame-pointer"])
            .args(args)
            .status()
            .expect("run gcc");
        assert!(st.success(), "gcc {args:?}");
    };
    let lib = out.join("libfx_unwind.so");
    let dl = out.join("libfx_unwind_dl.so");
    let exe = out.join("fx_unwind");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    gcc(&[
        "-shared",
        "-fPIC",
        "-o",
        &s(&lib),
        &s(&src.join("unwind_lib.c")),
    ]);
    std::fs::copy(&lib, &dl).unwrap();
    gcc(&[
        "-o",
        &s(&exe),
        &s(&src.join("unwind.c")),
        &format!("-L{}", s(&out)),
        "-lfx_unwind",
        &format!("-Wl,-rpath,{}", s(&out)),
    ]);
    *built = Some((exe.clone(), dl.clone()));
    (exe, dl)
}

/// A frame name both tools agree on: no "(inlined)", unnamed frames alike,
/// and as folded stacks show it (perf prints a Rust generic's `[u8; 8]`).
fn norm(f: &str) -> String {
    let f = f.trim_end_matches(" (inlined)");
    if f == "[unknown]" || f.contains("+0x") {
        "?".into()
    } else {
        folded_form(f)
    }
}

/// perf's stacks (root first) and their counts.
pub fn perf_stacks(dir: &Path, comm: &str, argv: &[String]) -> BTreeMap<Vec<String>, u64> {
    perf_stacks_of(dir, comm, argv, &["-F", "999"])
}

/// perf's user stacks (root first) of the samples of `event` (perf record
/// arguments) and their counts.
pub fn perf_stacks_of(
    dir: &Path,
    comm: &str,
    argv: &[String],
    event: &[&str],
) -> BTreeMap<Vec<String>, u64> {
    let data = dir.join("perf.data");
    let options: Vec<&str> = ["--call-graph", "dwarf"]
        .iter()
        .chain(event)
        .copied()
        .collect();
    perf_record_with(&data, &options, argv);
    let out = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .output()
        .expect("run perf script");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stacks = BTreeMap::new();
    for block in text.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        if lines
            .next()
            .is_none_or(|h| h.split_whitespace().next() != Some(comm))
        {
            continue;
        }
        // Inlined calls share their physical frame's address: one frame per
        // address, named as its outermost function (bprof's symbolization
        // shows physical frames).
        let mut frames: Vec<(String, String)> = Vec::new();
        for (ip, sym) in lines.filter_map(|l| l.trim().split_once(' ')) {
            // User frames only, as bprof -U.
            if ip.len() == 16 && ip.starts_with("ffff") {
                continue;
            }
            if frames.last().is_some_and(|(last, _)| last == ip) {
                frames.pop();
            }
            frames.push((ip.to_string(), norm(sym.trim())));
        }
        let mut frames: Vec<String> = frames.into_iter().map(|(_, s)| s).collect();
        frames.reverse();
        *stacks.entry(frames).or_insert(0) += 1;
    }
    stacks
}

/// bprof's user stacks (root first) of the fixture, and the stderr.
fn bprof_stacks(
    comm: &str,
    args: &[&str],
    argv: &[String],
) -> (BTreeMap<Vec<String>, u64>, String) {
    bprof_stacks_under(None, comm, args, argv)
}

/// bprof_stacks with `BPROF_FALLBACK=fallback`, when given.
fn bprof_stacks_under(
    fallback: Option<&str>,
    comm: &str,
    args: &[&str],
    argv: &[String],
) -> (BTreeMap<Vec<String>, u64>, String) {
    let json = fresh_path("unwind-stats.json");
    let mut cmd = bprof();
    if let Some(f) = fallback {
        cmd.env("BPROF_FALLBACK", f);
    }
    // Walked frames against perf script's, which shows no inlined ones.
    let out = run(cmd
        .args([
            "-v",
            "-U",
            "-f",
            "--no-inline",
            "--call-graph",
            "dwarf",
            "--stats-json",
        ])
        .arg(&json)
        .args(args)
        .arg("--")
        .args(argv));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    // Totals add up: samples, or for off-CPU time its microseconds.
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
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert_eq!(total, number("counted_weight"), "{stderr}");
    let mut stacks = BTreeMap::new();
    for l in lines.iter().filter(|l| l.frames[0] == comm) {
        let frames = l.frames[1..].iter().map(|f| norm(f)).collect();
        *stacks.entry(frames).or_insert(0) += l.count;
    }
    (stacks, stderr)
}

fn hottest(stacks: &BTreeMap<Vec<String>, u64>) -> (Vec<String>, u64, u64) {
    let total = stacks.values().sum();
    let (s, n) = stacks.iter().max_by_key(|(_, n)| **n).expect("some stack");
    (s.clone(), *n, total)
}

/// The hottest stack of `mode` is perf's hottest, frame for frame from
/// `_start` to the leaf, and nearly every sample reaches `_start`.
fn same_as_perf(mode: &str, leaf: &[&str]) {
    same_as_perf_in(mode, leaf, &["-F", "999"], &["-F", "999"]);
}

/// same_as_perf with extra bprof arguments and perf's event arguments;
/// returns bprof's stderr (None: not root, skipped).
fn same_as_perf_in(
    mode: &str,
    leaf: &[&str],
    ours_args: &[&str],
    perf_event: &[&str],
) -> Option<String> {
    same_as_perf_under(None, mode, leaf, ours_args, perf_event)
}

/// same_as_perf_in with `BPROF_FALLBACK=fallback`, when given.
fn same_as_perf_under(
    fallback: Option<&str>,
    mode: &str,
    leaf: &[&str],
    ours_args: &[&str],
    perf_event: &[&str],
) -> Option<String> {
    if !is_root() {
        return None;
    }
    let _g = exclusive();
    let (exe, dl) = fixtures();
    let dir = scratch(&format!("unwind_{mode}"));
    let mut argv = vec![exe.display().to_string(), mode.to_string(), "2".to_string()];
    if mode == "dlopen" {
        argv.push(dl.display().to_string());
    }
    let (ours, stderr) = bprof_stacks_under(fallback, "fx_unwind", ours_args, &argv);
    let theirs_all = perf_stacks_of(&dir, "fx_unwind", &argv, perf_event);
    let (mine, n, total) = hottest(&ours);
    let (perfs, _, _) = hottest(&theirs_all);
    assert_eq!(mine, perfs, "bprof vs perf --call-graph dwarf\n{stderr}");
    assert_eq!(mine.first().map(String::as_str), Some("_start"), "{mine:?}");
    let tail: Vec<&str> = mine[mine.len() - leaf.len()..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(tail, leaf, "{mine:?}");
    assert!(mine.iter().any(|f| f == "chain1") && mine.iter().any(|f| f == "chain8"));
    // The stacks that reach the root, over all samples (the first ms of a
    // command, before its mappings are known, may end early: counted).
    let rooted = samples_where(&ours, |s| s.first().is_some_and(|f| f == "_start"));
    assert!(
        rooted * 100 >= total * 90,
        "{rooted} of {total} rooted\n{stderr}"
    );
    assert!(n * 100 >= total * 80, "{n} of {total} in the hottest stack");
    assert!(stderr.contains("dwarf unwinding:"), "{stderr}");
    Some(stderr)
}

/// Tables are kept per boot: a later profile of the same file reads its
/// table instead of parsing .eh_frame again and walks the stacks perf
/// walks; a file changed since (a new mtime and ctime) is parsed anew.
#[test]
fn unwind_tables_kept_from_an_earlier_profile_walk_as_perf_does_until_the_file_changes() {
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let dir = scratch("unwind_kept");
    // A new inode: no earlier profile kept its table.
    let copy = dir.join("fx_unwind");
    std::fs::copy(&exe, &copy).unwrap();
    let argv = vec![copy.display().to_string(), "chain".into(), "2".into()];
    let leaf = ["chain8", "leaf_spin"];
    let theirs = perf_stacks_of(&dir, "fx_unwind", &argv, &["-F", "999"]);
    let (perfs, _, _) = hottest(&theirs);
    let profile = || {
        let (ours, stderr) = bprof_stacks("fx_unwind", &["-F", "999"], &argv);
        let (mine, _, total) = hottest(&ours);
        assert_eq!(mine, perfs, "bprof vs perf --call-graph dwarf\n{stderr}");
        assert!(mine.ends_with(&leaf.map(String::from)), "{mine:?}");
        let rooted = samples_where(&ours, |s| s.first().is_some_and(|f| f == "_start"));
        assert!(
            rooted * 100 >= total * 99,
            "{rooted} of {total} rooted\n{stderr}"
        );
        let line = stderr
            .lines()
            .find(|l| l.contains("unwind tables:"))
            .expect("-v")
            .to_string();
        (
            number_before(&line, " parsed,"),
            number_before(&line, " kept from an earlier profile"),
        )
    };
    let (parsed, _) = profile();
    assert!(parsed >= 1, "the copy's table was kept before it existed");
    // Every table kept: none parsed.
    let (parsed, kept) = profile();
    assert_eq!(parsed, 0, "tables parsed again");
    // Written since: its identity changed, so its table is built again.
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&copy)
        .unwrap();
    f.set_len(f.metadata().unwrap().len()).unwrap();
    std::fs::File::set_modified(&f, std::time::SystemTime::now()).unwrap();
    drop(f);
    let (parsed, kept_after) = profile();
    assert_eq!(
        (parsed, kept_after),
        (1, kept - 1),
        "a changed file's old table was used"
    );
}

/// A table map too small for the targets' files: theirs are walked by
/// frame pointer, the stacks end in a visible `[truncated]`, every sample
/// is still counted, and bprof says so without `-v`.
#[test]
fn files_whose_tables_do_not_fit_are_said_and_their_stacks_marked() {
    root_or_skip!();
    let _g = parallel();
    let (exe, _) = fixtures();
    let out = run(bprof()
        .args(["-F", "999", "-f", "--unwind-rows", "1000", "--"])
        .arg(&exe)
        .args(["chain", "1"]));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total = assert_totals(&stderr, &lines);
    let said = stderr
        .lines()
        .find(|l| l.contains("unwind tables did not fit the table budget (--unwind-rows)"))
        .unwrap_or_else(|| panic!("not said: {stderr}"));
    assert!(number_before(said, " files' unwind tables") >= 1, "{said}");
    // The program's own table fits (chain8's callers are found), libc's
    // does not: the walk stops in it, marked.
    let marked: u64 = lines
        .iter()
        .filter(|l| {
            l.frames.iter().any(|f| f == "chain8") && l.frames.iter().any(|f| f == "[truncated]")
        })
        .map(|l| l.count)
        .sum();
    assert!(marked * 100 >= total * 90, "{marked} of {total}\n{lines:?}");
}

/// Tables go into segments made as they arrive: with a budget of 100 000
/// rows the first segment holds 14 062 entries, so libc's table (~23 000
/// rows) has a segment of its own. Its frames (down to
/// __libc_start_call_main) are walked from there as perf walks them.
#[test]
fn unwind_tables_in_later_segments_match_perf_dwarf() {
    let Some(stderr) = same_as_perf_in(
        "plt",
        &["chain8", "lib_entry", "lib_spin"],
        &["-F", "999", "--unwind-rows", "100000"],
        &["-F", "999"],
    ) else {
        return;
    };
    let line = stderr
        .lines()
        .find(|l| l.contains("unwind tables:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(number_before(line, " table segments") >= 2, "{line}");
    assert!(!line.contains("not loaded"), "{line}");
}

/// The walk as a kernel before 5.17 runs it (BPROF_FALLBACK=all: open-coded
/// loops of global functions, no bpf_find_vma, the task's registers from
/// its kernel stack): through the PLT into a library that the loader
/// mapped, learned from its mmap's arguments, as perf walks it.
#[test]
fn unwind_without_bpf_loop_or_find_vma_matches_perf_dwarf() {
    let Some(stderr) = same_as_perf_under(
        Some("all"),
        "plt",
        &["chain8", "lib_entry", "lib_spin"],
        &["-F", "999"],
        &["-F", "999"],
    ) else {
        return;
    };
    assert!(stderr.contains("(no bpf_loop, bpf_find_vma)"), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("dwarf unwinding:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    // ld.so's mmaps of libfx_unwind.so and libc (exec's mappings come from
    // the mm's list, which 6.1 replaced: user space's view serves here).
    assert!(
        number_before(line, " at a target's mmap or exec") >= 2,
        "{line}"
    );
    assert!(line.contains(" 0 mappings asked of the kernel"), "{line}");
}

#[test]
fn unwind_chain_without_frame_pointers_matches_perf_dwarf() {
    same_as_perf("chain", &["chain8", "leaf_spin"]);
}

/// The walk memo: mid_spin's frame lies at one address whether via_a or
/// via_b called it, and only the return address in it says which. A walk
/// memo that trusted frame 1's address would give all samples one path;
/// bprof splits them 3:1 as the fixture calls them, as perf does, and
/// takes nearly every walk past the leaf from the memo.
#[test]
fn walk_memo_tells_two_callers_at_one_address_apart_as_perf_does() {
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let dir = scratch("unwind_twopaths");
    let argv = vec![exe.display().to_string(), "twopaths".into(), "3".into()];
    let (ours, stderr) = bprof_stacks("fx_unwind", &["-F", "999"], &argv);
    let theirs = perf_stacks(&dir, "fx_unwind", &argv);
    let path = |via: &str| -> Vec<String> {
        [
            "_start",
            "__libc_start_main_impl",
            "__libc_start_call_main",
            "main",
        ]
        .into_iter()
        .chain(["chain1", "chain2", "chain3", "chain4"])
        .chain(["chain5", "chain6", "chain7", "chain8"])
        .chain([via, "mid_spin", "leaf_spin"])
        .map(String::from)
        .collect()
    };
    let share = |stacks: &BTreeMap<Vec<String>, u64>| -> (u64, u64, u64) {
        let a = stacks.get(&path("via_a")).copied().unwrap_or(0);
        let b = stacks.get(&path("via_b")).copied().unwrap_or(0);
        (a, b, stacks.values().sum())
    };
    let (a, b, total) = share(&ours);
    let (pa, pb, ptotal) = share(&theirs);
    // The two paths hold nearly every sample, in both profiles.
    assert!(
        (a + b) * 100 >= total * 95,
        "{a} + {b} of {total}\n{stderr}"
    );
    assert!(
        (pa + pb) * 100 >= ptotal * 95,
        "perf: {pa} + {pb} of {ptotal}"
    );
    let pct_a = pct(a, a + b);
    let perf_a = pct(pa, pa + pb);
    assert!((pct_a - 75.0).abs() <= 5.0, "via_a {pct_a:.1}%\n{stderr}");
    assert!(
        (pct_a - perf_a).abs() <= 5.0,
        "via_a: bprof {pct_a:.1}%, perf {perf_a:.1}%"
    );
    // "N walks (M past their leaf from the walk memo)"
    let line = dwarf_line(&stderr);
    let walks = number_before(line, " walks");
    let memo = number_before(line, " past their leaf");
    assert!(memo * 100 >= walks * 90, "{line}");
}

/// Off-CPU stacks start from the registers saved at the syscall and are
/// walked the same way: perf records the same stacks at sched_switch.
#[test]
fn off_cpu_stacks_without_frame_pointers_match_perf_dwarf() {
    same_as_perf_in(
        "sleep",
        &[
            "chain8",
            "work",
            "__GI___nanosleep",
            "__GI___clock_nanosleep",
        ],
        &["--off-cpu"],
        &["-e", "sched:sched_switch", "-c", "1"],
    );
}

/// The vDSO has no file; bprof loads its own vDSO's table for it, so a
/// walk through the kernel's clock code is a table walk like any other.
#[test]
fn unwind_through_the_vdso_by_its_table() {
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let argv = [exe.display().to_string(), "vdso".into(), "2".into()];
    let (ours, stderr) = bprof_stacks("fx_unwind", &["-F", "999"], &argv);
    let total: u64 = ours.values().sum();
    let in_clock = samples_where(&ours, |s| s.iter().any(|f| f.contains("clock_gettime")));
    assert!(
        in_clock * 100 >= total * 50,
        "{in_clock} of {total} in the clock\n{stderr}"
    );
    let rooted = samples_where(&ours, |s| {
        s.first().is_some_and(|f| f == "_start") && s.iter().any(|f| f == "chain8")
    });
    assert!(
        rooted * 100 >= total * 97,
        "{rooted} of {total} rooted\n{stderr}"
    );
    // Walked by the vDSO's table: (almost) nothing left by frame pointer.
    let line = stderr
        .lines()
        .find(|l| l.contains("dwarf unwinding:"))
        .expect("-v");
    let fp: u64 = line
        .split(" by frame pointer")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("frame-pointer count");
    assert!(fp * 100 <= total, "{fp} frames by frame pointer\n{stderr}");
    assert!(stderr.contains("unwind tables:"), "{stderr}");
    // The vDSO's frames are named (from bprof's own image: the process has
    // exited), as perf names them from its copy: the same share of samples
    // in the vDSO's clock_gettime.
    let in_vdso = |stacks: &BTreeMap<Vec<String>, u64>| -> (u64, u64) {
        let (mut called, mut named) = (0, 0);
        for (s, n) in stacks {
            let Some(at) = s.iter().position(|f| f == "__GI___clock_gettime") else {
                continue;
            };
            if let Some(callee) = s.get(at + 1) {
                called += n;
                if callee.ends_with("clock_gettime") {
                    named += n;
                }
            }
        }
        (called, named)
    };
    let (called, named) = in_vdso(&ours);
    assert!(
        called * 2 >= total && named * 100 >= called * 97,
        "{named} of {called} vDSO frames named\n{ours:?}"
    );
    let dir = scratch("unwind_vdso");
    let theirs = perf_stacks_of(&dir, "fx_unwind", &argv, &["-F", "999"]);
    let (_, perf_named) = in_vdso(&theirs);
    let perf_total: u64 = theirs.values().sum();
    let (ours_pct, perf_pct) = (pct(named, total), pct(perf_named, perf_total));
    assert!(
        (ours_pct - perf_pct).abs() <= 10.0,
        "in the vDSO: bprof {ours_pct:.1}%, perf {perf_pct:.1}%"
    );
}

#[test]
fn unwind_through_the_plt_into_a_library_matches_perf_dwarf() {
    same_as_perf("plt", &["chain8", "lib_entry", "lib_spin"]);
}

#[test]
fn unwind_into_a_dlopened_library_matches_perf_dwarf() {
    same_as_perf("dlopen", &["chain8", "lib_entry", "lib_spin"]);
}

/// A leaf whose CFA is rax + 8 (perlasm's stack realignment): the walk
/// takes rax from the sample's registers, as perf's unwinder does from the
/// registers it copies; before, every such sample ended "unsupported".
#[test]
fn unwind_a_leaf_whose_cfa_is_another_register_matches_perf_dwarf() {
    same_as_perf("leafreg", &["chain8", "leaf_rax"]);
}

#[test]
fn unwind_through_a_signal_frame_matches_perf_dwarf() {
    same_as_perf("signal", &["?", "on_signal", "leaf_spin"]);
}

/// fixtures/recurse.c built -O2 without frame pointers, in scratch `dir`.
fn recurse_without_frame_pointers(dir: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/recurse.c");
    let exe = scratch(dir).join("fx_recurse_nofp");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    exe
}

/// A stack deeper than the frames a stored stack keeps (256) is walked on
/// to its root: its innermost 191 frames, one `[elided N]` frame for the
/// middle, and its outermost 64, so the graph still roots at `main`.
/// recurse(300) walks 306 frames (see below): 51 left out.
#[test]
fn recursion_300_deep_keeps_its_innermost_and_outermost_frames() {
    recursion_300_deep_under(None);
}

/// The same walk without bpf_loop: its frames in two nested open-coded
/// loops (bpf/unwind.bpf.h) keep the same records.
#[test]
fn recursion_300_deep_keeps_the_same_frames_without_bpf_loop() {
    recursion_300_deep_under(Some("bpf-loop"));
}

fn recursion_300_deep_under(fallback: Option<&str>) {
    root_or_skip!();
    let _g = parallel();
    let exe =
        recurse_without_frame_pointers(&format!("unwind_recurse_{}", fallback.unwrap_or("normal")));
    let mut cmd = bprof();
    if let Some(f) = fallback {
        cmd.env("BPROF_FALLBACK", f);
    }
    let out = run(cmd
        .args(["-v", "-U", "-F", "999", "-f", "--call-graph", "dwarf", "--"])
        .arg(&exe)
        .args(["1", "300"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&stderr, &lines);
    let hot = lines.iter().max_by_key(|l| l.count).expect("a stack");
    assert_eq!(hot.frames[1], "_start", "{:?}", &hot.frames[..4]);
    assert_eq!(hot.frames.last().map(String::as_str), Some("bottom"));
    let elided: Vec<&String> = hot
        .frames
        .iter()
        .filter(|f| f.starts_with("[elided"))
        .collect();
    assert_eq!(elided, ["[elided 51]"], "{:?}", hot.frames);
    let recurse = hot.frames.iter().filter(|f| *f == "recurse").count();
    assert_eq!(recurse, 301 - 51, "{:?}", hot.frames);
    // comm, 64 outermost, the mark, 191 innermost.
    assert_eq!(hot.frames.len(), 1 + 64 + 1 + 191, "{:?}", hot.frames);
    assert!(
        stderr.contains("frames of deep stacks left out"),
        "{stderr}"
    );
}

/// The same 5,000-deep recursion as a kernel before 5.17 walks it (two
/// nested open-coded loops of 64 frames, 8,256 in all): it reaches `main`,
/// with the frames left out counted exactly.
#[test]
fn recursion_5000_deep_reaches_main_without_bpf_loop() {
    root_or_skip!();
    let _g = parallel();
    let exe = recurse_without_frame_pointers("unwind_recurse_deep_open");
    let out = run(bprof()
        .env("BPROF_FALLBACK", "all")
        .args(["-v", "-U", "-F", "499", "-f", "--"])
        .arg(&exe)
        .args(["2", "5000"]));
    assert_5000_deep_reaches_main(&out, 100);
}

/// bprof's profile of recurse(5000) (`out`): it succeeded, totals add up,
/// more than `min` samples of the recursion, at least 95% of them reaching
/// main, and the hottest stack has the frames left out counted exactly:
/// bottom's frame and 5001 recurse frames, main, two of libc's and _start,
/// 5006, of which 256 kept (one the mark).
fn assert_5000_deep_reaches_main(out: &std::process::Output, min: u64) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&stderr, &lines);
    let user: Vec<_> = lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| f == "bottom" || f == "done"))
        .collect();
    let total: u64 = user.iter().map(|l| l.count).sum();
    let rooted: u64 = user
        .iter()
        .filter(|l| l.frames.iter().any(|f| f == "main") && l.frames[1] == "_start")
        .map(|l| l.count)
        .sum();
    assert!(total > min, "{total} samples: {stderr}");
    assert!(
        rooted * 100 >= total * 95,
        "{rooted} of {total} reach main: {stderr}"
    );
    let hot = user.iter().max_by_key(|l| l.count).expect("a stack");
    assert!(
        hot.frames.iter().any(|f| f == "[elided 4751]"),
        "{:?}",
        hot.frames
    );
}

/// Two files of 8 MB for `git diff --no-index`: 1,350,000 lines each drawn
/// from the same 20,000 words in two different orders, which xdiff splits
/// into a recursion several hundred frames deep.
fn diff_inputs(dir: &Path) -> [PathBuf; 2] {
    let mut paths = [dir.join("a"), dir.join("b")];
    for (seed, path) in [1u64, 2].into_iter().zip(&mut paths) {
        let mut x = seed;
        let mut text = String::with_capacity(8_100_000);
        for _ in 0..1_350_000 {
            // Knuth's MMIX LCG: a fixed, portable sequence.
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            text.push_str(&format!("{:05}\n", (x >> 33) % 20_000));
        }
        std::fs::write(&*path, text).expect("write a diff input");
    }
    paths
}

/// Debian's stripped git, diffing two 8 MB files (xdiff's recursive
/// compare, hundreds of frames deep): nearly every sample reaches main
/// (__libc_start_call_main's callee, the binary having no symbols), deep
/// ones through an `[elided N]` frame.
#[test]
fn git_diff_of_two_8_mib_files_reaches_main() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("unwind_git_diff");
    let [a, b] = diff_inputs(&dir);
    let git = Workload(
        Command::new("git")
            .args(["diff", "--no-index"])
            .arg(&a)
            .arg(&b)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run git"),
    );
    // Past reading and hashing the files, into the compare.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let out = run(bprof().args(["-v", "-F", "499", "-f", "-p", &git.id().to_string(), "4"]));
    drop(git);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&stderr, &lines);
    let total: u64 = lines.iter().map(|l| l.count).sum();
    let rooted: u64 = lines
        .iter()
        .filter(|l| {
            l.frames.windows(2).any(|w| {
                w[0] == "__libc_start_call_main" && (w[1] == "main" || w[1].starts_with("git+0x"))
            })
        })
        .map(|l| l.count)
        .sum();
    let deep: u64 = lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| f.starts_with("[elided")))
        .map(|l| l.count)
        .sum();
    assert!(total > 200, "{total} samples: {stderr}");
    assert!(
        rooted * 100 >= total * 95,
        "{rooted} of {total} reach main: {stderr}"
    );
    // Deeper than the frames a stored stack keeps (256).
    assert!(deep * 10 >= total, "{deep} of {total} deep: {stderr}");
}

/// Recursion 5,000 deep (far past any fixed depth limit) reaches `main` in
/// nearly every sample, with the frames left out counted exactly: the
/// fixture's depth is known. perf's dwarf mode, copying 8 KiB of stack,
/// reaches `main` in none of the same run's samples.
#[test]
fn recursion_5000_deep_reaches_main_where_perf_dwarf_does_not() {
    root_or_skip!();
    let _g = exclusive();
    let exe = recurse_without_frame_pointers("unwind_recurse_deep");
    let dir = scratch("unwind_recurse_deep_perf");
    let data = dir.join("perf.data");
    let out = run(bprof()
        .args(["-v", "-U", "-F", "499", "-f", "--call-graph", "dwarf", "--"])
        .arg(&exe)
        .args(["3", "5000"]));
    assert_5000_deep_reaches_main(&out, 200);
    // perf on the same work: its 8 KiB copies hold ~500 of the frames.
    perf_record_with(
        &data,
        &["-F", "499", "--call-graph", "dwarf"],
        &[exe.as_os_str(), "2".as_ref(), "5000".as_ref()],
    );
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(&data)
        .output()
        .expect("perf script");
    let text = String::from_utf8_lossy(&script.stdout);
    let samples = text
        .split("\n\n")
        .filter(|s| s.contains("bottom") || s.contains("done"));
    let (mut perf_total, mut perf_main) = (0, 0);
    for s in samples {
        perf_total += 1;
        perf_main += usize::from(s.lines().any(|l| l.trim_end().ends_with(" main")));
    }
    assert!(perf_total > 100, "{perf_total} perf samples");
    assert!(
        perf_main * 100 < perf_total * 5,
        "perf reached main in {perf_main} of {perf_total}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// User stacks of up to 30 records are stored in values of that size,
/// deeper ones in a map of their own (bpf/profile.h, BPROF_SHORT_FRAMES):
/// stacks just under and just over the limit come out whole, each with
/// every recurse frame the fixture has and its root, and every sample.
#[test]
fn stacks_either_side_of_the_short_storage_limit_are_whole() {
    root_or_skip!();
    let _g = parallel();
    let exe = recurse_without_frame_pointers("unwind_short_deep");
    // recurse(d) has d + 1 recurse frames under main, libc's two and
    // _start, with bottom as the leaf: d + 6 records (28 and 31 here).
    for depth in [22usize, 25] {
        let out = run(bprof()
            .args(["-v", "-U", "-F", "999", "-f", "--call-graph", "dwarf", "--"])
            .arg(&exe)
            .args(["1".to_string(), depth.to_string()]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        assert_totals(&stderr, &lines);
        let hot = lines.iter().max_by_key(|l| l.count).expect("a stack");
        let recurse = hot.frames.iter().filter(|f| *f == "recurse").count();
        assert_eq!(recurse, depth + 1, "depth {depth}: {:?}", hot.frames);
        assert_eq!(hot.frames.last().map(String::as_str), Some("bottom"));
        assert_eq!(hot.frames[1], "_start", "depth {depth}: {:?}", hot.frames);
        assert_eq!(
            hot.frames.len(),
            depth + 7,
            "comm and {} records",
            depth + 6
        );
    }
}

/// How many walks ended at the outermost frame, of all walks (`-v`).
fn rooted_walks(stderr: &str) -> (u64, u64) {
    let line = dwarf_line(stderr);
    // A kind of end no walk had is not listed.
    let rooted = if line.contains(" reached the outermost frame") {
        number_before(line, " reached the outermost frame")
    } else {
        0
    };
    (rooted, number_before(line, " walks"))
}

/// A program without frame pointers that is not ours: every stack perf
/// finds in at least 20% of samples is one of bprof's, frame for frame,
/// with at least half perf's share; and nearly every walk ends at the
/// outermost frame (counted by how walks ended: a stripped binary's
/// `_start` has no name). Returns bprof's stacks and perf's.
fn other_binary_same_as_perf(comm: &str, argv: &[String], dir: &Path) -> Stacks2 {
    let (ours, stderr) = bprof_stacks(comm, &["-F", "999"], argv);
    let theirs = perf_stacks(dir, comm, argv);
    let share = |m: &BTreeMap<Vec<String>, u64>, s: &Vec<String>| {
        m.get(s).copied().unwrap_or(0) as f64 / m.values().sum::<u64>().max(1) as f64
    };
    let big: Vec<&Vec<String>> = theirs.keys().filter(|s| share(&theirs, s) >= 0.2).collect();
    assert!(!big.is_empty(), "{theirs:?}");
    for s in big {
        assert!(
            share(&ours, s) >= share(&theirs, s) / 2.0,
            "perf's {s:?} ({:.2}) is {:.2} of bprof's\nbprof: {ours:?}\n{stderr}",
            share(&theirs, s),
            share(&ours, s)
        );
    }
    let (rooted, walks) = rooted_walks(&stderr);
    assert!(walks > 100, "{stderr}");
    assert!(
        rooted * 100 >= walks * 90,
        "{rooted} of {walks} walks rooted\n{stderr}"
    );
    (ours, theirs, stderr)
}

/// bprof's stacks, perf's stacks, bprof's stderr.
type Stacks2 = (
    BTreeMap<Vec<String>, u64>,
    BTreeMap<Vec<String>, u64>,
    String,
);

#[test]
fn unwind_rust_release_binary_matches_perf_dwarf() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("unwind_rust");
    // Release without forced frame pointers: Rust's default.
    let exe = dir.join("fx_rust_nofp");
    let st = Command::new("rustc")
        .args(["-O", "-g", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust_work.rs"))
        .status()
        .unwrap();
    assert!(st.success());
    let argv = vec![exe.display().to_string(), "2".to_string()];
    other_binary_same_as_perf("fx_rust_nofp", &argv, &dir);
}

/// The samples of `stacks` whose frames (root first) `keep` accepts.
fn samples_where(stacks: &BTreeMap<Vec<String>, u64>, keep: impl Fn(&[String]) -> bool) -> u64 {
    stacks.iter().filter(|(s, _)| keep(s)).map(|(_, n)| n).sum()
}

/// Percent of the samples whose stack holds every frame of `through`.
fn share_through(stacks: &BTreeMap<Vec<String>, u64>, through: &[&str]) -> f64 {
    let total: u64 = stacks.values().sum();
    let with = samples_where(stacks, |s| through.iter().all(|f| s.iter().any(|x| x == f)));
    crate::common::pct(with, total)
}

/// A Debian-packaged compressor (stripped, no frame pointers) compressing
/// `mib` MiB of generated compressible text: its stacks match perf's
/// `--call-graph dwarf` ([`other_binary_same_as_perf`]), and nearly all
/// pass through each frame of `through` (libc's start, a library's
/// exported entry point) as often as perf's, or more.
fn debian_compressor_matches_perf(comm: &str, args: &[&str], mib: usize, through: &[&str]) {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch(&format!("unwind_{comm}"));
    let input = dir.join("input.txt");
    let mut text = String::with_capacity(mib << 20);
    let mut x: u64 = 1;
    while text.len() < mib << 20 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(["alpha ", "beta ", "gamma ", "delta\n"][(x >> 62) as usize]);
        text.push_str(&format!("{} ", (x >> 40) % 1000));
    }
    std::fs::write(&input, text).unwrap();
    let argv: Vec<String> = std::iter::once(comm)
        .chain(args.iter().copied())
        .map(str::to_string)
        .chain([input.display().to_string()])
        .collect();
    let (ours, theirs, stderr) = other_binary_same_as_perf(comm, &argv, &dir);
    let (mine, perfs) = (
        share_through(&ours, through),
        share_through(&theirs, through),
    );
    assert!(
        mine >= 90.0 && mine >= perfs - 5.0,
        "{through:?} in {mine:.1}% of bprof's samples, {perfs:.1}% of perf's\n{stderr}"
    );
}

#[test]
fn unwind_debian_gzip_matches_perf_dwarf() {
    // gzip -6 works on 24 MiB for about 2 s.
    debian_compressor_matches_perf("gzip", &["-kf", "-6"], 24, &["__libc_start_call_main"]);
}

#[test]
fn unwind_debian_xz_through_liblzma_matches_perf_dwarf() {
    // Single-threaded, so every stack starts in main's thread: xz -6
    // works on 4 MiB for about 2.5 s. lzma_code is liblzma's exported
    // entry point (the library is stripped: its inner frames are unnamed).
    debian_compressor_matches_perf(
        "xz",
        &["-T1", "-6", "-kf"],
        4,
        &["__libc_start_call_main", "lzma_code"],
    );
}

#[test]
fn call_graph_fp_takes_the_kernels_walk_and_bad_values_are_one_line_errors() {
    root_or_skip!();
    let _g = parallel();
    let (exe, _) = fixtures();
    let out = run(bprof()
        .args(["-v", "-U", "-F", "999", "-f", "--call-graph", "fp", "--"])
        .arg(&exe)
        .args(["chain", "1"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // No unwinder ran, and without frame pointers no stack reaches _start.
    assert!(!stderr.contains("dwarf unwinding"), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert!(lines.iter().map(|l| l.count).sum::<u64>() > 100);
    // (The loader's own start-up, ld.so's `_start;_dl_sysdep_start`, keeps
    // frame pointers: only the program's way to main is checked.)
    assert!(!lines
        .iter()
        .any(|l| l.frames.iter().any(|f| f.starts_with("__libc_start"))));
    let bad = run(bprof().args(["--call-graph", "lbr", "--", "true"]));
    crate::common::assert_one_line_error(&bad);
}

/// The kernel types libbpf relocates the walk's reads against are kept per
/// boot (src/bpf/core_btf.rs). A profile using the kept copy walks perf's
/// stacks; a garbage copy fails the load and is replaced; a copy another
/// user owns is not read.
#[test]
fn kernel_types_kept_per_boot_serve_the_walk_and_a_bad_copy_is_not_used() {
    use std::os::unix::fs::MetadataExt;
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let dir = scratch("unwind_core_btf");
    let argv = [exe.display().to_string(), "chain".into(), "1".into()];
    let profile = || bprof_stacks("fx_unwind", &["-F", "999"], &argv);
    let core_line = |stderr: &str| -> String {
        stderr
            .lines()
            .find(|l| l.starts_with("bprof: kernel types for CO-RE "))
            .unwrap_or_else(|| panic!("no CO-RE line\n{stderr}"))
            .to_string()
    };
    // Whatever the tests before did, a profile leaves a copy behind.
    let (_, stderr) = profile();
    let line = core_line(&stderr);
    let path = PathBuf::from(
        line.split(' ')
            .find(|w| w.starts_with("/run/bprof/core-"))
            .unwrap_or_else(|| panic!("{line}"))
            .trim_end_matches(','),
    );
    assert!(path.exists(), "{line}");

    // The next profile relocates against the copy, and walks as perf does.
    let (ours, stderr) = profile();
    assert!(
        core_line(&stderr).contains("kept earlier this boot"),
        "{stderr}"
    );
    let theirs = perf_stacks(&dir, "fx_unwind", &argv);
    let (mine, n, total) = hottest(&ours);
    assert_eq!(mine, hottest(&theirs).0, "{stderr}");
    assert_eq!(mine.first().map(String::as_str), Some("_start"));
    assert!(n * 2 > total, "{n} of {total}");

    // Other tests' profiles run alongside and may replace a planted file
    // before this one reads it: each case is tried a few times.
    let seen = |plant: &dyn Fn(), expect: &str| {
        for _ in 0..5 {
            plant();
            let (ours, stderr) = profile();
            assert_eq!(hottest(&ours).0, mine, "{stderr}");
            if core_line(&stderr).contains(expect) {
                return;
            }
        }
        panic!("never saw '{expect}'");
    };
    // A copy that is not BTF (a crash cannot leave one: copies are renamed
    // into place): the load is retried with the kernel's BTF, and this
    // build keeps no copy for the rest of the boot (a marker says so).
    let marker = PathBuf::from(format!("{}.refused", path.display()));
    let _forget = crate::common::Planted(marker.clone());
    seen(
        &|| {
            let _ = std::fs::remove_file(&marker);
            std::fs::write(&path, b"not BTF").unwrap();
        },
        "the load failed with",
    );
    assert!(marker.exists() && !path.exists());
    let (_, stderr) = profile();
    assert!(
        core_line(&stderr).contains("no copy kept: a copy failed a load earlier this boot"),
        "{stderr}"
    );
    assert!(!path.exists());
    std::fs::remove_file(&marker).unwrap();
    let (_, stderr) = profile();
    // Kept anew, by this profile or (tests run alongside) another's.
    let line = core_line(&stderr);
    assert!(
        line.contains(" kept in ") || line.contains("kept earlier this boot"),
        "{stderr}"
    );
    // A copy that is not root's is neither read nor kept: replaced.
    seen(
        &|| {
            run(Command::new("chown").arg("nobody").arg(&path));
        },
        "from the kernel's BTF; ",
    );
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 0);
}

/// Unmounts an overlay when dropped.
struct Overlay(PathBuf);

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// An overlay mounted under `dir` whose lower layer holds a copy of `bin`
/// named `name`: (the merged directory, its unmounting guard).
fn overlay_of(dir: &Path, bin: &Path, name: &str) -> (PathBuf, Overlay) {
    let (lower, upper, work, merged) = (
        dir.join("lower"),
        dir.join("upper"),
        dir.join("work"),
        dir.join("merged"),
    );
    for d in [&lower, &upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::copy(bin, lower.join(name)).unwrap();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let st = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &options])
        .arg(&merged)
        .status()
        .expect("run mount");
    assert!(st.success(), "mounting an overlay at {}", merged.display());
    (merged.clone(), Overlay(merged))
}

/// A child forked without exec runs its parent's mappings; the side band's
/// fork record gives it them. On overlayfs (containers) that matters: the
/// kernel's own answer (bpf_find_vma) names the file by the layer's inode,
/// not the dev:inode /proc and fstat show, so without its parent's
/// mappings the child's every walk ended at its first frame, unnamed.
#[test]
fn a_forked_child_on_overlayfs_walks_with_its_parents_mappings_as_perf_does() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("unwind_overlay");
    let (merged, _mounted) = overlay_of(&dir, &crate::common::fixture("forker"), "fx_forker");
    let argv = [merged.join("fx_forker").display().to_string(), "2".into()];
    let (ours, stderr) = bprof_stacks("fx_forker", &["-F", "999"], &argv);
    let theirs = perf_stacks(&dir, "fx_forker", &argv);
    let child = |stacks: &BTreeMap<Vec<String>, u64>| -> BTreeMap<Vec<String>, u64> {
        stacks
            .iter()
            .filter(|(s, _)| s.last().is_some_and(|f| f == "child_work"))
            .map(|(s, n)| (s.clone(), *n))
            .collect()
    };
    let (mine, n, _) = hottest(&child(&ours));
    assert_eq!(mine, hottest(&child(&theirs)).0, "{stderr}");
    assert_eq!(mine.first().map(String::as_str), Some("_start"), "{mine:?}");
    // Only the first ms, before the fork record is read, may end early.
    let total: u64 = ours.values().sum();
    assert!(
        n * 100 >= total * 95,
        "{n} of {total} samples whole\n{stderr}"
    );
}

/// Of the samples whose leaf is `leaf`, those walked through every frame of
/// `through`, and all.
fn whole_share(stacks: &BTreeMap<Vec<String>, u64>, leaf: &str, through: &[&str]) -> (u64, u64) {
    let mut whole = 0;
    let mut total = 0;
    for (s, n) in stacks {
        if s.last().is_none_or(|f| f != leaf) {
            continue;
        }
        total += n;
        if through.iter().all(|t| s.contains(&t.to_string())) {
            whole += n;
        }
    }
    (whole, total)
}

/// Runs `runs` processes of `exe plt 0.02` (~20 ms each) under
/// `-- sh -c` with bprof and with perf: bprof's share of lib_spin samples
/// walked from libc's start through main, chain8 and lib_entry must be at
/// least 98.5% and within 2% of perf's. Returns the command line and
/// bprof's stderr.
fn short_runs_whole_as_perf(exe: &Path, runs: u64, dir: &Path) -> ([String; 3], String) {
    let argv = [
        "sh".to_string(),
        "-c".into(),
        format!(
            "for i in $(seq {runs}); do {} plt 0.02; done",
            exe.display()
        ),
    ];
    let (ours, stderr) = bprof_stacks("fx_unwind", &["-F", "999"], &argv);
    let theirs = perf_stacks(dir, "fx_unwind", &argv);
    // From libc's start (perf's libdw does not always step on to _start
    // from there: 933 of 2374 samples did in one run).
    let through = ["__libc_start_call_main", "main", "chain8", "lib_entry"];
    let (whole, total) = whole_share(&ours, "lib_spin", &through);
    let (p_whole, p_total) = whole_share(&theirs, "lib_spin", &through);
    // Five samples a process at least (each spins 20 ms of wall time,
    // less CPU when the machine is busy).
    let least = runs * 5;
    assert!(
        total >= least && p_total >= least,
        "{total} and {p_total} samples in lib_spin\n{stderr}"
    );
    // perf copies the stack and unwinds after the fact: ~100% here.
    assert!(
        whole * 1000 >= total * 985 && whole * p_total * 100 >= p_whole * total * 98,
        "bprof {whole} of {total} whole, perf {p_whole} of {p_total}\n{stderr}"
    );
    (argv, stderr)
}

#[test]
fn short_lived_commands_walk_whole_from_their_first_ms_as_perf_does() {
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let dir = scratch("unwind_short");
    // 120 processes of ~20 ms: before user space reads a process's mmap
    // records (up to ~10 ms) its walks need the mappings the BPF side
    // learned at its exec and mmaps, or half their samples end early.
    let runs = 120;
    let (argv, stderr) = short_runs_whole_as_perf(&exe, runs, &dir);
    // Each process's program, ld.so, libc and library were learned.
    let line = dwarf_line(&stderr);
    let learned = number_before(line, " at a target's mmap or exec");
    assert!(learned >= 3 * runs, "{line}");
    // Without the mmap hook only the program and ld.so, at each exec.
    let (_, stderr) = bprof_stacks("fx_unwind", &["-F", "999", "--mmap-hook", "off"], &argv);
    let line = dwarf_line(&stderr);
    let learned = number_before(line, " at a target's mmap or exec");
    // (sh and seq exec too.)
    assert!(learned <= 2 * (runs + 2), "{line}");
    let bad = run(bprof().args(["--mmap-hook", "maybe", "--", "true"]));
    crate::common::assert_one_line_error(&bad);
}

/// Short-lived processes of a program on overlayfs (a container's): the
/// BPF side learns the program's mapping at exec under the layer's inode,
/// which user space gives the table it built under the overlay's (the
/// dev:inode /proc and fstat show), so from the second process on their
/// first ms walk whole too.
#[test]
fn short_lived_commands_on_overlayfs_walk_whole_from_their_first_ms_as_perf_does() {
    root_or_skip!();
    let _g = exclusive();
    let (exe, _) = fixtures();
    let dir = scratch("unwind_overlay_short");
    let (merged, _mounted) = overlay_of(&dir, &exe, "fx_unwind");
    // Without the alias, the first ms of each process end early.
    let (_, stderr) = short_runs_whole_as_perf(&merged.join("fx_unwind"), 100, &dir);
    assert!(
        stderr.contains("1 files also keyed by the inode the kernel names"),
        "{stderr}"
    );
}
