//! Events: what the kernel is asked to sample ([`sampling`]) or count
//! ([`counting`]), as perf_event_open attributes.

pub(crate) mod counting;
pub(crate) mod sampling;

/// Whether perf_event_open failed because this machine cannot count the
/// event at all (no PMU, or not this event), rather than for a reason to
/// report: the errno set perf itself reads as `<not supported>`.
pub(crate) fn not_supported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV)
    )
}

/// What a session counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Timed samples of running threads (the default).
    OnCpu,
    /// Microseconds threads spent blocked (`--off-cpu`).
    OffCpu,
    /// Both, in microseconds: on-CPU time plus all switched-out time (`--wall`).
    Wall,
}

impl Mode {
    /// Whether perf_event samples are taken.
    pub fn on_cpu(self) -> bool {
        self != Mode::OffCpu
    }

    /// Whether switched-out time is counted.
    pub fn off_cpu(self) -> bool {
        self != Mode::OnCpu
    }
}
