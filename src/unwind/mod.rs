//! `--call-graph dwarf`: unwind tables for the BPF stack walker.
//!
//! Every executable file a target maps gets one table ([`table`]), built
//! once per file (keyed by the kernel's dev:inode, which the walker reads
//! from the VMA) however many processes map it, and appended to a segment
//! of `unwind_segs` through its mmap (far faster than map updates;
//! [`segments`]); then `unwind_files` names its rows and its build ID (or,
//! for a file without one, its key: frames there carry it). Files come from
//! /proc/PID/maps for running processes and from the side band's mmap
//! records for new mappings, opened as their processes map them
//! (crate::process::mapped).

mod cache;
mod files;
pub mod procmaps;
mod segments;
pub mod table;

use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::MapCore;

use crate::bpf::abi;
use crate::bpf::maps;
use crate::bpf::mmap_array::MmapArray as Store;
use crate::collect::sideband::MmapIndex;
use crate::process::mapped::{MappedFile, MappedFiles, ProcMapping};

/// The `unwind_files` key of the vDSO's table: no file has inode
/// u64::MAX on device 0.
const VDSO_KEY: (u64, u64) = (0, u64::MAX);

/// Most rows `--unwind-rows` accepts (8 bytes each: 512 MiB).
pub const MAX_ROWS: u32 = 1 << 26;
/// Page-index entries allowed beside `rows` rows: one page of 4 KiB of code
/// holds dozens of rows (libc's), so an eighth covers the tables with room to
/// spare (8 bytes each: 4 MiB for the default 4 Mi rows). A file without
/// room for its index is searched without one.
fn index_pages(rows: u32) -> u64 {
    u64::from(rows / 8).max(1)
}

/// `enum unwind_end` names, for `-v`.
pub const END_NAMES: [&str; 9] = [
    "reached the outermost frame",
    "frame-pointer chain ended",
    "no unwind table and no frame pointer",
    "PC in no mapping",
    "stack read fault",
    "bad CFA",
    "unsupported unwind rule",
    "depth limit",
    "mm lock busy",
];

/// The table store and what it holds.
pub struct Unwinder {
    /// Rows and page indexes.
    tables: segments::Segments,
    /// Entries of `tables` that are rows, and that are page indexes.
    rows: u64,
    pages: u64,
    /// Tables loaded (each file's number, `unwind_file.table`).
    loaded: u32,
    rules: Store,
    /// Each distinct rule's index in `unwind_rules`.
    rule_ids: HashMap<(i32, i16, u8, u8), u32>,
    /// (dev, ino) as the kernel names files → whether it has a table.
    files: HashMap<(u64, u64), bool>,
    /// The length of bprof's vDSO, once its table is loaded.
    vdso_len: Option<u64>,
    /// Per process, the time of its last exec or exit: its mapping records
    /// from before are stale, whenever they are read.
    floor: HashMap<u32, u64>,
    /// The mappings of the processes, as the BPF side sees them.
    pub procmaps: procmaps::ProcMaps,
    /// Files that could not be read or parsed (path, why), by key.
    failed: HashMap<(u64, u64), (PathBuf, String)>,
    /// Mappings whose file could not be opened (the process gone, most often).
    unreachable: usize,
    /// Files without a table (no CFI, too large): frame pointers there.
    no_table: usize,
    /// Rows with a rule the walker cannot follow.
    unsupported: usize,
    /// Files not loaded because the tables' budget (--unwind-rows) was spent.
    full: usize,
    build_time: Duration,
    /// Time spent taking the side band's changes (tables and mappings).
    take_time: Duration,
    bytes_read: u64,
    /// This boot's kept tables (none if root's state directory is unusable).
    cache: Option<cache::TableCache>,
    /// Files whose CFI was parsed (not kept from an earlier profile).
    parsed: usize,
    /// `unwind_files` changed since [`Unwinder::publish`].
    files_changed: bool,
    /// Kernel names (dev, ino) given a file's entry by [`Self::alias_kernel_names`].
    aliased: HashSet<(u64, u64)>,
    /// Files opened on overlayfs.
    overlay: HashSet<(u64, u64)>,
    /// The last generation written to `unwind_gen`.
    gen: u64,
}

