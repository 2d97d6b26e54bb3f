//! Opening files that someone other than root may control.
//!
//! bprof runs as root and reads files on a profiled user's behalf (perf
//! maps, jitdumps, mapped binaries, debug files). Each is opened once,
//! without following a final symlink, without blocking on a FIFO, checked
//! with `fstat` (a regular file, its owner, its size), and then handed on by
//! descriptor (`/proc/self/fd/N`) so that what was checked is what is read.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Who may own a file for bprof to trust its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Anyone (the file was reached through a process's own mapping).
    Any,
    /// Exactly this user (a perf map must be its process's own).
    Exactly(u32),
}

impl Owner {
    fn allows(self, uid: u32) -> bool {
        match self {
            Owner::Any => true,
            Owner::Exactly(u) => uid == u,
        }
    }
}

/// Why an untrusted file was not used.
#[derive(Debug)]
pub enum Refused {
    /// open(2) or fstat(2) failed (ENOENT, ELOOP for a symlink, ...).
    Io(io::Error),
    /// Not a regular file (a FIFO, a device, a directory).
    NotRegular,
    /// Owned by a user bprof does not trust for this file.
    Owner(u32),
    /// Larger than the cap.
    TooLarge(u64),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Io(e) => write!(f, "{e}"),
            Refused::NotRegular => write!(f, "not a regular file"),
            Refused::Owner(uid) => write!(f, "owned by uid {uid}, not trusted for this file"),
            Refused::TooLarge(n) => write!(f, "{n} bytes, over the size limit"),
        }
    }
}

/// A checked, open, regular file.
#[derive(Debug)]
pub struct Checked {
    /// The open file; read it, or hand [`Checked::fd_path`] to a library.
    pub file: File,
}

impl Checked {
    /// `/proc/self/fd/N`: a path that reaches exactly this open file, for
    /// libraries that take paths. Valid while `self` lives.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// Opens `path` for reading as untrusted input: no final symlink followed
/// (`O_NOFOLLOW`), no blocking open of a FIFO (`O_NONBLOCK`), a regular file
/// only, owned as `owner` allows, at most `max_size` bytes.
pub fn open_untrusted(path: &Path, owner: Owner, max_size: u64) -> Result<Checked, Refused> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(Refused::Io)?;
    check(file, owner, max_size)
}

/// [`open_untrusted`] for the file a live process maps at `[start, end)`,
/// through its `/proc/PID/map_files` link: a link the kernel makes (so it
/// is followed), to exactly the mapped file, whatever its path names now.
pub fn open_mapped(pid: u32, start: u64, end: u64, max_size: u64) -> Result<Checked, Refused> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
        .map_err(Refused::Io)?;
    check(file, Owner::Any, max_size)
}

/// [`open_untrusted`] for `rel` inside another process's root directory
/// (`/proc/PID/root`, a container's): every component, `..` and symlink is
/// resolved inside that root (`openat2` with `RESOLVE_IN_ROOT`), so a
/// symlink planted in the container cannot lead to a file of the host.
pub fn open_untrusted_in_root(
    root: &Path,
    rel: &Path,
    owner: Owner,
    max_size: u64,
) -> Result<Checked, Refused> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)
        .map_err(Refused::Io)?;
    let rel = std::ffi::CString::new(rel.as_os_str().as_encoded_bytes())
        .map_err(|e| Refused::Io(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags =
        (libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: dir is an open descriptor, rel a NUL-terminated string and how
    // a valid open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(Refused::Io(io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    check(file, owner, max_size)
}

/// The checks of an opened untrusted file: regular, owner, size.
fn check(file: File, owner: Owner, max_size: u64) -> Result<Checked, Refused> {
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular);
    }
    if !owner.allows(meta.uid()) {
        return Err(Refused::Owner(meta.uid()));
    }
    if meta.len() > max_size {
        return Err(Refused::TooLarge(meta.len()));
    }
    Ok(Checked { file })
}

