//! Periodic profiles (`--every SECONDS`): one set of output files per
//! interval, for as long as bprof runs. Each interval drains the kernel's
//! count map and hands its stacks over (`Collector::take_interval`), so
//! memory does not grow with the length of the run and nothing counted
//! falls between two files.
//!
//! File names are patterns (see [`crate::output::pattern`]); pprof files
//! also carry their start and duration inside. With `--otlp`, each
//! interval's profile is also queued for sending (never waited for).
//!
//! What user space remembers across intervals is bounded too: the
//! symbolizer (which caches every file it parsed) is renewed every
//! [`symbolize::SYMBOLIZER_LIFE`], and the side band's mappings of processes that have
//! exited are forgotten once their last samples were written.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;

use crate::bpf::stacks::RawStack;
use crate::collect::sideband::{forget_gone, MmapIndex};
use crate::events::sampling::Event;
use crate::output::file::{Options, OutputFile};
use crate::output::pattern::expand;
use crate::output::{folded, otlp, pprof, svg};
use crate::session::settings::ProfileSettings;
use crate::symbolize::{self, SymbolStats};

/// The state of a periodic profile.
pub struct Periodic {
    every: Duration,
    began: Instant,
    began_at: SystemTime,
    /// Start of the current interval.
    from: Instant,
    from_at: SystemTime,
    /// Intervals ended so far.
    intervals: u64,
    /// Intervals with no samples (no files written for them).
    pub empty: u64,
    /// Files written.
    pub files: u64,
    /// Files that could not be written (each said when it happened).
    pub unwritten: u64,
    /// The samples those files would have held.
    pub unwritten_samples: u64,
    /// Sum of every interval's folded counts: the totals check.
    pub total: u64,
    /// Stacks written, summed over intervals.
    pub stacks: usize,
    /// Symbolization, summed over intervals.
    pub sym: SymbolStats,
    /// Renewed every SYMBOLIZER_LIFE.
    symbolizer: symbolize::Renewing,
    /// Processes already gone at the end of the last interval.
    gone: HashSet<u32>,
}

impl Periodic {
    /// A periodic profile whose recording began at `began` (`began_at`).
    pub fn new(
        every: Duration,
        began: Instant,
        began_at: SystemTime,
        code_info: bool,
        inlined: bool,
    ) -> Self {
        Periodic {
            every,
            began,
            began_at,
            from: began,
            from_at: began_at,
            intervals: 0,
            empty: 0,
            files: 0,
            unwritten: 0,
            unwritten_samples: 0,
            total: 0,
            stacks: 0,
            sym: SymbolStats::default(),
            symbolizer: symbolize::Renewing::new(code_info, inlined),
            gone: HashSet::new(),
        }
    }

    /// Whether the current interval is over. Boundaries are fixed multiples
    /// of `every` from the start, so they do not drift with the time a
    /// write takes.
    pub fn due(&self, now: Instant) -> bool {
        now.duration_since(self.began) >= self.every.saturating_mul(self.intervals as u32 + 1)
    }

    /// Ends the current interval at `now` with the stacks drained for it:
    /// symbolizes them, writes its files and queues its OTLP profile.
    pub fn write(
        &mut self,
        settings: &ProfileSettings,
        event: Event,
        index: &mut MmapIndex,
        raw: Vec<RawStack>,
        now: Instant,
        delivery: Option<&mut otlp::Delivery>,
    ) -> Result<()> {
        let length = now.duration_since(self.from);
        let start = self.from_at;
        // Named by the interval's nominal start (distinct seconds for
        // intervals of a second or more), timed by the real drains.
        let nominal = self.began_at + self.every.saturating_mul(self.intervals as u32);
        self.intervals += 1;
        let number = self.intervals;
        self.from = now;
        self.from_at = start + length;

        let code_info = self.symbolizer.code_info();
        let symbolizer = self.symbolizer.get();
        index.jit.prepare(&raw);
        let (stacks, sym, frames) = symbolize::symbolize_frames(
            symbolizer,
            code_info,
            None,
            &raw,
            index,
            settings.unknown_style,
        );
        drop(raw);
        forget_gone(index, &mut self.gone);
        let lines = folded::lines(&stacks, &settings.folded);
        let total: u64 = lines.iter().map(|(_, c)| c).sum();
        self.total += total;
        self.stacks += stacks.len();
        self.sym.add(&sym);
        if lines.is_empty() {
            self.empty += 1;
            return Ok(());
        }
        let path = |p: &Path| expand(p, nominal, number, length);
        // A file that cannot be written (a name another user planted, a
        // full disk) costs that file only: said, counted, and the run goes on.
        let mut put = |p: &Path, write: &dyn Fn(&mut dyn io::Write) -> io::Result<()>| {
            let at = path(p);
            let opts = Options {
                make_dirs: true,
                ..Options::default()
            };
            match OutputFile::create_with(&at, opts).and_then(|f| f.commit(write)) {
                Ok(()) => {
                    self.files += 1;
                    eprintln!("bprof: wrote {}", crate::names::path(&at));
                }
                Err(e) => {
                    eprintln!("bprof: interval {number}: {e:#}; its {total} samples are not in that file, the next intervals go on");
                    self.unwritten += 1;
                    self.unwritten_samples += total;
                }
            }
        };
        if let Some(p) = &settings.folded_file {
            put(p, &|w| folded::write(w, &lines));
        }
        if let Some(p) = &settings.svg {
            let mut opts = svg::SvgOptions::for_interval(
                settings.program.mode,
                &settings.target.describe(),
                &humantime::format_rfc3339_millis(start).to_string(),
                length,
                total,
            );
            opts.classes = svg::classes(&stacks, &frames, &settings.folded);
            put(p, &|w| {
                svg::write(w, &lines, &opts).map_err(io::Error::other)
            });
        }
        if let Some(p) = &settings.pprof {
            let meta = super::outputs::pprof_meta(settings, event, start, length, &stacks);
            let profile = pprof::build(&stacks, &frames, &settings.folded, &meta);
            put(p, &|w| pprof::write(w, &profile));
        }
        if let Some(d) = delivery {
            let meta = super::outputs::otlp_meta(settings, event, start, length, &stacks);
            super::outputs::push_otlp(d, settings, &meta, &stacks, &frames, number);
        }
        if settings.verbose {
            eprintln!(
                "bprof: interval {number}: {} + {:.2} s, {total} counted, {} stacks",
                humantime::format_rfc3339_millis(start),
                length.as_secs_f64(),
                stacks.len()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_due_at_fixed_boundaries() {
        let t0 = Instant::now();
        let mut p = Periodic::new(Duration::from_secs(10), t0, SystemTime::now(), false, false);
        assert!(!p.due(t0 + Duration::from_secs(9)));
        assert!(p.due(t0 + Duration::from_secs(10)));
        p.intervals = 1;
        // A late first write does not move the second boundary.
        assert!(!p.due(t0 + Duration::from_millis(19_999)));
        assert!(p.due(t0 + Duration::from_secs(20)));
    }
}
