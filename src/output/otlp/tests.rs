use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use prost::Message;

use super::encode::container_id;
use super::messages::*;
use super::*;
use crate::output::folded::FoldedOptions;
use crate::output::pprof::Kind;
use crate::symbolize::{FrameLine, Frames, Location as Loc, Module, Stack as SymStack};

fn line(name: &str) -> FrameLine {
    FrameLine {
        name: name.into(),
        system_name: name.into(),
        file: Some("a.c".into()),
        line: 7,
    }
}

const CONTAINER: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn sample() -> (Vec<SymStack>, Frames, Meta) {
    let mut id = [0u8; 20];
    id[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let frames = Frames {
        modules: vec![
            Module::Kernel,
            Module::File {
                build_id: Some(id),
                key: None,
                go_build_id: None,
                path: Some("/usr/bin/app".into()),
            },
        ],
        locations: vec![
            Loc {
                address: 0xffff_ffff_8100_0000,
                module: Some(0),
                lines: vec![line("do_sys")],
            },
            Loc {
                address: 0x1234,
                module: Some(1),
                lines: vec![line("inner"), line("outer")],
            },
        ],
        unknown: Default::default(),
        jit: Default::default(),
    };
    let stack = |tgid, tid, cgroup, kernel_locs: Vec<u32>, count| SymStack {
        tgid,
        tid,
        cgroup,
        comm: "app".into(),
        kernel: vec![],
        user: vec![],
        kernel_lost: false,
        user_lost: false,
        off_cpu: false,
        count,
        kernel_locs,
        user_locs: vec![1],
    };
    let stacks = vec![
        stack(10, 10, 7, vec![0], 3),
        stack(10, 11, 7, vec![], 5),
        stack(20, 20, 0, vec![], 2),
    ];
    let meta = Meta {
        kind: Kind::CpuTime {
            period_ns: 10_000_000,
        },
        start: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        duration: Duration::from_secs(10),
        kernel_build_id: Some(vec![0xab, 0xcd]),
        cgroups: HashMap::from([(7, format!("/system.slice/docker-{CONTAINER}.scope"))]),
        host: Host {
            name: "node1".into(),
            kernel_release: "6.18.0".into(),
            arch: "amd64".into(),
        },
        service_name: None,
        executables: HashMap::from([(10, "app".to_string())]),
        version: "0.1.0".into(),
    };
    (stacks, frames, meta)
}

fn opts() -> FoldedOptions {
    FoldedOptions {
        kernel_stacks: true,
        user_stacks: true,
        ..Default::default()
    }
}

fn str_attr<'a>(r: &'a Resource, key: &str) -> Option<&'a any_value::Value> {
    r.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

#[test]
fn one_resource_per_process_with_its_attributes() {
    let (stacks, frames, meta) = sample();
    let req = build(&stacks, &frames, &opts(), &meta);
    // Encodes and decodes as the same message.
    let back = ExportProfilesServiceRequest::decode(&req.encode_to_vec()[..]).unwrap();
    assert_eq!(back, req);
    assert_eq!(req.resource_profiles.len(), 2);
    let r = req.resource_profiles[0].resource.as_ref().unwrap();
    use any_value::Value::*;
    assert_eq!(str_attr(r, "process.pid"), Some(&IntValue(10)));
    assert_eq!(
        str_attr(r, "service.name"),
        Some(&StringValue("app".into()))
    );
    assert_eq!(str_attr(r, "host.name"), Some(&StringValue("node1".into())));
    assert_eq!(
        str_attr(r, "os.version"),
        Some(&StringValue("6.18.0".into()))
    );
    assert_eq!(
        str_attr(r, "container.id"),
        Some(&StringValue(CONTAINER.into()))
    );
    let r2 = req.resource_profiles[1].resource.as_ref().unwrap();
    assert_eq!(str_attr(r2, "container.id"), None);
    // Process 20's executable is not known: its comm stands for it.
    assert_eq!(
        str_attr(r2, "process.executable.name"),
        Some(&StringValue("app".into()))
    );
    let d = req.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].as_str();
    // Every table starts with its zero value.
    assert_eq!(d.string_table[0], "");
    assert_eq!(d.mapping_table[0], Mapping::default());
    assert_eq!(d.location_table[0], Location::default());
    assert_eq!(d.function_table[0], Function::default());
    assert_eq!(d.stack_table[0], Stack::default());
    assert_eq!(d.attribute_table[0], KeyValueAndUnit::default());
    assert_eq!(d.link_table, vec![Link::default()]);
    let p = &req.resource_profiles[0].scope_profiles[0].profiles[0];
    let st = p.sample_type.as_ref().unwrap();
    assert_eq!(
        (s(st.type_strindex), s(st.unit_strindex)),
        ("samples", "count")
    );
    let pt = p.period_type.as_ref().unwrap();
    assert_eq!(
        (s(pt.type_strindex), s(pt.unit_strindex)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.period, 10_000_000);
    assert_eq!(p.time_unix_nano, 1_700_000_000 * 1_000_000_000);
    assert_eq!(p.duration_nano, 10_000_000_000);
    assert_eq!(p.profile_id.len(), 16);
    let total: i64 = req
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles[0].profiles[0].samples)
        .flat_map(|s| &s.values)
        .sum();
    assert_eq!(total, 10);
    // The first stack: kernel leaf, then the file's location with its
    // inlined function first.
    let sample = p
        .samples
        .iter()
        .find(|s| s.values == [3])
        .expect("the 3-sample stack");
    let stack = &d.stack_table[sample.stack_index as usize];
    let names: Vec<&str> = stack
        .location_indices
        .iter()
        .flat_map(|&l| &d.location_table[l as usize].lines)
        .map(|l| s(d.function_table[l.function_index as usize].name_strindex))
        .collect();
    assert_eq!(names, ["do_sys", "inner", "outer"]);
    let loc = &d.location_table[stack.location_indices[1] as usize];
    let m = &d.mapping_table[loc.mapping_index as usize];
    assert_eq!(s(m.filename_strindex), "/usr/bin/app");
    let build_id: Vec<_> = m
        .attribute_indices
        .iter()
        .map(|&a| &d.attribute_table[a as usize])
        .map(|kv| (s(kv.key_strindex), kv.value.clone().unwrap().value.unwrap()))
        .collect();
    assert_eq!(
        build_id,
        [(
            "process.executable.build_id.gnu",
            StringValue("deadbeef".into())
        )]
    );
    // Thread attributes on the samples.
    let keys: Vec<&str> = sample
        .attribute_indices
        .iter()
        .map(|&a| s(d.attribute_table[a as usize].key_strindex))
        .collect();
    assert_eq!(keys, ["thread.id", "thread.name"]);
}

