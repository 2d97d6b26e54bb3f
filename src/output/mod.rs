//! Outputs: folded stacks, the SVG flame graph, pprof, OTLP profiles sent
//! to a collector, the profile.py-style
//! report, `bprof stat`'s lines, the summary and `bprof top`'s view; each
//! output file is written whole ([`file`]) under a name that periodic
//! profiles expand per interval ([`pattern`]).

pub mod file;
pub mod folded;
pub mod otlp;
pub mod pattern;
pub mod pprof;
pub mod report;
pub mod stat;
pub(crate) mod summary;

#[cfg(test)]
mod golden;
pub mod svg;
pub mod top;
