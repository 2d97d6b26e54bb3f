//! Symbols: turning kernel addresses and (build ID or file key, file
//! offset) frames into function names with blazesym, each unique address
//! once.
//!
//! User frames are symbolized from the files themselves, found through their
//! build IDs, so a process that exited during the profile keeps its names.
//! A file without a build ID (Go's default, BOLTed libraries, code linked
//! `--build-id=none`) is named by its key (device and inode) from the file
//! bprof opened as the process mapped it and kept (crate::process::mapped),
//! or, not kept, from the file at its path only while that is still the
//! same file; raw addresses (`--call-graph fp`) are mapped back to their
//! files through the mappings recorded per process. Only frames no file
//! was ever known for (JIT code) need the live process (`/proc/PID/maps`,
//! perf-PID.map).
//!
//! Names read as `c++filt -i`, perf and gdb print them: C++ symbols are
//! demangled by cpp_demangle with the fixes in `vendor/cpp_demangle/
//! PATCHES.md` (every libstdc++ symbol is compared with c++filt in the unit
//! tests); a function's own frame takes its symbol's full name where DWARF
//! gives a bare one (no scope, no parameters: DWARF without linkage names,
//! as clang's `-gsce` writes it). A Go binary without `.symtab` (`go build
//! -ldflags='-s -w'`) is named from its own function table, `.gopclntab`
//! (see [`gopclntab`]), which perf cannot read.

pub(crate) mod bpfsyms;
pub mod buildid;
#[cfg(test)]
mod cxxfilt_corpus;
pub(crate) mod debuginfod;
pub(crate) mod elfcheck;
mod files;
pub(crate) mod gopclntab;
pub(crate) mod kallsyms;
mod kernel;
mod namecache;
mod python;
mod user;
pub(crate) mod vdso;

use std::path::PathBuf;
use std::sync::Arc;

use blazesym::symbolize::{Symbolized, Symbolizer};

use crate::bpf::stacks::{FileKey, RawStack, UserFrame, BUILD_ID_SIZE};
use crate::collect::sideband::MmapIndex;
use crate::fasthash::{HashMap, HashSet};
use crate::symbolize::buildid::FileFinder;

pub(crate) use files::{note_refused, skipped_sections};
pub use files::{refused_files, symbolize_file};

/// Files named without source lines and inlined functions because the
/// DWARF budget of their symbolization ran out (see
/// `user::MAX_CODE_INFO_DWARF`), each once.
static WITHOUT_CODE_INFO: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn note_without_code_info(path: &std::path::Path) {
    let mut v = WITHOUT_CODE_INFO.lock().unwrap_or_else(|e| e.into_inner());
    if v.len() < 64 && !v.iter().any(|p| p == path) {
        v.push(path.to_path_buf());
    }
}

/// The files named without inlined functions for want of DWARF budget.
pub(crate) fn without_code_info() -> Vec<PathBuf> {
    WITHOUT_CODE_INFO
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}
use kernel::symbolize_kernel;
pub(crate) use kernel::{is_bpf_frame, kernel_function_range, kernel_names, kernel_text_range};
pub(crate) use user::MAX_CODE_INFO_DWARF;

/// Shown for a frame no source could name, as perf and bcc do.
pub const UNKNOWN: &str = "[unknown]";

/// A symbolized stack, ready for the outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// cgroup v2 id (0: unknown).
    pub cgroup: u64,
    /// Thread name.
    pub comm: String,
    /// Kernel function names, leaf first (inlined frames included); shared
    /// with the frame's [`FrameLine`]: a copy per frame of each stack was ~1
    /// ms of a 12 s profile.
    pub kernel: Vec<Arc<str>>,
    /// User function names, leaf first (inlined frames included).
    pub user: Vec<Arc<str>>,
    /// The kernel stack was lost (map full or collision).
    pub kernel_lost: bool,
    /// The user stack was lost (map full or collision).
    pub user_lost: bool,
    /// Off-CPU time rather than on-CPU samples.
    pub off_cpu: bool,
    /// Samples, or microseconds for off-CPU and `--wall` profiles.
    pub count: u64,
    /// The kernel frames as locations in `Frames`, leaf first; their
    /// lines, in order, are `kernel`.
    pub kernel_locs: Vec<u32>,
    /// The user frames as locations in `Frames`, leaf first; their lines,
    /// in order, are `user`.
    pub user_locs: Vec<u32>,
}

