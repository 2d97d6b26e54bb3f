//! `--filter`: perf's sample-filter language (tools/perf/util/bpf-filter.y),
//! parsed and checked in user space, then compiled into BPF map entries by
//! [`crate::programs::compile_filter`]. One loaded program serves any filter.
//!
//! ```text
//! filter  := term_or ( (',' | '&&') term_or )*    -- AND
//! term_or := expr ( '||' expr )*                  -- OR, binds tighter
//! expr    := TERM OP NUMBER | cgroup (==|!=) PATH | comm (==|!=) NAME
//!          | mode (==|!=) (user|kernel) | user | kernel
//! OP      := == != < <= > >= &
//! ```
//! Friendlier than perf's lexer: tokens need no spaces between them
//! (`tid==5`), and `&&` is accepted for `,`.

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
/// events, which bprof does not record.
const MEMORY_TERMS: [&str; 21] = [
    "addr",
    "weight",
    "weight1",
    "weight2",
    "weight3",
    "ins_lat",
    "p_stage_cyc",
    "retire_lat",
    "phys_addr",
    "code_pgsz",
    "data_pgsz",
    "mem_op",
    "mem_lvl",
    "mem_lvlnum",
    "mem_snoop",
    "mem_remote",
    "mem_lock",
    "mem_dtlb",
    "mem_blk",
    "mem_hops",
    "txn",
];

impl Term {
    /// The name used in filters.
    pub fn name(self) -> &'static str {
        TERMS
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(n, _)| n)
    }

    /// Largest value the field can hold.
    fn max(self) -> u64 {
        match self {
            Term::Tid | Term::Pid | Term::Cpu | Term::Uid | Term::Gid => u32::MAX as u64,
            _ => u64::MAX,
        }
    }
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::And => "&",
        }
    }
}

/// User or kernel mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The sample hit user code.
    User,
    /// The sample hit kernel code.
    Kernel,
}

/// What a test compares against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number.
    Num(u64),
    /// A cgroup path below the cgroup v2 root.
    Path(String),
    /// A thread name, NUL-padded as the kernel stores it.
    Comm([u8; 16]),
    /// A mode.
    Mode(Mode),
}

/// One test: `term op value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Test {
    /// What is looked at.
    pub term: Term,
    /// How it is compared.
    pub op: Op,
    /// What it is compared with.
    pub value: Value,
}

/// A parsed filter: an AND of groups, each an OR of tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The groups; all must pass.
    pub groups: Vec<Vec<Test>>,
}

impl Filter {
    /// Map entries this filter compiles to: one per test, plus a begin and
    /// an end marker around each group of more than one test.
    pub fn entry_count(&self) -> usize {
        self.groups
            .iter()
            .map(|g| if g.len() > 1 { g.len() + 2 } else { g.len() })
            .sum()
    }

    /// Every term used.
    pub fn terms(&self) -> impl Iterator<Item = Term> + '_ {
        self.groups.iter().flatten().map(|t| t.term)
    }
}

/// A malformed filter: the message, and the 1-based column it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// What is wrong.
    pub message: String,
    /// 1-based character column in `filter`.
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Op(Op),
    Comma,
    AndAnd,
    OrOr,
    Bad(char),
}

/// Characters that end a bare word.
fn is_special(c: char) -> bool {
    c.is_whitespace() || ",|&=!<>()\"".contains(c)
}

/// Splits into (token, 1-based column). Paths and names are words too: '/',
/// '-' and '.' are word characters.
fn lex(s: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        let next = chars.get(i + 1).copied();
        let (tok, len) = match (c, next) {
            (c, _) if c.is_whitespace() => {
                i += 1;
                continue;
            }
            (',', _) => (Tok::Comma, 1),
            ('|', Some('|')) => (Tok::OrOr, 2),
            ('&', Some('&')) => (Tok::AndAnd, 2),
            ('&', _) => (Tok::Op(Op::And), 1),
            ('=', Some('=')) => (Tok::Op(Op::Eq), 2),
            ('!', Some('=')) => (Tok::Op(Op::Ne), 2),
            ('<', Some('=')) => (Tok::Op(Op::Le), 2),
            ('>', Some('=')) => (Tok::Op(Op::Ge), 2),
            ('<', _) => (Tok::Op(Op::Lt), 1),
            ('>', _) => (Tok::Op(Op::Gt), 1),
            ('"', _) => {
                let mut text = String::new();
                let mut j = i + 1;
                let mut closed = false;
                while j < chars.len() {
                    match chars[j] {
                        '\\' if j + 1 < chars.len() => {
                            text.push(chars[j + 1]);
                            j += 2;
                        }
                        '"' => {
                            closed = true;
                            j += 1;
                            break;
                        }
                        ch => {
                            text.push(ch);
                            j += 1;
                        }
                    }
                }
                if !closed {
                    out.push((Tok::Bad('"'), col));
                    return out;
                }
                (Tok::Quoted(text), j - i)
            }
            (c, _) if !is_special(c) => {
                let len = chars[i..].iter().take_while(|&&c| !is_special(c)).count();
                (Tok::Word(chars[i..i + len].iter().collect()), len)
            }
            (c, _) => (Tok::Bad(c), 1),
        };
        out.push((tok, col));
        i += len;
    }
    out
}

