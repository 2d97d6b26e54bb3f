//! No input can abort bprof: crafted and mutated ELF files cost their own
//! frames, never the profile. The mutation run is in-process on purpose: an
//! abort (an allocation of a size the file claims) kills this test binary,
//! which fails the run; a panic inside the parser is caught per file (the
//! fence that keeps a profile going), counted and reported here, and fails
//! the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

use object::read::elf::{FileHeader, SectionHeader};

/// work631 with zlib-compressed DWARF sections.
fn compressed_fixture(dir: &Path) -> PathBuf {
    let out = dir.join("fx_wz");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/work631.c");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-gz=zlib", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// File offsets of the compression headers (Elf64_Chdr) of compressed
/// sections, and of every section header.
fn offsets(data: &[u8]) -> (Vec<usize>, Vec<usize>) {
    let h = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let e = h.endian().unwrap();
    let shoff = h.e_shoff(e) as usize;
    let shentsize = h.e_shentsize(e) as usize;
    let sections = h.sections(e, data).unwrap();
    let mut chdrs = Vec::new();
    let mut shdrs = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        shdrs.push(shoff + i * shentsize);
        if s.sh_flags(e) & u64::from(object::elf::SHF_COMPRESSED) != 0 {
            chdrs.push(s.sh_offset(e) as usize);
        }
    }
    (chdrs, shdrs)
}

