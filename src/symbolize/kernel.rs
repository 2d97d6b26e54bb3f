//! Kernel frames: names from kallsyms (the per-boot copy of the core
//! text's symbols when it covers every address).

use std::fs;

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use crate::symbolize::{bpfsyms, kallsyms};

/// A kernel address and its symbol.
pub(super) type Named = (u64, Option<Symbolized<'static>>);

/// Each address with its symbol, and, when the live /proc/kallsyms was
/// read for them, the addresses outside the core text and the BPF
/// programs that made it needed (none: no per-boot copy).
pub(super) fn symbolize_kernel(
    symbolizer: &Symbolizer,
    addrs: &[u64],
) -> (Vec<Named>, Option<Vec<u64>>) {
    if addrs.is_empty() {
        return (Vec::new(), None);
    }
    // kallsyms only: reading a vmlinux image would be slow and is rarely
    // present. The per-boot copy of the core text's symbols when it covers
    // every address: the live file costs the kernel dearly to print.
    let selected = kallsyms::core_copy_for(addrs, &bpfsyms::bpf_lines);
    let kallsyms = match &selected {
        Ok(s) => MaybeDefault::Some(s.path().to_path_buf()),
        Err(_) => MaybeDefault::Default,
    };
    let kernel = Kernel {
        kallsyms,
        vmlinux: MaybeDefault::None,
        ..Default::default()
    };
    let res = symbolizer
        .symbolize(&Source::Kernel(kernel), Input::AbsAddr(addrs))
        .unwrap_or_default();
    // A stale word the kernel's unwinder took for a frame (a freed BPF
    // program's address on a reused task stack) falls in no symbol, and
    // kallsyms, which has no sizes, names it after the last symbol below
    // it, megabytes away: unknown, not that name.
    let live = selected.is_err();
    let named = addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            // The live file no longer lists the profile's own programs
            // (unloaded by now): their kept names.
            if let Some(kept) = live.then(|| bpfsyms::kept_function(a)).flatten() {
                return (a, Some(kept_sym(a, kept)));
            }
            let s = res
                .get(i)
                .filter(|s| s.as_sym().is_none_or(|s| s.offset < MAX_FUNCTION))
                .map(|s| own(s.clone()));
            (a, s)
        })
        .collect();
    (named, selected.err())
}

/// Frame `a` in a kept BPF function `(start, size, name)`.
fn kept_sym(a: u64, (start, size, name): (u64, u64, String)) -> Symbolized<'static> {
    Symbolized::Sym(blazesym::symbolize::Sym {
        name: name.into(),
        module: None,
        addr: start,
        offset: a.saturating_sub(start) as usize,
        size: Some(size as usize),
        code_info: None,
        inlined: Box::new([]),
        _non_exhaustive: (),
    })
}

/// Larger than any kernel function: an address this far past the
/// symbol below it is in none.
const MAX_FUNCTION: usize = 1 << 20;

/// Names of kernel addresses (exact, not return addresses), `None` when
/// kallsyms has no symbol.
pub(crate) fn kernel_names(symbolizer: &Symbolizer, addrs: &[u64]) -> Vec<Option<String>> {
    symbolize_kernel(symbolizer, addrs)
        .0
        .into_iter()
        .map(|(_, s)| s.and_then(|s| s.into_sym()).map(|s| s.name.into_owned()))
        .collect()
}

/// The kernel's text section, `[_stext, _etext)`, from /proc/kallsyms.
pub(crate) fn kernel_text_range() -> Option<(u64, u64)> {
    let syms = fs::read_to_string("/proc/kallsyms").ok()?;
    let (lo, hi) = (
        kallsyms_addr(&syms, "_stext")?,
        kallsyms_addr(&syms, "_etext")?,
    );
    (lo != 0 && lo < hi).then_some((lo, hi))
}

/// The addresses of kernel function `name`, from its symbol to the next
/// symbol above it in /proc/kallsyms.
pub(crate) fn kernel_function_range(name: &str) -> Option<(u64, u64)> {
    let syms = fs::read_to_string("/proc/kallsyms").ok()?;
    let lo = kallsyms_addr(&syms, name).filter(|&a| a != 0)?;
    let hi = syms
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .filter(|&a| a > lo)
        .min()?;
    Some((lo, hi))
}

/// The address of symbol `name` in kallsyms text `syms`.
fn kallsyms_addr(syms: &str, name: &str) -> Option<u64> {
    syms.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let addr = w.next()?;
        let _kind = w.next()?;
        (w.next()? == name)
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
    })
}

/// Frames that belong to BPF or to the tracing machinery that called it:
/// they start every stack taken inside a tracepoint's BPF program and must
/// never reach an output.
pub(crate) fn is_bpf_frame(name: &str) -> bool {
    name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
        || name.starts_with("bpf_trampoline_")
        || name.starts_with("__bpf_prog_enter")
        || name.starts_with("__bpf_prog_exit")
        || name.starts_with("bpf_get_stack")
        || name.starts_with("__bpf_get_stack")
}

pub(super) fn own(s: Symbolized<'_>) -> Symbolized<'static> {
    match s {
        Symbolized::Sym(sym) => Symbolized::Sym(sym.into_owned()),
        Symbolized::Unknown(r) => Symbolized::Unknown(r),
    }
}
