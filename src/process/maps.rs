//! `/proc/PID/maps`, read in one place: its lines' fields, the executable
//! file mappings of a live process, and the way the file writes an address
//! range and a device.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::fasthash::{HashMap, HashSet};

/// A file some process mapped, as that process named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// The process that mapped it (its mount namespace gives the path meaning).
    pub pid: u32,
    /// Path as seen inside that process.
    pub path: PathBuf,
}

/// Files some processes mapped: each path kept once, with the processes
/// that mapped it. A machine that keeps starting processes maps the same
/// few files hundreds of thousands of times; a mapping costs its pid here,
/// not a path of its own.
#[derive(Debug, Default, Clone)]
pub struct Mappings {
    by_path: HashMap<PathBuf, HashSet<u32>>,
}

impl Mappings {
    /// Adds `m`; whether it was new.
    pub fn insert(&mut self, m: Mapping) -> bool {
        match self.by_path.get_mut(m.path.as_path()) {
            Some(pids) => pids.insert(m.pid),
            None => {
                self.by_path.insert(m.path, HashSet::from_iter([m.pid]));
                true
            }
        }
    }

    /// Whether process `pid` was seen mapping `path`.
    pub fn contains(&self, pid: u32, path: &Path) -> bool {
        self.by_path.get(path).is_some_and(|p| p.contains(&pid))
    }

    /// The mappings (process, path pairs).
    pub fn len(&self) -> usize {
        self.by_path.values().map(|p| p.len()).sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }

    /// Each path with the processes that mapped it.
    pub(crate) fn paths(&self) -> impl Iterator<Item = (&Path, &HashSet<u32>)> {
        self.by_path.iter().map(|(p, pids)| (p.as_path(), pids))
    }

    /// The paths process `pid` mapped.
    pub fn of_pid(&self, pid: u32) -> impl Iterator<Item = &Path> {
        self.paths()
            .filter(move |(_, pids)| pids.contains(&pid))
            .map(|(p, _)| p)
    }

    /// Every process that mapped one of them.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_path.values().flatten().copied()
    }

    /// The first path in byte order: the one named when no file could be
    /// opened.
    pub fn first_path(&self) -> Option<&Path> {
        self.by_path.keys().min().map(PathBuf::as_path)
    }

    /// Forgets which of the processes `keep` refuses mapped each path, and
    /// keeps the paths: a file's path still names it once its processes
    /// are forgotten.
    pub fn forget_pids(&mut self, keep: impl Fn(u32) -> bool) {
        for pids in self.by_path.values_mut() {
            pids.retain(|&p| keep(p));
        }
    }

    /// Forgets the mappings of the processes `keep` refuses.
    pub fn retain_pids(&mut self, keep: impl Fn(u32) -> bool) {
        self.forget_pids(keep);
        self.by_path.retain(|_, pids| !pids.is_empty());
    }
}

/// One line of /proc/PID/maps, split at its whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    /// The address range as written (`7f00-7f10`): also the mapping's name
    /// under /proc/PID/map_files.
    pub range: &'a str,
    /// `r-xp` and the like.
    pub perms: &'a str,
    /// The file offset, in hex.
    pub off: &'a str,
    /// The file's device, `major:minor` in hex.
    pub dev: &'a str,
    /// The file's inode number.
    pub ino: &'a str,
    /// The path's first word: empty for anonymous memory, `[vdso]` and the
    /// like for the kernel's special mappings.
    pub path: &'a str,
}

impl Line<'_> {
    /// Whether the mapping holds code.
    pub(crate) fn executable(&self) -> bool {
        self.perms.contains('x')
    }
}

/// The text of process `pid`'s maps; `None` once it is gone.
pub(crate) fn read(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/maps")).ok()
}

/// The text of bprof's own maps.
pub(crate) fn read_own() -> Option<String> {
    fs::read_to_string("/proc/self/maps").ok()
}

/// The lines of a maps text that have their five fixed fields.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    text.lines().filter_map(|line| {
        let mut f = line.split_whitespace();
        Some(Line {
            range: f.next()?,
            perms: f.next()?,
            off: f.next()?,
            dev: f.next()?,
            ino: f.next()?,
            path: f.next().unwrap_or_default(),
        })
    })
}

