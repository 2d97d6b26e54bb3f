//! Events: what the kernel is asked to sample ([`sampling`]) or count
//! ([`counting`]), as perf_event_open attributes.

pub(crate) mod counting;
pub(crate) mod sampling;
