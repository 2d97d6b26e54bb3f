//! The files behind user frames: found by build ID, checked before
//! blazesym parses them (they are hostile input), and what a file says
//! beyond its symbols (data objects, load segments).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::collect::stacks::BUILD_ID_SIZE;

/// Debug files the system keeps by build ID (perf and gdb look there too):
/// `/usr/lib/debug/.build-id/xx/rest.debug`. Root's directories only.
pub(super) fn build_id_debug_file(id: &[u8; BUILD_ID_SIZE]) -> Option<PathBuf> {
    let len = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if len < 8 {
        return None;
    }
    let hex: String = id[..len].iter().map(|b| format!("{b:02x}")).collect();
    ["/usr/lib/debug", "/lib/debug"]
        .iter()
        .map(|d| PathBuf::from(format!("{d}/.build-id/{}/{}.debug", &hex[..2], &hex[2..])))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file()))
}

/// Symbolizes addresses in the ELF file `path`, which is hostile input: it
/// is checked first (sizes that would make blazesym allocate without bound
/// abort the process, see crate::symbolize::elfcheck), and a panic inside blazesym on
/// it costs only its frames. Empty when the file was refused.
pub fn symbolize_file<'s>(
    symbolizer: &'s Symbolizer,
    path: &Path,
    input: Input<&[u64]>,
) -> Vec<Symbolized<'s>> {
    fenced(path, || {
        symbolizer
            .symbolize(&Source::Elf(Elf::new(path)), input)
            .unwrap_or_default()
    })
}

/// The symbol-table names of `path`'s functions that start at the virtual
/// addresses `addrs`, in order (`None`: no symbol starts there). DWARF may
/// name a function by its bare name (`__introsort_loop<...>` for
/// `std::__introsort_loop<...>(...)`, `hotref` without its parameters:
/// DWARF without linkage names, as `-gsce` writes it); its symbol names it
/// as perf does.
pub(super) fn symtab_names(
    symbolizer: &Symbolizer,
    path: &Path,
    addrs: &[u64],
) -> Vec<Option<String>> {
    let found = fenced(path, || {
        let src = Source::Elf(Elf {
            debug_syms: false,
            ..Elf::new(path)
        });
        symbolizer
            .symbolize(&src, Input::VirtOffset(addrs))
            .unwrap_or_default()
    });
    addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| match found.get(i) {
            Some(Symbolized::Sym(sym)) if sym.addr == a => Some(sym.name.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether `symtab`, a function's mangled symbol, names the function DWARF
/// calls `dwarf` (a bare name: no parameters, perhaps no scope), so that
/// the symbol's full name may stand for it.
pub(super) fn symtab_names_it(dwarf: &str, symtab: &str) -> bool {
    if !is_bare_name(dwarf) || !symtab.starts_with("_Z") {
        return false;
    }
    let base = dwarf.split(['<', '(']).next().unwrap_or_default().trim();
    !base.is_empty() && super::demangle(symtab).contains(base)
}

/// A name as DWARF gives it, not a symbol's: not mangled, no parameter list.
pub(super) fn is_bare_name(name: &str) -> bool {
    !name.starts_with("_Z") && !name.starts_with("_R") && !name.contains('(')
}

/// Every function the DWARF of `path` describes: (start, size, name), each
/// named by its symbol where DWARF gives a bare name (see
/// [`symtab_names`]). The same checks and panic fence as
/// [`symbolize_file`]; empty when refused.
pub(super) fn dwarf_functions(path: &Path) -> Vec<(u64, u64, String)> {
    let mut funcs = dwarf_functions_named(path);
    if funcs.iter().any(|(_, _, n)| is_bare_name(n)) {
        let symbols: HashMap<u64, String> = fenced(path, || {
            let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
                debug_syms: false,
                ..blazesym::inspect::source::Elf::new(path)
            });
            let mut syms = Vec::new();
            let _ = blazesym::inspect::Inspector::new().for_each(&src, |sym| {
                if sym.sym_type == blazesym::SymType::Function && sym.name.starts_with("_Z") {
                    syms.push((sym.addr, sym.name.to_string()));
                }
                ControlFlow::Continue(())
            });
            syms
        })
        .into_iter()
        .collect();
        for (start, _, name) in &mut funcs {
            if let Some(sym) = symbols.get(start).filter(|s| symtab_names_it(name, s)) {
                *name = sym.clone();
            }
        }
    }
    funcs
}

fn dwarf_functions_named(path: &Path) -> Vec<(u64, u64, String)> {
    fenced(path, || {
        let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
            debug_syms: true,
            ..blazesym::inspect::source::Elf::new(path)
        });
        let mut funcs = Vec::new();
        let _ = blazesym::inspect::Inspector::new().for_each(&src, |sym| {
            if sym.sym_type == blazesym::SymType::Function {
                if let Some(size) = sym.size {
                    funcs.push((sym.addr, size as u64, sym.name.to_string()));
                }
            }
            ControlFlow::Continue(())
        });
        funcs
    })
}

