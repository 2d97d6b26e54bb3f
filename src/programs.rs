//! BPF programs: loading the profile skeleton, configuring it, attaching it.

use std::mem::MaybeUninit;
use std::os::fd::{IntoRawFd, OwnedFd};

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::skel::profile::{ProfileSkel, ProfileSkelBuilder};

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
}

/// The loaded profile program and the links that keep it attached.
pub struct ProfileProgram<'obj> {
    /// The skeleton, whose maps the later stages read.
    pub skel: ProfileSkel<'obj>,
    links: Vec<Link>,
}

/// Routes libbpf's messages: silent unless `-v`, since a failure is
/// reported by bprof itself in one line.
pub fn init_libbpf_logging(verbose: bool) {
    let print: Option<(libbpf_rs::PrintLevel, libbpf_rs::PrintCallback)> = verbose
        .then_some((libbpf_rs::PrintLevel::Debug, |_, msg| {
            eprint!("libbpf: {msg}")
        }));
    libbpf_rs::set_print(print);
}

impl<'obj> ProfileProgram<'obj> {
    /// Opens, configures and loads the program; nothing is attached yet.
    pub fn load(obj: &'obj mut MaybeUninit<OpenObject>, opts: &ProfileOptions) -> Result<Self> {
        let open = ProfileSkelBuilder::default()
            .open(obj)
            .context("opening the BPF object")?;
        let mut open = open;
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
        rodata.cfg.follow_children = opts.follow_children.into();
        let n = opts.stack_storage_size;
        open.maps.kern_stacks.set_max_entries(n)?;
        open.maps.user_stacks.set_max_entries(n)?;
        open.maps.counts.set_max_entries(n)?;
        if !opts.follow_children {
            open.progs.follow_fork.set_autoload(false);
        }
        let skel = open.load().map_err(load_error)?;
        let prog = ProfileProgram {
            skel,
            links: Vec::new(),
        };
        for &tgid in &opts.tgids {
            prog.add_tgid(tgid)?;
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

    /// Adds a process to the target set.
    pub fn add_tgid(&self, tgid: u32) -> Result<()> {
        self.skel
            .maps
            .target_tgids
            .update(&tgid.to_ne_bytes(), &[1], MapFlags::ANY)
            .context("adding a target process")
    }

    /// Attaches the sampling program to each perf event (taking ownership of
    /// the fds: libbpf closes them when the links drop) and the fork
    /// follower if configured.
    pub fn attach(&mut self, events: Vec<OwnedFd>, follow_children: bool) -> Result<()> {
        if follow_children {
            let link = self
                .skel
                .progs
                .follow_fork
                .attach()
                .context("attaching tp_btf/sched_process_fork")?;
            self.links.push(link);
        }
        for fd in events {
            let link = self
                .skel
                .progs
                .do_sample
                .attach_perf_event(fd.into_raw_fd())
                .context("attaching the sampling program to a perf event")?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Stops sampling: detaches every program and closes the perf events,
    /// so the maps hold a final, consistent state.
    pub fn detach(&mut self) {
        self.links.clear();
    }
}

fn load_error(e: libbpf_rs::Error) -> anyhow::Error {
    let hint = match e.kind() {
        libbpf_rs::ErrorKind::PermissionDenied => " (need root, or CAP_BPF and CAP_PERFMON)",
        _ => "",
    };
    anyhow::Error::new(e).context(format!("loading the BPF programs failed{hint}"))
}
