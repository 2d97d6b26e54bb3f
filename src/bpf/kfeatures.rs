//! Kernel features bprof's BPF programs need, probed before anything is
//! loaded: on an old kernel a failed load is a bare EINVAL from libbpf, so
//! bprof names what is missing and the release that added it instead.

use std::mem::MaybeUninit;

use anyhow::{bail, Result};
use libbpf_rs::btf::types::{Composite, Struct};
use libbpf_rs::btf::BtfType;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Btf, ProgramType};

use crate::bpf::skel::probe::ProbeSkelBuilder;

/// A kernel feature one of bprof's programs needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    /// The kernel's own BTF (`/sys/kernel/btf/vmlinux`): CO-RE relocations,
    /// tp_btf and the BTF helpers all need it.
    KernelBtf,
    /// BPF programs attached to perf events (samples).
    PerfEventProgs,
    /// BTF-typed tracepoints (`tp_btf/`), for the scheduler and fork hooks.
    TpBtf,
    /// Atomic fetch-and-add whose result is used: how stack ids are handed out.
    AtomicFetch,
    /// `bpf_get_current_task_btf`, to read the sampled task's mm.
    CurrentTaskBtf,
    /// `bpf_task_pt_regs`: the user registers of a sample taken in the
    /// kernel, where the dwarf walk starts.
    TaskPtRegs,
    /// `bpf_loop`, for loops too long to unroll: the unwinder's walk and
    /// the stored user stacks' hashing.
    BpfLoop,
    /// `bpf_find_vma`: the dwarf walk's mapping of a PC user space has not
    /// read yet.
    FindVma,
    /// Run-time allocated hash maps in tracing programs, from the BPF
    /// memory allocator. Before it the verifier loads such a program with a
    /// kernel warning, which panics a machine booted with panic_on_warn:
    /// so this one is checked before the load, not after it fails.
    TracingAlloc,
}

/// What the profile program needs.
pub(crate) const PROFILE: &[Feature] = &[
    Feature::KernelBtf,
    Feature::PerfEventProgs,
    Feature::TpBtf,
    Feature::AtomicFetch,
    Feature::CurrentTaskBtf,
    Feature::TaskPtRegs,
    Feature::BpfLoop,
    Feature::FindVma,
    Feature::TracingAlloc,
];

/// What `bprof stat` needs.
pub(crate) const STAT: &[Feature] = &[Feature::KernelBtf, Feature::TpBtf];

/// The oldest kernel the qemu matrix (scripts/kernel-matrix.sh) passed.
pub(crate) const TESTED_SINCE: &str = "5.10";

impl Feature {
    /// How a user would look the feature up, and the release that added it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Feature::KernelBtf => {
                "kernel BTF (/sys/kernel/btf/vmlinux: CONFIG_DEBUG_INFO_BTF, Linux 5.4)"
            }
            Feature::PerfEventProgs => "perf_event BPF programs (Linux 4.9)",
            Feature::TpBtf => "BTF tracepoints (tp_btf, Linux 5.5)",
            Feature::AtomicFetch => "BPF atomic fetch operations (Linux 5.12)",
            Feature::CurrentTaskBtf => "the bpf_get_current_task_btf helper (Linux 5.11)",
            Feature::TaskPtRegs => "the bpf_task_pt_regs helper (Linux 5.15)",
            Feature::BpfLoop => "the bpf_loop helper (Linux 5.17)",
            Feature::FindVma => "the bpf_find_vma helper (Linux 5.17)",
            Feature::TracingAlloc => {
                "run-time allocated hash maps in tracing programs (BPF memory allocator, Linux 6.1)"
            }
        }
    }

    /// Whether this kernel has it; `None` when the probe itself could not
    /// tell (then the load decides).
    pub(crate) fn present(self) -> Option<bool> {
        let helper = |id| ProgramType::PerfEvent.is_helper_supported(id).ok();
        match self {
            Feature::KernelBtf => Some(std::path::Path::new("/sys/kernel/btf/vmlinux").exists()),
            Feature::PerfEventProgs => ProgramType::PerfEvent.is_supported().ok(),
            Feature::TpBtf => Some(probe_program(Probe::TpBtf)),
            Feature::AtomicFetch => Some(probe_program(Probe::AtomicFetch)),
            Feature::CurrentTaskBtf => helper(libbpf_sys::BPF_FUNC_get_current_task_btf),
            Feature::TaskPtRegs => helper(libbpf_sys::BPF_FUNC_task_pt_regs),
            Feature::BpfLoop => helper(libbpf_sys::BPF_FUNC_loop),
            Feature::FindVma => helper(libbpf_sys::BPF_FUNC_find_vma),
            Feature::TracingAlloc => tracing_alloc(),
        }
    }
}

