//! User frames: one pass names every distinct (file, offset) and address
//! of a profile's stacks (blazesym, debug files kept by build ID, the
//! per-boot name cache, JIT symbol files, Go function tables), then builds
//! the named stacks.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use super::files::{build_id_debug_file, is_bare_name, module_name, symtab_names_it, ElfFile};
use super::gopclntab;
use super::{
    elfcheck, kernel_keys, namecache, plain_line, symbol_line, user_keys, vdso, FrameLine, Frames,
    Module, Stack, SymbolStats, UnknownStyle, Unnamed, UnnamedFile, UserKey, UNKNOWN,
};
use crate::bpf::stacks::FileKey;
use crate::bpf::stacks::{RawStack, BUILD_ID_SIZE};
use crate::collect::sideband::MmapIndex;
use crate::fasthash::{HashMap, HashSet};
use crate::process::mapped::{module_name as mapped_module_name, MappedFile};
use crate::target;

/// What named a user frame: blazesym, the per-boot name cache, or a Go
/// binary's own function table.
#[derive(Clone)]
enum Found<'a> {
    Sym(Symbolized<'a>),
    Named(String),
    Lines(Vec<FrameLine>),
}

/// A Go binary's function table, read from its open file.
type GoTable = gopclntab::GoTable<std::fs::File>;

/// One symbolization: names and locations found so far, and what stayed
/// unknown.
pub(super) struct Pass<'a> {
    pub(super) symbolizer: &'a Symbolizer,
    pub(super) code_info: bool,
    /// Names only: `symbolizer` without code information, for the files
    /// past the budget of DWARF read for source lines and inlined
    /// functions.
    pub(super) basic: &'a Symbolizer,
    /// Bytes of DWARF still to be read for code information (see
    /// [`MAX_CODE_INFO_DWARF`]).
    pub(super) dwarf_left: u64,
    /// The symbolizer for the file at hand: `symbolizer` or `basic`.
    pub(super) here: &'a Symbolizer,
    /// A one-shot profile's (`Some(inlined)`): code information of files
    /// with a build ID comes from a symbolizer of that file's own, kept in
    /// `own` while the file's processes follow one another and dropped,
    /// with the DWARF it parsed, when the next file begins. The peak is
    /// then the largest file's DWARF, not the sum of all. (A long session
    /// keeps one symbolizer: its later intervals name the same files.)
    pub(super) per_file: Option<bool>,
    pub(super) own: Option<([u8; BUILD_ID_SIZE], Symbolizer)>,
    pub(super) index: &'a MmapIndex,
    pub(super) style: UnknownStyle,
    pub(super) names: Names,
    pub(super) frames: Frames,
    pub(super) unknown_keys: HashSet<UserKey>,
    pub(super) user_locs: HashMap<UserKey, u32>,
    pub(super) debuginfod: Option<crate::symbolize::debuginfod::Client>,
    /// Files of live processes' mappings symbolized by address (frames the
    /// kernel could not tie to a file), opened once per pass.
    pub(super) mapped: HashMap<(u32, u64, u64), Option<Rc<ElfFile>>>,
    /// Go function tables by the identity of the file they were read from
    /// (one file mapped by many processes is read once); `None`: not a Go
    /// binary.
    pub(super) go_tables: HashMap<elfcheck::FileId, Option<Rc<GoTable>>>,
    /// The per-boot name caches opened this pass, by build ID and debug
    /// file: a library every process maps (libc under process churn) is
    /// read once, not once per process.
    pub(super) name_caches:
        HashMap<([u8; BUILD_ID_SIZE], elfcheck::FileId), Option<namecache::NameCache>>,
    /// Files of frames without a build ID, checked once per pass (the key:
    /// the record's address, kept alive here), or why they name nothing.
    pub(super) kept: HashMap<usize, Kept>,
    /// Why the unknown frames of each module (by id) stayed unknown.
    pub(super) unnamed: HashMap<u32, Unnamed>,
}

/// A recorded file as one pass reads it: the record, and the checked ELF
/// file or why there is none.
pub(super) type Kept = (Arc<MappedFile>, Result<Rc<ElfFile>, Unnamed>);

