//! debuginfod answers are hostile input (anyone who controls a server in
//! `DEBUGINFOD_URLS`, or binds its port): a redirect to `file://`, a body
//! that never ends, a huge one, one that is not ELF. Each costs bounded
//! time and memory, the profile is written all the same, nothing of it is
//! cached, and a build ID that failed is not asked again. The cache path
//! itself is checked: another user's symlink or directory is refused.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

/// What the test server answers every request with.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// 302 to this location.
    Redirect(&'static str),
    /// 200 with no length, and bytes until the client goes.
    Endless,
    /// 200 with this Content-Length, sent (zeros) until the client goes.
    Huge(u64),
    /// 200 with a small body that is not ELF.
    NotElf,
}

/// An HTTP server on loopback, in threads of the test, that records the
/// paths asked for.
struct Server {
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let h = h.clone();
                std::thread::spawn(move || serve(conn, answer, &h));
            }
        });
        Server {
            port,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut s: TcpStream, answer: Answer, hits: &Mutex<Vec<String>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    hits.lock().unwrap().push(path);
    let zeros = vec![0u8; 64 << 10];
    // Writes zeros until `left` is sent, the client goes, or a minute passes.
    let stream = |s: &mut TcpStream, mut left: u64| {
        let t = Instant::now();
        while left > 0 && t.elapsed() < Duration::from_secs(60) {
            let n = left.min(zeros.len() as u64) as usize;
            if s.write_all(&zeros[..n]).is_err() {
                return;
            }
            left -= n as u64;
        }
    };
    match answer {
        Answer::Redirect(to) => {
            let _ = write!(
                s,
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Answer::Endless => {
            let _ = write!(s, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            stream(&mut s, u64::MAX);
        }
        Answer::Huge(n) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
            );
            stream(&mut s, n);
        }
        Answer::NotElf => {
            let body = "this is not an ELF file\n".repeat(1000);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    }
}

/// work631 stripped of every symbol: only debug information could name it.
fn stripped(dir: &Path) -> (PathBuf, String) {
    let bin = dir.join("fx_w631n");
    assert!(Command::new("objcopy")
        .arg("--strip-all")
        .arg(fixture("work631"))
        .arg(&bin)
        .status()
        .unwrap()
        .success());
    let out = run(Command::new("readelf").arg("-n").arg(&bin));
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build ID");
    (bin, id)
}

/// Every regular file under `dir` (none, for a cache holding nothing).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// bprof -f on `bin` for `secs` (and `extra` options) with this server and
/// cache, a 32 MiB cache cap and 3 s per request.
fn profile_with(
    url: &str,
    cache: &Path,
    bin: &Path,
    extra: &[&str],
    secs: &str,
) -> (Output, Duration, u64) {
    measured(
        Command::new("timeout")
            .args(["-s", "KILL", "90"])
            .arg(env!("CARGO_BIN_EXE_bprof"))
            .env("DEBUGINFOD_URLS", url)
            .env("DEBUGINFOD_CACHE_PATH", cache)
            .env("DEBUGINFOD_TIMEOUT", "3")
            .args([
                "--no-counts",
                "-F",
                "499",
                "--debuginfod-cache-size",
                "33554432",
            ])
            .args(extra)
            .arg("--")
            .arg(bin)
            .arg(secs),
    )
}

#[test]
// Long on purpose: one binary against each hostile answer in turn, then the failed build ID across intervals.
fn hostile_debuginfod_answers_cost_bounded_time_and_memory_and_are_never_cached() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("hostile_debuginfod");
    let (bin, id) = stripped(&dir);
    let asked = format!("/buildid/{id}/debuginfo");
    for (i, (answer, said)) in [
        (
            Answer::Redirect("file:///etc/shadow"),
            "redirect to 'file:///etc/shadow' refused",
        ),
        (Answer::Endless, ""),
        (Answer::Huge(300 << 20), "over 33554432 bytes"),
        (Answer::NotElf, "not an ELF file"),
    ]
    .into_iter()
    .enumerate()
    {
        let server = Server::start(answer);
        let cache = dir.join(format!("cache-{i}"));
        let (out, took, rss_kib) = profile_with(&server.url(), &cache, &bin, &["-f"], "1");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{answer:?}: {err}");
        assert!(took < Duration::from_secs(45), "{answer:?}: {took:?}");
        // A body held whole would be 300 MB and more.
        assert!(rss_kib < 150 << 10, "{answer:?}: {rss_kib} KiB");
        let note = err
            .lines()
            .find(|l| l.starts_with("bprof: debuginfod: "))
            .unwrap_or_else(|| panic!("{answer:?}: no debuginfod line: {err}"));
        assert!(note.contains(said), "{answer:?}: {note}");
        assert_eq!(server.hits(&asked), 1, "{answer:?}");
        // Nothing of it kept: no file at all in the cache.
        assert_eq!(files_under(&cache), Vec::<PathBuf>::new(), "{answer:?}");
        // ... and the profile is all there, its frames module+offset.
        let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
        assert_totals(&err, &lines);
        let all = total_for(&lines, "fx_w631n");
        let offsets: u64 = lines
            .iter()
            .filter(|l| {
                l.frames[0] == "fx_w631n" && l.frames.iter().any(|f| f.starts_with("fx_w631n+0x"))
            })
            .map(|l| l.count)
            .sum();
        assert!(all > 200 && offsets * 10 > all * 9, "{answer:?}: {lines:?}");
    }

    // A build ID that failed is not asked again for the whole run: one
    // request over four intervals.
    let server = Server::start(Answer::NotElf);
    let cache = dir.join("cache-every");
    let pattern = dir.join("every-%n.folded");
    let (out, _, _) = profile_with(
        &server.url(),
        &cache,
        &bin,
        &["--every", "1", "-o", pattern.to_str().unwrap()],
        "3.5",
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert_eq!(server.hits(&asked), 1, "{err}");
    let mut written = 0;
    for n in 1..=4 {
        let text = std::fs::read_to_string(dir.join(format!("every-{n:06}.folded")))
            .unwrap_or_else(|e| panic!("interval {n}: {e}\n{err}"));
        written += parse_folded(&text).iter().map(|l| l.count).sum::<u64>();
    }
    let (samples, lost, _) = summary_numbers(&err);
    assert_eq!((written, lost), (samples, 0), "{err}");
}

#[test]
fn hostile_a_symlinked_or_foreign_debuginfod_cache_is_refused_at_start() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_cache");
    let (bin, _) = stripped(&dir);
    let target = dir.join("roots");
    std::fs::create_dir(&target).unwrap();
    let link = PathBuf::from(format!(
        "/var/tmp/bprof-hostile-{}-cache-link",
        std::process::id()
    ));
    let theirs = PathBuf::from(format!(
        "/var/tmp/bprof-hostile-{}-cache-theirs",
        std::process::id()
    ));
    let _guards = (Planted(link.clone()), PlantedTree(theirs.clone()));
    nobody_sh(&format!(
        "ln -s {} {} && mkdir -m 700 {}",
        target.display(),
        link.display(),
        theirs.display()
    ));
    let refused = |cache: &Path, why: &str| {
        let t = Instant::now();
        let out = run(Command::new("timeout")
            .args(["-s", "KILL", "60"])
            .arg(env!("CARGO_BIN_EXE_bprof"))
            .env("DEBUGINFOD_URLS", "http://127.0.0.1:9")
            .env("DEBUGINFOD_CACHE_PATH", cache)
            .args(["--no-counts", "-f", "--"])
            .arg(&bin)
            .arg("5"));
        let line = assert_one_line_error(&out);
        assert!(
            line.contains("refusing the debuginfod cache") && line.contains(why),
            "{line}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "not refused at start"
        );
    };
    refused(&link, "is a symlink");
    refused(&link.join("sub"), "is a symlink");
    refused(&theirs, "owned by uid 65534");
    refused(&theirs.join("sub"), "owned by uid 65534");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    assert!(!theirs.join("sub").exists());

    // A path of root's own: made 0700, and the profile runs.
    let cache = dir.join("mine/cache");
    let out = run(Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .env("DEBUGINFOD_URLS", "http://127.0.0.1:9")
        .env("DEBUGINFOD_CACHE_PATH", &cache)
        .args(["--no-counts", "-F", "499", "-f", "--"])
        .arg(&bin)
        .arg("1"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&cache).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o700));
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    // (However busy the machine: the profile is there, whole.)
    assert!(total_for(&lines, "fx_w631n") > 20, "{lines:?}");
}

/// Removes a directory tree (nobody's, made for a test) when the test ends.
struct PlantedTree(PathBuf);

impl Drop for PlantedTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
