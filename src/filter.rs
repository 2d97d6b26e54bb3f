//! `--filter`: perf's sample-filter language (tools/perf/util/bpf-filter.y),
//! parsed and checked in user space; `programs::compile_filter` turns the
//! result into the BPF map entries one loaded program walks for any filter.
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
pub const MAX_FILTER_ENTRIES: usize = 64;

/// Longest comm the kernel keeps (TASK_COMM_LEN - 1).
const COMM_MAX: usize = 15;

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
pub enum Mode {
    /// The sample hit user code.
    User,
    /// The sample hit kernel code.
    Kernel,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::User => "user",
            Mode::Kernel => "kernel",
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
    Comm([u8; 16]),
    /// A mode.
    Mode(Mode),
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

/// A hand-written scanner-parser: values are lexed by their term (cgroup
/// paths and comm names allow characters a number does not), so there is no
/// separate token pass.
struct Parser<'a> {
    filter: &'a str,
    chars: Vec<char>,
    /// Index into `chars`; the column is `pos + 1`.
    pos: usize,
}

type Res<T> = Result<T, FilterError>;

impl Parser<'_> {
    fn err<T>(&self, message: impl Into<String>, column: usize) -> Res<T> {
        Err(FilterError {
            message: message.into(),
            column,
            filter: self.filter.to_string(),
        })
    }

    fn col(&self) -> usize {
        self.pos + 1
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest_starts(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.chars.get(self.pos + i) == Some(&c))
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> String {
        let start = self.pos;
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// The `,` `&&` or `||` here, if any.
    fn joiner(&self) -> Option<&'static str> {
        [",", "&&", "||"].into_iter().find(|j| self.rest_starts(j))
    }

    /// The operator here (`&&` is a joiner, not `&`).
    fn operator(&self) -> Option<(Op, usize)> {
        if self.rest_starts("&&") {
            return None;
        }
        OPS.iter()
            .find(|(s, _)| self.rest_starts(s))
            .map(|&(s, op)| (op, s.len()))
    }

    /// An error naming whatever token is here.
    fn unexpected<T>(&self) -> Res<T> {
        let col = self.col();
        let Some(c) = self.peek() else {
            return self.err("unexpected end of filter", col);
        };
        let token = if let Some(j) = self.joiner() {
            j.to_string()
        } else if let Some((op, _)) = self.operator() {
            op.to_string()
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let end = self.chars[self.pos..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .count();
            self.chars[self.pos..self.pos + end].iter().collect()
        } else {
            match c {
                '(' | ')' => {
                    let msg =
                        format!("unsupported syntax '{c}' (perf filters have no parentheses)");
                    return self.err(msg, col);
                }
                '!' => return self.err("unsupported syntax '!' (perf filters have no NOT)", col),
                '|' => return self.err("unexpected '|' (OR is '||')", col),
                _ if c.is_control() => c.escape_debug().to_string(),
                _ => c.to_string(),
            }
        };
        self.err(format!("unexpected '{token}'"), col)
    }

    fn filter(&mut self) -> Res<Filter> {
        self.skip_ws();
        if self.peek().is_none() {
            return self.err("empty filter", 1);
        }
        let mut groups = Vec::new();
        let mut group = Vec::new();
        let mut after = None;
        loop {
            group.push(self.expr(after)?);
            self.skip_ws();
            after = self.joiner();
            match after {
                None if self.peek().is_none() => break,
                None if self.peek().is_some_and(|c| c.is_ascii_alphabetic()) => {
                    let word = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
                    let col = self.col() - word.chars().count();
                    let msg =
                        format!("unexpected '{word}' (terms are joined with ',' '&&' or '||')");
                    return self.err(msg, col);
                }
                None => return self.unexpected(),
                Some(j) => {
                    if j != "||" {
                        groups.push(std::mem::take(&mut group));
                    }
                    self.pos += j.len();
                }
            }
        }
        groups.push(group);
        Ok(Filter { groups })
    }

    /// One `term op value`; `after` is the joiner just read, for errors.
    fn expr(&mut self, after: Option<&str>) -> Res<Test> {
        self.skip_ws();
        let col = self.col();
        if let Some(j) = after {
            if self.peek().is_none() || self.joiner().is_some() {
                return self.err(format!("expected a term after '{j}'"), col);
            }
        }
        let word = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
        if word.is_empty() {
            return self.unexpected();
        }
        let mode = |m| Test {
            term: Term::Mode,
            op: Op::Eq,
            value: Value::Mode(m),
        };
        let term = match TERMS.iter().find(|(n, _)| *n == word) {
            Some(&(_, term)) => term,
            None if word == "user" => return Ok(mode(Mode::User)),
            None if word == "kernel" => return Ok(mode(Mode::Kernel)),
            None if MEMORY_TERMS.split_whitespace().any(|m| m == word) => {
                let msg =
                    format!("term '{word}' needs a memory-sampling event (not supported by bprof)");
                return self.err(msg, col);
            }
            None if word == "id" || word == "time" => {
                return self.err(format!("term '{word}' is not supported by bprof"), col)
            }
            None => {
                let names: Vec<&str> = TERMS.iter().map(|(n, _)| *n).collect();
                let msg = format!(
                    "unknown term '{word}' (expected one of: {})",
                    names.join(", ")
                );
                return self.err(msg, col);
            }
        };
        self.skip_ws();
        let op_col = self.col();
        let Some((op, len)) = self.operator() else {
            if self.peek() == Some('=') {
                return self.err("unexpected '=' (equality is '==')", op_col);
            }
            return self.err(format!("expected an operator after '{word}'"), op_col);
        };
        self.pos += len;
        if matches!(term, Term::Cgroup | Term::Comm | Term::Mode) && !matches!(op, Op::Eq | Op::Ne)
        {
            return self.err(format!("operator '{op}' is not allowed for {term}"), op_col);
        }
        let value = self.value(term, op)?;
        Ok(Test { term, op, value })
    }

    fn value(&mut self, term: Term, op: Op) -> Res<Value> {
        self.skip_ws();
        let col = self.col();
        match self.peek() {
            None => return self.err(format!("missing value after '{op}'"), col),
            Some(_) if self.joiner().is_some() => {
                return self.err(format!("missing value after '{op}'"), col)
            }
            Some(c) if ends_word(c) => return self.unexpected(),
            Some(_) => {}
        }
        let quoted = self.peek() == Some('"');
        Ok(match term {
            Term::Comm => {
                let name = if quoted {
                    self.quoted()?
                } else {
                    self.take_while(|c| !ends_word(c))
                };
                if name.len() > COMM_MAX {
                    return self.err(format!("comm name longer than {COMM_MAX} bytes"), col);
                }
                if name.contains('\0') {
                    return self.err("comm name contains a NUL byte", col);
                }
                let mut comm = [0u8; 16];
                comm[..name.len()].copy_from_slice(name.as_bytes());
                Value::Comm(comm)
            }
            Term::Cgroup => {
                let path = if quoted {
                    self.quoted()?
                } else {
                    self.take_while(|c| !ends_path(c))
                };
                if !path.starts_with('/') {
                    let msg = format!("expected a cgroup path starting with '/', not '{path}'");
                    return self.err(msg, col);
                }
                // The BPF side matches by depth, which '.' and '..' would skew.
                if path.split('/').any(|p| p == "." || p == "..") {
                    return self.err("cgroup path must not contain '.' or '..'", col);
                }
                Value::Path(path)
            }
            Term::Mode => match self.take_while(|c| !ends_word(c)).as_str() {
                "user" => Value::Mode(Mode::User),
                "kernel" => Value::Mode(Mode::Kernel),
                v => return self.err(format!("expected 'user' or 'kernel', not '{v}'"), col),
            },
            _ => {
                let text = self.take_while(|c| !ends_word(c) && !"()\"".contains(c));
                if text.is_empty() {
                    return self.unexpected();
                }
                Value::Num(self.number(&text, col, term)?)
            }
        })
    }

    /// A `"..."` string at the cursor; only `\"` and `\\` are escapes.
    fn quoted(&mut self) -> Res<String> {
        let open = self.col();
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return self.err("unterminated quoted string", open),
                Some('"') => break,
                Some('\\') => match self.chars.get(self.pos + 1) {
                    Some(&c @ ('"' | '\\')) => {
                        out.push(c);
                        self.pos += 1;
                    }
                    _ => return self.err("unsupported escape (only \\\" and \\\\)", self.col()),
                },
                Some(c) => out.push(c),
            }
            self.pos += 1;
        }
        self.pos += 1;
        Ok(out)
    }

    fn number(&self, text: &str, col: usize, term: Term) -> Res<u64> {
        if text.starts_with('-') && text[1..].starts_with(|c: char| c.is_ascii_digit()) {
            return self.err("negative value", col);
        }
        let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None => (text, 10),
        };
        // Checked first because from_str_radix also takes a leading '+'.
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return self.err(format!("invalid number '{text}'"), col);
        }
        let Ok(n) = u64::from_str_radix(digits, radix) else {
            return self.err("number too big", col);
        };
        if n > term.max() {
            return self.err(format!("value {n} is too big for {term} (32-bit)"), col);
        }
        Ok(n)
    }
}

