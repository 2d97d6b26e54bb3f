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

/// Which privilege levels an event counts, from perf's `:u` / `:k`
/// modifiers: the same syntax for a profile's `-e` and `bprof stat`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Levels {
    /// `:k`: kernel only.
    pub exclude_user: bool,
    /// `:u`: user only.
    pub exclude_kernel: bool,
}

impl Levels {
    /// The modifier as perf writes it (`:u`, `:k`, or nothing).
    pub fn suffix(self) -> &'static str {
        match (self.exclude_user, self.exclude_kernel) {
            (true, false) => ":k",
            (false, true) => ":u",
            _ => "",
        }
    }
}

/// Splits `name[:modifiers]` as perf does: `u` user only, `k` kernel only,
/// both or none everything.
pub(crate) fn split_modifiers(text: &str) -> anyhow::Result<(&str, Levels)> {
    let (name, modifiers) = text.split_once(':').unwrap_or((text, ""));
    if modifiers.is_empty() && text.ends_with(':')
        || !modifiers.chars().all(|c| c == 'u' || c == 'k')
    {
        anyhow::bail!("invalid modifier in event '{text}' (supported: :u, :k)");
    }
    let (u, k) = (modifiers.contains('u'), modifiers.contains('k'));
    Ok((
        name,
        Levels {
            exclude_user: k && !u,
            exclude_kernel: u && !k,
        },
    ))
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
