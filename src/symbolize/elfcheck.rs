//! Checking an ELF file before blazesym parses it.
//!
//! blazesym trusts sizes it reads from the file: a compressed debug section
//! whose header claims 2^62 bytes makes it allocate that much, and an
//! allocation failure aborts the process, which no `catch_unwind` can stop.
//! So every size that leads to an allocation is checked here first, with
//! the `object` crate. What is wrong with one section costs that section:
//! blazesym is then kept from it (see crate::symbolize::files), and the
//! symbol tables still name the file's functions; only a file whose headers
//! themselves are broken costs its frames.

use std::fs::File;

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

/// Sections that name other files, which blazesym would look up by path
/// (debug links, dwz's supplementary files).
const LINK_SECTIONS: [&str; 3] = [".gnu_debuglink", ".gnu_debugaltlink", ".debug_sup"];

/// What the check of a file found that blazesym must be kept from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Malformed sections: index, why, and whether it is debug information
    /// (DWARF) only.
    pub bad: Vec<(usize, String, bool)>,
    /// The file names other files (`.gnu_debuglink` and the like).
    pub links: bool,
    /// Bytes of DWARF it holds, decompressed: what reading its source
    /// lines and inlined functions costs (see crate::symbolize::user).
    pub dwarf_bytes: u64,
}

impl Verdict {
    /// Whether every malformed section is DWARF: then reading the symbol
    /// tables alone keeps blazesym from all of them.
    pub fn debug_only(&self) -> bool {
        self.bad.iter().all(|(_, _, debug)| *debug)
    }

    /// The malformed sections, for a `-v` line.
    pub fn describe(&self) -> String {
        let parts: Vec<&str> = self.bad.iter().map(|(_, why, _)| why.as_str()).collect();
        parts.join("; ")
    }
}

/// Checks the ELF file open as `file` (opened by crate::fsafe): `Err` when
/// its headers are broken (or it is not ELF), else what is wrong inside.
pub fn check(file: &File) -> Result<Verdict, Reason> {
    // A file already checked is not read again (a live view symbolizes
    // every refresh; reading a 150 MB library each time cost most of its CPU).
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.len() > MAX_FILE {
        return Err(format!("{} bytes, over the size limit", meta.len()));
    }
    let id = FileId::of(&meta);
    if let Some(r) = CHECKED.with(|c| c.borrow().get(&id).cloned()) {
        return r;
    }
    // Only the headers, compression headers and notes are read, not the
    // whole file: a profile's 200 MB libLLVM costs a few pages, not 200 MB.
    let data = ReadCache::new(file);
    let r = check_data(&data);
    CHECKED.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MEMO_FILES {
            c.clear();
        }
        c.insert(id, r.clone());
    });
    r
}

/// Files whose verdict is remembered, at most.
const MEMO_FILES: usize = 4096;

pub(crate) use crate::process::mapped::FileId;

