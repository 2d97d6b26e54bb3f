//! Perf events: which event drives sampling, and opening one per CPU.
//!
//! Every sampling event is CPU-wide (`pid = -1`): targets are chosen in the
//! BPF program, which is what lets `-- COMMAND` follow children and lets
//! filters see every sample. (Per-task events, inherited, would keep the
//! program off other processes' samples, but perf switches a task's events
//! out and in at each of its context switches, which slows a target that
//! switches often.)

use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Result};
use perf_event_open_sys as sys;
use sys::bindings as pb;

/// What an event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Hardware CPU cycles.
    Cycles,
    /// Hardware retired instructions.
    Instructions,
    /// The cpu-clock software timer.
    CpuClock,
    /// The task-clock software timer.
    TaskClock,
}

/// An event bprof can sample on, with perf's `:u` / `:k` modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// What it counts.
    pub kind: Kind,
    /// Where: user, kernel or both.
    pub levels: super::Levels,
}

impl Event {
    /// Cycles, user and kernel.
    pub const CYCLES: Event = Event::all(Kind::Cycles);
    /// cpu-clock, user and kernel.
    pub const CPU_CLOCK: Event = Event::all(Kind::CpuClock);

    const fn all(kind: Kind) -> Event {
        Event {
            kind,
            levels: super::Levels {
                exclude_user: false,
                exclude_kernel: false,
            },
        }
    }

    /// Parses a perf-style event name, with `:u` / `:k` as `bprof stat`
    /// takes them.
    pub fn parse(text: &str) -> Result<Event> {
        let (name, levels) = super::split_modifiers(text.trim())?;
        let kind = match name {
            "cycles" | "cpu-cycles" => Kind::Cycles,
            "instructions" => Kind::Instructions,
            "cpu-clock" => Kind::CpuClock,
            "task-clock" => Kind::TaskClock,
            other => bail!(
                "unknown event '{other}' (expected one of: cycles, instructions, cpu-clock, task-clock, with :u or :k)"
            ),
        };
        Ok(Event { kind, levels })
    }

    /// Whether the event needs a hardware PMU.
    pub fn is_hardware(self) -> bool {
        matches!(self.kind, Kind::Cycles | Kind::Instructions)
    }

    /// Whether it counts time (cpu-clock, task-clock): a sample is worth
    /// its period in nanoseconds.
    pub fn is_clock(self) -> bool {
        matches!(self.kind, Kind::CpuClock | Kind::TaskClock)
    }

    /// The same levels on cpu-clock: where there is no PMU.
    pub fn on_cpu_clock(self) -> Event {
        Event {
            kind: Kind::CpuClock,
            levels: self.levels,
        }
    }

    fn type_config(self) -> (u32, u64) {
        match self.kind {
            Kind::Cycles => (pb::PERF_TYPE_HARDWARE, pb::PERF_COUNT_HW_CPU_CYCLES as u64),
            Kind::Instructions => (
                pb::PERF_TYPE_HARDWARE,
                pb::PERF_COUNT_HW_INSTRUCTIONS as u64,
            ),
            Kind::CpuClock => (pb::PERF_TYPE_SOFTWARE, pb::PERF_COUNT_SW_CPU_CLOCK as u64),
            Kind::TaskClock => (pb::PERF_TYPE_SOFTWARE, pb::PERF_COUNT_SW_TASK_CLOCK as u64),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Cycles => "cycles",
            Kind::Instructions => "instructions",
            Kind::CpuClock => "cpu-clock",
            Kind::TaskClock => "task-clock",
        })?;
        f.write_str(self.levels.suffix())
    }
}

/// How often to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Samples per second per CPU (`-F`).
    Frequency(u64),
    /// One sample every N events (`-c`).
    Period(u64),
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Frequency(hz) => write!(f, "{hz} Hz"),
            Rate::Period(n) => write!(f, "every {n} events"),
        }
    }
}

/// Builds a zeroed attr of the right size for `type_`/`config`.
pub fn base_attr(type_: u32, config: u64) -> pb::perf_event_attr {
    // SAFETY: perf_event_attr is plain old data; all-zero is its documented default.
    let mut attr: pb::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = type_;
    attr.size = std::mem::size_of::<pb::perf_event_attr>() as u32;
    attr.config = config;
    attr
}

