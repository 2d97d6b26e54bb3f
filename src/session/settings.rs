//! Checking a profiling request: the command line becomes validated
//! [`ProfileSettings`] before anything is loaded, so bad input is one line and
//! exit status 2.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::bpf::abi::filter_entry;
use crate::bpf::profile::{Mode, ProfileOptions};
use crate::cli::{ProfileArgs, TargetArgs};
use crate::events::sampling::{self, Event, Rate};
use crate::filter::Term;
use crate::output::folded;
use crate::target::{self, Target};

/// Frequency for a process, thread or command when neither -F nor -c is
/// given: enough samples in a few seconds of one busy thread for shares
/// that hold still; off the round number, so sampling does not move in
/// step with the target's own timers.
pub const DEFAULT_HZ_PROCESS: u64 = 999;

/// The same system-wide (`-a`, `-C`, no target): every CPU samples.
pub const DEFAULT_HZ_SYSTEM: u64 = 99;

/// A validated profiling request.
#[derive(Debug, Clone)]
pub struct ProfileSettings {
    /// What to profile.
    pub target: Target,
    /// The event asked for (may fall back to cpu-clock).
    pub event: Event,
    /// Frequency or period.
    pub rate: Rate,
    /// How long; `None` until Ctrl-C or the target exits.
    pub duration: Option<Duration>,
    /// Program configuration.
    pub program: ProfileOptions,
    /// `--stack-skip`: overrides the measured off-CPU skip count.
    pub stack_skip: Option<u32>,
    /// Folded output options.
    pub folded: folded::FoldedOptions,
    /// Print folded stacks to stdout.
    pub folded_stdout: bool,
    /// Write folded stacks here.
    pub folded_file: Option<PathBuf>,
    /// Write the flame graph here.
    pub svg: Option<PathBuf>,
    /// Write a pprof profile here.
    pub pprof: Option<PathBuf>,
    /// `--every`: one set of output files per interval.
    pub every: Option<Duration>,
    /// `--otlp`: where and how profiles are sent.
    pub otlp: Option<crate::output::otlp::Settings>,
    /// `service.name` of every process sent (`--service-name`, or the
    /// command's name); `None`: each process's executable.
    pub service_name: Option<String>,
    /// Created once recording begins (`--ready-file`).
    pub ready_file: Option<PathBuf>,
    /// Write the summary as JSON here (`--stats-json`).
    pub stats_json: Option<PathBuf>,
    /// Extra detail on stderr.
    pub verbose: bool,
    /// Count the target's cycles and instructions through the shared counters.
    pub counts: bool,
    /// Cap on a perf map or jitdump read (`--max-perf-map-size`).
    pub max_perf_map_size: u64,
    /// How frames without a symbol are shown (`--unknown-as-module`).
    pub unknown_style: crate::symbolize::UnknownStyle,
    /// The debuginfod cache's size cap (`--debuginfod-cache-size`).
    pub debuginfod_cache_size: u64,
    /// Python frames show their line (off with `--no-lineno`).
    pub python_lines: bool,
    /// Print every stack (`--stacks`) rather than the functions' table.
    pub stacks_report: bool,
    /// Inlined functions as frames of their own (not `--no-inline`).
    pub inlined: bool,
    /// One-line notes for the user, said before recording (a lowered
    /// rate, an old spelling).
    pub notes: Vec<String>,
}

impl ProfileSettings {
    /// The fallbacks this kernel needs, refused (in one line) when a
    /// feature has none or the options ask what the kernel cannot do.
    pub fn fit_to_kernel(&mut self) -> Result<crate::bpf::kfeatures::Fallbacks> {
        let fallbacks = crate::bpf::kfeatures::Fallbacks::for_profile()?;
        self.program.fit()?;
        Ok(fallbacks)
    }

    /// Says the notes on stderr, one line each.
    pub fn say_notes(&self) {
        for n in &self.notes {
            eprintln!("bprof: {n}");
        }
    }

    /// Whether symbolization reads source lines from debug information:
    /// for pprof's and OTLP's lines, and for inlined functions (which need
    /// them).
    pub fn code_info(&self) -> bool {
        self.pprof.is_some() || self.otlp.is_some() || self.inlined
    }

