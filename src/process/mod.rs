//! Facts about a process that several stages read: its mappings
//! ([`maps`], the one reader of `/proc/PID/maps`), the build IDs that name
//! its files (`buildid`) and bprof's own vDSO (`vdso`).

pub(crate) mod buildid;
pub mod maps;
pub(crate) mod vdso;
