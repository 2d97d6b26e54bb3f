//! Python frames in the named stacks: each distinct frame becomes a
//! location (its function, file and line, for pprof) with the name the
//! folded and SVG outputs show, as py-spy writes it (`function
//! (file.py:line)`); and each stack's runs of Python frames take the place
//! of the `_PyEval_EvalFrameDefault` activations that ran them, as py-spy
//! `--native` merges them, so C called from Python sits under its caller
//! and Python called from C above it.

use std::collections::HashMap;
use std::sync::Arc;

use super::{PyFrame, PyIndex};

/// The interpreter's eval function: one activation runs one run of Python
/// frames (a `.cold` part is the same function).
pub(crate) const EVAL_FUNCTION: &str = "_PyEval_EvalFrameDefault";

/// Shown for a frame whose code object was never announced (its
/// announcement found the ring full until the process ended).
pub(crate) const UNKNOWN_PY: &str = "[unknown python]";

/// How a Python frame is shown and located.
#[derive(Debug, Clone)]
pub(crate) struct PyLocation {
    /// The folded/SVG name.
    pub(crate) display: Arc<str>,
    /// The function (qualified name), its file and line, for pprof.
    pub(crate) function: String,
    pub(crate) file: Option<String>,
    pub(crate) line: u32,
    /// No announcement named it.
    pub(crate) unknown: bool,
}

/// The frame as outputs show it (`show_lines`: with its line).
pub(crate) fn locate(index: &PyIndex, tgid: u32, f: &PyFrame) -> PyLocation {
    let Some(code) = index.codes.get(&(tgid, f.code, f.id)) else {
        return PyLocation {
            display: UNKNOWN_PY.into(),
            function: UNKNOWN_PY.to_string(),
            file: None,
            line: 0,
            unknown: true,
        };
    };
    let line = code.line(f.lasti).and_then(|l| u32::try_from(l).ok());
    let display = match line.filter(|_| index.show_lines) {
        Some(l) => format!("{} ({}:{l})", code.name, code.short_file),
        None => format!("{} ({})", code.name, code.short_file),
    };
    PyLocation {
        display: display.into(),
        function: code.name.clone(),
        file: Some(code.file.clone()),
        line: line.unwrap_or(0),
        unknown: false,
    }
}

/// A stack's frames leaf first, native ones as locations with whether each
/// is an eval activation, and its Python frames (leaf first, `entry`: the
/// frame began its activation) merged: each run of Python frames, from
/// the leaf up to an entry frame, replaces the next eval activation from
/// the leaf. Runs left over (a native walk that ended early, or could not
/// see the interpreter) go past the native root; activations left over (a
/// Python walk that ended early) stay as they are.
pub(crate) fn merge<T: Copy>(native: &[(T, bool)], python: &[(T, bool)]) -> Vec<T> {
    let mut runs = python
        .split_inclusive(|&(_, entry)| entry)
        .filter(|r| !r.is_empty());
    let mut out = Vec::with_capacity(native.len() + python.len());
    for &(loc, is_eval) in native {
        if is_eval {
            if let Some(run) = runs.next() {
                out.extend(run.iter().map(|&(l, _)| l));
                continue;
            }
        }
        out.push(loc);
    }
    out.extend(runs.flatten().map(|&(l, _)| l));
    out
}

/// Per profile: each distinct (process, Python frame)'s location index,
/// made once.
#[derive(Debug, Default)]
pub(crate) struct PyLocations {
    pub(crate) by_frame: HashMap<(u32, PyFrame), u32>,
    /// Display names by location index.
    pub(crate) display: HashMap<u32, Arc<str>>,
    /// Location indexes no announcement named.
    pub(crate) unknown: std::collections::HashSet<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_replace_eval_activations_from_the_leaf() {
        // Native, leaf first: memcpy, eval, PyObject_Call, eval, main.
        let native = [(1, false), (2, true), (3, false), (4, true), (5, false)];
        // Python, leaf first: f (in the inner activation, its entry), g, h
        // (the outer run, h its entry).
        let python = [(10, true), (11, false), (12, true)];
        assert_eq!(merge(&native, &python), vec![1, 10, 3, 11, 12, 5]);
    }

    #[test]
    fn a_run_is_kept_for_the_next_activation() {
        // The leaf run is not right at the leaf: PyNumber_Add under it.
        let native = [(1, false), (2, false), (3, true)];
        assert_eq!(
            merge(&native, &[(10, false), (11, true)]),
            vec![1, 2, 10, 11]
        );
    }

    #[test]
    fn leftovers_go_past_the_root_or_stay_native() {
        // A native walk that saw one activation of two runs.
        let native = [(1, true), (2, false)];
        let python = [(10, true), (11, true)];
        assert_eq!(merge(&native, &python), vec![10, 2, 11]);
        // A Python walk that ended early: the outer activation stays.
        let native = [(1, true), (2, true), (3, false)];
        assert_eq!(merge(&native, &[(10, true)]), vec![10, 2, 3]);
        // No native stack at all: the Python frames alone.
        assert_eq!(merge(&[], &python), vec![10, 11]);
        // A run without an entry frame (a walk cut at the depth limit).
        assert_eq!(
            merge(&[(1, true)], &[(10, false), (11, false)]),
            vec![10, 11]
        );
    }
}
