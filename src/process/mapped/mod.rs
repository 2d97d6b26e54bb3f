//! The files processes map, as those processes see them: one record per
//! distinct file, opened while a process maps it and kept open for the
//! profile.
//!
//! Every file-backed executable mapping bprof learns of (from
//! /proc/PID/maps at start, from the side band's mmap records later) is
//! opened through the mapping itself: `/proc/PID/map_files/START-END`, a
//! link the kernel makes to exactly the mapped file, wherever it is (a
//! container's, a deleted or replaced one, a memfd). That link is a magic
//! link, which `O_NOFOLLOW` refuses, so it is followed; the file is used
//! only if `fstat` shows a regular file with the mapping's device and inode
//! (the range was not remapped meanwhile). Once the process is gone, the
//! path is tried instead (inside the process's root while it lives; else as
//! bprof sees it), and used only if it is the same device and inode and was
//! not changed after bprof learned of the mapping (a rebuilt binary is a
//! new file at the same path, perhaps with a reused inode number).
//!
//! A file mapped again (another process, the same library) is found without
//! a system call: by its key (device and inode, as the kernel's records
//! name a file without a build ID) or, for root's files, by its build ID.
//! The unwinder builds its table from the descriptor kept here; the
//! symbolizer names frames from it after their process exited. Frames of a
//! file without a build ID carry its key ([`FileKey`]), which
//! [`MappedFiles::resolve`] turns back into the file.

mod file;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

pub use crate::bpf::stacks::FileKey;
use crate::fsafe::{self, Owner};
use crate::process::buildid::BuildId;
use file::{mapped_key, open_as_mapped, MAX_FILE};
pub use file::{module_name, MappedFile};
pub(crate) use file::{FileId, Known, Learned};

/// One mapping of a process, kept to name its raw addresses
/// (`--call-graph fp` frames of files without a build ID).
#[derive(Debug, Clone)]
pub(crate) struct Mapped {
    pub start: u64,
    pub end: u64,
    pub off: u64,
    pub file: Arc<MappedFile>,
}

/// An executable mapping of a live process, from /proc/PID/maps.
#[derive(Debug, Clone)]
pub(crate) enum ProcMapping {
    /// A file: the one opened (`None`: it could not be).
    File {
        start: u64,
        end: u64,
        off: u64,
        /// Its path as /proc shows it (as bprof's root names it).
        path: PathBuf,
        file: Option<Arc<MappedFile>>,
    },
    /// Anonymous executable memory (JIT code).
    Anon { start: u64, end: u64 },
    /// The vDSO.
    Vdso { start: u64, end: u64 },
}

/// How many files and mappings were learned, and what it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FileStats {
    /// Files opened (each distinct file once).
    pub opened: u64,
    /// Mappings of a file already open: no system call.
    pub reused: u64,
    /// Mappings whose file could not be opened (the process gone, the file
    /// replaced).
    pub unreachable: u64,
    /// Files opened but not kept open: past the descriptor budget.
    pub not_kept: u64,
    /// Time spent learning mappings (finding or opening their files).
    pub time: std::time::Duration,
}

/// The files the processes of a profile map.
#[derive(Debug, Default)]
pub struct MappedFiles {
    /// Files by key: the key `fstat` gives, and the one the kernel named
    /// the mapping by where they differ (an overlayfs layer's inode).
    /// Oldest first: the same key may name a new file after an old one
    /// was deleted and its inode number reused.
    by_key: HashMap<FileKey, Vec<Arc<MappedFile>>>,
    /// Root's files by build ID: any mapping with that ID is served by one.
    by_build_id: HashMap<BuildId, Arc<MappedFile>>,
    /// Each process's file mappings, oldest first: a process's own file
    /// names its frames whoever owns it, and its raw addresses map back to
    /// its files through them.
    pids: HashMap<u32, Vec<Mapped>>,
    /// The processes in `pids`, in the order they were first seen, and
    /// the mappings all hold: past [`MAX_MAPPINGS`], the oldest processes'
    /// go (a long profile of a machine that keeps starting processes).
    order: VecDeque<u32>,
    mappings: usize,
    /// Processes that exited, oldest first: past [`MAX_EXITED`] the oldest
    /// one's mappings go. Its frames are named by build ID or by its files'
    /// keys (the files stay); only its own view of them goes.
    exited: VecDeque<u32>,
    /// Each process's vDSO, where it was mapped (latest).
    vdso: HashMap<u32, (u64, u64)>,
    /// Descriptors kept.
    kept: usize,
    /// What learning the mappings took.
    pub stats: FileStats,
}

