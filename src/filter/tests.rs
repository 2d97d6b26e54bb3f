//! Unit and property tests of the filter parser.

use super::parse::{parse, parse_all};
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
    assert_eq!(one("user").value, Value::Mode(CpuMode::User));
    assert_eq!(one(" kernel ").value, Value::Mode(CpuMode::Kernel));
    assert_eq!(one("mode == kernel").value, Value::Mode(CpuMode::Kernel));
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
        format!("invalid filter '{many}': filter too complex: 65 entries, at most 64 at column 1")
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
        (num_term, op, small_or_any).prop_map(|(term, op, n)| { num(term, op, n.min(term.max())) }),
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
            value: Value::Mode(if k { CpuMode::Kernel } else { CpuMode::User }),
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
