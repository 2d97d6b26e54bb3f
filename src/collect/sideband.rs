//! Side-band mmap records: which file every executable mapping came from,
//! with its build ID, for processes that may exit before the profile ends.
//!
//! One software "dummy" perf event per CPU with `mmap2` set makes the
//! kernel write a PERF_RECORD_MMAP2 for every executable mmap system-wide
//! (what `perf record` does too); each file's build ID is read from the
//! file, opened as its process maps it. Only these small records go
//! through the ring buffers; samples never do. With `task` set it also
//! reports process exits, when a JIT process's perf map must be opened
//! before it is gone (see `jit`).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use perf_event_open_sys::bindings as pb;

use crate::bpf::maps;
use crate::bpf::profile::ProfileProgram;
use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::events::sampling;
use crate::jit::{self, JitFiles};
use crate::mmap::Mmap;
use crate::process::mapped::{Known, Learned, MappedFile, MappedFiles, ProcMapping, MAX_EXITED};
use crate::process::maps::{Mapping, Mappings};

/// Data pages per CPU (a power of two): 256 KiB holds thousands of records.
const DATA_PAGES: usize = 64;
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// PERF_RECORD_MISC_COMM_EXEC: the COMM record of an exec.
const MISC_COMM_EXEC: u16 = 1 << 13;

/// What the side band saw.
#[derive(Debug, Default)]
pub struct MmapIndex {
    /// Mappings by build ID (zero-padded to 20 bytes).
    pub by_build_id: HashMap<[u8; BUILD_ID_SIZE], Mappings>,
    /// Mappings whose build ID the kernel could not read at mmap time.
    pub without_build_id: Mappings,
    /// Records the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Mapping, fork, exec and exit records read.
    pub records: u64,
    /// Of those, the records skipped as other processes' (a profile with
    /// targets).
    pub skipped: u64,
    /// JIT symbol files (perf maps, jitdumps) of the processes seen.
    pub jit: JitFiles,
    /// Python: interpreters mapped, code objects announced.
    pub(crate) python: crate::pyframes::PyIndex,
    /// When set (`--call-graph dwarf`), what changes the processes'
    /// executable mappings is queued for the unwinder, in order.
    pub queue_mappings: bool,
    /// The queued changes with the kernel's time of each, oldest first
    /// (sorted after each read of the rings: one CPU's ring is read after
    /// another's, so a new image's mappings may be read before its exec).
    pub(crate) changes: Vec<(u64, Change)>,
    /// Every file the processes mapped, opened as they see it and kept.
    pub files: MappedFiles,
    /// Time spent reading the rings (the files' learning included).
    pub drain_time: std::time::Duration,
    /// The start-up snapshot's mappings per process, for the unwinder to
    /// take (one read of each /proc/PID/maps serves both); emptied once it
    /// started.
    pub(crate) snapshot: HashMap<u32, Vec<ProcMapping>>,
    /// Processes that exited, oldest first: past twice [`MAX_EXITED`] the
    /// older half leave the indexes above (their paths stay), so memory
    /// stays flat under churn. Their frames are named by build ID or by
    /// their files' keys all the same.
    exited: std::collections::VecDeque<u32>,
}

impl MmapIndex {
    /// Records that process `pid` exited.
    fn note_exit(&mut self, pid: u32) {
        self.exited.push_back(pid);
        if self.exited.len() < 2 * MAX_EXITED {
            return;
        }
        let old: HashSet<u32> = self.exited.drain(..MAX_EXITED).collect();
        self.without_build_id.forget_pids(|p| !old.contains(&p));
        for ms in self.by_build_id.values_mut() {
            ms.forget_pids(|p| !old.contains(&p));
        }
    }
}

/// A change to a process's executable mappings, as the side band told it.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// A file mapped at `[start, end)` from file offset `off`: `file`, as
    /// opened (`None`: it could not be reached).
    Mapped {
        mapping: Mapping,
        start: u64,
        end: u64,
        off: u64,
        file: Option<Arc<MappedFile>>,
    },
    /// Anonymous executable memory (JIT code) at `[start, end)`.
    Anon { pid: u32, start: u64, end: u64 },
    /// The vDSO at `[start, end)`.
    Vdso { pid: u32, start: u64, end: u64 },
    /// A new process with its parent's mappings (fork without exec).
    Forked { child: u32, parent: u32 },
    /// The process replaced its image (exec): its mappings are gone.
    Execed(u32),
    /// The process exited.
    Exited(u32),
}

