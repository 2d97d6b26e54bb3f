//! The end-of-profile summary: where every sample went, in one struct,
//! written for people (stderr) or for programs (`--stats-json`).

use std::io::{self, Write};
use std::time::Duration;

use crate::bpf::stacks::Stats;
use crate::events::sampling::{Event, Rate};
use crate::events::Mode;
use crate::symbolize::SymbolStats;

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
            }
        }
        self.write_unnamed(e, verbose)?;
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
            event: Event::CpuClock,
            rate: Rate::Frequency(99),
            mode,
            what: "process 42".into(),
            filtered: true,
            elapsed: Duration::from_millis(2500),
            interrupted: false,
            first_output_ms: 12.5,
            bpf: Some((5_000_000, 1000)),
            otlp: None,
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
