//! Build ID → ELF file: which file on this machine a user frame's build ID
//! names, so it can be symbolized even after its process exited.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::sideband::{Mapping, MmapIndex};
use crate::stacks::BUILD_ID_SIZE;

/// A build ID, zero-padded to the size the kernel reports.
pub type BuildId = [u8; BUILD_ID_SIZE];

/// Reads a file's build ID, padded like the kernel's.
pub fn read(path: &Path) -> Option<BuildId> {
    let id = blazesym::helper::read_elf_build_id(path).ok()??;
    let mut padded = [0u8; BUILD_ID_SIZE];
    let n = id.len().min(BUILD_ID_SIZE);
    padded[..n].copy_from_slice(&id[..n]);
    Some(padded)
}

/// Finds files by build ID: first the files the side band saw mapped with
/// that ID, then every other file known to have been mapped (side band
/// records without an ID, the start-up snapshot, the live processes' maps),
/// each read once, then the system's debug directory.
pub struct FileFinder<'a> {
    index: &'a MmapIndex,
    pids: BTreeSet<u32>,
    ids: HashMap<PathBuf, Option<BuildId>>,
    table: Option<HashMap<BuildId, PathBuf>>,
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

/// Executable file mappings of a live process, from /proc/PID/maps.
pub fn executable_mappings(pid: u32) -> Vec<Mapping> {
    let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let paths: BTreeSet<&str> = maps
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .collect();
    paths
        .into_iter()
        .map(|p| Mapping {
            pid,
            path: PathBuf::from(p),
        })
        .collect()
}

impl<'a> FileFinder<'a> {
    /// A finder over the side band's records and the profiled processes.
    pub fn new(index: &'a MmapIndex, pids: BTreeSet<u32>) -> Self {
        FileFinder {
            index,
            pids,
            ids: HashMap::new(),
            table: None,
        }
    }

    fn build_id_of(&mut self, path: &Path) -> Option<BuildId> {
        *self
            .ids
            .entry(path.to_path_buf())
            .or_insert_with(|| read(path))
    }

    /// The file with build ID `id`, if any is known.
    pub fn find(&mut self, id: &BuildId) -> Option<PathBuf> {
        let direct: Vec<PathBuf> = self
            .index
            .by_build_id
            .get(id)
            .into_iter()
            .flatten()
            .flat_map(|m| candidates(m, true))
            .collect();
        for p in direct {
            if self.build_id_of(&p).as_ref() == Some(id) {
                return Some(p);
            }
        }
        if self.table.is_none() {
            self.build_table();
        }
        if let Some(p) = self.table.as_ref().and_then(|t| t.get(id)) {
            return Some(p.clone());
        }
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let debug = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
        debug.exists().then_some(debug)
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
        let mut table = HashMap::new();
        for p in paths {
            if let Some(id) = self.build_id_of(&p) {
                table.entry(id).or_insert(p);
            }
        }
        self.table = Some(table);
    }
}
