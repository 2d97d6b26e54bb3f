//! The end-of-profile summary: where every sample went, in one struct,
//! written for people (stderr) or for programs (`--stats-json`).

use std::io::{self, Write};
use std::time::Duration;

use crate::bpf::stacks::Stats;
use crate::events::sampling::{Event, Rate};
use crate::events::Mode;
use crate::symbolize::{Frames, Module, Stack, SymbolStats};

/// Everything the summary reports about one profile.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) stats: Stats,
    pub(crate) symbols: SymbolStats,
    pub(crate) unique_stacks: usize,
    pub(crate) sideband_lost: u64,
    /// Side-band records read, and skipped as other processes'.
    pub(crate) sideband_records: u64,
    pub(crate) sideband_skipped: u64,
    pub(crate) event: Event,
    pub(crate) rate: Rate,
    pub(crate) mode: Mode,
    /// The target, as the title says it.
    pub(crate) what: String,
    pub(crate) filtered: bool,
    pub(crate) elapsed: Duration,
    pub(crate) interrupted: bool,
    /// Milliseconds from the end of recording to the first output.
    pub(crate) first_output_ms: f64,
    /// bprof's programs' run time in the kernel (ns) and run count, when
    /// the kernel timed them (`kernel.bpf_stats_enabled`).
    pub(crate) bpf: Option<(u64, u64)>,
    /// `--otlp`: the endpoint as shown, and where every profile went.
    pub(crate) otlp: Option<(String, crate::output::otlp::Totals)>,
    /// Where the unknown frames lie.
    pub(crate) unnamed: Unnamed,
}

/// Where the frames no symbol named lie, hottest first: the files without
/// symbols for them (and why), JIT code without a perf map, memory no file
/// was known for. The summary names the top ones and how to get names.
#[derive(Debug, Clone, Default)]
pub(crate) struct Unnamed {
    pub(crate) places: Vec<UnnamedPlace>,
}

/// Unknown frames of one file or kind of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnnamedPlace {
    /// The file as shown, or `[jit]`, `[kernel]`, `[unknown]`.
    pub(crate) name: String,
    /// Why its frames stayed unknown, where known ("no symbols", "file
    /// gone", ...): see [`why_unnamed`].
    pub(crate) why: Option<String>,
    /// JIT code: the runtime and the flag that has it write a perf map.
    pub(crate) jit: Option<Runtime>,
    /// Sampled frames there (each stack's once per sample).
    pub(crate) sampled: u64,
}

/// A runtime whose JIT code was seen without a perf map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Runtime {
    Node,
    Python,
    Java,
    /// Not recognised.
    Other,
}

impl Runtime {
    /// What has the runtime write a perf map (bprof reads it).
    fn flag(self) -> &'static str {
        match self {
            Runtime::Node => "run node with --perf-basic-prof",
            Runtime::Python => "run Python 3.12 or later with -X perf",
            Runtime::Java => "run java with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit, or attach perf-map-agent",
            Runtime::Other => "have the runtime write /tmp/perf-PID.map (a perf map) or a jitdump",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Runtime::Node => "node",
            Runtime::Python => "python",
            Runtime::Java => "java",
            Runtime::Other => "a JIT",
        }
    }

    /// The runtime of a stack with JIT frames, by the files on it and its
    /// thread's name.
    fn of(s: &Stack, frames: &Frames) -> Runtime {
        let files = s.user_locs.iter().filter_map(|&l| {
            let m = frames.locations.get(l as usize)?.module?;
            match frames.modules.get(m as usize)? {
                Module::File { path: Some(p), .. } => {
                    Some(p.file_name()?.to_string_lossy().into_owned())
                }
                _ => None,
            }
        });
        for f in files.chain(std::iter::once(s.comm.clone())) {
            if f.starts_with("node") || f.starts_with("libnode") {
                return Runtime::Node;
            }
            if f.starts_with("libjvm") || f == "java" {
                return Runtime::Java;
            }
            if f.starts_with("python3") || f.starts_with("libpython3") {
                return Runtime::Python;
            }
        }
        Runtime::Other
    }
}

