//! `/proc/PID/maps`: the executable mappings of a live process, and the
//! way the file writes an address range and a device.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

/// A file some process mapped, as that process named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// The process that mapped it (its mount namespace gives the path meaning).
    pub pid: u32,
    /// Path as seen inside that process.
    pub path: PathBuf,
}

/// Executable file mappings of a live process, from /proc/PID/maps.
pub(crate) fn executable_mappings(pid: u32) -> Vec<Mapping> {
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

/// "7f00-7f10" (hex) → (start, end), as /proc/PID/maps writes a range.
pub(crate) fn parse_range(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

/// "fe:01" → the kernel's dev_t.
pub(crate) fn parse_dev(s: &str) -> Option<u64> {
    let (ma, mi) = s.split_once(':')?;
    let (ma, mi) = (
        u64::from_str_radix(ma, 16).ok()?,
        u64::from_str_radix(mi, 16).ok()?,
    );
    Some((ma << 20) | mi)
}
