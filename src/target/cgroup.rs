//! cgroup v2 paths → ids, as BPF's `bpf_get_current_ancestor_cgroup_id`
//! reports them (the id is the cgroup directory's inode number).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on unified
/// systems, `/sys/fs/cgroup/unified` on hybrid ones).
pub fn v2_mount() -> Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mount = pre.split_whitespace().nth(4)?;
            (post.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(mount))
        })
        .ok_or_else(|| anyhow!("no cgroup v2 hierarchy is mounted"))
}

/// A cgroup named by its path below the v2 root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupId {
    /// The kernel's cgroup id.
    pub id: u64,
    /// Depth below the root (the root is level 0).
    pub level: u32,
}

/// Resolves `/a/b` (relative to the cgroup v2 root) to its id and level.
pub fn resolve(path: &str) -> Result<CgroupId> {
    let root = v2_mount()?;
    let rel = path.trim_start_matches('/');
    let full = root.join(rel);
    let meta = std::fs::metadata(&full)
        .map_err(|_| anyhow!("no such cgroup: {path} (looked in {})", full.display()))?;
    if !meta.is_dir() {
        bail!("no such cgroup: {path}");
    }
    let level = Path::new(rel).components().count() as u32;
    Ok(CgroupId {
        id: meta.ino(),
        level,
    })
}

/// The paths (below the v2 root, `/` for the root itself) of the cgroups
/// with these ids, found by walking the hierarchy; ids no longer there
/// (a cgroup removed during the profile) are left out.
pub(crate) fn paths_of(
    ids: &std::collections::HashSet<u64>,
) -> std::collections::HashMap<u64, String> {
    let mut found = std::collections::HashMap::new();
    let Ok(root) = v2_mount() else {
        return found;
    };
    // Bounded: the kernel's tree, but it can be large.
    let mut budget = 100_000usize;
    let mut todo = vec![(root.clone(), 0u32)];
    while let Some((dir, depth)) = todo.pop() {
        if found.len() == ids.len() || budget == 0 {
            break;
        }
        budget -= 1;
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if ids.contains(&meta.ino()) {
            let rel = dir.strip_prefix(&root).unwrap_or(Path::new(""));
            found.insert(meta.ino(), format!("/{}", rel.display()));
        }
        if depth >= 32 {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}
