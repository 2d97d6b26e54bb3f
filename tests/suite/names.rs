//! Honest names: frames without a symbol show their module and offset, and a
//! stripped binary is named from a debug file kept by build ID (run as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

use crate::common::Planted;

fn build_id(bin: &Path) -> String {
    let out = run(Command::new("readelf").arg("-n").arg(bin));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build ID")
}

/// work631 stripped of every symbol and of its debuglink, plus its debug file.
fn stripped_work631(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("fx_w631s");
    let debug = dir.join("fx_w631s.debug");
    let full = fixture("work631");
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    ok(Command::new("objcopy")
        .arg("--strip-all")
        .arg(&full)
        .arg(&bin));
    (bin, debug)
}

/// Puts `debug` where debug files are kept by `bin`'s build ID (removed
/// when the guard drops); also returns the build ID.
fn plant_by_build_id(bin: &Path, debug: &Path) -> (Planted, String) {
    let id = build_id(bin);
    let at = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(debug, &at).unwrap();
    (Planted(at), id)
}

/// A profile of work631 (or a copy of it) doing fixed work: 40 rounds,
/// about a CPU-second, as many samples on a busy machine.
fn profile(bin: &Path) -> (Vec<Folded>, String) {
    let out = run(bprof()
        .args(["--no-counts", "-F", "999", "-f", "--"])
        .arg(bin)
        .args(["0", "40"]));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (parse_folded(&String::from_utf8_lossy(&out.stdout)), err)
}

