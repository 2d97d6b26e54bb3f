//! Finding a CPython interpreter in a mapped file: its version and layout
//! (see [`super::layout`]), and where `_PyRuntime` and the type objects the
//! walker compares lie. The file is reached through the process's own view
//! (its `map_files` link, else its root) and parsed with the `object` crate:
//! it is hostile input like any mapped file.

use std::fs::File;
use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use object::{Object, ObjectSegment, ObjectSymbol};

use super::layout::{self, Layout, NoLayout};
use crate::fsafe::{self, Owner};

/// The largest interpreter file looked into.
const MAX_FILE: u64 = 1 << 30;

/// The symbols the walker needs, and the version's.
const RUNTIME: &str = "_PyRuntime";
const CODE_TYPE: &str = "PyCode_Type";
const STR_TYPE: &str = "PyUnicode_Type";
const BYTES_TYPE: &str = "PyBytes_Type";
const VERSION: &str = "Py_Version";
/// 3.12's code object counter (a local symbol: in the full table only).
const GEN: &str = "_Py_next_func_version";

/// Whether a mapped file's name says it may hold an interpreter
/// (`python3.12`, `libpython3.12.so.1.0`, `python3.13t`, ...): only those
/// are opened.
pub(crate) fn may_be_python(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("python") || n.starts_with("libpython"))
}

/// The version a file's name gives (`3.12` in `libpython3.12.so.1.0`), as
/// (major, minor).
fn name_version(path: &Path) -> Option<(u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = &name[name.find("python")? + "python".len()..];
    let mut parts = rest.splitn(3, |c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// An interpreter found in a file: addresses are the file's virtual
/// addresses (a process adds its load bias).
#[derive(Debug, Clone)]
pub(crate) struct Interp {
    /// PY_VERSION_HEX (0x030a0000 for a 3.10, which does not say its patch
    /// level).
    pub(crate) version: u32,
    pub(crate) layout: Layout,
    pub(crate) runtime: u64,
    pub(crate) code_type: u64,
    pub(crate) str_type: u64,
    pub(crate) bytes_type: u64,
    /// 3.12's code object counter, 0 when the file does not name it.
    pub(crate) gen: u64,
    /// Loadable segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
}

impl Interp {
    /// The load bias of a process that maps file offset `pgoff` at `start`.
    pub(crate) fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let &(off, _, vaddr) = self
            .segments
            .iter()
            .find(|&&(off, size, _)| pgoff >= off && pgoff < off + size.max(1))?;
        start.checked_sub(vaddr + (pgoff - off))
    }
}

/// "3.12.1" of a PY_VERSION_HEX (no patch level when it is 0).
pub(crate) fn version_text(v: u32) -> String {
    let (major, minor, micro) = (v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff);
    if micro == 0 && v & 0xff == 0 {
        format!("{major}.{minor}")
    } else {
        format!("{major}.{minor}.{micro}")
    }
}

/// What a file that is not a walkable interpreter is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotInterp {
    /// No `_PyRuntime`: not an interpreter (the `python3.12` launcher of a
    /// shared build, a Python extension), or unreadable.
    NotPython,
    /// A CPython bprof cannot walk: its version (if known) and why.
    Unsupported(Option<String>, NoLayout),
}

/// Opens the file a process maps at `[start, end)` (`path` as it names it):
/// exactly that file through its `map_files` link while the mapping lives,
/// else `path` inside the process's root.
pub(crate) fn open_mapped(pid: u32, path: &Path, start: u64, end: u64) -> Option<File> {
    let via = PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
    let opened = fsafe::open_untrusted(&via, Owner::Any, MAX_FILE).or_else(|_| {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let rel = path.strip_prefix("/").unwrap_or(path);
        fsafe::open_untrusted_in_root(&root, rel, Owner::Any, MAX_FILE)
    });
    opened.ok().map(|c| c.file)
}