    /// Whether an output file or stdout's folded stacks were asked for:
    /// without, the table of the hottest functions (or `--stacks`) is
    /// printed.
    pub fn has_output(&self) -> bool {
        self.folded_stdout
            || self.folded_file.is_some()
            || self.svg.is_some()
            || self.pprof.is_some()
            || self.otlp.is_some()
    }
}

fn parse_u64(s: &str, what: &str) -> Result<u64> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| anyhow!("invalid {what} '{s}': expected a positive whole number"))
}

impl ProfileSettings {
    /// Checks the command line; every error is one line for the user.
    pub fn from_cli(cli: ProfileArgs) -> Result<ProfileSettings> {
        let (target, duration) = target_and_duration(&cli.target)?;
        let mut notes = old_spellings(&cli, &target);
        let (rate, lowered) = rate_of(&cli, &target)?;
        notes.extend(lowered);
        let (mode, event) = mode_and_event(&cli, rate)?;
        let blocks = BlockOptions::of(&cli, mode)?;
        let stack_storage_size = stack_storage_size(&cli.stack_storage_size)?;
        let every = outputs(&cli)?;
        let otlp = otlp_settings(&cli)?;
        let service_name = cli
            .service_name
            .as_deref()
            .or_else(|| {
                let argv0 = target.command.first()?;
                std::path::Path::new(argv0).file_name()?.to_str()
            })
            .map(|n| crate::names::clean(n).into_owned());
        let filter = filter_entries(&cli.filter, mode)?;
        let max_perf_map_size = parse_u64(&cli.max_perf_map_size, "--max-perf-map-size")?;
        let debuginfod_cache_size =
            parse_u64(&cli.debuginfod_cache_size, "--debuginfod-cache-size")?;
        let kernel_stacks = !cli.user_stacks_only;
        let user_stacks = !cli.kernel_stacks_only;
        let call_graph = crate::bpf::profile::CallGraph::parse(&cli.call_graph)?;
        let mmap_hook = crate::bpf::profile::MmapHook::parse(&cli.mmap_hook)?;
        let unwind_rows = parse_u64(&cli.unwind_rows, "--unwind-rows")?;
        if unwind_rows == 0 || unwind_rows > crate::unwind::MAX_ROWS as u64 {
            bail!(
                "invalid --unwind-rows '{}': expected 1 to {}",
                cli.unwind_rows,
                crate::unwind::MAX_ROWS
            );
        }
        Ok(ProfileSettings {
            program: ProfileOptions {
                kernel_stacks,
                user_stacks,
                include_idle: cli.include_idle || cli.include_idle_short,
                stack_storage_size,
                tgids: target.pids.clone(),
                tids: target.tids.clone(),
                follow_children: target.traces_command(),
                filter,
                mode,
                kernel_threads: cli.kernel_threads,
                call_graph,
                mmap_hook,
                unwind_rows: unwind_rows as u32,
                min_block_ns: blocks.min_ns,
                max_block_ns: blocks.max_ns,
                // pprof labels and OTLP's container.id name the cgroup.
                cgroups: cli.pprof.is_some() || otlp.is_some(),
                map_totals: false,
                intervals: every.is_some(),
                python: !cli.no_python,
            },
            stack_skip: blocks.stack_skip,
            target,
            event,
            rate,
            duration,
            folded: folded::FoldedOptions {
                delimiter: cli.delimited,
                annotate_kernel: !cli.no_annotations,
                kernel_stacks,
                user_stacks,
                mark_off_cpu: mode == Mode::Wall,
            },
            folded_stdout: cli.folded && cli.output.is_none(),
            folded_file: cli.output,
            svg: cli.svg,
            pprof: cli.pprof,
            every,
            service_name,
            otlp,
            stats_json: cli.stats_json,
            ready_file: cli.target.ready_file.clone(),
            verbose: cli.verbose > 0,
            counts: !cli.no_counts,
            max_perf_map_size,
            debuginfod_cache_size,
            unknown_style: if cli.unknown_as_module {
                crate::symbolize::UnknownStyle::Module
            } else {
                crate::symbolize::UnknownStyle::Offset
            },
            python_lines: !cli.no_lineno,
            stacks_report: cli.stacks,
            inlined: !cli.no_inline,
            notes,
        })
    }
}