/// Whether perf_event programs may call bpf_get_current_ancestor_cgroup_id
/// (a cgroup filter's helper; not on 5.10). Unknown counts as yes: then
/// the load decides.
pub(crate) fn tracing_has_ancestor_cgroup() -> bool {
    ProgramType::PerfEvent
        .is_helper_supported(libbpf_sys::BPF_FUNC_get_current_ancestor_cgroup_id)
        .unwrap_or(true)
}

/// Whether the kernel has the BPF memory allocator: any release from 6.1
/// on, and an older one whose BTF has `struct bpf_mem_alloc` (a backport).
/// Only old releases parse the BTF: this runs before every profile's load.
fn tracing_alloc() -> Option<bool> {
    if release_at_least(&kernel_release(), (6, 1)) {
        return Some(true);
    }
    let btf = Btf::from_vmlinux().ok()?;
    Some(btf.type_by_name::<Struct<'_>>("bpf_mem_alloc").is_some())
}

/// Whether `release` ("6.1.0-57-cloud-amd64") is `want` (major, minor) or
/// later; false when it does not start with two numbers.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    match (nums.next().flatten(), nums.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

/// The programs of bpf/probe.bpf.c.
enum Probe {
    TpBtf,
    AtomicFetch,
}

/// Loads one program of bpf/probe.bpf.c alone: whether the kernel took it.
fn probe_program(which: Probe) -> bool {
    let mut obj = MaybeUninit::uninit();
    let loaded = ProbeSkelBuilder::default()
        .open(&mut obj)
        .and_then(|mut open| {
            open.progs
                .tp_btf
                .set_autoload(matches!(which, Probe::TpBtf));
            open.progs
                .atomic_fetch
                .set_autoload(matches!(which, Probe::AtomicFetch));
            open.load()
        });
    loaded.is_ok()
}

/// The features of `needs` this kernel lacks.
pub(crate) fn missing(needs: &[Feature]) -> Vec<Feature> {
    missing_of(needs, Feature::present)
}

/// Paths the profile program takes in place of a feature the kernel lacks,
/// with the same results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fallbacks {
    /// Ids from per-CPU counters (bpf/ids.bpf.h), for [`Feature::AtomicFetch`].
    pub(crate) per_cpu_ids: bool,
    /// Every hash map preallocated, for [`Feature::TracingAlloc`].
    pub(crate) prealloc: bool,
    /// The current task as a plain address read with probe reads, for
    /// [`Feature::CurrentTaskBtf`] (bpf/current_task.bpf.h), and its user
    /// registers found at the top of its kernel stack, for
    /// [`Feature::TaskPtRegs`].
    pub(crate) task_addr: bool,
    /// Programs built with open-coded loops (bpf/loop.bpf.h), for
    /// [`Feature::BpfLoop`], whose dwarf walk maps PCs by user space's view
    /// and what the learners read from mmaps and exec'd mm's, for
    /// [`Feature::FindVma`] (both 5.17).
    pub(crate) open_loops: bool,
}

/// The names `BPROF_FALLBACK` takes, and the feature each stands in for.
const FALLBACK_NAMES: [(&str, Feature); 4] = [
    ("atomic-fetch", Feature::AtomicFetch),
    ("prealloc", Feature::TracingAlloc),
    ("task-btf", Feature::CurrentTaskBtf),
    ("bpf-loop", Feature::BpfLoop),
];

/// The fallbacks in use, once the profile program has chosen them.
static IN_USE: std::sync::OnceLock<Fallbacks> = std::sync::OnceLock::new();

impl Fallbacks {
    /// The fallbacks `BPROF_FALLBACK` forces on: a comma-separated list of
    /// `atomic-fetch`, `prealloc`, `task-btf`, `bpf-loop`, or `all`. A debug switch, so each
    /// fallback is tested on a kernel that has the feature.
    pub(crate) fn forced() -> Result<Self> {
        match std::env::var_os("BPROF_FALLBACK") {
            Some(list) => Self::parse(&list.to_string_lossy()),
            None => Ok(Fallbacks::default()),
        }
    }

