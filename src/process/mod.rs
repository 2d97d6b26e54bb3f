//! Facts about a process that several stages read: its mappings
//! ([`maps`], the one reader of `/proc/PID/maps`) and the build IDs that
//! name its files ([`buildid`]).

pub(crate) mod buildid;
pub mod maps;
