//! The unwinder's part of a profiling session: tables for what runs now,
//! before sampling starts.

use anyhow::Result;

use crate::bpf::profile::CallGraph;
use crate::bpf::profile::ProfileProgram;
use crate::collect::sideband::Sideband;
use crate::session::settings::ProfileSettings;
use crate::unwind::Unwinder;

/// With `--call-graph dwarf`: maps the table store, loads the tables of the
/// processes in `scope` (all when `None`) and of `-- COMMAND`, and has the
/// side band queue new mappings from now on.
pub fn start(
    prog: &ProfileProgram<'_>,
    settings: &ProfileSettings,
    sideband: &mut Sideband,
    scope: Option<&[u32]>,
    child: Option<u32>,
) -> Result<Option<Unwinder>> {
    let opts = &settings.program;
    if opts.call_graph != CallGraph::Dwarf || !opts.user_stacks {
        return Ok(None);
    }
    // Queued first: a mapping made while the tables below are built is not missed.
    sideband.index.queue_mappings = true;
    let maps = &prog.skel.maps;
    let files = &maps.unwind_files;
    let mut u = Unwinder::new(&maps.unwind_segs, opts.unwind_rows, &maps.unwind_rules)?;
    let all: Vec<u32>;
    let pids = match scope {
        Some(p) => p,
        None => {
            all = crate::target::running_pids()
                .into_iter()
                .filter(|&p| p != std::process::id())
                .collect();
            &all
        }
    };
    u.load_vdso(files);
    let index = &mut sideband.index;
    for &pid in pids {
        u.add_process(files, &maps.unwind_maps, index, pid, false);
    }
    if let Some(pid) = child {
        // Forked from bprof and held before exec: its libraries (libc, the
        // loader) are bprof's, the ones the command will most likely map.
        u.add_libraries(files, index, pid);
        if let Some(argv0) = settings.target.command.first() {
            u.add_command(files, index, argv0);
        }
    }
    u.publish(&maps.unwind_gen);
    Ok(Some(u))
}

/// Each tick: tables and mappings for what the side band saw mapped since
/// (its drain kept the targets' records only, when the profile has targets).
pub fn take_new(u: &mut Unwinder, prog: &ProfileProgram<'_>, sideband: &mut Sideband) {
    let maps = &prog.skel.maps;
    u.take_new(&maps.unwind_files, &maps.unwind_maps, &mut sideband.index);
    u.publish(&maps.unwind_gen);
}