/// [`profile`] naming functions only (`--no-inline`), as files past the
/// DWARF budget are: the path that keeps a debug file's functions per boot.
fn profile_names_only(bin: &Path) -> (Vec<Folded>, String) {
    let out = run(bprof()
        .args(["--no-counts", "--no-inline", "-F", "999", "-f", "--"])
        .arg(bin)
        .arg("1"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (parse_folded(&String::from_utf8_lossy(&out.stdout)), err)
}

fn unknown_pct(stderr: &str) -> f64 {
    let (pre, _) = stderr
        .split_once("% of sampled frames unknown")
        .expect("summary");
    pre.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn stripped_frames_show_module_and_offset_then_names_from_the_build_id_debug_file() {
    root_or_skip!();
    let _g = exclusive();
    // The stripped work631 is named from a planted debug file or not at all.
    let _debug = hold(Held::DebugFiles);
    let dir = scratch("names_stripped");
    let (bin, debug) = stripped_work631(&dir);

    // No symbols anywhere: the frames in the binary say where they are.
    let (lines, err) = profile(&bin);
    let total: u64 = lines.iter().map(|l| l.count).sum();
    let in_module = lines
        .iter()
        .filter(|l| l.frames.iter().any(|f| f.starts_with("fx_w631s+0x")))
        .map(|l| l.count)
        .sum::<u64>();
    assert!(in_module * 10 > total * 9, "{lines:?}");
    assert_eq!(with_frame(&lines, "fx_w631s", "heavy"), 0);
    // Only frames outside any file (exec's first instants) stay [unknown].
    assert!(
        with_frame(&lines, "fx_w631s", "[unknown]") * 20 < total,
        "{lines:?}"
    );
    assert!(unknown_pct(&err) > 30.0, "{err}");

    // The debug file at /usr/lib/debug/.build-id/xx/rest.debug (no
    // debuglink in the binary): named, in perf's 6:3:1 shares.
    let (_planted, _) = plant_by_build_id(&bin, &debug);
    let (lines, err) = profile(&bin);
    let heavy = with_frame(&lines, "fx_w631s", "heavy");
    let medium = with_frame(&lines, "fx_w631s", "medium");
    let light = with_frame(&lines, "fx_w631s", "light");
    let all = total_for(&lines, "fx_w631s");
    assert!(heavy + medium + light > all * 9 / 10, "{lines:?}");
    let share = |n| pct(n, heavy + medium + light);
    assert!((share(heavy) - 60.0).abs() < 8.0, "{lines:?}");
    assert!((share(medium) - 30.0).abs() < 8.0, "{lines:?}");
    assert!(unknown_pct(&err) < 10.0, "{err}");
    // perf on the unstripped binary agrees on the shares.
    let perf = perf_shares(&fixture("work631"), "1", &dir);
    assert!((perf["heavy"] - share(heavy)).abs() < 10.0, "{perf:?}");
}

#[test]
fn unknown_as_module_gives_one_frame_per_module() {
    root_or_skip!();
    let _g = parallel();
    // The stripped work631 is named from a planted debug file or not at all.
    let _debug = hold(Held::DebugFiles);
    let dir = scratch("names_module");
    let (bin, _) = stripped_work631(&dir);
    let out = run(bprof()
        .args([
            "--no-counts",
            "-F",
            "999",
            "-f",
            "--unknown-as-module",
            "--",
        ])
        .arg(&bin)
        .arg("1"));
    assert!(out.status.success());
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert!(
        with_frame(&lines, "fx_w631s", "[fx_w631s]") * 10 > total * 9,
        "{lines:?}"
    );
    assert!(!lines
        .iter()
        .any(|l| l.frames.iter().any(|f| f.contains("+0x"))));
}

/// Kills a background process when the test ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = (self.0.kill(), self.0.wait());
    }
}

#[test]
fn hostile_a_same_build_id_copy_never_names_another_users_process() {
    root_or_skip!();
    let _g = parallel();
    let full = fixture("work631");
    // nobody's copy: same build ID, functions renamed.
    let dir = &PathBuf::from(format!("/tmp/bprof-hostile-spoof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
    let _gone = RemovedAtEnd(dir.clone());
    std::fs::create_dir_all(dir).unwrap();
    let spoof = dir.join("fx_spoof");
    let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
    ok(Command::new("objcopy")
        .args([
            // Its DWARF would still say "heavy": only the renamed symtab.
            "--strip-debug",
            "--redefine-sym",
            "heavy=evil_heavy",
            "--redefine-sym",
            "medium=evil_medium",
            "--redefine-sym",
            "light=evil_light",
        ])
        .arg(&full)
        .arg(&spoof));
    ok(Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(dir));
    assert_eq!(build_id(&spoof), build_id(&full));

    let theirs = Running(
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(&spoof)
            // Killed when the test ends: long enough for any start-up.
            .arg("60")
            .spawn()
            .unwrap(),
    );
    let mine = Running(Command::new(&full).arg("60").spawn().unwrap());
    // With what the kernel ran root's process meanwhile.
    let (out, _, ran) = run_beside(
        mine.0.id(),
        bprof()
            .args(["--no-counts", "-F", "499", "-f", "-p"])
            .arg(format!("{},{}", mine.0.id(), theirs.0.id())),
        "2",
    );
    drop((mine, theirs));
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let root_total = total_for(&lines, "fx_work631");
    let named =
        with_frame(&lines, "fx_work631", "heavy") + with_frame(&lines, "fx_work631", "medium");
    assert!(ran > 100.0, "root's process barely ran: {ran} ms");
    assert!(
        root_total >= least_samples(ran, 499.0) && named * 10 > root_total * 7,
        "{ran} CPU-ms: {lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.frames[0] == "fx_work631" && l.frames.iter().any(|f| f.starts_with("evil_"))),
        "root's process named from nobody's file: {lines:?}"
    );
}

/// A real `debuginfod` serving a directory, on loopback.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = (self.0.kill(), self.0.wait());
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
// Long on purpose: one server set-up, then fetch, cached, dead server: each step needs the one before.
fn debuginfod_fetches_and_caches_missing_debug_info_and_a_dead_server_costs_a_bounded_wait() {
    root_or_skip!();
    if Command::new("debuginfod")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("debuginfod is not installed (scripts/install-deps.sh installs it)");
    }
    let _g = parallel();
    // The stripped work631 is named from a planted debug file or not at all.
    let _debug = hold(Held::DebugFiles);
    let dir = scratch("names_debuginfod");
    let (bin, _) = stripped_work631(&dir);
    let id = build_id(&bin);
    // The server scans a directory holding the unstripped binary.
    let served = dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(fixture("work631"), served.join("fx_work631")).unwrap();
    let port = free_port();
    let _server = Server(
        Command::new("debuginfod")
            .args(["-F", "-p", &port.to_string(), "-d"])
            .arg(dir.join("db.sqlite"))
            .arg(&served)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}");
    // Ready once it serves this build ID (it scans in the background).
    let ready = (0..300).any(|i| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        // A fresh cache each time: the client caches a miss for minutes.
        std::process::Command::new("debuginfod-find")
            .env("DEBUGINFOD_URLS", &url)
            .env(
                "DEBUGINFOD_CACHE_PATH",
                dir.join(format!("probe-cache-{i}")),
            )
            .args(["debuginfo", &id])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(ready, "debuginfod never served {id}");

    let cache = dir.join("cache");
    let profile_with = |urls: &str, timeout: &str| {
        let out = run(bprof()
            .env("DEBUGINFOD_URLS", urls)
            .env("DEBUGINFOD_CACHE_PATH", &cache)
            .env("DEBUGINFOD_TIMEOUT", timeout)
            .args(["--no-counts", "-F", "999", "-f", "--"])
            .arg(&bin)
            .arg("1"));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        (parse_folded(&String::from_utf8_lossy(&out.stdout)), err)
    };
    let (lines, err) = profile_with(&url, "5");
    let named = with_frame(&lines, "fx_w631s", "heavy") + with_frame(&lines, "fx_w631s", "medium");
    assert!(
        named * 10 > total_for(&lines, "fx_w631s") * 7,
        "{err} {lines:?}"
    );
    let cached = cache.join(&id).join("debuginfo");
    assert!(cached.is_file(), "not cached at {}", cached.display());

    // The cache alone names it next time, with no server at all.
    drop(_server);
    let (lines, _) = profile_with("http://127.0.0.1:9", "5");
    assert!(with_frame(&lines, "fx_w631s", "heavy") > 0);

    // A server that accepts and never answers: a bounded wait, one note.
    std::fs::remove_dir_all(&cache).unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let t = std::time::Instant::now();
    let (lines, err) = profile_with(&silent_url, "2");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
    assert!(err.contains("bprof: debuginfod: "), "{err}");
    assert!(with_frame(&lines, "fx_w631s", "heavy") == 0);
    assert!(lines.iter().map(|l| l.count).sum::<u64>() > 300);
    drop(silent);
}

/// File offset of symbol `name` in `bin` (from nm and the PT_LOAD headers).
fn file_offset_of(bin: &Path, name: &str) -> u64 {
    let nm = run(Command::new("nm").arg(bin));
    let vaddr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && w[2] == name).then(|| u64::from_str_radix(w[0], 16).unwrap())
        })
        .expect("symbol");
    let ph = run(Command::new("readelf").args(["-lW"]).arg(bin));
    String::from_utf8_lossy(&ph.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .find_map(|l| {
            let w: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(5)
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
                .collect();
            let (off, va, memsz) = (w[0], w[1], w[4]);
            (vaddr >= va && vaddr < va + memsz).then(|| vaddr - va + off)
        })
        .expect("a segment")
}

#[test]
fn an_address_on_a_data_object_is_never_named_after_it() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("names_data");
    let src = dir.join("data.c");
    std::fs::write(
        &src,
        "int table[4096] = {1};\n__attribute__((noinline)) int lookup_slot(int i) { return table[i]; }\nint main(void) { return lookup_slot(1); }\n",
    )
    .unwrap();
    let bin = dir.join("fx_data");
    assert!(Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let hex = build_id(&bin);
    let mut id = [0u8; 20];
    for (i, b) in id.iter_mut().enumerate().take(hex.len() / 2) {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let me = std::process::id();
    let mut index = bprof::collect::sideband::MmapIndex::default();
    index
        .by_build_id
        .entry(id)
        .or_default()
        .insert(bprof::process::maps::Mapping {
            pid: me,
            path: bin.clone(),
        });
    let (data_off, code_off) = (
        file_offset_of(&bin, "table"),
        file_offset_of(&bin, "lookup_slot"),
    );
    let frame = |offset| bprof::stacks::UserFrame::File {
        build_id: id,
        offset,
    };
    let raw = vec![bprof::stacks::RawStack {
        tgid: me,
        tid: me,
        cgroup: 0,
        comm: "fx_data".into(),
        kernel: Vec::new(),
        // Leaf first: an address in lookup_slot, then a "return address" in table.
        user: vec![frame(code_off), frame(data_off + 9)],
        kernel_lost: false,
        user_lost: false,
        off_cpu: false,
        count: 1,
        python: Vec::new(),
    }];
    let sym = bprof::symbolize::symbolizer();
    let (stacks, stats) = bprof::symbolize::symbolize(&sym, &raw, &index);
    assert_eq!(&*stacks[0].user[0], "lookup_slot");
    assert_eq!(*stacks[0].user[1], *format!("fx_data+{:#x}", data_off + 8));
    assert_eq!((stats.sampled_frames, stats.sampled_unknown), (2, 1));
}

#[test]
fn a_debug_files_functions_are_kept_per_boot_and_forgotten_when_it_changes() {
    root_or_skip!();
    let _g = parallel();
    // The stripped work631 is named from a planted debug file or not at all.
    let _debug = hold(Held::DebugFiles);
    let dir = scratch("names_cache");
    let (bin, debug) = stripped_work631(&dir);
    let (planted, id) = plant_by_build_id(&bin, &debug);
    let at = planted.0.clone();
    let cache = PathBuf::from(format!("/run/bprof/names-{id:0<40}"));
    let _ = std::fs::remove_file(&cache);
    let _forget = Planted(cache.clone());

    // Named from the debug file, and its functions kept.
    let (lines, _) = profile_names_only(&bin);
    assert!(with_frame(&lines, "fx_w631s", "heavy") > 150, "{lines:?}");
    // (What it named: a later miss would learn all of its functions.)
    let kept = std::fs::read_to_string(&cache).expect("the cache file");
    assert_eq!(kept.lines().nth(1), Some("some"), "{kept}");
    assert!(kept.lines().any(|l| l.ends_with(" heavy")), "{kept}");

    // The next profile's names come from what was kept, not the DWARF.
    std::fs::write(&cache, kept.replace(" heavy\n", " heavy_as_kept\n")).unwrap();
    let (lines, _) = profile_names_only(&bin);
    assert!(
        with_frame(&lines, "fx_w631s", "heavy_as_kept") > 150,
        "{lines:?}"
    );
    assert_eq!(with_frame(&lines, "fx_w631s", "heavy"), 0, "{lines:?}");

    // A changed debug file (its times) makes the kept names worthless.
    run(Command::new("touch").arg(&at));
    let (lines, _) = profile_names_only(&bin);
    assert!(with_frame(&lines, "fx_w631s", "heavy") > 150, "{lines:?}");
    assert_eq!(with_frame(&lines, "fx_w631s", "heavy_as_kept"), 0);
}

/// bprof's own hooks run in its targets (the mmap learner at each mmap's
/// return): a sample there shows their code, named as the kernel names it
/// (`bpf_prog_<tag>_<function>`, what its kallsyms lists while they are
/// loaded) from the loaded programs' info, without making the kernel print
/// the whole live /proc/kallsyms (~40 ms of system time) for them.
#[test]
fn bprofs_own_bpf_frames_are_named_as_kallsyms_names_them_without_reading_it() {
    root_or_skip!();
    let _g = exclusive();
    let bin = fixture("mmapchurn");
    let child = bprof()
        .args(["-v", "-F", "4999", "-f", "--mmap-hook", "on", "--"])
        .args([bin.to_str().unwrap(), "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn bprof");
    // The kernel's own names of the loaded BPF functions, mid-profile.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let loaded: std::collections::HashSet<&str> = kallsyms
        .lines()
        .filter(|l| l.ends_with("[bpf]"))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let out = child.wait_with_output().expect("bprof");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&stderr, &lines);
    // A BPF function's kernel name: bpf_prog_<16-hex tag>_<function>. The
    // kernel's own bpf_prog_free and its kin are not, and a sample can
    // land in them.
    let is_prog = |f: &str| {
        f.strip_prefix("bpf_prog_").is_some_and(|rest| {
            rest.len() > 17
                && rest.as_bytes()[16] == b'_'
                && rest[..16].bytes().all(|b| b.is_ascii_hexdigit())
        })
    };
    let mut bpf_frames = 0;
    for l in &lines {
        // Kernel frames end in _[k] in folded stacks.
        let kernel = l.frames.iter().map(|f| f.trim_end_matches("_[k]"));
        for f in kernel.filter(|f| is_prog(f)) {
            assert!(loaded.contains(f), "{f} is not a kallsyms name: {loaded:?}");
            bpf_frames += l.count;
        }
    }
    assert!(bpf_frames > 0, "no sample in bprof's hooks\n{stderr}");
    let learner = lines.iter().any(|l| {
        l.frames
            .iter()
            .any(|f| is_prog(f) && f.ends_with("_learn_mmap_[k]"))
    });
    assert!(learner, "no sample in the mmap learner\n{stderr}");
    // The live file is read only for addresses bprof could place in
    // neither the core text nor a BPF program: a module's, a trampoline's,
    // or a stale word the kernel's unwinder took for a frame (seen in
    // stacks sampled inside an exec: a freed program's address left on a
    // reused task stack). It names each; none of them may be a BPF
    // function of a loaded program.
    let live = "kernel frames named from the live /proc/kallsyms, for addresses outside the core text and the BPF programs: ";
    match stderr.lines().find_map(|l| l.strip_prefix("bprof: ")?.strip_prefix(live)) {
        Some(list) => {
            for item in list.split(", ") {
                let name = item
                    .split_once(" (")
                    .and_then(|(_, n)| n.strip_suffix(')'))
                    .unwrap_or_else(|| panic!("{item}: not `ADDRESS (NAME)`\n{stderr}"));
                let func = name.split('+').next().unwrap_or(name);
                assert!(!is_prog(func), "{func} was not found among the loaded programs\n{stderr}");
            }
        }
        // Without modules (this kernel has none loaded, or no modules at
        // all) and strays, the per-boot copy and the programs name all.
        None => assert!(
            stderr.contains(
                "kernel frames named from this boot's copy of the core kernel's symbols and the BPF programs"
            ),
            "{stderr}"
        ),
    }
}

/// `c++filt -i`'s name for the symbol of `bin` whose mangled name starts
/// with `prefix`.
fn cxxfilt_name(bin: &Path, prefix: &str) -> String {
    let nm = run(Command::new("nm").arg(bin));
    let sym = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .find(|s| s.starts_with(prefix))
        .unwrap_or_else(|| panic!("no symbol {prefix}* in {}", bin.display()))
        .to_string();
    let out = run(Command::new("c++filt").arg("-i").arg(sym));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A C++ function whose DWARF names it barely (`__introsort_loop<...>`
/// without `std::`, `hotref` without its parameters) is named by its
/// symbol, as c++filt names it; perf (which leaves parameters out) names
/// the same functions on the same binary.
#[test]
fn cxx_functions_with_bare_dwarf_names_read_as_their_symbols_do() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("names_cxx");
    let bin = fixture("cxxnames");
    let sort = cxxfilt_name(&bin, "_ZSt16__introsort_loop");
    let hot = cxxfilt_name(&bin, "_Z6hotref");
    assert_eq!(hot, "hotref(ns::Outer const*, ns::Outer::Inner&, long)");
    let out = run(bprof().args(["-F", "999", "-f", "--"]).arg(&bin).arg("1"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total = assert_totals(&err, &lines);
    let named = |f: &str| with_frame(&lines, "fx_cxxnames", f);
    // Most samples sort; every frame of the sort and of hotref by its
    // full name, none by DWARF's.
    assert!(named(&sort) * 2 > total, "{sort}: {lines:?}");
    assert!(named(&hot) > 0, "{lines:?}");
    let frames = || lines.iter().flat_map(|l| l.frames.iter());
    assert!(
        !frames().any(|f| f.starts_with("__introsort_loop") || f == "hotref"),
        "{lines:?}"
    );

    // perf names them by the same symbols (without parameters, or the
    // return type).
    let data = dir.join("perf.data");
    // User samples only, no build-ID cache: the names compared are user
    // code's, and perf 6.1 here can abort reading the kernel's build IDs.
    perf_record_with(
        &data,
        &["-F", "999", "-g", "-N", "-e", "cpu-clock:u"],
        &[bin.as_os_str(), "1".as_ref()],
    );
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
    let text = String::from_utf8_lossy(&rep.stdout);
    let perf_names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once("[.] "))
        .map(|(_, n)| n.trim())
        .collect();
    let sort_perf = sort
        .strip_prefix("void ")
        .and_then(|s| s.split_once(">(").map(|(n, _)| format!("{n}>")))
        .expect("a template function");
    assert!(
        perf_names.contains(&sort_perf.as_str()),
        "{sort_perf}: {perf_names:?}"
    );
    assert!(perf_names.contains(&"hotref"), "{perf_names:?}");
}
