//! perf map files (`/tmp/perf-PID.map`): the text format JITs (V8's
//! `--perf-basic-prof`, CPython's `-X perf`, ...) write to name their code,
//! one `START SIZE NAME` line per function, hex addresses.
//!
//! The file belongs to a user bprof does not trust: it is read as a stream
//! from an already checked descriptor, never all at once, lines longer than
//! a cap are skipped unbuffered, and only the names of addresses that were
//! actually sampled are kept, so memory stays small however large the map.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;

/// Longest name kept; longer names are cut (at a character boundary).
pub const MAX_NAME: usize = 4096;
/// Longest line parsed: two 64-bit hex numbers, separators and a name.
const MAX_LINE: usize = MAX_NAME + 64;

/// What one pass over a perf map found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScanStats {
    /// Well-formed entries.
    pub entries: u64,
    /// Lines that were not `START SIZE NAME` (or too long).
    pub malformed: u64,
}

/// Reads a file through `pread` from offset 0 up to `limit` bytes, so the
/// descriptor's own offset is never moved (it may be read again later).
pub struct At<'a> {
    file: &'a File,
    pos: u64,
    limit: u64,
}

impl<'a> At<'a> {
    /// A reader of at most `limit` bytes of `file`.
    pub fn new(file: &'a File, limit: u64) -> Self {
        At {
            file,
            pos: 0,
            limit,
        }
    }
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.limit.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

fn hex(s: &[u8]) -> Option<u64> {
    let s = s
        .strip_prefix(b"0x")
        .or_else(|| s.strip_prefix(b"0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

/// Parses one line (without its newline): `START SIZE NAME`, hex numbers
/// with or without `0x`, the name being the rest of the line. The name is
/// cut to [`MAX_NAME`] bytes.
pub fn parse_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.splitn(3, |&c| c == b' ' || c == b'\t');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?.trim_ascii();
    if name.is_empty() || size == 0 {
        return None;
    }
    Some((start, size, cut(name)))
}

/// Lossy UTF-8, at most [`MAX_NAME`] bytes, control characters replaced so a
/// name cannot break an output line.
pub fn cut(name: &[u8]) -> String {
    let mut s: String = String::from_utf8_lossy(&name[..name.len().min(MAX_NAME)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    while s.len() > MAX_NAME {
        s.pop();
    }
    s
}

/// Assigns `name` to every address of `ips` (sorted) in `[start, start+size)`.
pub fn assign(ips: &[u64], start: u64, size: u64, name: &str, out: &mut HashMap<u64, String>) {
    let end = start.saturating_add(size);
    let lo = ips.partition_point(|&a| a < start);
    for &ip in ips[lo..].iter().take_while(|&&a| a < end) {
        // A later line wins: JITs write a new line when they move or
        // replace code at an address.
        out.insert(ip, name.to_string());
    }
}

/// Streams a perf map, naming the addresses of `ips` (sorted) it covers.
pub fn scan(
    reader: impl Read,
    ips: &[u64],
    out: &mut HashMap<u64, String>,
) -> io::Result<ScanStats> {
    let mut r = BufReader::with_capacity(64 * 1024, reader);
    let mut stats = ScanStats::default();
    let mut line = Vec::with_capacity(256);
    let mut overlong = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (chunk, end_of_line) = match buf.iter().position(|&c| c == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !overlong {
            if line.len() + chunk.len() > MAX_LINE {
                overlong = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = end_of_line.unwrap_or(chunk.len());
        r.consume(used);
        if end_of_line.is_some() {
            finish_line(&line, overlong, ips, out, &mut stats);
            line.clear();
            overlong = false;
        }
    }
    if !line.is_empty() || overlong {
        finish_line(&line, overlong, ips, out, &mut stats);
    }
    Ok(stats)
}

fn finish_line(
    line: &[u8],
    overlong: bool,
    ips: &[u64],
    out: &mut HashMap<u64, String>,
    stats: &mut ScanStats,
) {
    if line.trim_ascii().is_empty() && !overlong {
        return;
    }
    match (!overlong).then(|| parse_line(line)).flatten() {
        Some((start, size, name)) => {
            stats.entries += 1;
            assign(ips, start, size, &name, out);
        }
        None => stats.malformed += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &[u8], ips: &[u64]) -> (HashMap<u64, String>, ScanStats) {
        let mut out = HashMap::new();
        let stats = scan(text, ips, &mut out).unwrap();
        (out, stats)
    }

    #[test]
    fn parses_perf_map_lines() {
        assert_eq!(
            parse_line(b"7f00 10 JS:*fib /x.js:1"),
            Some((0x7f00, 0x10, "JS:*fib /x.js:1".into()))
        );
        assert_eq!(
            parse_line(b"0x10 0x2 py::f:a.py\r"),
            Some((0x10, 2, "py::f:a.py".into()))
        );
        for bad in [
            &b""[..],
            b"zz 10 f",
            b"10 10",
            b"10 0 empty",
            b"10000000000000000 1 f",
            b"10 10   ",
        ] {
            assert_eq!(parse_line(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn names_only_covered_addresses_and_later_lines_win() {
        let map = b"100 10 a\n200 10 b\n\ngarbage\n100 8 a2\n";
        let (out, stats) = names(map, &[0x100, 0x108, 0x20f, 0x210, 0x300]);
        assert_eq!(out.get(&0x100).map(String::as_str), Some("a2"));
        assert_eq!(out.get(&0x108).map(String::as_str), Some("a"));
        assert_eq!(out.get(&0x20f).map(String::as_str), Some("b"));
        assert_eq!(out.get(&0x210), None);
        assert_eq!(out.get(&0x300), None);
        assert_eq!(
            stats,
            ScanStats {
                entries: 3,
                malformed: 1
            }
        );
    }

    #[test]
    fn overlong_lines_are_skipped_and_names_cut() {
        let mut map = b"100 10 ".to_vec();
        map.extend(std::iter::repeat_n(b'x', MAX_LINE * 3));
        map.extend_from_slice(b"\n200 10 ok\n300 10 ");
        map.extend(std::iter::repeat_n(b'y', MAX_NAME + 10));
        let (out, stats) = names(&map, &[0x100, 0x200]);
        assert_eq!(out.get(&0x100), None);
        assert_eq!(out.get(&0x200).map(String::as_str), Some("ok"));
        assert_eq!(stats.malformed, 1);
        assert_eq!(stats.entries, 2);
        assert_eq!(cut(&[b'y'; MAX_NAME + 10]).len(), MAX_NAME);
        // A multi-byte character at the cut is dropped, not split.
        let mut s = vec![b'a'; MAX_NAME - 1];
        s.extend_from_slice("é".as_bytes());
        assert_eq!(cut(&s).len(), MAX_NAME - 1);
        assert_eq!(cut(b"a\nb\x1b"), "a?b?");
    }

    #[test]
    fn reads_a_file_through_pread_within_the_limit() {
        let p = std::env::temp_dir().join(format!("bprof-perfmap-{}", std::process::id()));
        std::fs::write(&p, b"100 10 first\n200 10 second\n").unwrap();
        let f = File::open(&p).unwrap();
        let mut out = HashMap::new();
        // Only the first line fits in 13 bytes.
        scan(At::new(&f, 13), &[0x100, 0x200], &mut out).unwrap();
        assert_eq!(out.len(), 1);
        scan(At::new(&f, u64::MAX), &[0x100, 0x200], &mut out).unwrap();
        assert_eq!(out.len(), 2);
        let _ = std::fs::remove_file(&p);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000),
            ips in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..8),
        ) {
            let mut ips = ips;
            ips.sort_unstable();
            let mut out = HashMap::new();
            let st = scan(&text[..], &ips, &mut out).unwrap();
            proptest::prop_assert!(st.entries + st.malformed <= text.len() as u64 + 1);
            proptest::prop_assert!(out.values().all(|n| n.len() <= MAX_NAME));
        }
    }
}