struct Ring {
    fd: OwnedFd,
    map: Mmap,
}

/// The per-CPU dummy events and their ring buffers.
pub(crate) struct Sideband {
    rings: Vec<Ring>,
    page: usize,
    /// Everything read so far.
    pub index: MmapIndex,
}

impl Sideband {
    /// The rings' fds: readable once a record is waiting.
    pub fn wake_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.rings.iter().map(|r| r.fd.as_raw_fd()).collect()
    }

    /// Opens a dummy event with a ring buffer on each CPU.
    pub fn open(cpus: &[u32]) -> Result<Sideband> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (DATA_PAGES + 1);
        let mut rings = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let mut attr =
                sampling::base_attr(pb::PERF_TYPE_SOFTWARE, pb::PERF_COUNT_SW_DUMMY as u64);
            attr.set_mmap(1);
            attr.set_mmap2(1);
            // No build_id: while any session asks for build IDs in its
            // mmap records, 6.18 marks other sessions' records as carrying
            // them over their device and inode, and `perf script` of a
            // `perf record` beside bprof aborts on them. Records carry the
            // file's key; its build ID is read from the file opened.
            // PERF_RECORD_EXIT and FORK: a JIT's files are opened at its
            // exit, and a forked child has its parent's mappings.
            attr.set_task(1);
            // PERF_RECORD_COMM flagged at exec: the old image's mappings go.
            attr.set_comm(1);
            attr.set_comm_exec(1);
            // Each record ends with its time: the rings' records are put in
            // order across CPUs.
            attr.set_sample_id_all(1);
            attr.sample_type = pb::PERF_SAMPLE_TIME as u64;
            attr.set_exclude_kernel(1);
            // Readable (poll) as soon as a record is in: the session sleeps
            // until then instead of polling the rings every 10 ms.
            attr.set_watermark(1);
            attr.__bindgen_anon_2.wakeup_watermark = 1;
            let fd = sampling::open(&mut attr, -1, cpu as i32)
                .with_context(|| format!("opening the mmap side-band event on CPU {cpu}"))?;
            // SAFETY: a perf event's ring buffer, mapped whole (1 + 2^n
            // pages) as perf_event_open(2) documents; only the tail is written.
            let map = unsafe { Mmap::shared(fd.as_fd(), len, 0) }
                .context("mapping the side-band ring buffer")?;
            rings.push(Ring { fd, map });
        }
        Ok(Sideband {
            rings,
            page,
            index: MmapIndex::default(),
        })
    }

    /// Records the executable mappings of processes that exist now (all,
    /// or just `pids`), since the side band only sees mmaps from now on: a
    /// process that exits during the profile is then still resolvable.
    pub fn snapshot(&mut self, pids: Option<&[u32]>) {
        let all: Vec<u32>;
        let watch = pids.is_some();
        let pids = match pids {
            Some(p) => p,
            None => {
                all = crate::target::running_pids();
                &all
            }
        };
        for &pid in pids {
            let maps = self.index.files.add_process(pid);
            for m in &maps {
                if let ProcMapping::File { path, .. } = m {
                    self.index.without_build_id.insert(Mapping {
                        pid,
                        path: path.clone(),
                    });
                }
            }
            self.index.snapshot.insert(pid, maps);
            // Its user, should it exit during the profile; -p targets are
            // also watched for a perf map from the start.
            self.index.jit.note_process(pid, watch);
        }
    }

    /// Reads the pending records, keeping the program's target processes'
    /// only when `matches_tgids` (see [`maps::TargetCheck`]).
    pub fn drain_for(&mut self, prog: &ProfileProgram<'_>, matches_tgids: bool) {
        let mut targets = maps::TargetCheck::new(
            matches_tgids.then_some(&prog.skel.maps.target_tgids as &dyn libbpf_rs::MapCore),
        );
        self.drain(&mut |pid| targets.wants(pid));
    }

    /// Reads every pending record from every ring, keeping those of the
    /// processes `wanted` says the profile is about (the rings hold every
    /// process's: indexing, queueing and JIT-watching the others would cost
    /// bprof work at every foreign exec).
    pub fn drain(&mut self, wanted: &mut dyn FnMut(u32) -> bool) {
        let t0 = std::time::Instant::now();
        for ring in &self.rings {
            drain_ring(ring, self.page, &mut self.index, wanted);
        }
        // Stable: records of one time stay in ring order.
        self.index.changes.sort_by_key(|c| c.0);
        self.index.jit.poll();
        self.index.drain_time += t0.elapsed();
    }
}

