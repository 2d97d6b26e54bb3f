//! The command line, mirroring bcc's profile.py (and perf) where they have
//! the flag.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// bprof: a sampling profiler that counts stacks inside the kernel with BPF.
///
/// Samples every CPU (or the given targets) at a fixed rate, counts
/// (thread, kernel stack, user stack) in a BPF map, and symbolizes each
/// unique frame once at the end. Without an output option it prints the
/// hottest functions (self and total share, module; kernel frames marked
/// _[k]) and where to go next.
#[derive(Debug, Parser)]
#[command(name = "bprof", version, about, long_about)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_value_name = "SUBCOMMAND",
    subcommand_help_heading = "Subcommands"
)]
#[command(
    after_help = "Examples:\n  bprof -p 1234 -- sleep 3                 the hottest functions of process 1234 for 3 s\n  bprof -F 99 -p 1234 -f > out.folded     folded stacks of process 1234\n  bprof --svg flame.svg -- ./my-program   flame graph of a command and its children\n  bprof -a -d -f 10                        10 s system-wide, user and kernel parts apart\n  bprof --off-cpu --svg off.svg -p 1234   where process 1234 blocks\n  bprof stat -e cycles,instructions -a 5  counts, shared with other sessions"
)]
pub struct Cli {
    /// A subcommand (`stat`); without one, bprof profiles.
    #[command(subcommand)]
    pub sub: Option<Sub>,

    /// Profiling options.
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per run: the size of a variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Sub {
    /// Count events like `perf stat`, through per-CPU counters that every
    /// concurrent bprof session shares via BPF (bperf-style): nothing
    /// multiplexes however many sessions run.
    Stat(StatArgs),
    /// A live view of the hottest functions, processes and threads,
    /// refreshed from the kernel's counts (like `perf top`). Takes the same
    /// targets, events, filters and --off-cpu as a profile.
    Top(TopArgs),
}

/// `bprof top` options: a profile's (whose `-d` is `--delay` here, as in
/// top) plus the refresh interval. Output files do not apply.
#[derive(Debug, Args)]
#[command(
    mut_arg("delimited", |a| a.short(None).hide(true)),
    mut_arg("folded", |a| a.hide(true)),
    mut_arg("output", |a| a.hide(true)),
    mut_arg("svg", |a| a.hide(true)),
    mut_arg("stats_json", |a| a.hide(true)),
    mut_arg("pprof", |a| a.hide(true)),
    mut_arg("every", |a| a.hide(true)),
    mut_arg("otlp", |a| a.hide(true)),
    mut_arg("otlp_header", |a| a.hide(true)),
    mut_arg("service_name", |a| a.hide(true)),
    mut_arg("otlp_queue", |a| a.hide(true)),
    mut_arg("otlp_timeout", |a| a.hide(true)),
    mut_arg("otlp_compression", |a| a.hide(true)),
    mut_arg("no_counts", |a| a.hide(true)),
    mut_arg("stacks", |a| a.hide(true)),
    mut_arg("command", |a| a.help("Command to run: the view shows it and its children until it exits; with -a, -C, -p or -t the view shows those targets while it runs")),
    after_help = "Keys: q quit, space pause, s sort (self/total/name), f functions/stacks,\n  p pick a process (arrows, Enter; Esc for all), Up/Down scroll.\nEach refresh shows the counts of the last interval.\n\nExamples:\n  bprof top                   every CPU, refreshed every second\n  bprof top -p 1234 -F 199    one process, 199 samples per second per CPU\n  bprof top --off-cpu -d 2    where threads block, refreshed every 2 s"
)]
pub struct TopArgs {
    /// Refresh every SECONDS (at least 0.1) [default: 1].
    #[arg(short = 'd', long = "delay", value_name = "SECONDS")]
    pub delay: Option<String>,

    /// Profiling options.
    #[command(flatten)]
    pub profile: ProfileArgs,
}