/// Notes for the short flags whose meaning changed to perf's: `-a` (all
/// CPUs, once --annotations, now the default) where it changes what is
/// profiled or adds nothing, and `-I` (to be an interval, as in bprof stat).
fn old_spellings(cli: &ProfileArgs, target: &Target) -> Vec<String> {
    let mut notes = Vec::new();
    if target.all && (!target.pids.is_empty() || !target.tids.is_empty()) {
        notes.push(
            "-a means every CPU now (as in perf), not --annotations (kernel frames are marked _[k] by default); with -p or -t it adds nothing".into(),
        );
    } else if target.all && !target.command.is_empty() {
        notes.push(
            "-a means every CPU now (as in perf), not --annotations (kernel frames are marked _[k] by default): profiling every process while the command runs".into(),
        );
    }
    if cli.include_idle_short {
        notes.push(
            "-I is the old spelling of --include-idle and will mean an interval, as in bprof stat and perf".into(),
        );
    }
    notes
}

/// The output files: no two the same; with `--every`, patterns (one file
/// per interval). Returns the interval.
fn outputs(cli: &ProfileArgs) -> Result<Option<Duration>> {
    let named = [
        ("-o", &cli.output),
        ("--svg", &cli.svg),
        ("--pprof", &cli.pprof),
    ];
    for (i, (na, a)) in named.iter().enumerate() {
        for (nb, b) in &named[i + 1..] {
            if let (Some(a), Some(b)) = (a, b) {
                if crate::output::file::same_file(a, b) {
                    bail!(
                        "{na} {} and {nb} {} are the same file",
                        a.display(),
                        b.display()
                    );
                }
            }
        }
    }
    let Some(text) = &cli.every else {
        return Ok(None);
    };
    let every = seconds(text, "--every", 1.0)?;
    if every < Duration::from_secs(1) {
        bail!("invalid --every '{text}': at least 1 second");
    }
    if cli.folded && cli.output.is_none() {
        bail!("--every writes files: give -o FILE (with %t) instead of -f");
    }
    let mut any = cli.otlp.is_some();
    for (name, p) in named {
        if let Some(p) = p {
            crate::output::pattern::check_pattern(name, p)?;
            any = true;
        }
    }
    if !any {
        bail!(
            "--every writes files or sends profiles: give -o, --svg or --pprof with a pattern such as 'out/%t.pb.gz', or --otlp URL"
        );
    }
    Ok(Some(every))
}

/// `--otlp` and its options, checked before anything is loaded; the
/// options need `--otlp`.
fn otlp_settings(cli: &ProfileArgs) -> Result<Option<crate::output::otlp::Settings>> {
    use crate::output::otlp::{endpoint, Settings};
    let Some(url) = &cli.otlp else {
        if !cli.otlp_header.is_empty() || cli.service_name.is_some() {
            bail!("--otlp-header and --service-name need --otlp URL");
        }
        return Ok(None);
    };
    let endpoint = endpoint::parse(url)?;
    let env = [
        "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ]
    .into_iter()
    .find_map(|var| Some((var, std::env::var(var).ok()?)));
    let headers = endpoint::headers(
        env.as_ref().map(|(var, text)| (*var, text.as_str())),
        &cli.otlp_header,
    )?;
    let queue = parse_u64(&cli.otlp_queue, "--otlp-queue")?;
    if queue == 0 || queue > 4096 {
        bail!(
            "invalid --otlp-queue '{}': expected 1 to 4096 profiles",
            cli.otlp_queue
        );
    }
    let timeout = seconds(&cli.otlp_timeout, "--otlp-timeout", 1.0)?;
    let gzip = match cli.otlp_compression.as_str() {
        "gzip" => true,
        "none" => false,
        other => bail!(
            "invalid --otlp-compression '{}': expected gzip or none",
            crate::names::clean(other)
        ),
    };
    if let Some(n) = &cli.service_name {
        if n.trim().is_empty() {
            bail!("invalid --service-name: empty");
        }
    }
    Ok(Some(Settings {
        endpoint,
        headers,
        gzip,
        queue: queue as usize,
        timeout,
        verbose: cli.verbose > 0,
    }))
}

/// `-F` or `-c`, bounded as the kernel bounds them; a frequency above the
/// kernel's limit is lowered to it, as perf does (the note says so).
fn rate_of(cli: &ProfileArgs, target: &Target) -> Result<(Rate, Option<String>)> {
    Ok(match (&cli.frequency, &cli.count) {
        (_, Some(c)) => {
            let n = parse_u64(c, "period")?;
            if n == 0 {
                bail!("invalid period '0': must be at least 1");
            }
            // The kernel refuses periods with the top bit set.
            if n >= 1 << 63 {
                bail!("invalid period '{c}' (-c): must be below 2^63");
            }
            (Rate::Period(n), None)
        }
        (Some(f), None) => {
            let hz = parse_u64(f, "frequency")?;
            if hz == 0 {
                bail!("invalid frequency '{f}': must be at least 1 Hz");
            }
            let max = max_sample_rate();
            if hz > max {
                let note = format!(
                    "-F {hz} is above the kernel's limit (kernel.perf_event_max_sample_rate = {max}): sampling at {max} Hz"
                );
                (Rate::Frequency(max), Some(note))
            } else {
                (Rate::Frequency(hz), None)
            }
        }
        (None, None) => {
            let hz = if target.system_wide() {
                DEFAULT_HZ_SYSTEM
            } else {
                DEFAULT_HZ_PROCESS
            };
            (Rate::Frequency(hz.min(max_sample_rate())), None)
        }
    })
}

/// The kernel's highest sampling frequency, which it may lower on its own
/// when samples take too long.
fn max_sample_rate() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&m| m > 0)
        .unwrap_or(100_000)
}

