//! One profiling session, stage by stage: target and events → BPF programs →
//! maps → stacks → symbols → outputs.

use std::io::{self, IsTerminal, Write};
use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::counters::EventSpec;
use crate::events::{self, Event};
use crate::maps::TargetFrom;
use crate::output::file::OutputFile;
use crate::output::stat::thousands;
use crate::output::{folded, report, svg};
use crate::programs::{Mode, ProfileProgram};
pub use crate::settings::Settings;
use crate::shared::{Shared, DEFAULT_PIN_DIR};
use crate::sideband::Sideband;
use crate::signals;
use crate::stacks::Stats;
use crate::stat::{Scope, StatProgram};
use crate::symbols::{self, SymbolStats};
use crate::target::Child;

const TICK: Duration = Duration::from_millis(100);

/// What a finished session reports.
#[derive(Debug)]
pub struct Outcome {
    /// bprof's exit code (the command's, when there was one).
    pub exit_code: i32,
}

/// Runs one profile from start to written outputs.
pub fn run(settings: Settings) -> Result<Outcome> {
    crate::preflight::check()?;
    // Prepared up front, so an unwritable path fails before the profile.
    let folded_file = settings
        .folded_file
        .as_deref()
        .map(OutputFile::create)
        .transpose()?;
    let svg_file = settings
        .svg
        .as_deref()
        .map(OutputFile::create)
        .transpose()?;
    let cpus = if settings.target.cpus.is_empty() {
        events::online_cpus()?
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
    let mut child = match settings.target.command.as_slice() {
        [] => None,
        argv => {
            let c = Child::spawn(argv)?;
            prog.add_tgid(c.pid, TargetFrom::Exec)?;
            Some(c)
        }
    };

    // Events, then attach.
    let mut sideband = Sideband::open(&cpus)?;
    sideband.index.jit.max_size = settings.max_perf_map_size;
    // Cycles and instructions of the same target, through the counters
    // shared with every other bprof session.
    let mut stat_obj = MaybeUninit::uninit();
    let counter = if settings.counts {
        start_counts(&mut stat_obj, &settings, child.as_ref().map(|c| c.pid))
    } else {
        None
    };

    let mode = settings.program.mode;
    let (event, fds) = if mode.on_cpu() {
        events::open_sampling(settings.event, settings.rate, &cpus)?
    } else {
        (settings.event, Vec::new())
    };
    // One line for everything the missing PMU changes.
    let mut no_pmu = Vec::new();
    if event != settings.event {
        no_pmu.push(format!("sampling {event} instead of {}", settings.event));
    }
    if settings.counts && counter.is_none() {
        no_pmu.push("cycles and instructions not counted".to_string());
    }
    if !no_pmu.is_empty() {
        eprintln!("bprof: no hardware PMU here: {}", no_pmu.join("; "));
    }
    prog.attach(fds, settings.program.follow_children)?;
    let symbolizer = symbols::symbolizer();
    if mode.off_cpu() {
        let skip = prog.attach_offcpu(settings.stack_skip, &symbolizer, settings.verbose)?;
        if settings.verbose {
            let how = if settings.stack_skip.is_some() {
                "--stack-skip"
            } else {
                "measured"
            };
            eprintln!("bprof: off-CPU kernel stacks skip {skip} BPF/tracepoint frames ({how})");
        }
    }
    // After the side band is open, so no process falls between the two.
    let scope: Option<Vec<u32>> =
        if !settings.target.pids.is_empty() || !settings.target.tids.is_empty() {
            Some(
                settings
                    .target
                    .pids
                    .iter()
                    .chain(&settings.target.tids)
                    .copied()
                    .collect(),
            )
        } else if child.is_some() {
            Some(Vec::new())
        } else {
            None
        };
    sideband.snapshot(scope.as_deref());
    if let Some(c) = &child {
        // Its user and perf map, should it be short-lived.
        sideband.index.jit.note_process(c.pid, true);
    }
    let mut unwinder = crate::unwind::session::start(
        &prog,
        &settings,
        &mut sideband,
        scope.as_deref(),
        child.as_ref().map(|c| c.pid),
    )?;
    signals::install();
    let started = Instant::now();
    if let Some(c) = child.as_mut() {
        c.start()?;
    }

    // Record until the duration, a signal, or the target's end.
    let progress = progress_bar(settings.duration);
    // The side band is read every 10 ms, so a new process's unwind tables
    // and mappings are in place soon after it maps them; the rest per TICK.
    let ticker = crossbeam_channel::tick(TICK / 10);
    let mut ticks = 0u64;
    let mut exit_status = None;
    let mut interrupted = false;
    loop {
        let _ = ticker.recv();
        sideband.drain();
        ticks += 1;
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
        if signals::stop_requested() {
            interrupted = true;
            break;
        }
        if let Some(c) = &child {
            if let Some(st) = c.try_wait() {
                exit_status = Some(st);
                break;
            }
        }
        if settings.target.exited() {
            break;
        }
        if settings.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if ticks % 10 != 0 {
            continue;
        }
        // Drains the kernel maps before they fill; also the progress count.
        let samples = prog.tick().map(|s| s.counted).unwrap_or(0);
        if !progress.is_hidden() {
            progress.set_position(started.elapsed().as_millis() as u64);
            progress.set_message(format!("{samples} samples"));
        }
    }
    let elapsed = started.elapsed();
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

    // A command still running when the profile ends is asked to stop, so its
    // status can be reported (as perf stat does with --timeout).
    if let Some(c) = &child {
        if exit_status.is_none() {
            exit_status = Some(c.stop());
        }
    }

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
        symbols::symbolize_with(&symbolizer, &raw, &sideband.index, settings.unknown_style);
    let t_sym = Instant::now();
    let lines = folded::lines(&stacks, &settings.folded);
    let mismatch = crate::collect::check_totals(&stats, drained_total, &lines);
    if settings.verbose {
        let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
        eprintln!(
            "bprof: after recording: maps read in {:.1} ms, {} unique frames symbolized in {:.1} ms, first output at {:.1} ms",
            ms(t_end, t_maps),
            sym_stats.unique_frames,
            ms(t_maps, t_sym),
            ms(t_end, Instant::now())
        );
    }
    // Files first, then stdout: a closed pipe (`| head`) must not cost them.
    // With nothing to write, an existing file is left as it was.
    let mut not_written = Vec::new();
    if let Some(f) = folded_file {
        if lines.is_empty() {
            not_written.push(f.path().to_path_buf());
        } else {
            f.commit(|w| folded::write(w, &lines))?;
        }
    }
    let what = settings.target.describe();
    let mut no_svg = None;
    if let Some(f) = svg_file {
        let total: u64 = lines.iter().map(|(_, c)| c).sum();
        let (kind, subtitle, unit) = match mode {
            Mode::OnCpu => (
                "",
                format!("{:.2} s, {event} at {}, {} samples", elapsed.as_secs_f64(), settings.rate, stats.counted),
                "samples",
            ),
            Mode::OffCpu => (
                " off-CPU time",
                format!("{:.2} s, {:.3} s blocked (counts are microseconds)", elapsed.as_secs_f64(), total as f64 / 1e6),
                "us",
            ),
            Mode::Wall => (
                " wall-clock time",
                format!(
                    "{:.2} s, on-CPU {event} at {} plus off-CPU time, frames ending in [off-cpu] are blocked (counts are microseconds)",
                    elapsed.as_secs_f64(),
                    settings.rate
                ),
                "us",
            ),
        };
        let subtitle = match counts.as_ref().and_then(counts_text) {
            Some(c) => format!("{subtitle}; {c}"),
            None => subtitle,
        };
        let opts = svg::SvgOptions {
            title: format!("bprof{kind}: {what}"),
            subtitle: Some(subtitle),
            count_name: unit.into(),
        };
        if lines.is_empty() {
            // Told after the summary, which says where the samples went.
            no_svg = Some(f.path().to_path_buf());
        } else {
            f.commit(|w| svg::write(w, &lines, &opts).map_err(io::Error::other))?;
        }
    }
    if settings.folded_stdout {
        folded::write(&mut io::stdout().lock(), &lines)
            .context("writing folded stacks to stdout")?;
    }
    if !settings.folded_stdout && settings.folded_file.is_none() && settings.svg.is_none() {
        report::write(&mut io::stdout().lock(), &stacks, None).context("writing the report")?;
    }

    sideband.index.jit.report(settings.verbose);
    let refused = symbols::refused_files();
    if settings.verbose {
        for (path, why) in &refused {
            eprintln!("bprof: skipped {} as malformed: {why}", path.display());
        }
    } else if !refused.is_empty() {
        eprintln!(
            "bprof: {} files skipped as malformed; their frames show module+offset (-v names them)",
            refused.len()
        );
    }
    summary(
        &stats,
        &sym_stats,
        stacks.len(),
        sideband.index.lost,
        event,
        &settings,
        elapsed,
        interrupted,
    );
    if settings.verbose {
        eprintln!("bprof: {}", crate::collect::describe(&drains, &stats));
        if let Some(u) = &unwinder {
            eprintln!("{}", u.report());
            eprintln!("{}", crate::unwind::describe_ends(&stats));
        }
    }
    if drains.unresolved > 0 {
        eprintln!(
            "bprof: {} stacks had no content left to read; those samples show [Missed ... Stack]",
            drains.unresolved
        );
    }
    if let Some(text) = counts.as_ref().and_then(counts_text) {
        eprintln!("bprof: {text}");
    }
    let exit_code = match exit_status {
        Some(st) => {
            eprintln!("bprof: command exited with {}", st.describe());
            st.as_shell_code()
        }
        None => 0,
    };
    if let Some(m) = mismatch {
        bail!("{m}");
    }
    for path in not_written {
        eprintln!(
            "bprof: no samples were recorded, so nothing was written to {} (left as it was)",
            path.display()
        );
    }
    if let Some(path) = no_svg {
        bail!(
            "no samples were recorded, so no flame graph was written to {}",
            path.display()
        );
    }
    Ok(Outcome { exit_code })
}

/// Joins the shared counters for the profile's target; `None` (after saying
/// why, unless it is just a missing PMU) when they cannot count here.
fn start_counts<'obj>(
    obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    settings: &Settings,
    child: Option<u32>,
) -> Option<StatProgram<'obj>> {
    try_start_counts(obj, settings, child).unwrap_or_else(|e| {
        eprintln!("bprof: cycles and instructions not counted: {e:#}");
        None
    })
}

