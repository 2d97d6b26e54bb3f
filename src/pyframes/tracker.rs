//! The session's side of the walker: which processes run a known
//! interpreter (their `py_procs` entries), and the code objects the
//! walker announces (`py_events`).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, RingBuffer, RingBufferBuilder};

use super::codes::CodeKey;
use super::interp::{self, Interp, NotInterp};
use super::PyIndex;
use crate::bpf::abi::{self, py_proc, read_plain};
use crate::bpf::maps;

/// Largest line table read from a live process to complete one cut short.
const MAX_TABLE: usize = 1 << 20;

/// What the tracker did, for `-v`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TrackerStats {
    /// Processes told to the walker.
    pub(crate) processes: u64,
    /// Line tables completed from the live process (longer than an
    /// announcement holds), and those that could not be.
    pub(crate) completed: u64,
    pub(crate) not_completed: u64,
    /// Code objects named.
    pub(crate) codes: u64,
}

/// Python processes and code objects, for one session.
pub(crate) struct Tracker {
    ring: RingBuffer<'static>,
    inbox: Rc<RefCell<Vec<Vec<u8>>>>,
    /// Interpreters found (or not) in files, by device and inode.
    files: HashMap<(u64, u64), Result<Interp, NotInterp>>,
    /// Files said once to hold an interpreter bprof cannot walk.
    said: HashSet<String>,
    pub(crate) stats: TrackerStats,
}

impl Tracker {
    /// Reads the walker's announcements from `events` (`py_events`).
    pub(crate) fn new(events: &dyn MapCore) -> Result<Tracker> {
        let inbox: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
        let sink = inbox.clone();
        let mut b = RingBufferBuilder::new();
        b.add(events, move |data: &[u8]| {
            sink.borrow_mut().push(data.to_vec());
            0
        })
        .context("reading the Python code announcements")?;
        Ok(Tracker {
            ring: b.build().context("reading the Python code announcements")?,
            inbox,
            files: HashMap::new(),
            said: HashSet::new(),
            stats: TrackerStats::default(),
        })
    }

    /// Readable when an announcement waits.
    pub(crate) fn wake_fd(&self) -> std::os::fd::RawFd {
        self.ring.epoll_fd()
    }

    /// Learns the processes that run now (their /proc/PID/maps).
    pub(crate) fn scan(&mut self, procs: &dyn MapCore, pids: &[u32]) {
        for &pid in pids {
            let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
                continue;
            };
            let mut index = PyIndex::default();
            for line in maps.lines() {
                let mut w = line.split_whitespace();
                let (Some(range), Some(perms), Some(off)) = (w.next(), w.next(), w.next()) else {
                    continue;
                };
                let Some(path) = w.nth(2).filter(|p| p.starts_with('/')) else {
                    continue;
                };
                let Some((start, end)) = range.split_once('-') else {
                    continue;
                };
                let num = |s: &str| u64::from_str_radix(s, 16).ok();
                if let (true, Some(start), Some(end), Some(off)) =
                    (perms.contains('x'), num(start), num(end), num(off))
                {
                    super::note_mapping(&mut index, pid, Path::new(path), start, end - start, off);
                }
            }
            for c in index.candidates {
                self.learn(procs, &c);
            }
        }
    }

    /// Each tick: learns the processes the side band saw map an
    /// interpreter, and keeps the code objects announced since.
    pub(crate) fn tick(&mut self, procs: &dyn MapCore, index: &mut PyIndex) {
        for c in std::mem::take(&mut index.candidates) {
            self.learn(procs, &c);
        }
        let _ = self.ring.consume();
        let inbox = std::mem::take(&mut *self.inbox.borrow_mut());
        for ev in inbox {
            if let Some(key) = index.codes.add(&ev) {
                match complete(procs, &key) {
                    Some(table) => {
                        self.stats.completed += 1;
                        index.codes.complete(&key, table);
                    }
                    None => self.stats.not_completed += 1,
                }
            }
        }
        self.stats.codes = index.codes.len() as u64;
    }

    /// Tells the walker about `c.pid` if `c` is an interpreter it can walk;
    /// says once when it is one it cannot.
    fn learn(&mut self, procs: &dyn MapCore, c: &super::Candidate) {
        let Some(file) = interp::open_mapped(c.pid, &c.path, c.start, c.end) else {
            return;
        };
        let Ok(meta) = file.metadata() else { return };
        let found = self
            .files
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| interp::probe(file, &c.path));
        let interp = match found {
            Ok(i) => i,
            Err(NotInterp::NotPython) => return,
            Err(NotInterp::Unsupported(version, why)) => {
                let path = c.path.display().to_string();
                if self.said.insert(path.clone()) {
                    let v = version
                        .as_deref()
                        .map_or(String::new(), |v| format!(" {v}"));
                    eprintln!(
                        "bprof: {path} (pid {}) is CPython{v}, {why}: its samples show native frames only (bprof walks CPython 3.10 to 3.13)",
                        c.pid
                    );
                }
                return;
            }
        };
        let Some(bias) = interp.bias(c.start, c.pgoff) else {
            return;
        };
        let p = py_proc {
            runtime: interp.runtime.wrapping_add(bias),
            code_type: interp.code_type.wrapping_add(bias),
            str_type: interp.str_type.wrapping_add(bias),
            bytes_type: interp.bytes_type.wrapping_add(bias),
            gen_addr: if interp.gen == 0 {
                0
            } else {
                interp.gen.wrapping_add(bias)
            },
            model: interp.layout.model.0,
            version: interp.version,
            o: interp.layout.offsets,
        };
        if maps::put(procs, &c.pid, &p).is_err() {
            return;
        }
        // Exited before the entry went in: its exit removed nothing, and
        // the pid must not keep it.
        if !crate::target::alive(c.pid) {
            maps::remove(procs, &c.pid);
            return;
        }
        self.stats.processes += 1;
    }
}