impl<'a> Pass<'a> {
    /// Frames at `offsets` of the file with build ID `id`, as mapped by
    /// `tgid` (`file`: the file found for it, open, if any).
    pub(super) fn file_frames(
        &mut self,
        id: [u8; BUILD_ID_SIZE],
        tgid: u32,
        file: Option<Rc<ElfFile>>,
        offsets: &[u64],
    ) {
        let mut resolved: Vec<Option<Found<'a>>> = vec![None; offsets.len()];
        if file.is_none() && vdso::is_vdso(&id) {
            let names = vdso::symbols(self.symbolizer, offsets);
            for (r, s) in resolved.iter_mut().zip(names) {
                *r = s.map(Found::Sym);
            }
            let module_id = self.frames.module(Module::File {
                build_id: Some(id),
                key: None,
                go_build_id: None,
                path: Some(PathBuf::from("[vdso]")),
            });
            let keys: Vec<UserKey> = offsets
                .iter()
                .map(|&o| UserKey::File(id, tgid, o))
                .collect();
            return self.place_file_frames(
                &keys,
                offsets,
                &resolved,
                Some("[vdso]".into()),
                module_id,
            );
        }
        let code_info = self.code_info && self.within_budget(&id, file.as_deref());
        self.here = if code_info {
            self.symbolizer
        } else {
            self.basic
        };
        // Names only: a debug file kept by build ID first, through the
        // per-boot cache of the functions it named before (its DWARF is what
        // the file itself would lead blazesym to, by .gnu_debuglink).
        let debug = (!code_info).then(|| build_id_debug_file(&id)).flatten();
        let mut answered = false;
        if let (Some(p), Some(d)) = (&file, &debug) {
            answered = self.names_from_debug_file(&id, p, d, offsets, &mut resolved);
        }
        // What a readable debug file left unnamed, the file itself (whose
        // debug link, where followed, leads to the same DWARF) cannot name
        // either.
        if let Some(p) = file.as_ref().filter(|_| !answered) {
            let rest: Vec<usize> = (0..offsets.len())
                .filter(|&i| resolved[i].is_none())
                .collect();
            if !rest.is_empty() {
                let offs: Vec<u64> = rest.iter().map(|&i| offsets[i]).collect();
                match self.per_file.filter(|_| code_info) {
                    Some(inlined) => {
                        let lines = self.own_code_lines(&id, inlined, p, &offs);
                        for (i, f) in rest.into_iter().zip(lines) {
                            resolved[i] = f;
                        }
                    }
                    None => {
                        for (i, s) in rest.into_iter().zip(self.code_symbols(p, &offs)) {
                            resolved[i] = s.map(Found::Sym);
                        }
                        self.full_own_names(p, &mut resolved);
                    }
                }
            }
        }
        // A stripped file's names may sit in a debug file kept by build ID
        // (blazesym only follows .gnu_debuglink).
        if debug.is_none() && resolved.iter().any(Option::is_none) {
            if let Some(p) = &file {
                self.fill_from_debug_file(&id, p, offsets, &mut resolved);
            }
        }
        // A Go binary without symbols names its code from its own table.
        if let Some(p) = &file {
            self.go_file_frames(p, offsets, &mut resolved);
        }
        // The file found, else the one the side band saw mapped (the
        // process may have exited and the file be gone).
        let seen = || {
            let ms = self.index.by_build_id.get(&id)?;
            ms.first_path().map(Path::to_path_buf)
        };
        let why = if file.is_some() {
            Unnamed::NoSymbols
        } else {
            Unnamed::Gone
        };
        let path = file.as_ref().map(|f| f.path.clone()).or_else(seen);
        // Where the file came from, even if it could not be opened.
        let module = path.as_deref().map(module_name);
        let module_id = self.frames.module(Module::File {
            build_id: Some(id),
            key: None,
            go_build_id: None,
            path,
        });
        if resolved.iter().any(Option::is_none) {
            self.unnamed.entry(module_id).or_insert(why);
        }
        let keys: Vec<UserKey> = offsets
            .iter()
            .map(|&o| UserKey::File(id, tgid, o))
            .collect();
        self.place_file_frames(&keys, offsets, &resolved, module, module_id);
    }