/// Forgets the mappings of processes that were gone at the end of the last
/// interval too: their samples were counted before they exited, so by now
/// (one drain later) every one of them has been written.
pub(crate) fn forget_gone(index: &mut MmapIndex, gone: &mut HashSet<u32>) {
    let mut pids: HashSet<u32> = index.without_build_id.pids().collect();
    pids.extend(index.by_build_id.values().flat_map(Mappings::pids));
    pids.extend(index.files.pids());
    let now_gone: HashSet<u32> = pids
        .into_iter()
        .filter(|&p| !crate::target::alive(p))
        .collect();
    // Gone at both ends: not a reused pid's new process.
    let forget: HashSet<u32> = now_gone.intersection(gone).copied().collect();
    if !forget.is_empty() {
        index.without_build_id.retain_pids(|p| !forget.contains(&p));
        index.by_build_id.retain(|_, ms| {
            ms.retain_pids(|p| !forget.contains(&p));
            !ms.is_empty()
        });
        index.files.forget(&forget);
    }
    *gone = now_gone;
}

fn drain_ring(
    ring: &Ring,
    page: usize,
    index: &mut MmapIndex,
    wanted: &mut dyn FnMut(u32) -> bool,
) {
    // The first page of the mapping is a perf_event_mmap_page; its head and
    // tail are shared with the kernel, hence the atomics.
    let meta = ring.map.as_ptr().cast::<pb::perf_event_mmap_page>();
    // SAFETY: meta points to the mapped, aligned control page, alive as long as ring.
    let (head, tail) = unsafe {
        let head = &*(std::ptr::addr_of_mut!((*meta).data_head) as *const AtomicU64);
        let tail = &*(std::ptr::addr_of_mut!((*meta).data_tail) as *const AtomicU64);
        (head, tail)
    };
    let data_size = (ring.map.len() - page) as u64;
    // SAFETY: the data area follows the metadata page within the mapping.
    let data =
        unsafe { std::slice::from_raw_parts(ring.map.as_ptr().add(page), data_size as usize) };
    let end = head.load(Ordering::Acquire);
    let mut pos = tail.load(Ordering::Relaxed);
    let mut rec = Vec::new();
    // A record may wrap around the end of the data area: copied out in at
    // most two pieces (a busy machine writes thousands a second).
    let copy = |rec: &mut Vec<u8>, pos: u64, len: u64| {
        let at = (pos % data_size) as usize;
        let first = (len as usize).min(data.len() - at);
        rec.clear();
        rec.extend_from_slice(&data[at..at + first]);
        rec.extend_from_slice(&data[..len as usize - first]);
    };
    while pos + 8 <= end {
        copy(&mut rec, pos, 8);
        let size = u16::from_ne_bytes([rec[6], rec[7]]) as u64;
        if size < 8 || pos + size > end {
            break;
        }
        copy(&mut rec, pos, size);
        parse_record(&rec, index, wanted);
        pos += size;
    }
    tail.store(pos, Ordering::Release);
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |s| u32::from_ne_bytes(s.try_into().unwrap_or_default()))
}

