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
    /// Suffix kernel frames with `_[k]` (`-a`).
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
/// inside a name (Rust's `[u8; 8]`, C++ templates).
pub fn sanitize(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// Builds the folded lines, merging stacks that print identically (the same
/// comm and frames in different threads), sorted for stable output.
pub fn lines(stacks: &[Stack], opts: &FoldedOptions) -> Vec<(String, u64)> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for s in stacks {
        let mut line = sanitize(&s.comm);
        if s.comm.is_empty() {
            line.push_str("[unknown]");
        }
        let mut push = |frame: &str| {
            line.push(';');
            line.push_str(frame);
        };
        if opts.user_stacks && s.user_lost {
            push("[Missed User Stack]");
        }
        for f in s.user.iter().rev() {
            push(&sanitize(f));
        }
        if opts.delimiter && opts.user_stacks && opts.kernel_stacks && !s.kernel.is_empty() {
            push("-");
        }
        if opts.kernel_stacks && s.kernel_lost {
            push("[Missed Kernel Stack]");
        }
        for f in s.kernel.iter().rev() {
            let f = sanitize(f);
            if opts.annotate_kernel {
                push(&format!("{f}_[k]"));
            } else {
                push(&f);
            }
        }
        if opts.mark_off_cpu && s.off_cpu {
            push(OFF_CPU_FRAME);
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
