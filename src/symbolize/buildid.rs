//! Build ID → ELF file: which file on this machine a user frame's build ID
//! names, so it can be symbolized even after its process exited.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::collect::sideband::MmapIndex;
use crate::process::buildid::BuildId;
use crate::process::mapped::MappedFile;
use crate::process::maps::executable_mappings;
use crate::symbolize::files::ElfFile;

/// Reads a file's build ID, padded like the kernel's.
pub fn read(path: &Path) -> Option<BuildId> {
    // Hostile input: opened once and checked before blazesym parses it.
    match ElfFile::open(path) {
        Ok(f) => f.build_id(),
        Err(why) => {
            // Not every mapped file is ELF; only a malformed ELF is news.
            crate::symbolize::note_refused(path, &why);
            None
        }
    }
}

/// Finds files by build ID: first the files the side band saw mapped with
/// that ID, then every other file known to have been mapped (side band
/// records without an ID, the start-up snapshot, the live processes' maps),
/// each read once, then the system's debug directory.
pub(crate) struct FileFinder<'a> {
    index: &'a MmapIndex,
    pids: BTreeSet<u32>,
    ids: HashMap<PathBuf, Option<BuildId>>,
    table: Option<HashMap<BuildId, Vec<PathBuf>>>,
    found: HashMap<(BuildId, u32), Option<Rc<ElfFile>>>,
    /// The files kept open for mappings, opened and checked once each: a
    /// file thousands of processes mapped is parsed once, not per process.
    kept: HashMap<usize, (Arc<MappedFile>, Option<Rc<ElfFile>>)>,
    /// Per build ID, every candidate path of the side band's mappings with
    /// its owner, gathered once: under process churn thousands of processes
    /// map the same file.
    by_id: HashMap<BuildId, Rc<IdPaths>>,
    /// The processes alive when the first search began: only theirs have a
    /// `/proc/PID/root` to look through.
    live: Option<Rc<HashSet<u32>>>,
    /// The files at candidate paths, opened once each (their build ID and
    /// owner read on that descriptor).
    opened: HashMap<PathBuf, Option<Rc<ElfFile>>>,
}

/// The side band's knowledge of one build ID (see [`FileFinder::by_id`]).
struct IdPaths {
    /// Each candidate path of every mapping, with its owner (u32::MAX:
    /// gone), root's first.
    owned: Vec<(u32, PathBuf)>,
}

/// A candidate path with its owner, stat'ed once (u32::MAX: gone); the
/// owner that counts is checked again on the descriptor opened.
fn owned(p: PathBuf) -> (u32, PathBuf) {
    (fs::metadata(&p).map_or(u32::MAX, |m| m.uid()), p)
}

/// The real user id of live process `pid`.
fn uid_of(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Paths under which bprof may open `path`, which the processes `pids`
/// mapped: as named, and through each live one's root (`/proc/PID/root/...`),
/// which reaches files of other mount namespaces (containers). `all` also
/// keeps the root paths when the plain one exists, for when the expected
/// build ID is known. An exited process has no root to look through.
fn candidates(
    path: &Path,
    pids: impl IntoIterator<Item = u32>,
    live: &HashSet<u32>,
    all: bool,
) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(2);
    let plain_exists = path.exists();
    if plain_exists {
        out.push(path.to_path_buf());
    }
    let rel = path.strip_prefix("/").unwrap_or(path);
    let mut ours = None;
    for pid in pids.into_iter().filter(|p| live.contains(p)) {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let ours = ours.get_or_insert_with(|| fs::metadata("/").ok());
        let other_root = match (fs::metadata(&root), ours) {
            (Ok(a), Some(b)) => a.dev() != b.dev() || a.ino() != b.ino(),
            _ => false,
        };
        if root.exists() && (all || !plain_exists || other_root) {
            out.push(root.join(rel));
        }
    }
    out
}

impl<'a> FileFinder<'a> {
    /// A finder over the side band's records and the profiled processes.
    pub fn new(index: &'a MmapIndex, pids: BTreeSet<u32>) -> Self {
        FileFinder {
            index,
            pids,
            ids: HashMap::new(),
            table: None,
            found: HashMap::new(),
            kept: HashMap::new(),
            by_id: HashMap::new(),
            live: None,
            opened: HashMap::new(),
        }
    }

    fn build_id_of(&mut self, path: &Path) -> Option<BuildId> {
        *self
            .ids
            .entry(path.to_path_buf())
            .or_insert_with(|| read(path))
    }

    /// The file to name the frames of process `tgid` in the file with build
    /// ID `id`: one that process itself mapped, or failing that one owned by
    /// root or by that process's user, never another user's file (a copy
    /// with the same build ID and renamed functions would lie). Returned
    /// open: its build ID and owner were checked on that descriptor, which
    /// is what blazesym then reads.
    pub fn find(&mut self, id: &BuildId, tgid: u32) -> Option<Rc<ElfFile>> {
        if let Some(p) = self.found.get(&(*id, tgid)) {
            return p.clone();
        }
        let p = self.search(id, tgid);
        self.found.insert((*id, tgid), p.clone());
        p
    }