thread_local! {
    static CHECKED: std::cell::RefCell<std::collections::HashMap<FileId, Result<Verdict, Reason>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Checks an ELF image in memory.
#[cfg(test)]
pub fn check_bytes(data: &[u8]) -> Result<Verdict, Reason> {
    check_data(data)
}

/// A copy of the ELF image `data` (checked, with verdict `v`) in which each
/// malformed section is an empty, nameless one (its header zeroed): what
/// blazesym may read of a file whose symbol tables or other sections it
/// must not see. `None` when the copy would still not pass.
pub fn without_bad_sections(data: &[u8], v: &Verdict) -> Option<Vec<u8>> {
    let (shoff, shentsize) = match data.get(4)? {
        2 => {
            let h = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
            let e = h.endian().ok()?;
            (h.e_shoff(e), u64::from(h.e_shentsize(e)))
        }
        1 => {
            let h = object::elf::FileHeader32::<object::Endianness>::parse(data).ok()?;
            let e = h.endian().ok()?;
            (u64::from(h.e_shoff(e)), u64::from(h.e_shentsize(e)))
        }
        _ => return None,
    };
    let mut out = data.to_vec();
    for (i, _, _) in &v.bad {
        let at = usize::try_from(shoff.checked_add(shentsize.checked_mul(*i as u64)?)?).ok()?;
        out.get_mut(at..at.checked_add(shentsize as usize)?)?
            .fill(0);
    }
    check_data(&*out)
        .ok()
        .filter(|v| v.bad.is_empty())
        .map(|_| out)
}

fn check_data<'data, R: ReadRef<'data>>(data: R) -> Result<Verdict, Reason> {
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

// Long on purpose: one pass over the sections, each check next to the reason it gives.
fn check_elf<'data, H: FileHeader<Endian = object::Endianness>, R: ReadRef<'data>>(
    data: R,
) -> Result<Verdict, Reason> {
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
    // Without the section names nothing can be told apart: the whole file.
    let shstrndx = header
        .shstrndx(endian, data)
        .map_err(|e| bad("section names", e))? as usize;
    let mut v = Verdict::default();
    let mut names = Vec::with_capacity(sections.len());
    for (i, s) in sections.iter().enumerate() {
        let name = sections.section_name(endian, s).unwrap_or_default();
        let name = String::from_utf8_lossy(name).into_owned();
        let debug = name.starts_with(".debug") || name.starts_with(".zdebug");
        let mut why = None;
        // Every section that has bytes in the file must lie within it
        // (checked by its range: reading it would read the whole file).
        if let Some((offset, size)) = s.file_range(endian) {
            if offset.checked_add(size).is_none_or(|end| end > len) {
                why = Some("outside the file".to_string());
            }
        }
        let entsize: u64 = s.sh_entsize(endian).into();
        let is_symtab = matches!(
            s.sh_type(endian),
            object::elf::SHT_SYMTAB | object::elf::SHT_DYNSYM
        );
        if why.is_none()
            && is_symtab
            && (entsize == 0 || Into::<u64>::into(s.sh_size(endian)) % entsize != 0)
        {
            why = Some(format!("a symbol table with entry size {entsize}"));
        }
        if why.is_none() {
            match s.compression(endian, data) {
                Err(e) => why = Some(e.to_string()),
                Ok(Some((ch, _, compressed))) => {
                    let size: u64 = ch.ch_size(endian).into();
                    if size > MAX_DECOMPRESSED || size > compressed.saturating_mul(MAX_RATIO) {
                        why = Some(format!("claims {size} bytes from {compressed} compressed"));
                    } else if debug {
                        v.dwarf_bytes += size;
                    }
                }
                Ok(None) if debug => v.dwarf_bytes += Into::<u64>::into(s.sh_size(endian)),
                Ok(None) => {}
            }
        }
        // Notes (build IDs) must be well formed where blazesym reads them.
        if why.is_none() {
            match s.notes(endian, data) {
                Err(e) => why = Some(e.to_string()),
                Ok(Some(mut notes)) => loop {
                    match notes.next() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => {
                            why = Some(format!("note: {e}"));
                            break;
                        }
                    }
                },
                Ok(None) => {}
            }
        }
        if let Some(why) = why {
            if i == shstrndx {
                return Err(format!("section names ({name}): {why}"));
            }
            v.bad
                .push((i, format!("section {i} ({name}) {why}"), debug));
        } else if LINK_SECTIONS.contains(&name.as_str()) {
            v.links = true;
        }
        names.push(name);
    }
    // A symbol table whose strings are unreadable names nothing right.
    for (i, s) in sections.iter().enumerate() {
        let link = s.sh_link(endian) as usize;
        let is_symtab = matches!(
            s.sh_type(endian),
            object::elf::SHT_SYMTAB | object::elf::SHT_DYNSYM
        );
        if is_symtab
            && v.bad.iter().any(|(b, _, _)| *b == link)
            && !v.bad.iter().any(|(b, _, _)| *b == i)
        {
            v.bad.push((
                i,
                format!(
                    "section {i} ({}) has its strings in a malformed section",
                    names[i]
                ),
                false,
            ));
        }
    }
    Ok(v)
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
        let v = check_bytes(&data).unwrap();
        assert!(v.bad.is_empty() && !v.links, "{v:?}");
        // The test binary has debug information.
        assert!(v.dwarf_bytes > 0);
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