/// `bprof stat` options, mirroring perf stat.
#[derive(Debug, Args)]
#[command(
    mut_arg("command", |a| a.help("Command to run: count it and its children until it exits; with -a or -C, count those CPUs while it runs (as perf stat -a -- COMMAND)")),
    after_help = "Examples:\n  bprof stat -e cycles,instructions -a 5\n  bprof stat -e instructions:u -- ./my-program\n  bprof stat -e task-clock,context-switches -I 1000 -p 1234"
)]
pub struct StatArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Events, comma-separated (repeatable), with optional :u / :k
    /// [default: task-clock,context-switches,cpu-migrations,page-faults,
    /// cycles,instructions,branches,branch-misses].
    #[arg(short = 'e', long = "event", value_name = "EVENT[,EVENT...]")]
    pub event: Vec<String>,

    /// Print counts every MS milliseconds (at least 10).
    #[arg(short = 'I', long = "interval-print", value_name = "MS")]
    pub interval: Option<String>,

    /// Write the counts to FILE instead of stderr (where perf stat writes
    /// them too).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// CSV output with this separator: value,unit,event,run time,% running,metric,metric unit.
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub separator: Option<String>,

    /// JSON output, one object per line.
    #[arg(short = 'j', long = "json", conflicts_with = "separator")]
    pub json: bool,

    /// Count separately for each of these cgroups (v2 paths, hierarchical:
    /// a cgroup's counts include its descendants).
    #[arg(long = "for-each-cgroup", value_name = "CGROUP[,CGROUP...]")]
    pub for_each_cgroup: Option<String>,

    /// bpffs directory where the shared counters are pinned.
    #[arg(long = "bpf-pin-dir", alias = "bpf-attr-map", value_name = "DIR", default_value = crate::bpf::shared_counters::DEFAULT_PIN_DIR)]
    pub pin_dir: PathBuf,

    /// Extra detail (sharing state); twice (-vv) also libbpf's messages.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Profiling options (the default mode).
