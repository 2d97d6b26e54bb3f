//! The skeleton every session shares: the command forked and held before
//! exec, signals, the clock, a tick loop that ends at the duration, a
//! signal or the targets' end, and the command's exit status.

use std::cell::Cell;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::output::file::OutputFile;
use crate::session::signals;
use crate::target::{Child, ExitStatus, Target};

/// Why recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The duration passed.
    Duration,
    /// SIGINT, SIGTERM or SIGHUP.
    Signal,
    /// The command ended with this status.
    CommandExited(ExitStatus),
    /// Every process or thread of `-p`/`-L` is gone.
    TargetsGone,
}

/// One session's command, clock and stop conditions.
pub(crate) struct Runner<'t> {
    target: &'t Target,
    ready: Option<OutputFile>,
    duration: Option<Duration>,
    child: Option<Child>,
    started: Option<Instant>,
    /// When `-p`/`-L` targets were last looked up.
    targets_checked: Cell<Option<Instant>>,
    /// The `-p` processes' pidfds, polled for their exit.
    pidfds: Option<Vec<std::os::fd::OwnedFd>>,
    /// The command's pidfd: readable when it exits, so a wait wakes then.
    child_pidfd: Option<std::os::fd::OwnedFd>,
}

/// How often `-p`/`-L` targets are looked up: a poll of their pidfds, or a
/// /proc read per thread (`-L`), which at every 10 ms tick of a profile
/// would be most of bprof's own CPU while recording.
const TARGET_CHECK: Duration = Duration::from_millis(100);

impl<'t> Runner<'t> {
    /// Forks the target's command (if any), held before exec: the caller
    /// makes its PID a target before [`Runner::start`] lets it run.
    /// `ready` (`--ready-file`) is created once recording begins.
    pub(crate) fn new(
        target: &'t Target,
        duration: Option<Duration>,
        ready: Option<&Path>,
    ) -> Result<Self> {
        // Checked now, so a bad path fails before anything is recorded.
        let ready = ready.map(OutputFile::create).transpose()?;
        let child = match target.command.as_slice() {
            [] => None,
            argv => Some(Child::spawn(argv)?),
        };
        Ok(Runner {
            target,
            ready,
            duration,
            started: None,
            targets_checked: Cell::new(None),
            pidfds: target.pidfds(),
            child_pidfd: child.as_ref().and_then(|c| crate::target::pidfd(c.pid)),
            child,
        })
    }

