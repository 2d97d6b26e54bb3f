//! Python frames in a symbolization pass: a location per distinct frame,
//! and each stack's Python frames merged into its native ones (see
//! crate::pyframes::merge).

use std::sync::Arc;

use super::user::Pass;
use super::FrameLine;
use crate::bpf::stacks::RawStack;
use crate::pyframes::merge::{self, PyLocations, EVAL_FUNCTION};

impl Pass<'_> {
    /// A location for each distinct Python frame of `raw`'s stacks.
    pub(super) fn python_frames(&mut self, raw: &[RawStack]) -> PyLocations {
        let mut locs = PyLocations::default();
        for s in raw {
            for f in &s.python {
                if locs.by_frame.contains_key(&(s.tgid, *f)) {
                    continue;
                }
                let l = merge::locate(&self.index.python, s.tgid, f);
                self.names.stats.unique_frames += 1;
                if l.unknown {
                    self.names.stats.unknown_frames += 1;
                }
                let line = FrameLine {
                    name: l.function.as_str().into(),
                    system_name: l.function,
                    file: l.file,
                    line: l.line,
                };
                let loc = self.frames.add(0, None, vec![line]);
                locs.by_frame.insert((s.tgid, *f), loc);
                locs.display.insert(loc, l.display);
                if l.unknown {
                    locs.unknown.insert(loc);
                }
            }
        }
        locs
    }

    /// `s`'s user frames (locations, leaf first) with its Python frames
    /// in place of the eval activations that ran them.
    pub(super) fn merge_python(
        &self,
        s: &RawStack,
        native: Vec<u32>,
        py: &PyLocations,
    ) -> Vec<u32> {
        if s.python.is_empty() {
            return native;
        }
        let is_eval = |loc: u32| {
            self.frames.locations[loc as usize]
                .lines
                .last()
                .is_some_and(|l| l.system_name.starts_with(EVAL_FUNCTION))
        };
        let native: Vec<(u32, bool)> = native.into_iter().map(|l| (l, is_eval(l))).collect();
        let python: Vec<(u32, bool)> = s
            .python
            .iter()
            .filter_map(|f| Some((*py.by_frame.get(&(s.tgid, *f))?, f.entry)))
            .collect();
        merge::merge(&native, &python)
    }

    /// The names of locations `locs` as the outputs show them: a Python
    /// frame's display name, a native frame's functions (inlined first).
    pub(super) fn names_of(&self, locs: &[u32], py: &PyLocations) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(locs.len());
        for &l in locs {
            match py.display.get(&l) {
                Some(name) => out.push(name.clone()),
                None => out.extend(
                    self.frames.locations[l as usize]
                        .lines
                        .iter()
                        .map(|line| line.name.clone()),
                ),
            }
        }
        out
    }

    /// The Python frames as the samples show them (see count_sampled).
    pub(super) fn count_sampled_python(&mut self, raw: &[RawStack], py: &PyLocations) {
        for s in raw {
            for f in &s.python {
                self.names.stats.sampled_frames += s.count;
                if py
                    .by_frame
                    .get(&(s.tgid, *f))
                    .is_some_and(|l| py.unknown.contains(l))
                {
                    self.names.stats.sampled_unknown += s.count;
                }
            }
        }
    }
}
