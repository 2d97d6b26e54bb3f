//! Where the tables go: segments of the `unwind_segs` array of maps, each
//! an mmapable array of 8-byte entries written from the front, created as
//! files' tables arrive. A file's page index and rows are in one segment.
//!
//! Allocating the whole `--unwind-rows` budget at start (36 MiB of zeroed
//! pages by default) would slow every profile's start for tables that
//! mostly take a small part of it; segments cost what the tables take, in
//! steps that double from 512 KiB.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::bpf::abi::{self, Plain};
use crate::bpf::mmap_array::MmapArray as Store;

/// Entries of the first segment (512 KiB: about what a program, libc and
/// ld.so take; a larger one takes longer to make), or an eighth of the
/// budget if that is less; each later one has at least twice the entries
/// of the one before, and at least what the table needs.
const FIRST: u64 = 1 << 16;

/// Entries segment `s` can still take.
fn free(s: &Store) -> u64 {
    u64::from(s.capacity() - s.used())
}

/// The segments made so far, within a budget of entries.
pub(super) struct Segments {
    outer: MapHandle,
    segs: Vec<Store>,
    /// Entries the segments may hold in all.
    budget: u64,
    /// Entries of the segments made.
    allocated: u64,
    /// Why a segment could not be made: not tried again.
    broken: Option<String>,
}

impl Segments {
    /// The loaded `unwind_segs` map, none of whose slots is filled yet.
    pub(super) fn new(outer: MapHandle, budget: u64) -> Segments {
        Segments {
            outer,
            segs: Vec::new(),
            budget,
            allocated: 0,
            broken: None,
        }
    }

    /// The most entries one more table can take (the limit a table is
    /// built to).
    pub(super) fn room(&self) -> usize {
        let free = self.segs.iter().map(free).max().unwrap_or(0);
        usize::try_from(free.max(self.unmade())).unwrap_or(usize::MAX)
    }

    /// Entries of the budget not made into segments yet (none once every
    /// slot of `unwind_segs` is taken).
    fn unmade(&self) -> u64 {
        if self.segs.len() >= abi::UNWIND_SEGMENTS as usize {
            return 0;
        }
        self.budget - self.allocated
    }

    /// A segment with room for `n` more entries: the first made that has
    /// it, else a new one. `Ok(None)`: the budget cannot hold them.
    pub(super) fn place(&mut self, n: u64) -> Result<Option<u32>, String> {
        if let Some(i) = self.segs.iter().position(|s| free(s) >= n) {
            return Ok(Some(i as u32));
        }
        if n > self.unmade() {
            return Ok(None);
        }
        if let Some(why) = &self.broken {
            return Err(why.clone());
        }
        let made = self.make(n);
        if let Err(why) = &made {
            self.broken = Some(why.clone());
        }
        made.map(Some)
    }

    /// A new segment with room for `n` entries at least.
    fn make(&mut self, n: u64) -> Result<u32, String> {
        let last = self.segs.last().map_or(0, |s| u64::from(s.capacity()));
        let first = FIRST.min(self.budget / 8).max(1);
        let size = n.max(first).max(last * 2).min(self.unmade());
        let idx = self.segs.len() as u32;
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: libbpf_sys::BPF_F_MMAPABLE | libbpf_sys::BPF_F_INNER_MAP,
            ..Default::default()
        };
        let size32 = u32::try_from(size).map_err(|_| "unwind_segs: segment too large")?;
        let map = MapHandle::create(
            MapType::Array,
            Some("unwind_seg"),
            4,
            std::mem::size_of::<abi::unwind_row>() as u32,
            size32,
            &opts,
        )
        .map_err(|e| format!("unwind_segs: creating a segment of {size} entries: {e}"))?;
        let store = Store::new(&map, size32).map_err(|e| format!("unwind_segs: {e}"))?;
        let fd = map.as_fd().as_raw_fd() as u32;
        self.outer
            .update(&idx.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| format!("unwind_segs: installing a segment: {e}"))?;
        self.segs.push(store);
        self.allocated += size;
        Ok(idx)
    }

    /// Writes `items` after what segment `seg` holds; returns the index of
    /// the first. The caller placed them ([`Segments::place`]).
    pub(super) fn append<T: Plain>(&mut self, seg: u32, items: &[T]) -> Result<u32, String> {
        let s = &mut self.segs[seg as usize];
        let first = s.used();
        s.append(items).map_err(|e| format!("unwind_segs: {e}"))?;
        Ok(first)
    }

    /// Entries written, in all segments.
    pub(super) fn used(&self) -> u64 {
        self.segs.iter().map(|s| u64::from(s.used())).sum()
    }

    /// Entries of the segments made.
    pub(super) fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Segments made.
    pub(super) fn count(&self) -> usize {
        self.segs.len()
    }
}