/// Where a location's address lies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Module {
    /// The kernel (and its modules): addresses are kernel addresses.
    Kernel,
    /// An ELF file: addresses are offsets into it.
    File {
        /// The build ID the kernel recorded (zero-padded), or the file's
        /// own where known.
        build_id: Option<[u8; BUILD_ID_SIZE]>,
        /// For a file without a build ID: its key (device and inode as the
        /// kernel names it).
        key: Option<FileKey>,
        /// A Go binary's own build ID (`.note.go.buildid`), where it has one.
        go_build_id: Option<String>,
        /// The file bprof found for it, else the path it was mapped from,
        /// if known (an exited process's file may be gone; its build ID
        /// still names it).
        path: Option<PathBuf>,
    },
}

/// One function of a location, inlined ones included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FrameLine {
    /// The name as outputs show it (demangled). Shared: each stack holding
    /// the frame holds it (see [`Stack`]).
    pub name: Arc<str>,
    /// The name in the symbol table (mangled), or `name`.
    pub system_name: String,
    /// The source file, where debug information says it.
    pub file: Option<String>,
    /// The source line, 0 when unknown.
    pub line: u32,
}

/// One distinct address of a profile and what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    /// Kernel address, file offset (in a [`Module::File`]) or the virtual
    /// address of anonymous code; return addresses moved back into the call.
    pub address: u64,
    /// Index into [`Frames::modules`]; `None` for anonymous memory (JIT).
    pub module: Option<u32>,
    /// Innermost function first (inlined callees, then their caller).
    pub lines: Vec<FrameLine>,
}

/// The locations and modules the stacks of one symbolization refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Frames {
    /// Every location, indexed by [`Stack::kernel_locs`] and
    /// [`Stack::user_locs`].
    pub locations: Vec<Location>,
    /// Every module a location lies in.
    pub modules: Vec<Module>,
    /// The locations no symbol named (`[unknown]`, `module+0xOFFSET`,
    /// `[jit]`).
    pub unknown: HashSet<u32>,
    /// The locations in JIT code: named from a perf map or jitdump, or
    /// anonymous executable memory without one (`[jit]`).
    pub jit: HashSet<u32>,
}

impl Frames {
    fn module(&mut self, m: Module) -> u32 {
        match self.modules.iter().position(|x| *x == m) {
            Some(i) => i as u32,
            None => {
                self.modules.push(m);
                (self.modules.len() - 1) as u32
            }
        }
    }

    pub(super) fn add(&mut self, address: u64, module: Option<u32>, lines: Vec<FrameLine>) -> u32 {
        self.locations.push(Location {
            address,
            module,
            lines,
        });
        (self.locations.len() - 1) as u32
    }
}

/// Why a file's frames were not named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Unnamed {
    /// The file was read, but no symbol covers the addresses.
    NoSymbols,
    /// Another file is at its path now (replaced or rebuilt since it was
    /// mapped), and the mapped one was not kept: it never names them.
    Changed,
    /// The file is gone (deleted, or its process's root with it) and was
    /// not kept.
    Gone,
    /// No file is known for the address (anonymous memory, JIT code
    /// without a perf map).
    NoFile,
    /// The file could not be read (why).
    Unreadable(String),
}

impl std::fmt::Display for Unnamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unnamed::NoSymbols => write!(f, "no symbols"),
            Unnamed::Changed => write!(f, "file changed since it was mapped"),
            Unnamed::Gone => write!(f, "file gone"),
            Unnamed::NoFile => write!(f, "no file"),
            Unnamed::Unreadable(why) => write!(f, "unreadable: {}", crate::names::clean(why)),
        }
    }
}

