//! debuginfod: missing debug information fetched by build ID, as the
//! elfutils client does. With `DEBUGINFOD_URLS` set (space-separated
//! servers), `GET $URL/buildid/HEX/debuginfo` is tried on each in turn and
//! the file cached in `$DEBUGINFOD_CACHE_PATH` or
//! `~/.cache/debuginfod_client`, as `HEX/debuginfo`, where the next profile
//! finds it without the network. Every request has a deadline and all of
//! them together a budget (`DEBUGINFOD_TIMEOUT` seconds each, 5 by default,
//! at most 4 times that per symbolization), so a slow or dead server costs a
//! bounded wait and a one-line note, never a hang.
//!
//! The answers are hostile input, and so is the cache path:
//! - no redirect is followed but to an http or https URL with a host, and
//!   nothing the HTTP client does can abort bprof (its panics are caught);
//! - a body is streamed into a temporary file in the cache, never held in
//!   memory, and given up past the size cap; it is kept only if it is an ELF
//!   file with the build ID asked for;
//! - a build ID no server answered for is not asked again for the whole run;
//! - the cache is kept under its size cap (`--debuginfod-cache-size`), the
//!   least recently used files removed first;
//! - the cache directory and every directory above it are opened one by one
//!   (`openat`, `O_NOFOLLOW`: never through a symlink) and must be owned by
//!   root or bprof's user; the cache itself is made 0700 and must be bprof's
//!   user's own, else it is refused at start, naming it. Every owner is
//!   checked before anything is written.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::fsafe::{self, trusted_uid};
use crate::names;
use crate::symbolize::files::ElfFile;

/// The largest debug file bprof downloads (and the cache's default size).
pub const DEFAULT_CACHE_SIZE: u64 = 1 << 30;

/// Redirects followed per request, at most.
const MAX_REDIRECTS: usize = 4;

/// The cache's size cap for this run (`--debuginfod-cache-size`).
static CACHE_SIZE: AtomicU64 = AtomicU64::new(DEFAULT_CACHE_SIZE);

/// Build IDs no server gave a usable file for: not asked again this run
/// (every `--every` interval and `bprof top` refresh symbolizes anew).
static FAILED: Mutex<BTreeSet<[u8; BUILD_ID_SIZE]>> = Mutex::new(BTreeSet::new());

/// Sets the cache's size cap and checks the cache directory, before
/// anything is recorded: a cache path bprof must not use is refused here,
/// in one line. Nothing to do without `DEBUGINFOD_URLS`.
pub fn configure(cache_size: u64) -> anyhow::Result<()> {
    CACHE_SIZE.store(cache_size, Ordering::Relaxed);
    if urls().is_empty() {
        return Ok(());
    }
    let Some(path) = cache_path() else {
        return Ok(());
    };
    open_cache(&path).map(drop)
}

fn urls() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .unwrap_or_default()
        .split_whitespace()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect()
}

fn cache_path() -> Option<PathBuf> {
    std::env::var_os("DEBUGINFOD_CACHE_PATH")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache").join("debuginfod_client"))
        })
}