/// Executable file mappings of a live process, from /proc/PID/maps.
pub(crate) fn executable_mappings(pid: u32) -> Vec<Mapping> {
    let Some(maps) = read(pid) else {
        return Vec::new();
    };
    let paths: BTreeSet<&str> = lines(&maps)
        .filter(Line::executable)
        .map(|l| l.path)
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

/// One executable mapping of a live process, as /proc/PID/maps shows it.
pub(crate) struct Mapped {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Its file offset.
    pub(crate) off: u64,
    /// Its file's device as `stat` gives it (`st_dev`), and inode.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// Its file's path (whole, spaces and all), or `[vdso]`, `[heap]`, empty.
    pub(crate) path: String,
}

/// The executable mappings of live process `pid`, from /proc/PID/maps.
pub(crate) fn mappings(pid: u32) -> Vec<Mapped> {
    let Some(maps) = read(pid) else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|l| {
            let mut w = l.splitn(6, ' ');
            let (start, end) = parse_range(w.next()?)?;
            if !w.next()?.contains('x') {
                return None;
            }
            let off = u64::from_str_radix(w.next()?, 16).ok()?;
            let (ma, mi) = w.next()?.split_once(':')?;
            let dev = libc::makedev(
                u32::from_str_radix(ma, 16).ok()?,
                u32::from_str_radix(mi, 16).ok()?,
            );
            let ino = w.next()?.parse().ok()?;
            let path = w.next().unwrap_or_default().trim_start().to_string();
            Some(Mapped {
                start,
                end,
                off,
                dev,
                ino,
                path,
            })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_into_their_fields() {
        let text = "\
7f00-7f10 r-xp 00001000 fe:01 1234                       /usr/lib/libc.so.6
7f20-7f30 rw-p 00000000 00:00 0
7ffc-7ffe r-xp 00000000 00:00 0                          [vdso]
7f40-7f50 r-xp 00000000 fe:01 99                         /tmp/a b (deleted)
truncated r-xp
";
        let all: Vec<Line> = lines(text).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[0],
            Line {
                range: "7f00-7f10",
                perms: "r-xp",
                off: "00001000",
                dev: "fe:01",
                ino: "1234",
                path: "/usr/lib/libc.so.6",
            }
        );
        assert!(all[0].executable() && !all[1].executable());
        assert_eq!(all[1].path, "");
        assert_eq!(all[2].path, "[vdso]");
        // The path's first word, as every reader took it.
        assert_eq!(all[3].path, "/tmp/a");
        assert_eq!(parse_range(all[0].range), Some((0x7f00, 0x7f10)));
    }

    #[test]
    fn own_executable_mappings_hold_the_running_binary() {
        let exe = std::env::current_exe().unwrap();
        let mine = executable_mappings(std::process::id());
        assert!(mine.iter().any(|m| m.path == exe), "{mine:?}");
        assert!(mine.iter().all(|m| m.pid == std::process::id()));
        assert!(read_own().is_some_and(|t| lines(&t).any(|l| l.path == "[vdso]")));
    }

    fn m(pid: u32, path: &str) -> Mapping {
        Mapping {
            pid,
            path: path.into(),
        }
    }

    /// A path is kept once however many processes map it.
    #[test]
    fn mappings_keep_each_path_once_with_its_processes() {
        let mut ms = Mappings::default();
        assert!(ms.insert(m(1, "/bin/b")));
        assert!(ms.insert(m(2, "/bin/b")));
        assert!(!ms.insert(m(2, "/bin/b")));
        assert!(ms.insert(m(2, "/bin/a")));
        assert_eq!((ms.len(), ms.paths().count()), (3, 2));
        assert!(ms.contains(1, Path::new("/bin/b")) && !ms.contains(1, Path::new("/bin/a")));
        let mut of2: Vec<&Path> = ms.of_pid(2).collect();
        of2.sort();
        assert_eq!(of2, [Path::new("/bin/a"), Path::new("/bin/b")]);
        assert_eq!(ms.first_path(), Some(Path::new("/bin/a")));
        ms.forget_pids(|p| p != 2);
        assert_eq!((ms.len(), ms.paths().count()), (1, 2));
        ms.retain_pids(|p| p != 1);
        assert!(ms.is_empty());
    }
}