impl Unwinder {
    /// Takes the loaded `unwind_segs` and `unwind_rules` maps; the tables
    /// may take up to `rows` rows and their page indexes.
    pub fn new(
        segs_map: &libbpf_rs::Map<'_>,
        rows: u32,
        rules_map: &impl AsFd,
    ) -> Result<Unwinder> {
        let outer = libbpf_rs::MapHandle::try_from(segs_map).context("the unwind table map")?;
        let budget = u64::from(rows) + index_pages(rows);
        Ok(Unwinder {
            tables: segments::Segments::new(outer, budget),
            rows: 0,
            pages: 0,
            loaded: 0,
            rules: Store::new(rules_map, abi::UNWIND_MAX_RULES).context("the unwind rule map")?,
            rule_ids: HashMap::new(),
            files: HashMap::new(),
            vdso_len: None,
            procmaps: procmaps::ProcMaps::default(),
            floor: HashMap::new(),
            failed: HashMap::new(),
            unreachable: 0,
            no_table: 0,
            unsupported: 0,
            full: 0,
            build_time: Duration::ZERO,
            take_time: Duration::ZERO,
            bytes_read: 0,
            cache: cache::TableCache::open(),
            parsed: 0,
            files_changed: false,
            aliased: HashSet::new(),
            overlay: HashSet::new(),
            gen: 0,
        })
    }

    /// Loads the tables of every executable file `pid` maps now, and
    /// records its mappings (unless `tables_only`): those the start-up
    /// snapshot read, else its /proc/PID/maps now.
    pub fn add_process(
        &mut self,
        files: &dyn MapCore,
        maps: &dyn MapCore,
        index: &mut MmapIndex,
        pid: u32,
        tables_only: bool,
    ) {
        let mappings = index
            .snapshot
            .remove(&pid)
            .unwrap_or_else(|| index.files.add_process(pid));
        for m in mappings {
            let slot = match m {
                // Anonymous executable memory (JIT code): frame pointers
                // there, without asking the kernel at every sample. The
                // vDSO has no file either, but bprof's own vDSO's table.
                ProcMapping::Anon { start, end } => anon_slot(start, end),
                ProcMapping::Vdso { start, end } => self.vdso_slot(start, end),
                ProcMapping::File {
                    start,
                    end,
                    off,
                    file,
                    ..
                } => {
                    let Some(file) = file else {
                        self.unreachable += 1;
                        continue;
                    };
                    let Some(file) = self.add_file(files, &mut index.files, &file) else {
                        continue;
                    };
                    procmaps::Slot {
                        start,
                        end,
                        off,
                        file,
                    }
                }
            };
            if !tables_only {
                self.procmaps.insert(maps, pid, slot, 0);
            }
        }
    }

    /// Loads the table of a file the side band saw mapped at
    /// `[start, end)` from file offset `off`; returns the mapping to record.
    fn mapped_slot(
        &mut self,
        files: &dyn MapCore,
        known: &mut MappedFiles,
        file: Option<&Arc<MappedFile>>,
        (start, end, off): (u64, u64, u64),
    ) -> Option<procmaps::Slot> {
        let Some(file) = file else {
            self.unreachable += 1;
            return None;
        };
        let file = self.add_file(files, known, file)?;
        Some(procmaps::Slot {
            start,
            end,
            off,
            file,
        })
    }

    /// The slot of a process's vDSO: bprof's table when it is the same
    /// image (same length; a 32-bit process's is another), else frame
    /// pointers.
    fn vdso_slot(&self, start: u64, end: u64) -> procmaps::Slot {
        match self.vdso_len {
            Some(len) if end - start == len => procmaps::Slot {
                start,
                end,
                off: 0,
                file: VDSO_KEY,
            },
            _ => anon_slot(start, end),
        }
    }

    /// Files not loaded because the table budget (--unwind-rows) was spent.
    pub fn full(&self) -> usize {
        self.full
    }

