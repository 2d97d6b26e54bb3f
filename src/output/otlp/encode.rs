//! One profile (an interval, or the whole run) as an OTLP
//! `ExportProfilesServiceRequest`: one `ResourceProfiles` per process, so
//! each carries its `service.name`, `process.pid`, `process.executable.name`
//! and `container.id` with the host's attributes; one dictionary for all.
//!
//! Frames are the symbolize stage's [`Frames`], as pprof takes them: one
//! Location per distinct address with every inlined function, one Mapping
//! per file with its build ID (`process.executable.build_id.gnu`) and name,
//! one for the kernel; markers (`[Missed User Stack]`, `[off-cpu]`) are
//! locations without a mapping, as in pprof.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::messages::*;
use crate::output::folded::{FoldedOptions, OFF_CPU_FRAME};
use crate::output::pprof::Kind;
use crate::symbolize::{Frames, Module, Stack as SymStack};

/// The machine's attributes, the same on every resource.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// `host.name`.
    pub name: String,
    /// The kernel release (`os.version`).
    pub kernel_release: String,
    /// `host.arch`, in the semantic conventions' words (`amd64`, `arm64`).
    pub arch: String,
}

/// Everything a request says besides the stacks.
#[derive(Debug, Clone)]
pub struct Meta {
    /// What the values count.
    pub kind: Kind,
    /// When the profile started.
    pub start: SystemTime,
    /// How long it ran.
    pub duration: Duration,
    /// The kernel's build ID, if known.
    pub kernel_build_id: Option<Vec<u8>>,
    /// cgroup ids → paths, where `container.id` is found.
    pub cgroups: HashMap<u64, String>,
    /// The machine.
    pub host: Host,
    /// `service.name` of every process; `None`: each process's executable
    /// name.
    pub service_name: Option<String>,
    /// Process id → executable name, where known (else the comm).
    pub executables: HashMap<u32, String>,
    /// bprof's version, the instrumentation scope's.
    pub version: String,
}

/// The OTLP sample type, period type and period of a profile kind. Values
/// are the counts bprof keeps (samples; microseconds off-CPU and wall),
/// each sample worth the period.
fn types(kind: &Kind) -> ((&str, &str), (&str, &str), i64) {
    match kind {
        Kind::CpuTime { period_ns } => (
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            *period_ns as i64,
        ),
        Kind::Events { event, period } => (
            ("samples", "count"),
            (event.as_str(), "count"),
            period.map_or(0, |n| n as i64),
        ),
        Kind::OffCpu => (("off-cpu", "microseconds"), ("off-cpu", "microseconds"), 1),
        Kind::Wall => (("wall", "microseconds"), ("wall", "microseconds"), 1),
    }
}

/// The container id in a cgroup path: the last 64-hex-digit run in it
/// (`/system.slice/docker-<id>.scope`, `/kubepods/.../cri-containerd-<id>.scope`,
/// `/docker/<id>`, `/machine.slice/libpod-<id>.scope`).
pub fn container_id(cgroup_path: &str) -> Option<&str> {
    cgroup_path.rsplit('/').find_map(|part| {
        let b = part.as_bytes();
        let mut run = 0;
        // The last run of exactly 64 hex digits in the component.
        let mut found = None;
        for (i, c) in b.iter().enumerate() {
            if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
                run += 1;
            } else {
                if run == 64 {
                    found = Some(i - 64);
                }
                run = 0;
            }
        }
        if run == 64 {
            found = Some(b.len() - 64);
        }
        found.map(|at| &part[at..at + 64])
    })
}

/// A dictionary being built, with its interning maps.
struct Dict {
    d: ProfilesDictionary,
    strings: HashMap<String, i32>,
    attributes: HashMap<(i32, Value), i32>,
    functions: HashMap<(i32, i32, i32), i32>,
    stacks: HashMap<Vec<i32>, i32>,
    markers: HashMap<&'static str, i32>,
}

/// An attribute value as interned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Value {
    Str(String),
    Int(i64),
}

impl Value {
    fn any(&self) -> AnyValue {
        AnyValue {
            value: Some(match self {
                Value::Str(s) => any_value::Value::StringValue(s.clone()),
                Value::Int(n) => any_value::Value::IntValue(*n),
            }),
        }
    }
}

