//! One owned memory mapping, unmapped on drop: the side band's perf ring
//! buffers, the unwinder's reads of ELF files and its writes into
//! mmapable BPF arrays all go through it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `len` bytes mapped from a file descriptor (none when `len` is 0).
pub(crate) struct Mmap {
    base: *mut u8,
    len: usize,
}

impl Mmap {
    /// A shared read-write mapping of `len` bytes at `offset` of `fd` (a
    /// perf ring buffer, an mmapable BPF array).
    ///
    /// # Safety
    /// `offset + len` must lie within what `fd` lets be mapped, and what is
    /// written through the mapping must be valid for whoever else maps it.
    pub(crate) unsafe fn shared(fd: BorrowedFd<'_>, len: usize, offset: usize) -> io::Result<Mmap> {
        // SAFETY: the caller vouches for the range; a fresh mapping aliases
        // nothing of ours.
        unsafe {
            Self::map(
                fd,
                len,
                offset,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
            )
        }
    }

    /// A private read-only mapping of the first `len` bytes of `fd`.
    ///
    /// # Safety
    /// The file must not be truncated below `len` while the mapping is read
    /// (reading past the end faults).
    pub(crate) unsafe fn read_only(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mmap> {
        // SAFETY: as the caller vouches.
        unsafe { Self::map(fd, len, 0, libc::PROT_READ, libc::MAP_PRIVATE) }
    }

    unsafe fn map(
        fd: BorrowedFd<'_>,
        len: usize,
        offset: usize,
        prot: libc::c_int,
        flags: libc::c_int,
    ) -> io::Result<Mmap> {
        if len == 0 {
            return Ok(Mmap {
                base: std::ptr::null_mut(),
                len: 0,
            });
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: a new mapping chosen by the kernel; the range is the
        // caller's to vouch for.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                flags,
                fd.as_raw_fd(),
                offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            base: base.cast(),
            len,
        })
    }

    /// The first mapped byte (null for an empty mapping).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapping's bytes, for a read-only mapping of a file.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: base/len describe a live mapping owned by self.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: exactly what mmap returned, unmapped once.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}