/// Runs blazesym's parse of the hostile file `path`: after elfcheck's
/// checks, and with its panics caught (the file is then refused, said at
/// -v). Empty when refused.
fn fenced<T>(path: &Path, parse: impl FnOnce() -> Vec<T>) -> Vec<T> {
    if let Err(why) = crate::symbolize::elfcheck::check(path) {
        note_refused(path, &why);
        return Vec::new();
    }
    quiet_panics();
    IN_PARSER.with(|c| c.set(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse));
    IN_PARSER.with(|c| c.set(false));
    r.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        let what = what.lines().next().unwrap_or_default();
        note_refused(path, &format!("the ELF parser failed on it ({what})"));
        Vec::new()
    })
}

thread_local! {
    /// Set while blazesym parses a hostile file: its panics are reported
    /// as a skipped file at -v, not as a crash message.
    static IN_PARSER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs (once) a panic hook that stays quiet inside the parser.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_PARSER.with(|c| c.get()) {
                default(info);
            }
        }));
    });
}

/// Files refused as malformed, said once each at the end (`-v`).
static REFUSED: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());

pub(crate) fn note_refused(path: &Path, why: &str) {
    if let Ok(mut r) = REFUSED.lock() {
        if !r.iter().any(|(p, _)| p == path) {
            r.push((path.to_path_buf(), why.to_string()));
        }
    }
}

/// The files refused as malformed so far, with why.
pub(crate) fn refused_files() -> Vec<(PathBuf, String)> {
    REFUSED.lock().map(|r| r.clone()).unwrap_or_default()
}

/// Turns file offsets of `path` into virtual offsets (its PT_LOAD program
/// headers): a separate debug file has the same addresses but not the same
/// file layout. Only the ELF header and program headers are read (the
/// whole file was: libc's 1.9 MB for a few dozen bytes); files whose
/// program headers lie past their first MiB, or not ELF, give `None`s.
pub(super) fn virt_offsets(path: &Path, offsets: &[u64]) -> Vec<Option<u64>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::os::unix::fs::FileExt;
    let none = || vec![None; offsets.len()];
    let Ok(checked) = crate::fsafe::open_untrusted(path, crate::fsafe::Owner::Any, 1 << 30) else {
        return none();
    };
    // The header and, almost always, the program headers right after it.
    let read = |len: usize| -> Option<Vec<u8>> {
        let mut data = vec![0u8; len];
        let n = checked.file.read_at(&mut data, 0).ok()?;
        data.truncate(n);
        Some(data)
    };
    let Some(mut data) = read(4096) else {
        return none();
    };
    let Ok(hdr) = object::elf::FileHeader64::<object::Endianness>::parse(&*data) else {
        return none();
    };
    let Ok(e) = hdr.endian() else {
        return none();
    };
    let end = hdr.e_phoff(e) + u64::from(hdr.e_phnum(e)) * u64::from(hdr.e_phentsize(e));
    if end > data.len() as u64 {
        if end > 1 << 20 {
            return none();
        }
        match read(end as usize) {
            Some(d) => data = d,
            None => return none(),
        }
    }
    let Ok(hdr) = object::elf::FileHeader64::<object::Endianness>::parse(&*data) else {
        return none();
    };
    let Ok(phdrs) = hdr.program_headers(e, &*data) else {
        return none();
    };
    let loads: Vec<(u64, u64, u64)> = phdrs
        .iter()
        .filter(|ph| ph.p_type(e) == object::elf::PT_LOAD)
        .map(|ph| (ph.p_offset(e), ph.p_filesz(e), ph.p_vaddr(e)))
        .collect();
    offsets
        .iter()
        .map(|&off| {
            loads
                .iter()
                .find(|(o, sz, _)| off >= *o && off - o < *sz)
                .map(|(o, _, v)| off - o + v)
        })
        .collect()
}

