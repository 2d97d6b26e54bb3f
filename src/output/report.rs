//! The human-readable reports on stdout: by default a table of the hottest
//! functions (self and total share, the module each lies in), as
//! `perf report` and `pprof -top` open; with `--stacks`, every stack laid out
//! like bcc's profile.py: kernel frames leaf first, `--`, user frames, then
//! `-  comm (pid)` and the count, hottest stack last, next to the prompt.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::output::folded::{self, FoldedOptions, From};
use crate::symbolize::{Frames, Module, Stack};

/// Rows of the default table: what fits a screen with its header, its
/// footer and the summary below it.
pub const TABLE_ROWS: usize = 20;

/// One function's share of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRow {
    /// Its name, as folded stacks show it (`_[k]` on kernel frames).
    pub name: String,
    /// The file it lies in (`[kernel]`, `[jit]`, a file name).
    pub module: String,
    /// Counts where it is the leaf.
    pub self_count: u64,
    /// Counts of the stacks it is on (once per stack, however deep it
    /// recurses).
    pub total: u64,
}

/// The module a location lies in, as the table shows it.
pub(crate) fn module_label(frames: &Frames, loc: u32) -> String {
    let Some(l) = frames.locations.get(loc as usize) else {
        return String::new();
    };
    if frames.jit.contains(&loc) {
        return "[jit]".into();
    }
    match l.module.and_then(|m| frames.modules.get(m as usize)) {
        Some(Module::Kernel) => "[kernel]".into(),
        Some(Module::File {
            path: Some(path), ..
        }) => crate::names::clean(
            &path
                .file_name()
                .unwrap_or(path.as_os_str())
                .to_string_lossy(),
        )
        .into_owned(),
        Some(Module::File { path: None, .. }) | None => "[unknown]".into(),
    }
}

/// For each of a stack's kernel or user names (leaf first, inlined
/// functions included), the location it belongs to.
fn name_locations(locs: &[u32], frames: &Frames, names: usize) -> Vec<Option<u32>> {
    let mut out: Vec<Option<u32>> = locs
        .iter()
        .flat_map(|&l| {
            let n = frames
                .locations
                .get(l as usize)
                .map_or(1, |x| x.lines.len().max(1));
            std::iter::repeat_n(Some(l), n)
        })
        .collect();
    // Names without locations (stacks built by hand) have no module.
    out.resize(names, None);
    out
}

/// The module of each of a stack's folded parts (`parts`), as the table
/// shows it; empty for markers. `labels` caches each location's label.
pub(crate) fn part_modules(
    s: &Stack,
    parts: &[folded::Part<'_>],
    frames: &Frames,
    labels: &mut HashMap<u32, String>,
) -> Vec<String> {
    let user = name_locations(&s.user_locs, frames, s.user.len());
    let kernel = name_locations(&s.kernel_locs, frames, s.kernel.len());
    parts
        .iter()
        .map(|p| {
            let loc = match p.from {
                From::Marker => None,
                From::User(i) => user[i],
                From::Kernel(i) => kernel[i],
            };
            match (p.from, loc) {
                (From::Marker, _) => String::new(),
                (From::Kernel(_), None) => "[kernel]".into(),
                (_, Some(l)) => labels
                    .entry(l)
                    .or_insert_with(|| module_label(frames, l))
                    .clone(),
                (From::User(_), None) => String::new(),
            }
        })
        .collect()
}

/// Self and total counts of every function of `stacks`, named as `-f`
/// names them; hottest self first, then total, then name.
pub fn functions(stacks: &[Stack], frames: &Frames, opts: &FoldedOptions) -> Vec<FunctionRow> {
    let mut by: HashMap<(String, String), (u64, u64)> = HashMap::new();
    let mut labels: HashMap<u32, String> = HashMap::new();
    let mut on_stack = Vec::new();
    for s in stacks {
        let parts = folded::parts(s, opts);
        let modules = part_modules(s, &parts, frames, &mut labels);
        on_stack.clear();
        for (i, (p, module)) in parts.iter().zip(modules).enumerate() {
            // The user/kernel delimiter is not a function.
            if p.from == From::Marker && p.name == "-" {
                continue;
            }
            let key = (folded::shown(p), module);
            let e = by.entry(key.clone()).or_default();
            if i + 1 == parts.len() {
                e.0 += s.count;
            }
            if !on_stack.contains(&key) {
                e.1 += s.count;
                on_stack.push(key);
            }
        }
    }
    let mut rows: Vec<FunctionRow> = by
        .into_iter()
        .map(|((name, module), (self_count, total))| FunctionRow {
            name,
            module,
            self_count,
            total,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.self_count, b.total)
            .cmp(&(a.self_count, a.total))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    });
    rows
}