/// Looks for an interpreter in `file` (named `path` by its process).
pub(crate) fn probe(file: File, path: &Path) -> Result<Interp, NotInterp> {
    let len = file.metadata().map_err(|_| NotInterp::NotPython)?.len();
    // SAFETY: a read-only private mapping of a regular file of at most
    // MAX_FILE bytes (open_mapped checked both); a file truncated meanwhile
    // could fault, as for any mmap reader (the unwinder does the same).
    let map = unsafe { crate::mmap::Mmap::read_only(file.as_fd(), len as usize) }
        .map_err(|_| NotInterp::NotPython)?;
    let elf = object::File::parse(map.bytes()).map_err(|_| NotInterp::NotPython)?;
    let wanted = [RUNTIME, CODE_TYPE, STR_TYPE, BYTES_TYPE, VERSION, GEN];
    // (address, size) of each wanted symbol: all are exported, so the
    // dynamic symbols have them; the full table only for a build that
    // does not export them.
    let mut found: [Option<(u64, u64)>; 6] = [None; 6];
    let look = |found: &mut [Option<(u64, u64)>; 6], syms: object::SymbolIterator<'_, '_>| {
        for sym in syms {
            let Ok(name) = sym.name() else { continue };
            if let Some(i) = wanted.iter().position(|w| *w == name) {
                if found[i].is_none() && sym.address() != 0 {
                    found[i] = Some((sym.address(), sym.size()));
                }
            }
        }
    };
    look(&mut found, elf.dynamic_symbols());
    if found[..4].iter().any(Option::is_none) || found[5].is_none() {
        look(&mut found, elf.symbols());
    }
    let [Some(runtime), Some(code), Some(str_t), Some(bytes_t), version_sym, gen] = found else {
        return Err(NotInterp::NotPython);
    };
    let read = |addr: u64, len: u64| -> Option<Vec<u8>> {
        elf.segments()
            .find_map(|s| s.data_range(addr, len).ok().flatten())
            .map(<[u8]>::to_vec)
    };
    let named = name_version(path).map(|(a, b)| format!("{a}.{b}"));
    let version = version_sym.and_then(|(addr, size)| {
        let b = read(addr, size.clamp(4, 8))?;
        // Py_Version is a C unsigned long: its low 32 bits on x86-64.
        Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
    });
    let (layout, version) = match version {
        // 3.13: the debug offsets at the start of _PyRuntime.
        Some(v) if v >> 16 >= 0x030d => {
            let head = read(runtime.0, layout::DEBUG_OFFSETS_BYTES as u64).unwrap_or_default();
            let (l, _) = layout::debug_layout(&head)
                .map_err(|e| NotInterp::Unsupported(Some(version_text(v)), e))?;
            (l, v)
        }
        Some(v) => {
            let l = layout::table_layout((v >> 16) & 0xff, runtime.1)
                .map_err(|e| NotInterp::Unsupported(Some(version_text(v)), e))?;
            if v >> 24 != 3 {
                return Err(NotInterp::Unsupported(
                    Some(version_text(v)),
                    NoLayout::Version,
                ));
            }
            (l, v)
        }
        // Before 3.11 there is no Py_Version: 3.10 is known by its name and
        // the size of its _PyRuntime.
        None => {
            if named.as_deref() != Some("3.10") {
                return Err(NotInterp::Unsupported(named, NoLayout::Version));
            }
            let l = layout::table_layout(10, runtime.1)
                .map_err(|e| NotInterp::Unsupported(named.clone(), e))?;
            (l, 0x030a_0000)
        }
    };
    let segments = elf
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect();
    Ok(Interp {
        version,
        layout,
        runtime: runtime.0,
        code_type: code.0,
        str_type: str_t.0,
        bytes_type: bytes_t.0,
        // Only 3.12 numbers code objects from it.
        gen: gen.filter(|_| version >> 16 == 0x030c).map_or(0, |g| g.0),
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_may_hold_an_interpreter() {
        for p in [
            "/usr/bin/python3.11",
            "/x/lib/libpython3.12.so.1.0",
            "/x/bin/python3.13t",
        ] {
            assert!(may_be_python(Path::new(p)), "{p}");
        }
        for p in ["/usr/bin/perl", "/x/_ctypes.cpython-312.so", "/x/mypython"] {
            assert!(!may_be_python(Path::new(p)), "{p}");
        }
        assert_eq!(
            name_version(Path::new("/l/libpython3.10.so.1.0")),
            Some((3, 10))
        );
        assert_eq!(name_version(Path::new("/b/python3.13t")), Some((3, 13)));
        assert_eq!(name_version(Path::new("/b/python")), None);
    }

    #[test]
    fn versions_read_as_python_says_them() {
        assert_eq!(version_text(0x030c_01f0), "3.12.1");
        assert_eq!(version_text(0x030a_0000), "3.10");
    }
}
