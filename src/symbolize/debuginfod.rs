//! debuginfod: missing debug information fetched by build ID, as the
//! elfutils client does. With `DEBUGINFOD_URLS` set (space-separated
//! servers), `GET $URL/buildid/HEX/debuginfo` is tried on each in turn and
//! the file cached in `$DEBUGINFOD_CACHE_PATH` or
//! `~/.cache/debuginfod_client/HEX/debuginfo`, where the next profile finds
//! it without the network. Every request has a deadline and all of them
//! together a budget (`DEBUGINFOD_TIMEOUT` seconds each, 5 by default, at
//! most 4 times that in all), so a slow or dead server costs a bounded wait
//! and a one-line note, never a hang.

use std::cell::RefCell;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bpf::stacks::BUILD_ID_SIZE;

/// The largest debug file bprof downloads.
const MAX_DOWNLOAD: u64 = 1 << 30;

/// The servers, cache and time left for one profile.
pub struct Client {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Duration,
    budget_end: Option<Instant>,
    budget: Duration,
    /// What went wrong, said once at the end.
    problems: RefCell<Vec<String>>,
}

impl Client {
    /// A client from the environment, or `None` without `DEBUGINFOD_URLS`.
    pub fn from_env() -> Option<Client> {
        let urls: Vec<String> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_whitespace()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect();
        if urls.is_empty() {
            return None;
        }
        let cache = std::env::var_os("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".cache").join("debuginfod_client"))
            })?;
        let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&t| (1..=3600).contains(&t))
            .map_or(Duration::from_secs(5), Duration::from_secs);
        Some(Client {
            urls,
            cache,
            timeout,
            budget_end: None,
            budget: timeout * 4,
            problems: RefCell::new(Vec::new()),
        })
    }

    /// The debug file for build ID `id`: from the cache, else downloaded.
    pub fn debuginfo(&mut self, id: &[u8; BUILD_ID_SIZE]) -> Option<PathBuf> {
        let len = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        if len < 8 {
            return None;
        }
        let hex: String = id[..len].iter().map(|b| format!("{b:02x}")).collect();
        let dir = self.cache.join(&hex);
        let file = dir.join("debuginfo");
        if self.trusted(&file) {
            return Some(file);
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
            match self.fetch(
                &format!("{url}/buildid/{hex}/debuginfo"),
                left.min(self.timeout),
            ) {
                Ok(Some(body)) => return self.store(&dir, &file, &body),
                Ok(None) => {}
                Err(e) => self.problem(format!("{url}: {e}")),
            }
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

    /// A cached file counts only if this user owns it and its directory:
    /// a cache another user could write is not trusted.
    fn trusted(&self, file: &Path) -> bool {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let owned = |p: &Path| {
            fs::symlink_metadata(p).is_ok_and(|m| m.uid() == me && m.mode() & 0o022 == 0)
        };
        owned(file)
            && file.parent().is_some_and(owned)
            && fs::metadata(file).is_ok_and(|m| m.is_file())
    }

    /// `Ok(None)`: the server does not have it (404).
    fn fetch(&self, url: &str, timeout: Duration) -> Result<Option<Vec<u8>>, String> {
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .redirects(3)
            .build();
        match agent.get(url).call() {
            Ok(resp) => {
                let mut body = Vec::new();
                resp.into_reader()
                    .take(MAX_DOWNLOAD + 1)
                    .read_to_end(&mut body)
                    .map_err(|e| e.to_string())?;
                if body.len() as u64 > MAX_DOWNLOAD {
                    return Err(format!("debug file over {MAX_DOWNLOAD} bytes"));
                }
                Ok(Some(body))
            }
            Err(ureq::Error::Status(404, _)) => Ok(None),
            Err(e) => Err(e.to_string().lines().next().unwrap_or("failed").to_string()),
        }
    }

    /// Writes the download atomically into the cache (dirs 0700, file 0600).
    fn store(&self, dir: &Path, file: &Path, body: &[u8]) -> Option<PathBuf> {
        let made = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
        if let Err(e) = made {
            self.problem(format!("cache {}: {e}", dir.display()));
            return None;
        }
        let tmp = dir.join(format!(".debuginfo.bprof-{}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(body))
            .and_then(|()| fs::rename(&tmp, file));
        match written {
            Ok(()) if self.trusted(file) => Some(file.to_path_buf()),
            Ok(()) => {
                self.problem(format!("cache {} is not this user's own", dir.display()));
                None
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                self.problem(format!("cache {}: {e}", file.display()));
                None
            }
        }
    }
}
