//! BPF programs: loading the profile skeleton, configuring it, attaching it.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, IntoRawFd, OwnedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::bpf::abi::plain_bytes;
use crate::bpf::core_btf;
use crate::bpf::kfeatures;
use crate::bpf::maps::{self, TargetFrom};
use crate::bpf::skel::profile::types::filter_entry;
use crate::bpf::skel::profile::{ProfileSkel, ProfileSkelBuilder};

/// How user stacks are taken (`--call-graph`, perf's spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// The kernel's frame-pointer walk.
    Fp,
    /// `.eh_frame` unwinding in the BPF program, frame pointers where no
    /// table exists.
    Dwarf,
}

impl CallGraph {
    /// Parses `fp` or `dwarf` (perf's `dwarf,SIZE` is accepted; the size
    /// means nothing here, the live stack is walked).
    pub fn parse(s: &str) -> Result<CallGraph> {
        match s.split(',').next().unwrap_or_default() {
            "fp" => Ok(CallGraph::Fp),
            "dwarf" => Ok(CallGraph::Dwarf),
            _ => bail!("invalid --call-graph '{s}': expected fp or dwarf"),
        }
    }
}

/// Whether targets' mmaps are learned in the BPF side as they happen
/// (`--mmap-hook`): a hook on every syscall's exit, which sends each syscall
/// of the machine down the kernel's traced path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmapHook {
    /// For `-- COMMAND` profiles only.
    Auto,
    /// For every `--call-graph dwarf` profile.
    On,
    /// Never.
    Off,
}

impl MmapHook {
    /// Parses `auto`, `on` or `off`.
    pub fn parse(s: &str) -> Result<MmapHook> {
        match s {
            "auto" => Ok(MmapHook::Auto),
            "on" => Ok(MmapHook::On),
            "off" => Ok(MmapHook::Off),
            _ => bail!("invalid --mmap-hook '{s}': expected auto, on or off"),
        }
    }
}

/// How the profile program is configured before load.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Take kernel stacks (off with `-U`).
    pub kernel_stacks: bool,
    /// Take user stacks (off with `-K`).
    pub user_stacks: bool,
    /// Count the idle task (`-I`).
    pub include_idle: bool,
    /// Entries of each stack map and of the count map.
    pub stack_storage_size: u32,
    /// Only keep samples of these processes (empty: all).
    pub tgids: Vec<u32>,
    /// Only keep samples of these threads (empty: all).
    pub tids: Vec<u32>,
    /// Add forked children of target processes to the targets.
    pub follow_children: bool,
    /// The compiled `--filter` (empty: keep every sample).
    pub filter: Vec<filter_entry>,
    /// What is counted: on-CPU samples, off-CPU time, or both.
    pub mode: Mode,
    /// Off-CPU: count kernel threads too.
    pub kernel_threads: bool,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// `--mmap-hook`.
    pub mmap_hook: MmapHook,
    /// `--call-graph dwarf`: most rows the unwind tables may take.
    pub unwind_rows: u32,
    /// Off-CPU: ignore blocks shorter than this (ns).
    pub min_block_ns: u64,
    /// Off-CPU: ignore blocks longer than this (ns; 0: no limit).
    pub max_block_ns: u64,
    /// Keys name the sampled task's cgroup (only pprof shows it).
    pub cgroups: bool,
    /// Each count map keeps its own total (`Collector::counted_in_drained`),
    /// for a live view's exact count at every refresh.
    pub map_totals: bool,
    /// Drains end intervals (`--every`, `bprof top`), which empty the CPUs'
    /// count caches first: only then is `flush_counts` loaded and verified.
    pub intervals: bool,
    /// Walk the Python frames of CPython processes (off with `--no-python`).
    pub python: bool,
}

pub(crate) use crate::events::Mode;

impl ProfileOptions {
    /// Whether samples are limited to the processes in target_tgids.
    pub fn matches_tgids(&self) -> bool {
        !self.tgids.is_empty() || self.follow_children
    }

