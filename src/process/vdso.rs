//! The vDSO: one image per kernel, mapped into every 64-bit process, with
//! no file behind it. bprof's own is the image its targets run, so the
//! unwinder loads its table under its build ID and the symbolizer names
//! its frames from bprof's own mapping.

use std::sync::OnceLock;

use crate::bpf::stacks::BUILD_ID_SIZE;
use crate::process::{buildid, maps};

/// bprof's own vDSO.
pub(crate) struct OwnVdso {
    /// Where it is mapped in bprof.
    pub(crate) start: u64,
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
    let text = maps::read_own()?;
    let line = maps::lines(&text).find(|l| l.path == "[vdso]")?;
    let (start, end) = maps::parse_range(line.range)?;
    let mut mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(start)).ok()?;
    let mut image = vec![0u8; usize::try_from(end.checked_sub(start)?).ok()?];
    mem.read_exact(&mut image).ok()?;
    let build_id = buildid::build_id_only(&image)
        .filter(|id| !id.is_empty() && id.len() <= BUILD_ID_SIZE)
        .map(|id| buildid::padded(&id));
    Some(OwnVdso {
        start,
        image,
        build_id,
    })
}