/// Addresses of data objects in `path` (variables that no function shares):
/// a garbage return address that lands in .data must not take their name.
pub(super) fn data_symbols(path: &Path) -> std::rc::Rc<HashSet<u64>> {
    // Remembered by file version: walking a large symbol table again on
    // every refresh of a live view would cost more than everything else.
    let id = fs::metadata(path)
        .ok()
        .map(|m| crate::symbolize::elfcheck::FileId::of(&m));
    if let Some(d) = id.and_then(|id| DATA_SYMBOLS.with(|c| c.borrow().get(&id).cloned())) {
        return d;
    }
    let d = std::rc::Rc::new(read_data_symbols(path));
    if let Some(id) = id {
        DATA_SYMBOLS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= 1024 {
                c.clear();
            }
            c.insert(id, d.clone());
        });
    }
    d
}

thread_local! {
    static DATA_SYMBOLS: std::cell::RefCell<HashMap<crate::symbolize::elfcheck::FileId, std::rc::Rc<HashSet<u64>>>> =
        std::cell::RefCell::new(HashMap::new());
}

fn read_data_symbols(path: &Path) -> HashSet<u64> {
    let inspector = blazesym::inspect::Inspector::new();
    let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
        debug_syms: false,
        ..blazesym::inspect::source::Elf::new(path)
    });
    let (mut vars, mut funcs) = (HashSet::new(), HashSet::new());
    let _ = inspector.for_each(&src, |sym| {
        match sym.sym_type {
            blazesym::SymType::Variable => vars.insert(sym.addr),
            _ => funcs.insert(sym.addr),
        };
        ControlFlow::Continue(())
    });
    vars.retain(|a| !funcs.contains(a));
    vars
}

/// The name a module is shown under: its file name.
pub(super) fn module_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers alone give the virtual offsets a whole-file parse gives:
    /// for an offset inside each PT_LOAD of this test binary, and none for
    /// an offset past them all, or for a file that is not ELF.
    #[test]
    fn virt_offsets_from_the_headers_match_a_whole_file_parse() {
        use object::read::elf::{ElfFile64, ProgramHeader};
        let exe = std::env::current_exe().unwrap();
        let data = fs::read(&exe).unwrap();
        let elf = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
        let e = elf.endian();
        let mut offsets = Vec::new();
        let mut want = Vec::new();
        for ph in elf.elf_program_headers() {
            if ph.p_type(e) == object::elf::PT_LOAD && ph.p_filesz(e) > 0 {
                let off = ph.p_offset(e) + ph.p_filesz(e) / 2;
                offsets.push(off);
                want.push(Some(off - ph.p_offset(e) + ph.p_vaddr(e)));
            }
        }
        assert!(offsets.len() >= 2, "{offsets:?}");
        offsets.push(data.len() as u64 + 4096);
        want.push(None);
        assert_eq!(virt_offsets(&exe, &offsets), want);
        let not_elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert_eq!(virt_offsets(&not_elf, &[0]), vec![None]);
    }
}