    /// The fallbacks a `BPROF_FALLBACK` value names.
    fn parse(list: &str) -> Result<Self> {
        let mut fb = Fallbacks::default();
        for name in list.split(',').filter(|n| !n.is_empty()) {
            match FALLBACK_NAMES.iter().find(|(n, _)| *n == name) {
                Some(&(_, f)) => {
                    fb.cover(f);
                }
                None if name == "all" => {
                    for &(_, f) in &FALLBACK_NAMES {
                        fb.cover(f);
                    }
                }
                None => {
                    let known: Vec<&str> = FALLBACK_NAMES.iter().map(|(n, _)| *n).collect();
                    bail!(
                        "BPROF_FALLBACK: no fallback named {:?} (known: {}, all)",
                        name,
                        known.join(", ")
                    );
                }
            }
        }
        Ok(fb)
    }

    /// Takes the fallback that stands in for `f`; false when none does.
    fn cover(&mut self, f: Feature) -> bool {
        match f {
            Feature::AtomicFetch => self.per_cpu_ids = true,
            Feature::TracingAlloc => self.prealloc = true,
            Feature::CurrentTaskBtf | Feature::TaskPtRegs => self.task_addr = true,
            Feature::BpfLoop | Feature::FindVma => self.open_loops = true,
            _ => return false,
        }
        true
    }

    /// What the profile program needs: the forced fallbacks and those for
    /// the features this kernel lacks. Fails, naming every missing feature
    /// no fallback stands in for, before anything is loaded. From 6.1 on
    /// nothing is probed (every feature is there); before, all are.
    pub(crate) fn for_profile() -> Result<Self> {
        let mut fb = Self::forced()?;
        if Feature::TracingAlloc.present() == Some(false) {
            let lacking = fb.cover_all(missing(PROFILE));
            refuse(&lacking)?;
        }
        Ok(fb)
    }

    /// Takes the fallbacks for `missing`; returns the features none
    /// stands in for.
    fn cover_all(&mut self, missing: Vec<Feature>) -> Vec<Feature> {
        missing.into_iter().filter(|&f| !self.cover(f)).collect()
    }

    /// Records the fallbacks the loaded program uses, for the maps user
    /// space makes for it (see [`hash_map_flags`]).
    pub(crate) fn set_in_use(self) {
        // A second profile in one process takes the same kernel's answer.
        let _ = IN_USE.set(self);
    }

    /// The fallbacks in use (none before a profile program is loaded).
    pub(crate) fn in_use() -> Self {
        IN_USE.get().copied().unwrap_or_default()
    }

    /// What `-v` says of them; empty when none is used.
    pub(crate) fn describe(self) -> String {
        let mut used = Vec::new();
        if self.per_cpu_ids {
            used.push("ids from per-CPU counters (no atomic fetch)");
        }
        if self.prealloc {
            used.push("preallocated hash maps (no BPF memory allocator)");
        }
        if self.task_addr {
            used.push(
                "the current task read by address (no bpf_get_current_task_btf, bpf_task_pt_regs)",
            );
        }
        if self.open_loops {
            used.push("open-coded loops, mappings without the kernel's lookup (no bpf_loop, bpf_find_vma)");
        }
        used.join(", ")
    }
}

/// The flags of a hash map the profile program uses: allocated as entries
/// arrive, or preallocated under the `prealloc` fallback.
pub(crate) fn hash_map_flags() -> u32 {
    if Fallbacks::in_use().prealloc {
        0
    } else {
        libbpf_sys::BPF_F_NO_PREALLOC
    }
}

/// The features of `needs` that `present` says are missing. Without kernel
/// BTF only that is named: the other probes need it to load at all, so
/// their failures would name features (tp_btf on a 6.x kernel built
/// without BTF) the kernel does have.
fn missing_of(needs: &[Feature], present: impl Fn(Feature) -> Option<bool>) -> Vec<Feature> {
    if needs.contains(&Feature::KernelBtf) && present(Feature::KernelBtf) == Some(false) {
        return vec![Feature::KernelBtf];
    }
    needs
        .iter()
        .copied()
        .filter(|&f| present(f) == Some(false))
        .collect()
}

/// Whether the kernel keeps an address-space layout generation the profile
/// program can read (`mm_struct.mm_lock_seq`, per-VMA locks, 6.4 and
/// later). Without it, bprof keeps its own (`layout_gens` in
/// profile.bpf.c). Unreadable BTF counts as having it: then no tracepoint
/// is attached and, if the field is truly missing, the cache stays off.
pub(crate) fn kernel_has_layout_seq() -> bool {
    let Ok(btf) = Btf::from_vmlinux() else {
        return true;
    };
    btf.type_by_name::<Struct<'_>>("mm_struct")
        .map(Composite::from)
        .is_none_or(|mm| has_member(&btf, &mm, "mm_lock_seq", 0))
}

