//! A per-boot copy of the core kernel's symbols.
//!
//! Reading /proc/kallsyms makes the kernel print every symbol it has, and
//! blazesym then parses them all: most of a short profile's symbolization
//! (BENCHMARKS.md). The core kernel's text (`[_stext, _etext)`) does
//! not change while the machine is up, so its symbols are copied once per
//! boot into root's private state directory. A profile whose kernel frames
//! all lie there hands blazesym a kallsyms of just the symbols those frames
//! resolve to: the same names, for a few hundred lines. BPF programs'
//! code is named from the loaded programs' info (bpfsyms.rs). Any other
//! kernel address (modules, trampolines: these come and go) means the live
//! file.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::bpf::shared_counters::STATE_DIR;

/// The copy's name in [`STATE_DIR`], one per boot.
fn copy_name(boot_id: &str) -> String {
    format!("{COPY_PREFIX}{boot_id}")
}

/// Names addresses outside the core text: their kallsyms lines, or the
/// addresses it has no name for.
pub(crate) type Others = dyn Fn(&[u64]) -> Result<String, Vec<u64>>;

/// A copy's name before the boot ID.
const COPY_PREFIX: &str = "kallsyms-core-";

/// The copy's first line, before the symbols: `HEADER lo hi`.
const HEADER: &str = "bprof-core-text";

/// A kallsyms file of the symbols some addresses resolve to, removed when
/// dropped (blazesym reads it whole when it first symbolizes with it).
pub(crate) struct Selected {
    path: PathBuf,
}

impl Selected {
    /// The file to hand blazesym.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Selected {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The symbols `addrs` resolve to, from the copy, or the addresses that need
/// the live /proc/kallsyms (outside the core text and `others`; none: no
/// copy possible). `others` gives the lines of the addresses outside the
/// core text (BPF programs' functions), or those it has none for. The copy is mapped
/// once per process (`bprof top` and `--every` symbolize every interval)
/// and searched in place.
pub(crate) fn core_copy_for(addrs: &[u64], others: &Others) -> Result<Selected, Vec<u64>> {
    let copy = core_copy().ok_or_else(Vec::new)?;
    selection(Path::new(STATE_DIR), copy, addrs, others)
}

/// This boot's copy, mapped once per process.
fn core_copy() -> Option<&'static Copy> {
    static COPY: OnceLock<Option<Copy>> = OnceLock::new();
    COPY.get_or_init(|| load(Path::new(STATE_DIR), Path::new("/proc/kallsyms")))
        .as_ref()
}

/// The core text's range, from this boot's copy.
pub(super) fn core_range() -> Option<(u64, u64)> {
    core_copy().map(|c| (c.lo, c.hi))
}

#[cfg(test)]
fn core_copy_in(dir: &Path, live: &Path, addrs: &[u64]) -> Option<Selected> {
    selection(dir, &load(dir, live)?, addrs, &|a: &[u64]| Err(a.to_vec())).ok()
}

/// A copy, mapped: its text (header line, then the symbols' lines sorted
/// by address) and the core text's range. It is searched in place:
/// reading and indexing all its lines would cost every profile.
struct Copy {
    text: Text,
    lo: u64,
    hi: u64,
}

/// The copy's bytes, mapped read-only.
struct Text(crate::mmap::Mmap);

// SAFETY: a private read-only mapping, never written through: sharing or
// moving it between threads is sharing a &[u8].
unsafe impl Send for Text {}
// SAFETY: as above.
unsafe impl Sync for Text {}

impl Copy {
    /// The symbols' lines (after the header).
    fn body(&self) -> &[u8] {
        let b = self.text.0.bytes();
        let start = b
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |i| i + 1);
        &b[start..]
    }
}