/// Why the frames of a module stayed unknown, as far as the module says.
fn why_unnamed(module: Option<&Module>) -> Option<String> {
    match module {
        Some(Module::File { path: Some(_), .. }) => Some("no symbols".into()),
        Some(Module::File { path: None, .. }) => Some("file not found".into()),
        _ => None,
    }
}

impl Unnamed {
    /// The unknown frames of `stacks`, by place.
    pub(crate) fn of(stacks: &[Stack], frames: &Frames) -> Unnamed {
        use std::collections::HashMap;
        #[derive(PartialEq, Eq, Hash)]
        enum Key {
            Module(u32),
            Jit(Runtime),
            Anonymous,
        }
        let mut by: HashMap<Key, u64> = HashMap::new();
        for s in stacks {
            let mut runtime = None;
            for &l in s.kernel_locs.iter().chain(&s.user_locs) {
                if !frames.unknown.contains(&l) {
                    continue;
                }
                let key = if frames.jit.contains(&l) {
                    Key::Jit(*runtime.get_or_insert_with(|| Runtime::of(s, frames)))
                } else {
                    match frames.locations.get(l as usize).and_then(|x| x.module) {
                        Some(m) => Key::Module(m),
                        None => Key::Anonymous,
                    }
                };
                *by.entry(key).or_default() += s.count;
            }
        }
        let mut places: Vec<UnnamedPlace> = by
            .into_iter()
            .map(|(key, sampled)| match key {
                Key::Module(m) => {
                    let module = frames.modules.get(m as usize);
                    let name = match module {
                        Some(Module::Kernel) => "[kernel]".to_string(),
                        Some(Module::File { path: Some(p), .. }) => crate::names::path(p),
                        Some(Module::File {
                            build_id: Some(id), ..
                        }) => format!(
                            "build ID {}",
                            id.iter().map(|b| format!("{b:02x}")).collect::<String>()
                        ),
                        Some(Module::File { .. }) => "[unknown]".to_string(),
                        None => "[unknown]".to_string(),
                    };
                    UnnamedPlace {
                        name,
                        why: why_unnamed(module),
                        jit: None,
                        sampled,
                    }
                }
                Key::Jit(r) => UnnamedPlace {
                    name: "[jit]".into(),
                    why: None,
                    jit: Some(r),
                    sampled,
                },
                Key::Anonymous => UnnamedPlace {
                    name: "[unknown]".into(),
                    why: Some("no file known for the address".into()),
                    jit: None,
                    sampled,
                },
            })
            .collect();
        places.sort_by(|a, b| b.sampled.cmp(&a.sampled).then_with(|| a.name.cmp(&b.name)));
        Unnamed { places }
    }

    /// How to get names for the top places of a noticeable unknown share
    /// (of `sampled` frames): one line per JIT runtime seen, one for debug
    /// symbols. The places themselves are the "unknown frames" line's.
    fn write(
        &self,
        e: &mut dyn Write,
        sampled: u64,
        unknown_pct: f64,
        debuginfod: bool,
    ) -> io::Result<()> {
        /// Below this share of unknown frames the summary says no more.
        const WORTH_SAYING: f64 = 1.0;
        /// Places named, at most; and the least share of sampled frames
        /// (percent) a place needs to be named.
        const TOP: usize = 3;
        const LEAST: f64 = 0.1;
        let pct = |n: u64| 100.0 * n as f64 / sampled.max(1) as f64;
        let named: Vec<&UnnamedPlace> = self
            .places
            .iter()
            .filter(|p| pct(p.sampled) >= LEAST)
            .take(TOP)
            .collect();
        if unknown_pct < WORTH_SAYING || named.is_empty() {
            return Ok(());
        }
        let mut runtimes: Vec<Runtime> = named.iter().filter_map(|p| p.jit).collect();
        runtimes.sort_by_key(|r| r.name());
        runtimes.dedup();
        for r in runtimes {
            writeln!(
                e,
                "bprof: [jit] is JIT code without a perf map to name it: {}",
                r.flag()
            )?;
        }
        let files = named.iter().any(|p| p.why.as_deref() == Some("no symbols"));
        if files {
            let debuginfod = if debuginfod {
                "(DEBUGINFOD_URLS is set: its servers had none)"
            } else {
                "or set DEBUGINFOD_URLS (e.g. https://debuginfod.debian.net) for bprof to fetch them"
            };
            writeln!(
                e,
                "bprof: for files without symbols, install their debug symbols (Debian, Ubuntu: the package's -dbgsym; Fedora: dnf debuginfo-install PACKAGE) {debuginfod}"
            )?;
        }
        Ok(())
    }

