//! Go's own function table, `.gopclntab`: function names, inlined calls,
//! source files and lines for Go binaries without `.symtab` (`go build
//! -ldflags='-s -w'`), which blazesym cannot name. Every Go binary keeps
//! the table: its runtime needs it for tracebacks and its garbage
//! collector.
//!
//! Formats: Go 1.16-1.17 (magic `0xfffffffa`), Go 1.18-1.19 (`0xfffffff0`)
//! and Go 1.20 and later (`0xfffffff1`), in 64-bit little-endian ELF files
//! (layouts as `runtime/symtab.go` and `runtime/runtime2.go` give them). The
//! file is hostile input: every offset is checked against the bounds of the
//! part of the table it points into, every loop is bounded, a name is cut
//! at [`MAX_NAME`] bytes, and a malformed table names nothing.

use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::read::{ReadCache, ReadCacheOps, ReadRef};

const MAGIC_116: u32 = 0xffff_fffa;
const MAGIC_118: u32 = 0xffff_fff0;
const MAGIC_120: u32 = 0xffff_fff1;

/// `_PCDATA_InlTreeIndex`, `_FUNCDATA_InlTree`.
const PCDATA_INL_TREE_INDEX: u32 = 2;
const FUNCDATA_INL_TREE: u32 = 3;

/// Longest name (function or file) read; longer ones are cut.
pub(crate) const MAX_NAME: usize = 4096;
/// Most functions a table may list (Go's largest binaries have ~10^6).
const MAX_FUNCS: u64 = 1 << 24;
/// Most inlined calls shown for one address.
const MAX_INLINE_DEPTH: usize = 64;
/// Most (value, pc) pairs decoded from one pc-value table.
const MAX_PCVALUE_STEPS: u32 = 1 << 20;
/// How much of the data sections is searched for the module data.
const MAX_MODULEDATA_SCAN: u64 = 64 << 20;

/// Which table layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// Go 1.16 and 1.17.
    Go116,
    /// Go 1.18 and 1.19.
    Go118,
    /// Go 1.20 and later.
    Go120,
}

/// One function of a location: an inlined call or the function itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GoFrame {
    /// The function's Go name (`main.hotLoop`, `runtime.mallocgc`).
    pub name: String,
    /// Its source file, where the table gives one.
    pub file: Option<String>,
    /// The source line at the address, 0 when unknown.
    pub line: u32,
}

/// Where the table and the rest of the file lie: what [`GoTable::new`]
/// needs besides the bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layout {
    /// File offset of the table (its `pcHeader`).
    pub offset: u64,
    /// Its virtual address.
    pub vaddr: u64,
    /// Its size in the file.
    pub size: u64,
    /// The start of `.text`: the base of 1.18+ entry offsets when no module
    /// data says it.
    pub text: u64,
    /// Loaded segments: (virtual address, size in the file, file offset).
    pub loads: Vec<(u64, u64, u64)>,
    /// Sections where the runtime's module data may be: (file offset, size).
    pub data: Vec<(u64, u64)>,
}

/// A Go binary's function table, read from the file as lookups need it.
pub(crate) struct GoTable<R: ReadCacheOps> {
    data: ReadCache<R>,
    version: Version,
    quantum: u64,
    layout: Layout,
    nfunc: u64,
    /// Base of 1.18+ entry offsets.
    text: u64,
    /// Offsets from the table's start.
    funcname: u64,
    cutab: u64,
    filetab: u64,
    pctab: u64,
    pcln: u64,
    /// The function table: `nfunc + 1` entries, read whole.
    functab: Vec<u8>,
    /// Virtual address of `go:func.*` (1.18+), the base of funcdata offsets:
    /// from the module data; without it, no inlined frames.
    gofunc: Option<u64>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The table's parts, as offsets from its start, and its size: each part
/// ends where the next begins (the linker writes them in this order).
struct Parts {
    funcname: u64,
    cutab: u64,
    filetab: u64,
    pctab: u64,
    pcln: u64,
}

impl<R: ReadCacheOps> GoTable<R> {
    /// The table of the ELF file read by `read`, if it has one this reads.
    pub(crate) fn open(read: R) -> Option<Self> {
        let data = ReadCache::new(read);
        let layout = elf_layout(&data)?;
        Self::new(data, layout)
    }

