//! Shared test harness: builds the fixtures, runs bprof, parses its output.
//! Tests need root (they load real BPF programs), as `.ci/run` provides.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Returns from a test that loads BPF programs unless running as root.
macro_rules! root_or_skip {
    () => {
        if !$crate::common::is_root() {
            return;
        }
    };
}

/// Whether the suite runs as root; if not, says once (on the real stderr,
/// which libtest does not capture) that the BPF tests are skipped.
pub fn is_root() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        SAID.call_once(|| {
            let msg = b"bprof suite: not root, so the tests that load BPF programs are skipped (run scripts/test.sh as root for all of them)\n";
            // SAFETY: writing a valid buffer to fd 2, bypassing libtest's capture.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        });
    }
    root
}

/// The bprof binary under test.
pub fn bprof() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bprof"))
}

/// The suite's CPUs: tests that measure hold them alone, the others share them.
static MACHINE: RwLock<()> = RwLock::new(());

/// For a test that measures (shares, comparisons with perf or with the
/// kernel's own figures, timing): no other test of the suite runs beside it.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// For a test that loads BPF programs or runs workloads without measuring:
/// it runs beside other such tests, never beside one that measures.
pub fn parallel() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

/// Machine-wide state that some tests change and others depend on: a test
/// holds the one it touches, so two such tests never run at once.
#[derive(Clone, Copy)]
pub enum Held {
    /// Debug files planted under /usr/lib/debug/.build-id for the
    /// stripped work631 (and the names bprof keeps for them in /run/bprof).
    DebugFiles,
    /// The pin directory of the suite's `bprof stat` sessions ([`pin_dir`]).
    StatPins,
}

/// Holds `what` until the guard drops.
pub fn hold(what: Held) -> MutexGuard<'static, ()> {
    static LOCKS: [Mutex<()>; 2] = [Mutex::new(()), Mutex::new(())];
    LOCKS[what as usize]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Where the suite's `bprof stat` sessions pin their shared counters
/// (`--bpf-pin-dir`): its own, so that no other profiler on the machine (a
/// profile counting cycles, another suite) shares or removes them.
pub fn pin_dir() -> String {
    format!("/sys/fs/bpf/bprof-test-{}", std::process::id())
}

/// Where tests keep their files.
pub fn scratch_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scratch");
    std::fs::create_dir_all(&dir).expect("create scratch root");
    dir
}

/// A scratch directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("scratch")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Builds (once) and returns the path of fixture `name` (fixtures/NAME.c,
/// NAME.cc or NAME.rs). C is built with frame pointers, as FP unwinding
/// needs; C++ with clang's `-gsce` DWARF, which has no linkage names (its
/// functions' DWARF names are bare: no scope, no parameters).
pub fn fixture(name: &str) -> PathBuf {
    // One build per fixture, each under its own lock: tests in parallel
    // wait only for the fixture they need.
    static BUILT: Mutex<BTreeMap<String, Arc<OnceLock<PathBuf>>>> = Mutex::new(BTreeMap::new());
    let cell = BUILT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| build_fixture(name)).clone()
}

/// Fixture `name` under a name of its own (its comm): a system-wide
/// profile can tell this test's process from the same fixture's run by
/// tests beside it.
pub fn fixture_as(name: &str, comm: &str) -> PathBuf {
    assert!(comm.len() <= 15, "comm {comm} is cut to 15 bytes");
    let dir = scratch_root().join("fixtures-as");
    std::fs::create_dir_all(&dir).expect("create fixture copies' dir");
    let copy = dir.join(comm);
    // A copy made aside and renamed: a test never runs a half-written one.
    let tmp = dir.join(format!(".{comm}-{}", std::process::id()));
    std::fs::copy(fixture(name), &tmp).expect("copy fixture");
    std::fs::rename(&tmp, &copy).expect("rename fixture copy");
    copy
}

