//! The SVG flame graph, drawn by inferno from the folded lines, each frame
//! coloured by what it is: user code red and yellow (C++ and Rust paths
//! yellow), kernel orange, JIT green, off-CPU blue (flamegraph.pl's java
//! and io palettes), said in the subtitle.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, Result};
use inferno::flamegraph::color::{Color, PaletteMap};
use inferno::flamegraph::{self, Options};

use crate::events::Mode;
use crate::output::folded::{self, FoldedOptions, From, OFF_CPU_FRAME};
use crate::output::summary::Summary;
use crate::symbolize::{Frames, Stack};

/// What a frame is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameClass {
    /// User code, run on a CPU.
    User,
    /// The kernel.
    Kernel,
    /// JIT code (perf maps, jitdumps, `[jit]`).
    Jit,
    /// Blocked time: `[off-cpu]`, and user frames seen only off-CPU.
    OffCpu,
}

impl FrameClass {
    /// The colour's name in the legend.
    fn legend(self) -> &'static str {
        match self {
            FrameClass::User => "user red/yellow",
            FrameClass::Kernel => "kernel orange",
            FrameClass::Jit => "JIT green",
            FrameClass::OffCpu => "off-CPU blue",
        }
    }

    /// A colour of the class's palette, varied by the name's hash so that
    /// neighbours differ (flamegraph.pl's java palette's red, yellow,
    /// orange and green; its io palette's blue).
    pub fn color(self, name: &str) -> Color {
        // FNV-1a: the same name gets the same colour in every graph.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let v = (h >> 40) as f32 / (1u64 << 24) as f32;
        let w = (h & 0xff_ffff) as f32 / (1u64 << 24) as f32;
        let t = |base: u8, span: f32, x: f32| base.saturating_add((span * x) as u8);
        let (r, g, b) = match self {
            FrameClass::User if name.contains("::") => {
                (t(175, 55.0, v), t(175, 55.0, v), t(50, 20.0, v))
            }
            FrameClass::User => (t(200, 55.0, v), t(50, 80.0, v), t(50, 80.0, v)),
            FrameClass::Kernel => (t(190, 65.0, v), t(90, 65.0, v), 0),
            FrameClass::Jit => (t(50, 60.0, v), t(200, 55.0, v), t(50, 60.0, v)),
            FrameClass::OffCpu => (t(80, 60.0, v), t(80, 60.0, v), t(190, 55.0, w)),
        };
        Color { r, g, b }
    }
}

/// The class of every frame name of `stacks` as folded lines name them.
/// A name seen as more than one class takes the first of kernel, JIT,
/// user, off-CPU; a user frame is off-CPU only if no on-CPU stack holds it.
pub(crate) fn classes(
    stacks: &[Stack],
    frames: &Frames,
    opts: &FoldedOptions,
) -> HashMap<String, FrameClass> {
    let mut out: HashMap<String, FrameClass> = HashMap::new();
    let is_jit = |locs: &[u32], i: usize| {
        // Each location may hold several (inlined) names: find the i-th.
        let mut n = 0;
        for &l in locs {
            let lines = frames
                .locations
                .get(l as usize)
                .map_or(1, |x| x.lines.len().max(1));
            if i < n + lines {
                return frames.jit.contains(&l);
            }
            n += lines;
        }
        false
    };
    for s in stacks {
        for p in folded::parts(s, opts) {
            let class = match p.from {
                From::Kernel(_) => FrameClass::Kernel,
                From::User(i) if is_jit(&s.user_locs, i) => FrameClass::Jit,
                From::User(_) if s.off_cpu => FrameClass::OffCpu,
                From::User(_) => FrameClass::User,
                From::Marker if p.name == OFF_CPU_FRAME => FrameClass::OffCpu,
                // `-` and the missed-stack markers keep inferno's greys and palette.
                From::Marker => continue,
            };
            out.entry(folded::shown(&p))
                .and_modify(|c| *c = (*c).min(class))
                .or_insert(class);
        }
    }
    out
}

/// What the flame graph says about itself.
#[derive(Debug, Clone, Default)]
pub struct SvgOptions {
    /// Title line (what was profiled).
    pub title: String,
    /// Subtitle line (duration, rate, event).
    pub subtitle: Option<String>,
    /// Unit of the counts, e.g. "samples".
    pub count_name: String,
    /// Each frame's class, for its colour (see [`classes`]); a name not
    /// here is drawn in inferno's default palette.
    pub classes: HashMap<String, FrameClass>,
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
            classes: HashMap::new(),
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
            classes: HashMap::new(),
        }
    }
}

/// The legend of the colours in use, for the subtitle.
fn legend(classes: &HashMap<String, FrameClass>) -> Option<String> {
    let mut present: Vec<FrameClass> = classes.values().copied().collect();
    present.sort_unstable();
    present.dedup();
    let names: Vec<&str> = present.into_iter().map(FrameClass::legend).collect();
    (!names.is_empty()).then(|| format!("colours: {}", names.join(", ")))
}

/// Draws `lines` as an SVG flame graph into `out`.
pub fn write(out: &mut dyn Write, lines: &[(String, u64)], opts: &SvgOptions) -> Result<()> {
    let mut o = Options::default();
    o.title = opts.title.clone();
    o.subtitle = match (opts.subtitle.clone(), legend(&opts.classes)) {
        (Some(s), Some(l)) => Some(format!("{s}; {l}")),
        (s, l) => s.or(l),
    };
    o.count_name = opts.count_name.clone();
    // Each frame's colour chosen here, by what it is: inferno takes a
    // name's colour from the map before its palette.
    let mut palette = PaletteMap::default();
    for (name, class) in &opts.classes {
        palette.insert(name, class.color(name));
    }
    o.palette_map = Some(&mut palette);
    let text: Vec<String> = lines.iter().map(|(s, c)| format!("{s} {c}")).collect();
    flamegraph::from_lines(&mut o, text.iter().map(String::as_str), &mut *out)
        .context("drawing the flame graph")?;
    out.flush().context("writing the flame graph")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each class's colours stay in their own hue, whatever the name.
    #[test]
    fn classes_have_colours_apart() {
        for i in 0..500 {
            let name = format!("f{i}");
            let c = FrameClass::User.color(&name);
            assert!(c.r >= 200 && c.g == c.b, "user {c:?}");
            let c = FrameClass::User.color(&format!("ns::{name}"));
            assert!(c.r >= 175 && c.r == c.g && c.b <= 70, "C++ user {c:?}");
            let c = FrameClass::Kernel.color(&name);
            assert!(c.r >= 190 && c.b == 0 && c.g < c.r, "kernel {c:?}");
            let c = FrameClass::Jit.color(&name);
            assert!(c.g >= 200 && c.r == c.b && c.r < 111, "JIT {c:?}");
            let c = FrameClass::OffCpu.color(&name);
            assert!(c.b >= 190 && c.r == c.g && c.r < 141, "off-CPU {c:?}");
        }
    }
}
