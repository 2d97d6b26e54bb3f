//! Outputs: folded stacks, the profile.py-style report and the SVG flame graph.

pub mod file;
pub mod folded;
pub mod report;
pub mod stat;
pub(crate) mod summary;
pub mod svg;
