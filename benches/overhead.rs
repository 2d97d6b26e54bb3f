//! bprof against perf on the same fixed amount of fixture work, pairs run
//! alternately in one invocation so ratios hold on a noisy machine; medians
//! of several runs. Run as root: `cargo bench --bench overhead` (or
//! scripts/bench.sh). Prints a Markdown report (see BENCHMARKS.md).
//!
//! 1. CPU cost (user+sys of every process, minus the workload's own) of a
//!    4999 Hz profile ending in folded stacks: bprof vs perf record -g +
//!    perf script; plus perf record without -g and without perf script, the
//!    kernel's sampling cost alone, which both tools pay.
//! 2. Workload slowdown under a system-wide bprof at 99, 999, 4999 Hz, and
//!    the samples bprof reports lost.
//! 3. Peak RSS of a 5 s system-wide 999 Hz profile, quiet and with many
//!    processes and libraries.
//! 4. Time to first output after the recording ends (bprof -v).
//! 5. The sampling program's cost per kept vs dropped sample (kernel BPF
//!    statistics), and `bprof stat` overhead on a context-switch-heavy
//!    workload vs perf stat.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 5;
/// work631 rounds: a few seconds of work.
const ROUNDS: &str = "110";

struct Usage {
    cpu: f64,
    wall: f64,
    maxrss_kib: i64,
}

/// Waits for `child`, returning its (and its reaped children's) CPU time.
fn wait_usage(child: Child, started: Instant) -> Usage {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid pointers.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as i32, "wait4");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        wall: started.elapsed().as_secs_f64(),
        maxrss_kib: ru.ru_maxrss,
    }
}

