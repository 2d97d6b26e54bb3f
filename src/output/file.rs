//! Output files, written so that nothing is destroyed by surprise, and
//! nothing another user planted at an output path is written through.
//!
//! The directory is opened first, each component with `O_NOFOLLOW` from the
//! one before (a symlink on the way is followed only when root's, in a
//! directory no other user can write: see `fsafe::open_dir_nofollow`);
//! everything else happens relative to that descriptor. A regular file (or
//! a new one) is written to a temporary file created in it (`O_EXCL|
//! O_NOFOLLOW`) and renamed over the name only once complete: an error, an
//! interruption or an empty profile leaves the old file as it was, and bprof
//! never unlinks a path it did not create.
//!
//! - A new file's mode is 0644 (0600 for a private one) less the umask; an
//!   existing file of root's (or bprof's user's) keeps its mode less the
//!   setuid, setgid, sticky and world-write bits; no bit is ever taken from
//!   another user's file.
//! - A file another user owns in a directory that user can write is not
//!   replaced (the kernel's protected_regular rule, asked everywhere).
//! - A symlink at the path is followed only when root's in a directory no
//!   other user can write, and where it leads is checked as the path itself
//!   would be; `/dev/stdout` and `/dev/fd/N` write the descriptor bprof's
//!   caller opened.
//! - Of other files, only character devices (`/dev/null`, a terminal) and
//!   root's FIFOs are written, in place, opened `O_NONBLOCK` so that an open
//!   never waits for a reader; only when there is something to write.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use crate::fsafe::{self, trusted_uid};
use crate::names;

/// Mode of a new output file, less the umask.
const NEW_MODE: u32 = 0o644;
/// Mode of a new private output file (one that shows more than a profile
/// does), less the umask.
const PRIVATE_MODE: u32 = 0o600;
/// Symlinks followed from the path given, at most.
const MAX_LINKS: usize = 8;

/// Bits an output never has, whatever the file it replaces had: setuid,
/// setgid, sticky and world-writable.
const NEVER: u32 = 0o7002;

/// How an output is created.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// New files get mode 0600 (less the umask) rather than 0644.
    pub private: bool,
    /// Missing directories on the way are created (0755 less the umask),
    /// never through a symlink bprof would not follow.
    pub make_dirs: bool,
}

/// One output, prepared before the profile so a bad path fails early.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    /// The directory that holds it, opened as described above.
    dir: File,
    name: OsString,
    how: How,
}

#[derive(Debug)]
enum How {
    /// Written to `tmp` (a name in `dir`), renamed over `name` on commit;
    /// `existed`: whether there was a file to replace (else the rename
    /// never replaces one that appeared meanwhile).
    Atomic {
        tmp: OsString,
        file: Option<File>,
        existed: bool,
    },
    /// A character device or root's FIFO, opened and written in place on
    /// commit.
    InPlace,
    /// One of bprof's own descriptors, which its caller opened
    /// (`/dev/stdout`, `/dev/fd/3`): written as it is.
    Inherited(i32),
}

impl OutputFile {
    /// Prepares `path` for writing; checks now that it can be written.
    pub fn create(path: &Path) -> Result<OutputFile> {
        Self::create_with(path, Options::default())
    }

    /// [`OutputFile::create`] with options.
    pub fn create_with(path: &Path, opts: Options) -> Result<OutputFile> {
        let mut f = Self::create_at(path, opts, 0)?;
        f.path = path.to_path_buf();
        Ok(f)
    }

