//! Facts about a process that several stages read: its mappings
//! ([`maps`], the one reader of `/proc/PID/maps`).

pub mod maps;
