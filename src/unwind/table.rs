//! One ELF file's unwind table: its `.eh_frame` (or `.debug_frame` where
//! that is all there is) parsed with gimli into sorted rows keyed by file
//! offset, the form the BPF walker (bpf/unwind.bpf.h) searches.
//!
//! Keyed by file offset rather than ELF address because that is what the
//! kernel knows of a PC (vma->vm_pgoff), so no per-process bias is needed.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment};

use crate::bpf::abi::{self, unwind_cfa, unwind_rbp};

/// `enum unwind_cfa` (bpf/unwind.h, values from the skeleton).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cfa {
    /// No FDE covers the address.
    None = unwind_cfa::UNWIND_CFA_NONE.0 as u8,
    /// rsp + offset.
    Rsp = unwind_cfa::UNWIND_CFA_RSP.0 as u8,
    /// rbp + offset.
    Rbp = unwind_cfa::UNWIND_CFA_RBP.0 as u8,
    /// A PLT stub: rsp + offset, + 8 once the push ran.
    Plt = unwind_cfa::UNWIND_CFA_PLT.0 as u8,
    /// *(rbp + offset): stack realignment.
    DerefRbp = unwind_cfa::UNWIND_CFA_DEREF_RBP.0 as u8,
    /// `__restore_rt`: registers from the rt_sigframe.
    Signal = unwind_cfa::UNWIND_CFA_SIGNAL.0 as u8,
    /// The outermost frame (return address undefined).
    Stop = unwind_cfa::UNWIND_CFA_STOP.0 as u8,
    /// A rule the walker cannot follow.
    Unsupported = unwind_cfa::UNWIND_CFA_UNSUPPORTED.0 as u8,
    /// The first of 16: DWARF register `cfa_type - Reg` + offset, followed
    /// in the first frame only (see [`Row::reg`]).
    Reg = unwind_cfa::UNWIND_CFA_REG.0 as u8,
}

/// `enum unwind_rbp` (bpf/unwind.h, values from the skeleton).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Rbp {
    /// Unchanged.
    Same = unwind_rbp::UNWIND_RBP_SAME.0 as u8,
    /// Saved at CFA + offset.
    Offset = unwind_rbp::UNWIND_RBP_OFFSET.0 as u8,
    /// Not known past this frame.
    Unknown = unwind_rbp::UNWIND_RBP_UNKNOWN.0 as u8,
}

/// One row: the rule from `pc` (a file offset) on. Loaded as a `struct
/// unwind_row` naming its rule ([`Row::rule`]) in `unwind_rules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// File offset of the first instruction the rule covers.
    pub pc: u32,
    /// The CFA's offset from its register.
    pub cfa_off: i32,
    /// Where rbp is saved, from the CFA (PLT rows: the `pc & 15` threshold).
    pub rbp_off: i16,
    /// [`Cfa`].
    pub cfa_type: u8,
    /// [`Rbp`].
    pub rbp_type: u8,
}

impl Row {
    fn new(pc: u32, cfa: Cfa, cfa_off: i32, rbp: Rbp, rbp_off: i16) -> Row {
        Row {
            pc,
            cfa_off,
            rbp_off,
            cfa_type: cfa as u8,
            rbp_type: rbp as u8,
        }
    }

    /// CFA = DWARF register `reg` (not rsp or rbp, below 16) + `cfa_off`.
    fn reg(reg: u16, cfa_off: i32, rbp: Rbp, rbp_off: i16) -> Row {
        Row {
            cfa_type: Cfa::Reg as u8 + reg as u8,
            ..Row::new(0, Cfa::Reg, cfa_off, rbp, rbp_off)
        }
    }

    fn same_rule(&self, o: &Row) -> bool {
        (self.cfa_off, self.rbp_off, self.cfa_type, self.rbp_type)
            == (o.cfa_off, o.rbp_off, o.cfa_type, o.rbp_type)
    }

    /// The row's rule as the BPF side reads it.
    pub fn rule(&self) -> abi::unwind_rule {
        abi::unwind_rule {
            cfa_off: self.cfa_off,
            rbp_off: self.rbp_off,
            cfa_type: self.cfa_type,
            rbp_type: self.rbp_type,
        }
    }
}

