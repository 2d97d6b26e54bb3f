//! pprof output: a gzipped `profile.proto`, the format `go tool pprof`,
//! Grafana Pyroscope, Parca and speedscope read.
//!
//! The messages below are profile.proto's (github.com/google/pprof,
//! proto/profile.proto), field numbers as there, encoded by prost: no protoc
//! at build time. Frames are the symbolize stage's [`Frames`]: one Location
//! per distinct address with all its inlined functions, one Mapping per
//! file with the build ID the kernel recorded (so a profile of a process
//! that has exited still names its files), one for the kernel.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::output::folded::{FoldedOptions, OFF_CPU_FRAME};
use crate::symbolize::{Frames, Module, Stack};

/// profile.proto's `Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each sample value counts.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped files.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Distinct addresses.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Distinct functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Start of the profile, ns since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Length of the profile, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period is in.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// profile.proto's `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index, e.g. "cpu".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index, e.g. "nanoseconds".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// profile.proto's `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels (pid, tid, comm).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// profile.proto's `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of a string value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// profile.proto's `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the file name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build ID (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Functions carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Lines carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations carry inlined functions.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// profile.proto's `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Functions at the address, innermost (inlined) first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several addresses folded into one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// profile.proto's `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Source column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// profile.proto's `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name in the symbol table.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line of the function, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// What the profile's values count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// On-CPU samples of a timer event (cpu-clock, task-clock), each worth
    /// `period_ns` nanoseconds of CPU.
    CpuTime {
        /// Nanoseconds per sample.
        period_ns: u64,
    },
    /// On-CPU samples of another event; `period` events each, when fixed (-c).
    Events {
        /// The event's name.
        event: String,
        /// Events per sample, if fixed.
        period: Option<u64>,
    },
    /// Off-CPU time in microseconds.
    OffCpu,
    /// On-CPU samples and off-CPU time, both in microseconds.
    Wall,
}

/// Everything one pprof file says besides the stacks.
#[derive(Debug, Clone)]
pub struct Meta {
    /// What the values count.
    pub kind: Kind,
    /// When the profile started.
    pub start: SystemTime,
    /// How long it ran.
    pub duration: Duration,
    /// Comments (what was profiled, how).
    pub comments: Vec<String>,
    /// The kernel's build ID, if known.
    pub kernel_build_id: Option<Vec<u8>>,
    /// cgroup ids → paths, for the `cgroup` label.
    pub cgroups: HashMap<u64, String>,
}

/// Interns strings: index 0 is always "".
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), i);
        i
    }
}

