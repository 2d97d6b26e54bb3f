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
    /// Each chunk's mappings, with the time of the record of each (0: read
    /// from /proc at start).
    chunks: HashMap<(u32, u64), Vec<(Slot, u64)>>,
    by_tgid: HashMap<u32, HashSet<u64>>,
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

/// The first and last chunk of `[start, end)`, unless empty or over 256
/// GiB (not code).
fn chunk_range(start: u64, end: u64) -> Option<(u64, u64)> {
    if end <= start {
        return None;
    }
    let (first, last) = (start >> CHUNK_SHIFT, (end - 1) >> CHUNK_SHIFT);
    (last - first <= 1 << 17).then_some((first, last))
}

impl ProcMaps {
    /// Records a mapping of `tgid`, replacing what it overlaps; `time`: the
    /// kernel's time of the record that told it (0: read from /proc).
    pub fn insert(&mut self, map: &dyn MapCore, tgid: u32, slot: Slot, time: u64) {
        let Some((first, last)) = chunk_range(slot.start, slot.end) else {
            return;
        };
        for chunk in first..=last {
            let slots = self.chunks.entry((tgid, chunk)).or_default();
            slots.retain(|(s, _)| s.end <= slot.start || s.start >= slot.end);
            slots.push((slot, time));
            if slots.len() > SLOTS {
                slots.remove(0);
                self.evicted += 1;
            }
            self.by_tgid.entry(tgid).or_default().insert(chunk);
            self.write(map, tgid, chunk);
        }
    }

