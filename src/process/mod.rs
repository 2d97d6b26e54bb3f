//! Facts about a process that several stages read: its mappings
//! ([`maps`], the one reader of `/proc/PID/maps`), the files it maps as it
//! sees them, kept open ([`mapped`]), the build IDs that name its files
//! (`buildid`) and bprof's own vDSO (`vdso`).

pub(crate) mod buildid;
pub mod mapped;
pub mod maps;
pub(crate) mod vdso;
