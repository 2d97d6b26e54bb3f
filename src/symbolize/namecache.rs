//! Function names learned from a debug file, kept per boot.
//!
//! blazesym reads a debug file's DWARF whole before it names one address,
//! and distributions compress it: inflating libc6-dbg's took ~25 ms here,
//! most of a short profile's symbolization. The functions it names (start,
//! size, name) are kept in root's state directory, one file per build ID,
//! valid for that debug file's identity (device, inode, size, times): the
//! next profile names an address inside one of them without opening the
//! debug file. Names only; pprof's source lines and inlined functions still
//! come from the DWARF.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::bpf::shared_counters::STATE_DIR;
use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::symbolize::elfcheck::FileId;

/// The first line: the format and the debug file's identity.
const HEADER: &str = "bprof-names 1";
/// The second line: whether the DWARF's functions were learned whole.
const ALL: &str = "all";
const SOME: &str = "some";
/// Functions kept per file, at most (a few MB).
const MAX_FUNCTIONS: usize = 65_536;
/// A cache file read is bounded like any other input.
const MAX_BYTES: u64 = 16 << 20;

/// The functions known for one debug file, sorted by start.
pub(crate) struct NameCache {
    dir: PathBuf,
    /// `dir`, checked by private_dir when the cache was opened.
    dir_fd: File,
    name: String,
    header: String,
    funcs: Vec<(u64, u64, String)>,
    /// The DWARF's functions were learned whole (see [`NameCache::learn_all`]).
    all: bool,
    changed: bool,
}

impl NameCache {
    /// The cache of the debug file `debug` of build ID `id`, empty when
    /// there is none yet (or it was for another file with that build ID).
    /// `None` when root's state directory is not usable.
    pub(crate) fn open(id: &[u8; BUILD_ID_SIZE], debug: &FileId) -> Option<NameCache> {
        Self::open_in(Path::new(STATE_DIR), id, debug)
    }

    fn open_in(dir: &Path, id: &[u8; BUILD_ID_SIZE], debug: &FileId) -> Option<NameCache> {
        let header = format!("{HEADER} {debug:?}");
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let mut cache = NameCache {
            dir: dir.to_path_buf(),
            dir_fd: crate::fsafe::private_dir(dir).ok()?,
            name: format!("names-{hex}"),
            header,
            funcs: Vec::new(),
            all: false,
            changed: false,
        };
        if let Ok(mut f) = crate::fsafe::private_file(&cache.dir_fd, &cache.name) {
            let mut text = String::new();
            if f.metadata().is_ok_and(|m| m.len() <= MAX_BYTES)
                && f.read_to_string(&mut text).is_ok()
            {
                (cache.funcs, cache.all) = parse(&text, &cache.header);
            }
        }
        Some(cache)
    }

    /// The name of the function holding `addr`, if known.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|f| f.0 <= addr);
        let (start, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        (addr - start < *size).then_some(name.as_str())
    }

    /// What blazesym said of `addr`: the function `name` at `start`, `size`
    /// bytes. Kept when it overlaps nothing known; as `addr` alone when the
    /// function's range does not hold it (DWARF gives a split function's
    /// main range: `addr` is in its cold part). DWARF of discarded sections
    /// places functions at 0: never kept.
    pub(crate) fn learn(&mut self, addr: u64, start: u64, size: Option<usize>, name: &str) {
        let Some(size) = size.map(|s| s as u64).filter(|&s| s > 0) else {
            return;
        };
        let (start, size) = if addr < start || addr - start >= size {
            (addr, 1)
        } else {
            (start, size)
        };
        if !keepable(start, size, name) || self.funcs.len() >= MAX_FUNCTIONS {
            return;
        }
        let i = self.funcs.partition_point(|f| f.0 < start);
        let overlaps_before = i > 0 && {
            let (s, z, _) = &self.funcs[i - 1];
            s + z > start
        };
        let overlaps_after = self.funcs.get(i).is_some_and(|(s, _, _)| *s < start + size);
        if overlaps_before || overlaps_after {
            return;
        }
        self.funcs.insert(i, (start, size, name.to_string()));
        self.changed = true;
    }