    /// The table at `layout` in `data`, if its header is one this reads.
    pub(crate) fn new(data: ReadCache<R>, layout: Layout) -> Option<Self> {
        let hdr = (&data)
            .read_bytes_at(layout.offset, 72.min(layout.size))
            .ok()?;
        let magic = u32_at(hdr, 0)?;
        let version = match magic {
            MAGIC_116 => Version::Go116,
            MAGIC_118 => Version::Go118,
            MAGIC_120 => Version::Go120,
            _ => return None,
        };
        // pad1, pad2, minLC (the instruction size quantum), ptrSize.
        let (quantum, ptr) = (*hdr.get(6)?, *hdr.get(7)?);
        if hdr[4] != 0 || hdr[5] != 0 || !matches!(quantum, 1 | 2 | 4) || ptr != 8 {
            return None;
        }
        let word = |i: usize| u64_at(hdr, 8 + 8 * i);
        let nfunc = word(0)?;
        let (text_start, first) = match version {
            Version::Go116 => (0, 2),
            _ => (word(2)?, 3),
        };
        let parts = Parts {
            funcname: word(first)?,
            cutab: word(first + 1)?,
            filetab: word(first + 2)?,
            pctab: word(first + 3)?,
            pcln: word(first + 4)?,
        };
        let ordered = [
            parts.funcname,
            parts.cutab,
            parts.filetab,
            parts.pctab,
            parts.pcln,
            layout.size,
        ];
        if nfunc == 0 || nfunc > MAX_FUNCS || ordered.windows(2).any(|w| w[0] > w[1]) {
            return None;
        }
        let entry_size = if version == Version::Go116 { 16 } else { 8 };
        let functab_len = (nfunc + 1).checked_mul(entry_size)?;
        if parts.pcln.checked_add(functab_len)? > layout.size {
            return None;
        }
        let functab = (&data)
            .read_bytes_at(layout.offset + parts.pcln, functab_len)
            .ok()?
            .to_vec();
        let mut table = GoTable {
            data,
            version,
            quantum: u64::from(quantum),
            nfunc,
            text: 0,
            funcname: parts.funcname,
            cutab: parts.cutab,
            filetab: parts.filetab,
            pctab: parts.pctab,
            pcln: parts.pcln,
            functab,
            gofunc: None,
            layout,
        };
        if version != Version::Go116 {
            // The module data has the text address the runtime uses (an
            // externally linked binary's C code may come first in .text)
            // and go:func.*; else the header's, else .text's.
            match table.module_data() {
                Some((text, gofunc)) => {
                    table.text = text;
                    table.gofunc = Some(gofunc);
                }
                None if text_start != 0 => table.text = text_start,
                None => table.text = table.layout.text,
            }
        }
        // Entries must rise: a table whose first and last do not is not one.
        if table.entry(0)? >= table.entry(nfunc)? {
            return None;
        }
        Some(table)
    }

    /// Which layout the table has.
    #[cfg(test)]
    pub(crate) fn version(&self) -> Version {
        self.version
    }

    /// Reads `len` bytes at `off` from the table's start, within `end`.
    fn table_bytes(&self, off: u64, len: u64, end: u64) -> Option<&[u8]> {
        if off.checked_add(len)? > end.min(self.layout.size) {
            return None;
        }
        (&self.data)
            .read_bytes_at(self.layout.offset + off, len)
            .ok()
    }

    /// The entry address of function `i` (`nfunc`: the end of the last).
    fn entry(&self, i: u64) -> Option<u64> {
        let i = usize::try_from(i).ok()?;
        match self.version {
            Version::Go116 => u64_at(&self.functab, i.checked_mul(16)?),
            _ => self
                .text
                .checked_add(u64::from(u32_at(&self.functab, i.checked_mul(8)?)?)),
        }
    }

    /// The offset of function `i`'s `_func` from the function table's start.
    fn func_offset(&self, i: u64) -> Option<u64> {
        let i = usize::try_from(i).ok()?;
        match self.version {
            Version::Go116 => u64_at(&self.functab, i.checked_mul(16)? + 8),
            _ => u32_at(&self.functab, i.checked_mul(8)? + 4).map(u64::from),
        }
    }

