//! pprof output: a gzipped `profile.proto`, the format `go tool pprof`,
//! Grafana Pyroscope, Parca and speedscope read.
//!
//! The messages are profile.proto's (`proto`). Frames are the symbolize
//! stage's [`Frames`]: one Location per distinct address with all its
//! inlined functions, one Mapping per file with the build ID the kernel
//! recorded (so a profile of a process that has exited still names its
//! files), one for the kernel.

use std::collections::HashMap;
use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

mod proto;
pub use proto::*;

use crate::output::folded::{FoldedOptions, OFF_CPU_FRAME};
use crate::symbolize::{Frames, Module, Stack};

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
            // Its identity: the GNU build ID, else a Go binary's own.
            Module::File {
                build_id,
                go_build_id,
                path,
                ..
            } => {
                let size = path
                    .as_deref()
                    .and_then(|p| std::fs::metadata(p).ok())
                    .map_or(0, |m| m.len());
                let id = match (build_id, go_build_id) {
                    (Some(b), _) => {
                        let len = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
                        hex(&b[..len])
                    }
                    (None, Some(go)) => crate::names::clean(go).into_owned(),
                    (None, None) => String::new(),
                };
                (
                    0,
                    size.max(hi.saturating_add(1)),
                    path.as_deref().map(crate::names::path).unwrap_or_default(),
                    id,
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
                    str: self.st.get(&crate::names::clean(path)),
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
mod tests;
