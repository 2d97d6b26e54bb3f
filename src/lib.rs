//! bprof: a Linux sampling profiler that counts stacks inside the kernel
//! with BPF.
//!
//! The modules follow the pipeline: target and events ([`target`],
//! [`events`], [`sideband`]) → BPF programs ([`programs`], [`stat`],
//! [`shared`]) → maps ([`maps`]) → stacks ([`stacks`]) → symbols
//! ([`symbols`], [`buildid`]) → outputs ([`output`]). [`record`] and
//! [`stat_cmd`] drive one session each; the binary is a thin wrapper.

#![warn(missing_docs)]

pub mod buildid;
pub mod cgroup;
pub mod cli;
pub mod collect;
pub mod counters;
pub mod debuginfod;
pub mod elfcheck;
pub mod events;
pub mod filter;
pub mod fsafe;
pub mod jit;
pub mod jitdump;
pub mod maps;
pub mod output;
pub mod perfmap;
pub mod preflight;
pub mod programs;
pub mod record;
pub mod settings;
pub mod shared;
pub mod sideband;
pub mod signals;
pub mod stacks;
pub mod stat;
pub mod stat_cmd;
pub mod symbols;
pub mod target;
pub mod unwind;

/// Generated BPF skeletons, one module per `bpf/*.bpf.c`.
pub mod skel {
    /// The profiler: on-CPU, off-CPU and fork-following programs.
    pub mod profile {
        #![allow(clippy::all, unused_imports, missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
    }
    /// The shared-counter reader of `bprof stat`.
    pub mod stat {
        #![allow(clippy::all, unused_imports, missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/stat.skel.rs"));
    }
}