/// On-CPU, off-CPU or wall, and the event sampled: `--wall` samples time.
fn mode_and_event(cli: &ProfileArgs, rate: Rate) -> Result<(Mode, Event)> {
    let mode = match (cli.off_cpu, cli.wall) {
        (true, _) => Mode::OffCpu,
        (_, true) => Mode::Wall,
        _ => Mode::OnCpu,
    };
    if mode == Mode::OffCpu
        && (cli.frequency.is_some() || cli.count.is_some() || cli.event.is_some())
    {
        bail!("--off-cpu takes no samples, so -F, -c and -e do not apply (use --wall for on-CPU samples and off-CPU time)");
    }
    let event = match (&cli.event, mode) {
        (Some(e), Mode::Wall) => match Event::parse(e)? {
            ev if ev.is_clock() => ev,
            other => {
                bail!("--wall counts time, so it samples cpu-clock or task-clock, not {other}")
            }
        },
        (None, Mode::Wall) => Event::CPU_CLOCK,
        (Some(e), _) => Event::parse(e)?,
        (None, _) => Event::CYCLES,
    };
    if mode == Mode::Wall && matches!(rate, Rate::Period(_)) {
        bail!("--wall needs a frequency (-F), not a period (-c)");
    }
    Ok((mode, event))
}

/// The off-CPU options, which only `--off-cpu` and `--wall` take.
struct BlockOptions {
    min_ns: u64,
    max_ns: u64,
    stack_skip: Option<u32>,
}

impl BlockOptions {
    fn of(cli: &ProfileArgs, mode: Mode) -> Result<BlockOptions> {
        let micros = |s: &Option<String>, what: &str| -> Result<u64> {
            s.as_deref().map_or(Ok(0), |v| {
                parse_u64(v, what).map(|us| us.saturating_mul(1000))
            })
        };
        let min_ns = micros(&cli.min_block, "--min-block")?;
        let max_ns = micros(&cli.max_block, "--max-block")?;
        if max_ns != 0 && max_ns < min_ns {
            bail!("--max-block must not be below --min-block");
        }
        if !mode.off_cpu()
            && (cli.min_block.is_some()
                || cli.max_block.is_some()
                || cli.kernel_threads
                || cli.stack_skip.is_some())
        {
            bail!("--min-block, --max-block, --kernel-threads and --stack-skip need --off-cpu or --wall");
        }
        let stack_skip = match &cli.stack_skip {
            Some(v) => {
                let n = parse_u64(v, "--stack-skip")?;
                if n > 255 {
                    bail!("invalid --stack-skip '{v}': at most 255");
                }
                Some(n as u32)
            }
            None => None,
        };
        Ok(BlockOptions {
            min_ns,
            max_ns,
            stack_skip,
        })
    }
}