/// Mappings remembered, at most (32 bytes each).
const MAX_MAPPINGS: usize = 1 << 18;

/// Exited processes whose mappings are kept: under churn (a build, a CI
/// runner) memory stays flat, and a process's mappings outlive it by
/// thousands of exits, many seconds.
pub(crate) const MAX_EXITED: usize = 4096;

/// The most descriptors kept open: past this, files are recorded by
/// identity and path only.
fn max_kept() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        // SAFETY: getrlimit/setrlimit fill and read a plain struct.
        let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return 256;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max.min(1 << 20),
                rlim_max: lim.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
        // Room for everything else bprof opens (perf events, maps, outputs).
        (lim.rlim_cur as usize).saturating_sub(1024).min(1 << 16)
    })
}

impl MappedFiles {
    /// Learns one mapping: finds its file among those open, or opens it.
    /// `None` when it could not be reached at all.
    pub(crate) fn learn(&mut self, m: &Learned) -> Option<Arc<MappedFile>> {
        let t0 = std::time::Instant::now();
        let file = self.find_or_open(m);
        self.stats.time += t0.elapsed();
        file
    }

    fn find_or_open(&mut self, m: &Learned) -> Option<Arc<MappedFile>> {
        let hit = match m.known {
            // Its key, which frames recorded before its table was loaded
            // carry, from the mapping's link (a stat, not an open); root's
            // file with that build ID where the process is gone.
            Known::BuildId(id) => match mapped_key(m) {
                Some(k) => self
                    .by_key
                    .get(&k)
                    .and_then(|v| v.iter().rev().find(|f| f.file().is_some()).cloned()),
                None => self.by_build_id.get(&id).cloned(),
            },
            Known::Key(k) => self
                .by_key
                .get(&k)
                .and_then(|v| v.iter().rev().find(|f| f.file().is_some()).cloned()),
        };
        let file = match hit {
            Some(f) => {
                self.stats.reused += 1;
                f
            }
            None => self.open(m)?,
        };
        if let Known::BuildId(id) = m.known {
            if file.build_id().is_none() {
                self.note_build_id(&file, Some(id));
            }
        }
        self.remember(m, &file);
        Some(file)
    }

