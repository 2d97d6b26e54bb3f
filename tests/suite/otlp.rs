//! `--otlp` read by a real receiver: `otlp_receiver.py` beside this file,
//! built from PyPI's opentelemetry-proto and grpcio (the official generated
//! classes, installed by scripts/install-deps.sh into
//! /opt/bprof-test-venv), listening on 127.0.0.1. It decodes every request
//! with those classes, resolves it through the dictionary and prints it as
//! a JSON line; the tests compare that with bprof's own accounting
//! (`--stats-json`) on real fixtures. Run as root.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// The Python that has the official classes.
fn python() -> PathBuf {
    let p = std::env::var_os("BPROF_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/bprof-test-venv/bin/python3"));
    assert!(
        p.exists(),
        "{} is missing: scripts/install-deps.sh makes it (a venv with opentelemetry-proto and grpcio)",
        p.display()
    );
    p
}

/// A running `otlp_receiver.py` and the requests it decoded so far.
pub(crate) struct Receiver {
    child: Spawned,
    pub(crate) port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts a receiver (`grpc` or `http`) on `port` (0: any), and
    /// returns once it listens.
    pub(crate) fn start(kind: &str, port: u16) -> Receiver {
        Receiver::start_with(kind, port, None)
    }

    /// ... with TLS, given a certificate and its key.
    fn start_with(kind: &str, port: u16, tls: Option<(&Path, &Path)>) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/suite/otlp_receiver.py");
        let mut cmd = Command::new(python());
        // grpcio's own log (refused handshakes) stays out of the test output.
        cmd.env("GRPC_VERBOSITY", "NONE");
        cmd.arg(script).arg(kind).arg(port.to_string());
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn_guarded();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let port = first
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("receiver did not start: {first:?}"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let r = Arc::clone(&requests);
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("receiver printed {line:?}: {e}"));
                r.lock().unwrap().push(v);
            }
        });
        Receiver {
            child,
            port,
            requests,
        }
    }

    /// The requests decoded so far.
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// The requests, once `n` have come (at most 10 s after the sender
    /// said they were sent: the receiver prints as it decodes).
    fn wait_for(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.requests.lock().unwrap().len() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.requests()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every sample of every request: (resource attributes, frames, value,
/// sample attributes).
fn samples(requests: &[Value]) -> Vec<(Value, Vec<String>, u64, Value)> {
    let mut out = Vec::new();
    for r in requests {
        assert_eq!(
            r["unknown_fields"], 0,
            "fields the official classes do not know"
        );
        assert_eq!(
            r["zero_entries"], true,
            "dictionary tables must start with their zero value"
        );
        for res in r["resources"].as_array().unwrap() {
            for p in res["profiles"].as_array().unwrap() {
                for s in p["samples"].as_array().unwrap() {
                    let frames = s["frames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f.as_str().unwrap().to_string())
                        .collect();
                    let value: u64 = s["values"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap())
                        .sum();
                    out.push((
                        res["attributes"].clone(),
                        frames,
                        value,
                        s["attributes"].clone(),
                    ));
                }
            }
        }
    }
    out
}

/// The sum of every sample value of every request.
fn total(requests: &[Value]) -> u64 {
    samples(requests).iter().map(|s| s.2).sum()
}

/// `--stats-json` of a finished run.
fn stats(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read --stats-json");
    serde_json::from_str(&text).unwrap()
}

/// The GNU build ID of an ELF file, as `readelf -n` prints it.
fn build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no build ID in {}", file.display()))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

fn proc_text(path: &str) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

/// Asserts the accounting of `--stats-json`'s `otlp` part: every profile
/// sent, dropped, refused or unsent, their samples too, adding up to what
/// the kernel counted. Returns it.
fn otlp_accounting(st: &Value) -> Value {
    let o = st["otlp"].clone();
    let n = |k: &str| o[k].as_u64().unwrap_or_else(|| panic!("no {k} in {o}"));
    assert_eq!(
        n("sent") + n("dropped") + n("refused") + n("unsent"),
        n("profiles"),
        "{o}"
    );
    assert_eq!(
        n("sent_samples") + n("dropped_samples") + n("refused_samples") + n("unsent_samples"),
        n("samples"),
        "{o}"
    );
    assert_eq!(
        n("samples"),
        st["samples"]["counted_weight"].as_u64().unwrap(),
        "the profiles hold what the kernel counted: {st}"
    );
    o
}

/// Intervals said at -v (`bprof: interval N: ..., C counted, ...`) with
/// their counts.
fn intervals(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.starts_with("bprof: interval ") && l.contains(" counted"))
        .map(|l| number_before(l, " counted"))
        .collect()
}

#[test]
fn otlp_grpc_sends_one_request_per_interval_holding_every_sample() {
    root_or_skip!();
    let _g = exclusive();
    let rx = Receiver::start("grpc", 0);
    let dir = scratch("otlp-grpc");
    let json = dir.join("stats.json");
    let bin = fixture("work631");
    let out = run(bprof()
        .args(["-v", "-F", "999", "--every", "1", "--no-counts"])
        .arg("--otlp")
        .arg(format!("http://127.0.0.1:{}", rx.port))
        .args(["--otlp-header", "X-Scope-OrgID=tenant-1"])
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(&bin)
        .arg("5"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let st = stats(&json);
    let o = otlp_accounting(&st);
    assert_eq!(o["retried"], 0, "{stderr}");
    assert_eq!(o["sent"], o["profiles"], "{stderr}");
    let sent = o["sent"].as_u64().unwrap() as usize;
    let requests = rx.wait_for(sent);
    // One request per interval that had samples, in order, back to back.
    let counts: Vec<u64> = intervals(&stderr).into_iter().filter(|&c| c > 0).collect();
    assert!(counts.len() >= 4, "{stderr}");
    assert_eq!(requests.len(), counts.len(), "{stderr}");
    let mut next = None;
    for (r, want) in requests.iter().zip(&counts) {
        assert_eq!(total(std::slice::from_ref(r)), *want, "{stderr}");
        assert_eq!(r["headers"]["x-scope-orgid"], "tenant-1");
        let p = &r["resources"][0]["profiles"][0];
        let (t, d) = (
            p["time_unix_nano"].as_u64().unwrap(),
            p["duration_nano"].as_u64().unwrap(),
        );
        if let Some(n) = next {
            assert_eq!(t, n, "intervals are back to back");
        }
        next = Some(t + d);
        assert_eq!(p["sample_type"], serde_json::json!(["samples", "count"]));
        assert_eq!(p["period_type"], serde_json::json!(["cpu", "nanoseconds"]));
        assert_eq!(p["period"], 1_000_000_000 / 999);
        assert_eq!(p["scope"], "bprof");
    }
    // Every sample bprof counted, none twice.
    assert_eq!(total(&requests), st["samples"]["counted"].as_u64().unwrap());
    assert_eq!(st["samples"]["lost"], 0);

    // The fixture's process: its resource, names and shares.
    let all = samples(&requests);
    let mine: Vec<_> = all
        .iter()
        .filter(|s| s.0["process.executable.name"] == "fx_work631")
        .collect();
    let whole: u64 = mine.iter().map(|s| s.2).sum();
    assert!(whole > 1000, "too few samples: {whole}");
    let share = |f: &str| {
        pct(
            mine.iter()
                .filter(|s| s.1.iter().any(|x| x == f))
                .map(|s| s.2)
                .sum(),
            whole,
        )
    };
    for (want, f) in [(60.0, "heavy"), (30.0, "medium"), (10.0, "light")] {
        let got = share(f);
        assert!((got - want).abs() <= 4.0, "{f}: {got:.1}% (want {want}%)");
    }
    assert!(share("main") > 95.0, "stacks reach main");
    let (res, _, _, attrs) = mine[0];
    let pid = res["process.pid"].as_u64().unwrap();
    assert_eq!(
        res["service.name"], "fx_work631",
        "the command names the service"
    );
    assert_eq!(
        text(&res["host.name"]),
        proc_text("/proc/sys/kernel/hostname")
    );
    assert_eq!(
        text(&res["os.version"]),
        proc_text("/proc/sys/kernel/osrelease")
    );
    assert_eq!(res["os.type"], "linux");
    assert!(
        res.get("container.id").is_none(),
        "not in a container: {res}"
    );
    assert_eq!(
        attrs["thread.id"].as_u64(),
        Some(pid),
        "one thread: {attrs}"
    );
    assert_eq!(attrs["thread.name"], "fx_work631");
    // Mappings name their files and carry their build IDs.
    let mapping = requests[0]["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| text(&m["file"]).ends_with("/fx_work631"))
        .unwrap_or_else(|| panic!("no mapping of the fixture: {}", requests[0]["mappings"]))
        .clone();
    assert_eq!(
        text(&mapping["attributes"]["process.executable.build_id.gnu"]),
        build_id(&bin)
    );
    for r in &requests {
        for m in r["mappings"].as_array().unwrap() {
            let file = text(&m["file"]);
            assert!(!file.is_empty(), "{m}");
            let id = &m["attributes"]["process.executable.build_id.gnu"];
            if file.ends_with("libc.so.6") {
                assert_eq!(text(id), build_id(Path::new(file)), "{m}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_http_reaches_a_loopback_server_with_its_container_and_service() {
    root_or_skip!();
    let _g = exclusive();
    let rx = Receiver::start("http", 0);
    let dir = scratch("otlp-http");
    let json = dir.join("stats.json");
    // A cgroup named as Docker names a container's.
    let id = "4f1b5c0d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c";
    let cg = TestCgroup::new(&format!("docker-{id}.scope"));
    let w = Workload::start(Command::new(fixture("work631")).arg("20"));
    cg.add(w.id());
    let out = run(bprof()
        .args(["-F", "199", "--no-counts", "-p", &w.id().to_string()])
        .arg("--otlp")
        .arg(format!(
            "http://127.0.0.1:{}/v1development/profiles",
            rx.port
        ))
        .args([
            "--service-name",
            "checkout",
            "--otlp-header",
            "Authorization=Bearer t0ken",
        ])
        .arg("--stats-json")
        .arg(&json)
        .arg("2"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let o = otlp_accounting(&stats(&json));
    assert_eq!(o["sent"], 1, "one profile at the end: {stderr}");
    let requests = rx.wait_for(1);
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r["path"], "/v1development/profiles");
    assert_eq!(r["headers"]["content-encoding"], "gzip");
    assert_eq!(r["headers"]["content-type"], "application/x-protobuf");
    assert_eq!(r["headers"]["authorization"], "Bearer t0ken");
    assert_eq!(total(&requests), o["samples"].as_u64().unwrap());
    let all = samples(&requests);
    assert!(!all.is_empty());
    for (res, frames, _, _) in &all {
        assert_eq!(res["process.pid"].as_u64(), Some(u64::from(w.id())));
        assert_eq!(res["service.name"], "checkout");
        assert_eq!(res["container.id"], id, "{res}");
        assert!(!frames.is_empty());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_receiver_down_at_start_gets_everything_once_it_comes_up() {
    root_or_skip!();
    let _g = exclusive();
    let port = free_port();
    let dir = scratch("otlp-late");
    let json = dir.join("stats.json");
    let mut bp = bprof()
        .args(["-v", "-F", "199", "--every", "1", "--no-counts"])
        .arg("--otlp")
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(fixture("work631"))
        .arg("5")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_guarded();
    // Nothing listens for the first intervals.
    std::thread::sleep(Duration::from_millis(2500));
    let rx = Receiver::start("grpc", port);
    let mut stderr = String::new();
    bp.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = bp.wait().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("failed: "), "the outage is said: {stderr}");
    let st = stats(&json);
    let o = otlp_accounting(&st);
    assert!(o["retried"].as_u64().unwrap() >= 1, "{o}");
    assert_eq!(
        o["sent"], o["profiles"],
        "nothing lost within the queue: {o}"
    );
    let requests = rx.wait_for(o["sent"].as_u64().unwrap() as usize);
    assert_eq!(requests.len() as u64, o["sent"].as_u64().unwrap());
    assert_eq!(total(&requests), st["samples"]["counted"].as_u64().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_stalled_receiver_never_holds_up_recording() {
    root_or_skip!();
    let _g = exclusive();
    // Takes connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            held.push(s);
        }
    });
    let dir = scratch("otlp-stall");
    let json = dir.join("stats.json");
    let started = Instant::now();
    let out = run(bprof()
        .args(["-v", "-F", "199", "--every", "1", "--no-counts"])
        .arg("--otlp")
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--otlp-queue", "2", "--otlp-timeout", "60"])
        .arg("-o")
        .arg(dir.join("%n.folded"))
        .arg("--stats-json")
        .arg(&json)
        .arg("--")
        .arg(fixture("work631"))
        .arg("5"));
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Profiles were lost, and said so: exit status 1.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("OTLP profiles were not delivered"),
        "{stderr}"
    );
    assert!(stderr.contains("the oldest are dropped"), "{stderr}");
    // Recording went on: every interval's file, on time, with every sample.
    let st = stats(&json);
    let counted = st["samples"]["counted"].as_u64().unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".folded"))
        .collect();
    let in_files: u64 = files
        .iter()
        .map(|e| {
            parse_folded(&std::fs::read_to_string(e.path()).unwrap())
                .iter()
                .map(|l| l.count)
                .sum::<u64>()
        })
        .sum();
    assert!(files.len() >= 5, "{stderr}");
    assert_eq!(in_files, counted);
    assert_eq!(intervals(&stderr).len(), files.len(), "{stderr}");
    // The sender waited on the first request all along: the rest queued,
    // the oldest dropped, what was left counted unsent at exit.
    let o = otlp_accounting(&st);
    assert_eq!(o["sent"], 0, "{o}");
    assert!(o["dropped"].as_u64().unwrap() >= 2, "{o}");
    assert!(o["unsent"].as_u64().unwrap() >= 1, "{o}");
    // A few seconds to send at the end, not the attempt's 60 s.
    assert!(took < Duration::from_secs(40), "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_sigterm_sends_what_is_queued_then_exits() {
    root_or_skip!();
    let _g = exclusive();
    let rx = Receiver::start("grpc", 0);
    let dir = scratch("otlp-term");
    let json = dir.join("stats.json");
    let ready = ready_path();
    let w = Workload::start(Command::new(fixture("work631")).arg("30"));
    let mut bp = bprof()
        .args([
            "-F",
            "199",
            "--every",
            "1",
            "--no-counts",
            "-p",
            &w.id().to_string(),
        ])
        .arg("--otlp")
        .arg(format!("http://127.0.0.1:{}", rx.port))
        .arg("--stats-json")
        .arg(&json)
        .arg("--ready-file")
        .arg(&ready)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_ready(&ready, &mut bp);
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(bp.id() as i32, libc::SIGTERM) };
    let mut stderr = String::new();
    bp.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(bp.wait().unwrap().success(), "{stderr}");
    let st = stats(&json);
    assert_eq!(st["interrupted"], true);
    let o = otlp_accounting(&st);
    assert!(o["profiles"].as_u64().unwrap() >= 2, "{o}");
    assert_eq!(o["sent"], o["profiles"], "{o}");
    let requests = rx.wait_for(o["sent"].as_u64().unwrap() as usize);
    assert_eq!(total(&requests), st["samples"]["counted"].as_u64().unwrap());
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_bad_url_or_header_is_one_line_and_exit_2() {
    for args in [
        vec!["--otlp", "collector:4317"],
        vec!["--otlp", "ftp://collector/"],
        vec!["--otlp", "http://user:pw@collector/"],
        vec!["--otlp", "http://collector:99999"],
        vec!["--otlp", "http://coll ector/"],
        vec!["--otlp", "http://x/", "--otlp-header", "novalue"],
        vec!["--otlp", "http://x/", "--otlp-header", "te=trailers"],
        vec!["--otlp", "http://x/", "--otlp-queue", "0"],
        vec!["--otlp", "http://x/", "--otlp-compression", "zstd"],
        vec!["--otlp-header", "a=b"],
    ] {
        let out = run(bprof().args(&args).arg("1"));
        let line = assert_one_line_error(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {line}");
    }
    // A header's value is never shown: it may be a secret.
    let out = run(bprof().args([
        "--otlp",
        "http://x/",
        "--otlp-header",
        "x=s3cret\u{1b}",
        "1",
    ]));
    let line = assert_one_line_error(&out);
    assert!(!line.contains("s3cret"), "{line}");
}

#[test]
fn hostile_otlp_answers_are_bounded_and_never_crash_bprof() {
    root_or_skip!();
    let _g = exclusive();
    // An HTTP server whose answer never ends, and a "gRPC" server that
    // answers garbage.
    let endless = TcpListener::bind("127.0.0.1:0").unwrap();
    let garbage = TcpListener::bind("127.0.0.1:0").unwrap();
    let (p1, p2) = (
        endless.local_addr().unwrap().port(),
        garbage.local_addr().unwrap().port(),
    );
    std::thread::spawn(move || {
        for mut s in endless.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000000000\r\n\r\n");
                let chunk = vec![0x0a; 65536];
                while s.write_all(&chunk).is_ok() {}
            });
        }
    });
    std::thread::spawn(move || {
        for mut s in garbage.incoming().map_while(Result::ok) {
            let _ = s.write_all(&[0xff; 4096]);
        }
    });
    let dir = scratch("otlp-hostile");
    for (url, sent) in [
        (
            format!("http://127.0.0.1:{p1}/v1development/profiles"),
            true,
        ),
        (format!("http://127.0.0.1:{p2}"), false),
    ] {
        let json = dir.join("stats.json");
        let out = run(bprof()
            .args(["-F", "99", "--no-counts", "--otlp", &url, "--stats-json"])
            .arg(&json)
            .arg("--")
            .arg(fixture("work631"))
            .arg("1"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(control_bytes(&out.stderr).is_empty(), "{stderr}");
        let o = otlp_accounting(&stats(&json));
        if sent {
            // Taken (200), its answer read only so far.
            assert!(out.status.success(), "{stderr}");
            assert_eq!(o["sent"], 1, "{stderr}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert_eq!(o["sent"], 0, "{stderr}");
            assert!(o["retried"].as_u64().unwrap() >= 1, "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_https_trusts_the_system_roots_and_nothing_else() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("otlp-tls");
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    // An authority of the test's own, and its certificate for 127.0.0.1.
    let sh = format!(
        "set -e; cd {d}; \
         openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bprof-test-ca \
           -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
           -keyout ca.key -out ca.pem; \
         openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout key.pem -out req.csr; \
         printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext; \
         openssl x509 -req -in req.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
           -extfile ext -out cert.pem",
        d = dir.display()
    );
    let made = Command::new("sh")
        .args(["-c", &sh])
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    for kind in ["grpc", "http"] {
        let rx = Receiver::start_with(kind, 0, Some((&cert, &key)));
        let url = match kind {
            "grpc" => format!("https://127.0.0.1:{}", rx.port),
            _ => format!("https://127.0.0.1:{}/v1development/profiles", rx.port),
        };
        // Trusted as a system root (SSL_CERT_FILE names the system's
        // bundle to rustls-native-certs), then not (the real bundle).
        for trusted in [true, false] {
            let json = dir.join("stats.json");
            let mut cmd = bprof();
            if trusted {
                cmd.env("SSL_CERT_FILE", &ca);
            }
            let out = run(cmd
                .args(["-F", "99", "--no-counts", "--otlp", &url, "--stats-json"])
                .arg(&json)
                .arg("--")
                .arg(fixture("work631"))
                .arg("1"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            let o = otlp_accounting(&stats(&json));
            if trusted {
                assert!(out.status.success(), "{kind}: {stderr}");
                assert_eq!(o["sent"], 1, "{kind}: {stderr}");
                let requests = rx.wait_for(1);
                assert_eq!(total(&requests), o["sent_samples"].as_u64().unwrap());
            } else {
                assert_eq!(out.status.code(), Some(1), "{kind}: {stderr}");
                assert_eq!(o["sent"], 0, "{kind}: {stderr}");
                assert_eq!(rx.requests().len(), 1, "{kind}: nothing more reached it");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_the_systemd_units_command_runs_and_sends() {
    root_or_skip!();
    let _g = exclusive();
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd/bprof.service"),
    )
    .unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let rx = Receiver::start("grpc", 0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let args: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(|a| a.replace("${BPROF_OTLP}", &url))
        .collect();
    assert!(args.iter().any(|a| a == &url), "{exec}");
    let dir = scratch("otlp-unit");
    let json = dir.join("stats.json");
    // Two busy processes, so "the whole machine" is known to hold more than
    // one (an idle machine may run only a kernel thread in 12 s at -F 49).
    let a = Workload::start(Command::new(fixture("work631")).arg("60"));
    let b = Workload::start(Command::new(fixture("rust_work")).arg("60"));
    // The unit's command for 12 s: one 10-s interval and a short last one.
    let out = run(bprof().args(&args).arg("--stats-json").arg(&json).arg("12"));
    let busy = [u64::from(a.id()), u64::from(b.id())];
    drop((a, b));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{exec}: {stderr}");
    let st = stats(&json);
    let o = otlp_accounting(&st);
    assert_eq!(o["sent"], o["profiles"], "{stderr}");
    assert_eq!(o["sent"], 2, "{stderr}");
    let requests = rx.wait_for(2);
    assert_eq!(total(&requests), st["samples"]["counted"].as_u64().unwrap());
    // The whole machine: more than one process.
    let pids: std::collections::BTreeSet<u64> = samples(&requests)
        .iter()
        .filter_map(|s| s.0["process.pid"].as_u64())
        .collect();
    assert!(
        busy.iter().all(|p| pids.contains(p)),
        "{busy:?} in {pids:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