/// The page index of sorted `rows` (see `struct unwind_page`): the first
/// page number, and for each page from it to the last row's, the rows
/// (relative to `rows[0]`) in effect at its first and at its last byte.
pub fn page_index(rows: &[Row]) -> (u32, Vec<abi::unwind_page>) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return (0, Vec::new());
    };
    let shift = abi::UNWIND_PAGE_SHIFT;
    let (base, end) = (first.pc >> shift, last.pc >> shift);
    // The last row with pc <= off (row 0 when none: find_row checks it).
    let at = |off: u64| {
        rows.partition_point(|r| u64::from(r.pc) <= off)
            .saturating_sub(1) as u32
    };
    let pages = (base..=end)
        .map(|p| {
            let start = u64::from(p) << shift;
            abi::unwind_page {
                lo: at(start),
                hi: at(start + (1 << shift) - 1),
            }
        })
        .collect();
    (base, pages)
}

/// A file's table and what is known of it.
#[derive(Debug, Default)]
pub struct Table {
    /// Sorted by pc, adjacent equal rules merged; a `Cfa::None` row ends
    /// each covered range that the next does not start.
    pub rows: Vec<Row>,
    /// The GNU build ID, if the file has one.
    pub build_id: Option<Vec<u8>>,
    /// Rows whose rule the walker cannot follow (kept, and counted).
    pub unsupported: usize,
}

/// Why a file has no table.
#[derive(Debug, PartialEq, Eq)]
pub enum NoTable {
    /// Not an ELF file this unwinder handles (not x86-64 ELF).
    NotElf(String),
    /// Neither `.eh_frame` nor `.debug_frame`.
    NoCfi,
    /// Malformed call frame information.
    Bad(String),
    /// More rows than `limit`.
    TooLarge(usize),
}

impl std::fmt::Display for NoTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoTable::NotElf(e) => write!(f, "not an x86-64 ELF file ({e})"),
            NoTable::NoCfi => write!(f, "no .eh_frame or .debug_frame"),
            NoTable::Bad(e) => write!(f, "malformed call frame information: {e}"),
            NoTable::TooLarge(n) => write!(f, "more than {n} unwind rows"),
        }
    }
}

/// Gaps between FDEs shorter than this are alignment padding (functions
/// are aligned to at most 16 bytes on x86-64): no row ends the previous
/// rule there. Padding never runs, and a return address past a noreturn
/// call at a function's end is looked up at its call (pc - 1), so nothing
/// looks it up; the row saved is often two, as the next function's first
/// rule (CFA = rsp + 8) then merges with the last one's.
const PADDING: u64 = 16;

/// One FDE's rows by ELF address: (start, end, rule without pc).
type Span = (u64, u64, Row);