    /// Whether Python frames are walked (they go with the user stacks).
    pub fn walks_python(&self) -> bool {
        self.python && self.user_stacks
    }

    fn dwarf(&self) -> bool {
        self.call_graph == CallGraph::Dwarf && self.user_stacks
    }

    /// Whether a filter term names a cgroup.
    pub fn filters_cgroups(&self) -> bool {
        self.filter
            .iter()
            .any(|e| e.term == crate::bpf::skel::profile::types::filter_term::FILTER_TERM_CGROUP)
    }

    /// Refuses what the kernel cannot do at all, whatever the fallbacks: a
    /// cgroup filter needs `bpf_get_current_ancestor_cgroup_id` in tracing
    /// programs.
    pub fn fit(&self) -> Result<()> {
        if self.filters_cgroups() && !kfeatures::tracing_has_ancestor_cgroup() {
            bail!(
                "this kernel (Linux {}) lacks bpf_get_current_ancestor_cgroup_id in tracing programs, which a cgroup filter needs",
                kfeatures::kernel_release()
            );
        }
        Ok(())
    }

    /// Whether the targets are the -p processes and no other ever becomes
    /// one (no forked child is followed).
    fn fixed_processes(&self) -> bool {
        !self.follow_children && !self.tgids.is_empty()
    }

    /// Whether a target's code mappings are learned at its exec
    /// (learn_exec). Not for -p profiles: their processes run already and
    /// no other becomes a target, so one that execs walks by the mappings
    /// the kernel serves its walks until its records are read, which spares
    /// every such profile the learner's verification.
    pub fn learns_at_exec(&self) -> bool {
        self.dwarf() && !self.fixed_processes()
    }

    /// Whether targets' mmaps are learned as they happen (learn_mmap). By
    /// default for `-- COMMAND`, whose children (a build's compilers, a
    /// script's tools) are often short-lived. Its hook on every syscall's
    /// exit sends each syscall of the machine down the kernel's
    /// traced-syscall path, which system-wide, `-p` and `-t` profiles do
    /// not impose on the processes they watch unless asked.
    pub fn learns_mmaps(&self) -> bool {
        self.dwarf()
            && match self.mmap_hook {
                MmapHook::Auto => self.follow_children,
                MmapHook::On => true,
                MmapHook::Off => false,
            }
    }
}

/// The loaded profile program and the links that keep it attached.
pub struct ProfileProgram<'obj> {
    /// The skeleton, whose maps the later stages read.
    pub skel: ProfileSkel<'obj>,
    links: Vec<Link>,
    /// The kernel keeps no layout generation: bprof's own is attached.
    layout_gens: bool,
    /// bprof's own generation was wanted but its tracepoints would not
    /// attach: the raw-stack cache is off.
    layout_gens_missing: bool,
    /// `--call-graph dwarf`: learn targets' code mappings at exec (see
    /// [`ProfileOptions::learns_at_exec`]) and at mmap (see
    /// [`ProfileOptions::learns_mmaps`]).
    learn_exec: bool,
    learn_mmaps: bool,
    /// Why those programs would not attach.
    learners_missing: Option<anyhow::Error>,
    /// Python frames are walked: an exec or exit forgets the process.
    python: bool,
    /// The programs built without bpf_loop are the ones loaded (the
    /// `bpf-loop` fallback).
    open_loops: bool,
    core_btf: core_btf::Use,
}

/// Storage for the profile object: the second slot is for a retry (see
/// [`ProfileProgram::load`]).
pub type ObjectSlots = [MaybeUninit<OpenObject>; 2];

/// Routes libbpf's messages: silent unless `-v`, since a failure is
/// reported by bprof itself in one line.
pub fn init_libbpf_logging(verbose: bool) {
    let print: Option<(libbpf_rs::PrintLevel, libbpf_rs::PrintCallback)> =
        verbose.then_some((libbpf_rs::PrintLevel::Debug, |_, msg| eprint!("{msg}")));
    libbpf_rs::set_print(print);
}