/// Opens (making it 0700 if need be) the cache directory `path`: every
/// level from the root opened with `O_NOFOLLOW` from the one before, each
/// owned by root or bprof's user; the last one bprof's user's own, with no
/// access for others (a looser mode of its own cache is tightened).
fn open_cache(path: &Path) -> anyhow::Result<File> {
    use std::path::Component;
    let shown = names::path(path);
    let refuse = |why: String| -> anyhow::Error {
        anyhow::anyhow!(
            "refusing the debuginfod cache {shown} (DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client): {why}"
        )
    };
    if !path.is_absolute() {
        return Err(refuse("not an absolute path".into()));
    }
    let mut cur = File::open("/").context("opening /")?;
    let parts: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(refuse("'..' in it".into()));
    }
    for (i, name) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let next = match fsafe::openat(&cur, name, flags, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                mkdirat(&cur, name).map_err(|e| refuse(format!("cannot make it: {e}")))?;
                fsafe::openat(&cur, name, flags, 0)
            }
            other => other,
        };
        let next = next.map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => refuse(format!(
                "{} is a symlink or not a directory",
                names::path(Path::new(name))
            )),
            _ => refuse(e.to_string()),
        })?;
        let st = fsafe::fstat(&next).map_err(|e| refuse(e.to_string()))?;
        if !trusted_uid(st.st_uid) {
            return Err(refuse(format!(
                "{} is owned by uid {}, not by root",
                names::path(Path::new(name)),
                st.st_uid
            )));
        }
        if last {
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if st.st_uid != me {
                return Err(refuse(format!(
                    "owned by uid {}, not by uid {me}",
                    st.st_uid
                )));
            }
            if st.st_mode & 0o077 != 0 {
                // SAFETY: fchmod on a directory fd of this user's own.
                if unsafe { libc::fchmod(next.as_raw_fd(), 0o700) } != 0 {
                    return Err(refuse(std::io::Error::last_os_error().to_string()));
                }
            }
        }
        cur = next;
    }
    Ok(cur)
}

/// `mkdirat(dir, name, 0700)`; an existing one is fine (checked next).
fn mkdirat(dir: &File, name: &OsStr) -> std::io::Result<()> {
    let c = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Ok(())
}

/// The servers, cache and time left for one symbolization.
pub struct Client {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Duration,
    budget_end: Option<Instant>,
    budget: Duration,
    /// What went wrong, said once at the end.
    problems: RefCell<Vec<String>>,
}

/// Why a download was not kept.
enum Failed {
    /// Said once at the end; the build ID is not asked again.
    Bad(String),
    /// No server has it.
    Missing,
}

