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

use crate::bpf::abi::{self, py_frame, read_plain};

/// One Python frame as the walker recorded it: a code object (address and
/// identity hash) and the instruction it was at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyFrame {
    /// The code object's address.
    pub code: u64,
    /// A hash of fields read from it (another object at a freed one's
    /// address has another).
    pub id: u64,
    /// The instruction index (code units); negative before the first.
    pub lasti: i32,
    /// The frame began a C-level call of the eval loop.
    pub entry: bool,
}

/// The walker's counters (`struct py_stats`), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyStats {
    /// Samples of a Python process walked.
    pub walks: u64,
    /// Python frames recorded.
    pub frames: u64,
    /// Walks by how they ended (`enum py_end`).
    pub end: [u64; abi::PY_END_KINDS as usize],
    /// Reads of frames and thread states (a span of frames each).
    pub reads: u64,
    /// Searches of a thread list for a thread state.
    pub searches: u64,
    /// Code objects announced.
    pub announced: u64,
    /// Announcements that found the ring full.
    pub dropped: u64,
    /// Python stacks stored.
    pub stored: u64,
    /// Python stacks lost (map full).
    pub lost: u64,
    /// Forked processes that took their parent's entry.
    pub forked: u64,
    /// Nanoseconds spent in the walks.
    pub ns: u64,
}

impl PyStats {
    /// Adds one CPU's counters.
    pub(crate) fn add(&mut self, c: &abi::py_stats) {
        self.walks += c.walks;
        self.frames += c.frames;
        for (a, b) in self.end.iter_mut().zip(c.end) {
            *a += b;
        }
        self.reads += c.reads;
        self.searches += c.searches;
        self.announced += c.announced;
        self.dropped += c.dropped;
        self.stored += c.stored;
        self.lost += c.lost;
        self.forked += c.forked;
        self.ns += c.ns;
    }
}

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

/// Parses a stored Python stack (`struct py_stack` or its short form):
/// its frames, leaf first, never past what the bytes hold.
pub(crate) fn parse_stack(bytes: &[u8]) -> Vec<PyFrame> {
    let size = std::mem::size_of::<py_frame>();
    let nr = bytes.get(..4).map_or(0, |b| {
        u32::from_ne_bytes(b.try_into().unwrap_or_default()) as usize
    });
    bytes
        .get(8..)
        .unwrap_or_default()
        .chunks_exact(size)
        .take(nr)
        .filter_map(read_plain::<py_frame>)
        .map(|f| PyFrame {
            code: f.code,
            id: f.id,
            lasti: f.lasti,
            entry: f.flags & abi::PY_FRAME_ENTRY != 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_stacks_parse_up_to_nr_and_never_past_the_bytes() {
        let mut b = Vec::new();
        b.extend_from_slice(&3u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for (code, flags) in [(0x1000u64, 0u32), (0x2000, abi::PY_FRAME_ENTRY)] {
            let f = py_frame {
                code,
                id: code + 1,
                lasti: 7,
                flags,
            };
            b.extend_from_slice(abi::plain_bytes(&f));
        }
        let frames = parse_stack(&b);
        assert_eq!(frames.len(), 2, "nr says 3, the bytes hold 2");
        assert_eq!(frames[1].code, 0x2000);
        assert!(frames[1].entry && !frames[0].entry);
        assert!(parse_stack(&b[..3]).is_empty());
    }
}
