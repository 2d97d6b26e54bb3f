//! Symbolization speed: unique frames per second, cold (page cache dropped)
//! and warm, through the same path a profile takes (build ID + file offset
//! → ELF/DWARF via blazesym). The frames are 100,000 distinct code offsets
//! spread over bprof's own executable, a large Rust binary with DWARF.
//! Run as root (dropping the page cache needs it): `cargo bench --bench symbolize`.

use std::time::Instant;

use bprof::collect::sideband::MmapIndex;
use bprof::process::maps::Mapping;
use bprof::stacks::{RawStack, UserFrame};
use bprof::symbolize as symbols;
use bprof::symbolize::buildid;

const FRAMES: usize = 100_000;
/// Frames per synthetic stack: a realistic depth.
const DEPTH: usize = 20;

/// (file offset, size) of the executable PT_LOAD segment, from the ELF
/// program headers (64-bit little-endian only: the machines we run on).
fn text_segment(bytes: &[u8]) -> (u64, u64) {
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(ph) == 1 && u32_at(ph + 4) & 1 != 0)
        .map(|ph| (u64_at(ph + 8), u64_at(ph + 32)))
        .expect("an executable PT_LOAD segment")
}

fn main() {
    let exe = std::env::var_os("BPROF_BENCH_ELF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/bprof")
        });
    let bytes = std::fs::read(&exe)
        .unwrap_or_else(|e| panic!("{}: {e} (run cargo build first)", exe.display()));
    let id = buildid::read(&exe).expect("the binary has a build ID");
    let (off, size) = text_segment(&bytes);
    let step = (size / FRAMES as u64).max(1);
    let frames: Vec<UserFrame> = (0..FRAMES as u64)
        .map(|i| UserFrame::File {
            build_id: id,
            offset: off + i * step + 1,
        })
        .collect();
    let raw: Vec<RawStack> = frames
        .chunks(DEPTH)
        .enumerate()
        .map(|(i, chunk)| RawStack {
            tgid: 1_000_000 + i as u32,
            cgroup: 0,
            tid: 1_000_000 + i as u32,
            comm: "bench".into(),
            kernel: Vec::new(),
            user: chunk.to_vec(),
            kernel_lost: false,
            user_lost: false,
            off_cpu: false,
            count: 1,
            python: Vec::new(),
        })
        .collect();
    let mut index = MmapIndex::default();
    index.by_build_id.entry(id).or_default().insert(Mapping {
        pid: 1,
        path: exe.clone(),
    });

    println!(
        "symbolizing {FRAMES} unique frames of {} ({} MiB of text)",
        exe.display(),
        size >> 20
    );
    for pass in ["cold", "warm", "warm"] {
        if pass == "cold" {
            // Best effort: needs root; otherwise "cold" is only a fresh symbolizer.
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
        }
        let t = Instant::now();
        let (stacks, stats) = symbols::symbolize(&symbols::symbolizer(), &raw, &index);
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(stacks.len(), raw.len());
        println!(
            "{pass:>5}: {:>7} frames in {:>6.3} s = {:>9.0} frames/s ({} unknown)",
            stats.unique_frames,
            secs,
            stats.unique_frames as f64 / secs,
            stats.unknown_frames
        );
    }
}
