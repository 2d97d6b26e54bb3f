//! `--filter`: perf's sample-filter language (tools/perf/util/bpf-filter.y),
//! parsed and checked in user space; [`compile::compile_filter`] turns
//! the result into the BPF map entries one loaded program walks for any
//! filter.
//!
//! ```text
//! filter  := term_or ( (',' | '&&') term_or )*    -- AND
//! term_or := expr ( '||' expr )*                  -- OR, binds tighter
//! expr    := TERM OP NUMBER | cgroup (==|!=) PATH | comm (==|!=) NAME
//!          | mode (==|!=) (user|kernel) | user | kernel
//! OP      := == != < <= > >= &                    -- '&': (field & value) != 0
//! ```
//! Friendlier than perf's lexer: tokens need no spaces between them
//! (`tid==5`), `&&` is accepted for `,`, and errors point at a column.

use std::fmt;

/// The most entries the BPF program walks (perf's bound too).
pub const MAX_FILTER_ENTRIES: usize = crate::bpf::abi::MAX_FILTERS;

/// Longest comm the kernel keeps (TASK_COMM_LEN - 1).
const COMM_MAX: usize = crate::bpf::abi::COMM_LEN - 1;

/// A sample property a test looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Term {
    /// Sampled instruction pointer.
    Ip,
    /// Thread id.
    Tid,
    /// Process id (thread group).
    Pid,
    /// CPU the sample was taken on.
    Cpu,
    /// Sample period (events, or nanoseconds for the clock events).
    Period,
    /// Real user id.
    Uid,
    /// Real group id.
    Gid,
    /// cgroup v2 membership (the cgroup or any below it).
    Cgroup,
    /// Thread name (a bprof extension).
    Comm,
    /// User or kernel mode (a bprof extension).
    Mode,
}

const TERMS: [(&str, Term); 10] = [
    ("ip", Term::Ip),
    ("tid", Term::Tid),
    ("pid", Term::Pid),
    ("cpu", Term::Cpu),
    ("period", Term::Period),
    ("uid", Term::Uid),
    ("gid", Term::Gid),
    ("cgroup", Term::Cgroup),
    ("comm", Term::Comm),
    ("mode", Term::Mode),
];

/// perf terms that only mean something for memory-sampling (or similar)
/// events, which bprof does not record: named so users know why.
const MEMORY_TERMS: &str = "addr weight weight1 weight2 weight3 ins_lat p_stage_cyc retire_lat \
    phys_addr code_pgsz data_pgsz mem_op mem_lvl mem_lvlnum mem_snoop mem_remote mem_lock \
    mem_dtlb mem_blk mem_hops txn";

impl Term {
    /// The name used in filters (`tid`, `cgroup`, ...).
    pub fn name(self) -> &'static str {
        TERMS
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(n, _)| n)
    }

    /// Largest value the field holds: the 32-bit ones reject bigger values
    /// rather than silently never matching.
    fn max(self) -> u64 {
        match self {
            Term::Tid | Term::Pid | Term::Cpu | Term::Uid | Term::Gid => u32::MAX.into(),
            _ => u64::MAX,
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&`: true when `field & value` is non-zero.
    And,
}

/// Operator spellings, longest first so `<=` is not read as `<`.
const OPS: [(&str, Op); 7] = [
    ("==", Op::Eq),
    ("!=", Op::Ne),
    ("<=", Op::Le),
    (">=", Op::Ge),
    ("<", Op::Lt),
    (">", Op::Gt),
    ("&", Op::And),
];

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = OPS
            .iter()
            .find(|(_, op)| op == self)
            .map_or("?", |(s, _)| s);
        f.write_str(name)
    }
}

/// User or kernel mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuMode {
    /// The sample hit user code.
    User,
    /// The sample hit kernel code.
    Kernel,
}

impl fmt::Display for CpuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CpuMode::User => "user",
            CpuMode::Kernel => "kernel",
        })
    }
}

/// What a test compares against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// A number.
    Num(u64),
    /// A cgroup path below the cgroup v2 root, starting with '/'.
    Path(String),
    /// A thread name, NUL-padded as the kernel stores it.
    Comm([u8; crate::bpf::abi::COMM_LEN]),
    /// A mode.
    Mode(CpuMode),
}

/// One test: `term op value`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Test {
    /// What is looked at.
    pub term: Term,
    /// How it is compared.
    pub op: Op,
    /// What it is compared with.
    pub value: Value,
}

/// Characters that end a bare name or number (perf's lexer ends them there);
/// control characters too, so messages never quote them raw.
fn ends_word(c: char) -> bool {
    ends_path(c) || matches!(c, '=' | '!' | '<' | '>')
}

/// Characters that end a bare cgroup path: paths may hold '=' or '!'.
fn ends_path(c: char) -> bool {
    matches!(c, ' ' | '\t' | ',' | '|' | '&') || c.is_control()
}

/// Writes `s` quoted, escaping only what the parser unescapes.
fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    write!(f, "\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.term, self.op)?;
        match &self.value {
            // Addresses and bit masks read better in hex.
            Value::Num(n) if self.term == Term::Ip || self.op == Op::And => write!(f, "{n:#x}"),
            Value::Num(n) => write!(f, "{n}"),
            Value::Path(p) if p.contains(ends_path) => write_quoted(f, p),
            Value::Path(p) => f.write_str(p),
            Value::Comm(c) => {
                let len = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                write_quoted(f, &String::from_utf8_lossy(&c[..len]))
            }
            Value::Mode(m) => write!(f, "{m}"),
        }
    }
}

/// One compiled filter: an AND of groups; each group is an OR of tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The groups; all must pass. A group passes when any of its tests does.
    pub groups: Vec<Vec<Test>>,
}

impl Filter {
    /// Whether the filter has no tests, so keeps every sample.
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(Vec::is_empty)
    }

    /// Map entries this filter compiles to: one per test, plus a begin and
    /// an end marker around each group of more than one test.
    pub fn entry_count(&self) -> usize {
        self.groups
            .iter()
            .map(|g| if g.len() > 1 { g.len() + 2 } else { g.len() })
            .sum()
    }

    /// Every term used, in order, repeats included.
    pub fn terms(&self) -> impl Iterator<Item = Term> + '_ {
        self.groups.iter().flatten().map(|t| t.term)
    }
}

/// Canonical text, e.g. `tid == 5 || tid == 6, cpu != 0`, which [`parse`]
/// reads back to the same filter (an empty filter renders as "").
impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            for (j, t) in g.iter().enumerate() {
                if j > 0 {
                    f.write_str(" || ")?;
                }
                write!(f, "{t}")?;
            }
        }
        Ok(())
    }
}

/// A malformed filter. Displays as
/// `invalid filter '{filter}': {message} at column {column}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// What is wrong, e.g. `unexpected '='`.
    pub message: String,
    /// 1-based character column in `filter` (one past the end for
    /// "missing" errors).
    pub column: usize,
    /// The filter as given.
    pub filter: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid filter '{}': {} at column {}",
            self.filter, self.message, self.column
        )
    }
}

impl std::error::Error for FilterError {}

pub(crate) mod compile;
pub(crate) mod parse;

#[cfg(test)]
mod tests;
