//! The command line, mirroring bcc's profile.py (and perf) where they have
//! the flag.

use std::path::PathBuf;

use clap::Parser;

/// bprof: a sampling profiler that counts stacks inside the kernel with BPF.
///
/// Samples every CPU (or the given targets) at a fixed rate, counts
/// (thread, kernel stack, user stack) in a BPF map, and symbolizes each
/// unique frame once at the end. Without -f or --svg it prints the stacks
/// with their counts, hottest last.
#[derive(Debug, Parser)]
#[command(name = "bprof", version, about, long_about)]
#[command(
    after_help = "Examples:\n  bprof -F 99 -p 1234 -f > out.folded     folded stacks of process 1234\n  bprof --svg flame.svg -- ./my-program   flame graph of a command and its children\n  bprof -a -d 10 -f                        10 s system-wide, annotated kernel frames"
)]
pub struct Cli {
    /// Profile for this many seconds (default: until Ctrl-C, or until the
    /// target exits).
    #[arg(value_name = "DURATION")]
    pub duration: Option<String>,

    /// Profile these processes (comma-separated PIDs); their new threads too.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]")]
    pub pid: Option<String>,

    /// Profile these threads only (comma-separated TIDs).
    #[arg(short = 'L', long = "tid", value_name = "TID[,TID...]")]
    pub tid: Option<String>,

    /// Sample only on these CPUs (e.g. 0,2-3).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Sample this many times per second on each CPU [default: 49].
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

    /// Event to sample: cycles, instructions, cpu-clock or task-clock
    /// [default: cycles, or cpu-clock where there is no hardware PMU].
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub event: Option<String>,

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

    /// Insert a "-" frame between the user and kernel parts of a stack.
    #[arg(short = 'd', long = "delimited")]
    pub delimited: bool,

    /// Annotate kernel frames with a "_[k]" suffix.
    #[arg(short = 'a', long = "annotations")]
    pub annotations: bool,

    /// Include the idle task (CPU idle time).
    #[arg(short = 'I', long = "include-idle")]
    pub include_idle: bool,

    /// Number of unique stacks (and of stack/thread keys) the kernel maps
    /// can hold; stacks beyond it are counted as lost.
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

    /// Show libbpf's messages and extra detail.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// Command to run and profile with its children, until it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