/// Writes the `limit` first rows of `rows` as a table: self and total
/// share of `total`, the count, the module and the function; then how many
/// functions it left out and their self share.
pub fn write_table(
    out: &mut dyn Write,
    rows: &[FunctionRow],
    total: u64,
    unit: &str,
    limit: usize,
) -> io::Result<()> {
    let pct = |n: u64| 100.0 * n as f64 / total.max(1) as f64;
    let shown = &rows[..rows.len().min(limit)];
    let count_width = shown
        .iter()
        .map(|r| r.self_count.max(r.total).to_string().len())
        .max()
        .unwrap_or(0)
        .max(unit.len());
    // Long module names are cut at the front: their end tells them apart.
    const MODULE_MAX: usize = 24;
    let module_width = shown
        .iter()
        .map(|r| r.module.chars().count().min(MODULE_MAX))
        .max()
        .unwrap_or(0)
        .max("MODULE".len());
    writeln!(
        out,
        "{:>6}  {:>6}  {:>count_width$}  {:<module_width$}  FUNCTION",
        "SELF%",
        "TOTAL%",
        unit.to_uppercase(),
        "MODULE"
    )?;
    for r in shown {
        writeln!(
            out,
            "{:>5.1}%  {:>5.1}%  {:>count_width$}  {:<module_width$}  {}",
            pct(r.self_count),
            pct(r.total),
            r.self_count,
            cut_front(&r.module, MODULE_MAX),
            r.name
        )?;
    }
    let rest = &rows[shown.len()..];
    if !rest.is_empty() {
        let self_rest: u64 = rest.iter().map(|r| r.self_count).sum();
        let s = if rest.len() == 1 { "" } else { "s" };
        writeln!(
            out,
            "({} more function{s}: {self_rest} {unit} self, {:.1}%)",
            rest.len(),
            pct(self_rest)
        )?;
    }
    out.flush()
}

/// `text` cut to its last `width` characters, marked with `..` where cut.
fn cut_front(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width || width < 3 {
        return text.to_string();
    }
    let keep: String = text.chars().skip(n - (width - 2)).collect();
    format!("..{keep}")
}

/// Writes the report of the `limit` hottest stacks (all when `None`);
/// kernel frames carry `_[k]` as in folded stacks when `annotate`.
pub fn write(
    out: &mut dyn Write,
    stacks: &[Stack],
    limit: Option<usize>,
    annotate: bool,
) -> io::Result<()> {
    let mut sorted: Vec<&Stack> = stacks.iter().collect();
    sorted.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.tid.cmp(&b.tid)));
    if let Some(n) = limit {
        sorted.truncate(n);
    }
    let k = if annotate { "_[k]" } else { "" };
    for s in sorted.into_iter().rev() {
        if s.kernel_lost {
            writeln!(out, "    [Missed Kernel Stack]")?;
        }
        for f in &s.kernel {
            writeln!(out, "    {f}{k}")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_modules_keep_their_end() {
        assert_eq!(cut_front("libverylongname.so.1", 10), "..ame.so.1");
        assert_eq!(cut_front("libc.so.6", 10), "libc.so.6");
    }
}
