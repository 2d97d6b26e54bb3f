//! One profiling session, stage by stage: target and events → BPF programs →
//! maps → stacks → symbols → outputs.

use std::io::{self, IsTerminal, Write};
use std::mem::MaybeUninit;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use blazesym::symbolize::Symbolizer;
use indicatif::{ProgressBar, ProgressStyle};

use crate::bpf::counting::{Scope, StatProgram};
use crate::bpf::maps::TargetFrom;
use crate::bpf::profile::ProfileProgram;
use crate::bpf::shared_counters::{Shared, DEFAULT_PIN_DIR};
use crate::collect::sideband::Sideband;
use crate::collect::Collector;
use crate::events::counting::EventSpec;
use crate::events::sampling::{self, Event};
use crate::output::folded;
use crate::output::stat::cycles_text;
use crate::output::summary::{Summary, Unnamed};
use crate::pyframes::tracker::Tracker;
use crate::session::outputs::{write_outputs, Files, Recorded};
use crate::session::periodic::Periodic;
use crate::session::runner::{self, End, Runner};
pub use crate::session::settings::ProfileSettings;
use crate::symbolize;
use crate::unwind::Unwinder;

const TICK: Duration = Duration::from_millis(100);
/// How long what is queued for an OTLP receiver may take to send at the
/// end, however the profile ended (Ctrl-C and SIGTERM included).
const OTLP_FLUSH: Duration = Duration::from_secs(5);
/// The longest wait between two checks of the kernel maps (see drain_tick).
const MAX_TICK: Duration = Duration::from_secs(2);
/// ... while a progress bar on a terminal moves with the checks.
const BAR_TICK: Duration = Duration::from_secs(1);

/// How often the kernel maps are checked for filling while recording:
/// every TICK, or up to MAX_TICK apart when on-CPU samples at a known rate
/// cannot fill a quarter of a map between two checks (a sample adds at most
/// one key and one stack of each kind). A wakeup is dear on a VM: ten a
/// second would be most of bprof's CPU while recording. Off-CPU counts
/// come at the scheduler's rate, and `--every` and `-L` (threads, looked up
/// in /proc at the checks) keep the short tick. `bar`: a progress bar on a
/// terminal, which moves at each check: then at most BAR_TICK apart.
fn drain_tick(settings: &ProfileSettings, ncpus: usize, bar: bool) -> Duration {
    let hz = match settings.rate {
        sampling::Rate::Frequency(hz) => hz,
        sampling::Rate::Period(_) => return TICK,
    };
    if settings.program.mode != crate::events::Mode::OnCpu
        || settings.every.is_some()
        || !settings.target.tids.is_empty()
    {
        return TICK;
    }
    let per_sec = (hz * ncpus as u64).max(1) as f64;
    let fill = f64::from(settings.program.stack_storage_size) / (4.0 * per_sec);
    let max = if bar { BAR_TICK } else { MAX_TICK };
    Duration::from_secs_f64(fill.min(max.as_secs_f64())).max(TICK)
}

/// What a finished session reports.
#[derive(Debug)]
pub struct Outcome {
    /// bprof's exit code (the command's, when there was one).
    pub exit_code: i32,
}

