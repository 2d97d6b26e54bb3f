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
    let cache = object::ReadCache::new(f);
    let obj = object::File::parse(&cache).ok()?;
    let id = obj.build_id().ok().flatten()?;
    (!id.is_empty() && id.len() <= BUILD_ID_SIZE).then(|| padded(id))
}
