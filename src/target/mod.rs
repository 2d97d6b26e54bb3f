//! What to profile: CPUs, processes, threads, or a command bprof starts.

pub(crate) mod cgroup;

use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

/// The processes and CPUs a session looks at. Empty lists mean "all".
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// CPUs to sample on (`-C`); all online CPUs when empty.
    pub cpus: Vec<u32>,
    /// Processes (`-p`): samples of their threads are kept.
    pub pids: Vec<u32>,
    /// Threads (`-L`).
    pub tids: Vec<u32>,
    /// A command to run (`-- COMMAND`): it and its descendants are kept,
    /// unless other targets are named (see [`Target::traces_command`]).
    pub command: Vec<String>,
    /// `-a`: every CPU, every process, asked for by name.
    pub all: bool,
}

impl Target {
    /// Whether the command is the target (it and its children are
    /// watched) rather than a timer: as perf, `-a`, `-C`, `-p` or `-t` with
    /// a COMMAND watch those targets for as long as the command runs.
    pub fn traces_command(&self) -> bool {
        !self.command.is_empty() && !self.names_targets()
    }

    /// Whether `-a`, `-C`, `-p` or `-t` chose the targets.
    pub fn names_targets(&self) -> bool {
        self.all || !self.cpus.is_empty() || !self.pids.is_empty() || !self.tids.is_empty()
    }

    /// Whether samples come from every process (no -p, -t or traced
    /// command), on every CPU or on some (`-C`).
    pub fn system_wide(&self) -> bool {
        self.pids.is_empty() && self.tids.is_empty() && !self.traces_command()
    }

    /// A short description for titles and the summary.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.traces_command() {
            // Shown in titles and summaries: made fit to show, as names are.
            parts.push(format!(
                "command '{}'",
                crate::names::clean(&self.command.join(" "))
            ));
        }
        if !self.pids.is_empty() {
            parts.push(format!("PID {}", id_list(&self.pids)));
        }
        if !self.tids.is_empty() {
            parts.push(format!("TID {}", id_list(&self.tids)));
        }
        if parts.is_empty() {
            parts.push("all processes".into());
        }
        if !self.cpus.is_empty() {
            parts.push(format!("on CPU {}", id_list(&self.cpus)));
        }
        if !self.command.is_empty() && !self.traces_command() {
            parts.push(format!(
                "while '{}' ran",
                crate::names::clean(&self.command.join(" "))
            ));
        }
        parts.join(", ")
    }

    /// pidfds of the `-p` processes, to learn of their exit by one poll
    /// instead of a /proc/PID/stat read each (the kernel formats the whole
    /// line, ten times a second). `None` when one could not
    /// be opened (the process gone already, or a kernel before 5.3).
    pub fn pidfds(&self) -> Option<Vec<OwnedFd>> {
        self.pids.iter().map(|&pid| pidfd(pid)).collect()
    }

    /// Whether every process (`-p`) or every thread (`-L`/`-t`) named has
    /// exited, which ends a session; false when none was named. The `-p`
    /// processes' exits are read from their `pidfds` when given (as
    /// [`Target::pidfds`] made them), else from /proc.
    pub fn exited_by(&self, pidfds: Option<&[OwnedFd]>) -> bool {
        let all_gone = |ids: &[u32]| !ids.is_empty() && !ids.iter().any(|&id| alive(id));
        let pids_gone = match pidfds {
            Some(fds) => !fds.is_empty() && all_readable(fds),
            None => all_gone(&self.pids),
        };
        pids_gone || all_gone(&self.tids)
    }

    /// Checks that every named process, thread and CPU exists now, before
    /// anything is loaded.
    pub fn validate(&self, online: &[u32]) -> Result<()> {
        for &pid in &self.pids {
            if !Path::new(&format!("/proc/{pid}")).exists() || is_thread_not_process(pid) {
                bail!("no such process: {pid}");
            }
        }
        for &tid in &self.tids {
            if !Path::new(&format!("/proc/{tid}")).exists() {
                bail!("no such thread: {tid}");
            }
        }
        for &cpu in &self.cpus {
            if !online.contains(&cpu) {
                bail!("CPU {cpu} is not online (online: {})", id_list(online));
            }
        }
        if let Some(cmd) = self.command.first() {
            resolve_command(cmd)?;
        }
        Ok(())
    }
}

/// /proc/TID exists for threads too; a process is one whose Tgid is itself.
fn is_thread_not_process(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .is_some_and(|tgid| tgid != pid)
}

/// Ids comma-separated, as `-p`, `-L` and `-C` take them.
pub(crate) fn id_list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Parses `0,2-3,7` style lists (as in /sys/devices/system/cpu/online).
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    // Checked before any range is expanded: `0-4294967295` must not
    // allocate billions of entries.
    let possible = libbpf_rs::num_possible_cpus().map_or(8192, |n| n as u32);
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let bad = || anyhow!("invalid CPU list '{s}'");
        let (a, b): (u32, u32) = match part.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let n = part.parse().map_err(|_| bad())?;
                (n, n)
            }
        };
        if a > b {
            return Err(bad());
        }
        if b >= possible {
            bail!("invalid CPU list '{s}': CPU {b} is not online (this machine has {possible} possible CPUs)");
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Parses `1,2,3` lists of process or thread ids.
pub fn parse_id_list(s: &str, what: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .ok()
                .filter(|&id| id > 0)
                .ok_or_else(|| anyhow!("invalid {what} '{}' in '{s}'", p.trim()))
        })
        .collect()
}