fn parse_record(rec: &[u8], index: &mut MmapIndex, wanted: &mut dyn FnMut(u32) -> bool) {
    if rec.len() < 8 {
        return;
    }
    let kind = u32_at(rec, 0);
    let misc = u16::from_ne_bytes([rec[4], rec[5]]);
    if kind == pb::PERF_RECORD_LOST {
        index.lost += rec
            .get(16..24)
            .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or_default()));
        return;
    }
    let exit = kind == pb::PERF_RECORD_EXIT;
    let mmap = kind == pb::PERF_RECORD_MMAP2 && rec.len() >= 73;
    // {header, pid, ppid, tid, ptid}: a new process, not a thread.
    let fork = kind == pb::PERF_RECORD_FORK && rec.len() >= 24 && u32_at(rec, 8) != u32_at(rec, 12);
    let exec = kind == pb::PERF_RECORD_COMM && misc & MISC_COMM_EXEC != 0;
    if !(exit || mmap || fork || exec) {
        return;
    }
    index.records += 1;
    // sample_id_all with PERF_SAMPLE_TIME: every record ends with its time.
    let time = rec
        .len()
        .checked_sub(8)
        .and_then(|at| rec.get(at..))
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or_default()));
    // All start {header, pid, ...}.
    let pid = u32_at(rec, 8);
    if !wanted(pid) {
        index.skipped += 1;
    } else if exit {
        on_exit(rec, time, index);
    } else if mmap {
        on_mmap2(rec, misc, time, index);
    } else if index.queue_mappings && fork {
        let parent = u32_at(rec, 12);
        index
            .changes
            .push((time, Change::Forked { child: pid, parent }));
    } else if index.queue_mappings && exec {
        index.changes.push((time, Change::Execed(pid)));
    }
}

/// {pid, ppid, tid, ptid, time}: the process is gone when its main thread is.
fn on_exit(rec: &[u8], time: u64, index: &mut MmapIndex) {
    let (pid, tid) = (u32_at(rec, 8), u32_at(rec, 16));
    if pid == tid && rec.len() >= 24 {
        index.jit.on_exit(pid);
        index.files.note_exit(pid);
        index.note_exit(pid);
        if index.queue_mappings {
            index.changes.push((time, Change::Exited(pid)));
        }
    }
}

