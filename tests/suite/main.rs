//! bprof's integration suite: one test binary. The tests load real BPF
//! programs and profile real fixtures, so most need root (scripts/test.sh);
//! without it they are skipped with a message, and only the checks that
//! need no privilege run (`cargo test` also runs the unit and golden tests
//! in src/, which never need root).

#[macro_use]
mod common;

mod bad_input;
mod fallbacks;
mod filter;
mod habits;
mod hostile;
mod hostile_names;
mod hostile_network;
mod hostile_outputs;
mod jit;
mod mapped_files;
mod mutants;
mod names;
mod noid;
mod offcpu;
mod otlp;
mod pprof;
mod profile;
mod python;
mod stat;
mod top;
mod unwind;