    /// Whether learning all the DWARF's functions at once is worth a second
    /// read of it: not yet learned, and a profile before this one already
    /// had to read it (a file seen once per boot costs one read, as it
    /// did without the cache).
    pub(crate) fn wants_all(&self) -> bool {
        !self.all && !self.funcs.is_empty()
    }

    /// Every function the debug file's DWARF describes (start, size, name),
    /// learned at once when it had to be read anyway: later profiles then
    /// miss only on code outside them (assembly, cold parts), learned as
    /// blazesym names it. Functions that overlap another (DWARF of discarded
    /// sections, at 0) are left out: which of them blazesym would give is
    /// not known.
    pub(crate) fn learn_all(&mut self, mut funcs: Vec<(u64, u64, String)>) {
        funcs.retain(|(s, z, n)| keepable(*s, *z, n));
        funcs.extend(std::mem::take(&mut self.funcs));
        funcs.sort_by_key(|a| (a.0, a.1));
        funcs.dedup();
        let mut keep = vec![true; funcs.len()];
        let mut end = 0u64;
        let mut last: Option<usize> = None;
        for i in 0..funcs.len() {
            let (s, z, _) = &funcs[i];
            if *s < end {
                keep[i] = false;
                if let Some(l) = last {
                    keep[l] = false;
                }
            }
            if s + z > end {
                end = s + z;
                last = Some(i);
            }
        }
        let mut k = keep.into_iter();
        funcs.retain(|_| k.next().unwrap_or(false));
        funcs.truncate(MAX_FUNCTIONS);
        self.funcs = funcs;
        self.all = true;
        self.changed = true;
    }

    /// Writes what was learned (a concurrent profile reads the old or the
    /// new file, never half).
    pub(crate) fn save(&mut self) {
        if !self.changed {
            return;
        }
        self.changed = false;
        let mut out = format!("{}\n{}\n", self.header, if self.all { ALL } else { SOME });
        for (start, size, name) in &self.funcs {
            out.push_str(&format!("{start:x} {size:x} {name}\n"));
        }
        let _ =
            crate::fsafe::replace_private_file(&self.dir_fd, &self.dir, &self.name, out.as_bytes());
    }
}

/// Whether a function may be kept: a real start (DWARF of discarded sections
/// puts functions at 0), a size, an end within u64, a name a line can hold.
fn keepable(start: u64, size: u64, name: &str) -> bool {
    start > 0
        && size > 0
        && start.checked_add(size).is_some()
        && !name.is_empty()
        && !name.contains(['\n', '\0'])
}

/// The functions of a cache file, if it is for `header`'s debug file:
/// sorted, non-overlapping (anything else makes the whole file worthless).
fn parse(text: &str, header: &str) -> (Vec<(u64, u64, String)>, bool) {
    let mut lines = text.lines();
    if lines.next() != Some(header) {
        return (Vec::new(), false);
    }
    let all = match lines.next() {
        Some(ALL) => true,
        Some(SOME) => false,
        _ => return (Vec::new(), false),
    };
    let funcs = parse_functions(lines);
    let all = all && !funcs.is_empty();
    (funcs, all)
}

