//! User frames: one pass names every distinct (file, offset) and address
//! of a profile's stacks (blazesym, debug files kept by build ID, the
//! per-boot name cache, JIT symbol files), then builds the named stacks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;

use super::files::{
    build_id_debug_file, data_symbols, dwarf_functions, is_bare_name, module_name, symbolize_file,
    symtab_names, symtab_names_it, virt_offsets,
};
use super::gopclntab;
use super::{
    kernel_keys, namecache, plain_line, symbol_line, user_keys, vdso, FrameLine, Frames, Module,
    Stack, SymbolStats, UnknownStyle, UserKey, UNKNOWN,
};
use crate::collect::sideband::MmapIndex;
use crate::collect::stacks::{RawStack, BUILD_ID_SIZE};
use crate::fasthash::{HashMap, HashSet};
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

/// Which file a Go table was read from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum GoFile {
    Path(PathBuf),
    Inode(u64, u64),
}

/// One symbolization: names and locations found so far, and what stayed
/// unknown.
pub(super) struct Pass<'a> {
    pub(super) symbolizer: &'a Symbolizer,
    pub(super) code_info: bool,
    pub(super) index: &'a MmapIndex,
    pub(super) style: UnknownStyle,
    pub(super) names: Names,
    pub(super) frames: Frames,
    pub(super) unknown_keys: HashSet<UserKey>,
    pub(super) user_locs: HashMap<UserKey, u32>,
    pub(super) debuginfod: Option<crate::symbolize::debuginfod::Client>,
    /// Data symbols per file, parsed once however many processes map it.
    pub(super) data_cache: HashMap<PathBuf, std::rc::Rc<std::collections::HashSet<u64>>>,
    /// Go function tables, by the file's path, or by device and inode for
    /// live processes' mappings (one file mapped by many processes is read
    /// once); `None`: not a Go binary.
    pub(super) go_tables: HashMap<GoFile, Option<std::rc::Rc<GoTable>>>,
}

impl<'a> Pass<'a> {
    /// Frames at `offsets` of the file with build ID `id`, as mapped by
    /// `tgid` (`path`: where it was found, if anywhere).
    pub(super) fn file_frames(
        &mut self,
        id: [u8; BUILD_ID_SIZE],
        tgid: u32,
        path: Option<PathBuf>,
        offsets: &[u64],
    ) {
        let mut resolved: Vec<Option<Found<'a>>> = vec![None; offsets.len()];
        if path.is_none() && vdso::is_vdso(&id) {
            let names = vdso::symbols(self.symbolizer, offsets);
            for (r, s) in resolved.iter_mut().zip(names) {
                *r = s.map(Found::Sym);
            }
            let module_id = self.frames.module(Module::File {
                build_id: id,
                path: Some(PathBuf::from("[vdso]")),
            });
            return self.place_file_frames(
                id,
                tgid,
                offsets,
                &resolved,
                Some("[vdso]".into()),
                module_id,
            );
        }
        // Names only: a debug file kept by build ID first, through the
        // per-boot cache of the functions it named before (its DWARF is what
        // the file itself would lead blazesym to, by .gnu_debuglink).
        let debug = (!self.code_info)
            .then(|| build_id_debug_file(&id))
            .flatten();
        let mut answered = false;
        if let (Some(p), Some(d)) = (&path, &debug) {
            answered = self.names_from_debug_file(&id, p, d, offsets, &mut resolved);
        }
        // What a readable debug file left unnamed, the file itself (whose
        // debug link leads blazesym to the same DWARF) cannot name either.
        if let Some(p) = path.as_ref().filter(|_| !answered) {
            let rest: Vec<usize> = (0..offsets.len())
                .filter(|&i| resolved[i].is_none())
                .collect();
            if !rest.is_empty() {
                let offs: Vec<u64> = rest.iter().map(|&i| offsets[i]).collect();
                for (i, s) in rest.into_iter().zip(self.code_symbols(p, &offs)) {
                    resolved[i] = s.map(Found::Sym);
                }
                self.full_own_names(p, &mut resolved);
            }
        }
        // A stripped file's names may sit in a debug file kept by build ID
        // (blazesym only follows .gnu_debuglink).
        if debug.is_none() && resolved.iter().any(Option::is_none) {
            if let Some(p) = &path {
                self.fill_from_debug_file(&id, p, offsets, &mut resolved);
            }
        }
        // A Go binary without symbols names its code from its own table.
        if let Some(p) = path
            .as_ref()
            .filter(|_| resolved.iter().any(Option::is_none))
        {
            self.go_file_frames(p, offsets, &mut resolved);
        }
        // The file found, else the one the side band saw mapped (the
        // process may have exited and the file be gone).
        let seen = self
            .index
            .by_build_id
            .get(&id)
            .and_then(|ms| ms.iter().map(|m| m.path.clone()).min());
        let file = path.or(seen);
        // Where the file came from, even if it could not be opened.
        let module = file.as_deref().map(module_name);
        let module_id = self.frames.module(Module::File {
            build_id: id,
            path: file,
        });
        self.place_file_frames(id, tgid, offsets, &resolved, module, module_id);
    }