/// The whole line table of code object `key` (cut short in its
/// announcement), read from the live process: only if the object there
/// still has the identity the walker recorded.
fn complete(procs: &dyn MapCore, key: &CodeKey) -> Option<Vec<u8>> {
    let &(pid, code, id) = key;
    let bytes = maps::get_by_u32(procs, pid).ok().flatten()?;
    let p = read_plain::<py_proc>(&bytes)?;
    let o = p.o;
    let co = read_mem(pid, code, usize::from(o.co_read))?;
    let u64_at = |b: &[u8], off: u16| -> Option<u64> {
        let off = usize::from(off);
        Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
    };
    let u32_at = |b: &[u8], off: u16| -> Option<u32> {
        let off = usize::from(off);
        Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
    };
    if u64_at(&co, 8)? != p.code_type {
        return None;
    }
    let (name, file, table) = (
        u64_at(&co, o.co_name)?,
        u64_at(&co, o.co_filename)?,
        u64_at(&co, o.co_linetable)?,
    );
    let lines =
        u64::from(u32_at(&co, o.co_firstlineno)?) << 32 | u64::from(u32_at(&co, o.co_argcount)?);
    if code_id(name, file, table, lines) != id {
        return None;
    }
    let head = read_mem(pid, table, 64)?;
    if u64_at(&head, 8)? != p.bytes_type {
        return None;
    }
    let size = usize::try_from(u64_at(&head, o.bytes_size)?).ok()?;
    if size > MAX_TABLE {
        return None;
    }
    read_mem(pid, table + u64::from(o.bytes_data), size)
}

/// The walker's identity hash of a code object (py_frame_step).
pub(crate) fn code_id(name: u64, file: u64, table: u64, lines: u64) -> u64 {
    let fnv = |h: u64, w: u64| {
        let x = w.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h ^ x ^ (x >> 32)).wrapping_mul(0x0000_0100_0000_01b3)
    };
    let id = [name, file, table, lines]
        .into_iter()
        .fold(0xcbf2_9ce4_8422_2325, fnv);
    id | u64::from(id == 0)
}

/// `len` bytes of process `pid`'s memory at `addr`.
fn read_mem(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one local iovec over `buf`'s `len` bytes, which the call
    // writes; the remote address is only read in the other process.
    let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

/// The `-v` lines on the Python walks.
pub(crate) fn describe(s: &crate::bpf::stacks::Stats, t: &TrackerStats) -> String {
    let py = &s.py;
    let ends: Vec<String> = py
        .end
        .iter()
        .zip(END_NAMES)
        .filter(|(n, _)| **n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
    format!(
        "bprof: python: {} processes learned, {} walks ({}; {} ns a walk), {} frames from {} reads, {} thread-list searches; {} code objects announced ({} found the ring full and were sent again later), {} kept, {} line tables completed from the process ({} could not be); {} Python stacks stored, {} lost",
        t.processes,
        py.walks,
        if ends.is_empty() { "none".to_string() } else { ends.join(", ") },
        py.ns / py.walks.max(1),
        py.frames,
        py.reads,
        py.searches,
        py.announced,
        py.dropped,
        t.codes,
        t.completed,
        t.not_completed,
        py.stored,
        py.lost
    )
}

/// `enum py_end` names, for `-v`.
pub(crate) const END_NAMES: [&str; abi::PY_END_KINDS as usize] = [
    "reached the outermost frame",
    "had no thread state (not a Python thread)",
    "found no interpreter",
    "found the thread running no Python",
    "ended at a failed read",
    "ended at a bad pointer",
    "ended at a frame whose code was not a code object",
    "ended at a frame linked to itself",
    "ended at the depth limit",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_hash_is_the_walkers() {
        // A hash that is 0 is made 1, as the walker's `id |= !id`.
        assert_ne!(code_id(1, 2, 3, 4), 0);
        assert_ne!(code_id(1, 2, 3, 4), code_id(1, 2, 3, 5));
        assert_ne!(code_id(1, 2, 3, 4), code_id(2, 1, 3, 4));
    }
}