fn too_complex(filter: &Filter, text: &str) -> Res<()> {
    let n = filter.entry_count();
    if n <= MAX_FILTER_ENTRIES {
        return Ok(());
    }
    Err(FilterError {
        message: format!("filter too complex: {n} entries, at most {MAX_FILTER_ENTRIES}"),
        column: 1,
        filter: text.to_string(),
    })
}

/// Parses one `--filter` string.
pub fn parse(filter: &str) -> Result<Filter, FilterError> {
    let mut p = Parser {
        filter,
        chars: filter.chars().collect(),
        pos: 0,
    };
    let f = p.filter()?;
    too_complex(&f, filter)?;
    Ok(f)
}

/// Parses several `--filter` options, which combine with AND; the entry limit
/// applies to the total. No options give an empty filter.
pub fn parse_all(filters: &[String]) -> Result<Filter, FilterError> {
    let mut all = Filter::default();
    for f in filters {
        all.groups.extend(parse(f)?.groups);
    }
    too_complex(&all, &filters.join(", "))?;
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(s: &str) -> String {
        match parse(s) {
            Ok(f) => panic!("{s:?} parsed as {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn num(term: Term, op: Op, n: u64) -> Test {
        let value = Value::Num(n);
        Test { term, op, value }
    }

    fn comm(name: &str) -> Value {
        let mut c = [0u8; 16];
        c[..name.len()].copy_from_slice(name.as_bytes());
        Value::Comm(c)
    }

    /// Checks the documented error shape and the column range.
    fn check_error(text: &str, e: &FilterError) {
        assert!((1..=text.chars().count() + 1).contains(&e.column), "{e}");
        assert_eq!(e.filter, text);
        assert!(!e.message.is_empty() && !e.message.contains(" at column "));
        let want = format!(
            "invalid filter '{text}': {} at column {}",
            e.message, e.column
        );
        assert_eq!(e.to_string(), want);
    }

    #[test]
    fn exact_error_messages() {
        let cases = [
            ("tid === 3", "unexpected '=' at column 7"),
            ("", "empty filter at column 1"),
            (" \t ", "empty filter at column 1"),
            ("tid ==", "missing value after '==' at column 7"),
            ("tid == 3 ,", "expected a term after ',' at column 11"),
            ("tid == 3 ||", "expected a term after '||' at column 12"),
            ("tid == 1 && ", "expected a term after '&&' at column 13"),
            ("tid == 1,, pid == 2", "expected a term after ',' at column 10"),
            ("tid 3", "expected an operator after 'tid' at column 5"),
            ("tid", "expected an operator after 'tid' at column 4"),
            ("tid = 3", "unexpected '=' (equality is '==') at column 5"),
            ("tid == -1", "negative value at column 8"),
            ("tid == 99999999999999999999", "number too big at column 8"),
            ("ip == 0x10000000000000000", "number too big at column 7"),
            ("tid == 0xzz", "invalid number '0xzz' at column 8"),
            ("tid == +5", "invalid number '+5' at column 8"),
            ("tid == 0x", "invalid number '0x' at column 8"),
            ("tid == 4294967296", "value 4294967296 is too big for tid (32-bit) at column 8"),
            ("cpu==4294967296", "value 4294967296 is too big for cpu (32-bit) at column 6"),
            (
                "pid == 1 pid == 2",
                "unexpected 'pid' (terms are joined with ',' '&&' or '||') at column 10",
            ),
            (
                "(tid == 1)",
                "unsupported syntax '(' (perf filters have no parentheses) at column 1",
            ),
            (
                "tid == 1)",
                "unsupported syntax ')' (perf filters have no parentheses) at column 9",
            ),
            ("!tid == 1", "unsupported syntax '!' (perf filters have no NOT) at column 1"),
            ("comm < x", "operator '<' is not allowed for comm at column 6"),
            ("cgroup >= /a", "operator '>=' is not allowed for cgroup at column 8"),
            ("mode & 1", "operator '&' is not allowed for mode at column 6"),
            ("mode == sideways", "expected 'user' or 'kernel', not 'sideways' at column 9"),
            ("cgroup == a/b", "expected a cgroup path starting with '/', not 'a/b' at column 11"),
            ("cgroup == /a/../b", "cgroup path must not contain '.' or '..' at column 11"),
            ("comm == abcdefghijklmnop", "comm name longer than 15 bytes at column 9"),
            ("comm == \"abc", "unterminated quoted string at column 9"),
            ("comm == \"a\\nb\"", "unsupported escape (only \\\" and \\\\) at column 11"),
            ("mem_op == 1", "term 'mem_op' needs a memory-sampling event (not supported by bprof) at column 1"),
            ("time > 1", "term 'time' is not supported by bprof at column 1"),
            ("cpu == 1, id == 2", "term 'id' is not supported by bprof at column 11"),
            ("foo == 1", "unknown term 'foo' (expected one of: ip, tid, pid, cpu, period, uid, gid, cgroup, comm, mode) at column 1"),
            ("tid == 1 | pid == 2", "unexpected '|' (OR is '||') at column 10"),
            ("user == 1", "unexpected '==' at column 6"),
            (",", "unexpected ',' at column 1"),
            ("tid == 1 @", "unexpected '@' at column 10"),
            ("tid == \"5\"", "unexpected '\"' at column 8"),
            ("tid == 1\n", "unexpected '\\n' at column 9"),
        ];
        for (input, want) in cases {
            let e = parse(input).unwrap_err();
            check_error(input, &e);
            assert_eq!(err(input), format!("invalid filter '{input}': {want}"));
        }
    }

    #[test]
    fn happy_paths() {
        let one = |s: &str| -> Test {
            let f = parse(s).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(f.groups.len(), 1, "{s}");
            assert_eq!(f.groups[0].len(), 1, "{s}");
            f.groups[0][0].clone()
        };
        assert_eq!(one("tid==5"), num(Term::Tid, Op::Eq, 5));
        assert_eq!(
            one("ip < 0xffffffff00000000"),
            num(Term::Ip, Op::Lt, 0xffff_ffff_0000_0000)
        );
        assert_eq!(one("period&0X10"), num(Term::Period, Op::And, 16));
        assert_eq!(one("uid>=0"), num(Term::Uid, Op::Ge, 0));
        assert_eq!(
            one("gid <= 4294967295"),
            num(Term::Gid, Op::Le, u32::MAX.into())
        );
        assert_eq!(
            one("ip != 18446744073709551615"),
            num(Term::Ip, Op::Ne, u64::MAX)
        );
        let f = parse("cpu == 0 || cpu == 1, period > 1000").unwrap();
        let want = vec![
            vec![num(Term::Cpu, Op::Eq, 0), num(Term::Cpu, Op::Eq, 1)],
            vec![num(Term::Period, Op::Gt, 1000)],
        ];
        assert_eq!(f.groups, want);
        assert_eq!(f.entry_count(), 5);
        assert_eq!(
            f.terms().collect::<Vec<_>>(),
            [Term::Cpu, Term::Cpu, Term::Period]
        );
        assert_eq!(f.to_string(), "cpu == 0 || cpu == 1, period > 1000");
        let cg = one("cgroup == /system.slice");
        assert_eq!(cg.value, Value::Path("/system.slice".into()));
        let cg = one("cgroup!=/a=b/c.service");
        assert_eq!(cg.value, Value::Path("/a=b/c.service".into()));
        assert_eq!(one("cgroup == \"/a b\"").to_string(), "cgroup == \"/a b\"");
        assert_eq!(one("comm == bash").value, comm("bash"));
        assert_eq!(one("comm==(sd-pam)").value, comm("(sd-pam)"));
        assert_eq!(one("comm == \"my prog\"").value, comm("my prog"));
        assert_eq!(one("comm == \"a\\\"b\\\\\"").value, comm("a\"b\\"));
        assert_eq!(one("comm != \"\"").value, comm(""));
        assert_eq!(
            one("comm == 123456789012345").value,
            comm("123456789012345")
        );
        assert_eq!(one("user").value, Value::Mode(Mode::User));
        assert_eq!(one(" kernel ").value, Value::Mode(Mode::Kernel));
        assert_eq!(one("mode == kernel").value, Value::Mode(Mode::Kernel));
        assert_eq!(one("mode!=user").op, Op::Ne);
        let and = parse("tid == 1 && pid == 2").unwrap();
        assert_eq!(and, parse("tid == 1, pid == 2").unwrap());
        assert_eq!(and.groups.len(), 2);
        assert_eq!(parse("user||kernel,cpu==0").unwrap().entry_count(), 5);
        assert!(!and.is_empty() && Filter::default().is_empty());
    }

    #[test]
    fn entry_limit() {
        let ok = vec!["cpu == 0"; 64].join(", ");
        assert_eq!(parse(&ok).unwrap().entry_count(), 64);
        let many = vec!["cpu == 0"; 65].join(", ");
        assert_eq!(
            err(&many),
            format!(
                "invalid filter '{many}': filter too complex: 65 entries, at most 64 at column 1"
            )
        );
        // 62 ORed tests plus the two group markers is exactly the limit.
        let or = vec!["tid == 1"; 62].join(" || ");
        assert_eq!(parse(&or).unwrap().entry_count(), 64);
        assert!(err(&format!("{or} || tid == 1")).contains("65 entries"));
        let half = vec!["cpu == 0"; 40].join(" && ");
        let e = parse_all(&[half.clone(), half.clone()]).unwrap_err();
        assert!(
            e.to_string().contains("filter too complex: 80 entries"),
            "{e}"
        );
        let both = parse_all(&[half.clone(), "user || kernel".into()]).unwrap();
        assert_eq!(both.entry_count(), 44);
        assert!(parse_all(&[]).unwrap().is_empty());
        let bad = parse_all(&[half, "tid ==".into()]).unwrap_err();
        assert_eq!(bad.filter, "tid ==");
    }

    /// Files named `ok-*` must parse, `err-*` must fail; all must not panic.
    #[test]
    fn corpus() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz-corpus/filter");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).expect("corpus dir") {
            let path = entry.expect("corpus entry").path();
            let raw = std::fs::read_to_string(&path).expect("corpus file");
            let text = raw.strip_suffix('\n').unwrap_or(&raw);
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            n += 1;
            match parse(text) {
                Ok(f) => {
                    assert!(!name.starts_with("err-"), "{name}: {text:?} parsed");
                    assert_eq!(parse(&f.to_string()).as_ref(), Ok(&f), "{name}");
                }
                Err(e) => {
                    assert!(!name.starts_with("ok-"), "{name}: {e}");
                    check_error(text, &e);
                }
            }
        }
        assert!(n >= 30, "corpus too small: {n}");
    }

    fn arb_test() -> impl Strategy<Value = Test> {
        let num_terms = [Term::Ip, Term::Tid, Term::Pid, Term::Cpu, Term::Period];
        let num_term = prop::sample::select([&num_terms[..], &[Term::Uid, Term::Gid][..]].concat());
        let ops = [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::And];
        let op = prop::sample::select(ops.to_vec());
        let eq_ne = || prop::sample::select(vec![Op::Eq, Op::Ne]);
        let small_or_any = prop_oneof![0u64..5000, any::<u64>()];
        prop_oneof![
            (num_term, op, small_or_any)
                .prop_map(|(term, op, n)| { num(term, op, n.min(term.max())) }),
            (eq_ne(), "/([a-z0-9._=!<>\"\\\\ -]{1,8}/?){0,3}")
                .prop_filter("no . or ..", |(_, p)| !p
                    .split('/')
                    .any(|s| s == "." || s == ".."))
                .prop_map(|(op, p)| Test {
                    term: Term::Cgroup,
                    op,
                    value: Value::Path(p),
                }),
            (eq_ne(), "[ -~]{0,15}|[a-zé]{1,7}").prop_map(|(op, s)| Test {
                term: Term::Comm,
                op,
                value: comm(&s),
            }),
            (eq_ne(), any::<bool>()).prop_map(|(op, k)| Test {
                term: Term::Mode,
                op,
                value: Value::Mode(if k { Mode::Kernel } else { Mode::User }),
            }),
        ]
    }

    fn arb_filter() -> impl Strategy<Value = Filter> {
        let group = prop::collection::vec(arb_test(), 1..4);
        prop::collection::vec(group, 1..6).prop_map(|groups| Filter { groups })
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,40}") {
            if let Err(e) = parse(&s) {
                check_error(&s, &e);
            }
        }

        #[test]
        fn filter_like_input_never_panics(
            s in "([a-z_ \t0-9xX=!<>&|,/\"()\\\\-]|tid|cpu|comm|cgroup|mode|user|==|\\|\\|){0,30}"
        ) {
            if let Err(e) = parse(&s) {
                check_error(&s, &e);
            }
        }

        #[test]
        fn display_round_trips(f in arb_filter()) {
            let text = f.to_string();
            prop_assert_eq!(parse(&text), Ok(f), "{}", text);
        }

        #[test]
        fn damaged_filters_never_panic(f in arb_filter(), at in any::<prop::sample::Index>(),
                                        c in prop::sample::select(vec![',', '=', '|', '&', '"', ' ', '(', '-'])) {
            let mut chars: Vec<char> = f.to_string().chars().collect();
            let i = at.index(chars.len() + 1);
            if i < chars.len() && c == '-' {
                chars.remove(i);
            } else {
                chars.insert(i, c);
            }
            let s: String = chars.into_iter().collect();
            if let Err(e) = parse(&s) {
                check_error(&s, &e);
            }
        }
    }
}
