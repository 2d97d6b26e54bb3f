//! `bprof top`: a profile that never ends in a file. The same programs,
//! targets, events and filters as a profile; every refresh drains the count
//! map, symbolizes the stacks it has not seen before (names are cached by
//! stack across refreshes) and redraws the view (crate::output::top).
//!
//! The terminal is restored on every way out: `q` and Ctrl-C (keys in raw
//! mode) and SIGTERM/SIGINT/SIGHUP end the tick loop, an error returns
//! through the screen guard's Drop, and a panic hook restores it before the
//! panic message is printed.

use std::collections::{HashMap, HashSet};
use std::io::{self, IsTerminal, Stdout};
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use blazesym::symbolize::Symbolizer;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;

use crate::bpf::maps::TargetFrom;
use crate::bpf::profile::{ProfileOptions, ProfileProgram};
use crate::bpf::stacks::{RawStack, UserFrame};
use crate::cli::TopArgs;
use crate::collect::sideband::{forget_gone, MmapIndex, Sideband};
use crate::collect::Collector;
use crate::events::sampling;
use crate::events::Mode;
use crate::output::folded::{self, FoldedOptions};
use crate::output::report;
use crate::output::top::{Action, Frames, Interval, Sample, View};
use crate::session::profile::{self, ProfileSettings};
use crate::session::runner::{self, End, Runner};
use crate::session::settings::seconds;
use crate::session::signals;
use crate::symbolize::{self, UnknownStyle};

/// Keys are read, and maps drained when due, this often.
const TICK: Duration = Duration::from_millis(100);

/// A cached stack not seen for this many refreshes is forgotten, so the
/// cache follows what runs now rather than everything that ever ran.
const FORGET_AFTER: u64 = 60;

/// Test-only: set, `bprof top` panics after its first refresh, so the tests
/// can check that a panic restores the terminal.
pub const TEST_PANIC_ENV: &str = "BPROF_TOP_TEST_PANIC";

/// Validated `bprof top` settings.
pub struct TopSettings {
    /// Everything a profile takes (outputs unused).
    pub profile: ProfileSettings,
    /// Refresh interval.
    pub delay: Duration,
}

impl TopSettings {
    /// Checks the command line with the profile's own checks, then what is
    /// top's: the delay, no output files, a terminal on stdout.
    pub fn from_args(args: TopArgs) -> Result<TopSettings> {
        let p = &args.profile;
        let files = p.output.is_some() || p.svg.is_some() || p.pprof.is_some();
        if p.folded || files || p.stats_json.is_some() || p.every.is_some() || p.otlp.is_some() {
            bail!("bprof top shows a live view only; -f, -o, --svg, --pprof, --otlp, --every and --stats-json are for profiles");
        }
        let delay = match &args.delay {
            Some(t) => seconds(t, "--delay", 1.0)?,
            None => Duration::from_secs(1),
        };
        if delay < TICK {
            bail!("invalid --delay: at least 0.1 seconds");
        }
        let profile = ProfileSettings::from_cli(args.profile)?;
        if !io::stdout().is_terminal() {
            bail!(
                "bprof top needs a terminal on stdout (for a profile in a file: bprof -f or --svg)"
            );
        }
        Ok(TopSettings { profile, delay })
    }
}

/// The alternate screen, and raw mode with keys while bprof is the
/// terminal's foreground process group; all left again on Drop.
///
/// Only the foreground may change the terminal's modes or read it: the
/// kernel stops a background process that tries (SIGTTOU, SIGTTIN), as
/// under `timeout`, `&` or a script. In the background the view is drawn
/// without raw mode or keys (writing is allowed: SIGTTOU is ignored in case
/// the terminal has `tostop`), until it is brought to the foreground.
struct Screen {
    term: Terminal<CrosstermBackend<Stdout>>,
    /// Raw mode is on and keys are read.
    keys: bool,
}