/// Runs to completion, output discarded; CPU of it and everything it waited for.
fn measure(cmd: &mut Command) -> Usage {
    let t = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_usage(child, t)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bprof() -> Command {
    Command::new(root().join("target/release/bprof"))
}

fn fixture(name: &str) -> PathBuf {
    let dir = root().join("target/bench-fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("fx_{name}"));
    let ok = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(root().join(format!("fixtures/{name}.c")))
        .status()
        .unwrap()
        .success();
    assert!(ok, "building {name}");
    out
}

// Long on purpose: the baseline, bprof, its floor and perf alternate inside one loop (so drift hits them alike), then tables 1 and 4 from the same runs.
fn bench_cost(work: &Path) {
    let tmp = std::env::temp_dir().join("bprof-bench-perf.data");
    let (mut base, mut ours, mut perf, mut perf_nog) = (vec![], vec![], vec![], vec![]);
    let mut floor = vec![];
    let mut first_output = vec![];
    for _ in 0..RUNS {
        base.push(measure(Command::new(work).args(["0", ROUNDS])).cpu);
        let stats = std::env::temp_dir().join("bprof-bench-stats.json");
        let out = bprof()
            .args(["--no-counts", "-F", "4999", "-f", "--stats-json"])
            .arg(&stats)
            .arg("--")
            .arg(work)
            .args(["0", ROUNDS])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(out.success(), "bprof failed");
        first_output.push(
            summary_of(&stats)["first_output_ms"]
                .as_f64()
                .expect("first_output_ms"),
        );
        ours.push(
            measure(
                bprof()
                    .args(["--no-counts", "-F", "4999", "-f", "--"])
                    .arg(work)
                    .args(["0", ROUNDS]),
            )
            .cpu,
        );
        // The floor: the same timer samples, every one dropped by the
        // filter before any stack is taken. What is
        // left is the price of the timer interrupts and of bprof's start.
        floor.push(
            measure(
                bprof()
                    .args([
                        "--no-counts",
                        "--filter",
                        "tid == 1",
                        "-F",
                        "4999",
                        "-f",
                        "--",
                    ])
                    .arg(work)
                    .args(["0", ROUNDS]),
            )
            .cpu,
        );
        let rec = measure(
            Command::new("perf")
                .args(["record", "-q", "-F", "4999", "-g", "-o"])
                .arg(&tmp)
                .arg("--")
                .arg(work)
                .args(["0", ROUNDS]),
        );
        let script = measure(Command::new("perf").args(["script", "-i"]).arg(&tmp));
        perf.push(rec.cpu + script.cpu);
        perf_nog.push(
            measure(
                Command::new("perf")
                    .args(["record", "-q", "-F", "4999", "-o"])
                    .arg(&tmp)
                    .arg("--")
                    .arg(work)
                    .args(["0", ROUNDS]),
            )
            .cpu,
        );
    }
    let _ = std::fs::remove_file(&tmp);
    let b = median(base);
    let (o, p, n) = (median(ours) - b, median(perf) - b, median(perf_nog) - b);
    println!("## 1. CPU cost of a 4999 Hz profile to folded stacks (median of {RUNS}, workload {b:.2} s CPU)\n");
    println!("| tool | extra CPU s | vs perf |");
    println!("|---|---:|---:|");
    println!("| bprof -F 4999 -f | {o:.3} | {:.2}x |", o / p);
    let fl = median(floor) - b;
    println!("| perf record -g -F 4999 + perf script | {p:.3} | 1.00x |");
    println!(
        "| perf record -F 4999 (no stacks, no script): kernel sampling alone | {n:.3} | {:.2}x |",
        n / p
    );
    println!(
        "| bprof -F 4999 -f --filter 'tid == 1' (all dropped): timer interrupts alone | {fl:.3} | {:.2}x |",
        fl / p
    );
    println!(
        "| tool's own cost (minus timer interrupts): bprof {:.3} vs perf {:.3} | | {:.2}x |\n",
        o - fl,
        p - fl,
        (o - fl) / (p - fl)
    );
    println!("## 4. Time to first output after the recording ends\n");
    println!(
        "median {:.1} ms (bprof -v, {} runs; maps read + symbolization + folded written)\n",
        median(first_output),
        RUNS
    );
}

/// The `--stats-json` summary bprof wrote.
fn summary_of(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("bprof wrote its --stats-json summary");
    serde_json::from_str(&text).expect("valid --stats-json")
}

/// A system-wide bprof in the background, its summary going to a file.
struct Background {
    child: Child,
    stats: PathBuf,
}

/// Starts a system-wide bprof and returns once it records (--ready-file).
fn background_bprof(args: &[&str]) -> Background {
    let dir = std::env::temp_dir();
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (ready, stats) = (
        dir.join(format!("bprof-bench-ready-{n}")),
        dir.join(format!("bprof-bench-stats-{n}.json")),
    );
    let mut child = bprof()
        .args(args)
        .arg("--ready-file")
        .arg(&ready)
        .arg("--stats-json")
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !ready.exists() {
        assert!(child.try_wait().unwrap().is_none(), "bprof exited early");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&ready);
    Background { child, stats }
}

/// Stops it (Ctrl-C) and returns its summary.
fn stop(mut b: Background) -> serde_json::Value {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(b.child.id() as i32, libc::SIGINT) };
    assert!(b.child.wait().unwrap().success(), "bprof failed");
    let summary = summary_of(&b.stats);
    let _ = std::fs::remove_file(&b.stats);
    summary
}

/// Ctrl-C for a background counter (bprof stat or perf stat).
fn interrupt(c: Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let _ = c.wait_with_output();
}

/// Samples the summary says were lost.
fn lost_of(summary: &serde_json::Value) -> u64 {
    summary["samples"]["lost"].as_u64().expect("samples.lost")
}

fn bench_slowdown(work: &Path) {
    println!(
        "## 2. Workload slowdown under a system-wide bprof (median of {RUNS} alternating runs)\n"
    );
    println!("The floor is the same profile with every sample dropped by `--filter 'tid == 1'` before any stack is taken: the timer interrupts alone.\n");
    println!("| rate | workload alone s | under bprof s | slowdown | floor | lost samples |");
    println!("|---|---:|---:|---:|---:|---:|");
    for hz in ["99", "999", "4999"] {
        let (mut alone, mut under, mut floor, mut lost) = (vec![], vec![], vec![], 0);
        for _ in 0..RUNS {
            alone.push(measure(Command::new(work).args(["0", ROUNDS])).wall);
            let b = background_bprof(&["--no-counts", "-F", hz, "-f"]);
            under.push(measure(Command::new(work).args(["0", ROUNDS])).wall);
            lost += lost_of(&stop(b));
            let b = background_bprof(&["--no-counts", "--filter", "tid == 1", "-F", hz, "-f"]);
            floor.push(measure(Command::new(work).args(["0", ROUNDS])).wall);
            stop(b);
        }
        let (a, u, f) = (median(alone), median(under), median(floor));
        println!(
            "| {hz} Hz | {a:.3} | {u:.3} | {:+.2}% | {:+.2}% | {lost} |",
            100.0 * (u - a) / a,
            100.0 * (f - a) / a
        );
    }
    println!();
}

fn bench_rss(work: &Path) {
    println!("## 3. Peak RSS of a 5 s system-wide 999 Hz profile\n");
    let quiet = measure(bprof().args(["--no-counts", "-F", "999", "-f", "5"]));
    // Many processes and libraries: interpreters load dozens of shared objects.
    let mut load: Vec<Child> = Vec::new();
    for i in 0..8 {
        load.push(Command::new("python3").args(["-c", "import json, decimal, sqlite3, ssl, hashlib\nwhile True: hashlib.sha256(b'x'*4096).digest()"]).spawn().unwrap());
        load.push(
            Command::new("perl")
                .args([
                    "-e",
                    "use POSIX; while(1){ $x .= 'a'; $x = '' if length($x) > 1e6 }",
                ])
                .spawn()
                .unwrap(),
        );
        load.push(Command::new(work).args(["6"]).spawn().unwrap());
        load.push(
            Command::new("sh")
                .args([
                    "-c",
                    &format!(
                        "i=0; while [ $i -lt 100000000 ]; do i=$((i+{})); done",
                        i + 1
                    ),
                ])
                .spawn()
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    let busy = measure(bprof().args(["--no-counts", "-F", "999", "-f", "5"]));
    for mut c in load {
        let _ = (c.kill(), c.wait());
    }
    println!("| scene | peak RSS MiB |");
    println!("|---|---:|");
    println!(
        "| quiet machine | {:.1} |",
        quiet.maxrss_kib as f64 / 1024.0
    );
    println!(
        "| 32 processes (python3, perl, sh, C) | {:.1} |\n",
        busy.maxrss_kib as f64 / 1024.0
    );
}

fn bpf_cost(args: &[&str], work: &Path) -> f64 {
    let mut w = Command::new(work).arg("5").spawn().unwrap();
    let b = background_bprof(args);
    // Samples to average over, not a barrier (background_bprof waited for that).
    std::thread::sleep(Duration::from_millis(1500));
    let out = Command::new("bpftool")
        .args(["prog", "show", "name", "do_sample"])
        .output()
        .unwrap();
    stop(b);
    let _ = (w.kill(), w.wait());
    let text = String::from_utf8_lossy(&out.stdout);
    let num = |key: &str| -> f64 {
        text.split_whitespace()
            .skip_while(|w| *w != key)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    num("run_time_ns") / num("run_cnt") / 1000.0
}

/// 5a: the sampling program's cost per sample, kept or dropped by filters.
fn bench_filter_cost(work: &Path) {
    let old = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap_or_default();
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1");
    println!("## 5a. Sampling program cost per sample (kernel BPF statistics, -F 4999)\n");
    println!("| configuration | us per sample |");
    println!("|---|---:|");
    for (label, args) in [
        ("kept: kernel + user stacks (cached build-ID)", vec![]),
        ("kept: kernel stack only (-K)", vec!["-K"]),
        ("kept: user stack only (-U)", vec!["-U"]),
        (
            "dropped by --filter 'tid == 1'",
            vec!["--filter", "tid == 1"],
        ),
        (
            "dropped by --filter 'comm == none'",
            vec!["--filter", "comm == none"],
        ),
    ] {
        let mut a = vec!["--no-counts", "-F", "4999", "-f"];
        a.extend(args);
        println!("| {label} | {:.2} |", bpf_cost(&a, work));
    }
    let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", old.trim());
    println!();
}

/// 5b: what counting costs a context-switch-heavy workload, bprof stat
/// against perf stat.
// Long on purpose: one table, system-wide rows then per-target rows, all against the same baseline runs.
fn bench_stat(pingpong: &Path) {
    println!("## 5b. Counting overhead on a context-switch-heavy workload (pingpong on one CPU, median of {RUNS})\n");
    // Both processes on one CPU: every round is two local context switches,
    // not cross-CPU wake-ups whose cost depends on what the other CPU does.
    let rounds = "300000";
    let pin = |c: &mut Command| {
        c.args(["-c", "0"]).arg(pingpong).arg(rounds);
    };
    const EVENTS: &str = "task-clock,context-switches,page-faults";
    let (mut alone, mut ours, mut perf) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let pp = || {
            let mut c = Command::new("taskset");
            pin(&mut c);
            c
        };
        alone.push(measure(&mut pp()).wall);
        // The ping-pong's wall time while a counter runs system-wide.
        let under = |mut counter: Command| {
            let c = counter
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(500));
            let wall = measure(&mut pp()).wall;
            interrupt(c);
            wall
        };
        let mut ours_cmd = bprof();
        ours_cmd.args(["stat", "-a", "-e", EVENTS]);
        ours.push(under(ours_cmd));
        let mut perf_cmd = Command::new("perf");
        perf_cmd.args(["stat", "-a", "-e", EVENTS]);
        perf.push(under(perf_cmd));
    }
    let a = median(alone);
    println!("| counter | pingpong wall s | overhead |");
    println!("|---|---:|---:|");
    println!("| none | {a:.3} | |");
    for (label, v) in [
        ("bprof stat -a (shared BPF counters)", ours),
        ("perf stat -a", perf),
    ] {
        let m = median(v);
        println!("| {label} | {m:.3} | {:+.2}% |", 100.0 * (m - a) / a);
    }
    // Counting a target instead: every switch of the ping-pong is one of
    // the target's, so every switch reads the counters. The counter runs
    // the command; its own start-up (timed on `true`) is taken off.
    let (mut ours_t, mut perf_t) = (vec![], vec![]);
    let (mut ours_0, mut perf_0) = (vec![], vec![]);
    for _ in 0..RUNS {
        let with = |tool: &str, pre: &[&str], run_pp: bool| {
            let mut c = if tool == "bprof" {
                bprof()
            } else {
                Command::new(tool)
            };
            c.args(pre).args(["-e", EVENTS, "--"]);
            if run_pp {
                c.arg("taskset");
                pin(&mut c);
            } else {
                c.arg("true");
            }
            measure(c.stdout(Stdio::null()).stderr(Stdio::null())).wall
        };
        ours_t.push(with("bprof", &["stat"], true));
        ours_0.push(with("bprof", &["stat"], false));
        perf_t.push(with("perf", &["stat"], true));
        perf_0.push(with("perf", &["stat"], false));
    }
    for (label, v, zero) in [
        (
            "bprof stat -- pingpong (a target's switches)",
            ours_t,
            ours_0,
        ),
        ("perf stat -- pingpong", perf_t, perf_0),
    ] {
        let m = median(v) - median(zero);
        println!("| {label} | {m:.3} | {:+.2}% |", 100.0 * (m - a) / a);
    }
    let bpf_counters = Command::new("perf")
        .args(["stat", "--bpf-counters", "-e", "cycles", "true"])
        .output()
        .unwrap();
    if !bpf_counters.status.success() {
        println!("| perf stat --bpf-counters | n/a | this perf build has no --bpf-counters |");
    }
    println!();
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("overhead benchmark: run as root");
        std::process::exit(1);
    }
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let work = fixture("work631");
    let pingpong = fixture("pingpong");
    println!("# bprof benchmark report\n");
    if run("cost") {
        bench_cost(&work);
    }
    if run("slowdown") {
        bench_slowdown(&work);
    }
    if run("rss") {
        bench_rss(&work);
    }
    if run("filter") {
        bench_filter_cost(&work);
        bench_stat(&pingpong);
    }
}
