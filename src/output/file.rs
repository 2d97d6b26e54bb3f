//! Output files, written so that nothing is destroyed by surprise.
//!
//! A regular file (or a new one) is written to a temporary file created
//! beside it (`O_EXCL|O_NOFOLLOW`, mode set explicitly) and renamed over it
//! only once complete: an error, an interruption or an empty profile leaves
//! the old file as it was, and bprof never unlinks a path it did not create.
//! Anything else the user names (`/dev/stdout`, a FIFO, a symlink of their
//! own) is written in place, opened only when there is something to write.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Mode of a new output file (an existing one keeps its own).
const NEW_MODE: u32 = 0o644;

/// One output, prepared before the profile so a bad path fails early.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    how: How,
}

#[derive(Debug)]
enum How {
    /// Written to `tmp`, renamed over `path` on commit.
    Atomic { tmp: PathBuf, file: Option<File> },
    /// Opened and written in place on commit.
    InPlace,
}

impl OutputFile {
    /// Prepares `path` for writing; checks now that it can be written.
    pub fn create(path: &Path) -> Result<OutputFile> {
        let shown = path.display();
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                refuse_foreign_symlink(path, &m)?;
                check_writable(path)?;
                Ok(OutputFile {
                    path: path.to_path_buf(),
                    how: How::InPlace,
                })
            }
            Ok(m) if !m.file_type().is_file() => {
                if m.is_dir() {
                    bail!("cannot write {shown}: is a directory");
                }
                check_writable(path)?;
                Ok(OutputFile {
                    path: path.to_path_buf(),
                    how: How::InPlace,
                })
            }
            existing => {
                let mode = existing.map_or(NEW_MODE, |m| m.mode() & 0o7777);
                let (tmp, file) =
                    temp_beside(path, mode).with_context(|| format!("cannot write {shown}"))?;
                Ok(OutputFile {
                    path: path.to_path_buf(),
                    how: How::Atomic {
                        tmp,
                        file: Some(file),
                    },
                })
            }
        }
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes everything `write` produces, then puts it in place.
    pub fn commit(mut self, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        let shown = self.path.display().to_string();
        match &mut self.how {
            How::Atomic { tmp, file } => {
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
                fs::rename(&*tmp, &self.path).with_context(|| format!("renaming into {shown}"))?;
                // Renamed: nothing left to remove on drop.
                tmp.clear();
                Ok(())
            }
            How::InPlace => {
                let f = OpenOptions::new()
                    .write(true)
                    .truncate(is_regular_target(&self.path))
                    .open(&self.path)
                    .with_context(|| format!("cannot write {shown}"))?;
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
            if !tmp.as_os_str().is_empty() {
                let _ = fs::remove_file(tmp);
            }
        }
    }
}

/// A symlink in a sticky, world-writable directory (such as /tmp) that
/// another user owns is theirs to point anywhere: never write through it
/// (the kernel's protected_symlinks rule, applied before opening).
fn refuse_foreign_symlink(path: &Path, m: &fs::Metadata) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let sticky_shared = fs::metadata(dir).is_ok_and(|d| d.mode() & 0o1002 == 0o1002);
    if m.uid() != me && sticky_shared {
        bail!(
            "refusing to write {}: a symlink owned by uid {} in a shared directory",
            path.display(),
            m.uid()
        );
    }
    Ok(())
}

fn is_regular_target(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file())
}

fn check_writable(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

/// Creates `.NAME.bprof-PID-N.tmp` beside `path`, exclusively.
fn temp_beside(path: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut last = None;
    for n in 0..100 {
        let tmp = dir.join(format!(
            ".{}.bprof-{}-{n}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => {
                // Explicitly, whatever the umask.
                f.set_permissions(fs::Permissions::from_mode(mode))?;
                return Ok((tmp, f));
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
}
