//! Build IDs: the words every stage uses for one. The kernel records a
//! user frame's file by its GNU build ID, zero-padded to [`BUILD_ID_SIZE`];
//! the side band, the unwinder and the symbolizer key files by it.

use object::Object;

use crate::bpf::stacks::BUILD_ID_SIZE;

/// A build ID, zero-padded to the size the kernel reports.
pub type BuildId = [u8; BUILD_ID_SIZE];

/// A build ID as the kernel records it: zero-padded (or cut) to
/// BUILD_ID_SIZE bytes.
pub(crate) fn padded(id: &[u8]) -> BuildId {
    let mut padded = [0u8; BUILD_ID_SIZE];
    let n = id.len().min(BUILD_ID_SIZE);
    padded[..n].copy_from_slice(&id[..n]);
    padded
}

/// The build ID in an ELF image's note (the whole file's bytes), as
/// written: for a file whose unwind table cannot be built (it still names
/// its frames), and for the vDSO.
pub(crate) fn build_id_only(data: &[u8]) -> Option<Vec<u8>> {
    let obj = object::File::parse(data).ok()?;
    obj.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// The build ID of the open ELF file `f` (its headers and notes read, not
/// the whole file), padded; `None` without one, or one longer than a
/// frame record holds.
pub(crate) fn of_file(f: &std::fs::File) -> Option<BuildId> {
    let cache = object::ReadCache::new(At { f, pos: 0 });
    let obj = object::File::parse(&cache).ok()?;
    let id = obj.build_id().ok().flatten()?;
    (!id.is_empty() && id.len() <= BUILD_ID_SIZE).then(|| padded(id))
}

/// Reads `f` at positions of its own (pread): descriptors of a kept file
/// are duplicates sharing one offset, which other threads may be using.
struct At<'a> {
    f: &'a std::fs::File,
    pos: u64,
}

impl std::io::Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.f, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for At<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let end = || self.f.metadata().map(|m| m.len());
        let new = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => end()?.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}
