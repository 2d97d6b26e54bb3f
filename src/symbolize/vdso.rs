//! The vDSO: one image per kernel, mapped into every 64-bit process, with
//! no file behind it. bprof's own is the image its targets run, so the
//! walker records their vDSO frames as (the image's build ID, offset), like
//! a file's, and they are named from bprof's own mapping: a process that
//! has exited is named too (perf names them from its `[vdso]` copy).

use std::sync::OnceLock;

use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;

use crate::bpf::stacks::BUILD_ID_SIZE;

/// bprof's own vDSO.
pub(crate) struct OwnVdso {
    /// Where it is mapped in bprof.
    start: u64,
    /// Its bytes.
    pub(crate) image: Vec<u8>,
    /// Its build ID (zero-padded), if it has one.
    pub(crate) build_id: Option<[u8; BUILD_ID_SIZE]>,
}

/// bprof's own vDSO, read once from /proc/self/mem.
pub(crate) fn own() -> Option<&'static OwnVdso> {
    static OWN: OnceLock<Option<OwnVdso>> = OnceLock::new();
    OWN.get_or_init(read_own).as_ref()
}

fn read_own() -> Option<OwnVdso> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = crate::process::maps::read_own()?;
    let line = crate::process::maps::lines(&maps).find(|l| l.path == "[vdso]")?;
    let (start, end) = crate::process::maps::parse_range(line.range)?;
    let mut mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(start)).ok()?;
    let mut image = vec![0u8; usize::try_from(end.checked_sub(start)?).ok()?];
    mem.read_exact(&mut image).ok()?;
    let build_id = crate::process::buildid::build_id_only(&image)
        .filter(|id| !id.is_empty() && id.len() <= BUILD_ID_SIZE)
        .map(|id| crate::process::buildid::padded(&id));
    Some(OwnVdso {
        start,
        image,
        build_id,
    })
}

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
