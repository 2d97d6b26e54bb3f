//! The `bprof stat` command: checks its arguments, counts through the shared
//! counters until the duration, a signal or the target's end, and prints
//! the counts like perf stat.

use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cgroup;
use crate::cli::StatArgs;
use crate::counters::{EventSpec, DEFAULT_EVENTS};
use crate::events;
use crate::maps::TargetFrom;
use crate::output::stat::{write_lines, Format, Line};
use crate::settings::seconds;
use crate::shared::Shared;
use crate::signals;
use crate::stat::{Counts, Scope, StatProgram};
use crate::target::{self, Child, Target};

/// A validated `bprof stat` request.
#[derive(Debug)]
pub struct Settings {
    /// Events in output order.
    pub events: Vec<EventSpec>,
    /// Targets as given (for validation and the header).
    pub target: Target,
    /// Whose counts are kept.
    pub scope: Scope,
    /// How long.
    pub duration: Option<Duration>,
    /// `-I`.
    pub interval: Option<Duration>,
    /// Output format.
    pub format: Format,
    /// Where the shared counters are pinned.
    pub pin_dir: PathBuf,
    /// Extra detail.
    pub verbose: bool,
}

impl Settings {
    /// Checks the arguments; every error is one line.
    pub fn from_args(a: StatArgs) -> Result<Settings> {
        let list = if a.event.is_empty() {
            DEFAULT_EVENTS.to_string()
        } else {
            a.event.join(",")
        };
        let events = EventSpec::parse_list(&list)?;
        if events.len() > crate::stat::MAX_EVENTS {
            bail!(
                "at most {} events per session ({} given)",
                crate::stat::MAX_EVENTS,
                events.len()
            );
        }
        let online = events::online_cpus().context("reading the online CPUs")?;
        let mut target = Target {
            command: a.command.clone(),
            ..Default::default()
        };
        if let Some(c) = &a.cpu {
            target.cpus = target::parse_cpu_list(c)?;
        }
        if let Some(p) = &a.pid {
            target.pids = target::parse_id_list(p, "PID")?;
        }
        if let Some(t) = &a.tid {
            target.tids = target::parse_id_list(t, "TID")?;
        }
        let picked = [a.all_cpus, !target.pids.is_empty(), !target.tids.is_empty()];
        if picked.iter().filter(|&&b| b).count() > 1
            || (!target.command.is_empty() && (picked[1] || picked[2]))
        {
            bail!("choose one of -a, -p, -t or a COMMAND (-a and -C may time a COMMAND)");
        }
        target.validate(&online)?;
        let cgroups = match &a.for_each_cgroup {
            Some(list) => {
                if !target.pids.is_empty() || !target.tids.is_empty() {
                    bail!(
                        "--for-each-cgroup counts system-wide; it cannot be combined with -p or -t"
                    );
                }
                list.split(',')
                    .map(|name| {
                        let name = name.trim();
                        if name.is_empty() {
                            bail!("empty cgroup name in '{list}'");
                        }
                        Ok((name.to_string(), cgroup::resolve(name)?))
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => Vec::new(),
        };
        let duration = a
            .duration
            .as_deref()
            .map(|d| seconds(d, "duration", 1.0))
            .transpose()?;
        let interval = match a.interval.as_deref() {
            Some(ms) => {
                let v = seconds(ms, "interval (-I)", 0.001)?;
                if v < Duration::from_millis(10) {
                    bail!("invalid interval (-I) '{ms}': at least 10 ms");
                }
                Some(v)
            }
            None => None,
        };
        let format = match (&a.separator, a.json) {
            (Some(sep), _) if sep.is_empty() => bail!("empty field separator"),
            (Some(sep), _) => Format::Csv(sep.clone()),
            (None, true) => Format::Json,
            (None, false) => Format::Human,
        };
        // As perf stat: -a or -C count whole CPUs, also while a COMMAND
        // runs (the command then only says how long).
        let system_wide = a.all_cpus
            || (!target.cpus.is_empty() && target.pids.is_empty() && target.tids.is_empty());
        let scope = Scope {
            cpus: target.cpus.clone(),
            pids: target.pids.clone(),
            tids: target.tids.clone(),
            follow_children: !target.command.is_empty() && !system_wide,
            cgroups,
        };
        Ok(Settings {
            events,
            target,
            scope,
            duration,
            interval,
            format,
            pin_dir: a.pin_dir,
            verbose: a.verbose > 0,
        })
    }

    fn header(&self) -> String {
        let t = &self.target;
        if !t.command.is_empty() && self.scope.follow_children {
            format!("'{}'", t.command.join(" "))
        } else if !t.pids.is_empty() {
            format!("process id '{}'", join(&t.pids))
        } else if !t.tids.is_empty() {
            format!("thread id '{}'", join(&t.tids))
        } else if !t.cpus.is_empty() {
            format!("'CPU(s) {}'", join(&t.cpus))
        } else {
            "'system wide'".into()
        }
    }
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Runs the count; returns the exit code (the command's, if any).
pub fn run(s: Settings) -> Result<i32> {
    crate::preflight::check()?;
    crate::kfeatures::check(crate::kfeatures::STAT)?;
    let online = events::online_cpus()?;
    let mut obj = MaybeUninit::uninit();
    let mut prog = StatProgram::load(&mut obj, &s.pin_dir, &s.events, &s.scope, &online)?;
    let unsupported: Vec<&EventSpec> = s
        .events
        .iter()
        .zip(&prog.session.events)
        .filter(|(_, sh)| **sh == Shared::NotSupported)
        .map(|(e, _)| e)
        .collect();
    if !unsupported.is_empty() {
        let names: Vec<&str> = unsupported.iter().map(|e| e.name.as_str()).collect();
        let why = if unsupported.iter().all(|e| e.is_hardware()) {
            " (no hardware PMU here)"
        } else {
            ""
        };
        eprintln!(
            "bprof: cannot count {}{why}; shown as <not supported>",
            names.join(", ")
        );
    }
    if s.verbose {
        eprintln!(
            "bprof: sharing counters under {} ({} slots opened by this session, {} reused)",
            s.pin_dir.display(),
            prog.session.created,
            s.events.len() - unsupported.len() - prog.session.created
        );
    }
    let mut child = match s.target.command.as_slice() {
        [] => None,
        argv => {
            let c = Child::spawn(argv)?;
            if s.scope.follow_children {
                prog.add_tgid(c.pid, TargetFrom::Exec)?;
            }
            Some(c)
        }
    };
    prog.attach(s.scope.follow_children)?;
    // Counting starts at attach's sync: whatever the programs charged while
    // they were being attached (the cgroup program runs first) is not in
    // the window. Before the command starts, so none of it is missed.
    let base = prog.read()?;
    signals::install();
    let start = Instant::now();
    if let Some(c) = child.as_mut() {
        c.start()?;
    }

    let mut out = io::stdout().lock();
    let tick = s.interval.map_or(Duration::from_millis(50), |i| {
        i.min(Duration::from_millis(50))
    });
    let ticker = crossbeam_channel::tick(tick);
    let mut last = base.clone();
    let mut next_print = s.interval.map(|i| start + i);
    let mut exit_status = None;
    loop {
        let _ = ticker.recv();
        let mut done =
            signals::stop_requested() || s.duration.is_some_and(|d| start.elapsed() >= d);
        if let Some(c) = &child {
            if let Some(st) = c.try_wait() {
                exit_status = Some(st);
                done = true;
            }
        }
        if s.target.exited() {
            done = true;
        }
        if let (Some(interval), Some(due)) = (s.interval, next_print) {
            if Instant::now() >= due || done {
                prog.sync()?;
                let now = prog.read()?;
                let delta: Vec<Counts> = now.iter().zip(&last).map(|(n, l)| diff(n, l)).collect();
                print_blocks(
                    &mut out,
                    &s,
                    &delta,
                    interval.as_secs_f64(),
                    Some(start.elapsed().as_secs_f64()),
                )?;
                last = now;
                next_print = Some(due + interval);
            }
        }
        if done {
            break;
        }
    }
    prog.sync()?;
    let totals: Vec<Counts> = prog
        .read()?
        .iter()
        .zip(&base)
        .map(|(n, b)| diff(n, b))
        .collect();
    let elapsed = start.elapsed();
    if let Some(c) = &child {
        if exit_status.is_none() {
            exit_status = Some(c.stop());
        }
    }
    if s.interval.is_none() {
        if s.format == Format::Human {
            writeln!(out, "\n Performance counter stats for {}:\n", s.header())?;
        }
        print_blocks(&mut out, &s, &totals, elapsed.as_secs_f64(), None)?;
        if s.format == Format::Human {
            writeln!(
                out,
                "\n{:>18.9} seconds time elapsed\n",
                elapsed.as_secs_f64()
            )?;
        }
    }
    out.flush()?;
    Ok(match exit_status {
        Some(st) => {
            if st != target::ExitStatus::Code(0) {
                eprintln!("bprof: command exited with {}", st.describe());
            }
            st.as_shell_code()
        }
        None => 0,
    })
}

fn diff(now: &Counts, before: &Counts) -> Counts {
    now.iter()
        .zip(before)
        .map(|(n, b)| n.map(|n| n.since(&b.unwrap_or_default())))
        .collect()
}

/// Prints the target block, or one block per cgroup with --for-each-cgroup.
fn print_blocks(
    out: &mut dyn Write,
    s: &Settings,
    blocks: &[Counts],
    seconds: f64,
    ts: Option<f64>,
) -> Result<()> {
    let lines_of = |counts: &Counts| -> Vec<Line<'_>> {
        s.events
            .iter()
            .zip(counts)
            .map(|(spec, r)| Line { spec, reading: *r })
            .collect()
    };
    // Rates are per second of the covered time, or per CPU-second when the
    // count is system-wide (CPUs utilized).
    if s.scope.cgroups.is_empty() {
        write_lines(out, &s.format, &lines_of(&blocks[0]), seconds, ts, None)?;
    } else {
        for ((name, _), counts) in s.scope.cgroups.iter().zip(&blocks[1..]) {
            write_lines(out, &s.format, &lines_of(counts), seconds, ts, Some(name))?;
        }
    }
    Ok(())
}
