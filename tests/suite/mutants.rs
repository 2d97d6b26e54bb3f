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
    // finish its profile, exit 0, and say it skipped the file. Fixed work
    // (40 rounds, about a CPU-second): as many samples on a busy machine.
    let out = run(Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(["--no-counts", "-v", "-F", "499", "-f", "--"])
        .arg(&crafted)
        .args(["0", "40"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("as malformed"), "{err}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let total: u64 = lines.iter().map(|l| l.count).sum();
    assert!(total > 300, "{lines:?}");
    assert!(
        with_frame(&lines, "fx_crafted", "fx_crafted+0x1") > 0
            || lines
                .iter()
                .any(|l| l.frames.iter().any(|f| f.starts_with("fx_crafted+0x"))),
        "{lines:?}"
    );
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