struct Parser<'a> {
    filter: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    end_col: usize,
}

impl Parser<'_> {
    fn err<T>(&self, message: impl Into<String>, column: usize) -> Result<T, FilterError> {
        Err(FilterError {
            message: message.into(),
            column,
            filter: self.filter.to_string(),
        })
    }

    fn peek(&self) -> Option<&(Tok, usize)> {
        self.toks.get(self.pos)
    }

    fn unexpected<T>(&self, tok: &Tok, col: usize) -> Result<T, FilterError> {
        let what = match tok {
            Tok::Word(w) => format!("unexpected '{w}'"),
            Tok::Quoted(q) => format!("unexpected \"{q}\""),
            Tok::Op(op) => format!("unexpected '{}'", op.as_str()),
            Tok::Comma => "unexpected ','".into(),
            Tok::AndAnd => "unexpected '&&'".into(),
            Tok::OrOr => "unexpected '||'".into(),
            Tok::Bad('"') => return self.err("unterminated quoted name", col),
            Tok::Bad(c @ ('(' | ')')) => {
                return self.err(
                    format!("unsupported syntax '{c}' (perf filters have no parentheses)"),
                    col,
                )
            }
            Tok::Bad(c) => format!("unexpected '{c}'"),
        };
        self.err(what, col)
    }

    fn filter(&mut self) -> Result<Filter, FilterError> {
        let mut groups = Vec::new();
        loop {
            groups.push(self.group()?);
            match self.peek().cloned() {
                None => return Ok(Filter { groups }),
                Some((Tok::Comma | Tok::AndAnd, _)) => self.pos += 1,
                Some((tok, col)) => {
                    if let Tok::Word(w) = &tok {
                        return self.err(
                            format!("unexpected '{w}' (terms are joined with ',' '&&' or '||')"),
                            col,
                        );
                    }
                    return self.unexpected(&tok, col);
                }
            }
        }
    }

    fn group(&mut self) -> Result<Vec<Test>, FilterError> {
        let mut tests = vec![self.expr()?];
        while let Some((Tok::OrOr, _)) = self.peek() {
            self.pos += 1;
            tests.push(self.expr()?);
        }
        Ok(tests)
    }

    /// The token before the current one, for "expected a term after ','".
    fn joiner(&self) -> Option<&'static str> {
        match self.pos.checked_sub(1).and_then(|p| self.toks.get(p)) {
            Some((Tok::Comma, _)) => Some(","),
            Some((Tok::AndAnd, _)) => Some("&&"),
            Some((Tok::OrOr, _)) => Some("||"),
            _ => None,
        }
    }

    fn expr(&mut self) -> Result<Test, FilterError> {
        let Some((tok, col)) = self.peek().cloned() else {
            return match self.joiner() {
                Some(j) => self.err(format!("expected a term after '{j}'"), self.end_col),
                None => self.err("empty filter", 1),
            };
        };
        let Tok::Word(word) = tok else {
            return match (self.joiner(), &tok) {
                (Some(j), Tok::Comma | Tok::AndAnd | Tok::OrOr) => {
                    self.err(format!("expected a term after '{j}'"), col)
                }
                _ => self.unexpected(&tok, col),
            };
        };
        self.pos += 1;
        // The bare `user` / `kernel` shorthands.
        match word.as_str() {
            "user" => {
                return Ok(Test {
                    term: Term::Mode,
                    op: Op::Eq,
                    value: Value::Mode(Mode::User),
                })
            }
            "kernel" => {
                return Ok(Test {
                    term: Term::Mode,
                    op: Op::Eq,
                    value: Value::Mode(Mode::Kernel),
                })
            }
            _ => {}
        }
        let term = match TERMS.iter().find(|(n, _)| *n == word) {
            Some((_, t)) => *t,
            None if MEMORY_TERMS.contains(&word.as_str()) => {
                return self.err(
                    format!("term '{word}' needs a memory-sampling event (not supported by bprof)"),
                    col,
                )
            }
            None if word == "id" || word == "time" => {
                return self.err(format!("term '{word}' is not supported by bprof"), col)
            }
            None => {
                let names: Vec<&str> = TERMS.iter().map(|(n, _)| *n).collect();
                return self.err(
                    format!(
                        "unknown term '{word}' (expected one of: {})",
                        names.join(", ")
                    ),
                    col,
                );
            }
        };
        let op = match self.peek().cloned() {
            Some((Tok::Op(op), _)) => {
                self.pos += 1;
                op
            }
            Some((tok, c)) => {
                if let Tok::Bad('=' | '!') = tok {
                    return self.unexpected(&tok, c);
                }
                return self.err(format!("expected an operator after '{word}'"), c);
            }
            None => return self.err(format!("expected an operator after '{word}'"), self.end_col),
        };
        if matches!(term, Term::Cgroup | Term::Comm | Term::Mode) && !matches!(op, Op::Eq | Op::Ne)
        {
            return self.err(
                format!("operator '{}' is not allowed for {word}", op.as_str()),
                col,
            );
        }
        let Some((vtok, vcol)) = self.peek().cloned() else {
            return self.err(
                format!("missing value after '{}'", op.as_str()),
                self.end_col,
            );
        };
        let value = match (term, vtok) {
            (Term::Comm, Tok::Word(v) | Tok::Quoted(v)) => {
                if v.len() > COMM_MAX {
                    return self.err(format!("comm name longer than {COMM_MAX} bytes"), vcol);
                }
                let mut c = [0u8; 16];
                c[..v.len()].copy_from_slice(v.as_bytes());
                Value::Comm(c)
            }
            (Term::Cgroup, Tok::Word(v)) if v.starts_with('/') => Value::Path(v),
            (Term::Cgroup, _) => return self.err("expected a cgroup path starting with '/'", vcol),
            (Term::Mode, Tok::Word(v)) => match v.as_str() {
                "user" => Value::Mode(Mode::User),
                "kernel" => Value::Mode(Mode::Kernel),
                _ => return self.err(format!("expected 'user' or 'kernel', not '{v}'"), vcol),
            },
            (_, Tok::Word(v)) => Value::Num(self.number(&v, vcol, term)?),
            (_, Tok::Comma | Tok::AndAnd | Tok::OrOr) => {
                return self.err(format!("missing value after '{}'", op.as_str()), vcol);
            }
            (_, tok) => return self.unexpected(&tok, vcol),
        };
        self.pos += 1;
        Ok(Test { term, op, value })
    }

    fn number(&self, text: &str, col: usize, term: Term) -> Result<u64, FilterError> {
        if text.starts_with('-') {
            return self.err("negative value", col);
        }
        let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None => (text, 10),
        };
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return self.err(format!("invalid number '{text}'"), col);
        }
        let n = u64::from_str_radix(digits, radix).or_else(|_| self.err("number too big", col))?;
        if n > term.max() {
            return self.err(
                format!("value {n} is too big for {} (32-bit)", term.name()),
                col,
            );
        }
        Ok(n)
    }
}