    /// [`OutputFile::create_with`] `depth` symlinks away from the path the
    /// user gave.
    fn create_at(path: &Path, opts: Options, depth: usize) -> Result<OutputFile> {
        let shown = names::path(path);
        let name = path
            .file_name()
            .filter(|_| !path.as_os_str().as_encoded_bytes().ends_with(b"/"))
            .ok_or_else(|| anyhow!("cannot write {shown}: not a file name"))?
            .to_os_string();
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = fsafe::open_dir_nofollow(parent, opts.make_dirs.then_some(0o755))
            .with_context(|| format!("cannot write {shown}"))?;
        let dir_st = fsafe::fstat(&dir).with_context(|| format!("cannot write {shown}"))?;
        let new_mode = if opts.private { PRIVATE_MODE } else { NEW_MODE };
        let how = match fsafe::lstatat(&dir, &name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => atomic(&dir, &name, new_mode, None)
                .with_context(|| format!("cannot write {shown}"))?,
            Err(e) => return Err(e).with_context(|| format!("cannot write {shown}")),
            Ok(st) => match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {
                    if !trusted_uid(st.st_uid) && fsafe::can_write_dir(st.st_uid, &dir_st) {
                        bail!(
                            "refusing to replace {shown}: it is owned by uid {}, who can write its directory",
                            st.st_uid
                        );
                    }
                    let keep = trusted_uid(st.st_uid).then_some(st.st_mode & 0o7777 & !NEVER);
                    atomic(&dir, &name, new_mode, keep)
                        .with_context(|| format!("cannot write {shown}"))?
                }
                libc::S_IFLNK => {
                    if !fsafe::trusted_link(&st, &dir_st) {
                        bail!(
                            "refusing to write {shown}: a symlink owned by uid {} in a directory {}",
                            st.st_uid,
                            if trusted_uid(dir_st.st_uid) {
                                "other users can write"
                            } else {
                                "another user owns"
                            }
                        );
                    }
                    match inherited(&dir, &name) {
                        Some(fd) => How::Inherited(fd),
                        // Where it leads is checked as the path given
                        // would be: never the kernel's walk, which would
                        // follow another user's symlink further on.
                        None if depth < MAX_LINKS => {
                            let to = fsafe::readlinkat(&dir, &name)
                                .with_context(|| format!("cannot write {shown}"))?;
                            let to = if to.is_absolute() {
                                to
                            } else {
                                fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
                                    .with_context(|| format!("cannot write {shown}"))?
                                    .join(to)
                            };
                            return Self::create_at(&to, opts, depth + 1);
                        }
                        None => bail!("cannot write {shown}: too many levels of symbolic links"),
                    }
                }
                libc::S_IFDIR => bail!("cannot write {shown}: is a directory"),
                libc::S_IFCHR => {
                    writable(&dir, &name).with_context(|| format!("cannot write {shown}"))?;
                    How::InPlace
                }
                libc::S_IFIFO if trusted_uid(st.st_uid) => {
                    writable(&dir, &name).with_context(|| format!("cannot write {shown}"))?;
                    How::InPlace
                }
                libc::S_IFIFO => bail!(
                    "refusing to write {shown}: a FIFO owned by uid {}",
                    st.st_uid
                ),
                _ => bail!(
                    "refusing to write {shown}: not a regular file, a character device or a FIFO"
                ),
            },
        };
        Ok(OutputFile {
            path: path.to_path_buf(),
            dir,
            name,
            how,
        })
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes everything `write` produces, then puts it in place.
    pub fn commit(mut self, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        let shown = names::path(&self.path);
        match &mut self.how {
            How::Atomic { tmp, file, existed } => {
                let Some(f) = file.take() else {
                    bail!("{shown} was already written");
                };
                let mut w = BufWriter::new(f);
                write(&mut w).with_context(|| format!("writing {shown}"))?;
                let f = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(|| format!("writing {shown}"))?;
                f.sync_all().with_context(|| format!("writing {shown}"))?;
                match fsafe::rename_in(&self.dir, tmp, &self.name, !*existed) {
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        bail!("refusing to replace {shown}: it appeared while bprof ran")
                    }
                    r => r.with_context(|| format!("renaming into {shown}"))?,
                }
                // Renamed: nothing left to remove on drop.
                tmp.clear();
                Ok(())
            }
            How::InPlace => {
                let f = fsafe::openat(
                    &self.dir,
                    &self.name,
                    libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
                    0,
                )
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENXIO) => anyhow!("cannot write {shown}: no process reads it"),
                    _ => anyhow!("cannot write {shown}: {e}"),
                })?;
                in_place_checks(&f).map_err(|why| anyhow!("refusing to write {shown}: {why}"))?;
                let mut w = BufWriter::new(f);
                write(&mut w).with_context(|| format!("writing {shown}"))?;
                w.flush().with_context(|| format!("writing {shown}"))
            }
            How::Inherited(fd) => {
                // SAFETY: dup of a descriptor checked open when prepared;
                // the new one is owned by the File.
                let f = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 0) };
                if f < 0 {
                    return Err(io::Error::last_os_error())
                        .with_context(|| format!("cannot write {shown}"));
                }
                // SAFETY: f is a fresh descriptor nothing else owns.
                let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(f) };
                let mut w = BufWriter::new(f);
                write(&mut w).with_context(|| format!("writing {shown}"))?;
                w.flush().with_context(|| format!("writing {shown}"))
            }
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Only the temporary file bprof itself created is ever removed.
        if let How::Atomic { tmp, .. } = &self.how {
            if !tmp.is_empty() {
                let _ = fsafe::unlinkat(&self.dir, tmp);
            }
        }
    }
}