/// A new mapping: indexed by build ID (or path), queued for the unwinder,
/// or noted as JIT code. `rec` is at least 73 bytes.
fn on_mmap2(rec: &[u8], misc: u16, time: u64, index: &mut MmapIndex) {
    let pid = u32_at(rec, 8);
    let name = &rec[72..];
    let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
    // {header, pid, tid, addr, len, pgoff, ...}
    let word = |off: usize| {
        rec.get(off..off + 8)
            .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or_default()))
    };
    let (addr, len, pgoff) = (word(16), word(24), word(32));
    let end = addr.saturating_add(len);
    // {..., maj, min, ino, ino_generation} where no build ID was read.
    let known = if misc & MISC_MMAP_BUILD_ID != 0 {
        let n = (rec[40] as usize).min(BUILD_ID_SIZE);
        let mut id = [0u8; BUILD_ID_SIZE];
        id[..n].copy_from_slice(&rec[44..44 + n]);
        Known::BuildId(id)
    } else {
        let (maj, min) = (u32_at(rec, 40), u32_at(rec, 44));
        Known::Key(crate::process::mapped::FileKey {
            dev: (maj << 20) | (min & 0xf_ffff),
            ino: word(48),
        })
    };
    // A memfd is where JITs put code, and where runc and others put a
    // program they run (fexecve): a file all the same, opened while it is
    // mapped (it has no other name).
    let memfd = name.starts_with(b"/memfd:");
    // Only what opened: nothing else reaches a memfd.
    let memfd_file = if memfd {
        let path = Path::new(std::ffi::OsStr::from_bytes(name));
        index
            .files
            .learn(&Learned {
                pid,
                start: addr,
                end,
                off: pgoff,
                path,
                in_root: true,
                known,
            })
            .filter(|f| f.file().is_some())
    } else {
        None
    };
    // Anonymous executable memory is where JITs put code; it has no file
    // to index.
    if name.starts_with(b"//anon") || name.starts_with(b"[anon") || memfd {
        index.jit.note_jit(pid);
        if let (Some(file), true) = (memfd_file, index.queue_mappings) {
            let mapping = Mapping {
                pid,
                path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
            };
            let change = Change::Mapped {
                mapping,
                start: addr,
                end,
                off: pgoff,
                file: Some(file),
            };
            index.changes.push((time, change));
            return;
        }
        // The unwinder records it as "no file, frame pointers there", so
        // the BPF walker does not ask the kernel about it every sample (a
        // memfd whose file could not be opened: the walker learns it).
        if index.queue_mappings && !memfd {
            index.changes.push((
                time,
                Change::Anon {
                    pid,
                    start: addr,
                    end,
                },
            ));
        }
        return;
    }
    // The vDSO has no file: the unwinder gives it bprof's own vDSO's table,
    // and its frames are named from bprof's own image.
    if name == b"[vdso]" {
        index.files.note_vdso(pid, addr, end);
        if index.queue_mappings {
            index.changes.push((
                time,
                Change::Vdso {
                    pid,
                    start: addr,
                    end,
                },
            ));
        }
        return;
    }
    // Anonymous and special mappings ([vdso], //anon) carry no file.
    if !name.starts_with(b"/") {
        return;
    }
    let mapping = Mapping {
        pid,
        path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
    };
    crate::pyframes::note_mapping(&mut index.python, pid, &mapping.path, addr, len, pgoff);
    // A jitdump is mapped (executable) only so that profilers find it; it
    // is not an ELF file.
    if jit::is_jitdump_name(&mapping.path) {
        index.jit.note_jitdump(pid, mapping.path);
        return;
    }
    // Opened now, while the process most likely still maps it.
    let file = index.files.learn(&Learned {
        pid,
        start: addr,
        end,
        off: pgoff,
        path: &mapping.path,
        in_root: true,
        known,
    });
    if index.queue_mappings {
        let change = Change::Mapped {
            mapping: mapping.clone(),
            start: addr,
            end,
            off: pgoff,
            file: file.clone(),
        };
        index.changes.push((time, change));
    }
    // The kernel's (a record marked with one by another session's
    // request), else the opened file's.
    let build_id = match known {
        Known::BuildId(id) => Some(id),
        Known::Key(_) => file.as_ref().and_then(|f| index.files.build_id_of(f)),
    };
    match build_id {
        Some(id) => {
            index.by_build_id.entry(id).or_default().insert(mapping);
        }
        None => {
            index.without_build_id.insert(mapping);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PERF_RECORD_EXIT of `pid`'s main thread, as the ring holds it.
    fn exit_record(pid: u32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&pb::PERF_RECORD_EXIT.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&40u16.to_ne_bytes());
        for v in [pid, 1, pid, 1] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r.extend_from_slice(&0u64.to_ne_bytes());
        r.extend_from_slice(&[0u8; 8]);
        r
    }

    /// A PERF_RECORD_FORK: {pid, ppid, tid, ptid, time}.
    fn fork_record(pid: u32, ppid: u32) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&pb::PERF_RECORD_FORK.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&32u16.to_ne_bytes());
        for v in [pid, ppid, pid, ppid] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        // Its own time, then sample_id's.
        r.extend_from_slice(&1000u64.to_ne_bytes());
        r.extend_from_slice(&1000u64.to_ne_bytes());
        let size = r.len() as u16;
        r[6..8].copy_from_slice(&size.to_ne_bytes());
        r
    }

    /// A PERF_RECORD_COMM: {pid, tid, comm}, flagged as an exec's or not.
    fn comm_record(pid: u32, exec: bool) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&pb::PERF_RECORD_COMM.to_ne_bytes());
        let misc = if exec { MISC_COMM_EXEC } else { 0 };
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&24u16.to_ne_bytes());
        for v in [pid, pid] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r.extend_from_slice(b"prog\0\0\0\0");
        r.extend_from_slice(&1001u64.to_ne_bytes());
        let size = r.len() as u16;
        r[6..8].copy_from_slice(&size.to_ne_bytes());
        r
    }

    #[test]
    fn forks_of_processes_and_execs_are_queued_in_order_threads_and_renames_not() {
        let mut index = MmapIndex {
            queue_mappings: true,
            ..Default::default()
        };
        for rec in [
            fork_record(20, 10),
            // A new thread: its process's mappings are its own.
            fork_record(10, 10),
            comm_record(20, false),
            comm_record(20, true),
            mmap2_record(20, b"/usr/bin/prog", None),
            exit_record(20),
        ] {
            parse_record(&rec, &mut index, &mut |_| true);
        }
        let kinds: Vec<&Change> = index.changes.iter().map(|(_, c)| c).collect();
        assert!(
            matches!(
                &kinds[..],
                [
                    Change::Forked {
                        child: 20,
                        parent: 10
                    },
                    Change::Execed(20),
                    Change::Mapped { .. },
                    Change::Exited(20)
                ]
            ),
            "{kinds:?}"
        );
        // Each with the time its record ends with.
        assert_eq!((index.changes[0].0, index.changes[1].0), (1000, 1001));
    }

    /// A PERF_RECORD_MMAP2 of `name` in `pid`, with a build ID if given.
    fn mmap2_record(pid: u32, name: &[u8], build_id: Option<&[u8]>) -> Vec<u8> {
        let mut r = vec![0u8; 72];
        r[..4].copy_from_slice(&pb::PERF_RECORD_MMAP2.to_ne_bytes());
        r[8..12].copy_from_slice(&pid.to_ne_bytes());
        if let Some(id) = build_id {
            r[4..6].copy_from_slice(&MISC_MMAP_BUILD_ID.to_ne_bytes());
            r[40] = id.len() as u8;
            r[44..44 + id.len()].copy_from_slice(id);
        }
        r.extend_from_slice(name);
        r.extend_from_slice(&[0u8; 8]);
        r
    }

    #[test]
    fn mmap2_records_are_indexed_by_build_id_or_path() {
        let mut index = MmapIndex::default();
        // A 20-byte GNU build ID, and a shorter one (zero-padded).
        let long: Vec<u8> = (1..=20).collect();
        parse_record(
            &mmap2_record(7, b"/usr/bin/app", Some(&long)),
            &mut index,
            &mut |_| true,
        );
        parse_record(
            &mmap2_record(8, b"/lib/short.so", Some(&[0xab; 8])),
            &mut index,
            &mut |_| true,
        );
        parse_record(
            &mmap2_record(9, b"/opt/noid", None),
            &mut index,
            &mut |_| true,
        );
        // No file: nothing to index.
        parse_record(&mmap2_record(9, b"[vdso]", None), &mut index, &mut |_| true);
        parse_record(&mmap2_record(9, b"//anon", None), &mut index, &mut |_| true);

        let mut id = [0u8; BUILD_ID_SIZE];
        id.copy_from_slice(&long);
        let app = &index.by_build_id[&id];
        assert_eq!(app.len(), 1);
        assert!(app.contains(7, Path::new("/usr/bin/app")));
        let mut short = [0u8; BUILD_ID_SIZE];
        short[..8].fill(0xab);
        assert!(index.by_build_id.contains_key(&short));
        assert_eq!(index.by_build_id.len(), 2);
        assert!(index.without_build_id.contains(9, Path::new("/opt/noid")));
        assert_eq!(index.without_build_id.len(), 1);
    }

    /// A long churn: the side band forgets the processes of the older
    /// half once twice MAX_EXITED exited, and keeps the paths they mapped.
    #[test]
    fn exited_processes_leave_the_index_and_their_paths_stay() {
        let mut index = MmapIndex::default();
        let id = [0x5a; BUILD_ID_SIZE];
        let n = 2 * MAX_EXITED as u32;
        for pid in 1..=n {
            parse_record(
                &mmap2_record(pid, b"/usr/bin/kid", Some(&id)),
                &mut index,
                &mut |_| true,
            );
            parse_record(&exit_record(pid), &mut index, &mut |_| true);
        }
        let kid = &index.by_build_id[&id];
        assert!(!kid.contains(1, Path::new("/usr/bin/kid")));
        assert!(!kid.contains(MAX_EXITED as u32, Path::new("/usr/bin/kid")));
        assert!(kid.contains(MAX_EXITED as u32 + 1, Path::new("/usr/bin/kid")));
        assert_eq!(kid.len(), MAX_EXITED);
        assert_eq!(kid.first_path(), Some(Path::new("/usr/bin/kid")));
    }

    #[test]
    fn anonymous_executable_mappings_are_queued_for_the_unwinder() {
        let mut index = MmapIndex {
            queue_mappings: true,
            ..Default::default()
        };
        let mut anon = mmap2_record(9, b"//anon", None);
        anon[16..24].copy_from_slice(&0x7f00_0000_0000u64.to_ne_bytes());
        anon[24..32].copy_from_slice(&0x1000u64.to_ne_bytes());
        parse_record(&anon, &mut index, &mut |_| true);
        // A memfd is a file: the walker learns it itself.
        parse_record(
            &mmap2_record(9, b"/memfd:jit (deleted)", None),
            &mut index,
            &mut |_| true,
        );
        assert!(
            matches!(
                &index.changes[..],
                [(
                    _,
                    Change::Anon {
                        pid: 9,
                        start: 0x7f00_0000_0000,
                        end: 0x7f00_0000_1000
                    }
                )]
            ),
            "{:?}",
            index.changes
        );
    }

    #[test]
    fn other_processes_records_are_skipped_when_the_profile_has_targets() {
        let mut index = MmapIndex {
            queue_mappings: true,
            ..Default::default()
        };
        let mut asked = Vec::new();
        let mut wanted = |pid: u32| {
            asked.push(pid);
            pid == 7
        };
        parse_record(
            &mmap2_record(7, b"/usr/bin/app", Some(&[1; 20])),
            &mut index,
            &mut wanted,
        );
        parse_record(
            &mmap2_record(8, b"/usr/bin/other", Some(&[2; 20])),
            &mut index,
            &mut wanted,
        );
        parse_record(
            &mmap2_record(8, b"/usr/lib/libx.so", None),
            &mut index,
            &mut wanted,
        );
        parse_record(&mmap2_record(8, b"//anon", None), &mut index, &mut wanted);
        parse_record(&exit_record(8), &mut index, &mut wanted);
        parse_record(&exit_record(7), &mut index, &mut wanted);
        assert_eq!(asked, [7, 8, 8, 8, 8, 7]);
        assert_eq!((index.records, index.skipped), (6, 4));
        assert_eq!(index.by_build_id.len(), 1);
        assert!(index.without_build_id.is_empty());
        assert!(matches!(
            &index.changes[..],
            [(_, Change::Mapped { mapping, .. }), (_, Change::Exited(7))] if mapping.pid == 7
        ));
    }

    #[test]
    fn lost_records_are_summed_and_short_records_ignored() {
        let mut index = MmapIndex::default();
        let mut lost = vec![0u8; 24];
        lost[..4].copy_from_slice(&pb::PERF_RECORD_LOST.to_ne_bytes());
        lost[16..24].copy_from_slice(&5u64.to_ne_bytes());
        parse_record(&lost, &mut index, &mut |_| true);
        parse_record(&lost, &mut index, &mut |_| true);
        assert_eq!(index.lost, 10);
        // Truncated records of every kind: no panic, nothing indexed.
        let full = mmap2_record(7, b"/usr/bin/app", Some(&[1; 20]));
        for n in 0..full.len().min(73) {
            parse_record(&full[..n], &mut index, &mut |_| true);
        }
        assert!(index.by_build_id.is_empty() && index.without_build_id.is_empty());
        assert_eq!(index.lost, 10);
    }

    #[test]
    fn an_exit_record_opens_the_perf_map_before_it_goes() {
        let _own = crate::jit::OWN_PERF_MAP
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let path = format!("/tmp/perf-{me}.map");
        let mut index = MmapIndex::default();
        // Anonymous executable memory makes this process a JIT.
        let mut mmap = vec![0u8; 72];
        mmap[..4].copy_from_slice(&pb::PERF_RECORD_MMAP2.to_ne_bytes());
        mmap[8..12].copy_from_slice(&me.to_ne_bytes());
        mmap.extend_from_slice(b"//anon\0\0");
        parse_record(&mmap, &mut index, &mut |_| true);
        std::fs::write(&path, "5000 10 at_exit\n").unwrap();
        parse_record(&exit_record(me), &mut index, &mut |_| true);
        std::fs::remove_file(&path).unwrap();
        // Exited: no longer looked for, and what was opened is read.
        index.jit.poll();
        let names = index.jit.names(me, &[0x5008]);
        assert_eq!(names.get(&0x5008).map(String::as_str), Some("at_exit"));
        // Another thread's exit is not the process's.
        let mut other = MmapIndex::default();
        other.jit.note_jit(me);
        let mut rec = exit_record(me);
        rec[16..20].copy_from_slice(&(me + 1).to_ne_bytes());
        parse_record(&rec, &mut other, &mut |_| true);
        assert!(other.jit.names(me, &[0x5008]).is_empty());
    }
}