/// This boot's copy, written from `live` first if there is none yet.
fn load(dir: &Path, live: &Path) -> Option<Copy> {
    let boot_id = crate::fsafe::boot_id()?;
    let dir_fd = crate::fsafe::private_dir(dir).ok()?;
    let name = copy_name(&boot_id);
    let text = match map_copy(&dir.join(&name)) {
        Some(c) => c,
        None => {
            write_copy(&dir_fd, dir, &name, live)?;
            map_copy(&dir.join(&name))?
        }
    };
    let (lo, hi) = parse_header(text.0.bytes())?;
    Some(Copy { text, lo, hi })
}

/// The address at the start of a symbol's line.
fn line_addr(line: &[u8]) -> Option<u64> {
    let end = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
    u64::from_str_radix(std::str::from_utf8(&line[..end]).ok()?, 16).ok()
}

/// The start of the line holding byte `at`.
fn line_start(body: &[u8], at: usize) -> usize {
    body[..at]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1)
}

/// The end (past its newline) of the line starting at `start`.
fn line_end(body: &[u8], start: usize) -> usize {
    body[start..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(body.len(), |i| start + i + 1)
}

/// The start of the first line whose address is above `a`, by a binary
/// search over bytes (lines are sorted by address).
fn first_above(body: &[u8], a: u64) -> usize {
    let (mut lo, mut hi) = (0, body.len());
    while lo < hi {
        let start = line_start(body, lo + (hi - lo) / 2);
        if line_addr(&body[start..]).is_some_and(|s| s <= a) {
            lo = line_end(body, start);
        } else {
            hi = start;
        }
    }
    lo
}

/// Writes the selection for `addrs` from `copy` into `dir`; `others`
/// gives the kallsyms lines of the addresses outside the core text, or
/// those it cannot name. Errs with the addresses neither names (none: the
/// selection could not be written).
fn selection(
    dir: &Path,
    copy: &Copy,
    addrs: &[u64],
    others: &Others,
) -> Result<Selected, Vec<u64>> {
    let (core, outside): (Vec<u64>, Vec<u64>) = addrs
        .iter()
        .partition(|&&a| (copy.lo..copy.hi).contains(&a));
    let mut text = select(copy, &core);
    if !outside.is_empty() {
        // Above the core text: after its lines, as kallsyms orders them.
        text.push_str(&others(&outside)?);
    }
    let dir_fd = crate::fsafe::private_dir(dir).map_err(|_| Vec::new())?;
    remove_dead_selections(dir);
    let tmp = format!("{SELECTED}{}.{}", std::process::id(), unique());
    let selected = Selected {
        path: dir.join(&tmp),
    };
    crate::fsafe::private_file(&dir_fd, &tmp)
        .and_then(|mut f| {
            f.set_len(0)?;
            f.write_all(text.as_bytes())
        })
        .map_err(|_| Vec::new())?;
    Ok(selected)
}

/// The name of a selection's file, before `PID.N`.
const SELECTED: &str = ".kallsyms-selected.";

/// Selections left by a bprof that was killed while symbolizing.
fn remove_dead_selections(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(SELECTED))
            .and_then(|n| n.split('.').next())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A number no other selection of this process has used.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn map_copy(path: &Path) -> Option<Text> {
    // Only root can write in the private directory; a copy is renamed into
    // place whole, so a bad header means another program's file.
    let f = File::open(path).ok()?;
    let len = usize::try_from(f.metadata().ok()?.len()).ok()?;
    // SAFETY: a copy is never truncated or written once renamed into place
    // (a new one replaces the name, not the file).
    let map = unsafe { crate::mmap::Mmap::read_only(std::os::fd::AsFd::as_fd(&f), len) }.ok()?;
    parse_header(map.bytes())?;
    Some(Text(map))
}

/// The text range of a copy, from its first line.
fn parse_header(copy: &[u8]) -> Option<(u64, u64)> {
    let first = copy.split(|&c| c == b'\n').next()?;
    let mut w = std::str::from_utf8(first).ok()?.split_ascii_whitespace();
    (w.next()? == HEADER).then_some(())?;
    let lo = u64::from_str_radix(w.next()?, 16).ok()?;
    let hi = u64::from_str_radix(w.next()?, 16).ok()?;
    (lo != 0 && lo < hi).then_some((lo, hi))
}

/// The lines of the symbols blazesym would resolve `addrs` to: for each,
/// every symbol at the address of the last symbol at or below it (blazesym
/// names the first of equal ones, so the whole group keeps its order). No
/// other symbol lies between such a group and its address, so the selection
/// resolves each address exactly as the full table does.
fn select(copy: &Copy, addrs: &[u64]) -> String {
    let body = copy.body();
    // Each address's group: the lines at the address of the last line at
    // or below it, as byte ranges.
    let mut groups: Vec<(usize, usize)> = addrs
        .iter()
        .filter_map(|&a| {
            let end = first_above(body, a);
            let last = line_start(body, end.checked_sub(1)?);
            let g = line_addr(&body[last..])?;
            let mut start = last;
            while start > 0 {
                let prev = line_start(body, start - 1);
                if line_addr(&body[prev..]) != Some(g) {
                    break;
                }
                start = prev;
            }
            Some((start, end))
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
        .into_iter()
        .map(|(start, end)| String::from_utf8_lossy(&body[start..end]))
        .collect()
}

/// Copies the core text's symbols of `live` into `dir/name` (through a
/// temporary file renamed into place): a header with their range, then
/// their lines ordered by address as blazesym orders them (a stable sort,
/// so symbols at one address keep the kernel's order).
fn write_copy(dir_fd: &File, dir: &Path, name: &str, live: &Path) -> Option<()> {
    let mut text = String::new();
    File::open(live).ok()?.read_to_string(&mut text).ok()?;
    let parsed = text.lines().filter_map(|l| {
        let mut w = l.split_ascii_whitespace();
        let addr = u64::from_str_radix(w.next()?, 16).ok()?;
        let _kind = w.next()?;
        let sym = w.next()?;
        // Module symbols carry a fourth field ("[ext4]").
        w.next().is_none().then_some((addr, sym, l))
    });
    let find = |want: &str| {
        parsed
            .clone()
            .find(|&(_, s, _)| s == want)
            .map(|(a, _, _)| a)
    };
    let (lo, hi) = (find("_stext")?, find("_etext")?);
    if lo == 0 || lo >= hi {
        // Addresses hidden (kptr_restrict) or nonsense: no copy.
        return None;
    }
    let mut lines: Vec<(u64, &str)> = parsed
        .filter(|&(a, _, _)| (lo..hi).contains(&a))
        .map(|(a, _, l)| (a, l))
        .collect();
    lines.sort_by_key(|&(a, _)| a);
    let mut out = String::with_capacity(text.len());
    out.push_str(&format!("{HEADER} {lo:016x} {hi:016x}\n"));
    for (_, l) in lines {
        out.push_str(l);
        out.push('\n');
    }
    crate::fsafe::replace_private_file(dir_fd, dir, name, out.as_bytes()).ok()?;
    crate::fsafe::remove_other_boots(dir, COPY_PREFIX, name);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("bprof-ksyms-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    /// A test's directory, removed when the test ends however it ends.
    struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A small kallsyms: core text (two symbols at _stext's address, in
    /// the kernel's order), a data symbol past it and a module's.
    const LIVE: &str = "\
ffffffff81000000 T srso_alias
ffffffff81000000 T _stext
ffffffff81000100 t helper
ffffffff81000200 T schedule
ffffffff81000180 t out_of_order
ffffffff81002000 T _etext
ffffffff81002000 D data_after
ffffffffc0000000 t mod_fn\t[ext4]
";

    #[test]
    fn the_selection_holds_what_each_address_resolves_to() {
        let d = scratch("copy");
        let state = d.join("state");
        let live = d.join("kallsyms");
        std::fs::write(&live, LIVE).unwrap();
        let s = core_copy_in(&state, &live, &[0xffffffff81000005, 0xffffffff81000190])
            .expect("inside the core text");
        // The group at _stext's address whole and in order; out_of_order,
        // which lies below 0x...190, not helper.
        assert_eq!(
            std::fs::read_to_string(s.path()).unwrap(),
            "ffffffff81000000 T srso_alias\nffffffff81000000 T _stext\nffffffff81000180 t out_of_order\n"
        );
        let path = s.path().to_path_buf();
        drop(s);
        assert!(!path.exists(), "a selection is removed when dropped");
        // A killed bprof's selection goes; a live one's stays.
        let dead = state.join(format!("{SELECTED}{}.0", u32::MAX - 1));
        let alive = state.join(format!("{SELECTED}1.0"));
        std::fs::write(&dead, "x").unwrap();
        std::fs::write(&alive, "x").unwrap();
        drop(core_copy_in(&state, &live, &[0xffffffff81000005]).unwrap());
        assert!(!dead.exists() && alive.exists());
        // A module address, or one past _etext, needs the live file.
        assert!(core_copy_in(&state, &live, &[0xffffffffc0000010]).is_none());
        assert!(core_copy_in(&state, &live, &[0xffffffff81002000]).is_none());
        // The copy is used once written: the live file is not read again.
        std::fs::remove_file(&live).unwrap();
        assert!(core_copy_in(&state, &live, &[0xffffffff81000200]).is_some());
    }

    #[test]
    fn hidden_addresses_or_a_bad_copy_give_no_copy() {
        let d = scratch("hidden");
        let state = d.join("state");
        let live = d.join("kallsyms");
        let hidden: String = LIVE
            .lines()
            .map(|l| format!("{:016x}{}\n", 0, &l[16..]))
            .collect();
        std::fs::write(&live, hidden).unwrap();
        assert!(core_copy_in(&state, &live, &[0x100]).is_none());
        // A copy without its header is not trusted; it is rewritten.
        std::fs::write(&live, LIVE).unwrap();
        assert!(core_copy_in(&state, &live, &[0xffffffff81000150]).is_some());
        let p = std::fs::read_dir(&state)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("kallsyms-core-")
            })
            .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.lines().skip(1).collect::<Vec<_>>().join("\n")).unwrap();
        assert!(map_copy(&p).is_none());
        assert!(core_copy_in(&state, &live, &[0xffffffff81000150]).is_some());
        assert!(map_copy(&p).is_some());
    }

    /// On this machine's kernel: 2000 addresses spread over the core text
    /// (and its first bytes, where several symbols share one address) get
    /// the same names from a selection as from the live file.
    #[test]
    fn a_selection_names_core_addresses_as_the_live_file_does() {
        use blazesym::symbolize::source::{Kernel, Source};
        use blazesym::symbolize::{Input, Symbolizer};
        use blazesym::MaybeDefault;

        let d = scratch("live");
        let state = d.join("state");
        let live = Path::new("/proc/kallsyms");
        let Some(copy) = load(&state, live) else {
            eprintln!("skipped: kernel addresses are hidden here (not root?)");
            return;
        };
        let (lo, hi) = (copy.lo, copy.hi);
        let mut addrs: Vec<u64> = (0..2000u64)
            .map(|i| lo + (hi - lo) / 2000 * i + 5)
            .collect();
        addrs.extend([lo, lo + 1, lo + 16]);
        let text = select(&copy, &addrs);
        let selected = state.join("selected");
        std::fs::write(&selected, &text).unwrap();
        let names = |kallsyms: MaybeDefault<PathBuf>| -> Vec<Option<String>> {
            let src = Source::Kernel(Kernel {
                kallsyms,
                vmlinux: MaybeDefault::None,
                ..Default::default()
            });
            Symbolizer::new()
                .symbolize(&src, Input::AbsAddr(&addrs))
                .unwrap()
                .into_iter()
                .map(|s| s.into_sym().map(|s| s.name.into_owned()))
                .collect()
        };
        let from_copy = names(MaybeDefault::Some(selected));
        let from_live = names(MaybeDefault::Default);
        assert_eq!(from_copy.iter().flatten().count(), addrs.len());
        assert_eq!(from_copy, from_live);
        assert!(
            text.lines().count() <= addrs.len() * 4,
            "a selection, not the table"
        );
    }
}