/// Builds the table of an ELF image (the whole file's bytes). At most
/// `limit` rows.
// Long on purpose: one walk over the CFI rows, a case per rule kind; the cases share the row being built.
pub fn build(data: &[u8], limit: usize) -> Result<Table, NoTable> {
    let obj = object::File::parse(data).map_err(|e| NoTable::NotElf(e.to_string()))?;
    if obj.architecture() != object::Architecture::X86_64 {
        return Err(NoTable::NotElf(format!("{:?}", obj.architecture())));
    }
    let build_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
    // ELF address → file offset, through the loaded segments.
    let segments: Vec<(u64, u64, u64)> = obj
        .segments()
        .filter_map(|s| {
            let (off, size) = s.file_range();
            (size > 0).then_some((s.address(), size, off))
        })
        .collect();
    let to_offset = |addr: u64| -> Option<u64> {
        segments
            .iter()
            .find(|&&(a, size, _)| addr >= a && addr - a < size)
            .map(|&(a, _, off)| off + (addr - a))
    };
    let section = |name: &str| {
        obj.section_by_name(name)
            .and_then(|s| Some((s.address(), s.data().ok()?)))
    };
    let mut spans = Vec::new();
    let mut unsupported = 0;
    if let Some((addr, bytes)) = section(".eh_frame").filter(|(_, b)| !b.is_empty()) {
        let eh = EhFrame::new(bytes, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(addr);
        if let Some(text) = obj.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = obj.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        collect(&eh, &bases, limit, &mut spans, &mut unsupported)?;
    } else if let Some((_, bytes)) = section(".debug_frame").filter(|(_, b)| !b.is_empty()) {
        let mut df = DebugFrame::new(bytes, LittleEndian);
        df.set_address_size(8);
        collect(
            &df,
            &BaseAddresses::default(),
            limit,
            &mut spans,
            &mut unsupported,
        )?;
    } else {
        return Err(NoTable::NoCfi);
    }
    let mut located: Vec<Span> = spans
        .into_iter()
        .filter_map(|(start, end, row)| {
            let s = to_offset(start)?;
            // The end is one past the last byte; it may be a segment's end.
            let e = s.checked_add(end.checked_sub(start)?)?;
            (e <= u32::MAX as u64).then_some((s, e, row))
        })
        .collect();
    located.sort_by_key(|&(s, e, _)| (s, e));
    let mut rows: Vec<Row> = Vec::with_capacity(located.len() + located.len() / 4);
    let mut covered_to = 0u64;
    for (start, end, rule) in located {
        if start >= end {
            continue;
        }
        // An overlap (two FDEs for one range) keeps the first.
        let start = start.max(covered_to);
        if start >= end {
            continue;
        }
        if start >= covered_to + PADDING && !rows.is_empty() {
            push(
                &mut rows,
                Row::new(covered_to as u32, Cfa::None, 0, Rbp::Same, 0),
            );
        }
        push(
            &mut rows,
            Row {
                pc: start as u32,
                ..rule
            },
        );
        covered_to = end;
        if rows.len() > limit {
            return Err(NoTable::TooLarge(limit));
        }
    }
    if !rows.is_empty() {
        push(
            &mut rows,
            Row::new(covered_to as u32, Cfa::None, 0, Rbp::Same, 0),
        );
    }
    Ok(Table {
        rows,
        build_id,
        unsupported,
    })
}

/// Appends a row, merged into the last one when the rule is the same.
fn push(rows: &mut Vec<Row>, row: Row) {
    if let Some(last) = rows.last_mut() {
        if last.pc == row.pc {
            *last = row;
            // The previous row may now equal this one.
            if rows.len() >= 2 && rows[rows.len() - 2].same_rule(&row) {
                rows.pop();
            }
            return;
        }
        if last.same_rule(&row) {
            return;
        }
    }
    rows.push(row);
}

fn collect<'a, S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>>(
    section: &S,
    bases: &BaseAddresses,
    limit: usize,
    spans: &mut Vec<Span>,
    unsupported: &mut usize,
) -> Result<(), NoTable> {
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => return Err(NoTable::Bad(e.to_string())),
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // One bad FDE costs its own range, not the file's table.
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            continue;
        };
        let signal = fde.is_signal_trampoline();
        let Ok(mut table) = fde.rows(section, bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            let rule = if signal {
                Row::new(0, Cfa::Signal, 0, Rbp::Same, 0)
            } else {
                rule_of(section, row)
            };
            if rule.cfa_type == Cfa::Unsupported as u8 {
                *unsupported += 1;
            }
            spans.push((row.start_address(), row.end_address(), rule));
            if spans.len() > limit {
                return Err(NoTable::TooLarge(limit));
            }
        }
    }
    Ok(())
}

fn rule_of<'a, S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>>(
    section: &S,
    row: &gimli::UnwindTableRow<usize>,
) -> Row {
    let unsupported = Row::new(0, Cfa::Unsupported, 0, Rbp::Same, 0);
    if matches!(row.register(X86_64::RA), Some(RegisterRule::Undefined)) {
        return Row::new(0, Cfa::Stop, 0, Rbp::Same, 0);
    }
    let (rbp, rbp_off) = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => (Rbp::Same, 0),
        Some(RegisterRule::Offset(n)) => match i16::try_from(n) {
            Ok(n) => (Rbp::Offset, n),
            Err(_) => (Rbp::Unknown, 0),
        },
        _ => (Rbp::Unknown, 0),
    };
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = i32::try_from(*offset) else {
                return unsupported;
            };
            match *register {
                X86_64::RSP => Row::new(0, Cfa::Rsp, off, rbp, rbp_off),
                X86_64::RBP => Row::new(0, Cfa::Rbp, off, rbp, rbp_off),
                gimli::Register(r) if r < 16 => Row::reg(r, off, rbp, rbp_off),
                _ => unsupported,
            }
        }
        CfaRule::Expression(e) => match e.get(section) {
            Ok(expr) => match expression_rule(expr.0.slice()) {
                Some((cfa, off, extra)) => {
                    let (rbp, rbp_off) = if cfa == Cfa::Plt {
                        (Rbp::Same, extra)
                    } else {
                        (rbp, rbp_off)
                    };
                    Row::new(0, cfa, off, rbp, rbp_off)
                }
                None => unsupported,
            },
            Err(_) => unsupported,
        },
    }
}