    /// The `-v` lines: files, rows, time, memory.
    pub fn report(&self) -> String {
        let with = self.files.values().filter(|&&t| t).count();
        let mib = |entries: u64, each: usize| (entries * each as u64) as f64 / (1 << 20) as f64;
        let (entry, rule) = (size_of::<abi::unwind_row>(), size_of::<abi::unwind_rule>());
        let mut s = format!(
            "bprof: unwind tables: {with} files, {} rows, {} distinct rules and {} index pages ({:.1} MiB of {:.1} MiB kernel memory, {} table segment{}), built in {:.0} ms from {:.1} MiB of ELF ({} parsed, {} kept from an earlier profile this boot)",
            self.rows,
            self.rules.used(),
            self.pages,
            mib(self.tables.used(), entry) + mib(u64::from(self.rules.used()), rule),
            mib(self.tables.allocated(), entry) + mib(u64::from(self.rules.capacity()), rule),
            self.tables.count(),
            if self.tables.count() == 1 { "" } else { "s" },
            self.build_time.as_secs_f64() * 1000.0,
            self.bytes_read as f64 / (1 << 20) as f64,
            self.parsed,
            self.cache.as_ref().map_or(0, |c| c.hits),
        );
        if self.no_table > 0 {
            s += &format!(
                "; {} files without a table (frame pointers there)",
                self.no_table
            );
        }
        if self.full > 0 {
            s += &format!(
                "; {} files not loaded, table budget spent (--unwind-rows)",
                self.full
            );
        }
        if self.unsupported > 0 {
            s += &format!("; {} rows with unsupported rules", self.unsupported);
        }
        if !self.aliased.is_empty() {
            s += &format!(
                "; {} files also keyed by the inode the kernel names (overlayfs layers)",
                self.aliased.len()
            );
        }
        s += &format!(
            "; the side band's mappings taken in {:.0} ms (tables included)",
            self.take_time.as_secs_f64() * 1000.0
        );
        s += &format!("; {} address chunks of mappings", self.procmaps.len());
        if self.procmaps.evicted + self.procmaps.failed > 0 {
            s += &format!(
                " ({} mappings evicted from full chunks, {} map updates failed)",
                self.procmaps.evicted, self.procmaps.failed
            );
        }
        if self.unreachable > 0 {
            s += &format!(
                "; {} mappings whose file could not be opened (process or file gone)",
                self.unreachable
            );
        }
        if !self.failed.is_empty() {
            s += &format!("; {} files unreadable:", self.failed.len());
            for (p, why) in self.failed.values().take(5) {
                s += &format!(" {} ({why})", crate::names::path(p));
            }
        }
        s
    }
}

/// An anonymous executable mapping (JIT code) as the walker sees one: no
/// file (inode 0), so no table: it follows frame pointers there without
/// asking the kernel which mapping the PC is in.
fn anon_slot(start: u64, end: u64) -> procmaps::Slot {
    procmaps::Slot {
        start,
        end,
        off: 0,
        file: (0, 0),
    }
}

impl Unwinder {
    /// Moves `unwind_gen` on when `unwind_maps` or `unwind_files` changed
    /// since the last call: the BPF side's per-CPU memo of mappings holds
    /// only entries of the current generation. Call it after the changes.
    pub fn publish(&mut self, gen: &dyn MapCore) {
        if !(self.files_changed || self.procmaps.changed) {
            return;
        }
        self.gen += 1;
        // A failed write leaves the memo as it was: it cannot fail for a
        // one-entry array at index 0.
        let _ = maps::put(gen, &0u32, &self.gen);
        self.files_changed = false;
        self.procmaps.changed = false;
    }

    /// Loads the files the side band saw mapped since the last call (by
    /// the profile's targets only: the drain kept no other process's).
    pub fn take_new(&mut self, files: &dyn MapCore, maps: &dyn MapCore, index: &mut MmapIndex) {
        let t0 = std::time::Instant::now();
        self.take_changes(files, maps, index);
        self.take_time += t0.elapsed();
    }