fn build_fixture(name: &str) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&out_dir).expect("create fixture dir");
    // The comm of a process is its file name: keep the "fx_" prefix short.
    let out = out_dir.join(format!("fx_{name}"));
    let c = src_dir.join(format!("{name}.c"));
    let cc = src_dir.join(format!("{name}.cc"));
    let status = if cc.exists() {
        Command::new("clang++")
            .args(["-O2", "-g", "-gsce", "-fno-omit-frame-pointer", "-o"])
            .arg(&out)
            .arg(&cc)
            .status()
    } else if c.exists() {
        Command::new("gcc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
            .arg(&out)
            .arg(&c)
            .status()
    } else {
        Command::new("rustc")
            .args(["-O", "-g", "-C", "force-frame-pointers=yes", "-o"])
            .arg(&out)
            .arg(src_dir.join(format!("{name}.rs")))
            .status()
    };
    assert!(
        status.expect("run compiler").success(),
        "building fixture {name}"
    );
    out
}

/// fixtures/NAME.c built as [`fixture`] builds C, with `extra` flags
/// (`-Wl,--build-id=none`, `-shared -fPIC`), into `fx_OUT` (once).
pub fn c_fixture(name: &str, out: &str, extra: &[&str]) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(out) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures");
    std::fs::create_dir_all(&out_dir).expect("create fixture dir");
    let path = out_dir.join(format!("fx_{out}"));
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&path)
        .arg(&src)
        .status();
    assert!(status.expect("run gcc").success(), "building fixture {out}");
    built.insert(out.to_string(), path.clone());
    path
}

/// fixtures/NAME.go built by the Go toolchain with `ldflags` into `fx_OUT`
/// (once).
pub fn go_fixture(name: &str, out: &str, ldflags: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(out) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.go"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out_dir = tmp.join("fixtures");
    std::fs::create_dir_all(&out_dir).expect("create fixture dir");
    let path = out_dir.join(format!("fx_{out}"));
    let mut cmd = Command::new("go");
    cmd.args(["build", "-ldflags", ldflags, "-o"])
        .arg(&path)
        .arg(&src)
        .env("GO111MODULE", "off");
    // The build cache lives in $HOME unless said; CI may have no $HOME.
    if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
        cmd.env("GOCACHE", tmp.join("gocache"));
    }
    assert!(
        cmd.status().expect("run go build (golang-go)").success(),
        "building Go fixture {out}"
    );
    built.insert(out.to_string(), path.clone());
    path
}

/// One folded line.
#[derive(Debug, Clone)]
pub struct Folded {
    pub frames: Vec<String>,
    pub count: u64,
}

/// Parses folded output strictly: every line must be `frames COUNT`.
pub fn parse_folded(text: &str) -> Vec<Folded> {
    text.lines()
        .map(|l| {
            let (stack, count) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no count in folded line {l:?}"));
            let count: u64 = count
                .parse()
                .unwrap_or_else(|_| panic!("bad count in folded line {l:?}"));
            assert!(count > 0, "zero count in {l:?}");
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            assert!(frames.iter().all(|f| !f.is_empty()), "empty frame in {l:?}");
            Folded { frames, count }
        })
        .collect()
}

/// Total samples of lines whose first frame is `comm`.
pub fn total_for(lines: &[Folded], comm: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames[0] == comm)
        .map(|l| l.count)
        .sum()
}

/// Samples of lines of `comm` that contain frame `f`.
pub fn with_frame(lines: &[Folded], comm: &str, f: &str) -> u64 {
    lines
        .iter()
        .filter(|l| l.frames[0] == comm && l.frames.iter().any(|x| x == f))
        .map(|l| l.count)
        .sum()
}

/// (samples, lost, unique stacks) from the summary line.
pub fn summary_numbers(stderr: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(" unique stacks"))
        .unwrap_or_else(|| panic!("no summary line: {stderr}"));
    let num_before = |suffix: &str| number_before(line, suffix);
    let samples = line
        .strip_prefix("bprof: ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count in {line}"));
    (samples, num_before(" lost"), num_before(" unique stacks"))
}

/// The off-CPU skip count `-v` reports ("bprof: off-CPU kernel stacks
/// skip N ...").
pub fn measured_skip(stderr: &str) -> usize {
    stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("bprof: off-CPU kernel stacks skip ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no skip report in {stderr}"))
}

