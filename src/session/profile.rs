//! One profiling session, stage by stage: target and events → BPF programs →
//! maps → stacks → symbols → outputs.

use std::io::{self, IsTerminal};
use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use blazesym::symbolize::Symbolizer;
use indicatif::{ProgressBar, ProgressStyle};

use crate::bpf::counting::{Scope, StatProgram};
use crate::bpf::maps::TargetFrom;
use crate::bpf::profile::ProfileProgram;
use crate::bpf::shared_counters::{Shared, DEFAULT_PIN_DIR};
use crate::collect::sideband::Sideband;
use crate::events::counting::EventSpec;
use crate::events::sampling::{self, Event};
use crate::output::file::OutputFile;
use crate::output::stat::cycles_text;
use crate::output::summary::Summary;
use crate::output::{folded, report, svg};
use crate::session::runner::{self, End, Runner};
pub use crate::session::settings::ProfileSettings;
use crate::symbolize;

const TICK: Duration = Duration::from_millis(100);

/// What a finished session reports.
#[derive(Debug)]
pub struct Outcome {
    /// bprof's exit code (the command's, when there was one).
    pub exit_code: i32,
}

/// The output files, created before the profile so an unwritable path fails
/// before anything is recorded.
struct Files {
    folded: Option<OutputFile>,
    svg: Option<OutputFile>,
    stats_json: Option<OutputFile>,
}

impl Files {
    fn create(settings: &ProfileSettings) -> Result<Files> {
        let create =
            |p: &Option<std::path::PathBuf>| p.as_deref().map(OutputFile::create).transpose();
        Ok(Files {
            folded: create(&settings.folded_file)?,
            svg: create(&settings.svg)?,
            stats_json: create(&settings.stats_json)?,
        })
    }
}

/// What recording produced, before maps are read.
struct Recorded {
    end: End,
    elapsed: Duration,
    event: Event,
    counts: Option<String>,
    status: Option<crate::target::ExitStatus>,
    /// `--call-graph dwarf`: the `-v` line on the unwind tables.
    unwind: Option<String>,
}

/// Runs one profile from start to written outputs.
pub fn run(settings: ProfileSettings) -> Result<Outcome> {
    crate::bpf::preflight::check()?;
    let files = Files::create(&settings)?;
    let cpus = if settings.target.cpus.is_empty() {
        sampling::online_cpus()?
    } else {
        settings.target.cpus.clone()
    };

    // BPF programs.
    let mut obj = MaybeUninit::uninit();
    let mut prog = ProfileProgram::load(&mut obj, &settings.program)?;
    // Folded stacks and flame graphs show no thread ids.
    prog.collector.merge_threads(
        settings.folded_stdout || settings.folded_file.is_some() || settings.svg.is_some(),
    );
    // The command is forked first but held before exec, so its PID is a
    // target before it runs a single instruction; it counts from its exec
    // on (perf's enable_on_exec), not during bprof's own pre-exec code.
    let mut runner = Runner::new(
        &settings.target,
        settings.duration,
        settings.ready_file.as_deref(),
    )?;
    if let Some(pid) = runner.child_pid() {
        prog.add_tgid(pid, TargetFrom::Exec)?;
    }
    let mut sideband = Sideband::open(&cpus)?;
    sideband.index.jit.max_size = settings.max_perf_map_size;
    let symbolizer = symbolize::symbolizer();
    let recorded = record(
        &settings,
        &cpus,
        &mut runner,
        &mut prog,
        &mut sideband,
        &symbolizer,
    )?;

    // Maps → stacks.
    let t_end = Instant::now();
    let (stats, raw) = prog.finish()?;
    let drains = prog.collector.stats;
    let drained_total = prog.collector.total();
    drop(prog);
    let t_maps = Instant::now();

    // Stacks → symbols → outputs.
    sideband.index.jit.prepare(&raw);
    let (stacks, sym_stats) =
        symbolize::symbolize_with(&symbolizer, &raw, &sideband.index, settings.unknown_style);
    let t_sym = Instant::now();
    let lines = folded::lines(&stacks, &settings.folded);
    let mismatch = crate::collect::check_totals(&stats, drained_total, &lines);
    let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
    if settings.verbose {
        eprintln!(
            "bprof: after recording: maps read in {:.1} ms, {} unique frames symbolized in {:.1} ms, first output at {:.1} ms",
            ms(t_end, t_maps),
            sym_stats.unique_frames,
            ms(t_maps, t_sym),
            ms(t_end, Instant::now())
        );
    }
    let summary = Summary {
        stats,
        symbols: sym_stats,
        unique_stacks: stacks.len(),
        sideband_lost: sideband.index.lost,
        event: recorded.event,
        rate: settings.rate,
        mode: settings.program.mode,
        what: settings.target.describe(),
        filtered: !settings.program.filter.is_empty(),
        elapsed: recorded.elapsed,
        interrupted: recorded.end == End::Signal,
        first_output_ms: ms(t_end, Instant::now()),
    };
    let unwritten = write_outputs(&settings, files, &summary, &stacks, &lines, &recorded)?;

    sideband.index.jit.report(settings.verbose);
    report_refused(settings.verbose);
    summary.write(&mut io::stderr().lock(), settings.verbose)?;
    if settings.verbose {
        eprintln!("bprof: {}", crate::collect::describe(&drains, &stats));
        if let Some(u) = &recorded.unwind {
            eprintln!("{u}");
            eprintln!("{}", crate::unwind::describe_ends(&stats));
        }
    }
    if drains.unresolved > 0 {
        eprintln!(
            "bprof: {} stacks had no content left to read; those samples show [Missed ... Stack]",
            drains.unresolved
        );
    }
    if let Some(text) = &recorded.counts {
        eprintln!("bprof: {text}");
    }
    let exit_code = runner::exit_code(recorded.status, false);
    if let Some(m) = mismatch {
        bail!("{m}");
    }
    unwritten.report()?;
    Ok(Outcome { exit_code })
}