#[test]
fn hostile_a_compressed_section_claiming_2_62_bytes_costs_only_its_frames() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("mutants_crafted");
    let bin = compressed_fixture(&dir);
    let mut data = std::fs::read(&bin).unwrap();
    let (chdrs, _) = offsets(&data);
    assert!(!chdrs.is_empty(), "no compressed section");
    // Elf64_Chdr { ch_type: u32, ch_reserved: u32, ch_size: u64, ... }
    for c in chdrs {
        data[c + 8..c + 16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    }
    let crafted = dir.join("fx_crafted");
    std::fs::write(&crafted, &data).unwrap();
    let mut perm = std::fs::metadata(&crafted).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&crafted, perm).unwrap();

    // The program runs (its debug sections are never loaded); bprof must
    // finish its profile, exit 0, say which sections it skipped, and name
    // the functions from the symbol table as perf does. Fixed work (40
    // rounds): as many samples on a busy machine.
    let out = run(Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(["--no-counts", "-v", "-F", "499", "-f", "--"])
        .arg(&crafted)
        .args(["0", "40"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("without its malformed sections"), "{err}");
    assert!(
        err.contains("(.debug_info) claims 4611686018427387904 bytes"),
        "{err}"
    );
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    let all = total_for(&lines, "fx_crafted");
    let heavy = with_frame(&lines, "fx_crafted", "heavy");
    let medium = with_frame(&lines, "fx_crafted", "medium");
    let light = with_frame(&lines, "fx_crafted", "light");
    assert!(all > 200, "{lines:?}");
    assert!(heavy + medium + light > all * 8 / 10, "{lines:?}");
    // Nothing of the binary is left as module+offset...
    assert!(
        !lines
            .iter()
            .any(|l| l.frames.iter().any(|f| f.starts_with("fx_crafted+0x"))),
        "{lines:?}"
    );
    // ... and perf, on the same file, gives the same names in the same
    // shares.
    let perf = perf_shares(&crafted, "1", &dir);
    let share = |n| pct(n, heavy + medium + light);
    for (f, n) in [("heavy", heavy), ("medium", medium)] {
        let p = perf
            .get(f)
            .copied()
            .unwrap_or_else(|| panic!("perf has no {f}: {perf:?}"));
        assert!((p - share(n)).abs() < 12.0, "{f}: {perf:?} vs {lines:?}");
    }
}

#[test]
fn hostile_thousands_of_mutants_never_abort_or_panic() {
    // No BPF, but seconds of CPU: not beside a test that measures.
    let _g = parallel();
    let dir = scratch("mutants_run");
    let bin = compressed_fixture(&dir);
    let data = std::fs::read(&bin).unwrap();
    let (chdrs, shdrs) = offsets(&data);
    let seed: u64 = 0x5eed_b9f0_2026_1124;
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let offsets_to_name = [0x1100u64, 0x1150, 0x11b5, 0x1200];
    let mut refused = 0;
    for i in 0..3000u32 {
        let mut m = data.clone();
        for _ in 0..1 + next() % 4 {
            let r = next();
            // Mostly the headers blazesym trusts: ELF header, section
            // headers, compression headers; sometimes anywhere.
            let at = match r % 4 {
                0 => (r >> 8) as usize % 64,
                1 => shdrs[(r >> 8) as usize % shdrs.len()] + (r >> 24) as usize % 64,
                2 => chdrs[(r >> 8) as usize % chdrs.len()] + (r >> 24) as usize % 24,
                _ => (r >> 8) as usize % m.len(),
            };
            if at < m.len() {
                m[at] = match next() % 3 {
                    0 => 0xff,
                    1 => 0,
                    _ => (r >> 40) as u8,
                };
            }
        }
        let path = dir.join(format!("m{i}"));
        std::fs::write(&path, &m).unwrap();
        // A fresh symbolizer: blazesym caches parsed files.
        let sym = bprof::symbolize::symbolizer();
        let names = bprof::symbolize::symbolize_file(
            &sym,
            &path,
            blazesym::symbolize::Input::FileOffset(&offsets_to_name),
        );
        if names.is_empty() {
            refused += 1;
        }
        let _ = std::fs::remove_file(&path);
    }
    // The fence's record of why each file was refused: a panic is not a
    // refusal by the checks.
    let panicked: Vec<(std::path::PathBuf, String)> = bprof::symbolize::refused_files()
        .into_iter()
        .filter(|(p, why)| p.starts_with(&dir) && why.starts_with("the ELF parser failed"))
        .collect();
    eprintln!(
        "seed {seed:#x}: 3000 mutants, {refused} refused, {} parser panics, none aborted",
        panicked.len()
    );
    assert!(
        refused > 0,
        "no mutant was refused: the mutations did nothing"
    );
    assert!(
        panicked.is_empty(),
        "the parser panicked on {} mutants (seed {seed:#x}), first: {:?}",
        panicked.len(),
        panicked.first()
    );
}

/// File offset of symbol `name` of the ELF image `data` (its .symtab, its
/// address through the PT_LOAD headers).
fn symbol_offset(data: &[u8], name: &str) -> u64 {
    use object::read::elf::{ProgramHeader, Sym};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let e = h.endian().unwrap();
    let sections = h.sections(e, data).unwrap();
    let syms = sections.symbols(e, data, object::elf::SHT_SYMTAB).unwrap();
    let addr = syms
        .iter()
        .find(|s| syms.symbol_name(e, s).ok() == Some(name.as_bytes()))
        .unwrap_or_else(|| panic!("no symbol {name}"))
        .st_value(e);
    h.program_headers(e, data)
        .unwrap()
        .iter()
        .filter(|p| p.p_type(e) == object::elf::PT_LOAD)
        .find(|p| addr >= p.p_vaddr(e) && addr < p.p_vaddr(e) + p.p_filesz(e))
        .map(|p| addr - p.p_vaddr(e) + p.p_offset(e))
        .expect("a segment")
}

/// A malformed symbol table costs that table: the dynamic symbols still
/// name the functions they hold.
#[test]
fn hostile_a_malformed_symbol_table_costs_that_table_only() {
    let _g = exclusive();
    let dir = scratch("mutants_symtab");
    let src = dir.join("t.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) int exported_fn(int x) { return x * 3 + 1; }\n\
         __attribute__((noinline)) static int local_only(int x) { return exported_fn(x) + 2; }\n\
         int main(int c, char **v) { (void)v; return local_only(c); }\n",
    )
    .unwrap();
    let bin = dir.join("t");
    assert!(Command::new("gcc")
        .args(["-O1", "-rdynamic", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let data = std::fs::read(&bin).unwrap();
    let offs = [
        symbol_offset(&data, "exported_fn"),
        symbol_offset(&data, "local_only"),
    ];
    let names = |path: &Path| -> Vec<String> {
        let sym = bprof::symbolize::symbolizer();
        bprof::symbolize::symbolize_file(&sym, path, blazesym::symbolize::Input::FileOffset(&offs))
            .into_iter()
            .map(|s| match s {
                blazesym::symbolize::Symbolized::Sym(s) => s.name.to_string(),
                _ => String::new(),
            })
            .collect()
    };
    assert_eq!(names(&bin), ["exported_fn", "local_only"]);
    // .symtab's entry size made one no table can have.
    let h = object::elf::FileHeader64::<object::Endianness>::parse(&*data).unwrap();
    let e = h.endian().unwrap();
    let (shoff, shentsize) = (h.e_shoff(e) as usize, h.e_shentsize(e) as usize);
    let symtab = h
        .sections(e, &*data)
        .unwrap()
        .iter()
        .position(|s| s.sh_type(e) == object::elf::SHT_SYMTAB)
        .unwrap();
    let mut m = data.clone();
    let at = shoff + symtab * shentsize + 56;
    m[at..at + 8].copy_from_slice(&23u64.to_le_bytes());
    let mutant = dir.join("t-mutant");
    std::fs::write(&mutant, &m).unwrap();
    let got = names(&mutant);
    // Named from .dynsym; the static function was only in the table lost.
    assert_eq!(got[0], "exported_fn", "{got:?}");
    assert_ne!(got[1], "local_only", "{got:?}");
}