/// Creates (mode 0700, whatever the umask) or opens the directory `path` for
/// state only root may touch, and checks it is a real directory (not a
/// symlink), owned by this (root) user, with no access for anyone else: a
/// directory a local user created or can write is refused, naming it.
pub fn private_dir(path: &Path) -> anyhow::Result<File> {
    use anyhow::Context;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {
            // The umask may have taken bits away, never added them; set the
            // mode explicitly all the same.
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("setting the mode of {}", path.display()))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating directory {}", path.display())),
    }
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            anyhow::anyhow!(
                "refusing {}: not a real directory ({e}); remove it and retry",
                path.display()
            )
        })?;
    let meta = dir
        .metadata()
        .with_context(|| format!("checking {}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "refusing {}: owned by uid {} with mode {:o}, but it must be owned by uid {me} with mode 0700 (another user may have made it); remove it and retry",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(dir)
}

/// Opens (creating it 0600, whatever the umask) the file `name` inside a
/// directory checked by [`private_dir`], never following a symlink and never
/// truncating.
pub fn private_file(dir: &File, name: &str) -> io::Result<File> {
    let c = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the returned fd
    // is checked and then owned by the File.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Opens the existing regular file `name` inside a directory checked by
/// [`private_dir`] for reading, never following a symlink; `None` when
/// there is none (or something else is there).
pub fn private_file_existing(dir: &File, name: &str) -> Option<File> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the returned fd
    // is checked and then owned by the File.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.metadata()
        .is_ok_and(|m| m.file_type().is_file())
        .then_some(file)
}

/// This boot's ID (a UUID, checked to be one): what names per-boot state
/// in root's state directory.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        .then(|| id.to_string())
}

/// Removes the entries of `dir` (checked by [`private_dir`]) whose names
/// start with `prefix`, other than `keep`: earlier boots' state, of no use
/// now (/run is usually a tmpfs anyway). By path: the directory is root's
/// own 0700 one, so no one else can swap a name in it.
pub fn remove_other_boots(dir: &Path, prefix: &str, keep: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(prefix) || name == keep {
            continue;
        }
        let _ = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(e.path()),
            _ => std::fs::remove_file(e.path()),
        };
    }
}

/// Keeps at most `most` of the regular files in root's state directory
/// `dir` whose names start with `prefix` and end with `suffix`: the newest
/// (by modification time); the rest are removed. For state kept per build
/// of bprof (each build names its own), which would otherwise pile up in
/// /run until the next boot.
pub fn keep_newest(dir: &Path, prefix: &str, suffix: &str, most: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        // file_type does not follow a symlink: only regular files count.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    for (_, path) in files.into_iter().skip(most) {
        let _ = std::fs::remove_file(path);
    }
}

/// Replaces the file `name` in `dir` (checked by [`private_dir`], at
/// `dir_path`) with `bytes`, through a temporary file renamed into place: a
/// concurrent reader sees the old file or the new one, never half. By
/// path: the directory is root's own 0700 one, so no one else can swap a
/// name in it.
pub fn replace_private_file(
    dir: &File,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
) -> io::Result<()> {
    use std::io::Write;
    let tmp = format!(".{name}.{}.tmp", std::process::id());
    let written = private_file(dir, &tmp)
        .and_then(|mut f| {
            f.set_len(0)?;
            f.write_all(bytes)
        })
        .and_then(|()| std::fs::rename(dir_path.join(&tmp), dir_path.join(name)));
    if written.is_err() {
        let _ = std::fs::remove_file(dir_path.join(&tmp));
    }
    written
}