fn attr(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(v.any()),
        key_strindex: 0,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dict {
            // Entry 0 of every table is its zero value.
            d: ProfilesDictionary {
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                function_table: vec![Function::default()],
                link_table: vec![Link::default()],
                string_table: Vec::new(),
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![Stack::default()],
            },
            strings: HashMap::new(),
            attributes: HashMap::new(),
            functions: HashMap::new(),
            stacks: HashMap::new(),
            markers: HashMap::new(),
        };
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn attribute(&mut self, key: &str, v: Value) -> i32 {
        let k = self.string(key);
        let table = &mut self.d.attribute_table;
        *self.attributes.entry((k, v)).or_insert_with_key(|(k, v)| {
            table.push(KeyValueAndUnit {
                key_strindex: *k,
                value: Some(v.any()),
                unit_strindex: 0,
            });
            table.len() as i32 - 1
        })
    }

    fn value_type(&mut self, (t, u): (&str, &str)) -> ValueType {
        ValueType {
            type_strindex: self.string(t),
            unit_strindex: self.string(u),
        }
    }

    fn function(&mut self, name: &str, sys: &str, file: &str) -> i32 {
        let key = (self.string(name), self.string(sys), self.string(file));
        let table = &mut self.d.function_table;
        *self.functions.entry(key).or_insert_with(|| {
            table.push(Function {
                name_strindex: key.0,
                system_name_strindex: key.1,
                filename_strindex: key.2,
                start_line: 0,
            });
            table.len() as i32 - 1
        })
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        let table = &mut self.d.stack_table;
        *self.stacks.entry(locations).or_insert_with_key(|l| {
            table.push(Stack {
                location_indices: l.clone(),
            });
            table.len() as i32 - 1
        })
    }

    /// One mapping per module that a location lies in, covering its
    /// addresses; returns each module's mapping index (0: none).
    fn mappings(&mut self, frames: &Frames, meta: &Meta) -> Vec<i32> {
        let mut ranges: Vec<Option<(u64, u64)>> = vec![None; frames.modules.len()];
        for l in &frames.locations {
            if let Some(m) = l.module {
                let r = &mut ranges[m as usize];
                *r = Some(match *r {
                    None => (l.address, l.address),
                    Some((lo, hi)) => (lo.min(l.address), hi.max(l.address)),
                });
            }
        }
        let mut index = vec![0; frames.modules.len()];
        for (i, m) in frames.modules.iter().enumerate() {
            let Some((lo, hi)) = ranges[i] else { continue };
            // Its identity: the GNU build ID, and a Go binary's own
            // (OpenTelemetry's semantic conventions name both).
            let (start, limit, file, build_id, go_build_id) = match m {
                Module::Kernel => (
                    lo,
                    hi.saturating_add(1),
                    "[kernel.kallsyms]".to_string(),
                    meta.kernel_build_id.as_deref().map(hex).unwrap_or_default(),
                    String::new(),
                ),
                // Addresses are file offsets: the mapping is the file from
                // offset 0, as in pprof.
                Module::File {
                    build_id,
                    go_build_id,
                    path,
                    ..
                } => {
                    let gnu = build_id
                        .map(|b| {
                            let len = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
                            hex(&b[..len])
                        })
                        .unwrap_or_default();
                    (
                        0,
                        hi.saturating_add(1),
                        path.as_deref().map(crate::names::path).unwrap_or_default(),
                        gnu,
                        go_build_id
                            .as_deref()
                            .map(|g| crate::names::clean(g).into_owned())
                            .unwrap_or_default(),
                    )
                }
            };
            let mut attributes = Vec::new();
            if !build_id.is_empty() {
                attributes
                    .push(self.attribute("process.executable.build_id.gnu", Value::Str(build_id)));
            }
            if !go_build_id.is_empty() {
                attributes.push(
                    self.attribute("process.executable.build_id.go", Value::Str(go_build_id)),
                );
            }
            let filename_strindex = self.string(&file);
            self.d.mapping_table.push(Mapping {
                memory_start: start,
                memory_limit: limit,
                file_offset: 0,
                filename_strindex,
                attribute_indices: attributes,
            });
            index[i] = self.d.mapping_table.len() as i32 - 1;
        }
        index
    }

    /// One location per distinct frame: index i + 1 is `frames.locations[i]`.
    fn locations(&mut self, frames: &Frames, mapping: &[i32]) {
        let kernel = self.attribute("profile.frame.type", Value::Str("kernel".into()));
        let native = self.attribute("profile.frame.type", Value::Str("native".into()));
        for l in &frames.locations {
            let lines = l
                .lines
                .iter()
                .map(|fl| Line {
                    function_index: self.function(
                        &fl.name,
                        &fl.system_name,
                        fl.file.as_deref().unwrap_or(""),
                    ),
                    line: i64::from(fl.line),
                    column: 0,
                })
                .collect();
            let kind = l.module.map(|m| match frames.modules[m as usize] {
                Module::Kernel => kernel,
                Module::File { .. } => native,
            });
            self.d.location_table.push(Location {
                mapping_index: l.module.map_or(0, |m| mapping[m as usize]),
                address: l.address,
                lines,
                attribute_indices: kind.into_iter().collect(),
            });
        }
    }

    fn marker(&mut self, name: &'static str) -> i32 {
        if let Some(&i) = self.markers.get(name) {
            return i;
        }
        let function_index = self.function(name, name, "");
        self.d.location_table.push(Location {
            mapping_index: 0,
            address: 0,
            lines: vec![Line {
                function_index,
                line: 0,
                column: 0,
            }],
            attribute_indices: Vec::new(),
        });
        let i = self.d.location_table.len() as i32 - 1;
        self.markers.insert(name, i);
        i
    }

    /// A stack's location indices, leaf first, with the markers folded
    /// output shows.
    fn stack_of(&mut self, s: &SymStack, opts: &FoldedOptions) -> i32 {
        let mut ids = Vec::with_capacity(s.kernel_locs.len() + s.user_locs.len() + 2);
        if opts.mark_off_cpu && s.off_cpu {
            ids.push(self.marker(OFF_CPU_FRAME));
        }
        ids.extend(s.kernel_locs.iter().map(|&l| l as i32 + 1));
        if opts.kernel_stacks && s.kernel_lost {
            ids.push(self.marker("[Missed Kernel Stack]"));
        }
        ids.extend(s.user_locs.iter().map(|&l| l as i32 + 1));
        if opts.user_stacks && s.user_lost {
            ids.push(self.marker("[Missed User Stack]"));
        }
        self.stack(ids)
    }
}

