//! Folded stacks, one line per stack: `comm;root;...;leaf COUNT`, the
//! format flamegraph.pl and inferno read.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::symbolize::Stack;

/// How frames are written.
#[derive(Debug, Clone, Copy, Default)]
pub struct FoldedOptions {
    /// Put a `-` frame between the user and the kernel part (`-d`).
    pub delimiter: bool,
    /// Suffix kernel frames with `_[k]` (the default; not `--no-annotations`).
    pub annotate_kernel: bool,
    /// Kernel stacks were requested (so a missing one is worth a marker).
    pub kernel_stacks: bool,
    /// User stacks were requested.
    pub user_stacks: bool,
    /// End off-CPU stacks with an `[off-cpu]` frame (`--wall`), so on- and
    /// off-CPU time of the same code stay apart in the graph.
    pub mark_off_cpu: bool,
}

/// The leaf frame that marks off-CPU time in `--wall` profiles.
pub const OFF_CPU_FRAME: &str = "[off-cpu]";

/// `;` separates frames and a newline ends a line, so neither may appear
/// inside a name (Rust's `[u8; 8]`, C++ templates): appends `name` to `line`
/// with `;` written as `:` and line breaks as spaces. In place: a copy per
/// frame was ~1 ms of a 12 s profile's ~800 stacks.
fn push_sanitized(line: &mut String, name: &str) {
    if !name.contains([';', '\n', '\r']) {
        line.push_str(name);
        return;
    }
    line.extend(name.chars().map(|c| match c {
        ';' => ':',
        '\n' | '\r' => ' ',
        c => c,
    }));
}

/// Where a frame of a folded line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum From {
    /// `Stack::user[i]`.
    User(usize),
    /// `Stack::kernel[i]`.
    Kernel(usize),
    /// A marker bprof adds: `[Missed ... Stack]`, `-`, `[off-cpu]`.
    Marker,
}

/// One frame of a folded line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part<'a> {
    /// The name, before `;` and line breaks are replaced.
    pub(crate) name: &'a str,
    /// `_[k]` on kernel frames when annotating, else empty.
    pub(crate) suffix: &'static str,
    pub(crate) from: From,
}

/// The frames of a stack's folded line after its comm, root first: what
/// every output that names frames as `-f` does walks.
pub(crate) fn parts<'a>(s: &'a Stack, opts: &FoldedOptions) -> Vec<Part<'a>> {
    let mut out = Vec::with_capacity(s.user.len() + s.kernel.len() + 2);
    let marker = |name| Part {
        name,
        suffix: "",
        from: From::Marker,
    };
    if opts.user_stacks && s.user_lost {
        out.push(marker("[Missed User Stack]"));
    }
    for (i, f) in s.user.iter().enumerate().rev() {
        out.push(Part {
            name: f,
            suffix: "",
            from: From::User(i),
        });
    }
    if opts.delimiter && opts.user_stacks && opts.kernel_stacks && !s.kernel.is_empty() {
        out.push(marker("-"));
    }
    if opts.kernel_stacks && s.kernel_lost {
        out.push(marker("[Missed Kernel Stack]"));
    }
    let kernel_suffix = if opts.annotate_kernel { "_[k]" } else { "" };
    for (i, f) in s.kernel.iter().enumerate().rev() {
        out.push(Part {
            name: f,
            suffix: kernel_suffix,
            from: From::Kernel(i),
        });
    }
    if opts.mark_off_cpu && s.off_cpu {
        out.push(marker(OFF_CPU_FRAME));
    }
    out
}

/// A frame as folded lines show it: `;` as `:`, line breaks as spaces, the
/// suffix appended.
pub(crate) fn shown(p: &Part<'_>) -> String {
    let mut name = String::with_capacity(p.name.len() + p.suffix.len());
    push_sanitized(&mut name, p.name);
    name.push_str(p.suffix);
    name
}

/// The comm as a folded line starts: sanitized, `[unknown]` when empty.
pub(crate) fn comm_shown(s: &Stack) -> String {
    let mut line = String::new();
    push_sanitized(&mut line, &s.comm);
    if s.comm.is_empty() {
        line.push_str("[unknown]");
    }
    line
}

/// Builds the folded lines, merging stacks that print identically (the same
/// comm and frames in different threads), sorted for stable output.
pub fn lines(stacks: &[Stack], opts: &FoldedOptions) -> Vec<(String, u64)> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for s in stacks {
        let mut line = comm_shown(s);
        for p in parts(s, opts) {
            line.push(';');
            push_sanitized(&mut line, p.name);
            line.push_str(p.suffix);
        }
        *merged.entry(line).or_default() += s.count;
    }
    merged.into_iter().collect()
}

/// Writes folded lines.
pub fn write(out: &mut dyn Write, lines: &[(String, u64)]) -> io::Result<()> {
    for (stack, count) in lines {
        writeln!(out, "{stack} {count}")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::push_sanitized;

    #[test]
    fn separators_inside_names_are_replaced_in_place() {
        let mut line = String::from("comm");
        push_sanitized(&mut line, ";Vec<[u8; 8]>\r\nline");
        push_sanitized(&mut line, "plain");
        assert_eq!(line, "comm:Vec<[u8: 8]>  lineplain");
    }
}
