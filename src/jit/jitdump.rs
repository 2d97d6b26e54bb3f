//! perf's jitdump files (`jit-PID.dump`, tools/perf/util/jitdump.h): a
//! binary header, then records; `JIT_CODE_LOAD` names code at an address,
//! `JIT_CODE_MOVE` moves it. Both are read here; the code bytes, debug and
//! unwinding records are skipped.
//!
//! The file belongs to a user bprof does not trust: it is read with `pread`
//! from an already checked descriptor, record by record, every size is
//! checked against the file and the cap, names are cut to
//! [`super::perfmap::MAX_NAME`].

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::perfmap::{self, MAX_NAME};

/// "JiTD" as a native-endian u32 (`JITHEADER_MAGIC`).
pub const MAGIC: u32 = 0x4A69_5444;
const HEADER_SIZE: u64 = 40;
const PREFIX_SIZE: u64 = 16;
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_CLOSE: u32 = 3;
/// prefix, pid, tid, vma, code_addr, code_size, code_index; then the name.
const LOAD_FIXED: u64 = 56;
/// prefix, pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
const MOVE_SIZE: u64 = 64;

/// Why a jitdump could not be used at all.
#[derive(Debug)]
pub enum Bad {
    /// Reading failed.
    Io(io::Error),
    /// Not a jitdump (magic), or one written with the other byte order.
    Header(&'static str),
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::Io(e) => write!(f, "{e}"),
            Bad::Header(what) => write!(f, "not a jitdump: {what}"),
        }
    }
}

/// What a pass over a jitdump found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpStats {
    /// Code loads named.
    pub loads: u64,
    /// Code moves applied.
    pub moves: u64,
    /// The records ended with a truncated or inconsistent one.
    pub truncated: bool,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap_or_default())
}

