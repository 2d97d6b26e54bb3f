//! `bprof stat`: counting through the shared per-CPU counters (see
//! shared.rs and bpf/stat.bpf.c): events → shared arrays → this session's
//! program → per-target sums → perf-stat style output.

use std::mem::MaybeUninit;
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::bpf::abi::{self, read_plain};
use crate::bpf::maps::{self, TargetFrom};
use crate::bpf::shared_counters::{Session, Shared};
use crate::bpf::skel::stat::types::{stat_config, stat_scope};
use crate::bpf::skel::stat::{StatSkel, StatSkelBuilder};
use crate::events::counting::EventSpec;
use crate::target::cgroup::CgroupId;

/// Whose counts a session keeps.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Only these CPUs (empty: all).
    pub cpus: Vec<u32>,
    /// Only these processes (with their new threads).
    pub pids: Vec<u32>,
    /// Only these threads.
    pub tids: Vec<u32>,
    /// Add forked children of target processes (`-- COMMAND`).
    pub follow_children: bool,
    /// Per-cgroup sums, as (name, id).
    pub cgroups: Vec<(String, CgroupId)>,
}

impl Scope {
    fn system_wide(&self) -> bool {
        self.pids.is_empty() && self.tids.is_empty() && !self.follow_children
    }
}

/// A summed reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// Events counted.
    pub counter: u64,
    /// Nanoseconds the counter was enabled while a target ran.
    pub enabled: u64,
    /// Nanoseconds it was actually counting (less when multiplexed).
    pub running: u64,
}

impl Reading {
    /// The count, scaled up if the counter was multiplexed.
    pub fn scaled(&self) -> u64 {
        if self.running == 0 || self.running >= self.enabled {
            self.counter
        } else {
            (self.counter as u128 * self.enabled as u128 / self.running as u128) as u64
        }
    }

    /// The difference since an earlier reading.
    pub fn since(&self, earlier: &Reading) -> Reading {
        Reading {
            counter: self.counter.saturating_sub(earlier.counter),
            enabled: self.enabled.saturating_sub(earlier.enabled),
            running: self.running.saturating_sub(earlier.running),
        }
    }
}

/// Counts of one scope: per requested event, `None` when not supported.
pub type Counts = Vec<Option<Reading>>;

/// A loaded, attached counting session.
pub struct StatProgram<'obj> {
    skel: StatSkel<'obj>,
    links: Vec<Link>,
    /// Requested event index → BPF slot (None: not supported here).
    slots: Vec<Option<u32>>,
    cpus: Vec<u32>,
    nr_cgroups: usize,
    /// -a: counts are whole CPUs', read at syncs.
    system_wide: bool,
    /// Shared-array membership; dropping it may free the counters.
    pub session: Session,
}

/// Fills the program's read-only configuration; returns, per event, its
/// BPF slot (`None` for an event this machine cannot count).
fn configure(cfg: &mut stat_config, session: &Session, scope: &Scope) -> Vec<Option<u32>> {
    // BPF slot i reads shared slot event_slots[i]; unsupported events
    // take no BPF slot.
    let mut slots = Vec::with_capacity(session.events.len());
    let mut next = 0u32;
    for shared in &session.events {
        match shared {
            Shared::Slot(s) => {
                cfg.event_slots[next as usize] = *s;
                slots.push(Some(next));
                next += 1;
            }
            Shared::NotSupported => slots.push(None),
        }
    }
    cfg.nr_cpus = session.nr_cpus;
    cfg.nr_events = next;
    let how = if scope.system_wide() {
        stat_scope::STAT_SCOPE_ALL
    } else {
        stat_scope::STAT_SCOPE_TARGETS
    };
    cfg.scope = how.0 as u8;
    cfg.match_tgid = (!scope.pids.is_empty() || scope.follow_children).into();
    cfg.match_tid = (!scope.tids.is_empty()).into();
    cfg.follow_children = scope.follow_children.into();
    cfg.match_cpu = (!scope.cpus.is_empty()).into();
    cfg.nr_cgroups = scope.cgroups.len() as u32;
    for (i, (_, cg)) in scope.cgroups.iter().enumerate() {
        cfg.cgroup_ids[i] = cg.id;
        cfg.cgroup_levels[i] = cg.level;
    }
    slots
}