/// Attaches everything, runs the target and records until the end; leaves
/// the programs detached and the command stopped.
fn record(
    settings: &ProfileSettings,
    cpus: &[u32],
    runner: &mut Runner,
    prog: &mut ProfileProgram,
    sideband: &mut Sideband,
    symbolizer: &Symbolizer,
) -> Result<Recorded> {
    // Cycles and instructions of the same target, through the counters
    // shared with every other bprof session.
    let mut stat_obj = MaybeUninit::uninit();
    let counter = if settings.counts {
        start_counts(&mut stat_obj, settings, runner.child_pid())
    } else {
        None
    };
    let event = attach(settings, cpus, prog, symbolizer, counter.is_some())?;
    // After the side band is open, so no process falls between the two.
    let scope = snapshot_scope(settings, runner.child_pid());
    sideband.snapshot(scope.as_deref());
    if let Some(pid) = runner.child_pid() {
        // Its user and perf map, should it be short-lived.
        sideband.index.jit.note_process(pid, true);
    }
    let mut unwinder = crate::unwind::session::start(
        prog,
        settings,
        sideband,
        scope.as_deref(),
        runner.child_pid(),
    )?;
    runner.start()?;

    // Record until the duration, a signal, or the target's end. The side
    // band is read every 10 ms, so a new process's unwind tables and
    // mappings are in place soon after it maps them; the maps per TICK.
    let progress = progress_bar(settings.duration);
    let mut ticks = 0u64;
    let end = runner.run(TICK / 10, |last| {
        sideband.drain();
        if let Some(u) = unwinder.as_mut() {
            u.take_new(
                &prog.skel.maps.unwind_files,
                &prog.skel.maps.unwind_maps,
                settings
                    .program
                    .matches_tgids()
                    .then_some(&prog.skel.maps.target_tgids as &dyn libbpf_rs::MapCore),
                &mut sideband.index,
            );
        }
        ticks += 1;
        if !last && ticks % 10 == 0 {
            // Drains the kernel maps before they fill; also the progress count.
            let samples = prog.tick().map(|s| s.counted).unwrap_or(0);
            if !progress.is_hidden() {
                progress.set_position(runner.elapsed().as_millis() as u64);
                progress.set_message(format!("{samples} samples"));
            }
        }
        Ok(())
    })?;
    let elapsed = runner.elapsed();
    let counts = counter.and_then(|c| match c.sync().and_then(|_| c.read()) {
        Ok(blocks) => blocks.into_iter().next(),
        Err(e) => {
            eprintln!("bprof: reading cycles and instructions failed: {e:#}");
            None
        }
    });
    prog.detach();
    progress.finish_and_clear();
    sideband.drain();
    Ok(Recorded {
        end,
        elapsed,
        event,
        counts: counts.as_deref().and_then(cycles_text),
        status: runner.finish(end),
        unwind: unwinder.map(|u| u.report()),
    })
}

/// Opens the sampling events and attaches every program; returns the
/// event actually sampled (cpu-clock where there is no PMU).
fn attach(
    settings: &ProfileSettings,
    cpus: &[u32],
    prog: &mut ProfileProgram,
    symbolizer: &Symbolizer,
    counting: bool,
) -> Result<Event> {
    let mode = settings.program.mode;
    let (event, fds) = if mode.on_cpu() {
        sampling::open_sampling(settings.event, settings.rate, cpus)?
    } else {
        (settings.event, Vec::new())
    };
    // One line for everything the missing PMU changes.
    let mut no_pmu = Vec::new();
    if event != settings.event {
        no_pmu.push(format!("sampling {event} instead of {}", settings.event));
    }
    if settings.counts && !counting {
        no_pmu.push("cycles and instructions not counted".to_string());
    }
    if !no_pmu.is_empty() {
        eprintln!("bprof: no hardware PMU here: {}", no_pmu.join("; "));
    }
    prog.attach(fds, settings.program.follow_children)?;
    if mode.off_cpu() {
        let skip = prog.attach_offcpu(settings.stack_skip, symbolizer, settings.verbose)?;
        if settings.verbose {
            let how = if settings.stack_skip.is_some() {
                "--stack-skip"
            } else {
                "measured"
            };
            eprintln!("bprof: off-CPU kernel stacks skip {skip} BPF/tracepoint frames ({how})");
        }
    }
    Ok(event)
}