/// Reads exactly `buf.len()` bytes at `pos`, `false` at end of file.
fn read_exact_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<bool> {
    match file.read_exact_at(buf, pos) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// One piece of JIT code.
struct Code {
    addr: u64,
    size: u64,
    name: String,
}

/// Reads the jitdump in the first `limit` bytes of `file` and names the
/// addresses of `ips` (sorted) its code covers, where it ended up.
// Long on purpose: one record loop with a case per record type, as the jitdump format lists them.
pub fn scan(
    file: &File,
    limit: u64,
    ips: &[u64],
    out: &mut HashMap<u64, String>,
) -> Result<DumpStats, Bad> {
    let mut header = [0u8; HEADER_SIZE as usize];
    if !read_exact_at(file, &mut header, 0).map_err(Bad::Io)? || limit < HEADER_SIZE {
        return Err(Bad::Header("shorter than its header"));
    }
    match u32_at(&header, 0) {
        MAGIC => {}
        m if m.swap_bytes() == MAGIC => return Err(Bad::Header("other byte order")),
        _ => return Err(Bad::Header("bad magic")),
    }
    let header_size = u32_at(&header, 8) as u64;
    if header_size < HEADER_SIZE {
        return Err(Bad::Header("header size too small"));
    }

    let mut stats = DumpStats::default();
    // Code by code_index, in load order: a move keeps the name.
    let mut code: Vec<Code> = Vec::new();
    let mut by_index: HashMap<u64, usize> = HashMap::new();
    let mut rec = vec![0u8; (LOAD_FIXED as usize) + MAX_NAME + 1];
    let mut pos = header_size;
    while pos.saturating_add(PREFIX_SIZE) <= limit {
        let mut prefix = [0u8; PREFIX_SIZE as usize];
        if !read_exact_at(file, &mut prefix, pos).map_err(Bad::Io)? {
            break;
        }
        let (id, size) = (u32_at(&prefix, 0), u32_at(&prefix, 4) as u64);
        if size < PREFIX_SIZE || pos.saturating_add(size) > limit {
            stats.truncated = true;
            break;
        }
        match id {
            JIT_CODE_LOAD if size >= LOAD_FIXED => {
                // The fixed part and at most MAX_NAME + 1 name bytes.
                let want = size.min(rec.len() as u64) as usize;
                if !read_exact_at(file, &mut rec[..want], pos).map_err(Bad::Io)? {
                    stats.truncated = true;
                    break;
                }
                let raw = &rec[LOAD_FIXED as usize..want];
                let name = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
                let c = Code {
                    addr: u64_at(&rec, 32),
                    size: u64_at(&rec, 40),
                    name: perfmap::cut(name),
                };
                by_index.insert(u64_at(&rec, 48), code.len());
                code.push(c);
                stats.loads += 1;
            }
            JIT_CODE_MOVE if size >= MOVE_SIZE => {
                let buf = &mut rec[..MOVE_SIZE as usize];
                if !read_exact_at(file, buf, pos).map_err(Bad::Io)? {
                    stats.truncated = true;
                    break;
                }
                let (new_addr, size, index) = (u64_at(buf, 40), u64_at(buf, 48), u64_at(buf, 56));
                if let Some(&i) = by_index.get(&index) {
                    code[i].addr = new_addr;
                    code[i].size = size;
                    stats.moves += 1;
                }
            }
            JIT_CODE_CLOSE => break,
            // Debug info, unwinding info and future records: skipped.
            _ => {}
        }
        pos += size;
    }
    for c in &code {
        if c.size > 0 && !c.name.is_empty() {
            perfmap::assign(ips, c.addr, c.size, &c.name, out);
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let mut h = Vec::new();
        for v in [MAGIC, 1, HEADER_SIZE as u32, 62, 0, 42] {
            h.extend_from_slice(&v.to_ne_bytes());
        }
        h.extend_from_slice(&[0u8; 16]);
        h
    }

    fn load(addr: u64, size: u64, index: u64, name: &[u8], code: usize) -> Vec<u8> {
        let total = LOAD_FIXED as usize + name.len() + 1 + code;
        let mut r = Vec::new();
        r.extend_from_slice(&JIT_CODE_LOAD.to_ne_bytes());
        r.extend_from_slice(&(total as u32).to_ne_bytes());
        r.extend_from_slice(&0u64.to_ne_bytes());
        r.extend_from_slice(&[0u8; 8]); // pid, tid
        for v in [addr, addr, size, index] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r.extend_from_slice(name);
        r.push(0);
        r.extend(std::iter::repeat_n(0xc3, code));
        r
    }

    fn mv(old: u64, new: u64, size: u64, index: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&JIT_CODE_MOVE.to_ne_bytes());
        r.extend_from_slice(&(MOVE_SIZE as u32).to_ne_bytes());
        r.extend_from_slice(&[0u8; 16]); // timestamp, pid, tid
        for v in [old, old, new, size, index] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r
    }

    fn run(bytes: &[u8], ips: &[u64]) -> (Result<DumpStats, Bad>, HashMap<u64, String>) {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("bprof-jitdump-{}-{n}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        let f = File::open(&p).unwrap();
        let mut out = HashMap::new();
        let r = scan(&f, bytes.len() as u64, ips, &mut out);
        let _ = std::fs::remove_file(&p);
        (r, out)
    }

    #[test]
    fn loads_and_moves_name_code() {
        let mut d = header();
        d.extend(load(0x1000, 0x10, 1, b"a", 16));
        d.extend(load(0x2000, 0x10, 2, b"b", 16));
        d.extend(mv(0x2000, 0x3000, 0x20, 2));
        d.extend(mv(0x9000, 0x9100, 0x20, 77)); // unknown index: ignored
        let (r, out) = run(&d, &[0x1008, 0x2008, 0x3018, 0x9100]);
        let st = r.unwrap();
        assert_eq!((st.loads, st.moves, st.truncated), (2, 1, false));
        assert_eq!(out.get(&0x1008).map(String::as_str), Some("a"));
        assert_eq!(out.get(&0x3018).map(String::as_str), Some("b"));
        assert_eq!(out.get(&0x2008), None);
        assert_eq!(out.get(&0x9100), None);
    }

    #[test]
    fn malformed_dumps_do_not_panic() {
        let (r, _) = run(b"short", &[1]);
        assert!(matches!(r, Err(Bad::Header(_))));
        let mut swapped = header();
        swapped[..4].copy_from_slice(&MAGIC.to_be_bytes());
        if cfg!(target_endian = "little") {
            assert!(matches!(run(&swapped, &[1]).0, Err(Bad::Header(_))));
        }
        // A record claiming more bytes than the file has, one with a size
        // below its prefix, and a name without its NUL.
        let mut d = header();
        d.extend(load(0x1000, 0x10, 1, b"ok", 0));
        let mut bad = load(0x2000, 0x10, 2, b"cut", 0);
        bad[4..8].copy_from_slice(&1000u32.to_ne_bytes());
        d.extend(bad);
        let (r, out) = run(&d, &[0x1000, 0x2000]);
        assert!(r.unwrap().truncated);
        assert_eq!(out.len(), 1);
        let mut d = header();
        let mut tiny = load(0x1000, 0x10, 1, b"x", 0);
        tiny[4..8].copy_from_slice(&3u32.to_ne_bytes());
        d.extend(tiny);
        assert!(run(&d, &[0x1000]).0.unwrap().truncated);
        let mut d = header();
        let mut long = load(0x1000, 0x10, 1, &vec![b'n'; MAX_NAME * 2], 0);
        long.pop(); // no NUL: the name runs to the record's end
        let n = long.len() as u32;
        long[4..8].copy_from_slice(&n.to_ne_bytes());
        d.extend(long);
        let (r, out) = run(&d, &[0x1000]);
        assert_eq!(r.unwrap().loads, 1);
        assert_eq!(out[&0x1000].len(), MAX_NAME);
    }

    proptest::proptest! {
        #[test]
        fn any_records_after_a_valid_header_read_without_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            ip in proptest::prelude::any::<u64>(),
        ) {
            let mut d = header();
            d.extend(body);
            let (r, out) = run(&d, &[ip]);
            proptest::prop_assert!(r.is_ok());
            proptest::prop_assert!(out.len() <= 1);
        }

        #[test]
        fn records_of_any_id_and_size_read_without_panic(
            recs in proptest::collection::vec(
                (0u32..6, 0u32..160, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160)),
                0..12,
            ),
            ip in 0u64..0x400,
        ) {
            let mut d = header();
            for (id, size, fill) in recs {
                d.extend_from_slice(&id.to_ne_bytes());
                d.extend_from_slice(&size.to_ne_bytes());
                d.extend(fill);
            }
            let (r, out) = run(&d, &[ip]);
            proptest::prop_assert!(r.is_ok());
            proptest::prop_assert!(out.values().all(|n| n.len() <= MAX_NAME));
        }
    }
}