/// Whether bprof trusts a file or symlink owned by `uid` as its own: root's,
/// or its own user's.
pub fn trusted_uid(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// Whether a directory (`st`) is written by nobody bprof does not trust: a
/// trusted owner, no write access for group or others.
pub fn dir_is_private(st: &libc::stat) -> bool {
    trusted_uid(st.st_uid) && st.st_mode & 0o022 == 0
}

/// Whether the user `uid` can change what a directory (`st`) holds: its
/// owner, or anyone where the group or others may write it.
pub fn can_write_dir(uid: u32, st: &libc::stat) -> bool {
    st.st_uid == uid || st.st_mode & 0o022 != 0
}

fn c_name(name: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(name.as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// `openat(dir, name, flags, mode)`, always `O_CLOEXEC`.
pub fn openat(dir: &File, name: &std::ffi::OsStr, flags: i32, mode: u32) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    let c = c_name(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the returned fd
    // is checked and then owned by the File.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `fstatat(dir, name)` without following a final symlink.
pub fn lstatat(dir: &File, name: &std::ffi::OsStr) -> io::Result<libc::stat> {
    let c = c_name(name)?;
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid directory fd, a NUL-terminated name and a stat buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `fstat` of an open file, as the kernel's struct.
pub fn fstat(f: &File) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a stat buffer.
    if unsafe { libc::fstat(f.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `unlinkat(dir, name)` of a file.
pub fn unlinkat(dir: &File, name: &std::ffi::OsStr) -> io::Result<()> {
    let c = c_name(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat2(dir, from, dir, to)`; with `no_replace`, fails (EEXIST)
/// rather than replace something that appeared at `to`.
pub fn rename_in(
    dir: &File,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
    no_replace: bool,
) -> io::Result<()> {
    let (f, t) = (c_name(from)?, c_name(to)?);
    let flags = if no_replace {
        libc::RENAME_NOREPLACE
    } else {
        0
    };
    // SAFETY: valid directory fds and NUL-terminated names.
    let r = unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            f.as_ptr(),
            dir.as_raw_fd(),
            t.as_ptr(),
            flags,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The target of the symlink `name` in `dir`.
pub fn readlinkat(dir: &File, name: &std::ffi::OsStr) -> io::Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let c = c_name(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a valid directory fd, a NUL-terminated name and a buffer of
    // the length passed.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// Whether the symlink `link` (lstat) in the directory `dir` (fstat) may
/// be followed on root's behalf: it is root's (or bprof's user's), in a
/// directory no other user can write, so no one else chose or can change
/// where it leads. The kernel's protected_symlinks asks this only in
/// sticky world-writable directories; bprof asks it everywhere.
pub fn trusted_link(link: &libc::stat, dir: &libc::stat) -> bool {
    trusted_uid(link.st_uid) && dir_is_private(dir)
}

/// Symlinks followed in one path, at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Opens the directory `path` to create or replace files in it on root's
/// behalf. Every component is opened with `O_NOFOLLOW` from the one before
/// (`openat`), so what is checked is what is used; a symlink on the way is
/// followed only when [`trusted_link`] allows it, and refused otherwise,
/// naming it. With `create`, missing directories are made with that mode
/// (less the umask), never through a symlink.
pub fn open_dir_nofollow(path: &Path, create: Option<u32>) -> anyhow::Result<File> {
    use std::collections::VecDeque;
    use std::path::Component;
    let open_dir = |dir: &File, name: &std::ffi::OsStr| {
        openat(
            dir,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
    };
    let root = || File::open("/");
    let start = if path.is_absolute() {
        root()
    } else {
        File::open(".")
    };
    let mut cur = start?;
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    let push_front = |todo: &mut VecDeque<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            todo.push_front(c.as_os_str().to_os_string());
        }
    };
    push_front(&mut todo, path);
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let shown = crate::names::path(Path::new(&name));
        match Path::new(&name).components().next() {
            Some(Component::RootDir) => {
                cur = root()?;
                continue;
            }
            Some(Component::CurDir) | None => continue,
            _ => {}
        }
        let opened = match (open_dir(&cur, &name), create) {
            (Err(e), Some(mode)) if e.kind() == io::ErrorKind::NotFound => {
                let c = c_name(&name)?;
                // SAFETY: a valid directory fd and a NUL-terminated name.
                let r = unsafe { libc::mkdirat(cur.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) };
                let made = io::Error::last_os_error();
                if r != 0 && made.kind() != io::ErrorKind::AlreadyExists {
                    anyhow::bail!("cannot create directory {shown}: {made}");
                }
                open_dir(&cur, &name)
            }
            (other, _) => other,
        };
        match opened {
            Ok(d) => cur = d,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                let link = lstatat(&cur, &name)?;
                if link.st_mode & libc::S_IFMT != libc::S_IFLNK {
                    anyhow::bail!("{shown}: not a directory");
                }
                let dir = fstat(&cur)?;
                if !trusted_link(&link, &dir) {
                    anyhow::bail!(
                        "{shown} is a symlink owned by uid {} in a directory {}: not followed",
                        link.st_uid,
                        if trusted_uid(dir.st_uid) {
                            "other users can write"
                        } else {
                            "another user owns"
                        }
                    );
                }
                links += 1;
                if links > MAX_LINKS {
                    anyhow::bail!("too many levels of symbolic links");
                }
                push_front(&mut todo, &readlinkat(&cur, &name)?);
            }
            Err(e) => anyhow::bail!("{shown}: {e}"),
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bprof-fsafe-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn keep_newest_removes_the_oldest_matching_files_only() {
        let d = scratch("newest");
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for i in 0..5u64 {
            let f = d.join(format!("core-{i}.btf"));
            std::fs::write(&f, b"x").unwrap();
            let f = std::fs::File::options().write(true).open(&f).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i))
                .unwrap();
        }
        std::fs::write(d.join("core-other.txt"), b"x").unwrap();
        std::fs::write(d.join("unwind-x.btf"), b"x").unwrap();
        std::os::unix::fs::symlink(d.join("core-0.btf"), d.join("core-link.btf")).unwrap();
        keep_newest(&d, "core-", ".btf", 2);
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "core-3.btf",
                "core-4.btf",
                "core-link.btf",
                "core-other.txt",
                "unwind-x.btf"
            ]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn refuses_symlink_fifo_and_large_files() {
        let d = scratch("refuse");
        let f = d.join("real");
        std::fs::write(&f, b"0123456789").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);

        assert!(open_untrusted(&f, Owner::Any, 10).is_ok());
        assert!(matches!(
            open_untrusted(&f, Owner::Any, 9),
            Err(Refused::TooLarge(10))
        ));
        assert!(matches!(
            open_untrusted(&link, Owner::Any, 100),
            Err(Refused::Io(_))
        ));
        // Returns at once instead of waiting for a writer.
        assert!(matches!(
            open_untrusted(&fifo, Owner::Any, 100),
            Err(Refused::NotRegular)
        ));
        let me = open_untrusted(&f, Owner::Any, 10)
            .unwrap()
            .file
            .metadata()
            .unwrap()
            .uid();
        assert!(matches!(
            open_untrusted(&f, Owner::Exactly(me + 1), 10),
            Err(Refused::Owner(_))
        ));
        let checked = open_untrusted(&f, Owner::Exactly(me), 10).unwrap();
        assert_eq!(std::fs::read(checked.fd_path()).unwrap(), b"0123456789");

        // Inside a root: a symlink (even to a path inside it) is refused, a
        // file is found relative to the root.
        let rel = |p: &Path| p.strip_prefix(&d).unwrap().to_path_buf();
        assert!(open_untrusted_in_root(&d, &rel(&f), Owner::Any, 10).is_ok());
        assert!(matches!(
            open_untrusted_in_root(&d, &rel(&link), Owner::Any, 10),
            Err(Refused::Io(_))
        ));
        assert!(matches!(
            open_untrusted_in_root(&d, &rel(&fifo), Owner::Any, 10),
            Err(Refused::NotRegular)
        ));
        // "..", and absolute symlinks in directories, stay inside the root.
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("/", d.join("sub/up")).unwrap();
        let inside = Path::new("sub/up").join(rel(&f));
        assert!(open_untrusted_in_root(&d, &inside, Owner::Any, 10).is_ok());
        let host = Path::new("sub/up").join(f.strip_prefix("/").unwrap());
        assert!(open_untrusted_in_root(&d, &host, Owner::Any, 10).is_err());
        let escape = Path::new("../..").join(f.strip_prefix("/").unwrap());
        assert!(matches!(
            open_untrusted_in_root(&d, &escape, Owner::Any, 10),
            Err(Refused::Io(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
    #[test]
    fn private_dir_is_0700_whatever_the_umask_and_refuses_others() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("private");
        let p = d.join("state");
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0) };
        let r = private_dir(&p);
        // SAFETY: as above, restoring it.
        unsafe { libc::umask(old) };
        r.unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o700);
        let f = private_file(&private_dir(&p).unwrap(), "x.lock").unwrap();
        assert_eq!(f.metadata().unwrap().mode() & 0o777, 0o600);

        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&p).unwrap_err().to_string();
        assert!(
            e.contains("mode 777") && e.contains(&*p.to_string_lossy()),
            "{e}"
        );

        let link = d.join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(private_dir(&link)
            .unwrap_err()
            .to_string()
            .contains("not a real directory"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
