//! Build ID → ELF file: which file on this machine a user frame's build ID
//! names, so it can be symbolized even after its process exited.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::collect::sideband::MmapIndex;
use crate::process::buildid::BuildId;
use crate::process::mapped::MappedFile;
use crate::process::maps::{executable_mappings, Mapping};
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
    /// Per build ID, the side band's mappings by process and every other
    /// candidate path with its owner, gathered once: under process churn
    /// thousands of processes map the same file.
    by_id: HashMap<BuildId, Rc<IdPaths<'a>>>,
    /// The side band's mappings without a build ID, by process.
    unknown_by_pid: Option<HashMap<u32, Vec<&'a Mapping>>>,
}

/// The side band's knowledge of one build ID (see [`FileFinder::by_id`]).
struct IdPaths<'a> {
    by_pid: HashMap<u32, Vec<&'a Mapping>>,
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

/// Paths under which bprof may open `m.path`: as named, and through the
/// process's root (`/proc/PID/root/...`) while it lives, which reaches files
/// of other mount namespaces (containers). `all` also keeps the root path
/// when the plain one exists, for when the expected build ID is known.
fn candidates(m: &Mapping, all: bool) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(2);
    let plain_exists = m.path.exists();
    if plain_exists {
        out.push(m.path.clone());
    }
    let root = PathBuf::from(format!("/proc/{}/root", m.pid));
    let other_root = match (fs::metadata(&root), fs::metadata("/")) {
        (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() != b.ino(),
        _ => false,
    };
    if root.exists() && (all || !plain_exists || other_root) {
        out.push(root.join(m.path.strip_prefix("/").unwrap_or(&m.path)));
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
            unknown_by_pid: None,
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

    /// The side band's mappings of build ID `id` by process, and the
    /// candidate paths of all of them with their owners, root's first.
    fn id_paths(&mut self, id: &BuildId) -> Rc<IdPaths<'a>> {
        if let Some(ix) = self.by_id.get(id) {
            return ix.clone();
        }
        let mut by_pid: HashMap<u32, Vec<&'a Mapping>> = HashMap::new();
        let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
        let index = self.index;
        for m in index.by_build_id.get(id).into_iter().flatten() {
            by_pid.entry(m.pid).or_default().push(m);
            paths.extend(candidates(m, true));
        }
        let mut owned: Vec<(u32, PathBuf)> = paths.into_iter().map(owned).collect();
        owned.sort_by_key(|&(o, _)| o);
        let ix = Rc::new(IdPaths { by_pid, owned });
        self.by_id.insert(*id, ix.clone());
        ix
    }

    /// Opens `p` and keeps it if it has build ID `id` and, unless the
    /// process mapped it itself (`own`), is root's or `uid`'s.
    fn accept(p: &Path, id: &BuildId, own: bool, uid: Option<u32>) -> Option<Rc<ElfFile>> {
        let f = ElfFile::open(p).ok()?;
        let owner_ok = own || f.uid == 0 || Some(f.uid) == uid;
        (owner_ok && f.build_id().as_ref() == Some(id)).then(|| Rc::new(f))
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
        let unknown = self
            .unknown_by_pid
            .get_or_insert_with(|| {
                let mut by: HashMap<u32, Vec<&Mapping>> = HashMap::new();
                for m in &index.without_build_id {
                    by.entry(m.pid).or_default().push(m);
                }
                by
            })
            .get(&tgid)
            .cloned()
            .unwrap_or_default();
        let own: Vec<PathBuf> = ix
            .by_pid
            .get(&tgid)
            .into_iter()
            .flatten()
            .copied()
            .chain(unknown)
            .flat_map(|m| candidates(m, true))
            .collect();
        for p in own {
            if self.build_id_of(&p).as_ref() == Some(id) {
                if let Some(f) = Self::accept(&p, id, true, None) {
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
                if let Some(f) = Self::accept(&p, id, false, uid) {
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
                if let Some(f) = Self::accept(&p, id, false, uid) {
                    return Some(f);
                }
            }
        }
        None
    }

    /// Reads the build ID of every other known file once.
    fn build_table(&mut self) {
        let mut mappings: Vec<Mapping> = self.index.without_build_id.iter().cloned().collect();
        let live: Vec<u32> = self
            .pids
            .iter()
            .copied()
            .chain([std::process::id()])
            .collect();
        for pid in live {
            mappings.extend(executable_mappings(pid));
        }
        let paths: BTreeSet<PathBuf> = mappings.iter().flat_map(|m| candidates(m, false)).collect();
        let mut table: HashMap<BuildId, Vec<PathBuf>> = HashMap::new();
        for p in paths {
            if let Some(id) = self.build_id_of(&p) {
                table.entry(id).or_default().push(p);
            }
        }
        self.table = Some(table);
    }
}
