//! Periodic profiles (`--every SECONDS`): one set of output files per
//! interval, for as long as bprof runs. Each interval drains the kernel's
//! count map and hands its stacks over (`Collector::take_interval`), so
//! memory does not grow with the length of the run and nothing counted
//! falls between two files.
//!
//! File names are patterns: `%t` the interval's start (UTC,
//! `20261125T114000Z`), `%s` the same in seconds since the epoch, `%n` the
//! interval's number (from 1, six digits), `%d` its length in seconds, `%%`
//! a `%`. pprof files also carry their start and duration inside.
//!
//! What user space remembers across intervals is bounded too: the
//! symbolizer (which caches every file it parsed) is renewed every
//! [`symbolize::SYMBOLIZER_LIFE`], and the side band's mappings of processes that have
//! exited are forgotten once their last samples were written.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};

use crate::collect::sideband::MmapIndex;
use crate::collect::stacks::RawStack;
use crate::events::sampling::Event;
use crate::output::file::{Options, OutputFile};
use crate::output::{folded, pprof, svg};
use crate::session::settings::ProfileSettings;
use crate::symbolize::{self, SymbolStats};

/// The start of an interval as `%t` writes it: ISO 8601 basic format, UTC.
pub fn compact_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(['-', ':'], "")
}

/// Checks an output pattern: known escapes only, and at least one that
/// differs between intervals (else each would overwrite the last).
pub fn check_pattern(option: &str, pattern: &Path) -> Result<()> {
    let bytes = pattern.as_os_str().as_bytes();
    let mut varies = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            match bytes.get(i + 1) {
                Some(b't' | b's' | b'n') => varies = true,
                Some(b'd' | b'%') => {}
                Some(&c) => bail!(
                    "{option} {}: unknown escape '%{}' (use %t, %s, %n, %d or %%)",
                    pattern.display(),
                    c as char
                ),
                None => bail!("{option} {}: a lone '%' at the end", pattern.display()),
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    if !varies {
        bail!(
            "{option} {}: with --every each interval needs its own file: put %t (start time), %s or %n (number) in the name",
            pattern.display()
        );
    }
    Ok(())
}

/// Expands an output pattern (checked by [`check_pattern`]) for one interval.
pub fn expand(pattern: &Path, start: SystemTime, number: u64, length: Duration) -> PathBuf {
    let bytes = pattern.as_os_str().as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len() + 16);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 1 < bytes.len() {
            let secs = start
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            match bytes[i + 1] {
                b't' => out.extend(compact_time(start).bytes()),
                b's' => out.extend(secs.to_string().bytes()),
                b'n' => out.extend(format!("{number:06}").bytes()),
                b'd' => out.extend(format!("{:.3}", length.as_secs_f64()).bytes()),
                c => out.push(c),
            }
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

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
    pub fn new(every: Duration, began: Instant, began_at: SystemTime, code_info: bool) -> Self {
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
            symbolizer: symbolize::Renewing::new(code_info),
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
    /// symbolizes them and writes its files.
    pub fn write(
        &mut self,
        settings: &ProfileSettings,
        event: Event,
        index: &mut MmapIndex,
        raw: Vec<RawStack>,
        now: Instant,
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
        let (stacks, sym, frames) =
            symbolize::symbolize_frames(symbolizer, code_info, &raw, index, settings.unknown_style);
        drop(raw);
        forget_gone(index, &mut self.gone);
        let lines = folded::lines(&stacks, &settings.folded);
        let total: u64 = lines.iter().map(|(_, c)| c).sum();
        self.total += total;
        self.stacks += stacks.len();
        self.sym.unique_frames += sym.unique_frames;
        self.sym.unknown_frames += sym.unknown_frames;
        self.sym.sampled_frames += sym.sampled_frames;
        self.sym.sampled_unknown += sym.sampled_unknown;
        self.sym.kallsyms_live = match (self.sym.kallsyms_live, sym.kallsyms_live) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        };
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
                Ok(()) => self.files += 1,
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
            let opts = svg::SvgOptions::for_interval(
                settings.program.mode,
                &settings.target.describe(),
                &humantime::format_rfc3339_millis(start).to_string(),
                length,
                total,
            );
            put(p, &|w| {
                svg::write(w, &lines, &opts).map_err(io::Error::other)
            });
        }
        if let Some(p) = &settings.pprof {
            let meta = super::outputs::pprof_meta(settings, event, start, length, &stacks);
            let profile = pprof::build(&stacks, &frames, &settings.folded, &meta);
            put(p, &|w| pprof::write(w, &profile));
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

/// Forgets the mappings of processes that were gone at the end of the last
/// interval too: their samples were counted before they exited, so by now
/// (one drain later) every one of them has been written.
pub(crate) fn forget_gone(index: &mut MmapIndex, gone: &mut HashSet<u32>) {
    let mut pids: HashSet<u32> = index.without_build_id.iter().map(|m| m.pid).collect();
    pids.extend(index.by_build_id.values().flatten().map(|m| m.pid));
    let now_gone: HashSet<u32> = pids
        .into_iter()
        .filter(|&p| !crate::target::alive(p))
        .collect();
    // Gone at both ends: not a reused pid's new process.
    let forget: HashSet<u32> = now_gone.intersection(gone).copied().collect();
    if !forget.is_empty() {
        index.without_build_id.retain(|m| !forget.contains(&m.pid));
        index.by_build_id.retain(|_, ms| {
            ms.retain(|m| !forget.contains(&m.pid));
            !ms.is_empty()
        });
    }
    *gone = now_gone;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_and_must_vary() {
        let t = UNIX_EPOCH + Duration::from_secs(1_764_071_000);
        let p = expand(
            Path::new("out/%t-%s-%n-%ds-100%%.pb.gz"),
            t,
            7,
            Duration::from_millis(10_250),
        );
        assert_eq!(
            p,
            Path::new("out/20251125T114320Z-1764071000-000007-10.250s-100%.pb.gz")
        );
        assert!(check_pattern("-o", Path::new("a/%t.folded")).is_ok());
        assert!(check_pattern("-o", Path::new("%n")).is_ok());
        let err = |p: &str| {
            check_pattern("--pprof", Path::new(p))
                .unwrap_err()
                .to_string()
        };
        assert!(err("a.pb.gz").contains("its own file"));
        assert!(err("a-%d.pb.gz").contains("its own file"));
        assert!(err("a-%x.pb.gz").contains("unknown escape '%x'"));
        assert!(err("a-%t%").contains("lone '%'"));
    }

    #[test]
    fn intervals_are_due_at_fixed_boundaries() {
        let t0 = Instant::now();
        let mut p = Periodic::new(Duration::from_secs(10), t0, SystemTime::now(), false);
        assert!(!p.due(t0 + Duration::from_secs(9)));
        assert!(p.due(t0 + Duration::from_secs(10)));
        p.intervals = 1;
        // A late first write does not move the second boundary.
        assert!(!p.due(t0 + Duration::from_millis(19_999)));
        assert!(p.due(t0 + Duration::from_secs(20)));
    }
}