    /// The function whose code holds the virtual address `pc`.
    fn find(&self, pc: u64) -> Option<u64> {
        if pc < self.entry(0)? || pc >= self.entry(self.nfunc)? {
            return None;
        }
        // The last function whose entry is at or before pc.
        let (mut lo, mut hi) = (0, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid)? <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// A NUL-terminated name at `off` within the part `[start, end)`.
    fn name_at(&self, start: u64, end: u64, off: u64) -> Option<String> {
        let at = start.checked_add(off)?;
        if at >= end.min(self.layout.size) {
            return None;
        }
        let len = (end.min(self.layout.size) - at).min(MAX_NAME as u64);
        let bytes = self.table_bytes(at, len, end)?;
        let bytes = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
        (!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned())
    }

    fn func_name(&self, nameoff: u32) -> Option<String> {
        self.name_at(self.funcname, self.cutab, u64::from(nameoff))
    }

    /// The value of the pc-value table at `off` in the pc table at `pc`, for
    /// a function entered at `entry`.
    fn pcvalue(&self, off: u32, entry: u64, pc: u64) -> Option<i32> {
        if off == 0 {
            return None;
        }
        let mut at = self.pctab.checked_add(u64::from(off))?;
        let end = self.pcln;
        let mut window: &[u8] = &[];
        let mut window_at = at;
        // One unsigned LEB128 number from the table, read in windows.
        let mut next = |at: &mut u64| -> Option<u32> {
            let mut v: u32 = 0;
            for shift in (0..35).step_by(7) {
                let i = at.checked_sub(window_at)?;
                if i >= window.len() as u64 {
                    window_at = *at;
                    let len = (end.checked_sub(*at)?).min(256);
                    window = self.table_bytes(*at, len, end)?;
                    if window.is_empty() {
                        return None;
                    }
                }
                let b = window[(*at - window_at) as usize];
                *at += 1;
                v |= u32::from(b & 0x7f).checked_shl(shift)?;
                if b & 0x80 == 0 {
                    return Some(v);
                }
            }
            None
        };
        let (mut cur_pc, mut val) = (entry, -1i32);
        for step in 0..MAX_PCVALUE_STEPS {
            let uvdelta = next(&mut at)?;
            if uvdelta == 0 && step > 0 {
                return None;
            }
            // Zig-zag: the low bit is the sign.
            let delta = ((uvdelta >> 1) as i32) ^ -((uvdelta & 1) as i32);
            val = val.wrapping_add(delta);
            let pcdelta = u64::from(next(&mut at)?);
            cur_pc = cur_pc.checked_add(pcdelta.checked_mul(self.quantum)?)?;
            if pc < cur_pc {
                return Some(val);
            }
        }
        None
    }

    /// The source file of `fileno` in the compilation unit at `cu`.
    fn file_name(&self, cu: u32, fileno: i32) -> Option<String> {
        let idx = u64::from(cu).checked_add(u64::try_from(fileno).ok()?)?;
        let at = self.cutab.checked_add(idx.checked_mul(4)?)?;
        let off = u32_at(self.table_bytes(at, 4, self.filetab)?, 0)?;
        if off == u32::MAX {
            return None;
        }
        self.name_at(self.filetab, self.pctab, u64::from(off))
    }

    /// Reads `len` bytes at the virtual address `vaddr`, from the loaded
    /// segment that holds them.
    fn vaddr_bytes(&self, vaddr: u64, len: u64) -> Option<&[u8]> {
        let &(v, _, off) = self.layout.loads.iter().find(|&&(v, size, _)| {
            vaddr >= v
                && vaddr
                    .checked_add(len)
                    .is_some_and(|e| e <= v.saturating_add(size))
        })?;
        (&self.data).read_bytes_at(off + (vaddr - v), len).ok()
    }

    /// The functions at the virtual address `pc`, innermost first: the
    /// calls inlined there, then the function whose code it is.
    pub(crate) fn frames(&self, pc: u64) -> Option<Vec<GoFrame>> {
        let i = self.find(pc)?;
        let entry = self.entry(i)?;
        let fo = self.pcln.checked_add(self.func_offset(i)?)?;
        let sz0: u64 = if self.version == Version::Go116 { 8 } else { 4 };
        let fixed = sz0
            + if self.version == Version::Go120 {
                40
            } else {
                36
            };
        let f = self.table_bytes(fo, fixed, self.layout.size)?;
        let field = |n: usize| u32_at(f, sz0 as usize + (n - 1) * 4);
        // The _func must be the one the function table names.
        let own_entry = match self.version {
            Version::Go116 => u64_at(f, 0)?,
            _ => self.text.checked_add(u64::from(u32_at(f, 0)?))?,
        };
        if own_entry != entry {
            return None;
        }
        let (nameoff, pcfile, pcln, npcdata, cu) =
            (field(1)?, field(5)?, field(6)?, field(7)?, field(8)?);
        let nfuncdata = u32::from(*f.last()?);
        if npcdata > 1024 {
            return None;
        }
        let pcdata = self.table_bytes(fo + fixed, u64::from(npcdata) * 4, self.layout.size)?;
        let line_at = |pc: u64| {
            let line = self
                .pcvalue(pcln, entry, pc)
                .and_then(|l| u32::try_from(l).ok());
            let file = self
                .pcvalue(pcfile, entry, pc)
                .and_then(|n| self.file_name(cu, n));
            (file, line.unwrap_or(0))
        };
        let mut frames = Vec::new();
        let mut at = pc;
        if let (Some(tree), Some(index)) = (
            self.inline_tree(fo + fixed + u64::from(npcdata) * 4, nfuncdata),
            (npcdata > PCDATA_INL_TREE_INDEX)
                .then(|| u32_at(pcdata, PCDATA_INL_TREE_INDEX as usize * 4))
                .flatten(),
        ) {
            let mut ix = self.pcvalue(index, entry, at).unwrap_or(-1);
            while ix >= 0 && frames.len() < MAX_INLINE_DEPTH {
                let (size, name_field, parent_field) = match self.version {
                    Version::Go120 => (16u64, 4usize, 8usize),
                    _ => (20, 12, 16),
                };
                let node = tree.checked_add(u64::try_from(ix).ok()?.checked_mul(size)?)?;
                let Some(node) = self.vaddr_bytes(node, size) else {
                    break;
                };
                let (Some(name_off), Some(parent_pc)) =
                    (u32_at(node, name_field), u32_at(node, parent_field))
                else {
                    break;
                };
                let Some(name) = self.func_name(name_off) else {
                    break;
                };
                let (file, line) = line_at(at);
                frames.push(GoFrame { name, file, line });
                // The call site: an instruction of the caller at parentPc.
                at = entry.checked_add(u64::from(parent_pc))?;
                ix = self.pcvalue(index, entry, at).unwrap_or(-1);
            }
        }
        let (file, line) = line_at(at);
        frames.push(GoFrame {
            name: self.func_name(nameoff)?,
            file,
            line,
        });
        Some(frames)
    }

    /// The virtual address of a function's inline tree: its funcdata
    /// `FUNCDATA_InlTree`, the funcdata array being at `at` in the table.
    fn inline_tree(&self, at: u64, nfuncdata: u32) -> Option<u64> {
        if nfuncdata <= FUNCDATA_INL_TREE {
            return None;
        }
        match self.version {
            Version::Go116 => {
                // Pointers, aligned to 8 bytes in memory.
                let at = (self.layout.vaddr + at).next_multiple_of(8) - self.layout.vaddr;
                let p = u64_at(
                    self.table_bytes(at + u64::from(FUNCDATA_INL_TREE) * 8, 8, self.layout.size)?,
                    0,
                )?;
                (p != 0).then_some(p)
            }
            _ => {
                let off = u32_at(
                    self.table_bytes(at + u64::from(FUNCDATA_INL_TREE) * 4, 4, self.layout.size)?,
                    0,
                )?;
                (off != u32::MAX).then_some(())?;
                self.gofunc?.checked_add(u64::from(off))
            }
        }
    }

    /// The runtime's module data (`runtime.firstmoduledata`): its text
    /// address and go:func.*, found by its first word, the table's address,
    /// and checked against the table (its slices are the table's parts).
    fn module_data(&self) -> Option<(u64, u64)> {
        let want = self.layout.vaddr.to_le_bytes();
        let mut budget = MAX_MODULEDATA_SCAN;
        for &(start, size) in &self.layout.data {
            let mut off = 0;
            while off < size && budget > 0 {
                let len = (size - off).min(64 << 10).min(budget);
                budget -= len;
                let chunk = (&self.data).read_bytes_at(start + off, len).ok()?;
                for (i, w) in chunk.chunks_exact(8).enumerate() {
                    if w == want {
                        if let Some(found) = self.check_module_data(start + off + i as u64 * 8) {
                            return Some(found);
                        }
                    }
                }
                off += len;
            }
        }
        None
    }

    fn check_module_data(&self, at: u64) -> Option<(u64, u64)> {
        let md = (&self.data).read_bytes_at(at, 42 * 8).ok()?;
        let w = |i: usize| u64_at(md, i * 8);
        let base = self.layout.vaddr;
        // funcnametab, cutab, filetab, pctab, pclntable, ftab: slices
        // (pointer, length, capacity) of the table's parts.
        let ok = w(1)? == base.checked_add(self.funcname)?
            && w(4)? == base.checked_add(self.cutab)?
            && w(7)? == base.checked_add(self.filetab)?
            && w(10)? == base.checked_add(self.pctab)?
            && w(13)? == base.checked_add(self.pcln)?
            && w(16)? == base.checked_add(self.pcln)?
            && w(17)? == self.nfunc + 1;
        if !ok {
            return None;
        }
        // text, etext follow findfunctab, minpc, maxpc; Go 1.20 added
        // covctrs and ecovctrs before end, gcdata, gcbss, types, etypes,
        // rodata, gofunc.
        let (text, gofunc) = match self.version {
            Version::Go120 => (w(22)?, w(40)?),
            _ => (w(22)?, w(38)?),
        };
        (text <= w(20)?).then_some((text, gofunc))
    }
}

/// Where a Go table lies in the ELF file `data`: its section
/// (`.gopclntab`, `.data.rel.ro.gopclntab` in PIE builds), `.text`, the
/// loaded segments and the sections the module data may be in.
fn elf_layout<R: ReadCacheOps>(data: &ReadCache<R>) -> Option<Layout> {
    type Hdr = object::elf::FileHeader64<object::Endianness>;
    let hdr = Hdr::parse(data).ok()?;
    let e = hdr.endian().ok()?;
    if e != object::Endianness::Little {
        return None;
    }
    let sections = hdr.sections(e, data).ok()?;
    let mut layout = Layout::default();
    let mut found = false;
    for s in sections.iter() {
        let name = sections.section_name(e, s).ok()?;
        let in_file = s.sh_type(e) != object::elf::SHT_NOBITS;
        let (offset, size, addr) = (s.sh_offset(e), s.sh_size(e), s.sh_addr(e));
        match name {
            b".gopclntab" | b".data.rel.ro.gopclntab" if in_file => {
                layout.offset = offset;
                layout.size = size;
                layout.vaddr = addr;
                found = true;
            }
            b".text" => layout.text = addr,
            b".noptrdata" | b".data" if in_file => layout.data.push((offset, size)),
            _ => {}
        }
    }
    if !found {
        return None;
    }
    layout.loads = hdr
        .program_headers(e, data)
        .ok()?
        .iter()
        .filter(|ph| ph.p_type(e) == object::elf::PT_LOAD)
        .map(|ph| (ph.p_vaddr(e), ph.p_filesz(e), ph.p_offset(e)))
        .collect();
    Some(layout)
}

/// The virtual address of the file offset `off` in the loaded segments.
pub(crate) fn offset_to_vaddr(loads: &[(u64, u64, u64)], off: u64) -> Option<u64> {
    loads
        .iter()
        .find(|&&(_, size, o)| off >= o && off - o < size)
        .map(|&(v, _, o)| off - o + v)
}

impl<R: ReadCacheOps> GoTable<R> {
    /// The functions at the file offset `off`, as [`GoTable::frames`].
    pub(crate) fn frames_at_offset(&self, off: u64) -> Option<Vec<GoFrame>> {
        self.frames(offset_to_vaddr(&self.layout.loads, off)?)
    }
}

#[cfg(test)]
mod tests;