impl<'obj> ProfileProgram<'obj> {
    /// Opens, configures and loads the program; nothing is attached yet.
    /// The kernel types kept earlier this boot serve the CO-RE relocations
    /// (see core_btf); if the load fails with them, the second slot serves a
    /// retry with the kernel's own.
    /// `fallbacks`: what [`kfeatures::Fallbacks::for_profile`] chose, the
    /// options fitted to them ([`ProfileOptions::fit`]).
    pub fn load(
        slots: &'obj mut ObjectSlots,
        opts: &ProfileOptions,
        fallbacks: kfeatures::Fallbacks,
    ) -> Result<Self> {
        fallbacks.set_in_use();
        let [first, second] = slots;
        let (skel, layout_gens, core_btf) = match core_btf::Kept::find() {
            Some(kept) => {
                match Self::open_and_load(first, opts, fallbacks, Some(&kept.proc_path()), false) {
                    Ok((skel, gens)) => (skel, gens, core_btf::Use::Kept(kept.path())),
                    Err(_) => {
                        let path = kept.path();
                        kept.remove();
                        let (skel, gens) =
                            Self::open_and_load(second, opts, fallbacks, None, true)?;
                        let kept = core_btf::keep(skel.object());
                        (skel, gens, core_btf::Use::Refused { path, kept })
                    }
                }
            }
            None => {
                let (skel, gens) = Self::open_and_load(first, opts, fallbacks, None, true)?;
                let kept = core_btf::keep(skel.object());
                (skel, gens, core_btf::Use::Kernel { kept })
            }
        };
        let prog = ProfileProgram {
            skel,
            links: Vec::new(),
            layout_gens,
            layout_gens_missing: false,
            learn_exec: opts.learns_at_exec(),
            learn_mmaps: opts.learns_mmaps(),
            learners_missing: None,
            python: opts.walks_python(),
            open_loops: fallbacks.open_loops,
            core_btf,
        };
        for &tgid in &opts.tgids {
            prog.add_tgid(tgid, TargetFrom::Now)?;
        }
        for (i, e) in opts.filter.iter().enumerate() {
            prog.skel
                .maps
                .filters
                .update(&(i as u32).to_ne_bytes(), plain_bytes(e), MapFlags::ANY)
                .context("writing the filter")?;
        }
        for &tid in &opts.tids {
            prog.skel
                .maps
                .target_tids
                .update(&tid.to_ne_bytes(), &[1], MapFlags::ANY)
                .context("adding a target thread")?;
        }
        Ok(prog)
    }