    /// Frames at file offsets of the file with key `key` (a file without a
    /// build ID, or one whose table was not loaded yet) in process `tgid`;
    /// `frames`: each frame's key and offset. Named from the file kept open
    /// since its mapping was learned, else from the file now at its path
    /// while that is still the same file, never from another.
    pub(super) fn key_frames(&mut self, key: FileKey, tgid: u32, frames: &[(UserKey, u64)]) {
        let keys: Vec<UserKey> = frames.iter().map(|f| f.0).collect();
        let offsets: Vec<u64> = frames.iter().map(|f| f.1).collect();
        let mut resolved: Vec<Option<Found<'a>>> = vec![None; offsets.len()];
        let mapped = self.index.files.resolve(key, tgid);
        let elf = match &mapped {
            Some(m) => self.kept_file(m, tgid),
            None => Err(Unnamed::Gone),
        };
        let build_id = mapped.as_ref().and_then(|m| m.build_id());
        let mut go_build_id = None;
        if let Ok(f) = &elf {
            for (r, s) in resolved.iter_mut().zip(self.code_symbols(f, &offsets)) {
                *r = s.map(Found::Sym);
            }
            self.full_own_names(f, &mut resolved);
            let id = build_id.or_else(|| f.build_id());
            if let Some(id) = id.filter(|_| resolved.iter().any(Option::is_none)) {
                self.fill_from_debug_file(&id, f, &offsets, &mut resolved);
            }
            self.go_file_frames(f, &offsets, &mut resolved);
            go_build_id = f.go_build_id();
        }
        let path = mapped.as_ref().map(|m| m.path.clone());
        let module = path.as_deref().map(mapped_module_name);
        let module_id = self.frames.module(Module::File {
            build_id,
            key: Some(key),
            go_build_id,
            path,
        });
        if resolved.iter().any(Option::is_none) {
            let why = elf.err().unwrap_or(Unnamed::NoSymbols);
            self.unnamed.entry(module_id).or_insert(why);
        }
        self.place_file_frames(&keys, &offsets, &resolved, module, module_id);
    }

    /// The ELF file of record `m` (of process `tgid`'s mapping), checked:
    /// from the descriptor kept, else from its path if the file there is
    /// still the one mapped. Once per pass.
    fn kept_file(&mut self, m: &Arc<MappedFile>, tgid: u32) -> Result<Rc<ElfFile>, Unnamed> {
        let at = Arc::as_ptr(m) as usize;
        if let Some((_, r)) = self.kept.get(&at) {
            return r.clone();
        }
        let file = match m.reopen() {
            Some(f) => Ok(f),
            None => file_at_path(m, tgid),
        };
        let r = file.and_then(|f| {
            ElfFile::from_checked(m.path.clone(), f)
                .map(Rc::new)
                .map_err(|why| {
                    super::note_refused(&m.path, &why);
                    Unnamed::Unreadable(why)
                })
        });
        self.kept.insert(at, (m.clone(), r.clone()));
        r
    }