/// `--stack-storage-size`, bounded so the maps fit in [`MAX_MAP_BYTES`].
fn stack_storage_size(text: &str) -> Result<u32> {
    let n = parse_u64(text, "--stack-storage-size")?;
    if n == 0 || n.saturating_mul(MAP_BYTES_PER_ENTRY) > MAX_MAP_BYTES {
        bail!(
            "invalid --stack-storage-size '{n}': must be between 1 and {} (each entry can take up to {} KiB of kernel memory, and bprof takes at most {} MiB)",
            MAX_MAP_BYTES / MAP_BYTES_PER_ENTRY,
            MAP_BYTES_PER_ENTRY / 1024,
            MAX_MAP_BYTES >> 20
        );
    }
    Ok(n as u32)
}

/// `--filter`s parsed, checked against the mode and compiled to map entries.
fn filter_entries(filters: &[String], mode: Mode) -> Result<Vec<filter_entry>> {
    let filter = crate::filter::parse::parse_all(filters)?;
    if mode.off_cpu() {
        // Off-CPU time has no sampled ip or period.
        if let Some(t) = filter
            .terms()
            .find(|t| matches!(t, Term::Ip | Term::Period | Term::Mode))
        {
            bail!(
                "filter term '{}' does not apply to off-CPU time (--off-cpu, --wall)",
                t.name()
            );
        }
    }
    if filter.is_empty() {
        Ok(Vec::new())
    } else {
        crate::filter::compile::compile_filter(&filter)
    }
}

/// Parses and checks the target flags and duration every session takes:
/// CPUs against the possible ones, lists of IDs, the command.
pub fn target_and_duration(a: &TargetArgs) -> Result<(Target, Option<Duration>)> {
    let online = sampling::online_cpus().context("reading the online CPUs")?;
    let mut target = Target {
        command: a.command.clone(),
        all: a.all_cpus,
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
    target.validate(&online)?;
    let duration = a
        .duration
        .as_deref()
        .map(|d| seconds(d, "duration", 1.0))
        .transpose()?;
    Ok((target, duration))
}

/// The longest duration or interval bprof accepts: a year.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Parses a duration given in `unit` seconds (1.0 for seconds, 0.001 for
/// milliseconds): finite, greater than 0 and at most a year, so no later
/// conversion can overflow.
pub fn seconds(text: &str, what: &str, unit: f64) -> Result<Duration> {
    let unit_name = if unit == 1.0 {
        "seconds"
    } else {
        "milliseconds"
    };
    text.parse::<f64>()
        .ok()
        .map(|v| v * unit)
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_SECONDS)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            anyhow!(
                "invalid {what} '{text}': expected {unit_name} greater than 0 and at most a year"
            )
        })
}

/// Kernel memory one `--stack-storage-size` entry can take when every map
/// is full: a count-map key and u64 value, a kernel stack, a short and a
/// deep user stack (each has its own map), their dedup and cache entries
/// (about 48 bytes each), and the kernel's per-element overhead (about 64
/// bytes per element, six maps).
pub const MAP_BYTES_PER_ENTRY: u64 = {
    use crate::bpf::abi;
    use std::mem::size_of;
    let record = size_of::<abi::frame_record>();
    (size_of::<abi::sample_key>()
        + 8
        + size_of::<abi::kern_stack>()
        + size_of::<abi::user_stack>()
        + 8
        + abi::SHORT_FRAMES * record
        + 3 * 48
        + 6 * 64) as u64
};

