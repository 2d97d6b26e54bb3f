//! Python frames: CPython 3.10 to 3.13 walked in the BPF sample program
//! (bpf/pyframes.bpf.h) and merged into the native stacks.
//!
//! - [`interp`] finds an interpreter in a file a process maps (static
//!   binary or libpython) and its version; [`layout`] gives the walker that
//!   version's offsets (tables checked against each interpreter the tests
//!   run, or 3.13's own debug offsets).
//! - [`tracker`] tells the walker about each Python process (at start from
//!   /proc, later from the side band's mmap records) and takes the walker's
//!   announcements of new code objects, whose names and line tables it
//!   keeps in [`codes`] (read while the process lives: names survive its
//!   exit); [`linetable`] turns an instruction into its line.
//! - [`merge`] names the frames as py-spy does and puts each run of Python
//!   frames where its eval activation stands in the native stack.

pub(crate) mod codes;
pub(crate) mod interp;
pub(crate) mod layout;
pub(crate) mod linetable;
pub(crate) mod merge;
pub(crate) mod tracker;

use std::path::{Path, PathBuf};

pub(crate) use crate::bpf::stacks::parse_py_stack as parse_stack;
pub use crate::bpf::stacks::PyFrame;

/// A mapped file whose name says it may be an interpreter, as the side
/// band saw it mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) pid: u32,
    pub(crate) path: PathBuf,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
}

/// What user space knows of Python for naming: the candidates the side
/// band saw (taken by the tracker), the code objects announced, and how
/// frames are shown.
#[derive(Debug)]
pub(crate) struct PyIndex {
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) codes: codes::Codes,
    /// Names carry the line (`--no-lineno` drops it).
    pub(crate) show_lines: bool,
}

impl Default for PyIndex {
    fn default() -> Self {
        PyIndex {
            candidates: Vec::new(),
            codes: codes::Codes::default(),
            show_lines: true,
        }
    }
}

/// The side band's hook: an executable mapping of `path` in `pid`, kept
/// when its name says it may be an interpreter.
pub(crate) fn note_mapping(
    index: &mut PyIndex,
    pid: u32,
    path: &Path,
    start: u64,
    len: u64,
    pgoff: u64,
) {
    if interp::may_be_python(path) {
        index.candidates.push(Candidate {
            pid,
            path: path.to_path_buf(),
            start,
            end: start.saturating_add(len),
            pgoff,
        });
    }
}