    /// The candidate paths of the side band's mappings of build ID `id`,
    /// with their owners, root's first.
    fn id_paths(&mut self, id: &BuildId) -> Rc<IdPaths> {
        if let Some(ix) = self.by_id.get(id) {
            return ix.clone();
        }
        let live = self.live();
        let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
        for (path, pids) in self
            .index
            .by_build_id
            .get(id)
            .into_iter()
            .flat_map(|m| m.paths())
        {
            paths.extend(candidates(path, pids.iter().copied(), &live, true));
        }
        let mut owned: Vec<(u32, PathBuf)> = paths.into_iter().map(owned).collect();
        owned.sort_by_key(|&(o, _)| o);
        let ix = Rc::new(IdPaths { owned });
        self.by_id.insert(*id, ix.clone());
        ix
    }

    /// The processes alive now, read once.
    fn live(&mut self) -> Rc<HashSet<u32>> {
        self.live
            .get_or_insert_with(|| Rc::new(crate::target::running_pids().into_iter().collect()))
            .clone()
    }

    /// The file at `p` if it has build ID `id` and, unless the process
    /// mapped it itself (`own`), is root's or `uid`'s; opened once however
    /// many processes mapped it.
    fn accept(
        &mut self,
        p: &Path,
        id: &BuildId,
        own: bool,
        uid: Option<u32>,
    ) -> Option<Rc<ElfFile>> {
        let f = match self.opened.get(p) {
            Some(f) => f.clone(),
            None => {
                let f = ElfFile::open(p).ok().map(Rc::new);
                self.opened.insert(p.to_path_buf(), f.clone());
                f
            }
        }?;
        let owner_ok = own || f.uid == 0 || Some(f.uid) == uid;
        (owner_ok && f.build_id().as_ref() == Some(id)).then_some(f)
    }

    fn search(&mut self, id: &BuildId, tgid: u32) -> Option<Rc<ElfFile>> {
        // The file the process itself mapped, kept open since its mapping
        // was learned (a container's, a deleted one), else root's copy.
        for (f, own) in self.index.files.with_build_id(id, tgid) {
            let at = Arc::as_ptr(&f) as usize;
            let e = match self.kept.get(&at) {
                Some((_, e)) => e.clone(),
                None => {
                    let e = f
                        .reopen()
                        .and_then(|fd| ElfFile::from_checked(f.path.clone(), fd).ok())
                        .map(Rc::new);
                    self.kept.insert(at, (f.clone(), e.clone()));
                    e
                }
            };
            let Some(e) = e else { continue };
            let owner_ok = own || e.uid == 0 || Some(e.uid) == uid_of(tgid);
            if owner_ok && e.build_id().as_ref() == Some(id) {
                return Some(e);
            }
        }
        let ix = self.id_paths(id);
        // The process's own files first, with or without an ID from the side
        // band (a process running before the profile is known from /proc).
        let index = self.index;
        let live = self.live();
        let mine = index
            .by_build_id
            .get(id)
            .into_iter()
            .flat_map(|m| m.of_pid(tgid));
        let own: Vec<PathBuf> = mine
            .chain(index.without_build_id.of_pid(tgid))
            .flat_map(|p| candidates(p, [tgid], &live, true))
            .collect();
        for p in own {
            if self.build_id_of(&p).as_ref() == Some(id) {
                if let Some(f) = self.accept(&p, id, true, None) {
                    return Some(f);
                }
            }
        }
        let uid = uid_of(tgid);
        // Root's files first, so a user's copy never wins when root has one.
        let mut paths: Vec<(u32, PathBuf)> = ix.owned.clone();
        // A root-owned file the kernel saw mapped with this ID is as good as
        // any: no need to read the build ID of every other known file.
        let roots: Vec<PathBuf> = paths
            .iter()
            .take_while(|&&(o, _)| o == 0)
            .map(|(_, p)| p.clone())
            .collect();
        for p in roots {
            if self.build_id_of(&p).as_ref() == Some(id) {
                if let Some(f) = self.accept(&p, id, false, uid) {
                    return Some(f);
                }
            }
        }
        if self.table.is_none() {
            self.build_table();
        }
        let known: Vec<PathBuf> = self
            .table
            .as_ref()
            .and_then(|t| t.get(id))
            .cloned()
            .unwrap_or_default();
        paths.extend(known.into_iter().map(owned));
        paths.sort_by_key(|&(o, _)| o);
        for (o, p) in paths {
            if (o == 0 || Some(o) == uid) && self.build_id_of(&p).as_ref() == Some(id) {
                if let Some(f) = self.accept(&p, id, false, uid) {
                    return Some(f);
                }
            }
        }
        None
    }

    /// Reads the build ID of every other known file once.
    fn build_table(&mut self) {
        let live = self.live();
        let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
        for (path, pids) in self.index.without_build_id.paths() {
            paths.extend(candidates(path, pids.iter().copied(), &live, false));
        }
        let targets: Vec<u32> = self
            .pids
            .iter()
            .copied()
            .chain([std::process::id()])
            .collect();
        for m in targets.into_iter().flat_map(executable_mappings) {
            paths.extend(candidates(&m.path, [m.pid], &live, false));
        }
        let mut table: HashMap<BuildId, Vec<PathBuf>> = HashMap::new();
        for p in paths {
            if let Some(id) = self.build_id_of(&p) {
                table.entry(id).or_default().push(p);
            }
        }
        self.table = Some(table);
    }
}