    /// The held command's PID.
    pub(crate) fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid)
    }

    /// The command's PID when it is the target, not a timer for the
    /// targets `-a`, `-C`, `-p` or `-t` name.
    pub(crate) fn traced_pid(&self) -> Option<u32> {
        self.child_pid().filter(|_| self.target.traces_command())
    }

    /// Installs the signal handlers, starts the clock, lets the command exec.
    /// Then says so through the ready file, if asked.
    pub(crate) fn start(&mut self) -> Result<()> {
        signals::install();
        self.started = Some(Instant::now());
        if let Some(c) = self.child.as_mut() {
            c.start()?;
        }
        if let Some(f) = self.ready.take() {
            f.commit(|_| Ok(()))?;
        }
        Ok(())
    }

    /// Time since [`Runner::start`].
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Calls `on_tick` at least every `tick`, and sooner (but not within
    /// `min` of the last call) when one of `wake` is readable, until
    /// recording ends; its arguments say whether a whole `tick` has passed
    /// since the last such call and whether this is the last call (the
    /// session then collects). The end itself wakes the wait: the
    /// duration's deadline, and the command's or a `-p` process's exit
    /// (their pidfds), so a long `tick` never delays it. Returns why it
    /// ended.
    pub(crate) fn run_woken(
        &self,
        tick: Duration,
        min: Duration,
        wake: &[std::os::fd::RawFd],
        mut on_tick: impl FnMut(bool, bool) -> Result<()>,
    ) -> Result<End> {
        use std::os::fd::AsRawFd;
        let exits: Vec<std::os::fd::RawFd> = self
            .pidfds
            .iter()
            .flatten()
            .chain(self.child_pidfd.as_ref())
            .map(|fd| fd.as_raw_fd())
            .collect();
        let mut fds: Vec<libc::pollfd> = wake
            .iter()
            .chain(&exits)
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let deadline = self.duration.zip(self.started).map(|(d, s)| s + d);
        let mut next = Instant::now() + tick;
        let mut last = Instant::now();
        loop {
            let until = deadline.map_or(next, |d| d.min(next));
            // Rounded up: a timeout never ends the wait before `until`.
            let wait_ms = until
                .saturating_duration_since(Instant::now())
                .as_micros()
                .div_ceil(1000);
            // SAFETY: fds is a valid array of fds.len() pollfd; a signal
            // (EINTR) or a timeout just ends the wait.
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    wait_ms.min(i32::MAX as u128) as i32,
                )
            };
            // An exited process's pidfd stays readable: polled once, then
            // left out (a negative fd is skipped), or every wait would end
            // at once while other targets run on.
            let mut exited = false;
            for p in fds.iter_mut().skip(wake.len()) {
                if p.revents != 0 {
                    p.fd = -1;
                    exited = true;
                }
            }
            let since = last.elapsed();
            if since < min {
                std::thread::sleep(min - since);
            }
            last = Instant::now();
            let full = last >= next;
            if full {
                next = last + tick;
            }
            let end = self.end_checked(exited);
            on_tick(full, end.is_some())?;
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }

    /// Calls `on_tick` every `tick` until recording ends; its argument says
    /// whether this is the last call (the session then collects). Returns
    /// why it ended.
    pub(crate) fn run(
        &self,
        tick: Duration,
        mut on_tick: impl FnMut(bool) -> Result<()>,
    ) -> Result<End> {
        let ticker = crossbeam_channel::tick(tick);
        loop {
            let _ = ticker.recv();
            let end = self.end();
            on_tick(end.is_some())?;
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }

    fn end(&self) -> Option<End> {
        self.end_checked(false)
    }

    /// As `end`; `exited`: a target's pidfd said it exited, so the targets
    /// are looked up now, however recently they were.
    fn end_checked(&self, exited: bool) -> Option<End> {
        if signals::stop_requested() {
            return Some(End::Signal);
        }
        if let Some(st) = self.child.as_ref().and_then(Child::try_wait) {
            return Some(End::CommandExited(st));
        }
        let due = self
            .targets_checked
            .get()
            .is_none_or(|t| exited || t.elapsed() >= TARGET_CHECK);
        if due {
            self.targets_checked.set(Some(Instant::now()));
            if self.target.exited_by(self.pidfds.as_deref()) {
                return Some(End::TargetsGone);
            }
        }
        self.duration
            .is_some_and(|d| self.elapsed() >= d)
            .then_some(End::Duration)
    }

    /// The command's status: as it ended, or after asking a command still
    /// running to stop (as perf stat does with --timeout).
    pub(crate) fn finish(&self, end: End) -> Option<ExitStatus> {
        match end {
            End::CommandExited(st) => Some(st),
            _ => self.child.as_ref().map(Child::stop),
        }
    }
}

/// bprof's exit code for a command's status (0 without a command), saying
/// how the command ended unless `quiet_success` and it succeeded. A
/// command bprof stopped itself, because the DURATION passed or the
/// targets it timed exited, did what was asked: 0, said in one line.
pub(crate) fn exit_code(end: End, status: Option<ExitStatus>, quiet_success: bool) -> i32 {
    let why = match end {
        End::Duration => Some("the duration passed"),
        End::TargetsGone => Some("the targets exited"),
        End::Signal | End::CommandExited(_) => None,
    };
    match (status, why) {
        (Some(st), Some(why)) => {
            eprintln!(
                "bprof: {why}, so bprof stopped the command, as asked (it ended with {}); exit status 0",
                st.describe()
            );
            0
        }
        (Some(st), None) => {
            if !(quiet_success && st == ExitStatus::Code(0)) {
                eprintln!("bprof: command exited with {}", st.describe());
            }
            st.as_shell_code()
        }
        (None, _) => 0,
    }
}
