//! The scanner-parser for `--filter` (grammar in the parent module).

use super::{
    ends_path, ends_word, CpuMode, Filter, FilterError, Op, Term, Test, Value, COMM_MAX,
    MAX_FILTER_ENTRIES, MEMORY_TERMS, OPS, TERMS,
};

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
            None if word == "user" => return Ok(mode(CpuMode::User)),
            None if word == "kernel" => return Ok(mode(CpuMode::Kernel)),
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
                let mut comm = [0u8; crate::bpf::abi::COMM_LEN];
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
                "user" => Value::Mode(CpuMode::User),
                "kernel" => Value::Mode(CpuMode::Kernel),
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
