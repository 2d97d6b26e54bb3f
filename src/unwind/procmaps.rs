//! The `unwind_maps` BPF map: which file each executable mapping of each
//! target process comes from, by 2 MiB chunk of address space (see
//! bpf/unwind.h for why the BPF side cannot ask the kernel every time).

use std::collections::{HashMap, HashSet};

use libbpf_rs::MapCore;

use crate::bpf::maps;

use crate::bpf::abi::UNWIND_CHUNK_SLOTS as SLOTS;
use crate::bpf::abi::{self, UNWIND_CHUNK_SHIFT as CHUNK_SHIFT};

/// One mapping: `[start, end)` at file offset `off` of file (dev, ino).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub off: u64,
    /// The kernel's (dev, inode) of the file.
    pub file: (u64, u64),
}

/// User space's copy of `unwind_maps`.
#[derive(Debug, Default)]
pub struct ProcMaps {
    /// Each chunk's mappings, with the batch that recorded each.
    chunks: HashMap<(u32, u64), Vec<(Slot, u64)>>,
    by_tgid: HashMap<u32, HashSet<u64>>,
    /// The batch of changes being applied (see [`Self::next_batch`]).
    batch: u64,
    /// Mappings pushed out of a full chunk (more than 8 in 2 MiB).
    pub evicted: u64,
    /// Map updates that failed (map full).
    pub failed: u64,
    /// `unwind_maps` changed since [`Unwinder::publish`](super::Unwinder::publish).
    pub changed: bool,
}

fn key(tgid: u32, chunk: u64) -> abi::unwind_map_key {
    abi::unwind_map_key {
        tgid,
        pad: 0,
        chunk,
    }
}

impl ProcMaps {
    /// Starts a new batch of changes: what one read of the side band brought.
    pub fn next_batch(&mut self) {
        self.batch += 1;
    }

    /// Records a mapping of `tgid`, replacing what it overlaps.
    pub fn insert(&mut self, map: &dyn MapCore, tgid: u32, slot: Slot) {
        if slot.end <= slot.start {
            return;
        }
        let (first, last) = (slot.start >> CHUNK_SHIFT, (slot.end - 1) >> CHUNK_SHIFT);
        // A mapping over 256 GiB is not code.
        if last - first > 1 << 17 {
            return;
        }
        for chunk in first..=last {
            let slots = self.chunks.entry((tgid, chunk)).or_default();
            slots.retain(|(s, _)| s.end <= slot.start || s.start >= slot.end);
            slots.push((slot, self.batch));
            if slots.len() > SLOTS {
                slots.remove(0);
                self.evicted += 1;
            }
            self.by_tgid.entry(tgid).or_default().insert(chunk);
            self.write(map, tgid, chunk);
        }
    }

    /// Writes chunk `(tgid, chunk)` to the BPF map as held here.
    fn write(&mut self, map: &dyn MapCore, tgid: u32, chunk: u64) {
        let mut value = abi::unwind_chunk::default();
        let slots = self
            .chunks
            .get(&(tgid, chunk))
            .map_or(&[][..], Vec::as_slice);
        for (v, (s, _)) in value.slots.iter_mut().zip(slots) {
            *v = abi::unwind_map_slot {
                start: s.start,
                end: s.end,
                off: s.off,
                file: abi::unwind_file_key {
                    dev: s.file.0,
                    ino: s.file.1,
                },
            };
        }
        self.changed = true;
        if maps::put(map, &key(tgid, chunk), &value).is_err() {
            self.failed += 1;
        }
    }

    /// Gives `child` the mappings `parent` has (a fork: the child's
    /// address space is a copy of its parent's). Without them the walker
    /// would ask the kernel for each, and name a file by the inode it
    /// finds, which on overlayfs is not the one /proc and fstat show.
    pub fn copy(&mut self, map: &dyn MapCore, parent: u32, child: u32) {
        let mut chunks: Vec<u64> = self
            .by_tgid
            .get(&parent)
            .map(|c| c.iter().copied().collect())
            .unwrap_or_default();
        chunks.sort_unstable();
        for chunk in chunks {
            let slots = self
                .chunks
                .get(&(parent, chunk))
                .cloned()
                .unwrap_or_default();
            for (slot, _) in slots {
                self.insert(map, child, slot);
            }
        }
    }

    /// Forgets what `tgid` mapped before this batch: an exec replaced its
    /// image. The rings are read one CPU after another, so the new image's
    /// mappings may have come already in this batch; they stay.
    pub fn remove_before_batch(&mut self, map: &dyn MapCore, tgid: u32) {
        let batch = self.batch;
        let chunks: Vec<u64> = self
            .by_tgid
            .get(&tgid)
            .map(|c| c.iter().copied().collect())
            .unwrap_or_default();
        for chunk in chunks {
            let Some(slots) = self.chunks.get_mut(&(tgid, chunk)) else {
                continue;
            };
            let before = slots.len();
            slots.retain(|&(_, b)| b == batch);
            if slots.is_empty() {
                self.chunks.remove(&(tgid, chunk));
                if let Some(c) = self.by_tgid.get_mut(&tgid) {
                    c.remove(&chunk);
                }
                maps::remove(map, &key(tgid, chunk));
                self.changed = true;
            } else if slots.len() != before {
                self.write(map, tgid, chunk);
            }
        }
    }

    /// Forgets an exited process.
    pub fn remove(&mut self, map: &dyn MapCore, tgid: u32) {
        for chunk in self.by_tgid.remove(&tgid).unwrap_or_default() {
            self.chunks.remove(&(tgid, chunk));
            maps::remove(map, &key(tgid, chunk));
            self.changed = true;
        }
    }

    /// Chunks held.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }
}