/// A shared library by its name (`libc.so.6`, `x.so`), as pprof tells them.
fn is_library(p: &std::path::Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.ends_with(".so") || name.contains(".so.")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Builds the profile. `opts` are the folded options, so the pprof graph
/// has the same frames as the folded lines (lost-stack markers and the
/// `[off-cpu]` leaf of `--wall` included), without the comm frame: pid,
/// tid and comm are labels.
pub fn build(stacks: &[Stack], frames: &Frames, opts: &FoldedOptions, meta: &Meta) -> Profile {
    let mut b = Builder {
        p: Profile::default(),
        st: Strings::new(),
        functions: HashMap::new(),
        markers: HashMap::new(),
    };
    b.sample_types(&meta.kind);
    b.p.time_nanos = meta
        .start
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    b.p.duration_nanos = meta.duration.as_nanos() as i64;
    b.p.comment = meta.comments.iter().map(|c| b.st.get(c)).collect();
    let mapping_ids = b.mappings(frames, meta);
    b.locations(frames, &mapping_ids);
    b.samples(stacks, opts, meta);
    b.p.string_table = b.st.table;
    b.p
}

/// A profile being built, with its string, function and marker tables.
struct Builder {
    p: Profile,
    st: Strings,
    functions: HashMap<(i64, i64, i64), u64>,
    /// The markers folded output adds, as locations of their own.
    markers: HashMap<&'static str, u64>,
}

impl Builder {
    fn value_type(&mut self, t: &str, u: &str) -> ValueType {
        ValueType {
            r#type: self.st.get(t),
            unit: self.st.get(u),
        }
    }

    /// What the values of one stack's count are, in sample-type order.
    fn sample_types(&mut self, kind: &Kind) {
        match kind {
            Kind::CpuTime { period_ns } => {
                self.p.sample_type = vec![
                    self.value_type("samples", "count"),
                    self.value_type("cpu", "nanoseconds"),
                ];
                self.p.period_type = Some(self.value_type("cpu", "nanoseconds"));
                self.p.period = *period_ns as i64;
                self.p.default_sample_type = self.st.get("cpu");
            }
            Kind::Events { event, period } => {
                self.p.sample_type = vec![self.value_type("samples", "count")];
                self.p.period_type = Some(self.value_type(event, "count"));
                if let Some(n) = period {
                    let t = self.value_type(event, "count");
                    self.p.sample_type.push(t);
                    self.p.period = *n as i64;
                }
            }
            Kind::OffCpu => {
                self.p.sample_type = vec![self.value_type("off-cpu", "microseconds")];
                self.p.period_type = Some(self.value_type("off-cpu", "microseconds"));
                self.p.period = 1;
            }
            Kind::Wall => {
                self.p.sample_type = vec![
                    self.value_type("wall", "microseconds"),
                    self.value_type("cpu", "microseconds"),
                    self.value_type("off-cpu", "microseconds"),
                ];
                self.p.period_type = Some(self.value_type("wall", "microseconds"));
                self.p.period = 1;
                self.p.default_sample_type = self.st.get("wall");
            }
        }
    }

    /// One mapping per module, covering every address seen in it; returns
    /// each module's mapping id.
    fn mappings(&mut self, frames: &Frames, meta: &Meta) -> Vec<u64> {
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
        // pprof takes the first mapping for the main binary: executables
        // first, then libraries, then the kernel.
        let rank = |m: &Module| match m {
            Module::File { path: Some(p), .. } if !is_library(p) => 0,
            Module::File { .. } => 1,
            Module::Kernel => 2,
        };
        let mut order: Vec<usize> = (0..frames.modules.len()).collect();
        order.sort_by_key(|&i| rank(&frames.modules[i]));
        let mut mapping_ids = vec![0u64; frames.modules.len()];
        for i in order {
            let Some((lo, hi)) = ranges[i] else { continue };
            let id = self.p.mapping.len() as u64 + 1;
            mapping_ids[i] = id;
            let mapping = self.mapping(id, i, &frames.modules[i], (lo, hi), frames, meta);
            self.p.mapping.push(mapping);
        }
        mapping_ids
    }

    fn mapping(
        &mut self,
        id: u64,
        index: usize,
        m: &Module,
        (lo, hi): (u64, u64),
        frames: &Frames,
        meta: &Meta,
    ) -> Mapping {
        let (start, limit, file, build_id) = match m {
            Module::Kernel => (
                lo,
                hi.saturating_add(1),
                "[kernel.kallsyms]".to_string(),
                meta.kernel_build_id.as_deref().map(hex).unwrap_or_default(),
            ),
            // Addresses are file offsets: the mapping is the file from
            // offset 0, so address - start + file_offset is the offset.
            Module::File { build_id, path } => {
                let size = path
                    .as_deref()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| m.len());
                let len = build_id.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                (
                    0,
                    size.max(hi.saturating_add(1)),
                    path.as_deref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    hex(&build_id[..len]),
                )
            }
        };
        let (mut files, mut numbers) = (false, false);
        for l in frames
            .locations
            .iter()
            .filter(|l| l.module == Some(index as u32))
            .flat_map(|l| &l.lines)
        {
            files |= l.file.is_some();
            numbers |= l.line != 0;
        }
        Mapping {
            id,
            memory_start: start,
            memory_limit: limit,
            file_offset: 0,
            filename: self.st.get(&file),
            build_id: self.st.get(&build_id),
            // bprof named every frame it could: a consumer must not
            // re-symbolize (pprof would read offsets as addresses).
            has_functions: true,
            has_filenames: files,
            has_line_numbers: numbers,
            has_inline_frames: true,
        }
    }

    fn function(&mut self, name: &str, sys: &str, file: &str) -> u64 {
        let key = (self.st.get(name), self.st.get(sys), self.st.get(file));
        let p = &mut self.p;
        *self.functions.entry(key).or_insert_with(|| {
            let id = p.function.len() as u64 + 1;
            p.function.push(Function {
                id,
                name: key.0,
                system_name: key.1,
                filename: key.2,
                start_line: 0,
            });
            id
        })
    }

    /// One location per distinct frame (ids follow `frames.locations`),
    /// with all its inlined lines, innermost first.
    fn locations(&mut self, frames: &Frames, mapping_ids: &[u64]) {
        for (i, l) in frames.locations.iter().enumerate() {
            let line = l
                .lines
                .iter()
                .map(|fl| Line {
                    function_id: self.function(
                        &fl.name,
                        &fl.system_name,
                        fl.file.as_deref().unwrap_or(""),
                    ),
                    line: i64::from(fl.line),
                    column: 0,
                })
                .collect();
            self.p.location.push(Location {
                id: i as u64 + 1,
                mapping_id: l.module.map_or(0, |m| mapping_ids[m as usize]),
                address: l.address,
                line,
                is_folded: false,
            });
        }
    }

    fn marker(&mut self, name: &'static str) -> u64 {
        if let Some(&id) = self.markers.get(name) {
            return id;
        }
        let f = self.function(name, name, "");
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(Location {
            id,
            mapping_id: 0,
            address: 0,
            line: vec![Line {
                function_id: f,
                line: 0,
                column: 0,
            }],
            is_folded: false,
        });
        self.markers.insert(name, id);
        id
    }

    fn samples(&mut self, stacks: &[Stack], opts: &FoldedOptions, meta: &Meta) {
        let (k_pid, k_tid, k_comm) = (self.st.get("pid"), self.st.get("tid"), self.st.get("comm"));
        let k_cgroup = self.st.get("cgroup");
        for s in stacks {
            let mut ids = Vec::with_capacity(s.kernel_locs.len() + s.user_locs.len() + 2);
            if opts.mark_off_cpu && s.off_cpu {
                ids.push(self.marker(OFF_CPU_FRAME));
            }
            ids.extend(s.kernel_locs.iter().map(|&l| u64::from(l) + 1));
            if opts.kernel_stacks && s.kernel_lost {
                ids.push(self.marker("[Missed Kernel Stack]"));
            }
            ids.extend(s.user_locs.iter().map(|&l| u64::from(l) + 1));
            if opts.user_stacks && s.user_lost {
                ids.push(self.marker("[Missed User Stack]"));
            }
            let comm = self.st.get(if s.comm.is_empty() {
                "[unknown]"
            } else {
                &s.comm
            });
            let num = |key, num| Label {
                key,
                num,
                ..Default::default()
            };
            let mut label = vec![
                num(k_pid, i64::from(s.tgid)),
                num(k_tid, i64::from(s.tid)),
                Label {
                    key: k_comm,
                    str: comm,
                    ..Default::default()
                },
            ];
            // Where known: a cgroup removed since has no path to show.
            if let Some(path) = meta.cgroups.get(&s.cgroup) {
                label.push(Label {
                    key: k_cgroup,
                    str: self.st.get(path),
                    ..Default::default()
                });
            }
            self.p.sample.push(Sample {
                location_id: ids,
                value: values(&meta.kind, s),
                label,
            });
        }
    }
}

