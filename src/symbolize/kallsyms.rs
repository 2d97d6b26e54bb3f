//! A per-boot copy of the core kernel's symbols.
//!
//! Reading /proc/kallsyms makes the kernel print ~120 000 lines, about 40 ms
//! of system CPU here and most of a short profile's symbolization. The core
//! kernel's text (`[_stext, _etext)`) does not change while the machine is up,
//! so its symbols are copied once per boot into root's private state
//! directory, and a profile whose kernel frames all lie there hands blazesym
//! that copy: a read from the page cache. Any other kernel address (modules,
//! BPF programs, trampolines: these come and go) means the live file.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::bpf::shared_counters::STATE_DIR;

/// The copy's name in [`STATE_DIR`], one per boot.
fn copy_name(boot_id: &str) -> String {
    format!("kallsyms-core-{boot_id}")
}

/// The copy to symbolize `addrs` with, or `None` for the live
/// /proc/kallsyms: an address outside the core text, or no copy possible.
pub(crate) fn core_copy_for(addrs: &[u64]) -> Option<PathBuf> {
    core_copy_in(Path::new(STATE_DIR), Path::new("/proc/kallsyms"), addrs)
}

fn core_copy_in(dir: &Path, live: &Path, addrs: &[u64]) -> Option<PathBuf> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot_id = boot_id.trim();
    if boot_id.is_empty() || !boot_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    let dir_fd = crate::fsafe::private_dir(dir).ok()?;
    let name = copy_name(boot_id);
    let path = dir.join(&name);
    let (lo, hi) = match read_range(&path) {
        Some(r) => r,
        None => write_copy(&dir_fd, dir, &name, live)?,
    };
    addrs.iter().all(|&a| (lo..hi).contains(&a)).then_some(path)
}

/// The text range a copy covers: its first line is `_stext`, its last
/// `_etext` (as [`write_copy`] writes them); `None` for anything else.
fn read_range(path: &Path) -> Option<(u64, u64)> {
    let mut text = String::new();
    // Only root can write in the private directory; the checks are for a
    // copy cut short (a crash while writing cannot leave one: it is renamed
    // into place whole).
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    let sym = |line: &str, want: &str| {
        let mut w = line.split_ascii_whitespace();
        let addr = u64::from_str_radix(w.next()?, 16).ok()?;
        (w.next().is_some() && w.next()? == want).then_some(addr)
    };
    let lo = sym(text.lines().next()?, "_stext")?;
    let hi = sym(text.lines().next_back()?, "_etext")?;
    (lo != 0 && lo < hi).then_some((lo, hi))
}