/// Whether bprof's process group is the foreground one of the terminal on
/// stdout.
fn foreground() -> bool {
    // SAFETY: tcgetpgrp and getpgrp take no pointers.
    let (fg, own) = unsafe { (libc::tcgetpgrp(libc::STDOUT_FILENO), libc::getpgrp()) };
    fg >= 0 && fg == own
}

fn restore_terminal() {
    // Only undoes raw mode if bprof set it (crossterm keeps the modes it
    // replaced); never stopped for it, even from the background.
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
}

impl Screen {
    fn enter() -> Result<Screen> {
        // SAFETY: setting a signal's disposition to SIG_IGN has no
        // preconditions.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        let mut screen = Screen {
            term: Terminal::new(CrosstermBackend::new(io::stdout()))?,
            keys: false,
        };
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        screen.take_keys()?;
        Ok(screen)
    }

    /// Turns raw mode and keys on once bprof is in the foreground (it may
    /// be brought there with `fg`). Whether keys are read now.
    fn take_keys(&mut self) -> Result<bool> {
        if !self.keys && foreground() {
            terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
            self.keys = true;
        }
        Ok(self.keys)
    }

    fn draw(&mut self, view: &mut View) -> Result<()> {
        view.keys = self.keys;
        self.term.draw(|f| view.draw(f))?;
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Restores the terminal before any panic message, so it is readable and
/// the shell usable. Installed before blazesym's quiet hook (which wraps
/// it): a panic caught inside the ELF parser does not end the view.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
}

/// A stack as the kernel gave it, minus thread and count: what its names
/// depend on.
#[derive(Debug, PartialEq, Eq, Hash)]
struct StackKey {
    tgid: u32,
    comm: String,
    kernel: Vec<u64>,
    user: Vec<UserFrame>,
    kernel_lost: bool,
    user_lost: bool,
    off_cpu: bool,
    python: Vec<crate::pyframes::PyFrame>,
}

struct Named {
    comm: Rc<str>,
    frames: Frames,
    modules: Frames,
    seen: u64,
}

/// Names by stack across refreshes: each stack is symbolized once (blazesym
/// keeps the files it parsed), so a steady workload costs no symbolization.
struct NameCache {
    named: HashMap<StackKey, Named>,
    refresh: u64,
    opts: FoldedOptions,
    style: UnknownStyle,
    /// Whether the symbolizer reads code information (inlined functions).
    code_info: bool,
}

impl NameCache {
    fn new(opts: FoldedOptions, style: UnknownStyle, code_info: bool) -> Self {
        NameCache {
            named: HashMap::new(),
            refresh: 0,
            opts,
            style,
            code_info,
        }
    }

