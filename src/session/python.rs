//! The Python walker's part of a session: the Python processes running
//! now, before sampling starts, then each tick those the side band saw map
//! an interpreter and the code objects the walker announced.

use anyhow::Result;

use crate::bpf::profile::ProfileProgram;
use crate::collect::sideband::Sideband;
use crate::pyframes::tracker::Tracker;
use crate::session::settings::ProfileSettings;

/// Unless `--no-python` (or `-K`): reads the walker's announcements and
/// learns the processes in `scope` (all when `None`) that run Python.
pub fn start(
    prog: &ProfileProgram<'_>,
    settings: &ProfileSettings,
    sideband: &mut Sideband,
    scope: Option<&[u32]>,
) -> Result<Option<Tracker>> {
    if !settings.program.walks_python() {
        return Ok(None);
    }
    sideband.index.python.show_lines = settings.python_lines;
    let mut t = Tracker::new(&prog.skel.maps.py_events)?;
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
    t.scan(&prog.skel.maps.py_procs, pids);
    Ok(Some(t))
}

/// Each tick, and once more after the programs are detached.
pub fn take_new(t: &mut Tracker, prog: &ProfileProgram<'_>, sideband: &mut Sideband) {
    t.tick(&prog.skel.maps.py_procs, &mut sideband.index.python);
}
