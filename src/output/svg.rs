//! The SVG flame graph, drawn by inferno from the folded lines.

use std::io::Write;

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

/// What the flame graph says about itself.
#[derive(Debug, Clone, Default)]
pub struct SvgOptions {
    /// Title line (what was profiled).
    pub title: String,
    /// Subtitle line (duration, rate, event).
    pub subtitle: Option<String>,
    /// Unit of the counts, e.g. "samples".
    pub count_name: String,
}

/// Draws `lines` as an SVG flame graph into `out`.
pub fn write(out: &mut dyn Write, lines: &[(String, u64)], opts: &SvgOptions) -> Result<()> {
    let mut o = Options::default();
    o.title = opts.title.clone();
    o.subtitle = opts.subtitle.clone();
    o.count_name = opts.count_name.clone();
    let text: Vec<String> = lines.iter().map(|(s, c)| format!("{s} {c}")).collect();
    flamegraph::from_lines(&mut o, text.iter().map(String::as_str), &mut *out)
        .context("drawing the flame graph")?;
    out.flush().context("writing the flame graph")
}
