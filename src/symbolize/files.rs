//! The files behind user frames: found by build ID, opened once, checked
//! before blazesym parses them (they are hostile input), and handed to it
//! by descriptor (`/proc/self/fd/N`), so that what was checked is what is
//! read whatever happens to the path meanwhile; and what a file says beyond
//! its symbols (data objects, load segments).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::fsafe::{self, Owner};
use crate::symbolize::elfcheck::{self, FileId, Verdict, MAX_FILE};

/// The largest file of which a copy without its malformed sections is
/// made for blazesym (see [`ElfFile::from_checked`]); a larger one with a
/// malformed symbol table costs its frames.
const MAX_COPY: u64 = 256 << 20;

/// An ELF file opened once and checked, as blazesym gets to read it.
pub(crate) struct ElfFile {
    /// Where it was found: what its frames show as their module.
    pub(crate) path: PathBuf,
    /// The checked descriptor, or a private copy of it without its
    /// malformed sections.
    file: Rc<File>,
    /// Whether blazesym may read its DWARF: none of it is malformed, and
    /// it names no other file that blazesym would open by path (debug links
    /// are followed only for root's files in root's directories).
    debug_syms: bool,
    /// Its owner.
    pub(crate) uid: u32,
    /// Its identity (of the file itself, not of a copy).
    pub(crate) id: FileId,
    /// Bytes of DWARF blazesym may read in it (0 when it may read none).
    pub(crate) dwarf_bytes: u64,
}

impl std::fmt::Debug for ElfFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ElfFile({})", self.path.display())
    }
}

thread_local! {
    /// Copies without malformed sections, by the file's identity: blazesym
    /// caches what it parsed by file, so the same copy is handed each time.
    static COPIES: std::cell::RefCell<HashMap<FileId, Option<Rc<File>>>> =
        std::cell::RefCell::new(HashMap::new());
}

/// Copies remembered, at most.
const MAX_COPIES: usize = 16;

impl ElfFile {
    /// Opens `path` as untrusted input (no final symlink, no FIFO; inside a
    /// process's root, `/proc/PID/root/...`, every component resolved in
    /// that root) and checks it. `Err` says why it was refused.
    pub(crate) fn open(path: &Path) -> Result<ElfFile, String> {
        let checked = match in_root(path) {
            Some((root, rel)) => fsafe::open_untrusted_in_root(&root, rel, Owner::Any, MAX_FILE),
            None => fsafe::open_untrusted(path, Owner::Any, MAX_FILE),
        }
        .map_err(|e| e.to_string())?;
        Self::from_checked(path.to_path_buf(), checked.file)
    }

    /// The ELF file open as `file` (opened by crate::fsafe), found at `path`.
    /// A file with malformed DWARF is read for its symbol tables alone; one
    /// with other malformed sections through a private copy in which they
    /// are empty. Either way the sections skipped are said at -v.
    pub(crate) fn from_checked(path: PathBuf, file: File) -> Result<ElfFile, String> {
        let meta = file.metadata().map_err(|e| e.to_string())?;
        let id = FileId::of(&meta);
        let verdict = elfcheck::check(&file)?;
        let links_ok = !verdict.links || trusted_links(&file, meta.uid());
        let (file, debug_syms) = if verdict.bad.is_empty() {
            (Rc::new(file), links_ok)
        } else {
            note_sections(&path, &verdict.describe());
            if verdict.debug_only() {
                (Rc::new(file), false)
            } else {
                let copy = copy_without(&file, id, &verdict).ok_or_else(|| {
                    format!(
                        "{}, and no copy without them could be made",
                        verdict.describe()
                    )
                })?;
                let debug = links_ok && !verdict.bad.iter().any(|(_, _, d)| *d);
                (copy, debug)
            }
        };
        Ok(ElfFile {
            path,
            file,
            debug_syms,
            uid: meta.uid(),
            id,
            dwarf_bytes: if debug_syms { verdict.dwarf_bytes } else { 0 },
        })
    }

    /// Another descriptor of the file read (for readers that own theirs).
    pub(crate) fn reopen(&self) -> Option<File> {
        self.file.try_clone().ok()
    }

    /// The path blazesym opens: this very file.
    fn source_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// Its build ID, padded like the kernel's.
    pub(crate) fn build_id(&self) -> Option<[u8; BUILD_ID_SIZE]> {
        let p = self.source_path();
        let id = std::panic::catch_unwind(|| blazesym::helper::read_elf_build_id(&p))
            .ok()?
            .ok()??;
        Some(crate::process::buildid::padded(&id))
    }