/// Whether `c` or an anonymous struct or union inside it has `name`
/// (mm_struct keeps its fields in an anonymous struct).
fn has_member(btf: &Btf<'_>, c: &Composite<'_>, name: &str, depth: u32) -> bool {
    c.iter().any(|m| match m.name {
        Some(n) => n == name,
        None if depth < 4 => btf
            .type_by_id::<BtfType<'_>>(m.ty)
            .and_then(|t| Composite::try_from(t.skip_mods_and_typedefs()).ok())
            .is_some_and(|inner| has_member(btf, &inner, name, depth + 1)),
        None => false,
    })
}

/// The running kernel's release (`uname -r`).
pub(crate) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Fails with one line naming every feature of `needs` the kernel lacks
/// and no fallback stands in for.
pub(crate) fn check(needs: &[Feature]) -> Result<()> {
    refuse(&Fallbacks::default().cover_all(missing(needs)))
}

/// Fails with one line naming `missing`, if any.
fn refuse(missing: &[Feature]) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    let list: Vec<&str> = missing.iter().map(|f| f.describe()).collect();
    bail!(
        "this kernel (Linux {}) lacks {} (bprof is tested on Linux {TESTED_SINCE} and later)",
        kernel_release(),
        list.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The development kernel has everything: a probe that reports a
    /// feature missing here is broken (and would refuse to run).
    #[test]
    fn every_probe_finds_its_feature_on_this_kernel() {
        // Probes load programs: without root they all fail, as the suite skips.
        let root = std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
        if !root {
            eprintln!("skipped: loading the probes needs root");
            return;
        }
        for &f in PROFILE.iter().chain(STAT) {
            assert_eq!(f.present(), Some(true), "{f:?}: {}", f.describe());
        }
        // 6.18 has per-VMA locks: the kernel's generation is used.
        assert!(kernel_has_layout_seq());
    }

    /// A kernel without BTF is told that, not a list of BTF-based features
    /// whose probes failed only for want of it; with BTF, every missing
    /// feature is named (what the 5.10 guest of the kernel matrix prints).
    #[test]
    fn missing_btf_is_named_alone() {
        let no_btf = |f| Some(f != Feature::KernelBtf && f != Feature::TpBtf);
        assert_eq!(missing_of(PROFILE, no_btf), [Feature::KernelBtf]);
        assert_eq!(missing_of(STAT, no_btf), [Feature::KernelBtf]);
        let old = |f| Some(!matches!(f, Feature::AtomicFetch | Feature::BpfLoop));
        assert_eq!(
            missing_of(PROFILE, old),
            [Feature::AtomicFetch, Feature::BpfLoop]
        );
        // A probe that cannot tell (None) names nothing.
        assert!(missing_of(PROFILE, |_| None).is_empty());
    }

    /// 5.10 lacks six features, each with a fallback: none is refused.
    #[test]
    fn fallbacks_stand_in_for_what_5_10_lacks() {
        let on_5_10 = vec![
            Feature::AtomicFetch,
            Feature::CurrentTaskBtf,
            Feature::TaskPtRegs,
            Feature::BpfLoop,
            Feature::FindVma,
            Feature::TracingAlloc,
        ];
        let mut fb = Fallbacks::default();
        assert!(fb.cover_all(on_5_10).is_empty());
        assert_eq!(
            fb,
            Fallbacks {
                per_cpu_ids: true,
                prealloc: true,
                task_addr: true,
                open_loops: true,
            }
        );
        assert_eq!(Fallbacks::parse("").unwrap(), Fallbacks::default());
        assert_eq!(Fallbacks::parse("all").unwrap(), fb);
        assert_eq!(
            Fallbacks::parse("bpf-loop,task-btf,prealloc,atomic-fetch").unwrap(),
            fb
        );
        let one = Fallbacks::parse("atomic-fetch").unwrap();
        assert!(one.per_cpu_ids && !one.prealloc && !one.task_addr && !one.open_loops);
        let err = Fallbacks::parse("prealloc,bpf-lop")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"bpf-lop\"")
                && err.contains("atomic-fetch, prealloc, task-btf, bpf-loop, all"),
            "{err}"
        );
    }

    #[test]
    fn releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.1.0-57-cloud-amd64", (6, 1)));
        assert!(release_at_least("6.18.0", (6, 1)));
        assert!(release_at_least("7.0", (6, 1)));
        assert!(!release_at_least("5.10.0-43-cloud-amd64", (6, 1)));
        assert!(!release_at_least("6.0.19", (6, 1)));
        assert!(!release_at_least("unknown", (6, 1)));
        assert!(!release_at_least("6", (6, 1)));
    }
}
