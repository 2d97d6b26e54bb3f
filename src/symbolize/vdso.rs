//! vDSO frames: the walker records them as (the image's build ID, offset),
//! like a file's, and they are named from bprof's own mapping
//! ([`crate::process::vdso`]): a process that has exited is named too (perf
//! names them from its `[vdso]` copy).

use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;

use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::process::vdso::own;

/// Whether frames of build ID `id` are in the vDSO.
pub(crate) fn is_vdso(id: &[u8; BUILD_ID_SIZE]) -> bool {
    own().and_then(|v| v.build_id).is_some_and(|v| &v == id)
}

/// The symbols at `offsets` of the vDSO, from bprof's own mapping.
pub(crate) fn symbols<'s>(
    symbolizer: &'s Symbolizer,
    offsets: &[u64],
) -> Vec<Option<Symbolized<'s>>> {
    let Some(v) = own() else {
        return vec![None; offsets.len()];
    };
    let addrs: Vec<u64> = offsets.iter().map(|o| v.start + o).collect();
    let src = Source::Process(Process {
        perf_map: false,
        map_files: false,
        vdso: true,
        ..Process::new(Pid::Slf)
    });
    let res = symbolizer
        .symbolize(&src, Input::AbsAddr(&addrs))
        .unwrap_or_default();
    (0..offsets.len())
        .map(|i| match res.get(i) {
            Some(s @ Symbolized::Sym(_)) => Some(s.clone()),
            _ => None,
        })
        .collect()
}