fn try_start_counts<'obj>(
    obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    settings: &Settings,
    child: Option<u32>,
) -> Result<Option<StatProgram<'obj>>> {
    let specs = EventSpec::parse_list("cycles,instructions")?;
    let online = events::online_cpus()?;
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

/// "N cycles, M instructions, X insn per cycle" for what could be counted.
fn counts_text(c: &crate::stat::Counts) -> Option<String> {
    let (cycles, insns) = (c.first().copied().flatten()?, c.get(1).copied().flatten()?);
    let (cy, ins) = (cycles.scaled(), insns.scaled());
    let ipc = if cy > 0 {
        format!(", {:.2} insn per cycle", ins as f64 / cy as f64)
    } else {
        String::new()
    };
    Some(format!(
        "{} cycles, {} instructions{ipc}",
        thousands(cy),
        thousands(ins)
    ))
}

#[allow(clippy::too_many_arguments)]
fn summary(
    stats: &Stats,
    sym: &SymbolStats,
    unique: usize,
    sideband_lost: u64,
    event: Event,
    settings: &Settings,
    elapsed: Duration,
    interrupted: bool,
) {
    // Over the samples, as a user sees them in the graph, not over the
    // distinct addresses.
    let unknown_pct = if sym.sampled_frames == 0 {
        0.0
    } else {
        100.0 * sym.sampled_unknown as f64 / sym.sampled_frames as f64
    };
    let mut e = io::stderr().lock();
    let interrupted = if interrupted { ", interrupted" } else { "" };
    let what = settings.target.describe();
    let secs = elapsed.as_secs_f64();
    match settings.program.mode {
        Mode::OnCpu => {
            let _ = writeln!(
                e,
                "bprof: {} samples of {what} over {secs:.2} s ({event}, {}){interrupted}, {} lost, {unique} unique stacks, {unknown_pct:.1}% of sampled frames unknown",
                stats.counted, settings.rate, stats.lost(),
            );
        }
        Mode::OffCpu | Mode::Wall => {
            let _ = writeln!(
                e,
                "bprof: {} off-CPU blocks{} of {what} over {secs:.2} s{interrupted}, {} lost, {unique} unique stacks, {unknown_pct:.1}% of sampled frames unknown",
                stats.blocks_counted,
                if settings.program.mode == Mode::Wall { format!(" and {} on-CPU samples ({event}, {})", stats.counted.saturating_sub(stats.blocks_counted), settings.rate) } else { String::new() },
                stats.lost(),
            );
            if stats.blocks_outside > 0 {
                let _ = writeln!(
                    e,
                    "bprof: {} blocks outside --min-block/--max-block ignored",
                    stats.blocks_outside
                );
            }
        }
    }
    if !settings.program.filter.is_empty() {
        let _ = writeln!(e, "bprof: {} samples dropped by filter", stats.filtered);
    }
    if stats.count_map_full > 0 {
        let _ = writeln!(
            e,
            "bprof: {} samples lost: the count map was full (raise --stack-storage-size)",
            stats.count_map_full
        );
    }
    if stats.kern_stack_lost + stats.user_stack_lost > 0 {
        let _ = writeln!(
            e,
            "bprof: {} kernel and {} user stacks lost to a full stack map or hash collisions (raise --stack-storage-size); those samples show [Missed ... Stack]",
            stats.kern_stack_lost, stats.user_stack_lost
        );
    }
    if stats.no_stack > 0 {
        let _ = writeln!(e, "bprof: {} samples had no usable stack", stats.no_stack);
    }
    if sideband_lost > 0 {
        let _ = writeln!(
            e,
            "bprof: {sideband_lost} mmap records lost; some exited processes may show [unknown]"
        );
    }
    if settings.verbose {
        let _ = writeln!(
            e,
            "bprof: program runs {}, idle skipped {}, other processes {}, filtered {}, user stacks from the cache {}",
            stats.samples, stats.idle, stats.not_target, stats.filtered, stats.user_stack_cached
        );
    }
}