/// Whose mappings the side band reads at start: the -p/-L targets, none
/// yet for a command (it has not exec'd), everyone system-wide.
fn snapshot_scope(settings: &ProfileSettings, child: Option<u32>) -> Option<Vec<u32>> {
    let t = &settings.target;
    if !t.pids.is_empty() || !t.tids.is_empty() {
        Some(t.pids.iter().chain(&t.tids).copied().collect())
    } else if child.is_some() {
        Some(Vec::new())
    } else {
        None
    }
}

/// Outputs that had nothing to hold, told after the summary (which says
/// where the samples went).
struct Unwritten {
    folded: Option<std::path::PathBuf>,
    svg: Option<std::path::PathBuf>,
}

impl Unwritten {
    fn report(self) -> Result<()> {
        if let Some(path) = self.folded {
            eprintln!(
                "bprof: no samples were recorded, so nothing was written to {} (left as it was)",
                path.display()
            );
        }
        if let Some(path) = self.svg {
            bail!(
                "no samples were recorded, so no flame graph was written to {}",
                path.display()
            );
        }
        Ok(())
    }
}

/// Files first, then stdout: a closed pipe (`| head`) must not cost them.
/// With nothing to write, an existing file is left as it was.
fn write_outputs(
    settings: &ProfileSettings,
    files: Files,
    summary: &Summary,
    stacks: &[symbolize::Stack],
    lines: &[(String, u64)],
    recorded: &Recorded,
) -> Result<Unwritten> {
    let mut unwritten = Unwritten {
        folded: None,
        svg: None,
    };
    if let Some(f) = files.folded {
        if lines.is_empty() {
            unwritten.folded = Some(f.path().to_path_buf());
        } else {
            f.commit(|w| folded::write(w, lines))?;
        }
    }
    if let Some(f) = files.svg {
        let total: u64 = lines.iter().map(|(_, c)| c).sum();
        let opts = svg::SvgOptions::for_profile(summary, total, recorded.counts.clone());
        if lines.is_empty() {
            unwritten.svg = Some(f.path().to_path_buf());
        } else {
            f.commit(|w| svg::write(w, lines, &opts).map_err(io::Error::other))?;
        }
    }
    if let Some(f) = files.stats_json {
        f.commit(|w| {
            serde_json::to_writer_pretty(&mut *w, &summary.json())?;
            writeln!(w)
        })?;
    }
    if settings.folded_stdout {
        folded::write(&mut io::stdout().lock(), lines)
            .context("writing folded stacks to stdout")?;
    }
    if !settings.folded_stdout && settings.folded_file.is_none() && settings.svg.is_none() {
        report::write(&mut io::stdout().lock(), stacks, None).context("writing the report")?;
    }
    Ok(unwritten)
}

/// Files refused as malformed: named with -v, counted otherwise.
fn report_refused(verbose: bool) {
    let refused = symbolize::refused_files();
    if verbose {
        for (path, why) in &refused {
            eprintln!("bprof: skipped {} as malformed: {why}", path.display());
        }
    } else if !refused.is_empty() {
        eprintln!(
            "bprof: {} files skipped as malformed; their frames show module+offset (-v names them)",
            refused.len()
        );
    }
}

/// Joins the shared counters for the profile's target; `None` (after saying
/// why, unless it is just a missing PMU) when they cannot count here.
fn start_counts<'obj>(
    obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    settings: &ProfileSettings,
    child: Option<u32>,
) -> Option<StatProgram<'obj>> {
    try_start_counts(obj, settings, child).unwrap_or_else(|e| {
        eprintln!("bprof: cycles and instructions not counted: {e:#}");
        None
    })
}

fn try_start_counts<'obj>(
    obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    settings: &ProfileSettings,
    child: Option<u32>,
) -> Result<Option<StatProgram<'obj>>> {
    let specs = EventSpec::parse_list("cycles,instructions")?;
    let online = sampling::online_cpus()?;
    let scope = Scope {
        cpus: settings.target.cpus.clone(),
        pids: settings.target.pids.clone(),
        tids: settings.target.tids.clone(),
        follow_children: child.is_some(),
        cgroups: Vec::new(),
    };
    let mut c = StatProgram::load(obj, Path::new(DEFAULT_PIN_DIR), &specs, &scope, &online)?;
    if c.session.events.iter().all(|e| *e == Shared::NotSupported) {
        return Ok(None);
    }
    if let Some(pid) = child {
        c.add_tgid(pid, TargetFrom::Exec)?;
    }
    c.attach(child.is_some())?;
    Ok(Some(c))
}

fn progress_bar(duration: Option<Duration>) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match duration {
        Some(d) => {
            let pb = ProgressBar::new(d.as_millis() as u64);
            pb.set_style(
                ProgressStyle::with_template("recording {bar:30} {elapsed}/{duration} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            pb
        }
        None => {
            let pb = ProgressBar::new_spinner();
            pb.set_style(
                ProgressStyle::with_template(
                    "{spinner} recording {elapsed} {msg} (Ctrl-C to stop)",
                )
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            pb
        }
    }
}