/// What one resource (a process, in one container or none) is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Process {
    pid: u32,
    container: Option<String>,
}

/// 16 bytes from the kernel's random pool: a profile's id.
fn profile_id() -> Vec<u8> {
    let mut id = vec![0u8; 16];
    // SAFETY: writes at most id.len() bytes into id's buffer.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    if n != id.len() as isize || id.iter().all(|&b| b == 0) {
        // The field is optional: empty is "no id".
        id.clear();
    }
    id
}

/// Builds the request. `opts` are the folded options, so the stacks have
/// the same frames as the folded lines; the comm, pid and tid are
/// attributes, not frames.
pub fn build(
    stacks: &[SymStack],
    frames: &Frames,
    opts: &FoldedOptions,
    meta: &Meta,
) -> ExportProfilesServiceRequest {
    let mut d = Dict::new();
    let mapping = d.mappings(frames, meta);
    d.locations(frames, &mapping);
    let (sample_type, period_type, period) = types(&meta.kind);

    // Samples by process; same stack and attributes: one sample.
    let mut by_process: HashMap<Process, HashMap<(i32, Vec<i32>), i64>> = HashMap::new();
    let mut comms: HashMap<u32, &str> = HashMap::new();
    for s in stacks {
        let container = meta
            .cgroups
            .get(&s.cgroup)
            .and_then(|p| container_id(p))
            .map(str::to_string);
        let stack = d.stack_of(s, opts);
        let comm = if s.comm.is_empty() {
            "[unknown]"
        } else {
            &s.comm
        };
        // The main thread's name stands for the process where its
        // executable is not known.
        if s.tid == s.tgid || !comms.contains_key(&s.tgid) {
            comms.insert(s.tgid, comm);
        }
        let attributes = vec![
            d.attribute("thread.id", Value::Int(i64::from(s.tid))),
            d.attribute("thread.name", Value::Str(comm.to_string())),
        ];
        let samples = by_process
            .entry(Process {
                pid: s.tgid,
                container,
            })
            .or_default();
        let v = samples.entry((stack, attributes)).or_default();
        *v = v.saturating_add(s.count.min(i64::MAX as u64) as i64);
    }

    let mut processes: Vec<_> = by_process.into_iter().collect();
    processes.sort_by(|a, b| a.0.cmp(&b.0));
    let time_unix_nano = meta
        .start
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos() as u64);
    let mut resource_profiles = Vec::with_capacity(processes.len());
    for (p, samples) in processes {
        let exe = meta
            .executables
            .get(&p.pid)
            .map(String::as_str)
            .or_else(|| comms.get(&p.pid).copied())
            .unwrap_or("[unknown]");
        let service = meta.service_name.as_deref().unwrap_or(exe);
        let mut attributes = vec![
            attr("service.name", Value::Str(service.to_string())),
            attr("host.name", Value::Str(meta.host.name.clone())),
            attr("os.type", Value::Str("linux".into())),
            attr("os.version", Value::Str(meta.host.kernel_release.clone())),
            attr("process.pid", Value::Int(i64::from(p.pid))),
            attr("process.executable.name", Value::Str(exe.to_string())),
        ];
        if !meta.host.arch.is_empty() {
            attributes.push(attr("host.arch", Value::Str(meta.host.arch.clone())));
        }
        if let Some(c) = p.container {
            attributes.push(attr("container.id", Value::Str(c)));
        }
        let mut samples: Vec<_> = samples.into_iter().collect();
        samples.sort();
        let samples = samples
            .into_iter()
            .map(|((stack_index, attribute_indices), v)| Sample {
                stack_index,
                attribute_indices,
                link_index: 0,
                values: vec![v],
                timestamps_unix_nano: Vec::new(),
            })
            .collect();
        let profile = Profile {
            sample_type: Some(d.value_type(sample_type)),
            samples,
            time_unix_nano,
            duration_nano: meta.duration.as_nanos().min(u128::from(u64::MAX)) as u64,
            period_type: Some(d.value_type(period_type)),
            period,
            profile_id: profile_id(),
            ..Default::default()
        };
        resource_profiles.push(ResourceProfiles {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "bprof".into(),
                    version: meta.version.clone(),
                    ..Default::default()
                }),
                profiles: vec![profile],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(d.d),
    }
}