    /// A Go binary's own build ID (the `.note.go.buildid` note: text, at
    /// most 256 bytes), which identifies a Go build without a GNU build ID.
    pub(crate) fn go_build_id(&self) -> Option<String> {
        use object::{Object, ObjectSection};
        let cache = object::ReadCache::new(&*self.file);
        let obj = object::File::parse(&cache).ok()?;
        let sec = obj.section_by_name(".note.go.buildid")?;
        if sec.size() > 4096 {
            return None;
        }
        let data = sec.data().ok()?;
        let word = |at: usize| -> Option<usize> {
            Some(u32::from_ne_bytes(data.get(at..at + 4)?.try_into().ok()?) as usize)
        };
        let (namesz, descsz, kind) = (word(0)?, word(4)?, word(8)?);
        // ELF_NOTE_GOBUILDID_TAG, owner "Go".
        if kind != 4 || namesz != 3 || descsz > 256 || data.get(12..14)? != b"Go" {
            return None;
        }
        let desc = data.get(16..16 + descsz)?;
        let id = std::str::from_utf8(desc).ok()?;
        id.bytes()
            .all(|b| b.is_ascii_graphic())
            .then(|| id.to_string())
    }

    /// Symbolizes addresses in it; a panic inside blazesym costs only its
    /// frames (empty then).
    pub(crate) fn symbolize<'s>(
        &self,
        symbolizer: &'s Symbolizer,
        input: Input<&[u64]>,
    ) -> Vec<Symbolized<'s>> {
        let src = Source::Elf(Elf {
            debug_syms: self.debug_syms,
            ..Elf::new(self.source_path())
        });
        self.fenced(|| symbolizer.symbolize(&src, input).unwrap_or_default())
    }

    /// Every function its DWARF (or, without, its symbol table) describes:
    /// (start, size, name), each named by its symbol where DWARF gives a
    /// bare name (see [`ElfFile::symtab_names`]).
    pub(crate) fn functions(&self) -> Vec<(u64, u64, String)> {
        let mut funcs = self.described_functions();
        if funcs.iter().any(|(_, _, n)| is_bare_name(n)) {
            let symbols: HashMap<u64, String> = self
                .fenced(|| {
                    let src =
                        blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
                            debug_syms: false,
                            ..blazesym::inspect::source::Elf::new(self.source_path())
                        });
                    let mut syms = Vec::new();
                    let _ = blazesym::inspect::Inspector::new().for_each(&src, |sym| {
                        if sym.sym_type == blazesym::SymType::Function && sym.name.starts_with("_Z")
                        {
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

    /// The symbol-table names of its functions that start at the virtual
    /// addresses `addrs`, in order (`None`: no symbol starts there). DWARF
    /// may name a function by its bare name (`__introsort_loop<...>` for
    /// `std::__introsort_loop<...>(...)`, `hotref` without its parameters:
    /// DWARF without linkage names, as `-gsce` writes it); its symbol names
    /// it as perf does.
    pub(crate) fn symtab_names(
        &self,
        symbolizer: &Symbolizer,
        addrs: &[u64],
    ) -> Vec<Option<String>> {
        let found = self.fenced(|| {
            let src = Source::Elf(Elf {
                debug_syms: false,
                ..Elf::new(self.source_path())
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

    /// The functions its DWARF (or symbol table) describes, as named there.
    fn described_functions(&self) -> Vec<(u64, u64, String)> {
        self.fenced(|| {
            let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
                debug_syms: self.debug_syms,
                ..blazesym::inspect::source::Elf::new(self.source_path())
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

    /// Runs blazesym's parse of it with its panics caught (the file is then
    /// refused, said at -v). Empty when refused.
    fn fenced<T>(&self, parse: impl FnOnce() -> Vec<T>) -> Vec<T> {
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
            note_refused(&self.path, &format!("the ELF parser failed on it ({what})"));
            Vec::new()
        })
    }

    /// Addresses of data objects in it (variables that no function
    /// shares): a garbage return address that lands in .data must not take
    /// their name.
    pub(crate) fn data_symbols(&self) -> Rc<HashSet<u64>> {
        // Remembered by file version: walking a large symbol table again on
        // every refresh of a live view would cost more than everything else.
        if let Some(d) = DATA_SYMBOLS.with(|c| c.borrow().get(&self.id).cloned()) {
            return d;
        }
        let d = Rc::new(
            self.fenced(|| vec![self.read_data_symbols()])
                .pop()
                .unwrap_or_default(),
        );
        DATA_SYMBOLS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= 1024 {
                c.clear();
            }
            c.insert(self.id, d.clone());
        });
        d
    }

    /// Read from its symbol tables with `object` (the file was checked:
    /// whole entries): blazesym's walk of every symbol also sorts them all
    /// by name first, which a large library's symbol table makes slow.
    fn read_data_symbols(&self) -> HashSet<u64> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let cache = object::ReadCache::new(&*self.file);
        let Ok(obj) = object::File::parse(&cache) else {
            return HashSet::new();
        };
        let (mut vars, mut funcs) = (HashSet::new(), HashSet::new());
        for sym in obj.symbols().chain(obj.dynamic_symbols()) {
            if sym.is_undefined() {
                continue;
            }
            match sym.kind() {
                SymbolKind::Data => vars.insert(sym.address()),
                _ => funcs.insert(sym.address()),
            };
        }
        vars.retain(|a| !funcs.contains(a));
        vars
    }

    /// Turns file offsets into virtual offsets (its PT_LOAD program
    /// headers): a separate debug file has the same addresses but not the
    /// same file layout. Only the ELF header and program headers are read,
    /// not the whole file for a few dozen bytes; program headers past the
    /// first MiB give `None`s.
    pub(crate) fn virt_offsets(&self, offsets: &[u64]) -> Vec<Option<u64>> {
        virt_offsets_in(&self.file, offsets)
    }
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

/// `/proc/PID/root/REST` split into the root and REST.
fn in_root(path: &Path) -> Option<(PathBuf, &Path)> {
    let rest = path.strip_prefix("/proc/").ok()?;
    let mut c = rest.components();
    let pid = c.next()?.as_os_str().to_str()?;
    if !pid.bytes().all(|b| b.is_ascii_digit()) || c.next()?.as_os_str() != "root" {
        return None;
    }
    Some((PathBuf::from(format!("/proc/{pid}/root")), c.as_path()))
}

/// Whether blazesym may follow the debug links of a file owned by `uid`
/// open as `file`: root's, in a directory only root can write, so that the
/// files it names (looked up beside it and in root's debug directories)
/// are root's choice too.
fn trusted_links(file: &File, uid: u32) -> bool {
    if uid != 0 {
        return false;
    }
    let Ok(at) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
        return false;
    };
    at.parent()
        .and_then(|d| fs::metadata(d).ok())
        .is_some_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
}

/// A private copy (a memfd) of `file` without the sections `v` found
/// malformed; remembered by identity.
fn copy_without(file: &File, id: FileId, v: &Verdict) -> Option<Rc<File>> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;
    if let Some(c) = COPIES.with(|c| c.borrow().get(&id).cloned()) {
        return c;
    }
    let make = || -> Option<Rc<File>> {
        let len = file.metadata().ok()?.len();
        if len > MAX_COPY {
            return None;
        }
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(&mut data, 0).ok()?;
        let data = elfcheck::without_bad_sections(&data, v)?;
        // SAFETY: a NUL-terminated name and valid flags; the fd is checked
        // and then owned by the File.
        let fd = unsafe { libc::memfd_create(c"bprof-elf".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let mut f = unsafe { File::from_raw_fd(fd) };
        f.write_all(&data).ok()?;
        Some(Rc::new(f))
    };
    let c = make();
    COPIES.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MAX_COPIES {
            m.clear();
        }
        m.insert(id, c.clone());
    });
    c
}

/// Debug files the system keeps by build ID (perf and gdb look there too):
/// `/usr/lib/debug/.build-id/xx/rest.debug`, root's files only.
pub(super) fn build_id_debug_file(id: &[u8; BUILD_ID_SIZE]) -> Option<ElfFile> {
    let len = id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if len < 8 {
        return None;
    }
    let hex: String = id[..len].iter().map(|b| format!("{b:02x}")).collect();
    ["/usr/lib/debug", "/lib/debug"]
        .iter()
        .map(|d| PathBuf::from(format!("{d}/.build-id/{}/{}.debug", &hex[..2], &hex[2..])))
        .filter(|p| fs::symlink_metadata(p).is_ok())
        .find_map(|p| {
            let checked = fsafe::open_untrusted(&p, Owner::Exactly(0), MAX_FILE).ok()?;
            match ElfFile::from_checked(p.clone(), checked.file) {
                Ok(f) => Some(f),
                Err(why) => {
                    note_refused(&p, &why);
                    None
                }
            }
        })
}

/// Symbolizes addresses in the ELF file `path`, which is hostile input:
/// opened once and checked first (sizes that would make blazesym allocate
/// without bound abort the process, see crate::symbolize::elfcheck), and a
/// panic inside blazesym on it costs only its frames. Empty when the file
/// was refused.
pub fn symbolize_file<'s>(
    symbolizer: &'s Symbolizer,
    path: &Path,
    input: Input<&[u64]>,
) -> Vec<Symbolized<'s>> {
    match ElfFile::open(path) {
        Ok(f) => f.symbolize(symbolizer, input),
        Err(why) => {
            note_refused(path, &why);
            Vec::new()
        }
    }
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

/// Files read without their malformed sections, said once each at -v.
static SECTIONS: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());

/// Files refused or skipped, at most, kept for the report.
const MAX_NOTED: usize = 1024;

fn note(list: &std::sync::Mutex<Vec<(PathBuf, String)>>, path: &Path, why: &str) {
    if let Ok(mut r) = list.lock() {
        if r.len() < MAX_NOTED && !r.iter().any(|(p, _)| p == path) {
            r.push((path.to_path_buf(), why.to_string()));
        }
    }
}

pub(crate) fn note_refused(path: &Path, why: &str) {
    if why != elfcheck::NOT_ELF {
        note(&REFUSED, path, why);
    }
}

fn note_sections(path: &Path, why: &str) {
    note(&SECTIONS, path, why);
}

/// The files refused as malformed so far, with why (a panic inside the
/// parser reads "the ELF parser failed on it (...)").
pub fn refused_files() -> Vec<(PathBuf, String)> {
    REFUSED.lock().map(|r| r.clone()).unwrap_or_default()
}

/// The files read without their malformed sections so far, with which.
pub(crate) fn skipped_sections() -> Vec<(PathBuf, String)> {
    SECTIONS.lock().map(|r| r.clone()).unwrap_or_default()
}

/// [`ElfFile::virt_offsets`] of the file open as `file`.
fn virt_offsets_in(file: &File, offsets: &[u64]) -> Vec<Option<u64>> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::os::unix::fs::FileExt;
    let none = || vec![None; offsets.len()];
    // The header and, almost always, the program headers right after it.
    let read = |len: usize| -> Option<Vec<u8>> {
        let mut data = vec![0u8; len];
        let n = file.read_at(&mut data, 0).ok()?;
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

thread_local! {
    static DATA_SYMBOLS: std::cell::RefCell<HashMap<FileId, Rc<HashSet<u64>>>> =
        std::cell::RefCell::new(HashMap::new());
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
        assert_eq!(ElfFile::open(&exe).unwrap().virt_offsets(&offsets), want);
        let not_elf = File::open(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
        assert_eq!(virt_offsets_in(&not_elf, &[0]), vec![None]);
    }

    /// The data objects read from the symbol tables are those blazesym's
    /// walk of every symbol finds (this test binary's and libc's).
    #[test]
    fn data_symbols_are_blazesyms_variables_that_no_function_shares() {
        let libc = crate::process::maps::executable_mappings(std::process::id())
            .into_iter()
            .map(|m| m.path)
            .find(|p| p.to_string_lossy().contains("libc.so"))
            .unwrap();
        for p in [std::env::current_exe().unwrap(), libc] {
            let f = ElfFile::open(&p).unwrap();
            let src = blazesym::inspect::source::Source::Elf(blazesym::inspect::source::Elf {
                debug_syms: false,
                ..blazesym::inspect::source::Elf::new(&p)
            });
            let (mut vars, mut funcs) = (HashSet::new(), HashSet::new());
            let _ = blazesym::inspect::Inspector::new().for_each(&src, |sym| {
                match sym.sym_type {
                    blazesym::SymType::Variable => vars.insert(sym.addr),
                    _ => funcs.insert(sym.addr),
                };
                ControlFlow::Continue(())
            });
            vars.retain(|a| !funcs.contains(a));
            assert!(!vars.is_empty());
            assert_eq!(f.read_data_symbols(), vars, "{}", p.display());
        }
    }

    /// What blazesym reads is the file that was checked: another file
    /// renamed over its path afterwards changes nothing.
    #[test]
    fn a_file_swapped_after_its_check_changes_nothing() {
        let d = std::env::temp_dir().join(format!("bprof-swap-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let p = d.join("lib.so");
        fs::copy(std::env::current_exe().unwrap(), &p).unwrap();
        let checked = ElfFile::open(&p).unwrap();
        let (id, data) = (checked.build_id(), checked.read_data_symbols());
        assert!(id.is_some() && !data.is_empty());
        let other = d.join("other");
        fs::copy("/bin/true", &other).unwrap();
        fs::rename(&other, &p).unwrap();
        assert_eq!(checked.build_id(), id);
        assert_eq!(checked.read_data_symbols(), data);
        let now = ElfFile::open(&p).unwrap();
        assert_ne!(now.build_id(), id);
        assert_ne!(now.read_data_symbols(), data);
        let _ = fs::remove_dir_all(&d);
    }
}