    // Long on purpose: one pass over the interval's stacks filling the four tables the view shows.
    fn samples(
        &mut self,
        symbolizer: &Symbolizer,
        raw: Vec<RawStack>,
        index: &mut MmapIndex,
    ) -> Vec<Sample> {
        self.refresh += 1;
        let keyed: Vec<(StackKey, (u32, u64), u64)> = raw
            .into_iter()
            .map(|s| {
                let key = StackKey {
                    tgid: s.tgid,
                    comm: s.comm,
                    kernel: s.kernel,
                    user: s.user,
                    kernel_lost: s.kernel_lost,
                    user_lost: s.user_lost,
                    off_cpu: s.off_cpu,
                    python: s.python,
                };
                (key, (s.tid, s.cgroup), s.count)
            })
            .collect();
        let new: Vec<RawStack> = keyed
            .iter()
            .filter(|(k, _, _)| !self.named.contains_key(k))
            .map(|(k, (tid, cgroup), _)| RawStack {
                tgid: k.tgid,
                tid: *tid,
                cgroup: *cgroup,
                comm: k.comm.clone(),
                kernel: k.kernel.clone(),
                user: k.user.clone(),
                kernel_lost: k.kernel_lost,
                user_lost: k.user_lost,
                off_cpu: k.off_cpu,
                count: 1,
                python: k.python.clone(),
            })
            .collect();
        if !new.is_empty() {
            index.jit.prepare(&new);
            let (stacks, _, located) = symbolize::symbolize_frames(
                symbolizer,
                self.code_info,
                None,
                &new,
                index,
                self.style,
            );
            let mut labels = HashMap::new();
            for (raw, stack) in new.into_iter().zip(stacks) {
                // The folded line's own names, so top and -f agree.
                let parts = folded::parts(&stack, &self.opts);
                let comm: Rc<str> = Rc::from(folded::comm_shown(&stack));
                let frames: Frames = parts.iter().map(|p| Rc::from(folded::shown(p))).collect();
                let modules: Frames = report::part_modules(&stack, &parts, &located, &mut labels)
                    .into_iter()
                    .map(Rc::from)
                    .collect();
                let key = StackKey {
                    tgid: raw.tgid,
                    comm: raw.comm,
                    kernel: raw.kernel,
                    user: raw.user,
                    kernel_lost: raw.kernel_lost,
                    user_lost: raw.user_lost,
                    off_cpu: raw.off_cpu,
                    python: raw.python,
                };
                self.named.insert(
                    key,
                    Named {
                        comm,
                        frames,
                        modules,
                        seen: 0,
                    },
                );
            }
        }
        let refresh = self.refresh;
        let out = keyed
            .into_iter()
            .filter_map(|(k, (tid, _), count)| {
                let n = self.named.get_mut(&k)?;
                n.seen = refresh;
                Some(Sample {
                    tgid: k.tgid,
                    tid,
                    comm: n.comm.clone(),
                    frames: n.frames.clone(),
                    modules: n.modules.clone(),
                    count,
                })
            })
            .collect();
        if refresh % FORGET_AFTER == 0 {
            self.named.retain(|_, n| n.seen + FORGET_AFTER > refresh);
        }
        out
    }
}

fn title(settings: &ProfileSettings, event: sampling::Event) -> (String, &'static str) {
    let what = settings.target.describe();
    match settings.program.mode {
        Mode::OnCpu => (format!("{event} at {}, {what}", settings.rate), "samples"),
        Mode::OffCpu => (format!("off-CPU time, {what}"), "us blocked"),
        Mode::Wall => (
            format!("wall-clock time ({event} at {}), {what}", settings.rate),
            "us",
        ),
    }
}

