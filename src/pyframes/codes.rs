//! Code objects as the walker announced them (`py_code_event`): their
//! qualified names, files and line tables, kept for the whole profile so
//! that a process that exited keeps its names. Each is keyed by process,
//! address and identity hash: a code object made later at a freed one's
//! address has another hash, so another entry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::bpf::abi::{py_code_event, read_plain, PY_STR_CUT};

/// One code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Code {
    /// `co_qualname` (`co_name` on 3.10).
    pub(crate) name: String,
    /// `co_filename`, as the code object says it.
    pub(crate) file: String,
    /// The file as py-spy shows it: from the top package's directory on
    /// (see [`short_file`]).
    pub(crate) short_file: String,
    pub(crate) firstlineno: i32,
    /// The process's PY_VERSION_HEX (the line table's format).
    pub(crate) version: u32,
    /// The line table (maybe completed after the announcement, see
    /// `Tracker`).
    pub(crate) table: Vec<u8>,
    /// The table is shorter than the code object's: lines past it are
    /// unknown.
    pub(crate) table_cut: bool,
}

impl Code {
    /// The line of instruction `lasti`.
    pub(crate) fn line(&self, lasti: i32) -> Option<i32> {
        super::linetable::line_of(&self.table, self.version, self.firstlineno, lasti)
    }
}

/// (process, code object address, identity hash).
pub(crate) type CodeKey = (u32, u64, u64);

/// Every code object announced in this profile.
#[derive(Debug, Default)]
pub(crate) struct Codes {
    by_key: HashMap<CodeKey, Code>,
    /// Directories found to be (or not to be) packages, per process: the
    /// short file names look for `__init__.py`.
    packages: HashMap<(u32, PathBuf), bool>,
    /// Announcements received, and of those malformed (skipped).
    pub(crate) received: u64,
    pub(crate) malformed: u64,
}

impl Codes {
    /// The code object `key`, if announced.
    pub(crate) fn get(&self, key: &CodeKey) -> Option<&Code> {
        self.by_key.get(key)
    }

    /// Code objects known.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Takes one announcement (the bytes of a `py_code_event`). Returns its
    /// key when the code object is new and its line table was cut short.
    pub(crate) fn add(&mut self, bytes: &[u8]) -> Option<CodeKey> {
        self.received += 1;
        let Some(ev) = read_plain::<py_code_event>(bytes) else {
            self.malformed += 1;
            return None;
        };
        let key = (ev.tgid, ev.code, ev.id);
        if self.by_key.contains_key(&key) {
            return None;
        }
        let text =
            |b: &[u8], len: u16, kind: u16| decode(&b[..usize::from(len).min(b.len())], kind);
        let name = text(&ev.name, ev.name_len, ev.name_kind);
        let file = text(&ev.file, ev.file_len, ev.file_kind);
        let lines = &ev.lines[..usize::from(ev.lines_len).min(ev.lines.len())];
        let short_file = self.short_file(ev.tgid, &file);
        let cut = u64::from(ev.lines_total) > lines.len() as u64;
        self.by_key.insert(
            key,
            Code {
                name,
                file,
                short_file,
                firstlineno: ev.firstlineno,
                version: ev.version,
                table: lines.to_vec(),
                table_cut: cut,
            },
        );
        cut.then_some(key)
    }

    /// Replaces a cut line table by the whole one, read from the process.
    pub(crate) fn complete(&mut self, key: &CodeKey, table: Vec<u8>) {
        if let Some(c) = self.by_key.get_mut(key) {
            c.table = table;
            c.table_cut = false;
        }
    }

    /// py-spy's short name of `file` in process `pid`: from the outermost
    /// directory that is a package (holds `__init__.py`) on, looked up in
    /// the process's own root while it lives; the name as given otherwise.
    fn short_file(&mut self, pid: u32, file: &str) -> String {
        let path = Path::new(file);
        if !path.is_absolute() {
            return file.to_string();
        }
        let mut top = path;
        while let Some(parent) = top.parent() {
            top = parent;
            if !self.is_package(pid, parent) {
                break;
            }
        }
        path.strip_prefix(top)
            .ok()
            .and_then(|p| p.to_str())
            .filter(|p| !p.is_empty())
            .unwrap_or(file)
            .to_string()
    }

    /// Whether `dir` holds an `__init__.py` in the process's root (opened
    /// as any file of a process is: inside its root, no symlink out of it,
    /// no FIFO).
    fn is_package(&mut self, pid: u32, dir: &Path) -> bool {
        if dir.parent().is_none() {
            return false;
        }
        *self
            .packages
            .entry((pid, dir.to_path_buf()))
            .or_insert_with(|| {
                let root = PathBuf::from(format!("/proc/{pid}/root"));
                let rel = dir.strip_prefix("/").unwrap_or(dir).join("__init__.py");
                crate::fsafe::open_untrusted_in_root(
                    &root,
                    &rel,
                    crate::fsafe::Owner::Any,
                    u64::MAX,
                )
                .is_ok()
            })
    }
}

/// A str's bytes as copied: `kind` bytes a character (Latin-1, UCS-2,
/// UCS-4), `…` where it was cut. Characters that are not Unicode scalar
/// values become U+FFFD.
pub(crate) fn decode(b: &[u8], kind: u16) -> String {
    let cut = kind & PY_STR_CUT as u16 != 0;
    let mut s: String = match kind & 7 {
        1 => b.iter().map(|&c| char::from(c)).collect(),
        2 => b
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
            .map(|u| char::from_u32(u).unwrap_or('\u{fffd}'))
            .collect(),
        4 => b
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .map(|u| char::from_u32(u).unwrap_or('\u{fffd}'))
            .collect(),
        _ => String::new(),
    };
    if cut {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_decode_by_kind_and_say_when_cut() {
        assert_eq!(decode(b"run", 1), "run");
        assert_eq!(decode(&[0xe9], 1), "é");
        let ucs2: Vec<u8> = "αβ".encode_utf16().flat_map(u16::to_ne_bytes).collect();
        assert_eq!(decode(&ucs2, 2), "αβ");
        let ucs4: Vec<u8> = [0x1f600u32, 0xd800, 0x11_0000]
            .iter()
            .flat_map(|u| u.to_ne_bytes())
            .collect();
        assert_eq!(decode(&ucs4, 4), "😀\u{fffd}\u{fffd}");
        assert_eq!(decode(b"abc", 1 | PY_STR_CUT as u16), "abc…");
        assert_eq!(decode(b"abc", 3), "");
    }

    #[test]
    fn a_file_outside_any_package_keeps_its_name() {
        let mut c = Codes::default();
        let me = std::process::id();
        assert_eq!(c.short_file(me, "w.py"), "w.py");
        assert_eq!(c.short_file(me, "<frozen site>"), "<frozen site>");
        let dir = std::env::temp_dir().join(format!("bprof-pkg-{me}"));
        let pkg = dir.join("pkg").join("sub");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(dir.join("pkg").join("__init__.py"), "").unwrap();
        std::fs::write(pkg.join("__init__.py"), "").unwrap();
        let f = pkg.join("mod.py");
        assert_eq!(c.short_file(me, f.to_str().unwrap()), "pkg/sub/mod.py");
        let top = dir.join("top.py");
        assert_eq!(c.short_file(me, top.to_str().unwrap()), "top.py");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