#[test]
fn a_service_name_names_every_process() {
    let (stacks, frames, mut meta) = sample();
    meta.service_name = Some("web".into());
    let req = build(&stacks, &frames, &opts(), &meta);
    for r in &req.resource_profiles {
        let r = r.resource.as_ref().unwrap();
        assert_eq!(
            str_attr(r, "service.name"),
            Some(&any_value::Value::StringValue("web".into()))
        );
    }
}

#[test]
fn container_ids_come_from_cgroup_paths() {
    for (path, want) in [
        (format!("/system.slice/docker-{CONTAINER}.scope"), true),
        (
            format!("/kubepods/burstable/pod1/cri-containerd-{CONTAINER}.scope"),
            true,
        ),
        (format!("/docker/{CONTAINER}"), true),
        (
            format!("/machine.slice/libpod-{CONTAINER}.scope/container"),
            true,
        ),
        (
            "/user.slice/user-1000.slice/session-3.scope".to_string(),
            false,
        ),
        (format!("/x/{}", &CONTAINER[..63]), false),
        (format!("/x/{CONTAINER}0"), false),
        (format!("/x/{}", CONTAINER.to_uppercase()), false),
    ] {
        assert_eq!(container_id(&path), want.then_some(CONTAINER), "{path}");
    }
}

#[test]
fn bodies_are_gzipped_when_asked() {
    let (stacks, frames, meta) = sample();
    let req = build(&stacks, &frames, &opts(), &meta);
    let raw = payload_body(&req, false);
    let gz = payload_body(&req, true);
    assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    let mut back = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, raw);
}

#[test]
fn off_cpu_and_wall_profiles_count_microseconds() {
    let (stacks, frames, mut meta) = sample();
    for (kind, want) in [
        (Kind::OffCpu, ("off-cpu", "microseconds")),
        (Kind::Wall, ("wall", "microseconds")),
        (
            Kind::Events {
                event: "instructions".into(),
                period: Some(1000),
            },
            ("samples", "count"),
        ),
    ] {
        meta.kind = kind.clone();
        let req = build(&stacks, &frames, &opts(), &meta);
        let d = req.dictionary.as_ref().unwrap();
        let p = &req.resource_profiles[0].scope_profiles[0].profiles[0];
        let t = p.sample_type.as_ref().unwrap();
        let got = (
            d.string_table[t.type_strindex as usize].as_str(),
            d.string_table[t.unit_strindex as usize].as_str(),
        );
        assert_eq!(got, want, "{kind:?}");
        if let Kind::Events { .. } = kind {
            let pt = p.period_type.as_ref().unwrap();
            assert_eq!(d.string_table[pt.type_strindex as usize], "instructions");
            assert_eq!(p.period, 1000);
        }
    }
}