    /// The program that empties the CPUs' count caches (one of two builds).
    pub fn flush_program(&self) -> &libbpf_rs::ProgramMut<'obj> {
        if self.open_loops {
            &self.skel.progs.flush_counts_open
        } else {
            &self.skel.progs.flush_counts
        }
    }

    /// Where the kernel types of the load's CO-RE relocations came from.
    pub fn core_btf(&self) -> &core_btf::Use {
        &self.core_btf
    }

    /// Opens the object, configures it and loads it, relocating against
    /// the kernel types in `btf` (libbpf's own reading of the kernel's BTF
    /// when `None`). Returns the skeleton and whether bprof's own layout
    /// generation is on. `last`: no retry follows, so a failed load is
    /// explained (see kfeatures).
    // Long on purpose: one map or program setting per line, in the order libbpf needs them before load.
    fn open_and_load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        opts: &ProfileOptions,
        fallbacks: kfeatures::Fallbacks,
        btf: Option<&std::ffi::CStr>,
        last: bool,
    ) -> Result<(ProfileSkel<'obj>, bool)> {
        let builder = ProfileSkelBuilder::default();
        let open = match btf {
            Some(path) => {
                let open_opts = libbpf_rs::libbpf_sys::bpf_object_open_opts {
                    sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_object_open_opts>() as _,
                    // libbpf copies the path when it opens the object.
                    btf_custom_path: path.as_ptr(),
                    ..Default::default()
                };
                builder.open_opts(open_opts, obj)
            }
            None => builder.open(obj),
        };
        let mut open = open.context("opening the BPF object")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("BPF object has no .rodata")?;
        rodata.cfg.kernel_stacks = opts.kernel_stacks.into();
        rodata.cfg.user_stacks = opts.user_stacks.into();
        rodata.cfg.include_idle = opts.include_idle.into();
        // The command's PID is added after load, so following implies matching.
        rodata.cfg.match_tgid = (!opts.tgids.is_empty() || opts.follow_children).into();
        rodata.cfg.match_tid = (!opts.tids.is_empty()).into();
        // A few -p processes and no other: compared in the program, the
        // map unread (it still holds them, for the side band's filter).
        if opts.fixed_processes() && opts.tgids.len() <= rodata.cfg.fixed_tgids.len() {
            rodata.cfg.nr_fixed_tgids = opts.tgids.len() as u32;
            rodata.cfg.fixed_tgids[..opts.tgids.len()].copy_from_slice(&opts.tgids);
        }
        rodata.cfg.follow_children = opts.follow_children.into();
        rodata.cfg.filter_len = opts.filter.len() as u32;
        rodata.cfg.on_cpu = opts.mode.on_cpu().into();
        rodata.cfg.off_cpu = opts.mode.off_cpu().into();
        rodata.cfg.all_states = (opts.mode == Mode::Wall).into();
        rodata.cfg.period_as_us = (opts.mode == Mode::Wall).into();
        rodata.cfg.kernel_threads = opts.kernel_threads.into();
        rodata.cfg.min_block_ns = opts.min_block_ns;
        rodata.cfg.max_block_ns = opts.max_block_ns;
        let dwarf = opts.dwarf();
        rodata.cfg.dwarf = dwarf.into();
        rodata.cfg.cgroups = opts.cgroups.into();
        rodata.cfg.map_totals = opts.map_totals.into();
        rodata.cfg.python = opts.walks_python().into();
        rodata.ids_per_cpu = fallbacks.per_cpu_ids.into();
        rodata.task_btf_missing = fallbacks.task_addr.into();
        rodata.filter_cgroups = opts.filters_cgroups().into();
        rodata.ids_cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")? as u32;
        // No kernel layout generation (before 6.4): bprof keeps its own,
        // for the raw-stack cache of frame-pointer walks (dwarf stacks are
        // not cached: the tracepoints would only slow every syscall down).
        let layout_gens = opts.user_stacks && !dwarf && !kfeatures::kernel_has_layout_seq();
        // Maps this profile never uses get one entry: the preallocated ones
        // (LRU hashes) and the arrays cost ms of start-up each at full size.
        let n = opts.stack_storage_size;
        let used = |yes: bool, n: u32| if yes { n } else { 1 };
        let (kernel, user) = (opts.kernel_stacks, opts.user_stacks);
        open.maps.kern_stacks.set_max_entries(used(kernel, n))?;
        open.maps.kern_stack_ids.set_max_entries(used(kernel, n))?;
        open.maps.user_stacks.set_max_entries(used(user, n))?;
        open.maps.user_stacks_deep.set_max_entries(used(user, n))?;
        open.maps.user_stack_ids.set_max_entries(used(user, n))?;
        let python = opts.walks_python();
        open.maps.py_stacks.set_max_entries(used(python, n))?;
        open.maps.py_stacks_deep.set_max_entries(used(python, n))?;
        open.maps.py_stack_ids.set_max_entries(used(python, n))?;
        if !python {
            open.maps.py_procs.set_max_entries(1)?;
            open.maps.py_threads.set_max_entries(1)?;
            open.maps.py_codes_seen.set_max_entries(1)?;
            open.progs.py_exec.set_autoload(false);
            open.progs.py_exit.set_autoload(false);
        }
        open.maps
            .user_stack_cache
            .set_max_entries(used(user && !dwarf, n))?;
        open.maps
            .layout_gens
            .set_max_entries(used(layout_gens, 16384))?;
        if !dwarf {
            open.maps.unwind_files.set_max_entries(1)?;
            open.maps.unwind_maps.set_max_entries(1)?;
            open.maps.unwind_rules.set_max_entries(1)?;
        } else if opts.fixed_processes() {
            // The processes given, and no other: 4096 chunks of 2 MiB of
            // code each (its buckets, sized for 65 536, would be allocated
            // at every start).
            let chunks = opts.tgids.len().saturating_mul(4096).min(65536) as u32;
            open.maps.unwind_maps.set_max_entries(chunks)?;
        }
        maps::size_targets(
            &mut open.maps.target_tgids,
            &mut open.maps.target_tids,
            opts.tgids.len(),
            opts.tids.len(),
            opts.follow_children,
        )?;
        // A profile holds a handful of targets in maps sized for 65 536:
        // preallocated, all their elements would be made at every start.
        // (Preallocated all the same below without the BPF memory
        // allocator, before 6.1, as the stat object keeps them.)
        open.maps
            .target_tgids
            .set_map_flags(libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC)?;
        open.maps
            .target_tids
            .set_map_flags(libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC)?;
        if !opts.follow_children {
            open.progs.follow_fork.set_autoload(false);
            open.progs.arm_command.set_autoload(false);
        }
        // Each program that loops comes in two builds (bpf/loop.bpf.h):
        // one is loaded.
        let open_loops = fallbacks.open_loops;
        open.progs.do_sample.set_autoload(!open_loops);
        open.progs.do_sample_open.set_autoload(open_loops);
        open.progs
            .offcpu_switch
            .set_autoload(opts.mode.off_cpu() && !open_loops);
        open.progs
            .offcpu_switch_open
            .set_autoload(opts.mode.off_cpu() && open_loops);
        open.progs
            .flush_counts
            .set_autoload(opts.intervals && !open_loops);
        open.progs
            .flush_counts_open
            .set_autoload(opts.intervals && open_loops);
        if !opts.mode.off_cpu() {
            open.progs.offcpu_exit.set_autoload(false);
        }
        // The learners too: without bpf_loop there is no bpf_find_vma
        // either (both 5.17), and the open ones read what they learn from
        // the mmap's arguments and the mm's list of mappings.
        open.progs
            .learn_exec
            .set_autoload(opts.learns_at_exec() && !open_loops);
        open.progs
            .learn_exec_open
            .set_autoload(opts.learns_at_exec() && open_loops);
        open.progs
            .learn_mmap
            .set_autoload(opts.learns_mmaps() && !open_loops);
        open.progs
            .learn_mmap_open
            .set_autoload(opts.learns_mmaps() && open_loops);
        if !layout_gens {
            open.progs.layout_enter.set_autoload(false);
            open.progs.layout_exit.set_autoload(false);
        }
        // Kept open until the load, which makes count_slot from it.
        let template = fallbacks
            .prealloc
            .then(|| maps::create_count_map(1))
            .transpose()?;
        if let Some(template) = &template {
            // Every hash map preallocated, and the count maps' template as
            // user space makes them (kfeatures::hash_map_flags).
            for mut map in open.open_object_mut().maps_mut() {
                if map.map_type() == libbpf_rs::MapType::Hash {
                    let flags = map.map_flags() & !libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC;
                    map.set_map_flags(flags)?;
                }
            }
            open.maps.count_slot.set_inner_map_fd(template.as_fd())?;
        }
        // The features are probed only when the load fails: the probes'
        // loading and BTF parsing are work a working kernel never needs.
        match open.load() {
            Ok(skel) => Ok((skel, layout_gens)),
            Err(e) if last => {
                kfeatures::check(kfeatures::PROFILE)?;
                Err(load_error(e))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Adds a process to the targets, counted from `from` on.
    pub fn add_tgid(&self, tgid: u32, from: TargetFrom) -> Result<()> {
        maps::add_target_tgid(&self.skel.maps.target_tgids, tgid, from)
    }

    /// Attaches the sampling program to each perf event (taking ownership of
    /// the fds: libbpf closes them when the links drop) and the fork
    /// follower if configured.
    pub fn attach(&mut self, events: Vec<OwnedFd>, follow_children: bool) -> Result<()> {
        if self.layout_gens {
            self.attach_layout_gens()?;
        }
        self.attach_learners();
        if self.python {
            let progs = &self.skel.progs;
            self.links.push(
                progs
                    .py_exec
                    .attach_raw_tracepoint("sched_process_exec")
                    .context("attaching raw tracepoint sched_process_exec")?,
            );
            self.links.push(
                progs
                    .py_exit
                    .attach_raw_tracepoint("sched_process_exit")
                    .context("attaching raw tracepoint sched_process_exit")?,
            );
        }
        if follow_children {
            let progs = &self.skel.progs;
            self.links.extend(maps::attach_followers(
                &progs.follow_fork,
                &progs.arm_command,
            )?);
        }
        let sample = if self.open_loops {
            &self.skel.progs.do_sample_open
        } else {
            &self.skel.progs.do_sample
        };
        for fd in events {
            let link = sample
                .attach_perf_event(fd.into_raw_fd())
                .context("attaching the sampling program to a perf event")?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Attaches bprof's layout generation to every syscall's entry and exit
    /// (raw tracepoints; the programs keep to the syscalls that can unmap
    /// or move code), then turns it on (see layout_gens in stacks.bpf.h).
    /// If they would not attach, the cache is off: every sample takes the
    /// build-ID walk, as without any generation.
    fn attach_layout_gens(&mut self) -> Result<()> {
        let progs = &self.skel.progs;
        let links = [
            progs.layout_enter.attach_raw_tracepoint("sys_enter"),
            progs.layout_exit.attach_raw_tracepoint("sys_exit"),
        ];
        if links.iter().any(|l| l.is_err()) {
            self.layout_gens_missing = true;
            return Ok(());
        }
        self.links.extend(links.into_iter().flatten());
        let bss = self.bss_mut()?;
        // SAFETY: a plain store into the mmapped .bss; the program reads it.
        unsafe { std::ptr::write_volatile(&mut bss.layout_gens_on, 1) };
        Ok(())
    }

    /// Attaches the programs that learn a target's code mappings at its
    /// mmap and exec (see learn_mmap in profile.bpf.c). Without them walks
    /// still ask the kernel for a mapping user space has not read yet, as
    /// they would anyway.
    fn attach_learners(&mut self) {
        let progs = &self.skel.progs;
        let mut links = Vec::new();
        let (exec, mmap) = if self.open_loops {
            (&progs.learn_exec_open, &progs.learn_mmap_open)
        } else {
            (&progs.learn_exec, &progs.learn_mmap)
        };
        if self.learn_exec {
            links.push(
                exec.attach_raw_tracepoint("sched_process_exec")
                    .context("raw tracepoint sched_process_exec"),
            );
        }
        if self.learn_mmaps {
            links.push(
                mmap.attach_raw_tracepoint("sys_exit")
                    .context("raw tracepoint sys_exit"),
            );
        }
        for link in links {
            match link {
                Ok(l) => self.links.push(l),
                Err(e) => self.learners_missing = Some(e),
            }
        }
    }

    /// Why the mapping learners did not attach, if they did not (known
    /// once [`Self::attach`] has run).
    pub fn learners_missing(&self) -> Option<&anyhow::Error> {
        self.learners_missing.as_ref()
    }

    /// Whether bprof's own layout generation was needed (before 6.4,
    /// `--call-graph fp`) but could not attach: then every user stack takes
    /// the build-ID walk. Known once [`Self::attach`] has run.
    pub fn layout_gens_missing(&self) -> bool {
        self.layout_gens_missing
    }

    /// Attaches the off-CPU program. The kernel stacks it takes start with
    /// BPF and tracepoint frames: [`Self::calibration_stack`] hands over one
    /// raw stack to count them by, and off-CPU accounting starts only once
    /// [`Self::arm_offcpu`] has set how many to skip.
    pub fn attach_offcpu(&mut self) -> Result<()> {
        let progs = &self.skel.progs;
        // Each thread's entry goes at its exit, attached first: none is
        // left behind for a reused thread id.
        let exit = progs
            .offcpu_exit
            .attach_raw_tracepoint("sched_process_exit")
            .context("attaching raw tracepoint sched_process_exit")?;
        let switch = if self.open_loops {
            &progs.offcpu_switch_open
        } else {
            &progs.offcpu_switch
        };
        let switch = switch.attach().context("attaching tp_btf/sched_switch")?;
        self.links.push(exit);
        self.links.push(switch);
        Ok(())
    }

    /// Starts off-CPU accounting, skipping the first `skip` frames of every
    /// kernel stack it takes, and one more where the next is within
    /// `iterator` (the tracepoint's iterator, when given).
    pub fn arm_offcpu(&mut self, skip: u32, iterator: Option<(u64, u64)>) -> Result<()> {
        let bss = self.bss_mut()?;
        bss.kernel_skip = skip;
        (bss.traceiter_lo, bss.traceiter_hi) = iterator.unwrap_or_default();
        // SAFETY: a plain store into the mmapped .bss; the program reads it.
        unsafe { std::ptr::write_volatile(&mut bss.offcpu_armed, 1) };
        Ok(())
    }

    /// The program's mmapped .bss, where user space sets what it reads.
    fn bss_mut(&mut self) -> Result<&mut super::skel::profile::types::bss> {
        self.skel
            .maps
            .bss_data
            .as_deref_mut()
            .context("BPF object has no .bss")
    }

    /// The addresses of one raw kernel stack (skip 0) of the off-CPU
    /// program, leaf first, once a context switch has recorded it.
    pub fn calibration_stack(&self) -> Result<Vec<u64>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let cpu = loop {
            let bss = self
                .skel
                .maps
                .bss_data
                .as_deref()
                .context("BPF object has no .bss")?;
            // SAFETY: reading the mmapped .bss, which the program writes.
            let done = unsafe { std::ptr::read_volatile(&bss.calib_done) };
            if done > 0 {
                break done - 1;
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("measuring the stack skip: no context switch was seen in 2 s (use --stack-skip N)");
            }
            // Sleeping is itself a context switch.
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        // The stack of the CPU that recorded it (one slot per CPU).
        let raw = self
            .skel
            .maps
            .calib_stack
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading the calibration stack")?
            .and_then(|mut cpus| {
                let i = usize::try_from(cpu).ok()?;
                (i < cpus.len()).then(|| cpus.swap_remove(i))
            })
            .unwrap_or_default();
        let ips: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
            .take_while(|&ip| ip != 0)
            .collect();
        Ok(ips)
    }

    /// Stops sampling: detaches every program and closes the perf events,
    /// so the maps hold a final, consistent state.
    pub fn detach(&mut self) {
        self.links.clear();
    }

    /// The kernel's run time (ns) and run count of this profile's programs,
    /// or `None` when the kernel did not time them
    /// (`kernel.bpf_stats_enabled`, or another program's BPF_ENABLE_STATS,
    /// on only while they ran). After `detach`, none is left out.
    pub fn bpf_time(&self) -> Option<(u64, u64)> {
        let on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
            .is_ok_and(|s| s.trim() != "0");
        let mut total = (0, 0);
        for p in self.skel.object().progs().filter(|p| p.autoload()) {
            let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
            let mut len = std::mem::size_of_val(&info) as u32;
            // SAFETY: a loaded program's fd, and an info struct of `len`
            // bytes for the kernel to fill (no array pointers set).
            let r = unsafe {
                libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                    std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&p)),
                    &mut info,
                    &mut len,
                )
            };
            if r == 0 {
                total.0 += info.run_time_ns;
                total.1 += info.run_cnt;
            }
        }
        (on || total.1 > 0).then_some(total)
    }
}

fn load_error(e: libbpf_rs::Error) -> anyhow::Error {
    let hint = match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => " (need root, or CAP_BPF and CAP_PERFMON)",
        _ => "",
    };
    anyhow::Error::new(e).context(format!(
        "loading the BPF programs failed on Linux {}{hint} (-vv shows libbpf's log)",
        crate::bpf::kfeatures::kernel_release()
    ))
}
