//! JIT symbol files of profiled processes: perf maps (`/tmp/perf-PID.map`)
//! and jitdumps (`jit-PID.dump`), found and opened while each process lives
//! and read after the profile, so a process that exited (and maybe deleted
//! its files) keeps its JIT frame names.
//!
//! Both files are written by the profiled user, in world-writable places,
//! and read by root: each is opened once through [`fsafe`] (no symlink, no
//! FIFO, a regular file owned by exactly the process's user, at most
//! `max_size` bytes) and then read only from that descriptor. A process's
//! user is learned while it lives (`/proc/PID/status`); a file of an exited
//! process whose user bprof never saw is not read. Files of processes in
//! another mount namespace are opened inside that process's root, under the
//! name the process knows itself by there.

mod jitdump;
mod perfmap;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::bpf::stacks::{RawStack, UserFrame};
use crate::fsafe::{self, Checked, Owner, Refused};

/// Default cap on a perf map or jitdump (`--max-perf-map-size`).
pub const DEFAULT_MAX_SIZE: u64 = 64 << 20;
/// Descriptors held open during the recording at most; beyond, files are
/// opened at the end (if still there).
const MAX_HELD: usize = 256;

/// What bprof knows of a process: who it runs as, and where its files are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcInfo {
    /// Effective uid: the owner of the files it creates.
    uid: u32,
    /// Its pid in its own pid namespace (the name of its perf map there).
    nspid: u32,
    /// Same mount namespace and root directory as bprof's (no container);
    /// `None` when it could not be told (a zombie has neither).
    own_root: Option<bool>,
}

impl ProcInfo {
    /// Whether its paths mean what they mean to bprof; unknown counts as
    /// yes only in bprof's own pid namespace.
    fn shares_root(&self, pid: u32) -> bool {
        self.own_root.unwrap_or(self.nspid == pid)
    }
}

/// The newest reading of a process, keeping what a zombie no longer tells.
fn refresh(pid: u32, old: Option<ProcInfo>) -> Option<ProcInfo> {
    match (proc_info(pid), old) {
        (Some(new), Some(old)) => Some(ProcInfo {
            own_root: new.own_root.or(old.own_root),
            ..new
        }),
        (new, old) => new.or(old),
    }
}

/// Reads a process's user and namespace pid from /proc (also works for a
/// zombie); `None` once it is reaped.
fn proc_info(pid: u32) -> Option<ProcInfo> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
    };
    let uid = field("Uid:")?.get(1)?.parse().ok()?;
    let nspid = field("NStgid:")
        .and_then(|v| v.last()?.parse().ok())
        .unwrap_or(pid);
    // A copy of our mount namespace has the same root inode but may mount
    // its own /tmp: compare the namespaces too.
    let ns = |p: &str| fs::read_link(format!("{p}/ns/mnt")).ok();
    let root = |p: &str| fs::metadata(format!("{p}/root")).ok();
    let me = "/proc/self";
    let it = format!("/proc/{pid}");
    let own_root = match (ns(&it), ns(me), root(&it), root(me)) {
        (Some(a), Some(b), Some(c), Some(d)) => {
            Some(a == b && c.dev() == d.dev() && c.ino() == d.ino())
        }
        _ => None,
    };
    Some(ProcInfo {
        uid,
        nspid,
        own_root,
    })
}

/// One file's state.
#[derive(Debug, Default)]
enum Slot {
    /// Not found yet: look again later.
    #[default]
    Pending,
    /// Open and checked; read at the end.
    Open(Checked),
    /// Nothing to read (refused, or the process is gone).
    Done,
}

#[derive(Debug, Default)]
struct Proc {
    info: Option<ProcInfo>,
    /// Mapped anonymous executable memory (or a jitdump) during the
    /// profile, or was named with -p: its files are looked for every tick.
    jit: bool,
    /// Mapped anonymous executable memory during the profile.
    anon_exec: bool,
    exited: bool,
    /// Polls that found nothing; after a few, it is polled less often.
    misses: u32,
    /// When a poll first found nothing: a second later it is polled less
    /// often however few polls came (ticks are up to 2 s apart).
    first_miss: Option<std::time::Instant>,
    map: Slot,
    dump: Slot,
    /// jitdump files the process mapped, as it named them.
    dump_paths: Vec<PathBuf>,
}

