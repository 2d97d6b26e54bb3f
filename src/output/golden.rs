//! Golden-file tests of what users and scripts read: folded stacks, the
//! report and `bprof stat` output, from fixed data (no root, no kernel).
//! `BPROF_BLESS=1 cargo test --lib golden` rewrites tests/golden/ after an
//! intended change; review the diff.

use std::path::PathBuf;

use crate::bpf::counting::Reading;
use crate::events::counting::EventSpec;
use crate::output::folded::{self, FoldedOptions};
use crate::output::report;
use crate::output::stat::{write_lines, Format, Line};
use crate::symbolize::{FrameLine, Frames, Location, Module, Stack};

/// Whether to rewrite the golden files: `BPROF_BLESS` asks, and CI (`CI`
/// set) never may, or a wrong output would bless itself.
fn blessing(bless: Option<std::ffi::OsString>, ci: Option<std::ffi::OsString>) -> bool {
    match (bless, ci) {
        (Some(_), Some(_)) => {
            panic!("BPROF_BLESS is refused under CI: bless locally, review the diff")
        }
        (bless, _) => bless.is_some(),
    }
}

#[test]
fn bless_is_refused_under_ci() {
    assert!(!blessing(None, Some("true".into())));
    assert!(blessing(Some("1".into()), None));
    assert!(std::panic::catch_unwind(|| blessing(Some("1".into()), Some("true".into()))).is_err());
}