/// A file (or none) whose frames stayed unknown, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnnamedFile {
    /// The module as frames show it.
    pub module: String,
    /// Its path, where known.
    pub path: Option<PathBuf>,
    /// Why they stayed unknown.
    pub why: Unnamed,
    /// Sampled frames in it left unknown.
    pub sampled: u64,
}

/// How many frames could be named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolStats {
    /// Unique addresses looked up.
    pub unique_frames: u64,
    /// Of those, the ones no symbol named (`[unknown]` or `module+0xoff`).
    pub unknown_frames: u64,
    /// Frames in the samples, each stack's frames counted once per sample
    /// (or microsecond).
    pub sampled_frames: u64,
    /// Of those, the unknown ones: the share a user sees in the graph.
    pub sampled_unknown: u64,
    /// Whether kernel frames were named from the live /proc/kallsyms (a
    /// module's or a trampoline's address, or no per-boot copy), not the
    /// copy and the BPF programs; `None`: no kernel frame.
    pub kallsyms_live: Option<bool>,
    /// The first few addresses outside the core text and the BPF programs
    /// that made the live /proc/kallsyms needed, with their names there.
    pub live_kallsyms_frames: Vec<(u64, String)>,
    /// The user files whose frames stayed unknown, and why, most sampled
    /// first.
    pub unnamed: Vec<UnnamedFile>,
}

impl SymbolStats {
    /// Adds another symbolization's counts (an interval of `--every`).
    pub fn add(&mut self, o: &SymbolStats) {
        self.unique_frames += o.unique_frames;
        self.unknown_frames += o.unknown_frames;
        self.sampled_frames += o.sampled_frames;
        self.sampled_unknown += o.sampled_unknown;
        self.kallsyms_live = match (self.kallsyms_live, o.kallsyms_live) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        };
        for f in &o.live_kallsyms_frames {
            if self.live_kallsyms_frames.len() < LIVE_FRAMES_SHOWN
                && !self.live_kallsyms_frames.contains(f)
            {
                self.live_kallsyms_frames.push(f.clone());
            }
        }
        for u in &o.unnamed {
            match self
                .unnamed
                .iter_mut()
                .find(|x| x.path == u.path && x.module == u.module && x.why == u.why)
            {
                Some(x) => x.sampled += u.sampled,
                None => self.unnamed.push(u.clone()),
            }
        }
        self.unnamed.sort_by_key(|u| std::cmp::Reverse(u.sampled));
    }
}

/// How a frame inside a file that has no symbol for it is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownStyle {
    /// `libfoo.so.1+0x15a20`: the module and the file offset.
    #[default]
    Offset,
    /// `[libfoo.so.1]`: the module only, so one box per module in a graph.
    Module,
}

/// A user frame with its address already moved into the call instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum UserKey {
    /// Build ID, the process (which file names it depends on who mapped
    /// it), offset.
    File([u8; BUILD_ID_SIZE], u32, u64),
    /// A file without a build ID by its key, the process, offset.
    Key(FileKey, u32, u64),
    Ip(u32, u64),
    /// The unwinder stopped early: shown as `[truncated]`.
    Truncated,
    /// A deep stack's middle, this many frames: shown as `[elided N]`.
    Elided(u32),
}

/// Return addresses point after the call; step back one byte so that the
/// frame is attributed to the calling line, not the next one.
fn caller(addr: u64, is_leaf: bool) -> u64 {
    if is_leaf {
        addr
    } else {
        addr.saturating_sub(1)
    }
}

