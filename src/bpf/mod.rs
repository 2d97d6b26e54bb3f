//! The BPF side: the only code that loads or attaches programs, and the
//! typed access to their maps; collect/ and unwind/ hold map handles lent
//! from here and read and write them mostly through [`maps`] and
//! [`mmap_array`].
//!
//! [`profile`] is the sampling program (on-CPU, off-CPU, fork following),
//! [`abi`] the constants and layouts shared with the programs,
//! [`counting`] the per-session reader of `bprof stat`, [`shared_counters`]
//! the per-CPU counters every session shares, [`maps`] the typed map access
//! and batch reads, [`mmap_array`] the unwinder's arrays written through mmap,
//! [`preflight`] the checks made before loading, [`kfeatures`] the
//! kernel features the programs need, [`core_btf`] the kernel types kept
//! per boot for their relocations, and [`stacks`] the stacks and
//! counters as the kernel hands them over, the plain data every later stage
//! reads.

pub(crate) mod abi;
pub(crate) mod core_btf;
pub(crate) mod counting;
pub(crate) mod kfeatures;
pub(crate) mod maps;
pub(crate) mod mmap_array;
pub(crate) mod preflight;
pub(crate) mod profile;
pub(crate) mod shared_counters;
pub mod stacks;

/// Generated BPF skeletons, one module per `bpf/*.bpf.c`.
pub(crate) mod skel {
    /// The profiler: on-CPU, off-CPU and fork-following programs.
    pub(crate) mod profile {
        #![allow(
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            unsafe_op_in_unsafe_fn,
            unused_imports,
            missing_docs,
            unreachable_pub
        )]
        include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
    }
    /// Feature probes (see [`super::kfeatures`]).
    pub(crate) mod probe {
        #![allow(
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            unsafe_op_in_unsafe_fn,
            unused_imports,
            missing_docs,
            unreachable_pub
        )]
        include!(concat!(env!("OUT_DIR"), "/probe.skel.rs"));
    }
    /// The shared-counter reader of `bprof stat`.
    pub(crate) mod stat {
        #![allow(
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            unsafe_op_in_unsafe_fn,
            unused_imports,
            missing_docs,
            unreachable_pub
        )]
        include!(concat!(env!("OUT_DIR"), "/stat.skel.rs"));
    }
}