impl Proc {
    fn slot(&self, kind: Kind) -> &Slot {
        match kind {
            Kind::Map => &self.map,
            Kind::Dump => &self.dump,
        }
    }
}

/// What looking for a file gave.
enum Found {
    File(Checked),
    /// Not there (yet).
    Missing,
    /// There, but not safe to read (noted in the skipped list).
    Refused,
}

/// Which file of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Dump,
}

/// The paths, inside the process's root, where its files of this kind may
/// be: its perf map, or the jitdumps it mapped and the default one.
fn candidates(p: &Proc, info: ProcInfo, kind: Kind) -> Vec<PathBuf> {
    match kind {
        Kind::Map => vec![PathBuf::from(format!("/tmp/perf-{}.map", info.nspid))],
        Kind::Dump => p
            .dump_paths
            .iter()
            .cloned()
            .chain([PathBuf::from(format!("/tmp/jit-{}.dump", info.nspid))])
            .collect(),
    }
}

/// Whether any file still looked for may be there now: an lstat through
/// `/proc/PID/root`, which follows the process wherever its root is (its
/// pid in its namespace never changes). Only a definite "no such file"
/// says no; what is there is then read and checked by [`JitFiles::find`].
fn may_exist(pid: u32, p: &Proc) -> bool {
    let Some(info) = p.info else {
        return true;
    };
    [Kind::Map, Kind::Dump]
        .into_iter()
        .filter(|&k| matches!(p.slot(k), Slot::Pending))
        .flat_map(|k| candidates(p, info, k))
        .any(|name| {
            let rel = name.strip_prefix("/").unwrap_or(&name);
            !matches!(
                std::fs::symlink_metadata(Path::new(&format!("/proc/{pid}/root")).join(rel)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound
            )
        })
}

/// The JIT symbol files of every process of interest.
#[derive(Debug)]
pub struct JitFiles {
    /// Largest perf map or jitdump read (`--max-perf-map-size`).
    pub max_size: u64,
    procs: HashMap<u32, Proc>,
    held: usize,
    polls: u64,
    /// Files not read, and why (each once).
    skipped: RefCell<Vec<(String, String)>>,
    skipped_paths: RefCell<HashSet<String>>,
    /// Malformed perf map lines and truncated jitdumps seen while reading.
    malformed: Cell<u64>,
}

impl Default for JitFiles {
    fn default() -> Self {
        JitFiles {
            max_size: DEFAULT_MAX_SIZE,
            procs: HashMap::new(),
            held: 0,
            polls: 0,
            skipped: RefCell::new(Vec::new()),
            skipped_paths: RefCell::new(HashSet::new()),
            malformed: Cell::new(0),
        }
    }
}

fn reason(r: &Refused) -> String {
    match r {
        Refused::Io(e) if e.raw_os_error() == Some(libc::ELOOP) => "a symlink".into(),
        other => other.to_string(),
    }
}

impl JitFiles {
    /// Remembers who `pid` runs as (a process that exists at the start).
    /// With `watch`, its files are also looked for during the recording.
    pub fn note_process(&mut self, pid: u32, watch: bool) {
        let p = self.procs.entry(pid).or_default();
        p.info = refresh(pid, p.info);
        p.jit |= watch;
    }

    /// `pid` mapped anonymous executable memory: JIT code, so it may write
    /// a perf map.
    pub fn note_jit(&mut self, pid: u32) {
        let p = self.procs.entry(pid).or_default();
        p.anon_exec = true;
        if !p.exited && !p.jit {
            p.jit = true;
            p.info = refresh(pid, p.info);
        }
    }

    /// Whether `pid` mapped anonymous executable memory during the profile
    /// (what is known of an exited process's JIT code).
    pub fn mapped_anon_exec(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.anon_exec)
    }

    /// `pid` mapped a file named `jit-PID.dump` (how jitdump writers let
    /// perf find them).
    pub fn note_jitdump(&mut self, pid: u32, path: PathBuf) {
        let p = self.procs.entry(pid).or_default();
        if p.exited {
            return;
        }
        p.jit = true;
        if !p.dump_paths.contains(&path) && p.dump_paths.len() < 8 {
            p.dump_paths.push(path);
        }
        if matches!(p.dump, Slot::Done) && p.dump_paths.len() > 1 {
            p.dump = Slot::Pending;
        }
    }

    /// `pid` exited (PERF_RECORD_EXIT of its main thread): open its files
    /// now, while a zombie still tells its user, before a new process can
    /// take the pid (if fewer than [`MAX_HELD`] are held; else they are
    /// looked for by name after the profile).
    pub fn on_exit(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.exited {
            return;
        }
        p.info = refresh(pid, p.info);
        self.open(pid, true);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exited = true;
        }
    }

    /// Looks for the files of the JIT processes that do not have them yet
    /// (each recording tick).
    pub fn poll(&mut self) {
        self.polls += 1;
        // A process that maps executable memory but writes no perf map (a
        // libffi trampoline, a JIT without perf support), or a -p target, is
        // looked at every tick for a second, then every tenth tick: two
        // lstats through /proc/PID/root every tick add up over a long
        // profile. (Its files are still looked for at its exit and at the
        // end.)
        let slow = self.polls % 10 != 0;
        let now = std::time::Instant::now();
        let second = std::time::Duration::from_secs(1);
        let pending: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, p)| {
                let tired = p.misses >= 10 || p.first_miss.is_some_and(|t| now - t >= second);
                p.jit
                    && !p.exited
                    && !(slow && tired)
                    && (matches!(p.map, Slot::Pending) || matches!(p.dump, Slot::Pending))
            })
            .map(|(&pid, _)| pid)
            .collect();
        for pid in pending {
            if self.held >= MAX_HELD {
                break;
            }
            if let Some(p) = self.procs.get_mut(&pid) {
                p.misses = p.misses.saturating_add(1);
                p.first_miss.get_or_insert(now);
                // Nothing there yet (the usual tick): one lstat per file,
                // where reading who it runs as and opening cost about ten
                // system calls a tick.
                if !may_exist(pid, p) {
                    continue;
                }
                p.info = refresh(pid, p.info);
            }
            self.open(pid, false);
        }
    }

    /// Learns, for the last time, the users of the processes with unnamed
    /// (JIT) frames in `raw`: after the recording, before [`Self::names`],
    /// which opens the files not held yet.
    pub fn prepare(&mut self, raw: &[RawStack]) {
        let pids: BTreeSet<u32> = raw
            .iter()
            .filter(|s| s.user.iter().any(|f| matches!(f, UserFrame::Ip(_))))
            .map(|s| s.tgid)
            .collect();
        for pid in pids {
            let p = self.procs.entry(pid).or_default();
            p.info = refresh(pid, p.info);
            if p.info.is_none() {
                // Exited before bprof learned its user: its files (if any)
                // cannot be trusted.
                p.map = Slot::Done;
                p.dump = Slot::Done;
                for path in [
                    format!("/tmp/perf-{pid}.map"),
                    format!("/tmp/jit-{pid}.dump"),
                ] {
                    if fs::symlink_metadata(&path).is_ok() {
                        self.skip(
                            path,
                            "its process exited before bprof learned its user".into(),
                        );
                    }
                }
            }
        }
    }

    /// Tries to open and hold `pid`'s pending files; `last` turns "not
    /// there yet" into "none".
    fn open(&mut self, pid: u32, last: bool) {
        for kind in [Kind::Map, Kind::Dump] {
            let Some(p) = self.procs.get(&pid) else {
                return;
            };
            if !matches!(p.slot(kind), Slot::Pending) || self.held >= MAX_HELD {
                continue;
            }
            let slot = match self.find(pid, p, kind) {
                Found::File(c) => {
                    self.held += 1;
                    Slot::Open(c)
                }
                Found::Refused => Slot::Done,
                Found::Missing if last => Slot::Done,
                Found::Missing => Slot::Pending,
            };
            if let Some(p) = self.procs.get_mut(&pid) {
                match kind {
                    Kind::Map => p.map = slot,
                    Kind::Dump => p.dump = slot,
                }
            }
        }
    }

    /// The first of `pid`'s files of this kind that opens under the rules;
    /// files refused on the way are noted.
    fn find(&self, pid: u32, p: &Proc, kind: Kind) -> Found {
        let Some(info) = p.info else {
            return Found::Missing;
        };
        let mut found = Found::Missing;
        for name in candidates(p, info, kind) {
            let (shown, opened) = self.open_one(pid, info, &name);
            match opened {
                Ok(c) => return Found::File(c),
                Err(Refused::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(r) => {
                    self.skip(shown, reason(&r));
                    found = Found::Refused;
                }
            }
        }
        found
    }

    /// Opens `name` (a path inside the process's root) under the rules.
    fn open_one(
        &self,
        pid: u32,
        info: ProcInfo,
        name: &Path,
    ) -> (String, Result<Checked, Refused>) {
        let owner = Owner::Exactly(info.uid);
        let shared = info.shares_root(pid);
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let rel = name.strip_prefix("/").unwrap_or(name);
        let shown = if shared {
            name.display().to_string()
        } else {
            root.join(rel).display().to_string()
        };
        // Inside its root while it has one (a container's /tmp); by the
        // plain path only when that means the same file.
        let opened = match fsafe::open_untrusted_in_root(&root, rel, owner, self.max_size) {
            Err(Refused::Io(e)) if shared && e.kind() == std::io::ErrorKind::NotFound => {
                fsafe::open_untrusted(name, owner, self.max_size)
            }
            other => other,
        };
        (shown, opened)
    }

    fn skip(&self, path: String, why: String) {
        if self.skipped_paths.borrow_mut().insert(path.clone()) {
            self.skipped.borrow_mut().push((path, why));
        }
    }

    /// Names of the addresses `ips` of `pid` that its perf map or jitdump
    /// covers (the jitdump wins where both do).
    pub fn names(&self, pid: u32, ips: &[u64]) -> HashMap<u64, String> {
        let mut out = HashMap::new();
        let Some(p) = self.procs.get(&pid) else {
            return out;
        };
        let mut ips = ips.to_vec();
        ips.sort_unstable();
        // Files not held yet are opened now, read, and closed.
        let late = |kind| match p.slot(kind) {
            Slot::Pending => match self.find(pid, p, kind) {
                Found::File(c) => Some(Slot::Open(c)),
                _ => None,
            },
            _ => None,
        };
        let (late_map, late_dump) = (late(Kind::Map), late(Kind::Dump));
        if let Slot::Open(c) = late_map.as_ref().unwrap_or(&p.map) {
            match perfmap::scan(perfmap::At::new(&c.file, self.max_size), &ips, &mut out) {
                Ok(st) => self.malformed.set(self.malformed.get() + st.malformed),
                Err(_) => self.malformed.set(self.malformed.get() + 1),
            }
        }
        if let Slot::Open(c) = late_dump.as_ref().unwrap_or(&p.dump) {
            match jitdump::scan(&c.file, self.max_size, &ips, &mut out) {
                Ok(st) => self
                    .malformed
                    .set(self.malformed.get() + u64::from(st.truncated)),
                Err(_) => self.malformed.set(self.malformed.get() + 1),
            }
        }
        out
    }

    /// Says which files were not read: each by name with `verbose`, else
    /// their number.
    pub fn report(&self, verbose: bool) {
        if verbose {
            for (path, why) in self.skipped.borrow().iter() {
                eprintln!(
                    "bprof: skipped {}: {}",
                    crate::names::clean(path),
                    crate::names::clean(why)
                );
            }
            let bad = self.malformed.get();
            if bad > 0 {
                eprintln!("bprof: {bad} malformed perf map lines or jitdump records ignored");
            }
        } else if !self.skipped.borrow().is_empty() {
            eprintln!(
                "bprof: {} perf map or jitdump files not read (-v says which and why)",
                self.skipped.borrow().len()
            );
        }
    }

    /// Files skipped so far, as (path, reason).
    pub fn skipped(&self) -> Vec<(String, String)> {
        self.skipped.borrow().clone()
    }
}