    /// Names the frames of one file (`resolved`, else `module`+offset),
    /// each under its key.
    fn place_file_frames(
        &mut self,
        keys: &[UserKey],
        offsets: &[u64],
        resolved: &[Option<Found<'a>>],
        module: Option<String>,
        module_id: u32,
    ) {
        for (i, &off) in offsets.iter().enumerate() {
            let key = keys[i];
            let frame = match (&resolved[i], &module) {
                (Some(Found::Sym(sym)), _) => self.names.of(Some(sym)),
                (Some(Found::Named(raw)), _) => self.names.raw(raw),
                (Some(Found::Lines(lines)), _) => self.names.lines(lines.clone()),
                (None, Some(m)) => {
                    self.unknown_keys.insert(key);
                    self.names.unknown(match self.style {
                        UnknownStyle::Offset => format!("{m}+{off:#x}"),
                        UnknownStyle::Module => format!("[{m}]"),
                    })
                }
                (None, None) => {
                    self.unknown_keys.insert(key);
                    self.names.of(None)
                }
            };
            let loc = self.frames.add(off, Some(module_id), frame);
            self.user_locs.insert(key, loc);
        }
    }

    /// The Go function table of `file`, read once per file.
    fn go_table(&mut self, file: &ElfFile) -> Option<Rc<GoTable>> {
        self.go_tables
            .entry(file.id)
            .or_insert_with(|| GoTable::open(file.reopen()?).map(Rc::new))
            .clone()
    }

    /// Names what blazesym left unnamed at `offsets` of `file` from its Go
    /// function table, if it is a Go binary.
    fn go_file_frames(
        &mut self,
        file: &ElfFile,
        offsets: &[u64],
        resolved: &mut [Option<Found<'a>>],
    ) {
        if resolved.iter().all(Option::is_some) {
            return;
        }
        let Some(table) = self.go_table(file) else {
            return;
        };
        for (r, &off) in resolved.iter_mut().zip(offsets) {
            if r.is_none() {
                *r = table
                    .frames_at_offset(off)
                    .map(|f| Found::Lines(go_lines(f)));
            }
        }
    }

    /// Whether the code information of the file with build ID `id`
    /// (`file`, or its debug file kept by build ID) fits what is left of the
    /// budget; takes it from the budget if so, else notes the file.
    fn within_budget(&mut self, id: &[u8; BUILD_ID_SIZE], file: Option<&ElfFile>) -> bool {
        let Some(f) = file else {
            return true;
        };
        let mut bytes = f.dwarf_bytes;
        if bytes == 0 {
            bytes = build_id_debug_file(id).map_or(0, |d| d.dwarf_bytes);
        }
        if bytes > self.dwarf_left {
            super::note_without_code_info(&f.path);
            return false;
        }
        self.dwarf_left -= bytes;
        true
    }

    /// The code symbols at `offsets` of `file`: data objects never name an
    /// address.
    fn code_symbols(&mut self, file: &ElfFile, offsets: &[u64]) -> Vec<Option<Symbolized<'a>>> {
        code_symbols_in(self.here, file, offsets)
    }

    /// What `code_symbols` and `full_own_names` give, through the
    /// symbolizer of file `id`'s own (see `per_file`), as owned lines.
    fn own_code_lines(
        &mut self,
        id: &[u8; BUILD_ID_SIZE],
        inlined: bool,
        file: &ElfFile,
        offsets: &[u64],
    ) -> Vec<Option<Found<'a>>> {
        if self.own.as_ref().is_none_or(|(k, _)| k != id) {
            // The last file's DWARF goes before the next is read.
            self.own = None;
        }
        let (_, own) = self
            .own
            .get_or_insert_with(|| (*id, super::symbolizer_with(true, inlined)));
        let own = &*own;
        let mut found: Vec<Option<Found<'_>>> = code_symbols_in(own, file, offsets)
            .into_iter()
            .map(|s| s.map(Found::Sym))
            .collect();
        full_own_names_in(self.symbolizer, file, &mut found);
        found
            .iter()
            .map(|f| match f {
                Some(Found::Sym(Symbolized::Sym(sym))) => Some(Found::Lines(sym_lines(sym))),
                _ => None,
            })
            .collect()
    }