impl<'obj> StatProgram<'obj> {
    /// Joins the shared counters for `specs` and loads this session's program.
    pub fn load(
        obj: &'obj mut MaybeUninit<OpenObject>,
        pin_dir: &Path,
        specs: &[EventSpec],
        scope: &Scope,
        online: &[u32],
    ) -> Result<Self> {
        if specs.len() > abi::STAT_MAX_EVENTS {
            bail!(
                "at most {} events per session ({} given)",
                abi::STAT_MAX_EVENTS,
                specs.len()
            );
        }
        if scope.cgroups.len() > abi::STAT_MAX_CGROUPS {
            bail!(
                "at most {} cgroups ({} given)",
                abi::STAT_MAX_CGROUPS,
                scope.cgroups.len()
            );
        }
        // Counters live on every online CPU, whatever this session's -C:
        // other sessions share them.
        let session = Session::join(pin_dir, specs, online)?;
        let mut open = StatSkelBuilder::default()
            .open(obj)
            .context("opening the stat BPF object")?;
        {
            use std::os::fd::AsFd;
            open.maps
                .events
                .reuse_fd(session.array.as_fd())
                .context("reusing the shared counter array")?;
        }
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("stat object has no .rodata")?;
        let slots = configure(&mut rodata.cfg, &session, scope);
        maps::size_targets(
            &mut open.maps.target_tgids,
            &mut open.maps.target_tids,
            scope.pids.len(),
            scope.tids.len(),
            scope.follow_children,
        )?;
        if !scope.follow_children {
            open.progs.stat_follow_fork.set_autoload(false);
            open.progs.stat_arm_command.set_autoload(false);
        }
        let skel = open.load().context("loading the stat BPF program")?;
        let prog = StatProgram {
            skel,
            links: Vec::new(),
            slots,
            cpus: online.to_vec(),
            nr_cgroups: scope.cgroups.len(),
            system_wide: scope.system_wide(),
            session,
        };
        prog.fill_targets(scope)?;
        Ok(prog)
    }

    /// The -C CPUs, -p processes and -t threads, into the target maps.
    fn fill_targets(&self, scope: &Scope) -> Result<()> {
        for &cpu in &scope.cpus {
            self.skel
                .maps
                .counted_cpus
                .update(&cpu.to_ne_bytes(), &[1], MapFlags::ANY)?;
        }
        for &pid in &scope.pids {
            self.add_tgid(pid, TargetFrom::Now)?;
        }
        for &tid in &scope.tids {
            self.skel
                .maps
                .target_tids
                .update(&tid.to_ne_bytes(), &[1], MapFlags::ANY)?;
        }
        Ok(())
    }

    /// Adds a process to the targets, counted from `from` on.
    pub fn add_tgid(&self, tgid: u32, from: TargetFrom) -> Result<()> {
        maps::add_target_tgid(&self.skel.maps.target_tgids, tgid, from)
    }

    /// Attaches, then takes a baseline reading on every CPU.
    pub fn attach(&mut self, follow_children: bool) -> Result<()> {
        if follow_children {
            let progs = &self.skel.progs;
            self.links.extend(maps::attach_followers(
                &progs.stat_follow_fork,
                &progs.stat_arm_command,
            )?);
        }
        // A system-wide count without cgroups is read at syncs alone.
        if !self.system_wide || self.nr_cgroups > 0 {
            self.links.push(
                self.skel
                    .progs
                    .stat_switch
                    .attach()
                    .context("attaching raw_tp/sched_switch")?,
            );
        }
        self.sync()
    }

    /// Runs the program once on every CPU, charging the counts since the
    /// last context switch there to whatever task runs now: after this the
    /// sums are exact up to this moment.
    pub fn sync(&self) -> Result<()> {
        for &cpu in &self.cpus {
            // args[0] marks a sync; the real tracepoint's is a bool.
            let mut ctx = [0u8; 32];
            ctx[..8].copy_from_slice(&abi::STAT_SYNC.to_ne_bytes());
            maps::run_on_cpu(&self.skel.progs.stat_switch, cpu, Some(&mut ctx))
                .with_context(|| format!("syncing the counters of CPU {cpu}"))?;
        }
        Ok(())
    }

    /// Current sums: block 0 for the target, then one per cgroup.
    pub fn read(&self) -> Result<Vec<Counts>> {
        let mut blocks = Vec::with_capacity(1 + self.nr_cgroups);
        for block in 0..=self.nr_cgroups {
            let mut counts = Vec::with_capacity(self.slots.len());
            for slot in &self.slots {
                let Some(slot) = slot else {
                    counts.push(None);
                    continue;
                };
                let key = (block as u32 * abi::STAT_MAX_EVENTS as u32 + slot).to_ne_bytes();
                let per_cpu = self
                    .skel
                    .maps
                    .sums
                    .lookup_percpu(&key, MapFlags::ANY)?
                    .unwrap_or_default();
                let mut r = Reading::default();
                for v in per_cpu
                    .iter()
                    .filter_map(|v| read_plain::<abi::stat_value>(v))
                {
                    r.counter += v.counter;
                    r.enabled += v.enabled;
                    r.running += v.running;
                }
                counts.push(Some(r));
            }
            blocks.push(counts);
        }
        Ok(blocks)
    }
}
