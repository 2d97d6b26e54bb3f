//! A BPF_F_MMAPABLE array map written from user space through mmap, from
//! the front: the unwinder's rows, page index and rules (far faster than a
//! map update per entry).

use std::mem::size_of;
use std::os::fd::{AsFd, OwnedFd};

use crate::bpf::abi::Plain;
use crate::mmap::Mmap;

/// An mmapable BPF array filled from the front.
pub(crate) struct MmapArray {
    fd: OwnedFd,
    /// Entries it holds.
    capacity: u32,
    /// Entries written.
    used: u32,
}

impl MmapArray {
    /// The array behind `map` (BPF_F_MMAPABLE), of `capacity` entries, none
    /// written yet.
    pub(crate) fn new(map: &dyn AsFd, capacity: u32) -> std::io::Result<MmapArray> {
        Ok(MmapArray {
            fd: map.as_fd().try_clone_to_owned()?,
            capacity,
            used: 0,
        })
    }

    /// Entries it holds.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Entries written.
    pub(crate) fn used(&self) -> u32 {
        self.used
    }

    /// Writes `items` after the entries written so far, through an mmap of
    /// just the pages they cover (a mapping of the whole array would count
    /// all of it in bprof's RSS).
    pub(crate) fn append<T: Plain>(&mut self, items: &[T]) -> std::io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        // Array map values are laid out at 8-byte strides.
        let each = size_of::<T>();
        if each % 8 != 0 {
            return Err(std::io::Error::other("not an 8-byte multiple"));
        }
        if items.len() > (self.capacity - self.used) as usize {
            return Err(std::io::Error::other("over the map's capacity"));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let start = self.used as usize * each;
        let bytes = std::mem::size_of_val(items);
        let from = start / page * page;
        let len = start + bytes - from;
        // SAFETY: pages [from, from + len) of a BPF_F_MMAPABLE array map's
        // value area, inside its size (checked); the BPF side reads Plain
        // values there.
        let map = unsafe { Mmap::shared(self.fd.as_fd(), len, from) }?;
        // SAFETY: start - from + bytes == len: inside the mapping; T is
        // Plain, so its bytes are all initialised.
        unsafe {
            std::ptr::copy_nonoverlapping(
                items.as_ptr().cast::<u8>(),
                map.as_ptr().add(start - from),
                bytes,
            );
        }
        self.used += items.len() as u32;
        Ok(())
    }
}