/// The number just before `suffix` in `line` ("12 lost" → 12).
pub fn number_before(line: &str, suffix: &str) -> u64 {
    let at = line
        .find(suffix)
        .unwrap_or_else(|| panic!("no '{suffix}' in {line}"));
    line[..at]
        .rsplit([' ', ',', ':', '('])
        .find(|w| !w.is_empty())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number before '{suffix}' in {line}"))
}

/// The `-v` line of how `--call-graph dwarf` walks went.
pub fn dwarf_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("dwarf unwinding:"))
        .unwrap_or_else(|| panic!("no unwinding line: {stderr}"))
}

/// Asserts the totals add up: the folded lines hold every sample the
/// summary counted (it counts those lost to a full count map apart), and
/// none was lost. Returns the count.
pub fn assert_totals(stderr: &str, lines: &[Folded]) -> u64 {
    let (samples, lost, _) = summary_numbers(stderr);
    assert_eq!(lost, 0, "{stderr}");
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert_eq!(total, samples, "{stderr}");
    samples
}

/// Runs a command to completion, capturing everything.
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null());
    busy_retried(|| cmd.output()).expect("run bprof")
}

/// `start` (a spawn), again while it fails with ETXTBSY: a file this
/// process just wrote (a fixture's copy) stays open for writing in a child
/// another test thread forked meanwhile, until that child's exec closes it.
pub fn busy_retried<T>(mut start: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    for _ in 0..200 {
        match start() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
    start()
}

/// Asserts the documented bad-input behaviour: non-zero exit, exactly one
/// line on stderr starting with "bprof: ", no panic. Returns the line.
pub fn assert_one_line_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got: {stderr:?}");
    assert!(
        lines[0].starts_with("bprof: "),
        "unexpected stderr: {stderr:?}"
    );
    lines[0].to_string()
}

/// Percent share of `part` in `whole`.
pub fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Ids of the BPF programs process `pid` holds (program and link fds), so a
/// test can check that exactly these are gone, whatever else runs here.
pub fn bpf_programs_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut ids: Vec<u32> = dir
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:")?.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether any of these programs is still loaded (after a short grace
/// period: programs are freed asynchronously after their last fd closes).
pub fn any_program_loaded(ids: &[u32]) -> bool {
    for _ in 0..40 {
        let loaded = ids.iter().any(|id| {
            Command::new("bpftool")
                .args(["prog", "show", "id", &id.to_string()])
                .output()
                .expect("run bpftool")
                .status
                .success()
        });
        if !loaded {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    true
}

/// `perf record -g -F HZ -o DATA -- ARGV...`, asserting it worked.
pub fn perf_record<S: AsRef<std::ffi::OsStr>>(data: &Path, hz: &str, argv: &[S]) {
    perf_record_with(data, &["-F", hz, "-g"], argv);
}

/// `perf record OPTIONS -o DATA -- ARGV...`, asserting it worked.
pub fn perf_record_with<S: AsRef<std::ffi::OsStr>>(data: &Path, options: &[&str], argv: &[S]) {
    let rec = Command::new("perf")
        // No BPF events: perf aborts reading some loaded BPF programs' info.
        // No build IDs (-B): perf 6.1 aborts collecting them when a file
        // it saw has one longer than 20 bytes (hostile tests make such
        // files); its report finds the files by path.
        .args(["record", "-q", "--no-bpf-event", "-B"])
        .args(options)
        .arg("-o")
        .arg(data)
        .arg("--")
        .args(argv)
        .output()
        .expect("run perf record");
    assert!(
        rec.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
}

/// Shares of heavy/medium/light of one process's samples, by `perf record`.
pub fn perf_shares(bin: &Path, secs: &str, dir: &Path) -> BTreeMap<String, f64> {
    let data = dir.join("perf.data");
    perf_record(&data, "999", &[bin.as_os_str(), secs.as_ref()]);
    let rep = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "-s",
            "sym",
            "-q",
            "-i",
        ])
        .arg(&data)
        .output()
        .expect("run perf report");
    let text = String::from_utf8_lossy(&rep.stdout);
    let mut shares = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(p), Some(_), Some(sym)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if let Ok(p) = p.trim_end_matches('%').parse::<f64>() {
            *shares.entry(sym.to_string()).or_insert(0.0) += p;
        }
    }
    shares
}

