//! The default human-readable report, laid out like bcc's profile.py:
//! kernel frames leaf first, `--`, user frames, then `-  comm (pid)` and the
//! count; hottest stack last, next to the prompt.

use std::io::{self, Write};

use crate::symbolize::Stack;

/// Writes the report of the `limit` hottest stacks (all when `None`).
pub fn write(out: &mut dyn Write, stacks: &[Stack], limit: Option<usize>) -> io::Result<()> {
    let mut sorted: Vec<&Stack> = stacks.iter().collect();
    sorted.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tid.cmp(&b.tid)));
    if let Some(n) = limit {
        sorted.truncate(n);
    }
    for s in sorted.into_iter().rev() {
        if s.kernel_lost {
            writeln!(out, "    [Missed Kernel Stack]")?;
        }
        for f in &s.kernel {
            writeln!(out, "    {f}")?;
        }
        if !s.kernel.is_empty() && (!s.user.is_empty() || s.user_lost) {
            writeln!(out, "    --")?;
        }
        if s.user_lost {
            writeln!(out, "    [Missed User Stack]")?;
        }
        for f in &s.user {
            writeln!(out, "    {f}")?;
        }
        let what = if s.off_cpu { " [off-cpu us]" } else { "" };
        writeln!(out, "    -                {} ({}){what}", s.comm, s.tid)?;
        writeln!(out, "        {}\n", s.count)?;
    }
    out.flush()
}