    /// The files the BPF side learned `slot`'s mapping of `tgid` as (the
    /// kernel's inode of the mapped file), where that is not the file user
    /// space knows it by: on overlayfs the kernel names the layer's inode,
    /// /proc and fstat the overlay's.
    pub fn kernel_names(&self, map: &dyn MapCore, tgid: u32, slot: &Slot) -> Vec<(u64, u64)> {
        let k = key(tgid, slot.start >> CHUNK_SHIFT);
        let Ok(Some(bytes)) = map.lookup(abi::plain_bytes(&k), libbpf_rs::MapFlags::ANY) else {
            return Vec::new();
        };
        let Some(ch) = abi::read_plain::<abi::unwind_chunk>(&bytes) else {
            return Vec::new();
        };
        ch.slots
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                ch.learned >> i & 1 == 1
                    && (s.start, s.end, s.off) == (slot.start, slot.end, slot.off)
                    && (s.file.dev, s.file.ino) != slot.file
                    && s.file.ino != 0
            })
            .map(|(_, s)| (s.file.dev, s.file.ino))
            .collect()
    }

    /// Notes that `tgid`'s chunks over `[start, end)` may be in the BPF
    /// map (the BPF side learns a target's mappings at its mmap), so that
    /// [`Self::remove`] deletes them when the process exits.
    pub fn claim(&mut self, tgid: u32, start: u64, end: u64) {
        let Some((first, last)) = chunk_range(start, end) else {
            return;
        };
        self.by_tgid.entry(tgid).or_default().extend(first..=last);
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

    /// Gives `child` the mappings `parent` had at time `at` (a fork: the
    /// child's address space is a copy of its parent's), where the child
    /// has none of its own: its own, newer, win. Without them the walker
    /// would ask the kernel for each, and name a file by the inode it
    /// finds, which on overlayfs is not the one /proc and fstat show.
    pub fn copy(&mut self, map: &dyn MapCore, parent: u32, child: u32, at: u64) {
        for chunk in self.chunks_of(parent) {
            let from = self
                .chunks
                .get(&(parent, chunk))
                .cloned()
                .unwrap_or_default();
            let to = self.chunks.entry((child, chunk)).or_default();
            let before = to.len();
            for (s, t) in from.into_iter().filter(|&(_, t)| t < at) {
                let overlaps = to.iter().any(|(o, _)| o.start < s.end && s.start < o.end);
                if !overlaps && to.len() < SLOTS {
                    to.push((s, t));
                }
            }
            if to.is_empty() {
                self.chunks.remove(&(child, chunk));
            } else if to.len() != before {
                self.by_tgid.entry(child).or_default().insert(chunk);
                self.write(map, child, chunk);
            }
        }
    }

    /// Forgets what `tgid` mapped before time `at`: an exec replaced its
    /// image then.
    pub fn remove_before(&mut self, map: &dyn MapCore, tgid: u32, at: u64) {
        for chunk in self.chunks_of(tgid) {
            let Some(slots) = self.chunks.get_mut(&(tgid, chunk)) else {
                continue;
            };
            let before = slots.len();
            slots.retain(|&(_, t)| t >= at);
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

    /// The chunks `tgid` has mappings in.
    fn chunks_of(&self, tgid: u32) -> Vec<u64> {
        self.by_tgid
            .get(&tgid)
            .map(|c| c.iter().copied().collect())
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use libbpf_rs::{libbpf_sys, MapFlags, MapHandle, MapType};

    fn chunk_map() -> MapHandle {
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        MapHandle::create(
            MapType::Hash,
            Some("bprof_test_maps"),
            std::mem::size_of::<abi::unwind_map_key>() as u32,
            std::mem::size_of::<abi::unwind_chunk>() as u32,
            64,
            &opts,
        )
        .expect("create a hash map (needs root)")
    }

    /// The (start, file inode) of each slot the BPF map holds for the
    /// first chunk of `tgid`.
    fn held(map: &MapHandle, tgid: u32) -> Vec<(u64, u64)> {
        let k = key(tgid, 0);
        let Some(v) = map.lookup(abi::plain_bytes(&k), MapFlags::ANY).unwrap() else {
            return Vec::new();
        };
        let each = std::mem::size_of::<abi::unwind_map_slot>();
        let word = |at: usize| u64::from_ne_bytes(v[at..at + 8].try_into().unwrap());
        (0..SLOTS)
            .map(|i| (word(i * each), word(i * each + 32)))
            .filter(|&(start, _)| start != 0)
            .collect()
    }

    fn slot(start: u64, ino: u64) -> Slot {
        Slot {
            start,
            end: start + 0x1000,
            off: 0,
            file: (1, ino),
        }
    }

    #[test]
    fn a_fork_copies_what_the_parent_had_then_and_an_exec_drops_what_came_before() {
        let map = chunk_map();
        let mut pm = ProcMaps::default();
        // The parent: A from /proc at start, B mapped at time 50.
        pm.insert(&map, 10, slot(0x1000, 1), 0);
        pm.insert(&map, 10, slot(0x3000, 2), 50);
        // The child's own mapping at 40 overlaps where A is: its own wins.
        pm.insert(&map, 20, slot(0x1800, 3), 40);
        // Forked at 30, read after: A (older) would overlap the child's own,
        // B came after the fork.
        pm.copy(&map, 10, 20, 30);
        assert_eq!(held(&map, 20), [(0x1800, 3)]);
        // Another child forked at 60 gets both.
        pm.copy(&map, 10, 21, 60);
        let mut got = held(&map, 21);
        got.sort_unstable();
        assert_eq!(got, [(0x1000, 1), (0x3000, 2)]);
        // An exec at 70: what the child had from before goes; a mapping of
        // its new image (at 75), read before the exec (another CPU's
        // ring), stays.
        pm.insert(&map, 21, slot(0x5000, 4), 75);
        pm.remove_before(&map, 21, 70);
        assert_eq!(held(&map, 21), [(0x5000, 4)]);
        pm.remove_before(&map, 21, 80);
        assert!(held(&map, 21).is_empty());
        assert!(map
            .lookup(abi::plain_bytes(&key(21, 0)), MapFlags::ANY)
            .unwrap()
            .is_none());
        pm.remove(&map, 20);
        assert!(held(&map, 20).is_empty());
        assert_eq!(held(&map, 10).len(), 2);
    }

    #[test]
    fn an_exit_deletes_the_chunks_the_bpf_side_learned_where_none_was_written() {
        let map = chunk_map();
        let mut pm = ProcMaps::default();
        // Mappings of process 30 whose files user space could not open (it
        // was gone): no slot written, but the BPF side learned them at
        // their mmap, in chunks 0 and 5..=6.
        pm.claim(30, 0x1000, 0x2000);
        pm.claim(30, 5 << CHUNK_SHIFT, (6 << CHUNK_SHIFT) + 0x1000);
        let learned = abi::unwind_chunk {
            learned_mm: 0xffff_8880_0000_1000,
            learned: 1,
            ..Default::default()
        };
        for chunk in [0, 5, 6] {
            maps::put(&map, &key(30, chunk), &learned).unwrap();
        }
        // Another process's chunk stays.
        maps::put(&map, &key(31, 0), &learned).unwrap();
        pm.remove(&map, 30);
        for chunk in [0, 5, 6] {
            let k = key(30, chunk);
            assert!(map
                .lookup(abi::plain_bytes(&k), MapFlags::ANY)
                .unwrap()
                .is_none());
        }
        assert!(map
            .lookup(abi::plain_bytes(&key(31, 0)), MapFlags::ANY)
            .unwrap()
            .is_some());
        // An empty or absurd range claims nothing.
        pm.claim(32, 0x2000, 0x2000);
        pm.claim(32, 0, u64::MAX);
        assert!(pm.chunks_of(32).is_empty());
    }
}
