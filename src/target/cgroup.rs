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