    fn json(&self, sampled: u64) -> serde_json::Value {
        let pct = |n: u64| 100.0 * n as f64 / sampled.max(1) as f64;
        self.places
            .iter()
            .map(|p| {
                serde_json::json!({
                    "place": p.name,
                    "why": p.why,
                    "jit_runtime": p.jit.map(Runtime::name),
                    "sampled_frames": p.sampled,
                    "percent": pct(p.sampled),
                })
            })
            .collect()
    }
}

impl Summary {
    /// Unknown frames over the samples, as a user sees them in the graph,
    /// not over the distinct addresses.
    pub(crate) fn unknown_pct(&self) -> f64 {
        let s = &self.symbols;
        if s.sampled_frames == 0 {
            0.0
        } else {
            100.0 * s.sampled_unknown as f64 / s.sampled_frames as f64
        }
    }

    /// The human summary; `verbose` adds where uncounted samples went.
    pub(crate) fn write(&self, e: &mut dyn Write, verbose: bool) -> io::Result<()> {
        let st = &self.stats;
        let interrupted = if self.interrupted {
            ", interrupted"
        } else {
            ""
        };
        let (what, secs, event, rate) = (
            &self.what,
            self.elapsed.as_secs_f64(),
            self.event,
            self.rate,
        );
        let tail = format!(
            "{} lost, {} unique stacks, {:.1}% of sampled frames unknown",
            st.lost(),
            self.unique_stacks,
            self.unknown_pct()
        );
        match self.mode {
            Mode::OnCpu => writeln!(
                e,
                "bprof: {} samples of {what} over {secs:.2} s ({event}, {rate}){interrupted}, {tail}",
                st.counted
            )?,
            Mode::OffCpu | Mode::Wall => {
                let on_cpu = if self.mode == Mode::Wall {
                    format!(
                        " and {} on-CPU samples ({event}, {rate})",
                        st.counted.saturating_sub(st.blocks_counted)
                    )
                } else {
                    String::new()
                };
                writeln!(
                    e,
                    "bprof: {} off-CPU blocks{on_cpu} of {what} over {secs:.2} s{interrupted}, {tail}",
                    st.blocks_counted
                )?;
                if st.blocks_outside > 0 {
                    writeln!(
                        e,
                        "bprof: {} blocks outside --min-block/--max-block ignored",
                        st.blocks_outside
                    )?;
                }
                if st.blocks_untracked > 0 {
                    writeln!(
                        e,
                        "bprof: {} blocks lost: no room to stamp their threads' switch-out",
                        st.blocks_untracked
                    )?;
                }
            }
        }
        self.write_unnamed(e, verbose)?;
        let debuginfod = std::env::var_os("DEBUGINFOD_URLS").is_some_and(|v| !v.is_empty());
        self.unnamed.write(
            e,
            self.symbols.sampled_frames,
            self.unknown_pct(),
            debuginfod,
        )?;
        self.write_losses(e)?;
        if let Some((to, t)) = &self.otlp {
            let unsent = |n: u64, samples: u64, what: &str| match n {
                0 => String::new(),
                n => format!(", {n} {what} ({samples} samples)"),
            };
            writeln!(
                e,
                "bprof: OTLP to {to}: {} of {} profiles sent ({} samples, {} KiB), {} attempts retried, {} dropped from a full queue{}{}{}",
                t.sent,
                t.queued,
                t.sent_samples,
                t.sent_bytes.div_ceil(1024),
                t.retried,
                t.dropped,
                if t.dropped > 0 { format!(" ({} samples)", t.dropped_samples) } else { String::new() },
                unsent(t.refused, t.refused_samples, "refused"),
                unsent(t.unsent, t.unsent_samples, "unsent when the time to send ran out"),
            )?;
            if t.rejected_by_receiver > 0 {
                writeln!(
                    e,
                    "bprof: the OTLP receiver took them but said it rejected {} profiles",
                    t.rejected_by_receiver
                )?;
            }
        }
        if verbose {
            writeln!(
                e,
                "bprof: program runs {}, idle skipped {}, other processes {}, filtered {}, user stacks from the cache {}",
                st.samples, st.idle, st.not_target, st.filtered, st.user_stack_cached
            )?;
        }
        Ok(())
    }