#[derive(Debug, Args)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// Sample this many times per second on each CPU [default: 999 for a
    /// process, thread or COMMAND (-p, -t, -- COMMAND); 99 system-wide or
    /// on CPUs (-a, -C)]. Above the kernel's perf_event_max_sample_rate it
    /// is lowered to that, with one line.
    #[arg(
        short = 'F',
        long = "frequency",
        value_name = "HZ",
        conflicts_with = "count"
    )]
    pub frequency: Option<String>,

    /// Sample once every PERIOD events instead of at a frequency.
    #[arg(short = 'c', long = "count", value_name = "PERIOD")]
    pub count: Option<String>,

    /// Event to sample: cycles, instructions, cpu-clock or task-clock, with
    /// perf's :u (user only) or :k (kernel only) as in bprof stat
    /// [default: cycles, or cpu-clock where there is no hardware PMU].
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// Accepted for perf's habit: stacks are always taken, walked as
    /// --call-graph says.
    #[arg(short = 'g')]
    pub call_graph_flag: bool,

    /// Show user stacks only (no kernel frames).
    #[arg(
        short = 'U',
        long = "user-stacks-only",
        conflicts_with = "kernel_stacks_only"
    )]
    pub user_stacks_only: bool,

    /// Show kernel stacks only (no user frames).
    #[arg(short = 'K', long = "kernel-stacks-only")]
    pub kernel_stacks_only: bool,

    /// How user stacks are walked: "dwarf" unwinds with each file's
    /// .eh_frame inside the BPF program (frame pointers where a PC has no
    /// table: JIT code, the vDSO); "fp" takes the kernel's frame-pointer
    /// walk. perf's "dwarf,SIZE" is accepted (there is no stack copy).
    #[arg(long = "call-graph", value_name = "fp|dwarf", default_value = "dwarf")]
    pub call_graph: String,

    /// --call-graph dwarf: learn a target's new code mappings at its mmaps
    /// (a hook on every syscall's exit), so that its first ms walk whole
    /// before bprof has read them. Every syscall of the machine then takes
    /// the kernel's traced path, which costs it time. "auto":
    /// for -- COMMAND profiles only (builds, scripts: short-lived children).
    #[arg(long = "mmap-hook", value_name = "auto|on|off", default_value = "auto")]
    pub mmap_hook: String,

    /// Most rows the unwind tables may take (8 bytes each, plus N/8
    /// page-index entries of 8 bytes), allocated as files' tables are
    /// loaded, in segments from 512 KiB up; and 512 KiB of rules at start:
    /// --call-graph dwarf only.
    #[arg(long = "unwind-rows", value_name = "N", default_value = "4194304")]
    pub unwind_rows: String,

    /// Insert a "-" frame between the user and kernel parts of a stack.
    #[arg(short = 'd', long = "delimited")]
    pub delimited: bool,

    /// Kernel frames are suffixed "_[k]" (flamegraph.pl's convention) in
    /// every output by default; this leaves them bare.
    #[arg(long = "no-annotations")]
    pub no_annotations: bool,

    /// The default; kept so that older command lines still work.
    #[arg(long = "annotations", hide = true)]
    pub annotations: bool,

    /// Include the idle task (CPU idle time).
    #[arg(long = "include-idle")]
    pub include_idle: bool,

    /// The old spelling of --include-idle, kept for one release (-I is an
    /// interval in bprof stat and perf).
    #[arg(short = 'I', hide = true)]
    pub include_idle_short: bool,

    /// Keep inlined functions inside their callers: no inlined frames in
    /// any output, and no debug information read for them.
    #[arg(long = "no-inline")]
    pub no_inline: bool,

    /// Entries of each kernel map (count map, stack maps). They are drained
    /// into user space when half full, so this bounds kernel memory, not
    /// the profile; what still does not fit is counted as lost. Each drained
    /// aggregate waits on disk (an unnamed file in /var/tmp) until the end.
    /// Each entry can take about 10 KiB of kernel memory; at most 99126
    /// (1 GiB).
    #[arg(long = "stack-storage-size", value_name = "N", default_value = "16384")]
    pub stack_storage_size: String,

    /// Print folded stacks (`comm;frame;...;leaf COUNT`) to stdout.
    #[arg(short = 'f', long = "folded")]
    pub folded: bool,

    /// Write folded stacks to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Write an SVG flame graph to FILE (may be combined with -f / -o).
    #[arg(long = "svg", value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Print every stack with its count, bcc profile.py's report (hottest
    /// last), instead of the table of the hottest functions.
    #[arg(long = "stacks")]
    pub stacks: bool,

    /// Write a gzipped pprof profile (profile.proto) to FILE, for go tool
    /// pprof, Pyroscope or Parca (may be combined with -f, -o and --svg).
    /// Frames carry their build IDs, inlined functions and source lines.
    #[arg(long = "pprof", value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Write one profile every SECONDS (at least 1) for as long as bprof
    /// runs (and send it, with --otlp), to files named by patterns in -o,
    /// --svg and --pprof: %t the
    /// interval's start (UTC, 20261125T114000Z), %s the same in epoch
    /// seconds, %n its number, %d its length in seconds, %% a '%'. E.g.
    /// --every 10 --pprof 'out/%t.pb.gz'.
    #[arg(long = "every", value_name = "SECONDS")]
    pub every: Option<String>,

    /// Send each profile (each --every interval's, or the one at the end)
    /// as OTLP profiles to a Collector, Pyroscope or Parca:
    /// http(s)://HOST[:PORT] speaks OTLP/gRPC (port 4317 by default),
    /// a URL with a path OTLP/HTTP (e.g.
    /// http://HOST:4318/v1development/profiles). https uses the system's
    /// CA certificates.
    #[arg(long = "otlp", value_name = "URL")]
    pub otlp: Option<String>,

    /// A header sent with every OTLP request (repeatable), e.g.
    /// 'Authorization=Bearer TOKEN'; also read from
    /// OTEL_EXPORTER_OTLP_HEADERS (a=b,c=d), which keeps secrets off the
    /// command line.
    #[arg(long = "otlp-header", value_name = "NAME=VALUE")]
    pub otlp_header: Vec<String>,

    /// OTLP service.name of every profiled process [default: the
    /// command's name with -- COMMAND, else each process's executable].
    #[arg(long = "service-name", value_name = "NAME")]
    pub service_name: Option<String>,

    /// Profiles that may wait for an OTLP receiver that is slow or down;
    /// when the queue is full the oldest is dropped (and counted).
    #[arg(long = "otlp-queue", value_name = "N", default_value = "64")]
    pub otlp_queue: String,

    /// The most one OTLP request may take, in seconds; a failed one is
    /// retried, waiting 1 s and doubling up to 30 s.
    #[arg(long = "otlp-timeout", value_name = "SECONDS", default_value = "10")]
    pub otlp_timeout: String,

    /// Compression of OTLP requests: gzip or none.
    #[arg(
        long = "otlp-compression",
        value_name = "gzip|none",
        default_value = "gzip"
    )]
    pub otlp_compression: String,

    /// Also write the summary (samples counted, lost and why, unique
    /// stacks, unknown frames) as JSON to FILE, for scripts.
    #[arg(long = "stats-json", value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// Keep only samples matching FILTER, in perf's --filter language
    /// (e.g. 'tid == 1234', 'cpu == 0 || cpu == 1, period > 1000',
    /// 'ip < 0xffffffff00000000', 'cgroup == /system.slice', 'comm == bash',
    /// 'user'); evaluated in the kernel before any stack is taken. Repeated
    /// --filter options are ANDed.
    #[arg(long = "filter", value_name = "FILTER")]
    pub filter: Vec<String>,

    /// Profile off-CPU time instead: the microseconds each thread spends
    /// blocked (sleeping, waiting for I/O or locks), charged to the stack it
    /// blocked in.
    #[arg(long = "off-cpu", conflicts_with = "wall")]
    pub off_cpu: bool,

    /// Wall-clock profile: on-CPU samples and all switched-out time in one
    /// graph, both in microseconds; off-CPU stacks end in an [off-cpu] frame.
    #[arg(long = "wall")]
    pub wall: bool,

    /// Off-CPU: ignore blocks shorter than US microseconds.
    #[arg(long = "min-block", value_name = "US")]
    pub min_block: Option<String>,

    /// Off-CPU: ignore blocks longer than US microseconds.
    #[arg(long = "max-block", value_name = "US")]
    pub max_block: Option<String>,

    /// Off-CPU: include kernel threads.
    #[arg(long = "kernel-threads")]
    pub kernel_threads: bool,

    /// Off-CPU: skip N kernel frames (BPF and tracepoint frames) instead of
    /// the count bprof measures at start-up.
    #[arg(long = "stack-skip", value_name = "N")]
    pub stack_skip: Option<String>,

    /// Largest perf map (/tmp/perf-PID.map) or jitdump read for JIT frame
    /// names; larger ones are skipped (said at -v).
    #[arg(
        long = "max-perf-map-size",
        value_name = "BYTES",
        default_value = "67108864"
    )]
    pub max_perf_map_size: String,

    /// With DEBUGINFOD_URLS set: the most the debuginfod cache may hold;
    /// the least recently used files are removed past it, and no larger
    /// file is downloaded.
    #[arg(
        long = "debuginfod-cache-size",
        value_name = "BYTES",
        default_value = "1073741824"
    )]
    pub debuginfod_cache_size: String,

    /// Show a frame inside a file that has no symbol for it as `[module]`
    /// (one box per module in a flame graph) instead of `module+0xOFFSET`.
    #[arg(long = "unknown-as-module")]
    pub unknown_as_module: bool,

    /// Python frames without their line: `function (file.py)`, as py-spy's
    /// --nolineno, so a function's lines merge into one box.
    #[arg(long = "no-lineno", alias = "nolineno")]
    pub no_lineno: bool,

    /// Do not walk the Python frames of CPython processes (their samples
    /// show the interpreter's native frames only).
    #[arg(long = "no-python")]
    pub no_python: bool,

    /// Do not print the target's cycles, instructions and IPC at the end.
    #[arg(long = "no-counts")]
    pub no_counts: bool,

    /// Extra detail (stack skip, loss breakdown, map drains); twice (-vv)
    /// also libbpf's messages.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Whom to watch and for how long: the same flags for profiles and
/// `bprof stat`, checked by the same code.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Run for this many seconds (default: until Ctrl-C, or until the
    /// target exits).
    #[arg(value_name = "DURATION")]
    pub duration: Option<String>,

    /// Every CPU, every process: the default without -p, -t, -C or a
    /// COMMAND; with -- COMMAND, every CPU for as long as it runs (as perf's
    /// -a).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Only these processes (comma-separated PIDs) and their new threads.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]")]
    pub pid: Option<String>,

    /// Only these threads (comma-separated TIDs); -L is profile.py's name.
    #[arg(
        short = 't',
        long = "tid",
        visible_short_alias = 'L',
        value_name = "TID[,TID...]"
    )]
    pub tid: Option<String>,

    /// Only on these CPUs (e.g. 0,2-3).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Create FILE (empty) once recording has begun, for scripts that start
    /// their workload after bprof is ready.
    #[arg(long = "ready-file", value_name = "FILE")]
    pub ready_file: Option<PathBuf>,

    /// Command to run: profile it and its children until it exits; with
    /// -a, -C, -p or -t, profile those targets instead while it runs (as
    /// perf record -p PID -- sleep 3).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
