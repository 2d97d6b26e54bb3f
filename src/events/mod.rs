//! Events: what the kernel is asked to sample ([`sampling`]) or count
//! ([`counting`]), as perf_event_open attributes.

pub(crate) mod counting;
pub(crate) mod sampling;

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