/// What an output written in place may be, checked on the open descriptor
/// (the name may have changed since it was prepared): a character device,
/// or a FIFO of root's (then written blocking, as a pipe on stdout is).
fn in_place_checks(f: &File) -> Result<(), String> {
    let m = f.metadata().map_err(|e| e.to_string())?;
    let t = m.mode() & libc::S_IFMT;
    let blocking = || {
        // SAFETY: fcntl on a valid fd with integer arguments.
        unsafe {
            let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
    };
    match t {
        libc::S_IFCHR => Ok(()),
        libc::S_IFIFO if trusted_uid(m.uid()) => {
            blocking();
            Ok(())
        }
        _ => Err(format!(
            "it is now a file of uid {} that bprof does not write in place",
            m.uid()
        )),
    }
}

/// The descriptor of bprof's own that the trusted symlink `name` in `dir`
/// stands for, if open: `/dev/stdout` (`/proc/self/fd/1`), `/dev/fd/N`.
/// What its caller opened for it is written as it is, whoever owns it.
fn inherited(dir: &File, name: &OsStr) -> Option<i32> {
    let own = PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    let in_own = fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok() == Some(own);
    let fd: i32 = if in_own {
        name.to_str()?.parse().ok()?
    } else {
        let to = fsafe::readlinkat(dir, name).ok()?;
        let n = to
            .strip_prefix("/proc/self/fd")
            .or_else(|_| to.strip_prefix("/dev/fd"))
            .ok()?;
        n.to_str()?.parse().ok()?
    };
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    (unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0).then_some(fd)
}

/// Whether bprof may write `name` in `dir` (an existing special file).
fn writable(dir: &File, name: &OsStr) -> io::Result<()> {
    let c = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: a valid directory fd and a NUL-terminated name.
    if unsafe { libc::faccessat(dir.as_raw_fd(), c.as_ptr(), libc::W_OK, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates `.NAME.bprof-PID-N.tmp` in `dir`, exclusively, never through a
/// symlink: with `new_mode` less the umask, or exactly `keep` (an existing
/// file's own mode).
fn atomic(dir: &File, name: &OsStr, new_mode: u32, keep: Option<u32>) -> io::Result<How> {
    // A temporary name within NAME_MAX however long the name is.
    let base: String = name.to_string_lossy().chars().take(64).collect();
    let mut last = None;
    for n in 0..100 {
        let tmp = OsString::from(format!(".{base}.bprof-{}-{n}.tmp", std::process::id()));
        let mode = if keep.is_some() { 0o600 } else { new_mode };
        match fsafe::openat(
            dir,
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            mode,
        ) {
            Ok(f) => {
                if let Some(mode) = keep {
                    // Explicitly, whatever the umask.
                    if let Err(e) = f.set_permissions(fs::Permissions::from_mode(mode)) {
                        let _ = fsafe::unlinkat(dir, &tmp);
                        return Err(e);
                    }
                }
                return Ok(How::Atomic {
                    tmp,
                    file: Some(f),
                    existed: keep.is_some() || fsafe::lstatat(dir, name).is_ok(),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name left")))
}

/// Whether two output paths name the same file: by inode where both exist,
/// else by their resolved directory and name.
pub fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (fs::metadata(a), fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let resolve = |p: &Path| -> Option<PathBuf> {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = fs::canonicalize(dir.unwrap_or(Path::new("."))).ok()?;
        Some(dir.join(p.file_name()?))
    };
    match (resolve(a), resolve(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Whether an error is a closed output pipe (a reader such as `head` that
/// stopped reading): not a failure, as ripgrep treats it.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bprof-out-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_uncommitted_output_leaves_the_old_file_and_no_temporary() {
        let d = scratch("keep");
        let p = d.join("out.folded");
        fs::write(&p, "old").unwrap();
        drop(OutputFile::create(&p).unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1, "temporary left");

        let o = OutputFile::create(&p).unwrap();
        o.commit(|w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);

        // A failed write leaves the old content.
        let o = OutputFile::create(&p).unwrap();
        assert!(o.commit(|_| Err(io::Error::other("boom"))).is_err());
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn new_files_get_an_explicit_mode_and_same_files_are_found() {
        let d = scratch("mode");
        let p = d.join("a.svg");
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0) };
        let r = OutputFile::create(&p).and_then(|o| o.commit(|w| w.write_all(b"x")));
        // SAFETY: restoring it.
        unsafe { libc::umask(old) };
        r.unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, NEW_MODE);

        assert!(same_file(&p, &d.join(".").join("a.svg")));
        fs::hard_link(&p, d.join("b.svg")).unwrap();
        assert!(same_file(&p, &d.join("b.svg")));
        assert!(same_file(&d.join("new"), &d.join("./new")));
        assert!(!same_file(&d.join("new"), &d.join("other")));
        let _ = fs::remove_dir_all(&d);
    }

    fn chown(p: &Path, uid: u32) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; lchown changes only its owner.
        assert_eq!(unsafe { libc::lchown(c.as_ptr(), uid, uid) }, 0);
    }

    #[test]
    fn no_mode_bit_comes_from_another_users_file_and_none_is_dangerous() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let d = scratch("bits");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let write = |p: &Path| OutputFile::create(p).and_then(|o| o.commit(|w| w.write_all(b"x")));
        // Root's own file: its mode, less setuid/setgid/sticky/o+w.
        let mine = d.join("mine");
        fs::write(&mine, "old").unwrap();
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o7777)).unwrap();
        write(&mine).unwrap();
        assert_eq!(fs::metadata(&mine).unwrap().mode() & 0o7777, 0o775);
        // Another user's file in root's directory: replaced by root's own,
        // with a new file's mode.
        let theirs = d.join("theirs");
        fs::write(&theirs, "old").unwrap();
        fs::set_permissions(&theirs, fs::Permissions::from_mode(0o6777)).unwrap();
        chown(&theirs, 65534);
        write(&theirs).unwrap();
        let m = fs::metadata(&theirs).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o6002), (0, 0));
        assert_eq!(fs::read_to_string(&theirs).unwrap(), "x");
        // ... but in a directory they can write, left alone.
        let shared = d.join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let planted = shared.join("out");
        fs::write(&planted, "theirs").unwrap();
        chown(&planted, 65534);
        let e = format!("{:#}", write(&planted).unwrap_err());
        assert!(e.contains("owned by uid 65534"), "{e}");
        assert_eq!(fs::read_to_string(&planted).unwrap(), "theirs");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn symlinks_and_fifos_of_other_users_are_never_written_through() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let d = scratch("links");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let target = d.join("target");
        fs::write(&target, "precious").unwrap();
        let write = |p: &Path| OutputFile::create(p).and_then(|o| o.commit(|w| w.write_all(b"x")));
        // Root's symlink in root's directory: followed.
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write(&link).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "x");
        fs::write(&target, "precious").unwrap();
        // Another user's symlink, or any in another user's directory: not,
        // for the file and for a directory on the way.
        chown(&link, 65534);
        assert!(format!("{:#}", write(&link).unwrap_err()).contains("symlink owned by uid 65534"));
        let theirs = d.join("theirs");
        fs::create_dir(&theirs).unwrap();
        chown(&theirs, 65534);
        std::os::unix::fs::symlink(&target, theirs.join("link")).unwrap();
        assert!(write(&theirs.join("link")).is_err());
        // Root's symlink that leads through another user's directory: where
        // it leads is checked too, not walked by the kernel.
        let chain = d.join("chain");
        std::os::unix::fs::symlink(theirs.join("link"), &chain).unwrap();
        assert!(format!("{:#}", write(&chain).unwrap_err())
            .contains("in a directory another user owns"));
        std::os::unix::fs::symlink(&d, theirs.join("dir")).unwrap();
        let e = format!("{:#}", write(&theirs.join("dir").join("new")).unwrap_err());
        assert!(
            e.contains("dir is a symlink owned by uid 0 in a directory another user owns"),
            "{e}"
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        assert!(!d.join("new").exists());
        // Their FIFO: refused at once; root's without a reader: an error
        // at once, never a wait.
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        let o = OutputFile::create(&fifo).unwrap();
        assert!(
            format!("{:#}", o.commit(|w| w.write_all(b"x")).unwrap_err())
                .contains("no process reads it")
        );
        chown(&fifo, 65534);
        assert!(format!("{:#}", write(&fifo).unwrap_err()).contains("a FIFO owned by uid 65534"));
        // A character device: written in place.
        write(Path::new("/dev/null")).unwrap();
        // Directories are made only when asked, and never through a link.
        let deep = d.join("a/b/c.folded");
        assert!(OutputFile::create(&deep).is_err());
        let opts = Options {
            make_dirs: true,
            ..Options::default()
        };
        OutputFile::create_with(&deep, opts)
            .unwrap()
            .commit(|w| w.write_all(b"x"))
            .unwrap();
        assert_eq!(fs::read_to_string(&deep).unwrap(), "x");
        assert!(OutputFile::create_with(&theirs.join("dir/made/x"), opts).is_err());
        assert!(!d.join("made").exists());
        let _ = fs::remove_dir_all(&d);
    }
}