/// Opens one perf event with `perf_event_open(2)`, close-on-exec.
pub fn open(attr: &mut pb::perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: attr is a fully initialised perf_event_attr with its size set.
    let fd = unsafe {
        sys::perf_event_open(
            attr,
            pid,
            cpu,
            -1,
            pb::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The attr of a sampling event; the BPF program sees every overflow but
/// the idle task's unless `idle`.
pub fn sampling_attr(event: Event, rate: Rate, idle: bool) -> pb::perf_event_attr {
    let (type_, config) = event.type_config();
    let mut attr = base_attr(type_, config);
    // A software timer's overflow in the idle task is dropped by the kernel
    // before any program runs (perf_swevent_hrtimer): each idle CPU would
    // otherwise run the program at the full rate only for it to skip the
    // sample (half the runs of a one-thread target on two CPUs). Hardware
    // events are left alone: not
    // every PMU accepts the bit, and a halted CPU counts no cycles.
    if !idle && !event.is_hardware() {
        attr.set_exclude_idle(1);
    }
    attr.set_exclude_user(event.levels.exclude_user as u64);
    attr.set_exclude_kernel(event.levels.exclude_kernel as u64);
    match rate {
        Rate::Frequency(hz) => {
            attr.set_freq(1);
            attr.__bindgen_anon_1.sample_freq = hz;
        }
        Rate::Period(n) => attr.__bindgen_anon_1.sample_period = n,
    }
    attr
}

/// Opens `event` on every CPU in `cpus`, its idle-task samples too when
/// `idle`. A hardware event that the machine cannot count (no PMU, e.g. in
/// most VMs) is replaced by cpu-clock; the returned event says which one is
/// in use (the caller tells the user).
pub fn open_sampling(
    event: Event,
    rate: Rate,
    cpus: &[u32],
    idle: bool,
) -> Result<(Event, Vec<OwnedFd>)> {
    match open_on_cpus(event, rate, cpus, idle) {
        Ok(fds) => Ok((event, fds)),
        Err(e) if event.is_hardware() && no_pmu(&e) => Ok((
            event.on_cpu_clock(),
            open_on_cpus(event.on_cpu_clock(), rate, cpus, idle)?,
        )),
        Err(e) => Err(e),
    }
}

fn no_pmu(e: &anyhow::Error) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(super::not_supported)
}

fn open_on_cpus(event: Event, rate: Rate, cpus: &[u32], idle: bool) -> Result<Vec<OwnedFd>> {
    let mut fds = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let mut attr = sampling_attr(event, rate, idle);
        match open(&mut attr, -1, cpu as i32) {
            Ok(fd) => fds.push(fd),
            Err(e) => {
                let what = describe_open_error(&e, event, rate);
                return Err(anyhow::Error::new(e)
                    .context(format!("opening the {event} event on CPU {cpu}: {what}")));
            }
        }
    }
    Ok(fds)
}

fn describe_open_error(e: &io::Error, event: Event, rate: Rate) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "not permitted (need root or CAP_PERFMON, or lower /proc/sys/kernel/perf_event_paranoid)".into()
        }
        Some(libc::EINVAL) => match rate {
            Rate::Frequency(hz) => format!(
                "rejected frequency {hz} Hz (above /proc/sys/kernel/perf_event_max_sample_rate?)"
            ),
            Rate::Period(_) => format!("the kernel rejected this {event} event"),
        },
        _ => e.to_string(),
    }
}

/// CPUs that are online now, from /sys/devices/system/cpu/online.
pub fn online_cpus() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    crate::target::parse_cpu_list(text.trim())
}

/// Sampling events switched off at a deadline by a thread of their own, so
/// a DURATION ends the samples on time even while bprof's own thread is
/// busy draining a flood of them (a high `-F` system-wide). Dropping it
/// before the deadline leaves the events alone.
pub struct Deadline {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Deadline {
    /// Disables the events `fds` (duplicates of the sampling events'
    /// descriptors) at `at`.
    pub fn new(fds: Vec<OwnedFd>, at: std::time::Instant) -> Deadline {
        let (stop, wait) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("bprof-deadline".into())
            .spawn(move || {
                if let Err(crossbeam_channel::RecvTimeoutError::Timeout) = wait.recv_deadline(at) {
                    use std::os::fd::AsRawFd;
                    for fd in &fds {
                        // SAFETY: an ioctl with an integer argument on a
                        // perf event descriptor this thread owns.
                        unsafe { sys::ioctls::DISABLE(fd.as_raw_fd(), 0) };
                    }
                }
            })
            .ok();
        Deadline {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Disconnects the channel: the thread ends at once if still waiting.
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