/// One stack's values, in sample-type order.
fn values(kind: &Kind, s: &Stack) -> Vec<i64> {
    let c = s.count as i64;
    match kind {
        Kind::CpuTime { period_ns: n }
        | Kind::Events {
            period: Some(n), ..
        } => vec![c, s.count.saturating_mul(*n) as i64],
        Kind::Events { period: None, .. } | Kind::OffCpu => vec![c],
        Kind::Wall if s.off_cpu => vec![c, 0, c],
        Kind::Wall => vec![c, c, 0],
    }
}

/// Writes the profile gzipped, as pprof tools expect.
pub fn write(out: &mut dyn Write, profile: &Profile) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()
}

/// The running kernel's build ID, from its notes (`/sys/kernel/notes`).
pub fn kernel_build_id() -> Option<Vec<u8>> {
    let data = std::fs::read("/sys/kernel/notes").ok()?;
    let mut notes =
        object::read::elf::NoteIterator::<object::elf::FileHeader64<object::Endianness>>::new(
            object::Endianness::default(),
            4,
            &data[..],
        )
        .ok()?;
    while let Ok(Some(n)) = notes.next() {
        if n.name() == b"GNU"
            && n.n_type(object::Endianness::default()) == object::elf::NT_GNU_BUILD_ID
        {
            return Some(n.desc().to_vec());
        }
    }
    None
}

#[cfg(test)]
mod tests {
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
                    build_id: id,
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
}