/// Whether a mapped file's name is a jitdump's (`jit-<digits>.dump`).
pub fn is_jitdump_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("jit-")?.strip_suffix(".dump"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
}

/// Held by the unit tests that write this test process's own
/// /tmp/perf-PID.map: they run in parallel threads of one process.
#[cfg(test)]
pub(crate) static OWN_PERF_MAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_looks_further_only_when_a_file_is_there() {
        // This process's root, under a name no other test uses (they run
        // at once, as the same process).
        let pid = std::process::id();
        let ns = pid.wrapping_add(1_000_000_000);
        let mut p = Proc {
            info: Some(ProcInfo {
                uid: 0,
                nspid: ns,
                own_root: Some(true),
            }),
            ..Proc::default()
        };
        let map = PathBuf::from(format!("/tmp/perf-{ns}.map"));
        let dump = PathBuf::from(format!("/tmp/jit-{ns}.dump"));
        let _ = fs::remove_file(&map);
        let _ = fs::remove_file(&dump);
        assert!(!may_exist(pid, &p));
        // A dangling symlink is "there": the full look refuses it, noted.
        std::os::unix::fs::symlink("/nonexistent", &map).unwrap();
        assert!(may_exist(pid, &p));
        fs::remove_file(&map).unwrap();
        fs::write(&dump, b"").unwrap();
        assert!(may_exist(pid, &p));
        // A file no longer looked for does not count.
        p.dump = Slot::Done;
        assert!(!may_exist(pid, &p));
        fs::remove_file(&dump).unwrap();
        // Who it is not known yet: always the full look.
        p.info = None;
        assert!(may_exist(pid, &p));
    }

    #[test]
    fn jitdump_names() {
        assert!(is_jitdump_name(Path::new(
            "/home/u/.debug/jit/x/jit-123.dump"
        )));
        assert!(!is_jitdump_name(Path::new("/tmp/jit-.dump")));
        assert!(!is_jitdump_name(Path::new("/tmp/jit-12a.dump")));
        assert!(!is_jitdump_name(Path::new("/tmp/perf-12.map")));
    }

    #[test]
    fn own_process_info() {
        let me = std::process::id();
        let info = proc_info(me).unwrap();
        // SAFETY: geteuid has no preconditions.
        assert_eq!(info.uid, unsafe { libc::geteuid() });
        assert_eq!(info.own_root, Some(true));
        assert_eq!(proc_info(u32::MAX), None);
    }

    #[test]
    fn a_perf_map_is_read_from_the_descriptor_opened_while_it_existed() {
        let _own = super::OWN_PERF_MAP
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let path = format!("/tmp/perf-{me}.map");
        fs::write(&path, "1000 100 early\n").unwrap();
        let mut j = JitFiles::default();
        j.note_jit(me);
        j.poll();
        // Deleted at exit, as many JITs do; more written before that.
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"2000 100 late\n"))
            .unwrap();
        fs::remove_file(&path).unwrap();
        let names = j.names(me, &[0x1010, 0x2010, 0x3000]);
        assert_eq!(names.get(&0x1010).map(String::as_str), Some("early"));
        assert_eq!(names.get(&0x2010).map(String::as_str), Some("late"));
        assert_eq!(names.len(), 2);
    }
}