/// The two CFA expressions compilers emit on x86-64: the PLT's
/// `rsp + off + ((rip & 15) >= N) << 3` and stack realignment's
/// `*(rbp + off)`. Returns (rule, offset, PLT threshold).
pub fn expression_rule(b: &[u8]) -> Option<(Cfa, i32, i16)> {
    const BREG6: u8 = 0x76;
    const BREG7: u8 = 0x77;
    const BREG16: u8 = 0x80;
    const DEREF: u8 = 0x06;
    let mut r = gimli::EndianSlice::new(b, LittleEndian);
    let op = gimli::Reader::read_u8(&mut r).ok()?;
    let off = i32::try_from(gimli::Reader::read_sleb128(&mut r).ok()?).ok()?;
    let rest = r.slice();
    match op {
        BREG6 if rest == [DEREF] => Some((Cfa::DerefRbp, off, 0)),
        BREG7 => {
            // DW_OP_breg16 0; lit15; and; litN; ge; lit3; shl; plus
            let [BREG16, 0, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22] = *rest else {
                return None;
            };
            let n = lit.checked_sub(0x30).filter(|&n| n < 32)?;
            Some((Cfa::Plt, off, n as i16))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plt_and_realignment_expressions_are_recognized() {
        let plt = [0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(expression_rule(&plt), Some((Cfa::Plt, 8, 11)));
        assert_eq!(
            expression_rule(&[0x76, 0x78, 0x06]),
            Some((Cfa::DerefRbp, -8, 0))
        );
        assert_eq!(expression_rule(&[0x76, 0x78]), None);
        assert_eq!(expression_rule(&[]), None);
        assert_eq!(expression_rule(&[0x77, 8, 0x80]), None);
    }

    #[test]
    fn libc_has_a_table_with_a_signal_frame_and_a_root() {
        let Ok(data) = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6") else {
            return;
        };
        let t = build(&data, 10_000_000).expect("libc's table");
        assert!(t.rows.len() > 1000, "{} rows", t.rows.len());
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
        assert!(t.rows.iter().any(|r| r.cfa_type == Cfa::Signal as u8));
        assert!(t.rows.iter().any(|r| r.cfa_type == Cfa::Stop as u8));
        assert!(t.build_id.is_some());
    }

    /// The page index's range always holds the row a search of the whole
    /// table finds, at every offset of libc's covered text and past it.
    #[test]
    fn page_index_narrows_to_the_row_of_every_offset() {
        let Ok(data) = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6") else {
            return;
        };
        let rows = build(&data, 10_000_000).expect("libc's table").rows;
        let (base, pages) = page_index(&rows);
        let shift = abi::UNWIND_PAGE_SHIFT;
        assert_eq!(base, rows[0].pc >> shift);
        assert_eq!(
            pages.len() as u32,
            (rows.last().unwrap().pc >> shift) - base + 1
        );
        let end = u64::from(rows.last().unwrap().pc) + 5000;
        let mut widest = 0;
        for off in (u64::from(rows[0].pc)..end).step_by(7) {
            let want = rows.partition_point(|r| u64::from(r.pc) <= off) - 1;
            let p = (off >> shift) - u64::from(base);
            let (lo, hi) = match pages.get(p as usize) {
                Some(pg) => (pg.lo as usize, pg.hi as usize),
                None => (rows.len() - 1, rows.len() - 1),
            };
            assert!(
                lo <= want && want <= hi,
                "offset {off:#x}: row {want} not in {lo}..={hi}"
            );
            widest = widest.max(hi - lo + 1);
        }
        // The point of the index: a few rows per page, not the whole table.
        assert!(widest < 512, "a page spans {widest} rows");
    }

    #[test]
    fn garbage_is_refused_without_panic() {
        assert!(matches!(build(b"not an elf", 100), Err(NoTable::NotElf(_))));
        let mut data = std::fs::read("/proc/self/exe").unwrap();
        // Corrupt the middle of the file: an error or a table, never a panic.
        let n = data.len();
        for b in &mut data[n / 3..n / 3 + 4096] {
            *b = 0xff;
        }
        let _ = build(&data, 10_000_000);
    }
}