/// Finds `cmd` the way execvp would, so "command not found" is reported
/// before anything is loaded.
pub fn resolve_command(cmd: &str) -> Result<PathBuf> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        if is_exec(&p) {
            return Ok(p);
        }
        bail!("command not found or not executable: {cmd}");
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(cmd))
        .find(|p| is_exec(p))
        .ok_or_else(|| anyhow!("command not found: {cmd}"))
}

/// How long a command gets to exit after SIGTERM before SIGKILL.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A forked child that waits for [`Child::start`] before it execs, so the
/// profile is armed before the command's first instruction.
#[derive(Debug)]
pub struct Child {
    /// The child's PID.
    pub pid: u32,
    go: Option<OwnedFd>,
    exec_err: OwnedFd,
    /// Waited for: nothing left to stop on drop.
    reaped: Cell<bool>,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Child {
    /// Forks the command; it blocks until `start` is called.
    pub fn spawn(argv: &[String]) -> Result<Child> {
        let path = resolve_command(&argv[0])?;
        let c_path =
            CString::new(path.as_os_str().as_bytes()).context("command path has a NUL byte")?;
        let c_args = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .context("command argument has a NUL byte")?;
        let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        c_argv.push(std::ptr::null());
        let (go_r, go_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child only calls async-signal-safe functions (read,
        // execv, write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            // SAFETY: see above; this is the child and never returns.
            unsafe {
                // The command never outlives bprof by surprise: killed if
                // bprof dies (even by SIGKILL); if it already has, stop here.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() != parent {
                    libc::_exit(127);
                }
                let mut b = 0u8;
                let n = libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                if n == 1 {
                    libc::execv(c_path.as_ptr(), c_argv.as_ptr());
                }
                let errno = *libc::__errno_location();
                libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        Ok(Child {
            pid: pid as u32,
            go: Some(go_w),
            exec_err: err_r,
            reaped: Cell::new(false),
        })
    }

    /// Lets the child exec; fails if exec failed.
    pub fn start(&mut self) -> Result<()> {
        let go = self
            .go
            .take()
            .ok_or_else(|| anyhow!("command already started"))?;
        // SAFETY: writing one byte from a valid buffer to our own pipe fd.
        unsafe { libc::write(go.as_raw_fd(), b"g".as_ptr().cast(), 1) };
        drop(go);
        let mut errno = 0i32;
        // SAFETY: reading at most 4 bytes into a 4-byte i32.
        let n = unsafe {
            libc::read(
                self.exec_err.as_raw_fd(),
                (&mut errno as *mut i32).cast(),
                4,
            )
        };
        if n == 4 {
            bail!(
                "cannot execute command: {}",
                io::Error::from_raw_os_error(errno)
            );
        }
        Ok(())
    }

    /// Non-blocking check for exit; returns the exit status once it ended.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        (r == self.pid as i32).then(|| {
            self.reaped.set(true);
            ExitStatus::from_wait(status)
        })
    }

    /// Ends the command: SIGTERM, then SIGKILL if it is still there after
    /// [`STOP_GRACE`]; returns how it ended.
    pub fn stop(&self) -> ExitStatus {
        self.kill(libc::SIGTERM);
        let start = std::time::Instant::now();
        while start.elapsed() < STOP_GRACE {
            if let Some(st) = self.try_wait() {
                return st;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.kill(libc::SIGKILL);
        self.wait()
    }

    /// Sends `sig` to the child (used when bprof itself must stop).
    pub fn kill(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.pid as i32, sig) };
    }

    /// Blocks until the child exits.
    pub fn wait(&self) -> ExitStatus {
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            if r == self.pid as i32 {
                self.reaped.set(true);
                return ExitStatus::from_wait(status);
            }
            if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                self.reaped.set(true);
                return ExitStatus::Code(127);
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // A child that never got to exec must not be left waiting forever;
        // one still running when bprof gives up (an error, a closed output
        // pipe) is stopped, not orphaned.
        if self.go.is_some() {
            self.kill(libc::SIGKILL);
            self.wait();
        } else if !self.reaped.get() {
            self.stop();
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// exit(code).
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl ExitStatus {
    fn from_wait(status: i32) -> ExitStatus {
        if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        }
    }

    /// "status N" or "signal N", as bprof reports it.
    pub fn describe(self) -> String {
        match self {
            ExitStatus::Code(c) => format!("status {c}"),
            ExitStatus::Signal(s) => format!("signal {s}"),
        }
    }

    /// The shell convention: the code, or 128 + signal.
    pub fn as_shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

/// Every process running now (the numeric entries of /proc).
pub fn running_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether process or thread `pid` still exists and has not exited (a
/// zombie waiting for its parent counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised comm, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Whether every fd is readable now: a pidfd is once its process exited.
fn all_readable(fds: &[OwnedFd]) -> bool {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `polled` holds polled.len() initialised pollfds; timeout 0.
    let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 0) };
    n >= 0
        && polled
            .iter()
            .all(|p| p.revents & (libc::POLLIN | libc::POLLHUP) != 0)
}

/// A pidfd of process `pid` (readable once it exits), or None where the
/// kernel has none (before 5.3) or the process is gone.
pub fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd, owned
    // here, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    // SAFETY: a fresh fd nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
