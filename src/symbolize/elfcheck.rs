//! Checking an ELF file before blazesym parses it.
//!
//! blazesym trusts sizes it reads from the file: a compressed debug section
//! whose header claims 2^62 bytes makes it allocate that much, and an
//! allocation failure aborts the process, which no `catch_unwind` can stop.
//! So every size that leads to an allocation is checked here first, with
//! the `object` crate, and a file that fails costs only its own frames.

use std::io::Read;
use std::path::Path;

use object::read::elf::{CompressionHeader, FileHeader, SectionHeader};

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
    let mut checked = crate::fsafe::open_untrusted(path, crate::fsafe::Owner::Any, MAX_FILE)
        .map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    checked
        .file
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    check_bytes(&data)
}

/// Checks an ELF image in memory.
pub fn check_bytes(data: &[u8]) -> Result<(), Reason> {
    if !data.starts_with(b"\x7fELF") {
        return Err(NOT_ELF.into());
    }
    match data.get(4) {
        Some(2) => check_elf::<object::elf::FileHeader64<object::Endianness>>(data),
        Some(1) => check_elf::<object::elf::FileHeader32<object::Endianness>>(data),
        _ => Err(NOT_ELF.into()),
    }
}

fn check_elf<H: FileHeader<Endian = object::Endianness>>(data: &[u8]) -> Result<(), Reason> {
    let bad = |what: &str, e: object::Error| format!("{what}: {e}");
    let header = H::parse(data).map_err(|e| bad("ELF header", e))?;
    let endian = header.endian().map_err(|e| bad("ELF header", e))?;
    let sections = header
        .sections(endian, data)
        .map_err(|e| bad("section headers", e))?;
    header
        .program_headers(endian, data)
        .map_err(|e| bad("program headers", e))?;
    for (i, s) in sections.iter().enumerate() {
        // Every section that has bytes in the file must lie within it.
        if s.sh_type(endian) != object::elf::SHT_NOBITS {
            s.data(endian, data)
                .map_err(|e| bad(&format!("section {i}"), e))?;
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