impl Client {
    /// A client from the environment, or `None` without `DEBUGINFOD_URLS`.
    pub fn from_env() -> Option<Client> {
        let urls = urls();
        if urls.is_empty() {
            return None;
        }
        let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&t| (1..=3600).contains(&t))
            .map_or(Duration::from_secs(5), Duration::from_secs);
        Some(Client {
            urls,
            cache: cache_path()?,
            timeout,
            budget_end: None,
            budget: timeout * 4,
            problems: RefCell::new(Vec::new()),
        })
    }

    /// The debug file for build ID `id`: from the cache, else downloaded.
    pub(crate) fn debuginfo(&mut self, id: &[u8; BUILD_ID_SIZE]) -> Option<ElfFile> {
        let len = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        if len < 8 {
            return None;
        }
        let hex: String = id[..len].iter().map(|b| format!("{b:02x}")).collect();
        let cache = match open_cache(&self.cache) {
            Ok(c) => c,
            Err(e) => {
                self.problem(format!("{e:#}"));
                return None;
            }
        };
        if let Some(f) = self.cached(&cache, &hex, id) {
            return Some(f);
        }
        if FAILED.lock().is_ok_and(|f| f.contains(id)) {
            return None;
        }
        let end = *self
            .budget_end
            .get_or_insert_with(|| Instant::now() + self.budget);
        for url in self.urls.clone() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.problem("time budget used up; later build IDs not fetched".into());
                return None;
            }
            let url = format!("{url}/buildid/{hex}/debuginfo");
            match self.download(&cache, &hex, id, &url, left.min(self.timeout)) {
                Ok(f) => return Some(f),
                Err(Failed::Missing) => {}
                Err(Failed::Bad(why)) => self.problem(format!("{}: {why}", names::clean(&url))),
            }
        }
        // No server had it, or none gave a usable file: not asked again.
        if let Ok(mut f) = FAILED.lock() {
            f.insert(*id);
        }
        None
    }

    /// Says once what went wrong, in one line.
    pub fn report(&self) {
        let p = self.problems.borrow();
        if let Some(first) = p.first() {
            let more = if p.len() > 1 {
                format!(" (and {} more)", p.len() - 1)
            } else {
                String::new()
            };
            eprintln!("bprof: debuginfod: {first}{more}; those frames show module+offset");
        }
    }

    fn problem(&self, what: String) {
        let mut p = self.problems.borrow_mut();
        if !p.contains(&what) {
            p.push(what);
        }
    }

    /// The cached file of `hex`, if there is one bprof's user wrote: its
    /// directory and the file opened without following a symlink, owned by
    /// this user, writable by no one else.
    fn cached(&self, cache: &File, hex: &str, id: &[u8; BUILD_ID_SIZE]) -> Option<ElfFile> {
        let dir = own_dir(cache, OsStr::new(hex), false)?;
        let f = fsafe::openat(
            &dir,
            OsStr::new("debuginfo"),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )
        .ok()?;
        let m = f.metadata().ok()?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if !m.is_file() || m.uid() != me || m.mode() & 0o022 != 0 {
            return None;
        }
        // Used now: the last to be evicted.
        // SAFETY: a valid fd; a null times pointer sets both times to now.
        unsafe { libc::futimens(f.as_raw_fd(), std::ptr::null()) };
        let f = ElfFile::from_checked(self.cache.join(hex).join("debuginfo"), f).ok()?;
        (f.build_id().as_ref() == Some(id)).then_some(f)
    }

    /// GETs `url`, following redirects to http and https URLs only, into
    /// the cache: `Failed::Missing` for a 404.
    fn download(
        &self,
        cache: &File,
        hex: &str,
        id: &[u8; BUILD_ID_SIZE],
        url: &str,
        timeout: Duration,
    ) -> Result<ElfFile, Failed> {
        let cap = CACHE_SIZE.load(Ordering::Relaxed);
        let dir = own_dir(cache, OsStr::new(hex), true)
            .ok_or_else(|| Failed::Bad("cannot make its cache directory".into()))?;
        let tmp = format!(".debuginfo.bprof-{}.tmp", std::process::id());
        let tmp = OsStr::new(&tmp);
        let _ = fsafe::unlinkat(&dir, tmp);
        let mut file = fsafe::openat(
            &dir,
            tmp,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| Failed::Bad(format!("cache: {e}")))?;
        // Everything the HTTP client does, fenced: none of its panics on a
        // server's answer may abort bprof.
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fetch(url, timeout, cap, &mut file)
        }))
        .unwrap_or_else(|_| Err(Failed::Bad("the HTTP client failed on the answer".into())));
        let kept = got.and_then(|()| {
            // Only an ELF file with this build ID is kept.
            let elf = ElfFile::from_checked(self.cache.join(hex).join("debuginfo"), file)
                .map_err(Failed::Bad)?;
            if elf.build_id().as_ref() != Some(id) {
                return Err(Failed::Bad("the file sent has another build ID".into()));
            }
            fsafe::rename_in(&dir, tmp, OsStr::new("debuginfo"), false)
                .map_err(|e| Failed::Bad(format!("cache: {e}")))?;
            Ok(elf)
        });
        if kept.is_err() {
            let _ = fsafe::unlinkat(&dir, tmp);
        } else {
            evict(cache, cap);
        }
        kept
    }
}

