//! Unwind table build, one file at a time: rows, kernel memory (8 bytes a
//! row, its distinct rules 8 bytes each, the page index 8 bytes a 4 KiB
//! page), time and unsupported rows of each ELF file named, built as a
//! profile builds them (src/unwind/table.rs). Run by scripts/bench-unwind.sh:
//! `cargo bench --bench unwind_tables -- FILE...`.

use std::time::Instant;

use bprof::unwind_table as table;

fn main() {
    let files: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    println!("| file | MiB of ELF | rows | distinct rules | MiB of table | build ms (best of 3) | unsupported rows | gap rows |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for f in files {
        let data = match std::fs::read(&f) {
            Ok(d) => d,
            Err(e) => {
                println!("| {f} | {e} | | | | |");
                continue;
            }
        };
        let mut best = f64::MAX;
        let mut built = None;
        for _ in 0..3 {
            let t0 = Instant::now();
            let t = table::build(&data, 1 << 26);
            best = best.min(t0.elapsed().as_secs_f64() * 1000.0);
            built = Some(t);
        }
        let mib = |n: usize| n as f64 / (1 << 20) as f64;
        match built.expect("three builds") {
            Ok(t) => println!(
                "| {f} | {:.1} | {} | {} | {:.2} | {best:.0} | {} | {} |",
                mib(data.len()),
                t.rows.len(),
                rules(&t.rows),
                mib((t.rows.len() + rules(&t.rows) + table::page_index(&t.rows).1.len()) * 8),
                t.unsupported,
                t.rows.iter().filter(|r| r.cfa_type == 0).count()
            ),
            Err(e) => println!("| {f} | {:.1} | {e} | | | | |", mib(data.len())),
        }
    }
}

/// Distinct rules (stored once, shared by rows and files).
fn rules(rows: &[table::Row]) -> usize {
    rows.iter()
        .map(|r| (r.cfa_off, r.rbp_off, r.cfa_type, r.rbp_type))
        .collect::<std::collections::HashSet<_>>()
        .len()
}
