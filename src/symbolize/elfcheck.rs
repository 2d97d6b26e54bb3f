//! Checking an ELF file before blazesym parses it.
//!
//! blazesym trusts sizes it reads from the file: a compressed debug section
//! whose header claims 2^62 bytes makes it allocate that much, and an
//! allocation failure aborts the process, which no `catch_unwind` can stop.
//! So every size that leads to an allocation is checked here first, with
//! the `object` crate, and a file that fails costs only its own frames.

use std::path::Path;

use object::read::elf::{CompressionHeader, FileHeader, SectionHeader};
use object::read::{ReadCache, ReadRef};

/// The largest section bprof lets blazesym decompress.
pub const MAX_DECOMPRESSED: u64 = 512 << 20;

/// zlib and zstd cannot expand data by more than about 1032:1; more is a lie.
const MAX_RATIO: u64 = 1100;

/// The largest file parsed at all.
pub const MAX_FILE: u64 = 4 << 30;

/// The reason given for a file that is not ELF at all.
pub const NOT_ELF: &str = "not an ELF file";

/// Why a file was not handed to blazesym.
pub type Reason = String;

/// Checks the ELF file at `path` (a path bprof opened safely, such as
/// `/proc/self/fd/N`, or one in a root-owned place).
pub fn check(path: &Path) -> Result<(), Reason> {
    // Opened as untrusted input: a FIFO renamed over a mapped library must
    // not hang bprof, nor a symlink lead it elsewhere.
    let checked = crate::fsafe::open_untrusted(path, crate::fsafe::Owner::Any, MAX_FILE)
        .map_err(|e| e.to_string())?;
    // A file already checked is not read again (a live view symbolizes
    // every refresh; reading a 150 MB library each time cost most of its CPU).
    let id = checked.file.metadata().ok().map(|m| FileId::of(&m));
    if let Some(r) = id.and_then(|id| CHECKED.with(|c| c.borrow().get(&id).cloned())) {
        return r;
    }
    // Only the headers, compression headers and notes are read, not the
    // whole file: a profile's 200 MB libLLVM costs a few pages, not 200 MB.
    let data = ReadCache::new(checked.file);
    let r = check_data(&data);
    if let Some(id) = id {
        CHECKED.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= MEMO_FILES {
                c.clear();
            }
            c.insert(id, r.clone());
        });
    }
    r
}

/// Files whose verdict is remembered, at most.
const MEMO_FILES: usize = 4096;

/// A file's identity and version: the same inode, size, mtime and ctime
/// (which any write changes) is the same content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    /// The identity of the file `m` describes.
    pub(crate) fn of(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The identity as a file name: every field, in hex.
    pub(crate) fn key(&self) -> String {
        format!(
            "{:x}-{:x}-{:x}-{:x}.{:x}-{:x}.{:x}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }
}

thread_local! {
    static CHECKED: std::cell::RefCell<std::collections::HashMap<FileId, Result<(), Reason>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Checks an ELF image in memory.
#[cfg(test)]
pub fn check_bytes(data: &[u8]) -> Result<(), Reason> {
    check_data(data)
}

fn check_data<'data, R: ReadRef<'data>>(data: R) -> Result<(), Reason> {
    match data.read_bytes_at(0, 5) {
        Ok([0x7f, b'E', b'L', b'F', 2]) => {
            check_elf::<object::elf::FileHeader64<object::Endianness>, R>(data)
        }
        Ok([0x7f, b'E', b'L', b'F', 1]) => {
            check_elf::<object::elf::FileHeader32<object::Endianness>, R>(data)
        }
        _ => Err(NOT_ELF.into()),
    }
}

fn check_elf<'data, H: FileHeader<Endian = object::Endianness>, R: ReadRef<'data>>(
    data: R,
) -> Result<(), Reason> {
    let bad = |what: &str, e: object::Error| format!("{what}: {e}");
    let header = H::parse(data).map_err(|e| bad("ELF header", e))?;
    let endian = header.endian().map_err(|e| bad("ELF header", e))?;
    let len = data.len().map_err(|()| "unreadable size".to_string())?;
    let sections = header
        .sections(endian, data)
        .map_err(|e| bad("section headers", e))?;
    header
        .program_headers(endian, data)
        .map_err(|e| bad("program headers", e))?;
    for (i, s) in sections.iter().enumerate() {
        // Every section that has bytes in the file must lie within it
        // (checked by its range: reading it would read the whole file).
        if let Some((offset, size)) = s.file_range(endian) {
            if offset.checked_add(size).is_none_or(|end| end > len) {
                return Err(format!("section {i}: outside the file"));
            }
        }
        let entsize: u64 = s.sh_entsize(endian).into();
        if matches!(
            s.sh_type(endian),
            object::elf::SHT_SYMTAB | object::elf::SHT_DYNSYM
        ) && (entsize == 0 || Into::<u64>::into(s.sh_size(endian)) % entsize != 0)
        {
            return Err(format!(
                "section {i}: a symbol table with entry size {entsize}"
            ));
        }
        if let Some((ch, _, compressed)) = s
            .compression(endian, data)
            .map_err(|e| bad(&format!("section {i}"), e))?
        {
            let size: u64 = ch.ch_size(endian).into();
            if size > MAX_DECOMPRESSED || size > compressed.saturating_mul(MAX_RATIO) {
                return Err(format!(
                    "section {i} claims {size} bytes from {compressed} compressed"
                ));
            }
        }
    }
    // Notes (build IDs) must be well formed where blazesym reads them.
    for s in sections.iter() {
        if let Some(mut notes) = s.notes(endian, data).map_err(|e| bad("note section", e))? {
            while notes.next().map_err(|e| bad("note", e))?.is_some() {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_binary() -> Vec<u8> {
        std::fs::read(std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn a_real_binary_passes_and_garbage_does_not() {
        let data = own_binary();
        assert_eq!(check_bytes(&data), Ok(()));
        assert!(check_bytes(b"\x7fELF").is_err());
        assert!(check_bytes(&data[..data.len() / 3]).is_err());
    }

    #[test]
    fn mutated_headers_never_panic() {
        // Flip bytes in the ELF and section headers: each mutant either
        // passes or is refused, and checking never panics.
        let data = own_binary();
        let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut m = data.clone();
            let at = if x & 1 == 0 {
                (x >> 8) as usize % 64
            } else {
                shoff + (x >> 8) as usize % (data.len() - shoff)
            };
            m[at] = (x >> 40) as u8;
            let _ = check_bytes(&m);
        }
    }
}
