//! User frames: one pass names every distinct (file, offset) and address
//! of a profile's stacks (blazesym, debug files kept by build ID, the
//! per-boot name cache, JIT symbol files), then builds the named stacks.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use super::files::{build_id_debug_file, module_name, ElfFile};
use super::{
    elfcheck, kernel_keys, namecache, plain_line, symbol_line, user_keys, vdso, FrameLine, Frames,
    Module, Stack, SymbolStats, UnknownStyle, UserKey, UNKNOWN,
};
use crate::bpf::stacks::{RawStack, BUILD_ID_SIZE};
use crate::collect::sideband::MmapIndex;
use crate::fasthash::{HashMap, HashSet};
use crate::target;

/// What named a user frame: blazesym, or the per-boot name cache.
#[derive(Clone)]
enum Found<'a> {
    Sym(Symbolized<'a>),
    Named(String),
}

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
}

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
                for (i, s) in rest.into_iter().zip(self.code_symbols(p, &offs)) {
                    resolved[i] = s.map(Found::Sym);
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
        // The file found, else the one the side band saw mapped (the
        // process may have exited and the file be gone).
        let seen = self
            .index
            .by_build_id
            .get(&id)
            .and_then(|ms| ms.iter().map(|m| m.path.clone()).min());
        let file = file.map(|f| f.path.clone()).or(seen);
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
        let data = file.data_symbols();
        file.symbolize(self.here, Input::FileOffset(offsets))
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
        let mut cache = namecache::NameCache::open(id, &debug.id);
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
            let found = debug.symbolize(self.here, Input::VirtOffset(&addrs));
            answered |= !found.is_empty();
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
    /// crate::jit), else the file the live process maps there,
    /// opened through its map_files link and checked like any other.
    pub(super) fn ip_frames(&mut self, pid: u32, ips: &[u64]) {
        self.here = self.symbolizer;
        let jit = self.index.jit.names(pid, ips);
        let live = target::alive(pid);
        let resolved = live.then(|| self.mapped_symbols(pid, ips));
        let anon = AnonExec::of(pid, live, self.index);
        for (i, &ip) in ips.iter().enumerate() {
            let sym = resolved.as_ref().and_then(|r| r[i].as_ref());
            let in_jit = sym.is_none() && (jit.contains_key(&ip) || anon.holds(ip));
            let frame = match (sym, jit.get(&ip)) {
                (Some(sym), _) => self.names.of(Some(sym)),
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

    /// The symbols at addresses `ips` of live process `pid`, from the files
    /// (and the vDSO) it maps there now.
    fn mapped_symbols(&mut self, pid: u32, ips: &[u64]) -> Vec<Option<Symbolized<'a>>> {
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
            let found: Vec<Option<Symbolized<'a>>> = if m.path == "[vdso]" {
                let own = crate::process::vdso::own().map(|v| v.image.len() as u64);
                if own != Some(m.end - m.start) {
                    continue;
                }
                let offs: Vec<u64> = idx.iter().map(|&i| ips[i] - m.start).collect();
                vdso::symbols(self.symbolizer, &offs)
            } else if m.path.starts_with('/') {
                let key = (pid, m.start, m.end);
                let file = self
                    .mapped
                    .entry(key)
                    .or_insert_with(|| {
                        let c = crate::fsafe::open_mapped(pid, m.start, m.end, elfcheck::MAX_FILE)
                            .ok()?;
                        ElfFile::from_checked(PathBuf::from(&m.path), c.file)
                            .map_err(|why| super::note_refused(std::path::Path::new(&m.path), &why))
                            .ok()
                            .map(Rc::new)
                    })
                    .clone();
                match file {
                    Some(f) => self.code_symbols(&f, &offs),
                    None => continue,
                }
            } else {
                continue;
            };
            for (i, s) in idx.into_iter().zip(found) {
                out[i] = s;
            }
        }
        out
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
