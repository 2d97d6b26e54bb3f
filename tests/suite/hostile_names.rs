//! Names are hostile input: a local user names their program and its
//! functions. A demangling bomb costs bounded time, memory and output; a
//! control character or markup never reaches a terminal, a folded line or
//! the SVG raw, and the rest of the profile is named as ever.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// `f<A, B<A, A>, B<B<A, A>, B<A, A>>, ...>`, mangled: each template
/// argument is the one before twice, by back reference, so each level
/// doubles the demangled name.
fn demangling_bomb(levels: usize) -> String {
    let seq = |n: usize| {
        let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let (mut n, mut s) = (n - 1, Vec::new());
        loop {
            s.insert(0, digits[n % 36]);
            n /= 36;
            if n == 0 {
                break format!("S{}_", String::from_utf8(s).unwrap());
            }
        }
    };
    let mut s = String::from("_Z1fI1A1BIS0_S0_E");
    for i in 0..levels {
        s += &format!("S1_I{}{}E", seq(3 + i), seq(3 + i));
    }
    s + "E"
}

#[test]
fn hostile_a_demangling_bomb_costs_bounded_time_output_and_memory() {
    root_or_skip!();
    let _g = exclusive();
    let dir = scratch("hostile_bomb");
    // 21 levels in at most 255 bytes: some 54 MB demangled.
    let bomb = demangling_bomb(21);
    assert!(bomb.len() <= 255, "{}", bomb.len());
    let bin = dir.join("fx_bomb");
    let st = Command::new("objcopy")
        .arg("--strip-debug")
        .arg("--redefine-sym")
        .arg(format!("heavy={bomb}"))
        .arg(fixture("work631"))
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let (out, took, rss_kib) = measured(
        Command::new("timeout")
            .args(["-s", "KILL", "60"])
            .arg(env!("CARGO_BIN_EXE_bprof"))
            .args(["--no-counts", "-v", "-F", "499", "-f", "--"])
            .arg(&bin)
            .arg("1"),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    // Unbounded, this frame alone took 6.6 s, 222 MB and a 54 MB file.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(rss_kib < 150 << 10, "{rss_kib} KiB");
    assert!(out.stdout.len() < 1 << 20, "{} bytes", out.stdout.len());
    assert!(err.contains("names shown mangled"), "{err}");
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    // The bomb shows mangled, where heavy's samples are; the rest is named.
    let all = total_for(&lines, "fx_bomb");
    let bombed = with_frame(&lines, "fx_bomb", &bomb);
    let medium = with_frame(&lines, "fx_bomb", "medium");
    let light = with_frame(&lines, "fx_bomb", "light");
    assert!(bombed > medium && medium > light && light > 0, "{lines:?}");
    assert!((bombed + medium + light) * 10 > all * 8, "{lines:?}");
}

/// The text of every element of an SVG, as an XML parser reads it (entity
/// references resolved), and the names of its elements; panics if it is
/// not well-formed.
fn svg_texts(svg: &str) -> (Vec<String>, Vec<String>) {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let (mut texts, mut elements, mut cur) = (Vec::new(), Vec::new(), String::new());
    let mut depth = 0i64;
    loop {
        let ev = reader.read_event().expect("well-formed SVG");
        let mut flush = |cur: &mut String| {
            if !cur.is_empty() {
                texts.push(std::mem::take(cur));
            }
        };
        match ev {
            Event::Start(e) => {
                flush(&mut cur);
                depth += 1;
                elements.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
            }
            Event::Empty(e) => {
                flush(&mut cur);
                elements.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
            }
            Event::End(_) => {
                flush(&mut cur);
                depth -= 1;
            }
            Event::Text(t) => cur.push_str(&t.decode().unwrap()),
            Event::GeneralRef(r) => match r.resolve_char_ref() {
                Ok(Some(c)) => cur.push(c),
                _ => cur.push(match &*r.decode().unwrap() {
                    "amp" => '&',
                    "lt" => '<',
                    "gt" => '>',
                    "quot" => '"',
                    "apos" => '\'',
                    other => panic!("unknown entity &{other};"),
                }),
            },
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced SVG");
    (texts, elements)
}

/// Profiles `bin` for a second with `-v` and `extra` options.
fn profile_named(bin: &Path, extra: &[&std::ffi::OsStr]) -> (std::process::Output, String) {
    let out = run(Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_bprof"))
        .args(["--no-counts", "-v", "-F", "499"])
        .args(extra)
        .arg("--")
        .arg(bin)
        .arg("1"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (out, err)
}

#[test]
// Long on purpose: one hostile binary, then each output it reaches (folded, SVG, report, stderr) checked in turn.
fn hostile_control_characters_and_markup_in_names_never_reach_an_output_raw() {
    root_or_skip!();
    let _g = parallel();
    let dir = scratch("hostile_ctl");
    let bin = hostile_named_work631(&dir);
    let comm = escaped(HOSTILE_FILE_NAME);
    let (heavy, medium, light) = (
        folded_form(HOSTILE_HEAVY),
        folded_form(HOSTILE_MEDIUM),
        folded_form(HOSTILE_LIGHT),
    );

    // Folded stacks: one stack a line, every name escaped, nothing raw on
    // stdout or stderr.
    let svg_path = dir.join("flame.svg");
    let (out, err) = profile_named(
        &bin,
        &["-f".as_ref(), "--svg".as_ref(), svg_path.as_os_str()],
    );
    assert_eq!(
        control_bytes(&out.stdout),
        b"",
        "raw control bytes on stdout"
    );
    assert_eq!(
        control_bytes(&out.stderr),
        b"",
        "raw control bytes on stderr: {err}"
    );
    let lines = parse_folded(&String::from_utf8_lossy(&out.stdout));
    assert_totals(&err, &lines);
    let all = total_for(&lines, &comm);
    let (h, m, l) = (
        with_frame(&lines, &comm, &heavy),
        with_frame(&lines, &comm, &medium),
        with_frame(&lines, &comm, &light),
    );
    assert!(all > 200 && h > m && m > l && l > 0, "{lines:?}");
    assert!((h + m + l) * 10 > all * 8, "{lines:?}");
    // The command line in the summary and titles is escaped too.
    assert!(err.contains(&comm), "{err}");

    // The SVG: well-formed XML with no control character; the markup in a
    // name is text, not elements.
    let svg = std::fs::read(&svg_path).unwrap();
    assert_eq!(control_bytes(&svg), b"", "raw control bytes in the SVG");
    let (texts, elements) = svg_texts(&String::from_utf8_lossy(&svg));
    assert!(!elements.iter().any(|e| e == "b"), "{elements:?}");
    for name in [&heavy, &medium, &light] {
        assert!(
            texts.iter().any(|t| t.starts_with(name.as_str())),
            "{name} not in the SVG's texts: {texts:?}"
        );
    }
    assert!(
        texts
            .iter()
            .any(|t| t.contains(&comm) && t.starts_with("bprof")),
        "no escaped command in the title: {texts:?}"
    );

    // The table of functions (no output flag): escaped, one row each,
    // named as -f names them.
    let (out, err) = profile_named(&bin, &[]);
    assert_eq!(
        control_bytes(&out.stdout),
        b"",
        "raw control bytes in the table"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for name in [&heavy, &medium, &light] {
        assert!(
            table.lines().any(|l| l.ends_with(&format!("  {name}"))),
            "{name} not a row of the table:\n{table}\n{err}"
        );
    }

    // The stacks report (--stacks): the same, each stack's lines intact.
    let (out, err) = profile_named(&bin, &["--stacks".as_ref()]);
    assert_eq!(
        control_bytes(&out.stdout),
        b"",
        "raw control bytes in the report"
    );
    let report = String::from_utf8_lossy(&out.stdout);
    // (The report has no separator to map: `;` stays.)
    let names = [HOSTILE_HEAVY, HOSTILE_MEDIUM, HOSTILE_LIGHT].map(escaped);
    for name in &names {
        assert!(
            report.lines().any(|l| l.trim() == name.as_str()),
            "{name} not on a line of its own:\n{report}\n{err}"
        );
    }
    assert!(
        report.contains(&format!("-                {comm} (")),
        "{report}"
    );
}
