//! bprof: a Linux sampling profiler that counts stacks inside the kernel
//! with BPF.
//!
//! The folders follow the pipeline (README, "Architecture"): `target`,
//! `events` and `filter` say what to watch → `bpf` loads the programs,
//! reads their maps and hands over the raw stacks ([`stacks`]) →
//! [`collect`] drains the
//! maps while recording → `unwind` feeds unwind tables to the BPF walker
//! (`--call-graph dwarf`) and `pyframes` tells it where Python keeps its
//! frames → [`symbolize`] names the frames → `output`
//! writes folded stacks, SVG, pprof, report and stat text. [`process`]
//! holds what several stages read of a process (its mappings, build IDs,
//! bprof's own vDSO) and `jit` the JIT symbol files of the profiled ones.
//! `session` drives one profile, `bprof stat` or `bprof top`; the binary is
//! a thin wrapper around [`run`].
//!
//! The public surface is what the benches and tests reach: the raw stacks,
//! the side band's index, a process's mappings and the symbolizer.
//! Everything else is crate internal.

pub(crate) mod bpf;
pub(crate) mod cli;
pub mod collect;
pub(crate) mod events;
pub(crate) mod fasthash;
pub(crate) mod filter;
pub(crate) mod fsafe;
pub(crate) mod jit;
pub(crate) mod mmap;
pub(crate) mod names;
pub(crate) mod output;
pub mod process;
pub(crate) mod pyframes;
pub(crate) mod session;
pub mod symbolize;
pub(crate) mod target;
pub(crate) mod unwind;

pub use bpf::stacks;
pub use session::run;
/// Unwind table building, for the benches (benches/unwind_tables.rs).
pub use unwind::table as unwind_table;
