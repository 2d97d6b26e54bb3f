//! Outputs: folded stacks, pprof, the profile.py-style report and the SVG flame graph.

pub mod file;
pub mod folded;
pub mod names;
pub mod pprof;
pub mod report;
pub mod stat;
pub(crate) mod summary;

#[cfg(test)]
mod golden;
pub mod svg;
pub mod top;