    /// Fills what `path` left unnamed from its debug file, found by build
    /// ID on disk or from debuginfod.
    fn fill_from_debug_file(
        &mut self,
        id: &[u8; BUILD_ID_SIZE],
        file: &ElfFile,
        offsets: &[u64],
        resolved: &mut [Option<Found<'a>>],
    ) {
        let debug = build_id_debug_file(id)
            .or_else(|| self.debuginfod.as_mut().and_then(|c| c.debuginfo(id)));
        let Some(debug) = debug else {
            return;
        };
        let virt = file.virt_offsets(offsets);
        let wanted: Vec<(usize, u64)> = virt
            .iter()
            .enumerate()
            .filter(|(i, _)| resolved[*i].is_none())
            .filter_map(|(i, v)| Some((i, (*v)?)))
            .collect();
        let addrs: Vec<u64> = wanted.iter().map(|(_, v)| *v).collect();
        let found = debug.symbolize(self.here, Input::VirtOffset(&addrs));
        for ((i, _), s) in wanted.into_iter().zip(found) {
            if matches!(s, Symbolized::Sym(_)) {
                resolved[i] = Some(Found::Sym(s));
            }
        }
        self.full_own_names(&debug, resolved);
    }

    /// Functions found under a bare DWARF name get their symbol's name
    /// (see `full_own_names_in`).
    fn full_own_names(&self, file: &ElfFile, resolved: &mut [Option<Found<'a>>]) {
        full_own_names_in(self.symbolizer, file, resolved);
    }

    /// Names (no source lines) of `offsets` in `path` from its debug file
    /// `debug`: the functions named before from the per-boot cache, the
    /// rest from the debug file (and kept for next time). Data objects
    /// never name an address. Whether the debug file (or its cache) named
    /// anything: a file refused or unreadable names nothing.
    fn names_from_debug_file(
        &mut self,
        id: &[u8; BUILD_ID_SIZE],
        file: &ElfFile,
        debug: &ElfFile,
        offsets: &[u64],
        resolved: &mut [Option<Found<'a>>],
    ) -> bool {
        let named = |r: &[Option<Found<'a>>]| r.iter().filter(|f| f.is_some()).count();
        let named_before = named(resolved);
        let virt = file.virt_offsets(offsets);
        let cache_key = (*id, debug.id);
        let mut cache = match self.name_caches.remove(&cache_key) {
            Some(c) => c,
            None => namecache::NameCache::open(id, &debug.id),
        };
        // Named from the cache where it can; the addresses left, to ask for.
        let from_cache = |cache: &Option<namecache::NameCache>,
                          resolved: &mut [Option<Found<'a>>]| {
            let mut rest: Vec<(usize, u64)> = Vec::new();
            for (i, v) in virt.iter().enumerate() {
                let Some(v) = *v else { continue };
                if resolved[i].is_some() {
                    continue;
                }
                match cache.as_ref().and_then(|c| c.lookup(v)) {
                    Some(name) => resolved[i] = Some(Found::Named(name.to_string())),
                    None => rest.push((i, v)),
                }
            }
            rest
        };
        let mut wanted = from_cache(&cache, resolved);
        // Missed again: all the DWARF's functions are learned at once.
        if let Some(c) = cache
            .as_mut()
            .filter(|c| !wanted.is_empty() && c.wants_all())
        {
            c.learn_all(debug.functions());
            wanted = from_cache(&cache, resolved);
        }
        let mut answered = named(resolved) > named_before;
        if !wanted.is_empty() {
            let data = debug.data_symbols();
            let addrs: Vec<u64> = wanted.iter().map(|(_, v)| *v).collect();
            let mut found: Vec<Option<Found<'a>>> = debug
                .symbolize(self.here, Input::VirtOffset(&addrs))
                .into_iter()
                .map(|s| Some(Found::Sym(s)))
                .collect();
            answered |= !found.is_empty();
            self.full_own_names(debug, &mut found);
            let found = found.into_iter().filter_map(|f| match f {
                Some(Found::Sym(s)) => Some(s),
                _ => None,
            });
            for ((i, v), s) in wanted.into_iter().zip(found) {
                if let Symbolized::Sym(sym) = &s {
                    if data.contains(&sym.addr) {
                        continue;
                    }
                    if let Some(c) = cache.as_mut() {
                        c.learn(v, sym.addr, sym.size, &sym.name);
                    }
                    resolved[i] = Some(Found::Sym(s));
                }
            }
        }
        if let Some(c) = cache.as_mut() {
            c.save();
        }
        self.name_caches.insert(cache_key, cache);
        answered
    }

    /// Frames no file was known for: JIT code from the perf map / jitdump
    /// bprof opened safely (live and exited processes alike, see
    /// crate::jit), else the file the live process maps there,
    /// opened through its map_files link and checked like any other.
    pub(super) fn ip_frames(&mut self, pid: u32, ips: &[u64]) {
        self.here = self.symbolizer;
        let jit = self.index.jit.names(pid, ips);
        let live = target::alive(pid);
        let mut resolved = live.then(|| self.mapped_symbols(pid, ips));
        let anon = AnonExec::of(pid, live, self.index);
        // The vDSO where the process was seen mapping it (the walk's first
        // ms, before its table is in place), alive or not.
        if let Some((start, end)) = self.index.files.vdso_of(pid) {
            let own = crate::process::vdso::own().map(|v| v.image.len() as u64);
            let inside: Vec<usize> = (0..ips.len())
                .filter(|&i| ips[i] >= start && ips[i] < end)
                .filter(|&i| resolved.as_ref().is_none_or(|r| r[i].is_none()))
                .collect();
            if own == Some(end - start) && !inside.is_empty() {
                let offs: Vec<u64> = inside.iter().map(|&i| ips[i] - start).collect();
                let names = vdso::symbols(self.symbolizer, &offs);
                let r = resolved.get_or_insert_with(|| vec![None; ips.len()]);
                for (i, s) in inside.into_iter().zip(names) {
                    r[i] = s.map(Found::Sym);
                }
            }
        }
        for (i, &ip) in ips.iter().enumerate() {
            let found = resolved.as_ref().and_then(|r| r[i].as_ref());
            let in_jit = found.is_none() && (jit.contains_key(&ip) || anon.holds(ip));
            let frame = match (found, jit.get(&ip)) {
                (Some(Found::Sym(sym)), _) => self.names.of(Some(sym)),
                (Some(Found::Named(raw)), _) => self.names.raw(raw),
                (Some(Found::Lines(lines)), _) => self.names.lines(lines.clone()),
                // JIT code no perf map names: said as such, and the
                // summary says which runtime flag writes the map.
                (None, None) if in_jit => {
                    self.unknown_keys.insert(UserKey::Ip(pid, ip));
                    self.names.unknown(JIT.to_string())
                }
                (None, None) => {
                    self.unknown_keys.insert(UserKey::Ip(pid, ip));
                    self.names.of(None)
                }
                (None, Some(name)) => self.names.named(name),
            };
            let loc = self.frames.add(ip, None, frame);
            if in_jit {
                self.frames.jit.insert(loc);
            }
            self.user_locs.insert(UserKey::Ip(pid, ip), loc);
        }
    }

    /// The names at addresses `ips` of live process `pid`, from the files
    /// (and the vDSO) it maps there now: each opened through its
    /// `/proc/PID/map_files` link and used only if `fstat` shows the
    /// mapping's device and inode (the range was not remapped meanwhile);
    /// a Go binary's own function table names what its symbols do not.
    fn mapped_symbols(&mut self, pid: u32, ips: &[u64]) -> Vec<Option<Found<'a>>> {
        let mut out = vec![None; ips.len()];
        let maps = crate::process::maps::mappings(pid);
        let mut by_map: HashMap<usize, Vec<usize>> = HashMap::default();
        for (i, &ip) in ips.iter().enumerate() {
            if let Some(m) = maps.iter().position(|m| ip >= m.start && ip < m.end) {
                by_map.entry(m).or_default().push(i);
            }
        }
        for (m, idx) in by_map {
            let m = &maps[m];
            let offs: Vec<u64> = idx.iter().map(|&i| ips[i] - m.start + m.off).collect();
            let found: Vec<Option<Found<'a>>> = if m.path == "[vdso]" {
                let own = crate::process::vdso::own().map(|v| v.image.len() as u64);
                if own != Some(m.end - m.start) {
                    continue;
                }
                let offs: Vec<u64> = idx.iter().map(|&i| ips[i] - m.start).collect();
                vdso::symbols(self.symbolizer, &offs)
                    .into_iter()
                    .map(|s| s.map(Found::Sym))
                    .collect()
            } else if m.path.starts_with('/') {
                let key = (pid, m.start, m.end);
                let file = self
                    .mapped
                    .entry(key)
                    .or_insert_with(|| {
                        let c = crate::fsafe::open_mapped(pid, m.start, m.end, elfcheck::MAX_FILE)
                            .ok()?;
                        let meta = c.file.metadata().ok()?;
                        if (meta.dev(), meta.ino()) != (m.dev, m.ino) {
                            return None;
                        }
                        ElfFile::from_checked(PathBuf::from(&m.path), c.file)
                            .map_err(|why| super::note_refused(std::path::Path::new(&m.path), &why))
                            .ok()
                            .map(Rc::new)
                    })
                    .clone();
                let Some(f) = file else { continue };
                let mut found: Vec<Option<Found<'a>>> = self
                    .code_symbols(&f, &offs)
                    .into_iter()
                    .map(|s| s.map(Found::Sym))
                    .collect();
                self.full_own_names(&f, &mut found);
                self.go_file_frames(&f, &offs, &mut found);
                found
            } else {
                continue;
            };
            for (i, s) in idx.into_iter().zip(found) {
                out[i] = s;
            }
        }
        out
    }

    /// Frames as the samples show them: each stack's frames once per
    /// sample; and the unknown user frames by file, with why.
    pub(super) fn count_sampled(&mut self, raw: &[RawStack], unknown_kernel: &HashSet<u64>) {
        // Unknown sampled frames by module (None: no file).
        let mut by_module: HashMap<Option<u32>, u64> = HashMap::default();
        for s in raw {
            for k in user_keys(s) {
                self.names.stats.sampled_frames += s.count;
                if self.unknown_keys.contains(&k) {
                    self.names.stats.sampled_unknown += s.count;
                    let module = self
                        .user_locs
                        .get(&k)
                        .and_then(|&l| self.frames.locations[l as usize].module);
                    *by_module.entry(module).or_default() += s.count;
                }
            }
            for a in kernel_keys(s) {
                self.names.stats.sampled_frames += s.count;
                if unknown_kernel.contains(&a) {
                    self.names.stats.sampled_unknown += s.count;
                }
            }
        }
        let mut unnamed: Vec<UnnamedFile> = by_module
            .into_iter()
            .map(|(m, sampled)| {
                let path = m.and_then(|m| match &self.frames.modules[m as usize] {
                    Module::File { path, .. } => path.clone(),
                    Module::Kernel => None,
                });
                let why = match m {
                    Some(m) => self.unnamed.get(&m).cloned().unwrap_or(Unnamed::NoSymbols),
                    None => Unnamed::NoFile,
                };
                let module = path
                    .as_deref()
                    .map_or_else(|| UNKNOWN.to_string(), mapped_module_name);
                UnnamedFile {
                    module,
                    path,
                    why,
                    sampled,
                }
            })
            .collect();
        unnamed.sort_by(|a, b| b.sampled.cmp(&a.sampled).then(a.module.cmp(&b.module)));
        self.names.stats.unnamed = unnamed;
    }

    pub(super) fn stacks(
        &self,
        raw: &[RawStack],
        kernel_locs: &HashMap<u64, u32>,
        py: &crate::pyframes::merge::PyLocations,
    ) -> Vec<Stack> {
        let names_of = |locs: &[u32]| self.names_of(locs, py);
        raw.iter()
            .map(|s| {
                let kernel_locs: Vec<u32> = kernel_keys(s).map(|k| kernel_locs[&k]).collect();
                let user_locs: Vec<u32> = user_keys(s).map(|k| self.user_locs[&k]).collect();
                let user_locs = self.merge_python(s, user_locs, py);
                Stack {
                    tgid: s.tgid,
                    tid: s.tid,
                    cgroup: s.cgroup,
                    comm: crate::names::clean(&s.comm).into_owned(),
                    kernel: names_of(&kernel_locs),
                    user: names_of(&user_locs),
                    kernel_lost: s.kernel_lost,
                    user_lost: s.user_lost,
                    off_cpu: s.off_cpu,
                    count: s.count,
                    kernel_locs,
                    user_locs,
                }
            })
            .collect()
    }
}

/// The most DWARF one symbolization reads for source lines and inlined
/// functions (decompressed), files with the most samples first: reading it
/// costs time and memory in proportion (BENCHMARKS.md); files past it are
/// named without them, said once.
pub(crate) const MAX_CODE_INFO_DWARF: u64 = 128 << 20;

/// Shown for a frame in anonymous executable memory that no perf map or
/// jitdump names: JIT code.
pub(crate) const JIT: &str = "[jit]";

/// Where a process keeps anonymous executable memory (JIT code): its live
/// mappings, or, once it exited, whether it mapped any during the profile.
enum AnonExec {
    Ranges(Vec<(u64, u64)>),
    Seen(bool),
}

impl AnonExec {
    fn of(pid: u32, live: bool, index: &MmapIndex) -> AnonExec {
        if !live {
            return AnonExec::Seen(index.jit.mapped_anon_exec(pid));
        }
        let ranges = crate::process::maps::mappings(pid)
            .into_iter()
            .filter(|m| {
                m.path.is_empty() || m.path.starts_with("[anon") || m.path.starts_with("/memfd:")
            })
            .map(|m| (m.start, m.end))
            .collect();
        AnonExec::Ranges(ranges)
    }

    fn holds(&self, ip: u64) -> bool {
        match self {
            AnonExec::Ranges(r) => r.iter().any(|&(a, b)| (a..b).contains(&ip)),
            AnonExec::Seen(seen) => *seen,
        }
    }
}

/// The code symbols at `offsets` of `file` through `symbolizer`: data
/// objects never name an address.
fn code_symbols_in<'s>(
    symbolizer: &'s Symbolizer,
    file: &ElfFile,
    offsets: &[u64],
) -> Vec<Option<Symbolized<'s>>> {
    let data = file.data_symbols();
    file.symbolize(symbolizer, Input::FileOffset(offsets))
        .into_iter()
        .map(|s| match s {
            Symbolized::Sym(sym) if data.contains(&sym.addr) => None,
            Symbolized::Sym(sym) => Some(Symbolized::Sym(sym)),
            Symbolized::Unknown(_) => None,
        })
        .collect()
}