fn user_keys(s: &RawStack) -> impl Iterator<Item = UserKey> + '_ {
    // The first user frame is exact only if the sample hit user mode.
    let in_kernel = !s.kernel.is_empty() || s.kernel_lost;
    s.user.iter().enumerate().map(move |(i, f)| {
        let leaf = i == 0 && !in_kernel;
        match *f {
            UserFrame::File { build_id, offset } => {
                UserKey::File(build_id, s.tgid, caller(offset, leaf))
            }
            UserFrame::FileKey { key, offset } => UserKey::Key(key, s.tgid, caller(offset, leaf)),
            UserFrame::Ip(ip) => UserKey::Ip(s.tgid, caller(ip, leaf)),
            UserFrame::Truncated(_) => UserKey::Truncated,
            UserFrame::Elided(n) => UserKey::Elided(n),
        }
    })
}

fn kernel_keys(s: &RawStack) -> impl Iterator<Item = u64> + '_ {
    s.kernel.iter().enumerate().map(|(i, &a)| caller(a, i == 0))
}

/// The distinct items, in order. Hashed first, then the few distinct ones
/// sorted: a BTreeSet (or a sort) of the ~12 000 frames of a 12 s xz
/// profile, ~850 of them distinct, took ~1 ms of compares.
fn sorted_unique<T: Ord + std::hash::Hash>(items: impl Iterator<Item = T>) -> Vec<T> {
    let set: HashSet<T> = items.collect();
    let mut v: Vec<T> = set.into_iter().collect();
    v.sort_unstable();
    v
}

/// Keeps the names of the BPF functions among `raw`'s kernel frames: call
/// it while the profile's programs (whose hooks run in its targets) are
/// still loaded.
pub(crate) fn keep_bpf_names(raw: &[RawStack]) {
    bpfsyms::keep_bpf_functions(&sorted_unique(raw.iter().flat_map(kernel_keys)));
}

/// The symbolizer for one profile. Reuse it for every stage (off-CPU
/// calibration, then the stacks): it parses /proc/kallsyms once and caches
/// every file it opens.
pub fn symbolizer() -> Symbolizer {
    symbolizer_with(false, false)
}

/// The symbolizer, with source files and lines from debug information when
/// `code_info` (pprof output, and inlined functions need them), and the
/// inlined functions at each address when `inlined` too; without, function
/// names only. Names are demangled by bprof, which keeps the mangled ones.
pub(crate) fn symbolizer_with(code_info: bool, inlined: bool) -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(code_info)
        .enable_inlined_fns(inlined)
        .enable_demangling(false)
        .build()
}

/// How many of the addresses that needed the live /proc/kallsyms `-v` names.
const LIVE_FRAMES_SHOWN: usize = 4;

/// The longest symbol name bprof demangles; a longer one is shown as it is
/// (cut to the longest name shown, see crate::names).
const MAX_MANGLED: usize = crate::names::MAX_NAME;

/// The longest demangled name kept. A C++ name whose template arguments
/// refer back to the ones before doubles in length with each level: a
/// 255-byte name can demangle to gigabytes. One that would be longer than
/// this is shown mangled (counted, said at -v).
const MAX_DEMANGLED: usize = 64 << 10;

