//! The SVG flame graph, drawn by inferno from the folded lines.

use std::io::Write;

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use crate::events::Mode;
use crate::output::summary::Summary;

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

impl SvgOptions {
    /// The title, subtitle and unit of a profile's graph: what was
    /// profiled, for how long, at what rate, and the cycle counts if any.
    pub(crate) fn for_profile(summary: &Summary, total: u64, counts: Option<String>) -> Self {
        let (secs, event, rate) = (summary.elapsed.as_secs_f64(), summary.event, summary.rate);
        let (kind, subtitle, unit) = match summary.mode {
            Mode::OnCpu => (
                "",
                format!("{secs:.2} s, {event} at {rate}, {} samples", summary.stats.counted),
                "samples",
            ),
            Mode::OffCpu => (
                " off-CPU time",
                format!(
                    "{secs:.2} s, {:.3} s blocked (counts are microseconds)",
                    total as f64 / 1e6
                ),
                "us",
            ),
            Mode::Wall => (
                " wall-clock time",
                format!("{secs:.2} s, on-CPU {event} at {rate} plus off-CPU time, frames ending in [off-cpu] are blocked (counts are microseconds)"),
                "us",
            ),
        };
        SvgOptions {
            title: format!("bprof{kind}: {}", summary.what),
            subtitle: Some(match counts {
                Some(c) => format!("{subtitle}; {c}"),
                None => subtitle,
            }),
            count_name: unit.into(),
        }
    }
}

impl SvgOptions {
    /// The title of one `--every` interval's graph: what, when, how long.
    pub(crate) fn for_interval(
        mode: Mode,
        what: &str,
        start: &str,
        length: std::time::Duration,
        total: u64,
    ) -> Self {
        let (kind, unit) = match mode {
            Mode::OnCpu => ("", "samples"),
            Mode::OffCpu => (" off-CPU time", "us"),
            Mode::Wall => (" wall-clock time", "us"),
        };
        SvgOptions {
            title: format!("bprof{kind}: {what}"),
            subtitle: Some(format!(
                "{start} + {:.2} s, {total} {unit}",
                length.as_secs_f64()
            )),
            count_name: unit.into(),
        }
    }
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