fn check(name: &str, actual: &[u8]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if blessing(std::env::var_os("BPROF_BLESS"), std::env::var_os("CI")) {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let want = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (BPROF_BLESS=1 creates it)", path.display()));
    assert_eq!(
        String::from_utf8_lossy(actual),
        String::from_utf8_lossy(&want),
        "{name} differs from its golden file"
    );
}

fn stack(comm: &str, tid: u32, kernel: &[&str], user: &[&str], count: u64) -> Stack {
    Stack {
        tgid: 100,
        tid,
        cgroup: 0,
        comm: comm.into(),
        kernel: kernel.iter().map(|&s| s.into()).collect(),
        user: user.iter().map(|&s| s.into()).collect(),
        kernel_lost: false,
        user_lost: false,
        off_cpu: false,
        count,
        // Folded and report output read the names only.
        kernel_locs: Vec::new(),
        user_locs: Vec::new(),
    }
}

/// Leaf-first frames, as the symbolizer produces them.
fn stacks() -> Vec<Stack> {
    let mut lost = stack("worker", 102, &[], &["spin", "main"], 3);
    lost.kernel_lost = true;
    let mut blocked = stack(
        "worker",
        101,
        &["schedule", "do_nanosleep"],
        &["nanosleep", "sleep_phase", "main"],
        2500,
    );
    blocked.off_cpu = true;
    vec![
        stack(
            "worker",
            101,
            &[],
            &["heavy", "main", "__libc_start_main"],
            631,
        ),
        stack(
            "worker",
            101,
            &["clear_page_erms", "do_page_fault"],
            &["memset", "light", "main", "__libc_start_main"],
            7,
        ),
        stack("worker", 102, &[], &["Vec<[u8; 8]>::push", "main"], 12),
        lost,
        blocked,
    ]
}

fn folded_text(opts: FoldedOptions) -> Vec<u8> {
    let mut out = Vec::new();
    folded::write(&mut out, &folded::lines(&stacks(), &opts)).unwrap();
    out
}

#[test]
fn golden_folded_plain() {
    let opts = FoldedOptions {
        kernel_stacks: true,
        user_stacks: true,
        ..Default::default()
    };
    check("folded-plain.txt", &folded_text(opts));
}

#[test]
fn golden_folded_delimited_annotated_wall() {
    let opts = FoldedOptions {
        delimiter: true,
        annotate_kernel: true,
        kernel_stacks: true,
        user_stacks: true,
        mark_off_cpu: true,
    };
    check("folded-delimited-annotated-wall.txt", &folded_text(opts));
}

#[test]
fn golden_report() {
    let mut out = Vec::new();
    report::write(&mut out, &stacks(), None, true).unwrap();
    check("report.txt", &out);
}

/// Stacks with their locations: a kernel, an executable and libc, one
/// inlined function, one frame no symbol names.
fn located() -> (Vec<Stack>, Frames) {
    let line = |n: &str| FrameLine {
        name: n.into(),
        system_name: n.into(),
        file: None,
        line: 0,
    };
    let file = |p: &str| Module::File {
        build_id: Some([7; 20]),
        key: None,
        go_build_id: None,
        path: Some(PathBuf::from(p)),
    };
    let mut frames = Frames {
        modules: vec![
            Module::Kernel,
            file("/usr/bin/worker"),
            file("/lib/libc.so.6"),
        ],
        ..Default::default()
    };
    // (names innermost first, module)
    let locs: &[(&[&str], u32)] = &[
        (&["clear_page_erms"], 0),   // 0
        (&["do_page_fault"], 0),     // 1
        (&["heavy"], 1),             // 2
        (&["mix", "medium"], 1),     // 3: mix inlined into medium
        (&["main"], 1),              // 4
        (&["__libc_start_main"], 2), // 5
        (&["libc.so.6+0x1234"], 2),  // 6: unknown
        (&["memset"], 2),            // 7
    ];
    for (names, m) in locs {
        frames.locations.push(Location {
            address: 0,
            module: Some(*m),
            lines: names.iter().map(|n| line(n)).collect(),
        });
    }
    frames.unknown.insert(6);
    let stack = |kernel: &[u32], user: &[u32], count| {
        let names = |ls: &[u32]| -> Vec<std::sync::Arc<str>> {
            ls.iter()
                .flat_map(|&l| frames.locations[l as usize].lines.iter())
                .map(|l| l.name.clone())
                .collect()
        };
        Stack {
            kernel: names(kernel),
            user: names(user),
            kernel_locs: kernel.to_vec(),
            user_locs: user.to_vec(),
            ..stack("worker", 101, &[], &[], count)
        }
    };
    let stacks = vec![
        stack(&[], &[2, 4, 5], 600),
        stack(&[], &[3, 4, 5], 300),
        stack(&[0, 1], &[7, 4, 5], 70),
        stack(&[], &[6, 4, 5], 30),
    ];
    (stacks, frames)
}

#[test]
fn golden_functions_table() {
    let (stacks, frames) = located();
    let opts = FoldedOptions {
        annotate_kernel: true,
        kernel_stacks: true,
        user_stacks: true,
        ..Default::default()
    };
    let rows = report::functions(&stacks, &frames, &opts);
    let mut out = Vec::new();
    report::write_table(&mut out, &rows, 1000, "samples", 8).unwrap();
    check("functions-table.txt", &out);
}

fn stat_text(format: &Format, prefix: Option<f64>, cgroup: Option<&str>) -> Vec<u8> {
    let specs: Vec<EventSpec> = ["task-clock", "context-switches", "cycles", "instructions:u"]
        .iter()
        .map(|e| EventSpec::parse(e).unwrap())
        .collect();
    let reading = |counter, enabled, running| {
        Some(Reading {
            counter,
            enabled,
            running,
        })
    };
    let readings = [
        reading(1_999_876_543, 2_000_000_000, 2_000_000_000),
        reading(12_345, 2_000_000_000, 2_000_000_000),
        None,
        // Multiplexed: scaled up, and the share of time counted shown.
        reading(4_000_000, 2_000_000_000, 1_000_000_000),
    ];
    let lines: Vec<Line<'_>> = specs
        .iter()
        .zip(readings)
        .map(|(spec, reading)| Line { spec, reading })
        .collect();
    let mut out = Vec::new();
    write_lines(&mut out, format, &lines, 2.0, prefix, cgroup).unwrap();
    out
}

#[test]
fn golden_stat_human() {
    check("stat-human.txt", &stat_text(&Format::Human, None, None));
}

#[test]
fn golden_stat_interval_cgroup_csv() {
    check(
        "stat-interval-cgroup.csv",
        &stat_text(&Format::Csv(",".into()), Some(1.000123456), Some("/busy")),
    );
}

#[test]
fn golden_stat_json() {
    check("stat.json", &stat_text(&Format::Json, None, None));
}
