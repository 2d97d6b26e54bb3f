//! Checks run before anything is loaded, so that a missing privilege or
//! kernel feature is one clear line instead of a verifier log.

use anyhow::{bail, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails with a message naming what is missing: BTF, or privileges.
pub fn check() -> Result<()> {
    // BPROF_KERNEL_BTF relocates the check (sysfs mounted elsewhere, tests).
    let btf =
        std::env::var_os("BPROF_KERNEL_BTF").unwrap_or_else(|| "/sys/kernel/btf/vmlinux".into());
    if !std::path::Path::new(&btf).exists() {
        bail!(
            "kernel without BTF: {} is missing (bprof needs a kernel built with CONFIG_DEBUG_INFO_BTF=y)",
            std::path::Path::new(&btf).display()
        );
    }
    let caps = effective_caps();
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if !(has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))) {
        let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
            .into_iter()
            .filter(|&(c, _)| !has(c))
            .map(|(_, n)| n)
            .collect();
        bail!(
            "not privileged: missing {} (run as root, or grant CAP_BPF and CAP_PERFMON; perf_event_paranoid is {paranoid})",
            missing.join(" and ")
        );
    }
    Ok(())
}

/// The effective capability set from /proc/self/status.
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}