    /// The files whose frames stayed unknown, and why: the five most
    /// sampled (every one, with its path, at -v).
    fn write_unnamed(&self, e: &mut dyn Write, verbose: bool) -> io::Result<()> {
        let unnamed = &self.symbols.unnamed;
        if unnamed.is_empty() {
            return Ok(());
        }
        let shown = if verbose { unnamed.len() } else { 5 };
        let mut parts: Vec<String> = unnamed
            .iter()
            .take(shown)
            .map(|u| {
                let name = match (&u.path, verbose) {
                    (Some(p), true) => crate::names::path(p),
                    _ => crate::names::clean(&u.module).into_owned(),
                };
                format!("{} in {name} ({})", u.sampled, u.why)
            })
            .collect();
        if unnamed.len() > shown {
            parts.push(format!(
                "{} more files (-v names them)",
                unnamed.len() - shown
            ));
        }
        writeln!(e, "bprof: unknown frames: {}", parts.join(", "))
    }

    fn write_losses(&self, e: &mut dyn Write) -> io::Result<()> {
        let st = &self.stats;
        if self.filtered {
            writeln!(e, "bprof: {} samples dropped by filter", st.filtered)?;
        }
        if st.count_map_full > 0 {
            writeln!(
                e,
                "bprof: {} samples lost: the count map was full or out of kernel memory (raise --stack-storage-size)",
                st.count_map_full
            )?;
        }
        if st.kern_stack_lost + st.user_stack_lost > 0 {
            writeln!(
                e,
                "bprof: {} kernel and {} user stacks lost to a full stack map or hash collisions (raise --stack-storage-size); those samples show [Missed ... Stack]",
                st.kern_stack_lost, st.user_stack_lost
            )?;
        }
        if st.no_stack > 0 {
            writeln!(e, "bprof: {} samples had no usable stack", st.no_stack)?;
        }
        if self.sideband_lost > 0 {
            writeln!(
                e,
                "bprof: {} mmap records lost; some exited processes may show [unknown]",
                self.sideband_lost
            )?;
        }
        Ok(())
    }

