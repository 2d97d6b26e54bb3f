use super::*;
use crate::symbolize::{FrameLine, Location as Loc};

fn line(name: &str, sys: &str) -> FrameLine {
    FrameLine {
        name: name.into(),
        system_name: sys.into(),
        file: Some("a.c".into()),
        line: 7,
    }
}

fn sample_frames() -> (Vec<Stack>, Frames) {
    let mut id = [0u8; 20];
    id[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let frames = Frames {
        modules: vec![
            Module::Kernel,
            Module::File {
                build_id: Some(id),
                key: None,
                go_build_id: None,
                path: None,
            },
        ],
        locations: vec![
            Loc {
                address: 0xffff_ffff_8100_0000,
                module: Some(0),
                lines: vec![FrameLine {
                    name: "do_sys".into(),
                    system_name: "do_sys".into(),
                    file: None,
                    line: 0,
                }],
            },
            Loc {
                address: 0x1234,
                module: Some(1),
                // inlined leaf first, then its caller
                lines: vec![line("inner", "_Z5innerv"), line("outer()", "_Z5outerv")],
            },
            Loc {
                address: 0x7f00_0000_1000,
                module: None,
                lines: vec![line("jitted", "jitted")],
            },
        ],
        ..Default::default()
    };
    let stack = |kernel_locs: Vec<u32>, user_locs: Vec<u32>, off_cpu, count| Stack {
        tgid: 10,
        tid: 11,
        cgroup: 7,
        comm: "app".into(),
        kernel: vec![],
        user: vec![],
        kernel_lost: false,
        user_lost: kernel_locs.is_empty(),
        off_cpu,
        count,
        kernel_locs,
        user_locs,
    };
    (
        vec![
            stack(vec![0], vec![1, 2], false, 3),
            stack(vec![], vec![1], true, 5),
        ],
        frames,
    )
}

fn opts() -> FoldedOptions {
    FoldedOptions {
        kernel_stacks: true,
        user_stacks: true,
        mark_off_cpu: true,
        ..Default::default()
    }
}

#[test]
// Long on purpose: one decoded profile checked table by table (mappings, locations, samples, references).
fn a_profile_round_trips_through_prost_with_every_reference_resolvable() {
    let (stacks, frames) = sample_frames();
    let meta = Meta {
        kind: Kind::Wall,
        start: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        duration: Duration::from_millis(2500),
        comments: vec!["bprof test".into()],
        kernel_build_id: Some(vec![1, 2, 3]),
        cgroups: HashMap::from([(7, "/app.slice".to_string())]),
    };
    let p = build(&stacks, &frames, &opts(), &meta);
    let mut gz = Vec::new();
    write(&mut gz, &p).unwrap();
    let mut raw = Vec::new();
    io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
    let q = Profile::decode(&raw[..]).unwrap();
    assert_eq!(p, q);

    let s = |i: i64| q.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = q
        .sample_type
        .iter()
        .map(|v| (s(v.r#type), s(v.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("wall", "microseconds"),
            ("cpu", "microseconds"),
            ("off-cpu", "microseconds")
        ]
    );
    assert_eq!(q.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(q.duration_nanos, 2_500_000_000);
    assert_eq!(q.sample[0].value, [3, 3, 0]);
    assert_eq!(q.sample[1].value, [5, 0, 5]);
    // Mappings: the file's first (pprof's main binary), then the
    // kernel's; build IDs as hex.
    assert_eq!(q.mapping.len(), 2);
    assert_eq!(s(q.mapping[0].build_id), "deadbeef");
    assert_eq!(s(q.mapping[1].build_id), "010203");
    assert_eq!(s(q.mapping[1].filename), "[kernel.kallsyms]");
    assert!(q.mapping[0].memory_start <= 0x1234 && 0x1234 < q.mapping[0].memory_limit);
    // The inlined location keeps both functions, innermost first.
    let loc = q.location.iter().find(|l| l.address == 0x1234).unwrap();
    let fname = |id: u64| {
        let f = &q.function[id as usize - 1];
        assert_eq!(f.id, id);
        (s(f.name), s(f.system_name), s(f.filename))
    };
    assert_eq!(
        fname(loc.line[0].function_id),
        ("inner", "_Z5innerv", "a.c")
    );
    assert_eq!(
        fname(loc.line[1].function_id),
        ("outer()", "_Z5outerv", "a.c")
    );
    // Sample 0: kernel leaf, then user frames leaf first.
    assert_eq!(q.sample[0].location_id, [1, 2, 3]);
    assert_eq!(q.location[0].mapping_id, 2);
    assert_eq!(q.location[1].mapping_id, 1);
    assert_eq!(q.location[2].mapping_id, 0);
    // Sample 1: [off-cpu] leaf, then the user stack, then the lost
    // marker at the root, as folded output has them.
    let names: Vec<&str> = q.sample[1]
        .location_id
        .iter()
        .map(|&l| fname(q.location[l as usize - 1].line[0].function_id).0)
        .collect();
    assert_eq!(names, ["[off-cpu]", "inner", "[Missed User Stack]"]);
    let label = |l: &Label| (s(l.key), s(l.str), l.num);
    let labels: Vec<_> = q.sample[0].label.iter().map(label).collect();
    assert_eq!(
        labels,
        [
            ("pid", "", 10),
            ("tid", "", 11),
            ("comm", "app", 0),
            ("cgroup", "/app.slice", 0)
        ]
    );
    // Every reference resolves.
    for smp in &q.sample {
        assert_eq!(smp.value.len(), q.sample_type.len());
        for &l in &smp.location_id {
            assert_eq!(q.location[l as usize - 1].id, l);
        }
    }
    for l in &q.location {
        assert!(l.mapping_id == 0 || q.mapping.iter().any(|m| m.id == l.mapping_id));
    }
}

#[test]
fn cpu_time_values_are_samples_and_nanoseconds() {
    let (stacks, frames) = sample_frames();
    let meta = Meta {
        kind: Kind::CpuTime {
            period_ns: 10_101_010,
        },
        start: UNIX_EPOCH,
        duration: Duration::from_secs(1),
        comments: vec![],
        kernel_build_id: None,
        cgroups: HashMap::new(),
    };
    let p = build(&stacks, &frames, &FoldedOptions::default(), &meta);
    assert_eq!(p.sample[0].value, [3, 30_303_030]);
    assert_eq!(p.period, 10_101_010);
    // No [off-cpu] marker without --wall, no lost marker without the
    // user stacks asked for.
    assert_eq!(p.sample[1].location_id, [2]);
    assert_eq!(
        p.string_table[p.sample_type[1].unit as usize],
        "nanoseconds"
    );
}

#[test]
fn hardware_events_count_events_only_with_a_fixed_period() {
    let (stacks, frames) = sample_frames();
    let meta = |period| Meta {
        kind: Kind::Events {
            event: "cycles".into(),
            period,
        },
        start: UNIX_EPOCH,
        duration: Duration::from_secs(1),
        comments: vec![],
        kernel_build_id: None,
        cgroups: HashMap::new(),
    };
    let fixed = build(
        &stacks,
        &frames,
        &FoldedOptions::default(),
        &meta(Some(1000)),
    );
    let types: Vec<&str> = fixed
        .sample_type
        .iter()
        .map(|t| fixed.string_table[t.r#type as usize].as_str())
        .collect();
    assert_eq!(types, ["samples", "cycles"]);
    assert_eq!(fixed.sample[0].value, [3, 3000]);
    // At a frequency the kernel varies the period: only samples.
    let freq = build(&stacks, &frames, &FoldedOptions::default(), &meta(None));
    assert_eq!(freq.sample_type.len(), 1);
    assert_eq!(freq.sample[0].value, [3]);
}

/// A file without a GNU build ID keeps its path, and a Go binary's own
/// build ID stands as its identity: what a backend can match it by.
#[test]
fn mappings_of_files_without_a_build_id_carry_their_path_and_go_build_id() {
    let (stacks, mut frames) = sample_frames();
    let key = crate::bpf::stacks::FileKey { dev: 1, ino: 2 };
    frames.modules[1] = Module::File {
        build_id: None,
        key: Some(key),
        go_build_id: Some("goid/abc".into()),
        path: Some("/tmp/gohot (deleted)".into()),
    };
    let meta = Meta {
        kind: Kind::Wall,
        start: UNIX_EPOCH,
        duration: Duration::from_secs(1),
        comments: vec![],
        kernel_build_id: None,
        cgroups: HashMap::new(),
    };
    let p = build(&stacks, &frames, &opts(), &meta);
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(p.mapping[0].filename), "/tmp/gohot (deleted)");
    assert_eq!(s(p.mapping[0].build_id), "goid/abc");
    frames.modules[1] = Module::File {
        build_id: None,
        key: Some(key),
        go_build_id: None,
        path: Some("/opt/noid".into()),
    };
    let p = build(&stacks, &frames, &opts(), &meta);
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(p.mapping[0].filename), "/opt/noid");
    assert_eq!(s(p.mapping[0].build_id), "");
}