/// Copies the core text's symbols of `live` into `dir/name` (through a
/// temporary file renamed into place) and returns their range.
fn write_copy(dir_fd: &File, dir: &Path, name: &str, live: &Path) -> Option<(u64, u64)> {
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
        .filter(|&(a, s, _)| (lo..hi).contains(&a) && s != "_stext")
        .map(|(a, _, l)| (a, l))
        .collect();
    lines.sort_by_key(|&(a, _)| a);
    let mut out = String::with_capacity(text.len());
    out.push_str(&format!("{lo:016x} T _stext\n"));
    for (_, l) in lines {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(&format!("{hi:016x} T _etext\n"));
    let tmp = format!(".{name}.{}.tmp", std::process::id());
    let written = crate::fsafe::private_file(dir_fd, &tmp).and_then(|mut f| {
        f.set_len(0)?;
        f.write_all(out.as_bytes())
    });
    let renamed = written.and_then(|()| rename_in(dir_fd, &tmp, name));
    if renamed.is_err() {
        let _ = std::fs::remove_file(dir.join(&tmp));
        return None;
    }
    remove_other_boots(dir, name);
    Some((lo, hi))
}

fn rename_in(dir_fd: &File, from: &str, to: &str) -> io::Result<()> {
    let from = std::ffi::CString::new(from).map_err(|_| io::ErrorKind::InvalidInput)?;
    let to = std::ffi::CString::new(to).map_err(|_| io::ErrorKind::InvalidInput)?;
    let fd = dir_fd.as_raw_fd();
    // SAFETY: a valid directory fd and two NUL-terminated names.
    let r = unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Earlier boots' copies are of no use (/run is usually a tmpfs anyway).
fn remove_other_boots(dir: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("kallsyms-core-") && n != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bprof-ksyms-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A small kallsyms with core text, a data symbol past it and a module.
    const LIVE: &str = "\
ffffffff81000000 T startup_64
ffffffff81000000 T _stext
ffffffff81000100 t helper
ffffffff81000200 T schedule
ffffffff81002000 T _etext
ffffffff81002000 D data_after
ffffffffc0000000 t mod_fn\t[ext4]
";

    #[test]
    fn the_copy_holds_the_core_text_and_says_its_range() {
        let d = scratch("copy");
        let state = d.join("state");
        let live = d.join("kallsyms");
        std::fs::write(&live, LIVE).unwrap();
        let inside = [0xffffffff81000150, 0xffffffff81000000];
        let p = core_copy_in(&state, &live, &inside).expect("inside the core text");
        let copy = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            copy,
            "ffffffff81000000 T _stext\nffffffff81000000 T startup_64\nffffffff81000100 t helper\nffffffff81000200 T schedule\nffffffff81002000 T _etext\n"
        );
        // A module address, or one past _etext, needs the live file.
        assert_eq!(core_copy_in(&state, &live, &[0xffffffffc0000010]), None);
        assert_eq!(core_copy_in(&state, &live, &[0xffffffff81002000]), None);
        // The copy is used as it is once written: the live file is not read.
        std::fs::remove_file(&live).unwrap();
        assert_eq!(core_copy_in(&state, &live, &inside), Some(p));
    }

    #[test]
    fn hidden_addresses_or_a_cut_copy_give_no_copy() {
        let d = scratch("hidden");
        let state = d.join("state");
        let live = d.join("kallsyms");
        let hidden: String = LIVE
            .lines()
            .map(|l| format!("{:016x}{}\n", 0, &l[16..]))
            .collect();
        std::fs::write(&live, hidden).unwrap();
        assert_eq!(core_copy_in(&state, &live, &[0x100]), None);
        // A copy without its closing _etext line is not trusted; it is rewritten.
        std::fs::write(&live, LIVE).unwrap();
        let p = core_copy_in(&state, &live, &[0xffffffff81000150]).unwrap();
        let cut = std::fs::read_to_string(&p)
            .unwrap()
            .replace("ffffffff81002000 T _etext\n", "");
        std::fs::write(&p, cut).unwrap();
        assert_eq!(read_range(&p), None);
        assert!(core_copy_in(&state, &live, &[0xffffffff81000150]).is_some());
        assert!(read_range(&p).is_some());
    }

    /// On this machine's kernel: every core text address gets the same name
    /// from the copy as from the live file (skipped where addresses are hidden).
    #[test]
    fn the_copy_names_core_addresses_as_the_live_file_does() {
        use blazesym::symbolize::source::{Kernel, Source};
        use blazesym::symbolize::{Input, Symbolizer};
        use blazesym::MaybeDefault;

        let d = scratch("live");
        let live = Path::new("/proc/kallsyms");
        let Some((lo, hi)) = write_copy(
            &crate::fsafe::private_dir(&d.join("state")).unwrap(),
            &d.join("state"),
            "copy",
            live,
        ) else {
            eprintln!("skipped: kernel addresses are hidden here (not root?)");
            return;
        };
        // Spread over the whole text, and each a few bytes into a function.
        let addrs: Vec<u64> = (0..2000u64)
            .map(|i| lo + (hi - lo) / 2000 * i + 5)
            .collect();
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
        let from_copy = names(MaybeDefault::Some(d.join("state").join("copy")));
        let from_live = names(MaybeDefault::Default);
        assert_eq!(from_copy.iter().flatten().count(), addrs.len());
        assert_eq!(from_copy, from_live);
    }
}