    /// The same facts as one JSON object, for scripts and the benchmarks.
    pub(crate) fn json(&self) -> serde_json::Value {
        let st = &self.stats;
        let mode = match self.mode {
            Mode::OnCpu => "on-cpu",
            Mode::OffCpu => "off-cpu",
            Mode::Wall => "wall",
        };
        serde_json::json!({
            "target": self.what,
            "mode": mode,
            "event": self.event.to_string(),
            "rate": self.rate.to_string(),
            "seconds": self.elapsed.as_secs_f64(),
            "interrupted": self.interrupted,
            "samples": {
                "program_runs": st.samples,
                "counted": st.counted,
                "counted_weight": st.counted_weight,
                "lost": st.lost(),
                "idle": st.idle,
                "not_target": st.not_target,
                "filtered": st.filtered,
                "count_map_full": st.count_map_full,
                "kernel_stacks_lost": st.kern_stack_lost,
                "user_stacks_lost": st.user_stack_lost,
                "no_stack": st.no_stack,
                "user_stacks_cached": st.user_stack_cached,
            },
            "off_cpu": {
                "switches_out": st.switches_out,
                "blocks_counted": st.blocks_counted,
                "blocks_outside": st.blocks_outside,
                "blocks_untracked": st.blocks_untracked,
            },
            "unique_stacks": self.unique_stacks,
            "stack_collisions": st.stack_collisions,
            "mmap_records_lost": self.sideband_lost,
            "mmap_records": self.sideband_records,
            "mmap_records_of_other_processes": self.sideband_skipped,
            "frames": {
                "unique": self.symbols.unique_frames,
                "unique_unknown": self.symbols.unknown_frames,
                "sampled": self.symbols.sampled_frames,
                "sampled_unknown": self.symbols.sampled_unknown,
                "unknown_percent": self.unknown_pct(),
                "unknown_by_file": self.symbols.unnamed.iter().map(|u| serde_json::json!({
                    "module": crate::names::clean(&u.module),
                    "path": u.path.as_deref().map(crate::names::path),
                    "why": u.why.to_string(),
                    "sampled": u.sampled,
                })).collect::<Vec<_>>(),
                "unknown_by_place": self.unnamed.json(self.symbols.sampled_frames),
            },
            "first_output_ms": self.first_output_ms,
            "bpf": self.bpf.map(|(ns, runs)| serde_json::json!({
                "run_time_ns": ns,
                "runs": runs,
            })),
            "otlp": self.otlp.as_ref().map(|(to, t)| serde_json::json!({
                "endpoint": to,
                "profiles": t.queued,
                "samples": t.queued_samples,
                "sent": t.sent,
                "sent_samples": t.sent_samples,
                "sent_bytes": t.sent_bytes,
                "largest_bytes": t.largest_bytes,
                "retried": t.retried,
                "dropped": t.dropped,
                "dropped_samples": t.dropped_samples,
                "refused": t.refused,
                "refused_samples": t.refused_samples,
                "unsent": t.unsent,
                "unsent_samples": t.unsent_samples,
                "rejected_by_receiver": t.rejected_by_receiver,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(mode: Mode) -> Summary {
        Summary {
            stats: Stats {
                samples: 120,
                counted: 100,
                idle: 10,
                not_target: 5,
                filtered: 3,
                count_map_full: 2,
                counted_weight: 100,
                ..Default::default()
            },
            symbols: SymbolStats {
                unique_frames: 40,
                unknown_frames: 4,
                sampled_frames: 400,
                sampled_unknown: 10,
                kallsyms_live: None,
                live_kallsyms_frames: Vec::new(),
                unnamed: vec![
                    crate::symbolize::UnnamedFile {
                        module: "prog".into(),
                        path: Some("/opt/prog".into()),
                        why: crate::symbolize::Unnamed::Changed,
                        sampled: 6,
                    },
                    crate::symbolize::UnnamedFile {
                        module: "[unknown]".into(),
                        path: None,
                        why: crate::symbolize::Unnamed::NoFile,
                        sampled: 4,
                    },
                ],
            },
            unique_stacks: 7,
            sideband_lost: 0,
            sideband_records: 0,
            sideband_skipped: 0,
            event: Event::CPU_CLOCK,
            rate: Rate::Frequency(99),
            mode,
            what: "process 42".into(),
            filtered: true,
            elapsed: Duration::from_millis(2500),
            interrupted: false,
            first_output_ms: 12.5,
            bpf: Some((5_000_000, 1000)),
            otlp: None,
            unnamed: Unnamed::default(),
        }
    }

    /// Golden text: the summary lines users and scripts read.
    #[test]
    fn human_summary_is_exact() {
        let mut out = Vec::new();
        summary(Mode::OnCpu).write(&mut out, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "bprof: 100 samples of process 42 over 2.50 s (cpu-clock, 99 Hz), 2 lost, 7 unique stacks, 2.5% of sampled frames unknown\n\
             bprof: unknown frames: 6 in prog (file changed since it was mapped), 4 in [unknown] (no file)\n\
             bprof: 3 samples dropped by filter\n\
             bprof: 2 samples lost: the count map was full or out of kernel memory (raise --stack-storage-size)\n"
        );
    }

    /// Golden text: where unknown frames lie and how to name them.
    #[test]
    fn unknown_places_say_how_to_name_them() {
        let place = |name: &str, why: Option<&str>, jit, sampled| UnnamedPlace {
            name: name.into(),
            why: why.map(String::from),
            jit,
            sampled,
        };
        let unnamed = Unnamed {
            places: vec![
                place("[jit]", None, Some(Runtime::Node), 300),
                place("/usr/lib/libfoo.so.1", Some("no symbols"), None, 199),
                place("[unknown]", Some("no file known for the address"), None, 1),
                place("/usr/lib/libbar.so", Some("no symbols"), None, 1),
            ],
        };
        let mut out = Vec::new();
        unnamed.write(&mut out, 1000, 50.1, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "bprof: [jit] is JIT code without a perf map to name it: run node with --perf-basic-prof\n\
             bprof: for files without symbols, install their debug symbols (Debian, Ubuntu: the package's -dbgsym; Fedora: dnf debuginfo-install PACKAGE) or set DEBUGINFOD_URLS (e.g. https://debuginfod.debian.net) for bprof to fetch them\n"
        );
        // Below 1% unknown, nothing more is said.
        let mut out = Vec::new();
        unnamed.write(&mut out, 1000, 0.5, false).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn otlp_delivery_is_in_both_summaries() {
        let mut s = summary(Mode::OnCpu);
        let t = crate::output::otlp::Totals {
            queued: 6,
            queued_samples: 100,
            sent: 4,
            sent_samples: 70,
            sent_bytes: 5000,
            retried: 3,
            dropped: 1,
            dropped_samples: 20,
            unsent: 1,
            unsent_samples: 10,
            ..Default::default()
        };
        s.otlp = Some(("http://c:4317 (gRPC)".into(), t));
        let mut out = Vec::new();
        s.write(&mut out, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("bprof: OTLP to http://c:4317 (gRPC): 4 of 6 profiles sent (70 samples, 5 KiB), 3 attempts retried, 1 dropped from a full queue (20 samples), 1 unsent when the time to send ran out (10 samples)\n"),
            "{text}"
        );
        let j = s.json();
        assert_eq!(j["otlp"]["sent"], 4);
        assert_eq!(j["otlp"]["retried"], 3);
        assert_eq!(j["otlp"]["dropped"], 1);
        assert_eq!(j["otlp"]["unsent_samples"], 10);
        assert_eq!(summary(Mode::OnCpu).json()["otlp"], serde_json::Value::Null);
    }

    #[test]
    fn json_summary_carries_the_accounting() {
        let j = summary(Mode::Wall).json();
        assert_eq!(j["mode"], "wall");
        assert_eq!(j["samples"]["counted"], 100);
        assert_eq!(j["samples"]["lost"], 2);
        assert_eq!(j["unique_stacks"], 7);
        assert_eq!(j["frames"]["unknown_percent"], 2.5);
        assert_eq!(j["frames"]["unknown_by_file"][0]["path"], "/opt/prog");
        assert_eq!(
            j["frames"]["unknown_by_file"][0]["why"],
            "file changed since it was mapped"
        );
        assert_eq!(j["bpf"]["run_time_ns"], 5_000_000);
        assert_eq!(j["bpf"]["runs"], 1000);
    }
}