    fn take_changes(&mut self, files: &dyn MapCore, maps: &dyn MapCore, index: &mut MmapIndex) {
        use crate::collect::sideband::Change;
        // In the kernel's time order (the side band sorts each read). A
        // record can still be read after a later one of another CPU's
        // ring, one read later: what a process mapped before its exec (or
        // exit) is dropped whenever it comes, and a child that exec'd
        // takes nothing from its parent.
        for (time, change) in std::mem::take(&mut index.changes) {
            let stale = |pid: u32| self.floor.get(&pid).is_some_and(|&f| time < f);
            // The BPF side may have learned this mapping at its mmap (see
            // learn in bpf/unwind.bpf.h), even where no slot is written
            // here (the process gone before its file could be opened):
            // its chunks go when the process does.
            if let Change::Mapped {
                ref mapping,
                start,
                end,
                ..
            } = change
            {
                self.procmaps.claim(mapping.pid, start, end);
            }
            match change {
                Change::Mapped { ref mapping, .. } if stale(mapping.pid) => {}
                Change::Anon { pid, .. } | Change::Vdso { pid, .. } if stale(pid) => {}
                Change::Mapped {
                    mapping,
                    start,
                    end,
                    off,
                    file,
                } => {
                    let range = (start, end, off);
                    let known = &mut index.files;
                    if let (Some(slot), Some(file)) = (
                        self.mapped_slot(files, known, file.as_ref(), range),
                        file.as_ref(),
                    ) {
                        self.alias_kernel_names((files, maps), mapping.pid, &slot, (known, file));
                        self.procmaps.insert(maps, mapping.pid, slot, time);
                    }
                }
                Change::Anon { pid, start, end } => {
                    self.procmaps.insert(maps, pid, anon_slot(start, end), time);
                }
                Change::Vdso { pid, start, end } => {
                    let slot = self.vdso_slot(start, end);
                    self.procmaps.insert(maps, pid, slot, time);
                }
                Change::Forked { child, .. } if stale(child) => {}
                Change::Forked { child, parent } => self.procmaps.copy(maps, parent, child, time),
                Change::Execed(pid) => {
                    self.raise_floor(pid, time);
                    self.procmaps.remove_before(maps, pid, time);
                }
                Change::Exited(pid) => {
                    self.raise_floor(pid, time);
                    self.procmaps.remove(maps, pid);
                }
            }
        }
    }

    /// Records that `pid`'s mappings before `time` are gone. Kept a few
    /// seconds (a record late by one read is late by ms), so a busy
    /// machine's exits do not pile up.
    fn raise_floor(&mut self, pid: u32, time: u64) {
        let f = self.floor.entry(pid).or_default();
        *f = (*f).max(time);
        if self.floor.len() > 4096 {
            let horizon = time.saturating_sub(5_000_000_000);
            self.floor.retain(|_, &mut t| t >= horizon);
        }
    }

    /// The shared libraries `pid` maps (not its executable).
    pub fn add_libraries(&mut self, files: &dyn MapCore, index: &mut MmapIndex, pid: u32) {
        for m in index.files.add_process(pid) {
            if let ProcMapping::File {
                path,
                file: Some(file),
                ..
            } = m
            {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                if name.contains(".so") {
                    let _ = self.add_file(files, &mut index.files, &file);
                }
            }
        }
    }

    /// Before `-- COMMAND` runs: its executable, found as execvp(3) would.
    pub fn add_command(&mut self, files: &dyn MapCore, index: &mut MmapIndex, argv0: &str) {
        let found = if argv0.contains('/') {
            Some(PathBuf::from(argv0))
        } else {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(argv0))
                    .find(|c| c.is_file())
            })
        };
        if let Some(path) = found {
            let path = std::fs::canonicalize(&path).unwrap_or(path);
            if let Some(file) = index.files.learn_path(&path) {
                let _ = self.add_file(files, &mut index.files, &file);
            }
        }
    }
}

/// The `-v` line of how walks ended.
pub fn describe_ends(stats: &crate::bpf::stacks::Stats) -> String {
    let walks: u64 = stats.unwind_end.iter().sum();
    let elided = match stats.unwind_elided {
        0 => String::new(),
        n => format!(
            "; {n} frames of deep stacks left out between their innermost {} and outermost {} ([elided N])",
            crate::bpf::abi::UNWIND_INNER,
            crate::bpf::abi::UNWIND_OUTER
        ),
    };
    let mut parts = Vec::new();
    for (n, name) in stats.unwind_end.iter().zip(END_NAMES) {
        if *n > 0 {
            parts.push(format!("{n} {name}"));
        }
    }
    format!(
        "bprof: dwarf unwinding: {walks} walks ({} past their leaf from the walk memo), {} frames ({} by frame pointer), {} stack reads, {} from the task's saved registers, {} mappings asked of the kernel by walks and {} at a target's mmap or exec ({} kept); ended: {}{}",
        stats.unwind_memo_walks,
        stats.unwind_frames,
        stats.unwind_fp_frames,
        stats.unwind_reads,
        stats.unwind_task_regs,
        stats.unwind_find_vma,
        stats.unwind_learned_early,
        stats.unwind_learned,
        if parts.is_empty() { "-".to_string() } else { parts.join(", ") },
        elided
    )
}
