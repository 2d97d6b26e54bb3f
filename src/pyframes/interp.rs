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
    let named = name_version(path).map(|(a, b)| format!("{a}.{b}"));
    // Every layout is x86-64's (a 32-bit interpreter has other offsets).
    if !elf.is_64() || elf.architecture() != object::Architecture::X86_64 {
        return Err(NotInterp::Unsupported(named, NoLayout::Arch));
    }
    let read = |addr: u64, len: u64| -> Option<Vec<u8>> {
        elf.segments()
            .find_map(|s| s.data_range(addr, len).ok().flatten())
            .map(<[u8]>::to_vec)
    };
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

/// Each table and 3.13's debug offsets against the interpreters on this
/// machine: their own headers, compiled, give every offset the walker uses.
#[cfg(test)]
mod here {
    use super::*;
    use std::collections::BTreeMap;
    use std::process::Command;

    /// The fields as C: `name value` lines from the interpreter's headers.
    const OFFSETS_C: &str = r#"
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#include "internal/pycore_code.h"
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
  P("runtime_size", sizeof(_PyRuntimeState));
  P("rt_interp_head", offsetof(_PyRuntimeState, interpreters.head));
  P("interp_next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX < 0x030b0000
  P("interp_threads", offsetof(PyInterpreterState, tstate_head));
  P("ts_thread_id", offsetof(PyThreadState, thread_id));
  P("ts_frame", offsetof(PyThreadState, frame));
  P("f_back", offsetof(PyFrameObject, f_back));
  P("f_code", offsetof(PyFrameObject, f_code));
  P("f_instr", offsetof(PyFrameObject, f_lasti));
  P("co_name", offsetof(PyCodeObject, co_name));
#else
  P("interp_threads", offsetof(PyInterpreterState, threads.head));
  P("ts_thread_id", offsetof(PyThreadState, native_thread_id));
  P("f_back", offsetof(_PyInterpreterFrame, previous));
  P("co_name", offsetof(PyCodeObject, co_qualname));
  P("co_code", offsetof(PyCodeObject, co_code_adaptive));
  P("ts_chunk", offsetof(PyThreadState, datastack_chunk));
  P("ts_chunk_to_limit", offsetof(PyThreadState, datastack_limit) - offsetof(PyThreadState, datastack_chunk));
#if PY_VERSION_HEX < 0x030d0000
  P("ts_frame", offsetof(PyThreadState, cframe));
  P("cframe_frame", offsetof(_PyCFrame, current_frame) + 1);
  P("f_code", offsetof(_PyInterpreterFrame, f_code));
  P("f_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
  P("ts_frame", offsetof(PyThreadState, current_frame));
  P("f_code", offsetof(_PyInterpreterFrame, f_executable));
  P("f_instr", offsetof(_PyInterpreterFrame, instr_ptr));
  P("interp_gen", offsetof(PyInterpreterState, func_state.next_version));
#endif
#if PY_VERSION_HEX < 0x030c0000
  P("f_entry", offsetof(_PyInterpreterFrame, is_entry));
#else
  P("f_entry", offsetof(_PyInterpreterFrame, owner));
  P("co_version", offsetof(PyCodeObject, co_version));
#endif
#endif
  P("ts_next", offsetof(PyThreadState, next));
  P("ts_interp", offsetof(PyThreadState, interp));
  P("co_filename", offsetof(PyCodeObject, co_filename));
  P("co_linetable", offsetof(PyCodeObject, co_linetable));
  P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("co_argcount", offsetof(PyCodeObject, co_argcount));
  P("str_state", offsetof(PyASCIIObject, state));
  P("str_length", offsetof(PyASCIIObject, length));
  P("str_ascii_size", sizeof(PyASCIIObject));
  P("str_compact_size", sizeof(PyCompactUnicodeObject));
  P("bytes_size", offsetof(PyVarObject, ob_size));
  P("bytes_data", offsetof(PyBytesObject, ob_sval));
  return 0;
}
"#;

    /// (interpreter file, include directory) of each CPython 3.10-3.13
    /// here with its headers: Debian's python3.11, pyenv's versions.
    fn interpreters() -> Vec<(PathBuf, PathBuf)> {
        let mut out = Vec::new();
        let deb = PathBuf::from("/usr/bin/python3.11");
        let deb_inc = PathBuf::from("/usr/include/python3.11");
        if deb.exists() && deb_inc.join("internal").exists() {
            out.push((deb, deb_inc));
        }
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
        for v in std::fs::read_dir(root.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = v.file_name().to_string_lossy().to_string();
            let minor = name.split('.').nth(1).unwrap_or_default().to_string();
            if !name.starts_with("3.") || !["10", "11", "12", "13"].contains(&minor.as_str()) {
                continue;
            }
            let lib = v.path().join(format!("lib/libpython3.{minor}.so.1.0"));
            let inc = v.path().join(format!("include/python3.{minor}"));
            if lib.exists() && inc.join("internal").exists() {
                out.push((lib, inc));
            }
        }
        out
    }

    fn header_offsets(include: &Path) -> BTreeMap<String, u64> {
        let dir = std::env::temp_dir().join(format!("bprof-pyoffsets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("offsets.c");
        let bin = dir.join("offsets");
        std::fs::write(&src, OFFSETS_C).unwrap();
        let mut cc = Command::new("gcc");
        cc.arg("-I").arg(include);
        // Debian keeps pyconfig.h apart.
        cc.arg("-I")
            .arg(Path::new("/usr/include/x86_64-linux-gnu").join(include.file_name().unwrap()));
        let st = cc.arg("-o").arg(&bin).arg(&src).status().expect("gcc");
        assert!(st.success(), "compiling against {}", include.display());
        let out = Command::new(&bin).output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn each_interpreters_layout_is_what_its_headers_say() {
        let found = interpreters();
        if found.is_empty() {
            let msg = b"bprof unit tests: no CPython 3.10-3.13 with headers here, so the layout check is skipped\n";
            // SAFETY: writing a valid buffer to fd 2.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            return;
        }
        for (file, include) in found {
            let want = header_offsets(&include);
            let f = File::open(&file).unwrap();
            let got = probe(f, &file).unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
            let o = got.layout.offsets;
            let fields = [
                ("rt_interp_head", o.rt_interp_head),
                ("interp_next", o.interp_next),
                ("interp_threads", o.interp_threads),
                ("ts_next", o.ts_next),
                ("ts_interp", o.ts_interp),
                ("ts_thread_id", o.ts_thread_id),
                ("ts_frame", o.ts_frame),
                ("f_back", o.f_back),
                ("f_code", o.f_code),
                ("f_instr", o.f_instr),
                ("co_filename", o.co_filename),
                ("co_name", o.co_name),
                ("co_linetable", o.co_linetable),
                ("co_firstlineno", o.co_firstlineno),
                ("co_argcount", o.co_argcount),
                ("str_state", o.str_state),
                ("str_length", o.str_length),
                ("str_ascii_size", o.str_ascii_size),
                ("str_compact_size", o.str_compact_size),
                ("bytes_size", o.bytes_size),
                ("bytes_data", o.bytes_data),
            ];
            let optional = [
                ("cframe_frame", o.cframe_frame),
                ("f_entry", o.f_entry),
                ("co_code", o.co_code),
                ("co_version", o.co_version),
                ("interp_gen", o.interp_gen),
                ("ts_chunk", o.ts_chunk),
            ];
            for (name, v) in fields {
                assert_eq!(
                    Some(&u64::from(v)),
                    want.get(name),
                    "{} {name}",
                    file.display()
                );
            }
            for (name, v) in optional {
                let w = want.get(name).copied().unwrap_or(0);
                assert_eq!(u64::from(v), w, "{} {name}", file.display());
            }
            // Every field the walker takes lies within what it reads.
            assert!(o.ts_thread_id + 8 <= o.ts_read && o.ts_frame + 8 <= o.ts_read);
            // The walker takes datastack_limit 16 bytes past datastack_chunk.
            if o.ts_chunk != 0 {
                assert_eq!(
                    want.get("ts_chunk_to_limit"),
                    Some(&16),
                    "{}",
                    file.display()
                );
            }
            assert!(o.ts_chunk + 24 <= o.ts_read);
            assert!(o.f_back + 8 <= o.f_read && o.f_instr + 4 <= o.f_read);
            assert!(o.co_linetable + 8 <= o.co_read && o.co_version + 4 <= o.co_read);
        }
    }
}

#[cfg(test)]
mod arch {
    use super::*;

    #[test]
    fn a_32_bit_interpreter_is_not_walked_with_x86_64_layouts() {
        let dir = std::env::temp_dir().join(format!("bprof-py32-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("py.c");
        let lib = dir.join("libpython3.12.so");
        std::fs::write(
            &src,
            "char _PyRuntime[64]; char PyCode_Type[8]; char PyUnicode_Type[8]; char PyBytes_Type[8];\n\
             const unsigned long Py_Version = 0x030c01f0;\n",
        )
        .unwrap();
        let built = std::process::Command::new("gcc")
            .args(["-m32", "-shared", "-nostdlib", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        let got = built.then(|| probe(File::open(&lib).unwrap(), &lib));
        std::fs::remove_dir_all(&dir).unwrap();
        // gcc -m32 needs no 32-bit libraries with -nostdlib.
        assert!(built, "gcc -m32 -shared -nostdlib failed");
        assert_eq!(
            got.unwrap().unwrap_err(),
            NotInterp::Unsupported(Some("3.12".into()), NoLayout::Arch)
        );
    }
}