/// Runs one profile from start to written outputs.
// Long on purpose: the profile's stages in order (load, record, drain, symbolize, write, report); each is a call, the rest hands values between them.
pub fn run(mut settings: ProfileSettings) -> Result<Outcome> {
    settings.say_notes();
    crate::bpf::preflight::check()?;
    let fallbacks = settings.fit_to_kernel()?;
    crate::symbolize::debuginfod::configure(settings.debuginfod_cache_size)?;
    let files = Files::create(&settings)?;
    // The sending thread, before anything records: it never holds up
    // recording, whatever the receiver does.
    let mut delivery = settings
        .otlp
        .clone()
        .map(crate::output::otlp::Delivery::start)
        .transpose()
        .context("starting the OTLP sender")?;
    let cpus = if settings.target.cpus.is_empty() {
        sampling::online_cpus()?
    } else {
        settings.target.cpus.clone()
    };
    let mut obj = [MaybeUninit::uninit(), MaybeUninit::uninit()];
    let mut prog = ProfileProgram::load(&mut obj, &settings.program, fallbacks)?;
    let mut collector = Collector::for_program(&prog, &settings.program)?;
    if settings.verbose {
        eprintln!("bprof: kernel types for CO-RE {}", prog.core_btf());
        let used = fallbacks.describe();
        if !used.is_empty() {
            eprintln!("bprof: fallbacks: {used}");
        }
    }
    // Folded stacks and flame graphs show no thread ids (pprof does).
    collector.merge_threads(
        (settings.folded_stdout || settings.folded_file.is_some() || settings.svg.is_some())
            && settings.pprof.is_none()
            && settings.otlp.is_none(),
    );
    // A long profile's aggregate waits on disk between drains: under a
    // churn of short processes nearly every sample is a new key.
    collector.spill_drains(settings.every.is_none());
    // The command is forked first but held before exec, so its PID is a
    // target before it runs a single instruction; it counts from its exec
    // on (perf's enable_on_exec), not during bprof's own pre-exec code.
    let mut runner = Runner::new(
        &settings.target,
        settings.duration,
        settings.ready_file.as_deref(),
    )?;
    if let Some(pid) = runner.traced_pid() {
        prog.add_tgid(pid, TargetFrom::Exec)?;
    }
    let mut sideband = Sideband::open(&cpus)?;
    sideband.index.jit.max_size = settings.max_perf_map_size;
    // Source lines for pprof; inlined functions unless --no-inline.
    let symbolizer = symbolize::symbolizer_with(settings.code_info(), settings.inlined);
    let (recorded, mut periodic) = record(
        &settings,
        &cpus,
        &mut runner,
        &mut prog,
        &mut collector,
        &mut sideband,
        &symbolizer,
        &mut delivery,
    )?;

    // Maps → stacks.
    let t_end = Instant::now();
    let (stats, mut raw) = collector.finish(&prog)?;
    if let Some(p) = periodic.as_mut() {
        // The last interval, however short.
        let raw = std::mem::take(&mut raw);
        p.write(
            &settings,
            recorded.event,
            &mut sideband.index,
            raw,
            t_end,
            delivery.as_mut(),
        )?;
    }
    let drains = collector.stats;
    let drained_total = collector.total();
    symbolize::keep_bpf_names(&raw);
    let bpf_time = prog.bpf_time();
    drop(prog);
    drop(collector);
    let t_maps = Instant::now();

    // Stacks → symbols → outputs.
    sideband.index.jit.prepare(&raw);
    let (stacks, sym_stats, frames) = symbolize::symbolize_frames(
        &symbolizer,
        settings.code_info(),
        Some(settings.inlined),
        &raw,
        &sideband.index,
        settings.unknown_style,
    );
    let t_sym = Instant::now();
    // The one profile of a run without intervals; then what is queued is
    // sent, within OTLP_FLUSH.
    let otlp = delivery.map(|mut d| {
        if periodic.is_none() {
            let meta = crate::session::outputs::otlp_meta(
                &settings,
                recorded.event,
                recorded.started_at,
                recorded.elapsed,
                &stacks,
            );
            crate::session::outputs::push_otlp(&mut d, &settings, &meta, &stacks, &frames, 1);
        }
        d.finish(OTLP_FLUSH)
    });
    let lines = folded::lines(&stacks, &settings.folded);
    let mismatch = match &periodic {
        // Every interval's files together.
        Some(p) => crate::collect::check_totals(&stats, drained_total, &[(String::new(), p.total)]),
        None => crate::collect::check_totals(&stats, drained_total, &lines),
    };
    let (unique_stacks, sym_stats) = match &periodic {
        Some(p) => (p.stacks, p.sym.clone()),
        None => (stacks.len(), sym_stats),
    };
    let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
    if settings.verbose {
        eprintln!(
            "bprof: after recording: maps read in {:.1} ms, {} unique frames symbolized in {:.1} ms, first output at {:.1} ms",
            ms(t_end, t_maps),
            sym_stats.unique_frames,
            ms(t_maps, t_sym),
            ms(t_end, Instant::now())
        );
        match bpf_time {
            // The sample program alone ran stats.samples times: fewer timed
            // runs mean the kernel timed only part of the profile.
            Some((_, runs)) if runs < stats.samples => eprintln!(
                "bprof: its BPF programs were timed for part of the profile only ({runs} runs of {} or more; sysctl kernel.bpf_stats_enabled=1 before it starts)",
                stats.samples
            ),
            Some((ns, runs)) => eprintln!(
                "bprof: its BPF programs ran {runs} times, {:.1} ms in the kernel ({:.0} ns a run)",
                ns as f64 / 1e6,
                ns as f64 / runs.max(1) as f64
            ),
            None => eprintln!(
                "bprof: its BPF programs' time is not known (sysctl kernel.bpf_stats_enabled=1 has the kernel time them)"
            ),
        }
        match sym_stats.kallsyms_live {
            Some(true) if sym_stats.live_kallsyms_frames.is_empty() => eprintln!(
                "bprof: kernel frames named from the live /proc/kallsyms (no per-boot copy of the core kernel's symbols)"
            ),
            Some(true) => eprintln!(
                "bprof: kernel frames named from the live /proc/kallsyms, for addresses outside the core text and the BPF programs: {}",
                sym_stats
                    .live_kallsyms_frames
                    .iter()
                    .map(|(a, name)| format!("{a:#x} ({})", crate::names::clean(name)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(false) => eprintln!(
                "bprof: kernel frames named from this boot's copy of the core kernel's symbols and the BPF programs"
            ),
            None => {}
        }
        let files = &sideband.index.files;
        eprintln!(
            "bprof: side band: {} mapping, fork, exec and exit records read in {:.0} ms, {} of them other processes' (skipped); mapped files: {} opened as their processes see them, {} mappings of files already open, {} mappings whose file could not be reached, {} kept open{}, learned in {:.0} ms",
            sideband.index.records,
            sideband.index.drain_time.as_secs_f64() * 1e3,
            sideband.index.skipped,
            files.stats.opened,
            files.stats.reused,
            files.stats.unreachable,
            files.kept(),
            match files.stats.not_kept {
                0 => String::new(),
                n => format!(" ({n} not: past the descriptor limit)"),
            },
            files.stats.time.as_secs_f64() * 1e3,
        );
    }
    let summary = Summary {
        stats,
        symbols: sym_stats,
        unique_stacks,
        sideband_lost: sideband.index.lost,
        sideband_records: sideband.index.records,
        sideband_skipped: sideband.index.skipped,
        event: recorded.event,
        rate: settings.rate,
        mode: settings.program.mode,
        what: settings.target.describe(),
        filtered: !settings.program.filter.is_empty(),
        elapsed: recorded.elapsed,
        interrupted: recorded.end == End::Signal,
        first_output_ms: ms(t_end, Instant::now()),
        // Reported only when every run was timed (see the -v line).
        bpf: bpf_time.filter(|&(_, runs)| runs >= stats.samples),
        otlp: otlp.map(|t| {
            (
                settings
                    .otlp
                    .as_ref()
                    .map(|o| o.endpoint.to_string())
                    .unwrap_or_default(),
                t,
            )
        }),
        // With --every, each interval's stacks went with its files.
        unnamed: Unnamed::of(&stacks, &frames),
    };
    let unwritten = write_outputs(
        &settings, files, &summary, &stacks, &frames, &lines, &recorded,
    )?;

    sideband.index.jit.report(settings.verbose);
    report_end(&settings, &summary, &recorded, periodic.as_ref(), &drains)?;
    let outputs = unwritten.report();
    let exit_code = runner::exit_code(recorded.end, recorded.status, false);
    if let Some(m) = mismatch {
        bail!("{m}");
    }
    outputs?;
    if let Some(n) = periodic.as_ref().map(|p| p.unwritten).filter(|&n| n > 0) {
        bail!("{n} interval files could not be written (said above as they happened)");
    }
    if let Some(t) = otlp.filter(|t| t.lost() > 0) {
        bail!(
            "{} of {} OTLP profiles were not delivered (see the OTLP line above)",
            t.lost(),
            t.queued
        );
    }
    Ok(Outcome { exit_code })
}

/// Everything said on stderr after the outputs: refused files, periodic
/// files, the summary, drains, unresolved stacks and the cycle counts.
fn report_end(
    settings: &ProfileSettings,
    summary: &Summary,
    recorded: &Recorded,
    periodic: Option<&Periodic>,
    drains: &crate::collect::DrainStats,
) -> Result<()> {
    report_refused(settings.verbose);
    if let Some(p) = periodic {
        let empty = match p.empty {
            0 => String::new(),
            n => format!("; {n} intervals had no samples and no files"),
        };
        let unwritten = match p.unwritten {
            0 => String::new(),
            n => format!(
                "; {n} could not be written ({} samples not in them)",
                p.unwritten_samples
            ),
        };
        eprintln!("bprof: {} files written{unwritten}{empty}", p.files);
    }
    // Built whole, then written once: stderr is unbuffered, and the report
    // would write each formatted piece with a syscall of its own.
    let mut text = Vec::new();
    summary.write(&mut text, settings.verbose)?;
    io::stderr().write_all(&text)?;
    if settings.verbose {
        eprintln!(
            "bprof: {}",
            crate::collect::describe(drains, &summary.stats)
        );
        if let Some(u) = &recorded.unwind {
            eprintln!("{u}");
            eprintln!("{}", crate::unwind::describe_ends(&summary.stats));
        }
        if let Some(t) = &recorded.python {
            eprintln!("{}", crate::pyframes::tracker::describe(&summary.stats, t));
        }
    }
    if recorded.unwind_full > 0 {
        eprintln!(
            "bprof: {} files' unwind tables did not fit the table budget (--unwind-rows); their frames were walked by frame pointer",
            recorded.unwind_full
        );
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
    Ok(())
}

/// Attaches everything, runs the target and records until the end; leaves
/// the programs detached and the command stopped. Returns what was
/// recorded and, with `--every`, the intervals written so far.
// Long on purpose: attach, run and detach must stay in this order around the tick loop; splitting would pass most of its locals around.
// Each argument is a stage's state the loop drives; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
fn record(
    settings: &ProfileSettings,
    cpus: &[u32],
    runner: &mut Runner,
    prog: &mut ProfileProgram,
    collector: &mut Collector,
    sideband: &mut Sideband,
    symbolizer: &Symbolizer,
    delivery: &mut Option<crate::output::otlp::Delivery>,
) -> Result<(Recorded, Option<Periodic>)> {
    // Cycles and instructions of the same target, through the counters
    // shared with every other bprof session.
    let mut stat_obj = MaybeUninit::uninit();
    let counter = if settings.counts {
        start_counts(&mut stat_obj, settings, runner.traced_pid())
    } else {
        None
    };
    let (event, mut unwinder, mut python, sampling) = arm(
        settings,
        cpus,
        runner,
        prog,
        sideband,
        symbolizer,
        counter.is_some(),
    )?;
    runner.start()?;
    let deadline = settings
        .duration
        .map(|d| sampling::Deadline::new(sampling, Instant::now() + d));
    let started_at = SystemTime::now();
    let mut periodic = settings.every.map(|every| {
        Periodic::new(
            every,
            Instant::now(),
            started_at,
            settings.code_info(),
            settings.inlined,
        )
    });

    // Record until the duration, a signal, or the target's end. The side
    // band is read as soon as records come in (at most every 10 ms), so a
    // new process's unwind tables and mappings are in place soon after it
    // maps them, and an idle profile sleeps; the maps are checked for
    // filling per drain_tick.
    let progress = progress_bar(settings.duration, !settings.target.command.is_empty());
    let mut wake = sideband.wake_fds();
    wake.extend(python.as_ref().map(|t| t.wake_fd()));
    let tick = drain_tick(settings, cpus.len(), !progress.is_hidden());
    let matches_tgids = settings.program.matches_tgids();
    let end = runner.run_woken(tick, TICK / 10, &wake, |full, last| {
        sideband.drain_for(prog, matches_tgids);
        if let Some(u) = unwinder.as_mut() {
            crate::session::unwinding::take_new(u, prog, sideband);
        }
        if let Some(t) = python.as_mut() {
            crate::session::python::take_new(t, prog, sideband);
        }
        if let Some(p) = periodic.as_mut().filter(|p| !last && p.due(Instant::now())) {
            let raw = collector.interval(prog)?;
            p.write(
                settings,
                event,
                &mut sideband.index,
                raw,
                Instant::now(),
                delivery.as_mut(),
            )?;
        }
        if !last && full {
            // Drains the kernel maps before they fill; also the progress count.
            let samples = collector.tick(prog).map(|s| s.counted).unwrap_or(0);
            if !progress.is_hidden() {
                progress.set_position(runner.elapsed().as_millis() as u64);
                progress.set_message(format!("{samples} samples"));
            }
        }
        Ok(())
    })?;
    // The samples ended at the deadline, however late this thread got here.
    drop(deadline);
    let elapsed = match (end, settings.duration) {
        (End::Duration, Some(d)) => d.min(runner.elapsed()),
        _ => runner.elapsed(),
    };
    let counts = counter.and_then(|c| match c.sync().and_then(|_| c.read()) {
        Ok(blocks) => blocks.into_iter().next(),
        Err(e) => {
            eprintln!("bprof: reading cycles and instructions failed: {e:#}");
            None
        }
    });
    prog.detach();
    progress.finish_and_clear();
    sideband.drain_for(prog, matches_tgids);
    // The code objects announced up to the last sample.
    if let Some(t) = python.as_mut() {
        crate::session::python::take_new(t, prog, sideband);
    }
    let recorded = Recorded {
        end,
        elapsed,
        event,
        counts: counts.as_deref().and_then(cycles_text),
        status: runner.finish(end),
        unwind_full: unwinder.as_ref().map_or(0, |u| u.full()),
        unwind: unwinder.map(|u| u.report()),
        started_at,
        python: python.map(|t| t.stats),
    };
    Ok((recorded, periodic))
}

/// What [`arm`] returns: the event sampled, the unwinder, the Python
/// tracker and the sampling events' duplicates.
pub(crate) type Armed = (
    Event,
    Option<Unwinder>,
    Option<Tracker>,
    Vec<std::os::fd::OwnedFd>,
);

/// What every profiling session (a profile, `bprof top`) does between
/// loading its programs and starting the command: reads the targets'
/// mappings, loads their unwind tables, then attaches. Sampling starts once
/// the tables are loaded: a sample taken before would be walked without
/// them; and the Python processes running. Returns the event sampled, the
/// unwinder (with `dwarf`), the Python tracker (unless `--no-python`) and
/// duplicates of the sampling events' descriptors (see
/// [`sampling::Deadline`]).
pub(crate) fn arm(
    settings: &ProfileSettings,
    cpus: &[u32],
    runner: &Runner,
    prog: &mut ProfileProgram,
    sideband: &mut Sideband,
    symbolizer: &Symbolizer,
    counting: bool,
) -> Result<Armed> {
    // After the side band is open, so no process falls between the two.
    let scope = snapshot_scope(settings, runner.traced_pid());
    sideband.snapshot(scope.as_deref());
    if let Some(pid) = runner.traced_pid() {
        // Its user and perf map, should it be short-lived.
        sideband.index.jit.note_process(pid, true);
    }
    let unwinder = crate::session::unwinding::start(
        prog,
        settings,
        sideband,
        scope.as_deref(),
        runner.traced_pid(),
    )?;
    let python = crate::session::python::start(prog, settings, sideband, scope.as_deref())?;
    // The unwinder and Python have read the start's mappings.
    sideband.index.snapshot = Default::default();
    let (event, sampling) = attach(settings, cpus, prog, symbolizer, counting)?;
    Ok((event, unwinder, python, sampling))
}

/// Opens the sampling events and attaches every program; returns the
/// event actually sampled (cpu-clock where there is no PMU) and
/// duplicates of the events' descriptors.
fn attach(
    settings: &ProfileSettings,
    cpus: &[u32],
    prog: &mut ProfileProgram,
    symbolizer: &Symbolizer,
    counting: bool,
) -> Result<(Event, Vec<std::os::fd::OwnedFd>)> {
    let mode = settings.program.mode;
    let (event, fds) = if mode.on_cpu() {
        sampling::open_sampling(
            settings.event,
            settings.rate,
            cpus,
            settings.program.include_idle,
        )?
    } else {
        (settings.event, Vec::new())
    };
    // One line for everything the missing PMU changes, and only where a
    // hardware event was asked for or defaulted to: the cycle counts that
    // accompany a profile are not worth a line of their own.
    let mut no_pmu = Vec::new();
    if event != settings.event {
        no_pmu.push(format!("sampling {event} instead of {}", settings.event));
    }
    if settings.counts && !counting {
        no_pmu.push("cycles and instructions not counted".to_string());
    }
    if mode.on_cpu() && settings.event.is_hardware() && !no_pmu.is_empty() {
        eprintln!("bprof: no hardware PMU here: {}", no_pmu.join("; "));
    }
    let dups = fds
        .iter()
        .map(|fd| fd.try_clone())
        .collect::<io::Result<Vec<_>>>()
        .context("duplicating the sampling events' descriptors")?;
    prog.attach(fds, settings.program.follow_children)?;
    if prog.layout_gens_missing() {
        eprintln!(
            "bprof: the syscall raw tracepoints would not attach: on this kernel every user stack takes the build-ID walk, uncached"
        );
    }
    if let (Some(e), true) = (prog.learners_missing(), settings.verbose) {
        eprintln!(
            "bprof: mappings are not learned at mmap and exec ({e:#}): a process's first ms may walk before its mappings are known"
        );
    }
    if mode.off_cpu() {
        prog.attach_offcpu()?;
        // sched_switch calls one attached program straight (a static
        // call) and several through its iterator: one frame more. The skip
        // is counted without that frame, and the program drops it where it
        // is found.
        let iterator = symbolize::kernel_function_range("__traceiter_sched_switch");
        let skip = match settings.stack_skip {
            Some(n) => n,
            None => {
                let ips = prog.calibration_stack()?;
                let skip = measure_skip(&ips, symbolizer, settings.verbose)?;
                let inside = |ip: &u64| iterator.is_some_and(|(lo, hi)| (lo..hi).contains(ip));
                skip - ips.iter().take(skip as usize).any(inside) as u32
            }
        };
        prog.arm_offcpu(skip, iterator.filter(|_| settings.stack_skip.is_none()))?;
        if settings.verbose {
            let how = if settings.stack_skip.is_some() {
                "--stack-skip"
            } else {
                "measured"
            };
            eprintln!("bprof: off-CPU kernel stacks skip {skip} BPF/tracepoint frames ({how})");
        }
    }
    Ok((event, dups))
}

/// How many BPF and tracepoint frames start the off-CPU program's kernel
/// stacks, from one raw stack of it (`ips`): the first named frame outside
/// BPF/tracing is where real stacks begin (JIT frames without a kallsyms
/// name count as BPF).
fn measure_skip(ips: &[u64], symbolizer: &Symbolizer, verbose: bool) -> Result<u32> {
    let names = symbolize::kernel_names(symbolizer, ips);
    // BPF JIT images live outside the kernel text and kallsyms may not
    // name them (or name them after a nearby data symbol): a real frame
    // is in the text and not a BPF or tracing frame.
    let text = symbolize::kernel_text_range();
    let skip = ips
        .iter()
        .zip(&names)
        .position(|(&ip, n)| {
            text.is_none_or(|(lo, hi)| (lo..hi).contains(&ip))
                && n.as_deref().is_some_and(|n| !symbolize::is_bpf_frame(n))
        })
        .context(
            "measuring the stack skip: the raw stack held only BPF frames (use --stack-skip N)",
        )?;
    if verbose {
        for (i, (ip, n)) in ips.iter().zip(&names).enumerate().take(skip + 2) {
            let mark = if i < skip { "skipped" } else { "kept" };
            eprintln!(
                "bprof:   raw off-CPU frame {i}: {ip:#x} {} ({mark})",
                n.as_deref().unwrap_or("[unknown]")
            );
        }
    }
    Ok(skip as u32)
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

/// Files refused as malformed: named with -v, counted otherwise; and the
/// names shown mangled because demangling them was unbounded (-v).
fn report_refused(verbose: bool) {
    let refused = symbolize::refused_files();
    let undemangled = symbolize::undemangled();
    if verbose && undemangled > 0 {
        eprintln!(
            "bprof: {undemangled} names shown mangled: demangled, they would have been too long to show"
        );
    }
    if verbose {
        for (path, why) in &refused {
            eprintln!(
                "bprof: skipped {} as malformed: {}",
                crate::names::path(path),
                crate::names::clean(why)
            );
        }
    } else if !refused.is_empty() {
        eprintln!(
            "bprof: {} files skipped as malformed; their frames show module+offset (-v names them)",
            refused.len()
        );
    }
    let without = symbolize::without_code_info();
    if !without.is_empty() {
        let names: Vec<String> = without.iter().map(|p| crate::names::path(p)).collect();
        eprintln!(
            "bprof: {} files named without inlined functions: their debug information is past the {} MiB read for them per profile ({})",
            without.len(),
            symbolize::MAX_CODE_INFO_DWARF >> 20,
            names.join(", ")
        );
    }
    let sections = symbolize::skipped_sections();
    if verbose {
        for (path, why) in &sections {
            eprintln!(
                "bprof: read {} without its malformed sections (its symbol tables still name its functions): {}",
                crate::names::path(path),
                crate::names::clean(why)
            );
        }
    } else if !sections.is_empty() {
        eprintln!(
            "bprof: {} files read without their malformed sections (-v names them)",
            sections.len()
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
    // No PMU (most VMs): say so without loading and verifying the counting
    // program, which would count nothing.
    let first = online.first().copied().unwrap_or(0);
    let unsupported = |s: &EventSpec| {
        s.open_on_cpu(first)
            .is_err_and(|e| crate::events::not_supported(&e))
    };
    if specs.iter().all(unsupported) {
        return Ok(None);
    }
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

/// The progress line on stderr, when it is a terminal and no command runs:
/// a command writes to the terminal bprof's stderr is (it inherits it),
/// and its lines must not share one with the progress line.
fn progress_bar(duration: Option<Duration>, command: bool) -> ProgressBar {
    if !io::stderr().is_terminal() || command {
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