/// Parses one `--filter` string.
pub fn parse(filter: &str) -> Result<Filter, FilterError> {
    let mut p = Parser {
        filter,
        toks: lex(filter),
        pos: 0,
        end_col: filter.chars().count() + 1,
    };
    if p.toks.is_empty() {
        return p.err("empty filter", 1);
    }
    let f = p.filter()?;
    let n = f.entry_count();
    if n > MAX_FILTER_ENTRIES {
        return p.err(
            format!("filter too complex: {n} entries, at most {MAX_FILTER_ENTRIES}"),
            1,
        );
    }
    Ok(f)
}

/// Parses several `--filter` options, which combine with AND.
pub fn parse_all(filters: &[String]) -> Result<Filter, FilterError> {
    let mut all = Filter::default();
    for f in filters {
        all.groups.extend(parse(f)?.groups);
    }
    let n = all.entry_count();
    if n > MAX_FILTER_ENTRIES {
        return Err(FilterError {
            message: format!("filter too complex: {n} entries, at most {MAX_FILTER_ENTRIES}"),
            column: 1,
            filter: filters.join(", "),
        });
    }
    Ok(all)
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.op.as_str();
        match &self.value {
            Value::Num(n) => write!(f, "{} {op} {n}", self.term.name()),
            Value::Path(p) => write!(f, "cgroup {op} {p}"),
            Value::Comm(c) => {
                let name: String = c
                    .iter()
                    .take_while(|&&b| b != 0)
                    .map(|&b| b as char)
                    .collect();
                let escaped = name.replace('\\', "\\\\").replace('"', "\\\"");
                write!(f, "comm {op} \"{escaped}\"")
            }
            Value::Mode(Mode::User) => write!(f, "mode {op} user"),
            Value::Mode(Mode::Kernel) => write!(f, "mode {op} kernel"),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    fn num(term: Term, op: Op, n: u64) -> Test {
        Test {
            term,
            op,
            value: Value::Num(n),
        }
    }

    #[test]
    fn exact_error_messages() {
        let cases = [
            ("tid === 3", "invalid filter 'tid === 3': unexpected '=' at column 7"),
            ("", "invalid filter '': empty filter at column 1"),
            ("   ", "invalid filter '   ': empty filter at column 1"),
            ("tid ==", "invalid filter 'tid ==': missing value after '==' at column 7"),
            ("tid == 3 ,", "invalid filter 'tid == 3 ,': expected a term after ',' at column 11"),
            ("tid == 3 ||", "invalid filter 'tid == 3 ||': expected a term after '||' at column 12"),
            ("tid 3", "invalid filter 'tid 3': expected an operator after 'tid' at column 5"),
            ("tid == -1", "invalid filter 'tid == -1': negative value at column 8"),
            (
                "tid == 99999999999999999999",
                "invalid filter 'tid == 99999999999999999999': number too big at column 8",
            ),
            ("tid == 0xzz", "invalid filter 'tid == 0xzz': invalid number '0xzz' at column 8"),
            (
                "tid == 4294967296",
                "invalid filter 'tid == 4294967296': value 4294967296 is too big for tid (32-bit) at column 8",
            ),
            (
                "(tid == 1)",
                "invalid filter '(tid == 1)': unsupported syntax '(' (perf filters have no parentheses) at column 1",
            ),
            ("comm < x", "invalid filter 'comm < x': operator '<' is not allowed for comm at column 1"),
        ];
        for (input, want) in cases {
            assert_eq!(err(input), want, "{input:?}");
        }
        assert_eq!(
            err("pid == 1 pid == 2"),
            "invalid filter 'pid == 1 pid == 2': unexpected 'pid' (terms are joined with ',' '&&' or '||') at column 10"
        );
        assert!(err("foo == 1").contains("unknown term 'foo' (expected one of: ip, tid"));
        assert!(err("mem_op == 1").contains("needs a memory-sampling event"));
        assert!(err("time > 1").contains("term 'time' is not supported by bprof"));
        assert!(err("comm == abcdefghijklmnop").contains("comm name longer than 15 bytes"));
        assert!(err("tid == 1 && ").contains("expected a term after '&&'"));
        assert!(err("tid == 1,, pid == 2").contains("expected a term after ','"));
    }

    #[test]
    fn happy_paths() {
        assert_eq!(
            parse("tid==5").unwrap().groups,
            vec![vec![num(Term::Tid, Op::Eq, 5)]]
        );
        assert_eq!(
            parse("ip < 0xffffffff00000000").unwrap().groups,
            vec![vec![num(Term::Ip, Op::Lt, 0xffff_ffff_0000_0000)]]
        );
        let f = parse("cpu == 0 || cpu == 1, period > 1000").unwrap();
        assert_eq!(
            f.groups,
            vec![
                vec![num(Term::Cpu, Op::Eq, 0), num(Term::Cpu, Op::Eq, 1)],
                vec![num(Term::Period, Op::Gt, 1000)]
            ]
        );
        assert_eq!(f.entry_count(), 5);
        assert_eq!(
            parse("cgroup == /system.slice").unwrap().groups[0][0].value,
            Value::Path("/system.slice".into())
        );
        let mut bash = [0u8; 16];
        bash[..4].copy_from_slice(b"bash");
        assert_eq!(
            parse("comm == bash").unwrap().groups[0][0].value,
            Value::Comm(bash)
        );
        let mut spaced = [0u8; 16];
        spaced[..7].copy_from_slice(b"my prog");
        assert_eq!(
            parse("comm == \"my prog\"").unwrap().groups[0][0].value,
            Value::Comm(spaced)
        );
        assert_eq!(
            parse("user").unwrap().groups[0][0].value,
            Value::Mode(Mode::User)
        );
        assert_eq!(
            parse("mode == kernel").unwrap().groups[0][0].value,
            Value::Mode(Mode::Kernel)
        );
        assert_eq!(
            parse("tid == 1 && pid == 2").unwrap(),
            parse("tid == 1, pid == 2").unwrap()
        );
        assert_eq!(parse("period & 0x10").unwrap().groups[0][0].op, Op::And);
    }

    #[test]
    fn entry_limit() {
        let ok = vec!["cpu == 0"; 64].join(", ");
        assert_eq!(parse(&ok).unwrap().entry_count(), 64);
        let many = vec!["cpu == 0"; 65].join(", ");
        assert!(err(&many).contains("filter too complex: 65 entries, at most 64"));
        let half = vec!["cpu == 0"; 40].join(", ");
        let e = parse_all(&[half.clone(), half]).unwrap_err();
        assert!(e.to_string().contains("filter too complex: 80 entries"));
    }

    #[test]
    fn corpus_never_panics() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz-corpus/filter");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).expect("corpus dir") {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let text = text.trim_end_matches('\n');
            n += 1;
            if let Err(e) = parse(text) {
                assert!(
                    e.column >= 1 && e.column <= text.chars().count() + 1,
                    "{text:?}: {e}"
                );
                assert!(e.to_string().starts_with("invalid filter '"), "{e}");
            }
        }
        assert!(n >= 20, "corpus too small: {n}");
    }

    fn arb_test() -> impl Strategy<Value = Test> {
        let num_terms = prop_oneof![
            Just(Term::Ip),
            Just(Term::Tid),
            Just(Term::Pid),
            Just(Term::Cpu),
            Just(Term::Period),
            Just(Term::Uid),
            Just(Term::Gid),
        ];
        let ops = prop_oneof![
            Just(Op::Eq),
            Just(Op::Ne),
            Just(Op::Lt),
            Just(Op::Le),
            Just(Op::Gt),
            Just(Op::Ge),
            Just(Op::And),
        ];
        let eq_ne = prop_oneof![Just(Op::Eq), Just(Op::Ne)];
        prop_oneof![
            (num_terms, ops, any::<u64>()).prop_map(|(term, op, n)| Test {
                term,
                op,
                value: Value::Num(n.min(term.max()))
            }),
            (eq_ne.clone(), "/[a-z0-9._-]{0,12}(/[a-z0-9._-]{1,8}){0,2}").prop_map(|(op, p)| {
                Test {
                    term: Term::Cgroup,
                    op,
                    value: Value::Path(p),
                }
            }),
            (eq_ne.clone(), "[ -~]{1,15}").prop_map(|(op, s)| {
                let mut c = [0u8; 16];
                c[..s.len()].copy_from_slice(s.as_bytes());
                Test {
                    term: Term::Comm,
                    op,
                    value: Value::Comm(c),
                }
            }),
            (eq_ne, any::<bool>()).prop_map(|(op, k)| Test {
                term: Term::Mode,
                op,
                value: Value::Mode(if k { Mode::Kernel } else { Mode::User })
            }),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,40}") {
            if let Err(e) = parse(&s) {
                prop_assert!(e.column >= 1 && e.column <= s.chars().count() + 1, "{}", e);
            }
        }

        #[test]
        fn filter_like_input_never_panics(s in "[a-z_ 0-9x=!<>&|,/\"()-]{0,40}") {
            if let Err(e) = parse(&s) {
                prop_assert!(e.column >= 1 && e.column <= s.chars().count() + 1, "{}", e);
            }
        }

        #[test]
        fn display_round_trips(groups in prop::collection::vec(prop::collection::vec(arb_test(), 1..4), 1..6)) {
            let f = Filter { groups };
            let text = f.to_string();
            prop_assert_eq!(parse(&text).unwrap(), f, "{}", text);
        }
    }
}