/// The build ID's directory in the cache, opened without following a
/// symlink, bprof's user's own and writable by no one else; made (0700)
/// with `create`.
fn own_dir(cache: &File, name: &OsStr, create: bool) -> Option<File> {
    if create {
        mkdirat(cache, name).ok()?;
    }
    let d = fsafe::openat(
        cache,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
    .ok()?;
    let st = fsafe::fstat(&d).ok()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    (st.st_uid == me && st.st_mode & 0o022 == 0).then_some(d)
}

/// One GET into `out`, redirects followed by hand (http and https URLs
/// with a host only), the body streamed and cut at `cap` bytes.
fn fetch(url: &str, timeout: Duration, cap: u64, out: &mut File) -> Result<(), Failed> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    let mut at = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        let resp = match agent.get(&at).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(404, _)) => return Err(Failed::Missing),
            Err(e) => {
                let e = e.to_string();
                return Err(Failed::Bad(
                    names::clean(e.lines().next().unwrap_or("failed")).into_owned(),
                ));
            }
        };
        if (300..400).contains(&resp.status()) {
            let to = resp.header("location").unwrap_or_default();
            at = redirect_target(&at, to).ok_or_else(|| {
                Failed::Bad(format!(
                    "redirect to '{}' refused (only http and https URLs with a host)",
                    names::clean(to)
                ))
            })?;
            continue;
        }
        if resp.status() != 200 {
            return Err(Failed::Bad(format!("status {}", resp.status())));
        }
        let mut body = resp.into_reader().take(cap + 1);
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0u64;
        loop {
            let n = body
                .read(&mut buf)
                .map_err(|e| Failed::Bad(names::clean(&e.to_string()).into_owned()))?;
            if n == 0 {
                return Ok(());
            }
            total += n as u64;
            if total > cap {
                return Err(Failed::Bad(format!(
                    "the file is over {cap} bytes (--debuginfod-cache-size)"
                )));
            }
            out.write_all(&buf[..n])
                .map_err(|e| Failed::Bad(format!("cache: {e}")))?;
        }
    }
    Err(Failed::Bad(format!("more than {MAX_REDIRECTS} redirects")))
}

/// Where a redirect from `from` to `location` leads, if it is an http or
/// https URL with a host (absolute, scheme-relative, or a path on the same
/// server); `None` for anything else (`file://`, `ftp:`, relative names).
fn redirect_target(from: &str, location: &str) -> Option<String> {
    let split = |u: &str| -> Option<(String, String)> {
        let (scheme, rest) = u.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        let host = rest.split(['/', '?', '#']).next()?;
        let bare = host.rsplit('@').next().unwrap_or(host);
        if bare.is_empty() || bare.starts_with(':') || host.contains('@') {
            return None;
        }
        Some((scheme, host.to_string()))
    };
    let location = location.trim();
    if location.is_empty() || location.chars().any(|c| c.is_control() || c == ' ') {
        return None;
    }
    if location.contains("://") {
        split(location)?;
        return Some(location.to_string());
    }
    let (scheme, host) = split(from)?;
    if let Some(rest) = location.strip_prefix("//") {
        let to = format!("{scheme}://{rest}");
        split(&to)?;
        return Some(to);
    }
    location
        .starts_with('/')
        .then(|| format!("{scheme}://{host}{location}"))
}

/// Keeps the cache under `cap` bytes: the least recently used of bprof's
/// user's own files go first.
fn evict(cache: &File, cap: u64) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", cache.as_raw_fd())) else {
        return;
    };
    let mut files: Vec<(i64, u64, std::ffi::OsString)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(dir) = own_dir(cache, &name, false) else {
            continue;
        };
        if let Ok(st) = fsafe::lstatat(&dir, OsStr::new("debuginfo")) {
            if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == me {
                files.push((st.st_mtime, st.st_size as u64, name));
            }
        }
    }
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, size, name) in files {
        if total <= cap {
            break;
        }
        if let Some(dir) = own_dir(cache, &name, false) {
            if fsafe::unlinkat(&dir, OsStr::new("debuginfo")).is_ok() {
                total -= size;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_lead_only_to_http_and_https_urls_with_a_host() {
        let from = "http://127.0.0.1:8002/buildid/ab/debuginfo";
        let to = |l| redirect_target(from, l);
        assert_eq!(
            to("https://mirror.example/x").as_deref(),
            Some("https://mirror.example/x")
        );
        assert_eq!(
            to("/other/path").as_deref(),
            Some("http://127.0.0.1:8002/other/path")
        );
        assert_eq!(
            to("//cdn.example/a").as_deref(),
            Some("http://cdn.example/a")
        );
        for bad in [
            "file:///etc/shadow",
            "FILE:///etc/shadow",
            "ftp://h/x",
            "http:///no-host",
            "http://:80/x",
            "http://user@host/x",
            "relative/name",
            "",
            "http://h/\r\nx",
            "gopher://h",
        ] {
            assert_eq!(to(bad), None, "{bad}");
        }
    }
}