/// Runs the live view until `q`, a signal, the duration or the targets' end.
// Long on purpose: the session's stages in order around the refresh loop, as profile::run; the terminal guard must outlive all of them.
pub fn run(mut s: TopSettings) -> Result<i32> {
    s.profile.say_notes();
    crate::bpf::preflight::check()?;
    let fallbacks = s.profile.fit_to_kernel()?;
    let settings = &s.profile;
    crate::symbolize::debuginfod::configure(s.profile.debuginfod_cache_size)?;
    let cpus = if settings.target.cpus.is_empty() {
        sampling::online_cpus()?
    } else {
        settings.target.cpus.clone()
    };
    let mut obj = [MaybeUninit::uninit(), MaybeUninit::uninit()];
    // Each refresh shows exactly what the drained count maps held.
    let program = ProfileOptions {
        map_totals: true,
        intervals: true,
        ..settings.program.clone()
    };
    let mut prog = ProfileProgram::load(&mut obj, &program, fallbacks)?;
    let mut collector = Collector::for_program(&prog, &program)?;
    // The view breaks counts down by thread.
    collector.merge_threads(false);
    let runner = &mut Runner::new(
        &settings.target,
        settings.duration,
        settings.ready_file.as_deref(),
    )?;
    if let Some(pid) = runner.traced_pid() {
        prog.add_tgid(pid, TargetFrom::Exec)?;
    }
    let mut sideband = Sideband::open(&cpus)?;
    sideband.index.jit.max_size = settings.max_perf_map_size;
    // Renewed, as --every does, so the files of a long run's past do not
    // stay in memory (names stay in the cache).
    let mut symbolizer = symbolize::Renewing::new(settings.inlined, settings.inlined);
    let mut gone = HashSet::new();
    let (event, mut unwinder, mut python, _sampling) = profile::arm(
        settings,
        &cpus,
        runner,
        &mut prog,
        &mut sideband,
        symbolizer.get(),
        settings.counts,
    )?;
    install_panic_hook();
    let test_panic = std::env::var_os(TEST_PANIC_ENV).is_some();
    let (title, unit) = title(settings, event);
    let mut view = View::new(title, unit);
    let mut names = NameCache::new(settings.folded, settings.unknown_style, settings.inlined);

    runner.start()?;
    let mut screen = Screen::enter()?;
    screen.draw(&mut view)?;
    let mut shown = 0u64;
    let mut last = Instant::now();
    let end = runner.run(TICK, |ending| {
        sideband.drain_for(&prog, settings.program.matches_tgids());
        if let Some(u) = unwinder.as_mut() {
            crate::session::unwinding::take_new(u, &prog, &mut sideband);
        }
        if let Some(t) = python.as_mut() {
            crate::session::python::take_new(t, &prog, &mut sideband);
        }
        if ending {
            return Ok(());
        }
        let had_keys = screen.keys;
        let mut redraw = screen.take_keys()? != had_keys;
        // Keys only in the foreground: a read from the background stops
        // the process (SIGTTIN).
        while screen.keys && foreground() && event::poll(Duration::ZERO)? {
            match event::read()? {
                Event::Key(k) if k.kind == KeyEventKind::Press => match view.key(k) {
                    Action::Quit => signals::request_stop(),
                    Action::Redraw => redraw = true,
                    Action::None => {}
                },
                Event::Resize(..) => redraw = true,
                _ => {}
            }
        }
        // Half a tick early rather than a tick late.
        if last.elapsed() + TICK / 2 >= s.delay {
            let raw = collector.interval(&prog)?;
            // What the kernel counted into the drained maps, by their own
            // totals: what the view must have taken, exactly.
            let counted = collector.counted_in_drained();
            let stats = crate::bpf::maps::read_stats(&prog.skel.maps.profile_stats)?;
            let seconds = last.elapsed().as_secs_f64();
            last = Instant::now();
            let samples = names.samples(symbolizer.get(), raw, &mut sideband.index);
            forget_gone(&mut sideband.index, &mut gone);
            shown += samples.iter().map(|s| s.count).sum::<u64>();
            view.update(Interval {
                samples,
                seconds,
                counted,
                shown,
                lost: stats.lost(),
            });
            redraw = true;
            if test_panic {
                panic!("{TEST_PANIC_ENV} is set: a forced panic (tests only)");
            }
        } else {
            // Between refreshes only the maps' fill decides a drain.
            collector.tick(&prog)?;
        }
        if redraw {
            screen.draw(&mut view)?;
        }
        Ok(())
    })?;
    prog.detach();
    let (stats, rest) = collector.finish(&prog)?;
    drop(screen);
    let taken = shown + rest.iter().map(|s| s.count).sum::<u64>();
    let why = match end {
        End::Duration => "the duration passed",
        End::Signal => "stopped",
        End::CommandExited(_) => "the command exited",
        End::TargetsGone => "the targets exited",
    };
    eprintln!(
        "bprof top: {why}; {} {unit} counted, {shown} shown, {} after the last refresh, {} samples lost to a full count map",
        stats.counted_weight,
        taken - shown,
        stats.lost()
    );
    if taken != stats.counted_weight {
        bail!(
            "accounting error: the view took {taken} but the kernel counted {}",
            stats.counted_weight
        );
    }
    Ok(runner::exit_code(end, runner.finish(end), false))
}