/// Names shown mangled because demangling them would exceed the bounds.
static UNDEMANGLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many names were shown mangled because they were too long to
/// demangle (or demangled too long).
pub(crate) fn undemangled() -> u64 {
    UNDEMANGLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A `fmt::Write` that fails once more than its cap was written: the
/// demangler stops there.
#[derive(Default)]
struct Capped {
    text: String,
    over: bool,
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > MAX_DEMANGLED {
            self.over = true;
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// Demangles a Rust or C++ symbol name as blazesym would (Rust first, then
/// Itanium C++), or returns it as it is: when it is not mangled, or when
/// it, or what it demangles to, is longer than the bounds above.
pub(crate) fn demangle(name: &str) -> String {
    use std::fmt::Write;
    let mangled = name.starts_with("_Z") || name.starts_with("_R") || name.starts_with("__Z");
    let too_long = || {
        UNDEMANGLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        name.to_string()
    };
    if name.len() > MAX_MANGLED {
        return if mangled {
            too_long()
        } else {
            name.to_string()
        };
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        let mut out = Capped::default();
        return match write!(out, "{d:#}") {
            Ok(()) => out.text,
            Err(_) => too_long(),
        };
    }
    let Ok(sym) = cpp_demangle::Symbol::new(name) else {
        return name.to_string();
    };
    let mut out = Capped::default();
    match sym.structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default()) {
        Ok(()) => out.text,
        Err(_) if out.over => too_long(),
        Err(_) => name.to_string(),
    }
}

/// Symbolizes every stack. `index` names the files behind build IDs.
pub fn symbolize(
    symbolizer: &Symbolizer,
    raw: &[RawStack],
    index: &MmapIndex,
) -> (Vec<Stack>, SymbolStats) {
    symbolize_with(symbolizer, raw, index, UnknownStyle::default())
}

/// Symbolizes every stack, showing frames no symbol names in `style`.
pub(crate) fn symbolize_with(
    symbolizer: &Symbolizer,
    raw: &[RawStack],
    index: &MmapIndex,
    style: UnknownStyle,
) -> (Vec<Stack>, SymbolStats) {
    let (stacks, stats, _) = symbolize_frames(symbolizer, false, None, raw, index, style);
    (stacks, stats)
}

/// How long one symbolizer (and its cache of parsed files) serves a long
/// session (`--every`, `bprof top`) before a fresh one replaces it: on a
/// machine that keeps starting new binaries its cache would otherwise grow
/// for the whole run.
pub(crate) const SYMBOLIZER_LIFE: std::time::Duration = std::time::Duration::from_secs(60);

/// A symbolizer renewed every [`SYMBOLIZER_LIFE`].
pub(crate) struct Renewing {
    current: Option<(Symbolizer, std::time::Instant)>,
    code_info: bool,
    inlined: bool,
}

impl Renewing {
    /// `code_info`: source lines; `inlined`: inlined functions too (see
    /// [`symbolizer_with`]).
    pub(crate) fn new(code_info: bool, inlined: bool) -> Self {
        Renewing {
            current: None,
            code_info,
            inlined,
        }
    }

    /// Whether its symbolizers give source lines and inlined functions.
    pub(crate) fn code_info(&self) -> bool {
        self.code_info
    }

    /// The current symbolizer, a fresh one once the last has served its
    /// time.
    pub(crate) fn get(&mut self) -> &Symbolizer {
        if self
            .current
            .as_ref()
            .is_some_and(|(_, made)| made.elapsed() >= SYMBOLIZER_LIFE)
        {
            // The old one goes first: never two in memory.
            self.current = None;
        }
        let (code_info, inlined) = (self.code_info, self.inlined);
        &self
            .current
            .get_or_insert_with(|| {
                (
                    symbolizer_with(code_info, inlined),
                    std::time::Instant::now(),
                )
            })
            .0
    }
}

/// Symbolizes every stack, and also returns each distinct frame's address,
/// module and functions (what pprof output needs).
///
/// `code_info`: whether `symbolizer` gives source lines (pprof); without,
/// names learned from debug files may come from the per-boot name cache.
/// `per_file`: `Some(inlined)` for a profile symbolized once, whose files'
/// DWARF is then read one file at a time, each dropped before the next
/// (`inlined` as `symbolizer` was built); `None` where `symbolizer` will
/// name the same files again (intervals, `bprof top`).
pub(crate) fn symbolize_frames(
    symbolizer: &Symbolizer,
    code_info: bool,
    per_file: Option<bool>,
    raw: &[RawStack],
    index: &MmapIndex,
    style: UnknownStyle,
) -> (Vec<Stack>, SymbolStats, Frames) {
    // Files past the DWARF budget are named through a symbolizer without
    // code information.
    let own_basic;
    let basic = if code_info {
        own_basic = symbolizer_with(false, false);
        &own_basic
    } else {
        symbolizer
    };
    let mut pass = user::Pass {
        symbolizer,
        code_info,
        basic,
        dwarf_left: user::MAX_CODE_INFO_DWARF,
        here: symbolizer,
        per_file,
        own: None,
        index,
        style,
        names: user::Names::default(),
        frames: Frames::default(),
        unknown_keys: HashSet::default(),
        user_locs: HashMap::default(),
        debuginfod: crate::symbolize::debuginfod::Client::from_env(),
        mapped: HashMap::default(),
        go_tables: HashMap::default(),
        name_caches: HashMap::default(),
        kept: HashMap::default(),
        unnamed: HashMap::default(),
    };
    let kaddrs = sorted_unique(raw.iter().flat_map(kernel_keys));
    let (kernel, live) = symbolize_kernel(symbolizer, &kaddrs);
    pass.names.stats.kallsyms_live = (!kernel.is_empty()).then_some(live.is_some());
    if let Some(live) = live {
        // `kernel` is in `kaddrs`' order: sorted.
        let name = |a: u64| {
            let i = kernel.binary_search_by_key(&a, |(k, _)| *k).ok()?;
            let s = kernel[i].1.as_ref()?.as_sym()?;
            Some(format!("{}+{:#x}", s.name, s.offset))
        };
        pass.names.stats.live_kallsyms_frames = live
            .iter()
            .take(LIVE_FRAMES_SHOWN)
            .map(|&a| (a, name(a).unwrap_or_else(|| "?".into())))
            .collect();
    }

    let ukeys = sorted_unique(raw.iter().flat_map(user_keys));
    let mut by_file: HashMap<([u8; BUILD_ID_SIZE], u32), Vec<u64>> = HashMap::default();
    let mut by_key: HashMap<(FileKey, u32), Vec<(UserKey, u64)>> = HashMap::default();
    let mut by_pid: HashMap<u32, Vec<u64>> = HashMap::default();
    for k in &ukeys {
        match *k {
            UserKey::File(id, tgid, off) => by_file.entry((id, tgid)).or_default().push(off),
            UserKey::Key(key, tgid, off) => by_key.entry((key, tgid)).or_default().push((*k, off)),
            // A raw address inside a file the process was seen mapping (a
            // file without a build ID under --call-graph fp): that file's.
            UserKey::Ip(pid, ip) => match index.files.at(pid, ip) {
                Some((f, off)) => by_key.entry((f.key, pid)).or_default().push((*k, off)),
                None => by_pid.entry(pid).or_default().push(ip),
            },
            // Where the unwinder stopped early: a visible frame, not a symbol.
            UserKey::Truncated => {
                let loc = pass
                    .frames
                    .add(0, None, vec![plain_line("[truncated]".to_string())]);
                pass.user_locs.insert(UserKey::Truncated, loc);
            }
            // A deep stack's middle, left out: a visible frame too.
            UserKey::Elided(n) => {
                let loc = pass
                    .frames
                    .add(0, None, vec![plain_line(format!("[elided {n}]"))]);
                pass.user_locs.insert(UserKey::Elided(n), loc);
            }
        }
    }
    let mut finder = FileFinder::new(index, raw.iter().map(|s| s.tgid).collect());
    // The files with the most samples first: they get the DWARF budget.
    let mut weight: HashMap<[u8; BUILD_ID_SIZE], u64> = HashMap::default();
    for s in raw {
        for f in &s.user {
            if let UserFrame::File { build_id, .. } = f {
                *weight.entry(*build_id).or_default() += s.count;
            }
        }
    }
    let mut by_file: Vec<_> = by_file.into_iter().collect();
    by_file.sort_by(|a, b| {
        let w = |k: &[u8; BUILD_ID_SIZE]| weight.get(k).copied().unwrap_or(0);
        w(&b.0 .0).cmp(&w(&a.0 .0)).then_with(|| a.0.cmp(&b.0))
    });
    for ((id, tgid), offsets) in by_file {
        let file = finder.find(&id, tgid);
        pass.file_frames(id, tgid, file, &offsets);
    }
    for ((key, tgid), frames) in by_key {
        pass.key_frames(key, tgid, &frames);
    }
    for (pid, ips) in by_pid {
        pass.ip_frames(pid, &ips);
    }
    let py_locs = pass.python_frames(raw);
    if let Some(c) = &pass.debuginfod {
        c.report();
    }
    let unknown_kernel: HashSet<u64> = kernel
        .iter()
        .filter(|(_, sym)| !matches!(sym, Some(Symbolized::Sym(_))))
        .map(|(a, _)| *a)
        .collect();
    let kernel_module = pass.frames.module(Module::Kernel);
    let kernel_locs: HashMap<u64, u32> = kernel
        .into_iter()
        .map(|(a, sym)| {
            let lines = pass.names.of(sym.as_ref());
            (a, pass.frames.add(a, Some(kernel_module), lines))
        })
        .collect();
    pass.count_sampled(raw, &unknown_kernel);
    pass.count_sampled_python(raw, &py_locs);
    // Which locations stayed unknown, for the outputs and the summary.
    let unknown_user: Vec<u32> = pass
        .unknown_keys
        .iter()
        .filter_map(|k| pass.user_locs.get(k).copied())
        .collect();
    pass.frames.unknown.extend(unknown_user);
    pass.frames.unknown.extend(
        unknown_kernel
            .iter()
            .filter_map(|a| kernel_locs.get(a).copied()),
    );
    let stacks = pass.stacks(raw, &kernel_locs, &py_locs);
    (stacks, std::mem::take(&mut pass.names.stats), pass.frames)
}

/// A function by its symbol-table name `raw` (shown demangled), with its
/// source place when debug information gives one. Every name is made fit
/// to show here (crate::names).
fn symbol_line(raw: &str, info: Option<&blazesym::symbolize::CodeInfo<'_>>) -> FrameLine {
    use crate::names::clean;
    FrameLine {
        name: clean(&demangle(raw)).into(),
        system_name: clean(raw).into_owned(),
        file: info.map(|c| crate::names::path(&c.to_path())),
        line: info.and_then(|c| c.line).unwrap_or(0),
    }
}

/// A line that is only a name (kernel symbols, JIT names, unknown frames),
/// made fit to show.
fn plain_line(name: String) -> FrameLine {
    let name = crate::names::clean(&name).into_owned();
    FrameLine {
        name: name.as_str().into(),
        system_name: name,
        file: None,
        line: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f<A, B<A, A>, B<B<A, A>, B<A, A>>, ...>`: each template argument
    /// is the one before twice, by back reference.
    fn bomb(levels: usize) -> String {
        let seq = |n: usize| {
            let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
            let (mut n, mut s) = (n - 1, Vec::new());
            loop {
                s.insert(0, digits[n % 36]);
                n /= 36;
                if n == 0 {
                    break format!("S{}_", String::from_utf8(s).unwrap());
                }
            }
        };
        let mut s = String::from("_Z1fI1A1BIS0_S0_E");
        for i in 0..levels {
            s += &format!("S1_I{}{}E", seq(3 + i), seq(3 + i));
        }
        s + "E"
    }

    #[test]
    fn demangling_is_bounded_and_falls_back_to_the_mangled_name() {
        assert_eq!(demangle("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17h0123456789abcdefE"),
            "std::rt::lang_start"
        );
        assert_eq!(demangle("plain_c_name"), "plain_c_name");
        assert!(demangle(&bomb(3)).starts_with("f<A, B<A, A>, B<B<A, A>"));
        let before = undemangled();
        let t = std::time::Instant::now();
        let b = bomb(21);
        assert!(b.len() < 256, "{}", b.len());
        assert_eq!(demangle(&b), b);
        let long = format!("_ZN{}3fooEv", "a".repeat(MAX_MANGLED));
        assert_eq!(demangle(&long), long);
        assert_eq!(undemangled(), before + 2);
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }
}
