//! Facts about a process that several stages read: its mappings
//! ([`maps`], the one reader of `/proc/PID/maps`), the files it maps as it
//! sees them, kept open ([`mapped`]), the build IDs that name its files
//! (`buildid`), bprof's own vDSO (`vdso`) and its executable's name.

pub(crate) mod buildid;
pub mod mapped;
pub mod maps;
pub(crate) mod vdso;

/// The file name of process `pid`'s executable (`/proc/PID/exe`'s target,
/// as names are shown), while the process lives.
pub(crate) fn exe_name(pid: u32) -> Option<String> {
    let target = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = target.file_name()?.to_string_lossy();
    // A deleted executable's link ends in " (deleted)": the name is before.
    let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
    Some(crate::names::clean(name).into_owned())
}
