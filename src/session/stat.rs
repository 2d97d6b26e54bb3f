//! The `bprof stat` command: checks its arguments, counts through the shared
//! counters until the duration, a signal or the target's end, and prints
//! the counts like perf stat.

use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::bpf::counting::{Counts, Scope, StatProgram};
use crate::bpf::maps::TargetFrom;
use crate::bpf::shared_counters::Shared;
use crate::cli::StatArgs;
use crate::events::counting::{EventSpec, DEFAULT_EVENTS};
use crate::events::sampling;
use crate::output::stat::{write_lines, Format, Line};
use crate::session::runner::{self, Runner};
use crate::session::settings::{seconds, target_and_duration};
use crate::target::cgroup;
use crate::target::Target;

/// A validated `bprof stat` request.
#[derive(Debug)]
pub struct StatSettings {
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
    /// Created once counting begins (`--ready-file`).
    pub ready_file: Option<PathBuf>,
    /// Where the shared counters are pinned.
    pub pin_dir: PathBuf,
    /// Extra detail.
    pub verbose: bool,
    /// `-o FILE`: the counts go there instead of stderr.
    pub output: Option<PathBuf>,
}

impl StatSettings {
    /// Checks the arguments; every error is one line.
    pub fn from_args(a: StatArgs) -> Result<StatSettings> {
        let list = if a.event.is_empty() {
            DEFAULT_EVENTS.to_string()
        } else {
            a.event.join(",")
        };
        let events = EventSpec::parse_list(&list)?;
        if events.len() > crate::bpf::abi::STAT_MAX_EVENTS {
            bail!(
                "at most {} events per session ({} given)",
                crate::bpf::abi::STAT_MAX_EVENTS,
                events.len()
            );
        }
        let (target, duration) = target_and_duration(&a.target)?;
        let picked = [target.all, !target.pids.is_empty(), !target.tids.is_empty()];
        if picked.iter().filter(|&&b| b).count() > 1 {
            bail!("choose one of -a, -p or -t (a COMMAND may time any of them)");
        }
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
        // As perf stat: -a, -C, -p or -t name what is counted, also while
        // a COMMAND runs (the command then only says how long).
        let scope = Scope {
            cpus: target.cpus.clone(),
            pids: target.pids.clone(),
            tids: target.tids.clone(),
            follow_children: target.traces_command(),
            cgroups,
        };
        Ok(StatSettings {
            events,
            target,
            scope,
            duration,
            interval,
            format,
            ready_file: a.target.ready_file.clone(),
            pin_dir: a.pin_dir,
            verbose: a.verbose > 0,
            output: a.output,
        })
    }

    fn header(&self) -> String {
        let t = &self.target;
        if !t.command.is_empty() && self.scope.follow_children {
            format!("'{}'", t.command.join(" "))
        } else if !t.pids.is_empty() {
            format!("process id '{}'", crate::target::id_list(&t.pids))
        } else if !t.tids.is_empty() {
            format!("thread id '{}'", crate::target::id_list(&t.tids))
        } else if !t.cpus.is_empty() {
            format!("'CPU(s) {}'", crate::target::id_list(&t.cpus))
        } else {
            "'system wide'".into()
        }
    }
}

/// Runs the count; returns the exit code (the command's, if any).
pub fn run(s: StatSettings) -> Result<i32> {
    crate::bpf::preflight::check()?;
    crate::bpf::kfeatures::check(crate::bpf::kfeatures::STAT)?;
    // Created now, so an unwritable path fails before anything is counted;
    // written whole at the end, as every output file.
    let file = s
        .output
        .as_deref()
        .map(crate::output::file::OutputFile::create)
        .transpose()?;
    let online = sampling::online_cpus()?;
    let mut obj = MaybeUninit::uninit();
    let mut prog = StatProgram::load(&mut obj, &s.pin_dir, &s.events, &s.scope, &online)?;
    report_sharing(&s, &prog);
    let mut runner = Runner::new(&s.target, s.duration, s.ready_file.as_deref())?;
    if let (Some(pid), true) = (runner.child_pid(), s.scope.follow_children) {
        prog.add_tgid(pid, TargetFrom::Exec)?;
    }
    prog.attach(s.scope.follow_children)?;
    // Counting starts at attach's sync: whatever the programs charged while
    // they were being attached (the cgroup program runs first) is not in
    // the window. Before the command starts, so none of it is missed.
    let base = prog.read()?;
    runner.start()?;

    // As perf stat: the counts on stderr, apart from the command's output.
    let mut buffered = Vec::new();
    let mut stderr = io::stderr().lock();
    let out: &mut dyn Write = if file.is_some() {
        &mut buffered
    } else {
        &mut stderr
    };
    let tick = s.interval.map_or(Duration::from_millis(50), |i| {
        i.min(Duration::from_millis(50))
    });
    let mut last = base.clone();
    let mut next_print = s.interval.map(|i| Instant::now() + i);
    let end = runner.run(tick, |done| {
        let (Some(interval), Some(due)) = (s.interval, next_print) else {
            return Ok(());
        };
        if Instant::now() >= due || done {
            prog.sync()?;
            let now = prog.read()?;
            let delta: Vec<Counts> = now.iter().zip(&last).map(|(n, l)| diff(n, l)).collect();
            let at = runner.elapsed().as_secs_f64();
            print_blocks(out, &s, &delta, interval.as_secs_f64(), Some(at))?;
            last = now;
            next_print = Some(due + interval);
        }
        Ok(())
    })?;
    prog.sync()?;
    let totals: Vec<Counts> = prog
        .read()?
        .iter()
        .zip(&base)
        .map(|(n, b)| diff(n, b))
        .collect();
    let elapsed = runner.elapsed();
    let status = runner.finish(end);
    if s.interval.is_none() {
        if s.format == Format::Human {
            writeln!(out, "\n Performance counter stats for {}:\n", s.header())?;
        }
        print_blocks(out, &s, &totals, elapsed.as_secs_f64(), None)?;
        if s.format == Format::Human {
            writeln!(
                out,
                "\n{:>18.9} seconds time elapsed\n",
                elapsed.as_secs_f64()
            )?;
        }
    }
    out.flush()?;
    drop(stderr);
    if let Some(f) = file {
        let path = f.path().to_path_buf();
        f.commit(|w| w.write_all(&buffered))?;
        eprintln!("bprof: wrote {}", crate::names::path(&path));
    }
    Ok(runner::exit_code(end, status, true))
}

/// Says which events cannot be counted here, and with -v how the counters
/// are shared.
fn report_sharing(s: &StatSettings, prog: &StatProgram) {
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
    s: &StatSettings,
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