    /// Adds mapping `m` of `file` to its process's, forgetting the oldest
    /// processes' past [`MAX_MAPPINGS`].
    fn remember(&mut self, m: &Learned, file: &Arc<MappedFile>) {
        let mapped = Mapped {
            start: m.start,
            end: m.end,
            off: m.off,
            file: file.clone(),
        };
        match self.pids.entry(m.pid) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(mapped),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(vec![mapped]);
                self.order.push_back(m.pid);
            }
        }
        self.mappings += 1;
        while self.mappings > MAX_MAPPINGS && self.order.len() > 1 {
            // Exited processes first: a live one's mappings name what it
            // runs now.
            let old = match self.exited.pop_front() {
                Some(p) => p,
                None => match self.order.pop_front() {
                    Some(p) => p,
                    None => break,
                },
            };
            self.drop_process(old);
        }
    }

    /// Records that process `pid` exited: the oldest exited process's
    /// mappings go past [`MAX_EXITED`].
    pub(crate) fn note_exit(&mut self, pid: u32) {
        if !self.pids.contains_key(&pid) && !self.vdso.contains_key(&pid) {
            return;
        }
        self.exited.push_back(pid);
        if self.exited.len() > MAX_EXITED {
            if let Some(old) = self.exited.pop_front() {
                self.drop_process(old);
            }
        }
    }

    /// Forgets one process's mappings; `order` drops it lazily, and is
    /// compacted once it holds twice the processes there are.
    fn drop_process(&mut self, pid: u32) {
        if let Some(v) = self.pids.remove(&pid) {
            self.mappings -= v.len();
        }
        self.vdso.remove(&pid);
        if self.order.len() > 2 * self.pids.len() + 1024 {
            let pids = &self.pids;
            self.order.retain(|p| pids.contains_key(p));
        }
    }

    /// Opens the file of mapping `m` and records it (once per distinct
    /// file); a file that could not be opened is recorded by the record's
    /// key, for naming by path later.
    fn open(&mut self, m: &Learned) -> Option<Arc<MappedFile>> {
        let want = match m.known {
            Known::Key(k) => Some(k),
            _ => None,
        };
        let learned = SystemTime::now();
        let checked = open_as_mapped(m, want, learned);
        let (file, meta) = match checked {
            Ok(f) => match f.metadata() {
                Ok(meta) => (f, meta),
                Err(_) => return None,
            },
            Err(why) => {
                self.stats.unreachable += 1;
                let key = want.filter(|k| k.ino != 0)?;
                let f = Arc::new(MappedFile::unreachable(
                    key, m.path, m.in_root, learned, why,
                ));
                self.by_key.entry(key).or_default().push(f.clone());
                return Some(f);
            }
        };
        let key = FileKey::of(&meta);
        let id = FileId::of(&meta);
        // Another mapping's way to a file already open.
        let open = self
            .by_key
            .get(&key)
            .and_then(|v| v.iter().rev().find(|f| f.id == Some(id)).cloned());
        let f = match open {
            Some(f) => {
                self.stats.reused += 1;
                f
            }
            None => {
                self.stats.opened += 1;
                let keep = self.kept < max_kept();
                if keep {
                    self.kept += 1;
                } else {
                    self.stats.not_kept += 1;
                }
                let f = Arc::new(MappedFile::opened(
                    m.path, m.in_root, file, &meta, keep, learned,
                ));
                self.by_key.entry(key).or_default().push(f.clone());
                f
            }
        };
        if let Some(k) = want.filter(|&k| k != key) {
            let v = self.by_key.entry(k).or_default();
            if !v.iter().any(|x| Arc::ptr_eq(x, &f)) {
                v.push(f.clone());
            }
        }
        if let Known::BuildId(id) = m.known {
            self.note_build_id(&f, Some(id));
        }
        Some(f)
    }

    /// The build ID of `file`, read from it once (its headers and notes)
    /// if nobody noted it yet; `None` without one or when it is not open.
    pub(crate) fn build_id_of(&mut self, file: &Arc<MappedFile>) -> Option<BuildId> {
        if let Some(id) = file.noted_build_id() {
            return id;
        }
        let id = crate::process::buildid::of_file(file.file()?);
        self.note_build_id(file, id);
        id
    }

    /// Records `file`'s build ID (read by a record or from the file): a
    /// root-owned file then serves every later mapping with that ID.
    pub(crate) fn note_build_id(&mut self, file: &Arc<MappedFile>, id: Option<BuildId>) {
        file.set_build_id(id);
        if let (Some(id), Some(0)) = (file.build_id(), file.uid) {
            if file.file().is_some() {
                self.by_build_id.entry(id).or_insert_with(|| file.clone());
            }
        }
    }

    /// Records where process `pid` mapped its vDSO (named from bprof's
    /// own image: no file is behind it).
    pub(crate) fn note_vdso(&mut self, pid: u32, start: u64, end: u64) {
        self.vdso.insert(pid, (start, end));
    }

    /// Where process `pid` mapped its vDSO, last seen.
    pub fn vdso_of(&self, pid: u32) -> Option<(u64, u64)> {
        self.vdso.get(&pid).copied()
    }

    /// Records that the kernel names `file` `key` too (an overlayfs
    /// layer's inode, as the BPF side learned it for one of its mappings).
    pub(crate) fn alias(&mut self, key: FileKey, file: &Arc<MappedFile>) {
        let v = self.by_key.entry(key).or_default();
        if !v.iter().any(|x| Arc::ptr_eq(x, file)) {
            v.push(file.clone());
        }
    }

    /// Opens `path` as bprof sees it (a file a command is about to map,
    /// found as exec would), and records it.
    pub(crate) fn learn_path(&mut self, path: &Path) -> Option<Arc<MappedFile>> {
        let c = fsafe::open_untrusted(path, Owner::Any, MAX_FILE).ok()?;
        let meta = c.file.metadata().ok()?;
        let (key, id) = (FileKey::of(&meta), FileId::of(&meta));
        if let Some(f) = self
            .by_key
            .get(&key)
            .and_then(|v| v.iter().rev().find(|f| f.id == Some(id)))
        {
            return Some(f.clone());
        }
        self.stats.opened += 1;
        let keep = self.kept < max_kept();
        self.kept += usize::from(keep);
        let f = Arc::new(MappedFile::opened(
            path,
            false,
            c.file,
            &meta,
            keep,
            SystemTime::now(),
        ));
        self.by_key.entry(key).or_default().push(f.clone());
        Some(f)
    }

    /// The executable mappings of live process `pid` (one read of its
    /// /proc/PID/maps), each file learned.
    pub(crate) fn add_process(&mut self, pid: u32) -> Vec<ProcMapping> {
        let mut out = Vec::new();
        for m in crate::process::maps::mappings(pid) {
            let (start, end) = (m.start, m.end);
            if m.path == "[vdso]" {
                self.note_vdso(pid, start, end);
                out.push(ProcMapping::Vdso { start, end });
                continue;
            }
            if m.path.is_empty() || m.path.starts_with("[anon") {
                out.push(ProcMapping::Anon { start, end });
                continue;
            }
            // A memfd shows as "/memfd:NAME (deleted)": a file all the same.
            if !m.path.starts_with('/') || m.ino == 0 {
                continue;
            }
            let maps_key = FileKey {
                dev: crate::bpf::stacks::kernel_dev(m.dev),
                ino: m.ino,
            };
            let file = self.learn(&Learned {
                pid,
                start,
                end,
                off: m.off,
                path: Path::new(&m.path),
                in_root: false,
                known: Known::Key(maps_key),
            });
            out.push(ProcMapping::File {
                start,
                end,
                off: m.off,
                path: PathBuf::from(m.path),
                file,
            });
        }
        out
    }

    /// The file the frames of process `pid` with key `key` lie in: the one
    /// `pid` mapped under that key (its latest), else the latest recorded
    /// with a descriptor, else the latest.
    pub fn resolve(&self, key: FileKey, pid: u32) -> Option<Arc<MappedFile>> {
        let all = self.by_key.get(&key)?;
        if let Some(own) = self.pids.get(&pid).and_then(|ms| {
            ms.iter()
                .rev()
                .find(|m| all.iter().any(|f| Arc::ptr_eq(f, &m.file)))
        }) {
            return Some(own.file.clone());
        }
        all.iter()
            .rev()
            .find(|f| f.file().is_some())
            .or_else(|| all.last())
            .cloned()
    }

    /// The file and file offset at address `ip` of process `pid`: its
    /// latest mapping there that bprof recorded.
    pub fn at(&self, pid: u32, ip: u64) -> Option<(Arc<MappedFile>, u64)> {
        let m = self
            .pids
            .get(&pid)?
            .iter()
            .rev()
            .find(|m| ip >= m.start && ip < m.end)?;
        Some((m.file.clone(), ip - m.start + m.off))
    }

    /// The files with build ID `id` bprof keeps open: the ones `pid`
    /// mapped first (newest first), then root's.
    pub fn with_build_id(&self, id: &BuildId, pid: u32) -> Vec<(Arc<MappedFile>, bool)> {
        let mut out: Vec<(Arc<MappedFile>, bool)> = Vec::new();
        for m in self.pids.get(&pid).into_iter().flatten().rev() {
            let f = &m.file;
            if f.build_id() == Some(*id)
                && f.file().is_some()
                && !out.iter().any(|(x, _)| Arc::ptr_eq(x, f))
            {
                out.push((f.clone(), true));
            }
        }
        if let Some(f) = self.by_build_id.get(id) {
            if !out.iter().any(|(x, _)| Arc::ptr_eq(x, f)) {
                out.push((f.clone(), false));
            }
        }
        out
    }

    /// Forgets the mappings of processes `gone` (a long session's exited
    /// processes), and closes the files no process's mapping holds any more.
    pub fn forget(&mut self, gone: &std::collections::HashSet<u32>) {
        self.pids.retain(|p, _| !gone.contains(p));
        self.order.retain(|p| !gone.contains(p));
        self.exited.retain(|p| !gone.contains(p));
        self.mappings = self.pids.values().map(Vec::len).sum();
        self.vdso.retain(|p, _| !gone.contains(p));
        // Held only by the indexes here: no mapping of a known process.
        let mut refs: HashMap<*const MappedFile, usize> = HashMap::new();
        for f in self.by_key.values().flatten() {
            *refs.entry(Arc::as_ptr(f)).or_default() += 1;
        }
        for f in self.by_build_id.values() {
            *refs.entry(Arc::as_ptr(f)).or_default() += 1;
        }
        let unused = |f: &Arc<MappedFile>| Arc::strong_count(f) <= refs[&Arc::as_ptr(f)];
        let mut drop_keys: std::collections::HashSet<*const MappedFile> = Default::default();
        let mut closed = 0;
        for f in self.by_key.values().flatten().filter(|f| unused(f)) {
            if drop_keys.insert(Arc::as_ptr(f)) {
                closed += usize::from(f.file().is_some());
            }
        }
        if drop_keys.is_empty() {
            return;
        }
        self.by_build_id
            .retain(|_, f| !drop_keys.contains(&Arc::as_ptr(f)));
        for v in self.by_key.values_mut() {
            v.retain(|f| !drop_keys.contains(&Arc::as_ptr(f)));
        }
        self.by_key.retain(|_, v| !v.is_empty());
        self.kept = self.kept.saturating_sub(closed);
    }

    /// The processes whose mappings are recorded.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.pids.keys().copied()
    }

    /// Files recorded.
    pub fn len(&self) -> usize {
        let mut seen: Vec<*const MappedFile> =
            self.by_key.values().flatten().map(Arc::as_ptr).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Whether no file was recorded.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Descriptors kept open.
    pub fn kept(&self) -> usize {
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bprof-mapped-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// One page of `path` mapped at 0x1000 by `pid`, as /proc names it.
    fn page(pid: u32, path: &Path, key: FileKey) -> Learned<'_> {
        Learned {
            pid,
            start: 0x1000,
            end: 0x2000,
            off: 0,
            path,
            in_root: false,
            known: Known::Key(key),
        }
    }

    /// bprof's own executable mappings are opened through map_files (a
    /// magic link, followed), each distinct file once; their raw
    /// addresses map back to file offsets.
    #[test]
    fn own_mappings_are_opened_once_each_through_map_files() {
        let mut files = MappedFiles::default();
        let me = std::process::id();
        let maps = files.add_process(me);
        let exe = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        let ours: Vec<&Arc<MappedFile>> = maps
            .iter()
            .filter_map(|m| match m {
                ProcMapping::File { file, .. } => file.as_ref(),
                _ => None,
            })
            .filter(|f| f.key == FileKey::of(&exe))
            .collect();
        assert!(!ours.is_empty(), "{maps:?}");
        assert!(ours.iter().all(|f| Arc::ptr_eq(f, ours[0])));
        assert!(ours[0].file().is_some() && ours[0].why.is_none());
        assert_eq!(files.stats.unreachable, 0);
        // This function's own address lies in the executable.
        let ip = own_mappings_are_opened_once_each_through_map_files as *const () as usize as u64;
        let (f, off) = files.at(me, ip).unwrap();
        assert!(Arc::ptr_eq(&f, ours[0]));
        assert!(off < exe.len());
        assert!(Arc::ptr_eq(
            &files.resolve(FileKey::of(&exe), 1).unwrap(),
            ours[0]
        ));
        // A second look opens nothing.
        let opened = files.stats.opened;
        files.add_process(me);
        assert_eq!(files.stats.opened, opened);
    }

    /// A file that cannot be reached through a mapping is found by path
    /// only while it is the same file: same inode, not changed since.
    #[test]
    fn a_path_names_the_mapped_file_only_while_it_is_the_same_file() {
        let d = scratch("path");
        let p = d.join("prog");
        std::fs::write(&p, b"one").unwrap();
        let key = FileKey::of(&std::fs::metadata(&p).unwrap());
        let mut files = MappedFiles::default();
        // No such mapping in this process: map_files fails, the path serves.
        let m = page(std::process::id(), &p, key);
        let f = files.learn(&m).unwrap();
        assert!(f.file().is_some(), "{:?}", f.why);
        // Replaced: a new file at the path is not it.
        let q = d.join("new");
        std::fs::write(&q, b"two").unwrap();
        std::fs::rename(&q, &p).unwrap();
        let mut other = MappedFiles::default();
        let g = other.learn(&m).unwrap();
        assert!(g.file().is_none());
        assert_eq!(g.why.as_deref(), Some("changed since it was mapped"));
        assert!(!g.same_as(&std::fs::metadata(&p).unwrap()));
        // Gone.
        std::fs::remove_file(&p).unwrap();
        let h = MappedFiles::default().learn(&m).unwrap();
        assert_eq!(h.why.as_deref(), Some("gone"));
        // A build ID instead of a key: only a file with that ID.
        std::fs::write(&p, b"not elf").unwrap();
        let by_id = Learned {
            known: Known::BuildId([7; 20]),
            ..m
        };
        assert!(MappedFiles::default().learn(&by_id).is_none());
        let exe = std::env::current_exe().unwrap();
        let id = crate::process::buildid::of_file(&File::open(&exe).unwrap()).unwrap();
        let own = Learned {
            path: &exe,
            known: Known::BuildId(id),
            ..m
        };
        let mut files = MappedFiles::default();
        let f = files.learn(&own).unwrap();
        assert!(f.file().is_some() && f.build_id() == Some(id));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A long session forgets exited processes' mappings and closes the
    /// files no mapping holds any more.
    #[test]
    fn forgotten_processes_files_are_closed() {
        let d = scratch("forget");
        let p = d.join("lib");
        std::fs::write(&p, b"x").unwrap();
        let key = FileKey::of(&std::fs::metadata(&p).unwrap());
        let mut files = MappedFiles::default();
        for pid in [4_000_001, 4_000_002] {
            files.learn(&page(pid, &p, key)).unwrap();
        }
        assert_eq!((files.len(), files.kept(), files.stats.opened), (1, 1, 1));
        files.forget(&[4_000_001].into_iter().collect());
        assert_eq!((files.len(), files.kept()), (1, 1));
        assert!(files.resolve(key, 4_000_002).is_some());
        files.forget(&[4_000_002].into_iter().collect());
        assert_eq!((files.len(), files.kept()), (0, 0));
        assert!(files.resolve(key, 4_000_002).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Under churn an exited process's mappings go once MAX_EXITED others
    /// exited after it; a live process's stay, and the file stays known
    /// by its key.
    #[test]
    fn exited_processes_mappings_go_past_the_exited_limit() {
        let d = scratch("exited");
        let p = d.join("prog");
        std::fs::write(&p, b"x").unwrap();
        let key = FileKey::of(&std::fs::metadata(&p).unwrap());
        let mut files = MappedFiles::default();
        let learn = |files: &mut MappedFiles, pid: u32| {
            files.learn(&page(pid, &p, key));
        };
        let (live, first) = (4_100_000, 4_100_001);
        learn(&mut files, live);
        for pid in first..=first + MAX_EXITED as u32 {
            learn(&mut files, pid);
            files.note_exit(pid);
        }
        assert!(files.at(first, 0x1800).is_none());
        assert!(files.at(first + 1, 0x1800).is_some());
        assert!(files.at(live, 0x1800).is_some());
        assert_eq!(files.pids.len(), MAX_EXITED + 1);
        assert!(files.resolve(key, first).is_some());
        // An exit of a process never seen mapping anything is not queued.
        files.note_exit(4_200_000);
        assert_eq!(files.exited.len(), MAX_EXITED);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn module_names_drop_the_deleted_mark() {
        assert_eq!(module_name(Path::new("/tmp/a/prog (deleted)")), "prog");
        assert_eq!(module_name(Path::new("/memfd:x (deleted)")), "memfd:x");
        assert_eq!(module_name(Path::new("/usr/lib/libc.so.6")), "libc.so.6");
    }
}