    /// Names the frames of one file (`resolved`, else `module`+offset).
    fn place_file_frames(
        &mut self,
        id: [u8; BUILD_ID_SIZE],
        tgid: u32,
        offsets: &[u64],
        resolved: &[Option<Found<'a>>],
        module: Option<String>,
        module_id: u32,
    ) {
        for (i, &off) in offsets.iter().enumerate() {
            let key = UserKey::File(id, tgid, off);
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

    /// The Go function table of the file at `path`, opened once: the file
    /// was checked as one this process may be named from; a regular file.
    fn go_table(&mut self, path: &Path) -> Option<std::rc::Rc<GoTable>> {
        self.go_tables
            .entry(GoFile::Path(path.to_path_buf()))
            .or_insert_with(|| {
                let checked =
                    crate::fsafe::open_untrusted(path, crate::fsafe::Owner::Any, 1 << 32).ok()?;
                GoTable::open(checked.file).map(std::rc::Rc::new)
            })
            .clone()
    }

    /// Names what blazesym left unnamed at `offsets` of `path` from its Go
    /// function table, if it is a Go binary.
    fn go_file_frames(&mut self, path: &Path, offsets: &[u64], resolved: &mut [Option<Found<'a>>]) {
        let Some(table) = self.go_table(path) else {
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

    /// The Go frames at `ips` of live process `pid`: each address's mapping
    /// in /proc/PID/maps, its file opened through `/proc/PID/map_files` (the
    /// file the process mapped, wherever it is) and checked by `fstat` to be
    /// that mapping's.
    fn go_process_frames(&mut self, pid: u32, ips: &[u64]) -> HashMap<u64, Vec<FrameLine>> {
        let mut out = HashMap::default();
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return out;
        };
        let mappings: Vec<MappedFile> = maps.lines().filter_map(MappedFile::parse).collect();
        for &ip in ips {
            let Some(m) = mappings.iter().find(|m| ip >= m.start && ip < m.end) else {
                continue;
            };
            let link = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
            let table = self
                .go_tables
                .entry(GoFile::Inode(m.dev, m.ino))
                .or_insert_with(|| GoTable::open(m.open(&link)?).map(std::rc::Rc::new))
                .clone();
            if let Some(f) = table.and_then(|t| t.frames_at_offset(ip - m.start + m.offset)) {
                out.insert(ip, go_lines(f));
            }
        }
        out
    }

    /// The code symbols at `offsets` of `path`: data objects never name an
    /// address.
    fn code_symbols(&mut self, path: &Path, offsets: &[u64]) -> Vec<Option<Symbolized<'a>>> {
        let data = self
            .data_cache
            .entry(path.to_path_buf())
            .or_insert_with(|| data_symbols(path));
        symbolize_file(self.symbolizer, path, Input::FileOffset(offsets))
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) if data.contains(&sym.addr) => None,
                Symbolized::Sym(sym) => Some(Symbolized::Sym(sym)),
                Symbolized::Unknown(_) => None,
            })
            .collect()
    }

    /// Fills what `path` left unnamed from its debug file, found by build
    /// ID on disk or from debuginfod.
    fn fill_from_debug_file(
        &mut self,
        id: &[u8; BUILD_ID_SIZE],
        path: &Path,
        offsets: &[u64],
        resolved: &mut [Option<Found<'a>>],
    ) {
        let debug = build_id_debug_file(id)
            .or_else(|| self.debuginfod.as_mut().and_then(|c| c.debuginfo(id)));
        let Some(debug) = debug else {
            return;
        };
        let virt = virt_offsets(path, offsets);
        let wanted: Vec<(usize, u64)> = virt
            .iter()
            .enumerate()
            .filter(|(i, _)| resolved[*i].is_none())
            .filter_map(|(i, v)| Some((i, (*v)?)))
            .collect();
        let addrs: Vec<u64> = wanted.iter().map(|(_, v)| *v).collect();
        let found = symbolize_file(self.symbolizer, &debug, Input::VirtOffset(&addrs));
        for ((i, _), s) in wanted.into_iter().zip(found) {
            if matches!(s, Symbolized::Sym(_)) {
                resolved[i] = Some(Found::Sym(s));
            }
        }
        self.full_own_names(&debug, resolved);
    }

    /// Gives each function found by its DWARF under a bare name (no scope,
    /// no parameters) the name of its symbol in `path`, the file that
    /// named it: a function's own frame reads as perf shows it (inlined
    /// frames have no symbol and keep DWARF's names).
    fn full_own_names(&self, path: &Path, resolved: &mut [Option<Found<'a>>]) {
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
        let names = symtab_names(self.symbolizer, path, &addrs);
        for ((i, _), name) in bare.into_iter().zip(names) {
            if let (Some(name), Some(Found::Sym(Symbolized::Sym(s)))) = (name, &mut resolved[i]) {
                if symtab_names_it(&s.name, &name) {
                    s.name = name.into();
                }
            }
        }
    }

    /// Names (no source lines) of `offsets` in `path` from its debug file
    /// `debug`: the functions named before from the per-boot cache, the
    /// rest from the debug file (and kept for next time). Data objects
    /// never name an address. Whether the debug file (or its cache) named
    /// anything: a file refused or unreadable names nothing.
    fn names_from_debug_file(
        &mut self,
        id: &[u8; BUILD_ID_SIZE],
        path: &Path,
        debug: &Path,
        offsets: &[u64],
        resolved: &mut [Option<Found<'a>>],
    ) -> bool {
        let named = |r: &[Option<Found<'a>>]| r.iter().filter(|f| f.is_some()).count();
        let named_before = named(resolved);
        let virt = virt_offsets(path, offsets);
        let mut cache = namecache::NameCache::open(id, debug);
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
            c.learn_all(dwarf_functions(debug));
            wanted = from_cache(&cache, resolved);
        }
        let mut answered = named(resolved) > named_before;
        if !wanted.is_empty() {
            let data = self
                .data_cache
                .entry(debug.to_path_buf())
                .or_insert_with(|| data_symbols(debug))
                .clone();
            let addrs: Vec<u64> = wanted.iter().map(|(_, v)| *v).collect();
            let mut found: Vec<Option<Found<'a>>> =
                symbolize_file(self.symbolizer, debug, Input::VirtOffset(&addrs))
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
        if let Some(c) = &cache {
            c.save();
        }
        answered
    }

    /// Frames no file was known for: JIT code from the perf map / jitdump
    /// bprof opened safely (live and exited processes alike, see
    /// crate::symbolize::jit), else the live process's own mappings.
    pub(super) fn ip_frames(&mut self, pid: u32, ips: &[u64]) {
        let jit = self.index.jit.names(pid, ips);
        let resolved = target::alive(pid).then(|| {
            // Files only: blazesym would open /tmp/perf-PID.map as root
            // with none of bprof's checks.
            let src = Source::Process(Process {
                perf_map: false,
                ..Process::new(Pid::from(pid))
            });
            self.symbolizer
                .symbolize(&src, Input::AbsAddr(ips))
                .unwrap_or_default()
        });
        // Go binaries without symbols: their own function tables.
        let unnamed: Vec<u64> = ips
            .iter()
            .enumerate()
            .filter(|&(i, ip)| {
                !jit.contains_key(ip)
                    && !matches!(
                        resolved.as_ref().and_then(|r| r.get(i)),
                        Some(Symbolized::Sym(_))
                    )
            })
            .map(|(_, &ip)| ip)
            .collect();
        let go = if resolved.is_some() && !unnamed.is_empty() {
            self.go_process_frames(pid, &unnamed)
        } else {
            HashMap::default()
        };
        for (i, &ip) in ips.iter().enumerate() {
            let sym = resolved.as_ref().and_then(|r| r.get(i));
            let frame = match (sym, jit.get(&ip)) {
                (Some(Symbolized::Sym(_)), _) => self.names.of(sym),
                (_, None) if go.contains_key(&ip) => self.names.lines(go[&ip].clone()),
                (_, None) => {
                    self.unknown_keys.insert(UserKey::Ip(pid, ip));
                    self.names.of(sym)
                }
                (_, Some(name)) => self.names.named(name),
            };
            let loc = self.frames.add(ip, None, frame);
            self.user_locs.insert(UserKey::Ip(pid, ip), loc);
        }
    }

    /// Frames as the samples show them: each stack's frames once per sample.
    pub(super) fn count_sampled(&mut self, raw: &[RawStack], unknown_kernel: &HashSet<u64>) {
        for s in raw {
            let user = user_keys(s).map(|k| self.unknown_keys.contains(&k));
            let kernel = kernel_keys(s).map(|a| unknown_kernel.contains(&a));
            for unknown in user.chain(kernel) {
                self.names.stats.sampled_frames += s.count;
                if unknown {
                    self.names.stats.sampled_unknown += s.count;
                }
            }
        }
    }

    pub(super) fn stacks(&self, raw: &[RawStack], kernel_locs: &HashMap<u64, u32>) -> Vec<Stack> {
        let names_of = |locs: &[u32]| -> Vec<Arc<str>> {
            locs.iter()
                .flat_map(|&l| self.frames.locations[l as usize].lines.iter())
                .map(|l| l.name.clone())
                .collect()
        };
        raw.iter()
            .map(|s| {
                let kernel_locs: Vec<u32> = kernel_keys(s).map(|k| kernel_locs[&k]).collect();
                let user_locs: Vec<u32> = user_keys(s).map(|k| self.user_locs[&k]).collect();
                Stack {
                    tgid: s.tgid,
                    tid: s.tid,
                    cgroup: s.cgroup,
                    comm: s.comm.clone(),
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
            Some(Symbolized::Sym(sym)) => {
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

/// A file mapping of a live process, as /proc/PID/maps lists it.
struct MappedFile {
    start: u64,
    end: u64,
    offset: u64,
    dev: u64,
    ino: u64,
}

impl MappedFile {
    /// A line of /proc/PID/maps: `start-end perms offset major:minor inode
    /// path`, for executable file mappings only.
    fn parse(line: &str) -> Option<MappedFile> {
        let mut w = line.split_whitespace();
        let (start, end) = w.next()?.split_once('-')?;
        let perms = w.next()?;
        let offset = u64::from_str_radix(w.next()?, 16).ok()?;
        let (major, minor) = w.next()?.split_once(':')?;
        let ino: u64 = w.next()?.parse().ok()?;
        if !perms.contains('x') || ino == 0 {
            return None;
        }
        Some(MappedFile {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            offset,
            dev: libc::makedev(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
            ),
            ino,
        })
    }

    /// Opens the mapped file through its `/proc/PID/map_files` entry: a
    /// magic link, so without `O_NOFOLLOW` (which fails on it), and only if
    /// `fstat` shows a regular file with the mapping's device and inode.
    fn open(&self, map_file: &Path) -> Option<std::fs::File> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(map_file)
            .ok()?;
        let meta = file.metadata().ok()?;
        (meta.file_type().is_file() && meta.dev() == self.dev && meta.ino() == self.ino)
            .then_some(file)
    }
}
