//! Kernel frames in BPF programs, named as kallsyms names them
//! (`bpf_prog_<tag>_<function>`) from the loaded programs' info: bprof's
//! own hooks run in its targets, and naming their frames from the live
//! /proc/kallsyms would make the kernel print all of it. The
//! names are kept while bprof's programs are loaded: a profile unloads
//! them before its stacks are named. See kallsyms.rs for the core text.

/// A BPF function's code, `[start, end)`, and its name in kallsyms.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BpfFunc {
    start: u64,
    end: u64,
    name: String,
}

impl BpfFunc {
    /// Whether kernel frame `a` is this function's: inside it, or one byte
    /// before it. A retpoline (`__x86_indirect_thunk_*`) keeps its target
    /// where a return address would be, and callers are looked up one byte
    /// lower than their return address; such a frame is the function the
    /// thunk jumps to, not the code before it.
    fn holds(&self, a: u64) -> bool {
        (self.start..self.end).contains(&a) || a.checked_add(1) == Some(self.start)
    }
}

/// Functions of BPF programs kept by [`keep_bpf_functions`] while they were
/// loaded: a profile's programs are unloaded before its stacks are named.
static KEPT_BPF: std::sync::Mutex<Vec<BpfFunc>> = std::sync::Mutex::new(Vec::new());

/// Keeps the names of the loaded BPF functions holding `addrs` (kernel
/// frames, as they are looked up), for naming them once the programs are
/// gone.
pub(crate) fn keep_bpf_functions(addrs: &[u64]) {
    let outside: Vec<u64> = match super::kallsyms::core_range() {
        Some((lo, hi)) => addrs
            .iter()
            .copied()
            .filter(|a| !(lo..hi).contains(a))
            .collect(),
        None => return,
    };
    if outside.is_empty() {
        return;
    }
    let found = loaded_bpf_functions(&outside);
    KEPT_BPF
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(found);
}

/// The loaded BPF functions holding any of `addrs`, named as the kernel
/// names them (`bpf_get_prog_name`): `bpf_prog_`, the function's tag in
/// hex, `_` and its BTF name (the program's name without BTF). Asking the
/// kernel for its programs costs a few syscalls each; reading the live
/// kallsyms, far more.
fn loaded_bpf_functions(addrs: &[u64]) -> Vec<BpfFunc> {
    use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};

    let opts = ProgInfoQueryOptions::default()
        .include_jited_ksyms(true)
        .include_jited_func_lens(true)
        .include_prog_tags(true)
        .include_func_info(true);
    let mut found = Vec::new();
    for prog in ProgInfoIter::with_query_opts(opts) {
        let funcs = prog.jited_ksyms.iter().zip(&prog.jited_func_lens);
        let mut btf = None;
        for (i, (&start, &len)) in funcs.enumerate() {
            let start = start as u64;
            let mut f = BpfFunc {
                start,
                end: start.saturating_add(u64::from(len)),
                name: String::new(),
            };
            if !addrs.iter().any(|&a| f.holds(a)) {
                continue;
            }
            // The main function is listed under the program's tag, the
            // others under their own.
            let tag = match i {
                0 => &prog.tag,
                _ => prog.prog_tags.get(i).unwrap_or(&prog.tag),
            };
            let hex: String = tag.0.iter().map(|b| format!("{b:02x}")).collect();
            let func = prog.func_info.get(i).and_then(|fi| {
                let btf =
                    btf.get_or_insert_with(|| libbpf_rs::btf::Btf::from_prog_id(prog.id).ok());
                let ty = btf
                    .as_ref()?
                    .type_by_id::<libbpf_rs::btf::BtfType<'_>>(fi.type_id.into())?;
                Some(ty.name()?.to_string_lossy().into_owned())
            });
            let func = func.unwrap_or_else(|| prog.name.to_string_lossy().into_owned());
            f.name = if func.is_empty() {
                format!("bpf_prog_{hex}")
            } else {
                format!("bpf_prog_{hex}_{func}")
            };
            found.push(f);
        }
    }
    found
}

/// The kept BPF function holding kernel frame `a`: its start, size and
/// name. (For when the live kallsyms names the frames: it no longer lists
/// a finished profile's programs.)
pub(super) fn kept_function(a: u64) -> Option<(u64, u64, String)> {
    KEPT_BPF
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|f| f.holds(a))
        .map(|f| (f.start, f.end - f.start, f.name.clone()))
}

/// The kallsyms lines naming `addrs` (outside the core text) after their
/// BPF functions, from those kept and then those loaded; the addresses in
/// no BPF function (a module's or a trampoline's: the live file) if any.
pub(super) fn bpf_lines(addrs: &[u64]) -> Result<String, Vec<u64>> {
    let mut funcs = KEPT_BPF.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !addrs.iter().all(|&a| funcs.iter().any(|f| f.holds(a))) {
        funcs.extend(loaded_bpf_functions(addrs));
    }
    let mut lines = Vec::new();
    let mut nowhere = Vec::new();
    for &a in addrs {
        match funcs.iter().find(|f| f.holds(a)) {
            // A line at the frame's own address when it is the byte before.
            Some(f) => lines.push((f.start.min(a), &f.name)),
            None => nowhere.push(a),
        }
    }
    if !nowhere.is_empty() {
        return Err(nowhere);
    }
    lines.sort();
    lines.dedup();
    Ok(lines
        .into_iter()
        .map(|(at, name)| format!("{at:016x} t {name}\t[bpf]\n"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bpf_function_holds_its_bytes_and_the_byte_before_it() {
        let f = BpfFunc {
            start: 0xffff_ffff_c002_5c88,
            end: 0xffff_ffff_c002_5f49,
            name: "bpf_prog_56184ffd66ac0867_learn_mmap".into(),
        };
        // A retpoline's target, looked up one byte lower as a caller.
        assert!(f.holds(f.start - 1));
        assert!(f.holds(f.start) && f.holds(f.end - 1));
        assert!(!f.holds(f.start - 2) && !f.holds(f.end));
    }
}