/// Where the cgroup v2 hierarchy is mounted (hybrid systems have it below
/// /sys/fs/cgroup/unified).
pub fn cgroup2_root() -> PathBuf {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("read mountinfo")
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mount = pre.split_whitespace().nth(4)?;
            post.starts_with("cgroup2 ").then(|| PathBuf::from(mount))
        })
        .expect("cgroup2 mounted")
}

/// CPU time of every thread of `pid` so far (/proc/PID/task/*/schedstat),
/// in ms: the kernel's own figure.
pub fn cpu_ms_of(pid: u32) -> f64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("process {pid}: {e}"))
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e6
}

/// Time (ms) the hypervisor took from this machine's CPUs so far (the
/// steal column of /proc/stat, in USER_HZ ticks).
pub fn steal_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
    let ticks: f64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
        .expect("a steal column in /proc/stat");
    // SAFETY: sysconf has no memory-safety preconditions.
    ticks * 1000.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Runs `f` and returns what it returned with the time (ms) the host took
/// from the machine's CPUs meanwhile: task-clock counts that time on a
/// vCPU, the kernel's CPU-time figures leave it out.
pub fn stolen_during<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let before = steal_ms();
    let t = f();
    (t, steal_ms() - before)
}

/// Runs bprof `cmd` with `--ready-file` and then `duration` (seconds)
/// while process `pid` runs; asserts it succeeded. Returns its output, and
/// the CPU time (ms) the kernel gave `pid` from bprof's start to its exit
/// and over the nine tenths of the recording after bprof's readiness:
/// whatever the machine's load, the recording lies within the first and
/// holds the second. The first also holds the time the hypervisor stole
/// meanwhile: task-clock counts it while the task is current, the kernel's
/// run time (schedstat) leaves it out.
pub fn run_beside(pid: u32, cmd: &mut Command, duration: &str) -> (Output, f64, f64) {
    let secs: f64 = duration.parse().expect("a duration in seconds");
    let stolen = steal_ms();
    let before = cpu_ms_of(pid);
    let ready = ready_path();
    let mut child = cmd
        .arg("--ready-file")
        .arg(&ready)
        .arg(duration)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut child);
    let at_ready = cpu_ms_of(pid);
    std::thread::sleep(std::time::Duration::from_secs_f64(secs * 0.9));
    let inside = cpu_ms_of(pid) - at_ready;
    let out = child.wait_with_output().expect("wait for bprof");
    let after = cpu_ms_of(pid);
    let stolen = steal_ms() - stolen;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, after - before + stolen, inside)
}

/// The CPU time (ms) a shell wrote of itself and of the children it
/// collected, as `cat /proc/$$/stat > FILE` at its end: utime, stime,
/// cutime and cstime, each counted in whole clock ticks.
pub fn collected_cpu_ms(stat_file: &Path) -> f64 {
    let text = std::fs::read_to_string(stat_file)
        .unwrap_or_else(|e| panic!("{}: {e}", stat_file.display()));
    let fields: Vec<f64> = text
        .rsplit_once(") ")
        .unwrap_or_else(|| panic!("not a /proc/PID/stat: {text}"))
        .1
        .split(' ')
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    fields[11..15].iter().sum::<f64>() * clock_tick_ms()
}

/// One clock tick (the unit of /proc's CPU times), in ms.
pub fn clock_tick_ms() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    1000.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The fewest samples a `-F hz` profile should hold of a process the
/// kernel ran `ms` CPU-ms while it recorded: a timer sample every 1000/hz
/// ms of its CPU time, less a fifth for chance.
pub fn least_samples(ms: f64, hz: f64) -> u64 {
    (ms * hz / 1000.0 * 0.8) as u64
}