/// Gives each function found by its DWARF under a bare name (no scope,
/// no parameters) the name of its symbol in `file`, the file that named
/// it (read through `symtab`): a function's own frame reads as perf shows
/// it (inlined frames have no symbol and keep DWARF's names).
fn full_own_names_in(symtab: &Symbolizer, file: &ElfFile, resolved: &mut [Option<Found<'_>>]) {
    let bare: Vec<(usize, u64)> = resolved
        .iter()
        .enumerate()
        .filter_map(|(i, f)| match f {
            Some(Found::Sym(Symbolized::Sym(s))) if is_bare_name(&s.name) => Some((i, s.addr)),
            _ => None,
        })
        .collect();
    if bare.is_empty() {
        return;
    }
    let addrs: Vec<u64> = bare.iter().map(|&(_, a)| a).collect();
    let names = file.symtab_names(symtab, &addrs);
    for ((i, _), name) in bare.into_iter().zip(names) {
        if let (Some(name), Some(Found::Sym(Symbolized::Sym(s)))) = (name, &mut resolved[i]) {
            if symtab_names_it(&s.name, &name) {
                s.name = name.into();
            }
        }
    }
}

/// A function's frame lines (leaf first: its inlined callees, then itself).
fn sym_lines(sym: &blazesym::symbolize::Sym<'_>) -> Vec<FrameLine> {
    // blazesym lists inlined callees outermost first; we go leaf first.
    let mut v: Vec<FrameLine> = sym
        .inlined
        .iter()
        .rev()
        .map(|f| symbol_line(&f.name, f.code_info.as_ref()))
        .collect();
    v.push(symbol_line(&sym.name, sym.code_info.as_deref()));
    v
}

/// Turns one symbolization result into frame names (leaf first) and keeps
/// the unknown count.
#[derive(Default)]
pub(super) struct Names {
    pub(super) stats: SymbolStats,
}

impl Names {
    /// A frame no symbol names, shown as `text`.
    pub(super) fn unknown(&mut self, text: String) -> Vec<FrameLine> {
        self.stats.unique_frames += 1;
        self.stats.unknown_frames += 1;
        vec![plain_line(text)]
    }

    /// A function known by its symbol-table name alone.
    pub(super) fn raw(&mut self, raw: &str) -> Vec<FrameLine> {
        self.stats.unique_frames += 1;
        vec![symbol_line(raw, None)]
    }

    /// A function (and the calls inlined there) known by its lines.
    pub(super) fn lines(&mut self, lines: Vec<FrameLine>) -> Vec<FrameLine> {
        self.stats.unique_frames += 1;
        lines
    }

    pub(super) fn named(&mut self, name: &str) -> Vec<FrameLine> {
        self.stats.unique_frames += 1;
        vec![plain_line(name.to_string())]
    }

    pub(super) fn of(&mut self, sym: Option<&Symbolized<'_>>) -> Vec<FrameLine> {
        self.stats.unique_frames += 1;
        match sym {
            Some(Symbolized::Sym(sym)) => sym_lines(sym),
            _ => {
                self.stats.unknown_frames += 1;
                vec![plain_line(UNKNOWN.to_string())]
            }
        }
    }
}

/// A Go table's frames as frame lines (innermost first, as they come).
fn go_lines(frames: Vec<gopclntab::GoFrame>) -> Vec<FrameLine> {
    frames
        .into_iter()
        .map(|f| FrameLine {
            name: f.name.as_str().into(),
            system_name: f.name,
            file: f.file,
            line: f.line,
        })
        .collect()
}

/// The file now at record `m`'s path (inside the root of process `tgid`
/// while it lives, for a path as the process named it), if it is still the
/// file that was mapped (see MappedFile::same_as).
fn file_at_path(m: &MappedFile, tgid: u32) -> Result<std::fs::File, Unnamed> {
    use crate::fsafe::{open_untrusted, open_untrusted_in_root, Owner, Refused};
    let rel = m.path.strip_prefix("/").unwrap_or(&m.path);
    let opened = if m.in_root && target::alive(tgid) {
        let root = PathBuf::from(format!("/proc/{tgid}/root"));
        open_untrusted_in_root(&root, rel, Owner::Any, elfcheck::MAX_FILE)
    } else {
        open_untrusted(&m.path, Owner::Any, elfcheck::MAX_FILE)
    };
    let c = opened.map_err(|e| match e {
        Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound => Unnamed::Gone,
        e => Unnamed::Unreadable(e.to_string()),
    })?;
    let meta = c
        .file
        .metadata()
        .map_err(|e| Unnamed::Unreadable(e.to_string()))?;
    if m.same_as(&meta) {
        Ok(c.file)
    } else {
        Err(Unnamed::Changed)
    }
}
