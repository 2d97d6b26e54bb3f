use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// Where the synthetic tables are mapped.
const VADDR: u64 = 0x10000;
/// Their text.
const TEXT: u64 = 0x40_0000;

fn uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A pc-value table: (value, bytes of code it holds for) from the entry on.
fn pcvalue_table(runs: &[(i32, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut val = -1i32;
    for &(v, len) in runs {
        let d = v - val;
        uvarint(&mut out, ((d << 1) ^ (d >> 31)) as u32);
        uvarint(&mut out, len);
        val = v;
    }
    out.push(0);
    out
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// A table as the linker of `version` lays it out: `main.outer` at TEXT
/// (0x20 bytes: line 10 then 20, `main.inner` inlined over 8 bytes at 0x8,
/// called from 0x10) and `main.inner` at TEXT+0x20 (0x20 bytes, line 30),
/// followed by the inline tree and (1.18+) the module data.
fn synth(version: Version) -> (Vec<u8>, Layout) {
    let (magic, nwords) = match version {
        Version::Go116 => (MAGIC_116, 7),
        Version::Go118 => (MAGIC_118, 8),
        Version::Go120 => (MAGIC_120, 8),
    };
    let header_len = 8 + 8 * nwords;
    let funcnames = b"\0main.outer\0main.inner\0".to_vec();
    let (outer_name, inner_name) = (1u32, 12u32);
    let mut cutab = Vec::new();
    put_u32(&mut cutab, 1);
    let filetab = b"\0/src/a.go\0".to_vec();
    let mut pctab = vec![0u8];
    let mut add = |t: Vec<u8>| {
        let off = pctab.len() as u32;
        pctab.extend(t);
        off
    };
    let outer_line = add(pcvalue_table(&[(10, 0x10), (20, 0x10)]));
    let outer_file = add(pcvalue_table(&[(0, 0x20)]));
    let outer_inl = add(pcvalue_table(&[(-1, 0x8), (0, 0x8), (-1, 0x10)]));
    let inner_line = add(pcvalue_table(&[(30, 0x20)]));
    let inner_file = add(pcvalue_table(&[(0, 0x20)]));

    let funcname_off = header_len as u64;
    let cutab_off = funcname_off + funcnames.len() as u64;
    let filetab_off = cutab_off + cutab.len() as u64;
    let pctab_off = filetab_off + filetab.len() as u64;
    let pcln_off = (pctab_off + pctab.len() as u64).next_multiple_of(8);

    let entry_size = if version == Version::Go116 { 16 } else { 8 };
    let functab_len = 3 * entry_size;
    // _funcs after the function table, 8-aligned.
    let sz0 = if version == Version::Go116 { 8 } else { 4 };
    let fixed = sz0 + if version == Version::Go120 { 40 } else { 36 };
    let npcdata = 3u32;
    let funcdata_len = if version == Version::Go116 {
        4 * 8
    } else {
        4 * 4
    };
    let func_len = (fixed + 4 * npcdata as usize).next_multiple_of(8) + funcdata_len;
    let f0 = functab_len;
    let f1 = (f0 + func_len).next_multiple_of(8);
    let pcln_len = f1 + func_len;
    let tree_off = (pcln_off + pcln_len as u64).next_multiple_of(8);
    let tree_vaddr = VADDR + tree_off;
    let gofunc = tree_vaddr - 0x40;

    let mut pcln = Vec::new();
    let entries = [(TEXT, f0), (TEXT + 0x20, f1), (TEXT + 0x40, 0)];
    for (e, fo) in entries {
        match version {
            Version::Go116 => {
                put_u64(&mut pcln, e);
                put_u64(&mut pcln, fo as u64);
            }
            _ => {
                put_u32(&mut pcln, (e - TEXT) as u32);
                put_u32(&mut pcln, fo as u32);
            }
        }
    }
    let func =
        |pcln: &mut Vec<u8>, entry: u64, name: u32, line: u32, file: u32, inl: Option<u32>| {
            let start = pcln.len();
            match version {
                Version::Go116 => put_u64(pcln, entry),
                _ => put_u32(pcln, (entry - TEXT) as u32),
            }
            for v in [name, 0, 0, 0, file, line, npcdata, 0] {
                put_u32(pcln, v);
            }
            if version == Version::Go120 {
                put_u32(pcln, 1);
            }
            // funcID, flag, pad, nfuncdata.
            pcln.extend_from_slice(&[0, 0, 0, 4]);
            for v in [0, 0, inl.unwrap_or(0)] {
                put_u32(pcln, v);
            }
            match version {
                Version::Go116 => {
                    let abs = VADDR + pcln_off + pcln.len() as u64;
                    let pad = abs.next_multiple_of(8) - abs;
                    pcln.extend(std::iter::repeat_n(0, pad as usize));
                    for v in [0, 0, 0, if inl.is_some() { tree_vaddr } else { 0 }] {
                        put_u64(pcln, v);
                    }
                }
                _ => {
                    for v in [u32::MAX, u32::MAX, u32::MAX] {
                        put_u32(pcln, v);
                    }
                    put_u32(
                        pcln,
                        if inl.is_some() {
                            (tree_vaddr - gofunc) as u32
                        } else {
                            u32::MAX
                        },
                    );
                }
            }
            assert!(pcln.len() - start <= func_len);
            pcln.resize(start + func_len, 0);
        };
    pcln.resize(f0, 0);
    func(
        &mut pcln,
        TEXT,
        outer_name,
        outer_line,
        outer_file,
        Some(outer_inl),
    );
    pcln.resize(f1, 0);
    func(
        &mut pcln,
        TEXT + 0x20,
        inner_name,
        inner_line,
        inner_file,
        None,
    );

    let mut out = Vec::new();
    put_u32(&mut out, magic);
    out.extend_from_slice(&[0, 0, 1, 8]);
    put_u64(&mut out, 2);
    put_u64(&mut out, 1);
    if version != Version::Go116 {
        put_u64(&mut out, TEXT);
    }
    for off in [funcname_off, cutab_off, filetab_off, pctab_off, pcln_off] {
        put_u64(&mut out, off);
    }
    out.extend(funcnames);
    out.extend(cutab);
    out.extend(filetab);
    out.extend(pctab);
    out.resize(pcln_off as usize, 0);
    out.extend(pcln);
    let size = out.len() as u64;
    // The inline tree: main.inner called from outer+0x10.
    out.resize(tree_off as usize, 0);
    match version {
        Version::Go120 => {
            put_u32(&mut out, 0);
            put_u32(&mut out, inner_name);
            put_u32(&mut out, 0x10);
            put_u32(&mut out, 1);
        }
        _ => {
            out.extend_from_slice(&[0xff, 0xff, 0, 0]);
            put_u32(&mut out, 0);
            put_u32(&mut out, 20);
            put_u32(&mut out, inner_name);
            put_u32(&mut out, 0x10);
        }
    }
    // The module data, where 1.18+ finds go:func.*.
    let md_off = out.len().next_multiple_of(8) as u64;
    out.resize(md_off as usize, 0);
    let mut md = vec![0u64; 42];
    md[0] = VADDR;
    md[1] = VADDR + funcname_off;
    md[4] = VADDR + cutab_off;
    md[7] = VADDR + filetab_off;
    md[10] = VADDR + pctab_off;
    md[13] = VADDR + pcln_off;
    md[16] = VADDR + pcln_off;
    md[17] = 3;
    md[20] = TEXT;
    md[22] = TEXT;
    md[if version == Version::Go120 { 40 } else { 38 }] = gofunc;
    for w in md {
        put_u64(&mut out, w);
    }
    let len = out.len() as u64;
    let layout = Layout {
        offset: 0,
        vaddr: VADDR,
        size,
        text: TEXT,
        loads: vec![(VADDR, len, 0)],
        data: vec![(md_off, 42 * 8)],
    };
    (out, layout)
}

fn table(bytes: Vec<u8>, layout: Layout) -> Option<GoTable<Cursor<Vec<u8>>>> {
    GoTable::new(ReadCache::new(Cursor::new(bytes)), layout)
}

fn names(frames: &[GoFrame]) -> Vec<(&str, u32)> {
    frames.iter().map(|f| (f.name.as_str(), f.line)).collect()
}

#[test]
fn every_format_gives_names_lines_and_inlined_calls() {
    for version in [Version::Go116, Version::Go118, Version::Go120] {
        let (bytes, layout) = synth(version);
        let t = table(bytes, layout).unwrap_or_else(|| panic!("{version:?}"));
        assert_eq!(t.version(), version);
        let at = |pc| {
            t.frames(pc)
                .unwrap_or_else(|| panic!("{version:?} {pc:#x}"))
        };
        assert_eq!(names(&at(TEXT)), [("main.outer", 10)], "{version:?}");
        // Inlined: the callee at its line, then the caller at the call's.
        assert_eq!(
            names(&at(TEXT + 0xa)),
            [("main.inner", 10), ("main.outer", 20)],
            "{version:?}"
        );
        assert_eq!(names(&at(TEXT + 0x18)), [("main.outer", 20)], "{version:?}");
        assert_eq!(names(&at(TEXT + 0x3f)), [("main.inner", 30)], "{version:?}");
        assert_eq!(at(TEXT + 0x20)[0].file.as_deref(), Some("/src/a.go"));
        // Outside the text the table covers: nothing.
        assert!(t.frames(TEXT - 1).is_none() && t.frames(TEXT + 0x40).is_none());
    }
}

#[test]
fn without_module_data_1_18_tables_name_functions_but_not_inlined_calls() {
    let (bytes, mut layout) = synth(Version::Go120);
    layout.data.clear();
    let t = table(bytes, layout).unwrap();
    assert_eq!(names(&t.frames(TEXT + 0xa).unwrap()), [("main.outer", 10)]);
}

#[test]
fn other_magics_and_headers_are_not_tables() {
    let (mut bytes, layout) = synth(Version::Go120);
    bytes[0] = 0xfb; // Go 1.2-1.15
    assert!(table(bytes, layout.clone()).is_none());
    let (mut bytes, _) = synth(Version::Go120);
    bytes[7] = 4; // 32-bit
    assert!(table(bytes, layout.clone()).is_none());
    let (mut bytes, _) = synth(Version::Go120);
    bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes()); // nfunc
    assert!(table(bytes, layout).is_none());
}

proptest::proptest! {
    /// Hostile tables: any byte changed, the table cut anywhere, and the
    /// lookups never panic nor loop (they end within the bounds).
    #[test]
    fn corrupt_tables_never_panic(
        version in 0usize..3,
        edits in proptest::collection::vec((0usize..1024, proptest::num::u8::ANY), 1..16),
        cut in 0usize..2048,
        pcs in proptest::collection::vec(0u64..0x60, 1..8),
    ) {
        let version = [Version::Go116, Version::Go118, Version::Go120][version];
        let (mut bytes, mut layout) = synth(version);
        for (at, b) in edits {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        if cut < bytes.len() {
            bytes.truncate(cut);
            layout.size = layout.size.min(cut as u64);
        }
        if let Some(t) = table(bytes, layout) {
            for pc in pcs {
                let _ = t.frames(TEXT - 0x10 + pc);
            }
        }
    }
}

/// A Go program with an inlined helper, built by the Go toolchain with its
/// symbols and with `-ldflags='-s -w'`, in a directory removed on drop.
struct GoBuild {
    dir: PathBuf,
}

impl Drop for GoBuild {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn go_build() -> GoBuild {
    let dir = std::env::temp_dir().join(format!("bprof-gopclntab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let build = GoBuild { dir };
    let src = build.dir.join("hot.go");
    std::fs::write(
        &src,
        "package main\n\nfunc mix(x uint64) uint64 {\n\tx ^= x << 13\n\tx ^= x >> 7\n\treturn x ^ x<<17\n}\n\n//go:noinline\nfunc hotLoop(n int) uint64 {\n\tvar acc uint64 = 1\n\tfor i := 0; i < n; i++ {\n\t\tacc = mix(acc + uint64(i))\n\t}\n\treturn acc\n}\n\nfunc main() { println(hotLoop(1000)) }\n",
    )
    .unwrap();
    for (out, flags) in [("full", ""), ("stripped", "-s -w")] {
        let mut cmd = Command::new("go");
        cmd.current_dir(&build.dir)
            .args(["build", "-o", out, "-ldflags", flags, "hot.go"])
            .env("GO111MODULE", "off");
        if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
            cmd.env("GOCACHE", build.dir.join("cache"));
        }
        let st = cmd.status().expect("run go build (golang-go)");
        assert!(st.success(), "go build {flags}");
    }
    build
}

/// `name` with what its outermost brackets hold written `...`.
fn brackets_elided(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in name.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[...");
                }
                depth += 1;
            }
            ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(']');
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// (address, name) of every function `go tool nm` lists in `bin`.
fn go_nm(bin: &Path) -> Vec<(u64, String)> {
    let out = Command::new("go")
        .args(["tool", "nm", "-n"])
        .arg(bin)
        .output()
        .expect("go tool nm");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let addr = u64::from_str_radix(w.next()?, 16).ok()?;
            (w.next()? == "T").then(|| (addr, w.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// The Go toolchain's own binaries, with and without their symbols: the
/// stripped one's table names every function as the symbols of the other
/// do, at the same addresses, and the inlined helper inside its caller.
#[test]
fn a_stripped_go_binary_is_named_as_its_symbols_name_it() {
    let build = go_build();
    let full = build.dir.join("full");
    let stripped = build.dir.join("stripped");
    let syms = go_nm(&full);
    assert!(syms.len() > 500, "{}", syms.len());
    let t = GoTable::open(std::fs::File::open(&stripped).unwrap()).expect("a Go table");
    let mut named = 0;
    for (addr, name) in &syms {
        if let Some(frames) = t.frames(*addr) {
            // The symbol table marks assembly functions' ABI (`.abi0`);
            // the runtime's table and its tracebacks do not.
            let name = name.strip_suffix(".abi0").unwrap_or(name);
            // It also writes what is in brackets (array sizes, type
            // parameters) as `...`.
            assert_eq!(
                brackets_elided(&frames.last().unwrap().name),
                brackets_elided(name),
                "{addr:#x}"
            );
            named += 1;
        }
    }
    // The few text symbols that are no functions (runtime.text, ...) aside.
    assert!(named * 100 >= syms.len() * 98, "{named} of {}", syms.len());
    // main.mix inlined into main.hotLoop somewhere in its code, at hot.go's
    // lines.
    let (start, _) = syms.iter().find(|(_, n)| n == "main.hotLoop").unwrap();
    let inlined = (*start..start + 0x100)
        .filter_map(|pc| t.frames(pc))
        .find(|f| f.len() == 2)
        .expect("an inlined call");
    assert_eq!(inlined[0].name, "main.mix");
    assert_eq!(inlined[1].name, "main.hotLoop");
    assert!((4..=6).contains(&inlined[0].line), "{inlined:?}");
    assert_eq!(inlined[1].line, 13, "{inlined:?}");
    assert!(inlined[0].file.as_deref().unwrap().ends_with("hot.go"));
    // And through file offsets, as frames are recorded.
    let off = *start - 0x400000;
    assert_eq!(
        t.frames_at_offset(off).unwrap().last().unwrap().name,
        "main.hotLoop"
    );
}