/// Sends SIGINT, as Ctrl-C would.
pub fn interrupt(pid: u32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
}

/// A background process, killed and reaped when the test ends however it
/// ends (a failed assert included).
pub struct Workload(pub std::process::Child);

impl Workload {
    /// Starts a fixture and returns once it says its work has begun (it
    /// creates the file named by `$BPROF_READY`; see fixtures/ready.h).
    pub fn start(cmd: &mut Command) -> Workload {
        let ready = ready_path();
        cmd.env("BPROF_READY", &ready);
        let w = Workload(busy_retried(|| cmd.spawn()).expect("start workload"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ready.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "workload never became ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        w
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A spawned process (bprof, perf, a fixture) that is stopped and reaped
/// when the test ends however it ends: a failed assert must not leave a
/// profiler sampling the machine under the next test. bprof gets SIGTERM
/// first, so it stops its own command as it does on Ctrl-C.
pub struct Spawned(Option<std::process::Child>);

/// `Command::spawn` returning a [`Spawned`] guard.
pub trait SpawnGuarded {
    /// Spawns, panicking with the program's name if that fails.
    fn spawn_guarded(&mut self) -> Spawned;
}

impl SpawnGuarded for Command {
    fn spawn_guarded(&mut self) -> Spawned {
        let child = busy_retried(|| self.spawn())
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", self.get_program()));
        Spawned(Some(child))
    }
}

impl Spawned {
    /// `Child::wait_with_output`, which takes the child by value.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0.take().expect("not yet waited").wait_with_output()
    }
}

impl std::ops::Deref for Spawned {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        self.0.as_ref().expect("not yet waited")
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not yet waited")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let Some(c) = self.0.as_mut() else {
            return;
        };
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while matches!(c.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

/// A cgroup v2 directory for one test: its processes are killed and the
/// directory removed when the test ends.
pub struct TestCgroup {
    /// The directory under the cgroup2 mount.
    pub dir: PathBuf,
    /// Its path relative to the cgroup2 root, with a leading '/'.
    pub name: String,
}

impl TestCgroup {
    /// Creates `<cgroup2 root>/bprof-test-<pid>-<tag>`.
    pub fn new(tag: &str) -> TestCgroup {
        let name = format!("bprof-test-{}-{tag}", std::process::id());
        let dir = cgroup2_root().join(&name);
        std::fs::create_dir_all(&dir).expect("create test cgroup");
        TestCgroup {
            dir,
            name: format!("/{name}"),
        }
    }

    /// Moves process `pid` into it.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).expect("join test cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // cgroup.kill (5.14+) ends every member; rmdir then succeeds once
        // they are reaped by their parents.
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A fresh path for `--ready-file` (or a fixture's `$BPROF_READY`).
pub fn ready_path() -> PathBuf {
    fresh_path("ready")
}

/// A fresh path in the scratch root named after `what`: no two tests
/// running in parallel get the same one.
pub fn fresh_path(what: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = scratch_root().join(format!("{what}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Waits until a background bprof started with `--ready-file PATH` records
/// (it creates the file then); fails if it exits first.
pub fn wait_ready(path: &Path, child: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("bprof exited before it was ready: {st}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bprof never became ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Starts the two-thread fixture and returns it with its thread ids.
/// Its printed ids are its readiness.
pub fn threads(secs: &str) -> (Workload, std::collections::HashMap<String, String>) {
    let mut child = Workload(
        Command::new(fixture("threads"))
            .arg(secs)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut tids = std::collections::HashMap::new();
    let mut reader = BufReader::new(child.0.stdout.take().unwrap());
    for _ in 0..2 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let (name, tid) = line.trim().split_once(' ').unwrap();
        tids.insert(name.to_string(), tid.to_string());
    }
    (child, tids)
}

/// Removes a directory a test made outside its scratch root (in /tmp or
/// /var/tmp, as another user would) when the test ends, however it ends.
pub struct RemovedAtEnd(pub PathBuf);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes a file a test planted (or made bprof make) when the test ends,
/// however it ends.
pub struct Planted(pub PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs a shell script as user nobody (`setpriv`), asserting it succeeds:
/// how the hostile tests play another local user.
pub fn nobody_sh(script: &str) {
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv");
    assert!(
        out.status.success(),
        "as nobody: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command to completion (at most 120 s, then SIGKILL) and returns
/// its output, wall time and peak resident set in KiB (of it and of every
/// process it waited for, as GNU time reports it: the rusage of a process
/// this test spawns would hold the test's own, which a child inherits at
/// exec, however small the child).
// Reaped by waitpid below.
#[allow(clippy::zombie_processes)]
pub fn measured(cmd: &mut Command) -> (Output, std::time::Duration, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let rss = fresh_path("maxrss");
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    let t = std::time::Instant::now();
    let mut child = timed
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id() as i32;
    let (mut o, mut e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = o.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = e.read_to_end(&mut b);
        b
    });
    let killer = std::thread::spawn(move || {
        let deadline = t + std::time::Duration::from_secs(120);
        while std::time::Instant::now() < deadline {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let mut status = 0;
    // SAFETY: waits for our own child, with a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
    let elapsed = t.elapsed();
    let _ = killer.join();
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    let text = std::fs::read_to_string(&rss).unwrap_or_default();
    let _ = std::fs::remove_file(&rss);
    // GNU time's last line is the figure (a "Command exited with non-zero
    // status" line may come first).
    let kib = text
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS from GNU time: {text:?}"));
    (output, elapsed, kib)
}

/// Bytes that would act on a terminal or break XML: control characters
/// other than the newlines and tabs a text output has.
pub fn control_bytes(b: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(b);
    text.chars()
        .filter(|&c| c.is_control() && !matches!(c, '\n' | '\t'))
        .map(|c| c as u32 as u8)
        .collect()
}

/// The umask this test process runs under (`Umask:` in /proc/self/status).
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| u32::from_str_radix(l.strip_prefix("Umask:")?.trim(), 8).ok())
        .expect("Umask in /proc/self/status")
}

/// What a local user can name a program and its functions: a terminal's
/// clear-screen and retitle sequences (ESC, BEL), a newline, XML markup.
pub const HOSTILE_FILE_NAME: &str = "fx\x1b[2J\x07<b>\n&";
/// work631's `heavy`, `medium` and `light`, renamed so.
pub const HOSTILE_HEAVY: &str = "heavy\x1b]0;pwned\x07";
pub const HOSTILE_MEDIUM: &str = "medium<b>&amp;</b>";
pub const HOSTILE_LIGHT: &str = "light\nnext";

/// A name as bprof shows it: control characters as `\xNN` escapes.
pub fn escaped(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\x{:02x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A name as folded stacks (and the SVG and `bprof top`, drawn from them)
/// show it: escaped, with `;` (the frame separator) as `:`.
pub fn folded_form(name: &str) -> String {
    escaped(name).replace(';', ":")
}

/// work631 named [`HOSTILE_FILE_NAME`] (its comm too), its three
/// functions renamed as above (DWARF stripped: the symbol table names them).
pub fn hostile_named_work631(dir: &Path) -> PathBuf {
    let bin = dir.join(HOSTILE_FILE_NAME);
    let st = Command::new("objcopy")
        .arg("--strip-debug")
        .arg("--redefine-sym")
        .arg(format!("heavy={HOSTILE_HEAVY}"))
        .arg("--redefine-sym")
        .arg(format!("medium={HOSTILE_MEDIUM}"))
        .arg("--redefine-sym")
        .arg(format!("light={HOSTILE_LIGHT}"))
        .arg(fixture("work631"))
        .arg(&bin)
        .status()
        .expect("run objcopy");
    assert!(st.success(), "objcopy");
    bin
}

/// Removes the perf maps in /tmp that name this script when the test ends.
pub struct NodeMaps(pub PathBuf);

impl Drop for NodeMaps {
    fn drop(&mut self) {
        let script = self.0.to_string_lossy().into_owned();
        for e in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with("perf-")
                && n.ends_with(".map")
                && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&script))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
