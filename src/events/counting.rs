//! Counting events for `bprof stat` (and the profile's cycles/IPC line):
//! perf-style names with `:u`/`:k` modifiers, and their perf_event attrs.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;

use anyhow::{bail, Result};
use perf_event_open_sys::bindings as pb;

use crate::events::sampling;

/// One event to count, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// The name as given (e.g. `cycles:u`), used in the output.
    pub name: String,
    /// The canonical base name (e.g. `cycles`), used for derived metrics.
    pub base: &'static str,
    /// perf_event_attr.type
    pub type_: u32,
    /// perf_event_attr.config
    pub config: u64,
    /// `:k` only.
    pub exclude_user: bool,
    /// `:u` only.
    pub exclude_kernel: bool,
}

const HW: u32 = pb::PERF_TYPE_HARDWARE;
const SW: u32 = pb::PERF_TYPE_SOFTWARE;

/// Known names and aliases → (canonical name, type, config).
const KNOWN: &[(&str, &str, u32, u32)] = &[
    ("cycles", "cycles", HW, pb::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", "cycles", HW, pb::PERF_COUNT_HW_CPU_CYCLES),
    (
        "instructions",
        "instructions",
        HW,
        pb::PERF_COUNT_HW_INSTRUCTIONS,
    ),
    (
        "ref-cycles",
        "ref-cycles",
        HW,
        pb::PERF_COUNT_HW_REF_CPU_CYCLES,
    ),
    (
        "cache-references",
        "cache-references",
        HW,
        pb::PERF_COUNT_HW_CACHE_REFERENCES,
    ),
    (
        "cache-misses",
        "cache-misses",
        HW,
        pb::PERF_COUNT_HW_CACHE_MISSES,
    ),
    (
        "branches",
        "branches",
        HW,
        pb::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    (
        "branch-instructions",
        "branches",
        HW,
        pb::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    (
        "branch-misses",
        "branch-misses",
        HW,
        pb::PERF_COUNT_HW_BRANCH_MISSES,
    ),
    ("bus-cycles", "bus-cycles", HW, pb::PERF_COUNT_HW_BUS_CYCLES),
    ("cpu-clock", "cpu-clock", SW, pb::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", "task-clock", SW, pb::PERF_COUNT_SW_TASK_CLOCK),
    (
        "context-switches",
        "context-switches",
        SW,
        pb::PERF_COUNT_SW_CONTEXT_SWITCHES,
    ),
    (
        "cs",
        "context-switches",
        SW,
        pb::PERF_COUNT_SW_CONTEXT_SWITCHES,
    ),
    (
        "cpu-migrations",
        "cpu-migrations",
        SW,
        pb::PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
    (
        "migrations",
        "cpu-migrations",
        SW,
        pb::PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
    (
        "page-faults",
        "page-faults",
        SW,
        pb::PERF_COUNT_SW_PAGE_FAULTS,
    ),
    ("faults", "page-faults", SW, pb::PERF_COUNT_SW_PAGE_FAULTS),
    (
        "minor-faults",
        "minor-faults",
        SW,
        pb::PERF_COUNT_SW_PAGE_FAULTS_MIN,
    ),
    (
        "major-faults",
        "major-faults",
        SW,
        pb::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
    ),
];

/// `perf stat`'s default set.
pub const DEFAULT_EVENTS: &str =
    "task-clock,context-switches,cpu-migrations,page-faults,cycles,instructions,branches,branch-misses";

impl EventSpec {
    /// Parses one name such as `instructions:u`.
    pub fn parse(text: &str) -> Result<EventSpec> {
        let text = text.trim();
        let (name, levels) = super::split_modifiers(text)?;
        let Some(&(_, base, type_, config)) = KNOWN.iter().find(|(n, ..)| *n == name) else {
            let names: Vec<&str> = KNOWN.iter().map(|k| k.0).collect();
            bail!("unknown event '{text}' (known: {})", names.join(", "));
        };
        Ok(EventSpec {
            name: text.to_string(),
            base,
            type_,
            config: config as u64,
            exclude_user: levels.exclude_user,
            exclude_kernel: levels.exclude_kernel,
        })
    }

    /// Parses a comma-separated list; duplicates are an error like perf's.
    pub fn parse_list(list: &str) -> Result<Vec<EventSpec>> {
        if list.trim().is_empty() {
            bail!("empty event list");
        }
        let mut out: Vec<EventSpec> = Vec::new();
        for part in list.split(',') {
            if part.trim().is_empty() {
                bail!("empty event name in '{list}'");
            }
            let e = EventSpec::parse(part)?;
            if out.iter().any(|o| o.key() == e.key()) {
                bail!("event '{}' is listed twice", e.name);
            }
            out.push(e);
        }
        Ok(out)
    }

    /// Whether the event needs a PMU.
    pub fn is_hardware(&self) -> bool {
        self.type_ == HW
    }

    /// Identifies the counter, for sharing: equal keys mean one shared set
    /// of per-CPU events.
    pub fn key(&self) -> String {
        let mode = match (self.exclude_user, self.exclude_kernel) {
            (true, _) => "k",
            (_, true) => "u",
            _ => "uk",
        };
        format!("ev_{}_{:x}_{mode}", self.type_, self.config)
    }

    /// Opens a counting (not sampling) event on `cpu` for every task.
    pub fn open_on_cpu(&self, cpu: u32) -> io::Result<OwnedFd> {
        let mut attr = sampling::base_attr(self.type_, self.config);
        attr.set_exclude_user(self.exclude_user as u64);
        attr.set_exclude_kernel(self.exclude_kernel as u64);
        sampling::open(&mut attr, -1, cpu as i32)
    }

    /// Whether the counts are nanoseconds (shown as msec).
    pub fn is_clock(&self) -> bool {
        self.base == "cpu-clock" || self.base == "task-clock"
    }
}

impl fmt::Display for EventSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}
