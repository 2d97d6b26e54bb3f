//! The source line of an instruction, from a code object's line table, as
//! CPython itself computes it (`PyCode_Addr2Line`): 3.10's pairs of
//! (bytecode delta, line delta), and the location table of 3.11 on. The
//! table came from the profiled process: every step is bounded by its
//! length and no value can make the walk loop or overflow.

/// The line of instruction `lasti` (code units), `None` when the table says
/// the instruction has no line (or is cut short before it).
pub(crate) fn line_of(table: &[u8], version: u32, firstlineno: i32, lasti: i32) -> Option<i32> {
    if lasti < 0 {
        return Some(firstlineno);
    }
    // Tables count bytes: a code unit is two.
    let addr = i64::from(lasti) * 2;
    if version >> 16 <= 0x030a {
        line_310(table, firstlineno, addr)
    } else {
        line_311(table, firstlineno, addr)
    }
}

/// 3.10: (unsigned byte delta, signed line delta) pairs; a line delta of
/// -128 marks a range without a line.
fn line_310(table: &[u8], firstlineno: i32, addr: i64) -> Option<i32> {
    let (mut end, mut line) = (0i64, i64::from(firstlineno));
    for pair in table.chunks_exact(2) {
        let start = end;
        end += i64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= addr && addr < end {
            return this.and_then(|l| i32::try_from(l).ok());
        }
    }
    None
}

/// 3.11 on: entries of a first byte (bit 7 set, a 4-bit code, the length
/// in code units minus one) and the code's varints.
fn line_311(table: &[u8], firstlineno: i32, addr: i64) -> Option<i32> {
    let (mut at, mut end, mut line) = (0usize, 0i64, i64::from(firstlineno));
    while at < table.len() {
        let first = table[at];
        if first & 0x80 == 0 {
            return None; // not the start of an entry: a malformed table
        }
        let code = (first >> 3) & 15;
        let start = end;
        end += (i64::from(first & 7) + 1) * 2;
        let delta = match code {
            15 => 0,
            13 | 14 => signed_varint(table, at + 1)?,
            10..=12 => i64::from(code - 10),
            _ => 0,
        };
        line += delta;
        if start <= addr && addr < end {
            return (code != 15)
                .then_some(line)
                .and_then(|l| i32::try_from(l).ok());
        }
        // The next entry starts at the next byte with bit 7 set.
        at += 1;
        while at < table.len() && table[at] & 0x80 == 0 {
            at += 1;
        }
    }
    None
}

/// The location table's varint at `at`: 6-bit groups, least significant
/// first, 0x40 set on every group but the last.
fn varint(table: &[u8], mut at: usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let b = *table.get(at)?;
        if shift > 60 {
            return None;
        }
        v |= u64::from(b & 63) << shift;
        if b & 64 == 0 {
            return Some(v);
        }
        shift += 6;
        at += 1;
    }
}

/// A signed varint: the low bit is the sign of the rest.
fn signed_varint(table: &[u8], at: usize) -> Option<i64> {
    let v = varint(table, at)?;
    let m = (v >> 1) as i64;
    Some(if v & 1 != 0 { -m } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_310_table_adds_deltas_up_to_the_instruction() {
        // 4 bytes at +0 lines (line 10), 6 bytes at +2 (12), 2 bytes without
        // a line, then 4 bytes at -1 (11).
        let t = [4, 0, 6, 2, 2, 0x80, 4, 0xff];
        let at = |lasti| line_of(&t, 0x030a_0000, 10, lasti);
        assert_eq!(at(0), Some(10));
        assert_eq!(at(1), Some(10));
        assert_eq!(at(2), Some(12));
        assert_eq!(at(4), Some(12));
        assert_eq!(at(5), None);
        assert_eq!(at(6), Some(11));
        assert_eq!(at(8), None, "past the table");
        assert_eq!(at(-1), Some(10), "not started: the first line");
    }

    #[test]
    fn the_location_table_follows_each_form() {
        let t = [
            // no columns (13), 2 units, line +3: 13
            0x80 | 13 << 3 | 1,
            3 << 1,
            // short form (0), 1 unit: same line
            0x80,
            0x05,
            // one-line form +2 (12), 1 unit: 15
            0x80 | 12 << 3,
            1,
            2,
            // long form (14), 3 units, line -4 (svarint 9): 11
            0x80 | 14 << 3 | 2,
            9,
            0,
            1,
            1,
            // no location (15), 1 unit
            0x80 | 15 << 3,
        ];
        let at = |lasti| line_of(&t, 0x030b_0000, 10, lasti);
        assert_eq!(at(0), Some(13));
        assert_eq!(at(1), Some(13));
        assert_eq!(at(2), Some(13));
        assert_eq!(at(3), Some(15));
        assert_eq!(at(4), Some(11));
        assert_eq!(at(6), Some(11));
        assert_eq!(at(7), None);
        assert_eq!(at(8), None);
    }

    #[test]
    fn hostile_tables_end_without_a_line() {
        // A varint that never ends, a continuation byte first, a huge line.
        assert_eq!(
            line_of(&[0x80 | 13 << 3, 0x7f, 0x7f], 0x030c_0000, 1, 0),
            None
        );
        assert_eq!(line_of(&[0x05, 0x80], 0x030c_0000, 1, 0), None);
        let huge = [0x80 | 13 << 3, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x0f];
        assert_eq!(line_of(&huge, 0x030c_0000, i32::MAX, 0), None);
        assert_eq!(line_of(&[], 0x030a_0000, 1, 3), None);
    }
}