/// The most kernel memory bprof's maps may take: 1 GiB.
pub const MAX_MAP_BYTES: u64 = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    fn settings(args: &[&str]) -> Result<ProfileSettings> {
        let cli = Cli::try_parse_from(std::iter::once("bprof").chain(args.iter().copied()))
            .map_err(|e| anyhow!("{e}"))?;
        ProfileSettings::from_cli(cli.profile)
    }

    fn refused(args: &[&str], want: &str) {
        let e = format!("{:#}", settings(args).expect_err("refused"));
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!e.contains('\n'), "{args:?}: one line: {e}");
    }

    #[test]
    fn defaults_and_flags_become_settings() {
        let s = settings(&["-F", "99", "-U", "-d", "--stats-json", "s.json", "2.5"]).unwrap();
        assert_eq!(s.rate, Rate::Frequency(99));
        assert_eq!(s.duration, Some(Duration::from_millis(2500)));
        assert!(!s.program.kernel_stacks && s.program.user_stacks);
        assert!(s.folded.delimiter);
        assert_eq!(s.stats_json, Some(PathBuf::from("s.json")));
        let s = settings(&["--wall", "-L", "1"]).unwrap();
        assert_eq!(s.program.mode, Mode::Wall);
        assert_eq!(s.event, Event::CPU_CLOCK);
        assert_eq!(s.target.tids, vec![1]);
        let s = settings(&["-e", "task-clock:u"]).unwrap();
        assert_eq!(s.event.to_string(), "task-clock:u");
        assert!(s.event.levels.exclude_kernel && !s.event.levels.exclude_user);
        refused(&["-e", "task-clock:x"], "invalid modifier");
        assert_eq!(
            settings(&[]).unwrap().rate,
            Rate::Frequency(DEFAULT_HZ_SYSTEM)
        );
        assert_eq!(
            settings(&["--", "true"]).unwrap().rate,
            Rate::Frequency(DEFAULT_HZ_PROCESS)
        );
        assert_eq!(
            settings(&["-a", "--", "true"]).unwrap().rate,
            Rate::Frequency(DEFAULT_HZ_SYSTEM)
        );
    }

    #[test]
    fn contradictions_are_refused_in_one_line() {
        refused(&["--off-cpu", "-F", "99"], "--off-cpu takes no samples");
        refused(&["--wall", "-c", "1000"], "--wall needs a frequency");
        refused(&["--wall", "-e", "cycles"], "--wall counts time");
        refused(&["--min-block", "10"], "need --off-cpu or --wall");
        refused(
            &["--off-cpu", "--min-block", "10", "--max-block", "5"],
            "--max-block must not be below --min-block",
        );
        refused(
            &["--off-cpu", "--filter", "ip > 0"],
            "does not apply to off-CPU",
        );
        refused(&["-o", "same", "--svg", "./same"], "are the same file");
        refused(&["--pprof", "same", "--svg", "./same"], "are the same file");
        refused(&["--every", "10", "--pprof", "a.pb.gz"], "its own file");
        refused(&["--every", "10", "-f"], "-o FILE");
        refused(&["--every", "0.5", "-o", "%t"], "at least 1 second");
        refused(&["--stack-skip", "256", "--off-cpu"], "at most 255");
    }

    #[test]
    fn numbers_are_bounded_before_use() {
        refused(&["-c", "0"], "invalid period '0'");
        refused(&["-c", "9223372036854775808"], "below 2^63");
        refused(&["-F", "0"], "invalid frequency '0'");
        let s = settings(&["-F", "100000000"]).unwrap();
        assert_eq!(s.rate, Rate::Frequency(max_sample_rate()));
        assert!(
            s.notes[0].contains("above the kernel's limit"),
            "{:?}",
            s.notes
        );
        refused(
            &["--stack-storage-size", "0"],
            "invalid --stack-storage-size",
        );
        let max = MAX_MAP_BYTES / MAP_BYTES_PER_ENTRY;
        assert!(settings(&["--stack-storage-size", &max.to_string()]).is_ok());
        refused(
            &["--stack-storage-size", &(max + 1).to_string()],
            "invalid --stack-storage-size",
        );
        // --help and the README state the bound as a number: it must be this one.
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        let said = format!("at most {max} (1 GiB)");
        assert!(help.contains(&said), "--help does not say '{said}'");
        let readme = include_str!("../../README.md");
        assert!(
            readme.contains(&format!("at most {max} ")),
            "README's bound"
        );
        refused(&["nan"], "invalid duration 'nan'");
        refused(&["1e30"], "invalid duration '1e30'");
        refused(&["-p", "0"], "PID");
    }

    #[test]
    fn seconds_are_finite_positive_and_at_most_a_year() {
        assert_eq!(
            seconds("0.5", "x", 1.0).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            seconds("250", "x", 0.001).unwrap(),
            Duration::from_millis(250)
        );
        for bad in ["0", "-1", "inf", "NaN", "", "1 s", "31536001"] {
            assert!(seconds(bad, "x", 1.0).is_err(), "{bad}");
        }
    }
}
