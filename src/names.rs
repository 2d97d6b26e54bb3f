//! Names as bprof shows them. Function names, thread names, module and file
//! names and the command line come from files and processes other users
//! control, so every one passes through [`clean`] before any output: a
//! control character never reaches a terminal, a file or an SVG raw (an
//! `ESC ] 0;` retitles a terminal, a newline splits a report line, ESC and
//! BEL make XML ill-formed); it is shown as a `\x1b`-style escape instead.
//! A name is also capped in length. Each output adds its own quoting on top
//! (folded maps `;`, the SVG is escaped as XML by inferno).

use std::borrow::Cow;
use std::fmt::Write;
use std::path::Path;

/// The longest name shown, in bytes; longer ones are cut there and say by
/// how much.
pub const MAX_NAME: usize = 4096;

/// Whether `c` is shown as an escape: C0 and C1 controls, DEL, and the
/// Unicode controls that reorder or hide text on a terminal (bidirectional
/// overrides and isolates).
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `name` as outputs show it: control characters as `\xNN` (`\u{NNNN}`
/// past U+00FF) escapes, at most [`MAX_NAME`] bytes. Borrowed (no copy)
/// when there is nothing to change, as almost always.
pub fn clean(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_NAME && !name.chars().any(escaped) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len().min(MAX_NAME) + 16);
    let mut rest = name.len();
    for c in name.chars() {
        let start = out.len();
        if escaped(c) {
            if (c as u32) < 0x100 {
                let _ = write!(out, "\\x{:02x}", c as u32);
            } else {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        } else {
            out.push(c);
        }
        if out.len() > MAX_NAME {
            out.truncate(start);
            let _ = write!(out, "...[{rest} more bytes]");
            break;
        }
        rest -= c.len_utf8();
    }
    Cow::Owned(out)
}

/// A path as messages show it: [`clean`]ed, with bytes that are not UTF-8
/// replaced.
pub fn path(p: &Path) -> String {
    clean(&p.to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_escapes_and_the_rest_is_kept() {
        assert!(matches!(
            clean("std::vector<int>::push_back"),
            Cow::Borrowed(_)
        ));
        assert_eq!(clean("a\x1b]0;owned\x07b"), "a\\x1b]0;owned\\x07b");
        assert_eq!(
            clean("line\nbreak\r\t\x7f"),
            "line\\x0abreak\\x0d\\x09\\x7f"
        );
        assert_eq!(clean("c1\u{9b}2J"), "c1\\x9b2J");
        assert_eq!(clean("bidi\u{202e}txt"), "bidi\\u{202e}txt");
        assert_eq!(clean("naïve <b>&amp;</b>"), "naïve <b>&amp;</b>");
        for s in ["\x1b[2J", "x\u{0}y", "\u{85}"] {
            assert!(!clean(s).chars().any(|c| c.is_control()), "{s:?}");
        }
    }

    #[test]
    fn long_names_are_cut_at_the_cap_and_say_so() {
        let long = "é".repeat(MAX_NAME);
        let c = clean(&long);
        assert!(c.len() <= MAX_NAME + 32, "{}", c.len());
        assert!(c.ends_with(&format!("...[{} more bytes]", MAX_NAME)), "{c}");
        let escapes = "\x1b".repeat(MAX_NAME);
        let c = clean(&escapes);
        assert!(c.starts_with("\\x1b\\x1b") && c.ends_with("more bytes]"));
        assert!(!c.contains('\x1b'));
        let exact = "a".repeat(MAX_NAME);
        assert_eq!(clean(&exact), exact);
    }
}