fn parse_functions<'t>(lines: impl Iterator<Item = &'t str>) -> Vec<(u64, u64, String)> {
    let mut funcs: Vec<(u64, u64, String)> = Vec::new();
    for l in lines {
        let mut w = l.splitn(3, ' ');
        let parsed = (|| {
            let start = u64::from_str_radix(w.next()?, 16).ok()?;
            let size = u64::from_str_radix(w.next()?, 16).ok()?;
            let name = w.next()?;
            keepable(start, size, name).then(|| (start, size, name.to_string()))
        })();
        match (parsed, funcs.last()) {
            // Kept functions end within u64 (keepable): no overflow here.
            (Some(f), Some((s, z, _))) if f.0 < s + z => return Vec::new(),
            (Some(f), _) => funcs.push(f),
            _ => return Vec::new(),
        }
    }
    funcs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(p: &Path) -> FileId {
        FileId::of(&std::fs::metadata(p).unwrap())
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bprof-names-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn learned_functions_name_their_whole_range_next_time() {
        let dir = scratch("learn");
        let debug = fid(&std::env::current_exe().unwrap());
        let id = [7u8; BUILD_ID_SIZE];
        let mut c = NameCache::open_in(&dir, &id, &debug).unwrap();
        assert_eq!(c.lookup(0x1010), None);
        c.learn(0x1010, 0x1000, Some(0x40), "f");
        c.learn(0x2004, 0x2000, Some(0x10), "g with spaces");
        // Not holding the address: that address alone. Overlapping, at 0,
        // sizeless: not kept.
        c.learn(0x5000, 0x3000, Some(0x10), "far");
        c.learn(0x1020, 0x1020, Some(0x40), "inside f");
        c.learn(0x10, 0, Some(0x40), "discarded");
        c.learn(0x4000, 0x4000, None, "sizeless");
        c.save();
        let c = NameCache::open_in(&dir, &id, &debug).unwrap();
        assert_eq!(c.lookup(0x1000), Some("f"));
        assert_eq!(c.lookup(0x103f), Some("f"));
        assert_eq!(c.lookup(0x1040), None);
        assert_eq!(c.lookup(0x200f), Some("g with spaces"));
        assert_eq!(c.lookup(0x3004), None);
        assert_eq!(c.lookup(0x5000), Some("far"));
        assert_eq!(c.lookup(0x5001), None);
        assert_eq!(c.lookup(0x10), None);
        assert_eq!(c.lookup(0x4000), None);
        // Another debug file with the same build ID: the cache says nothing.
        let other = NameCache::open_in(&dir, &id, &fid(Path::new("/proc/self")));
        assert!(other.is_some_and(|c| c.lookup(0x1000).is_none()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_cache_file_names_nothing() {
        let h = "bprof-names 1 X";
        let n = |text: &str| parse(text, h).0.len();
        assert_eq!(
            parse("bprof-names 1 X\nall\n10 8 a\n20 8 b\n", h),
            (vec![(0x10, 8, "a".into()), (0x20, 8, "b".into())], true)
        );
        assert!(!parse("bprof-names 1 X\nsome\n10 8 a\n", h).1);
        assert_eq!(n("bprof-names 1 Y\nall\n10 8 a\n"), 0);
        assert_eq!(n("bprof-names 1 X\n10 8 a\n"), 0);
        assert_eq!(n("bprof-names 1 X\nall\n10 8 a\n14 8 overlaps\n"), 0);
        assert_eq!(n("bprof-names 1 X\nall\n10 8 a\nzz 8 b\n"), 0);
        assert_eq!(n("bprof-names 1 X\nall\n10 0 empty\n"), 0);
        assert_eq!(n("bprof-names 1 X\nall\nffffffffffffffff 8 wraps\n"), 0);
    }

    #[test]
    fn all_functions_at_once_leave_out_the_overlapping_ones() {
        let dir = scratch("all");
        let debug = fid(&std::env::current_exe().unwrap());
        let id = [8u8; BUILD_ID_SIZE];
        let mut c = NameCache::open_in(&dir, &id, &debug).unwrap();
        c.learn(0x9004, 0x9000, Some(0x10), "asm_learned_before");
        assert!(c.wants_all());
        c.learn_all(vec![
            (0x1000, 0x100, "a".into()),
            (0x1080, 0x10, "nested_in_a".into()),
            (0x2000, 0x10, "b".into()),
            (0, 0x4000, "discarded".into()),
            (0x3000, 0x10, "c".into()),
            (0x3000, 0x10, "c".into()),
        ]);
        c.save();
        let c = NameCache::open_in(&dir, &id, &debug).unwrap();
        assert!(!c.wants_all());
        assert_eq!(c.lookup(0x1000), None);
        assert_eq!(c.lookup(0x1085), None);
        assert_eq!(c.lookup(0x2008), Some("b"));
        assert_eq!(c.lookup(0x3000), Some("c"));
        assert_eq!(c.lookup(0x900f), Some("asm_learned_before"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
