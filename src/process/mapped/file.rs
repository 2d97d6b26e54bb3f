//! One mapped file: its identity (device, inode, size and times), the
//! descriptor opened through the mapping, and how that opening is checked.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::bpf::stacks::FileKey;
use crate::fsafe::{self, Owner, Refused};
use crate::process::buildid::BuildId;

/// The largest file opened (as the largest ELF file checked).
pub(super) const MAX_FILE: u64 = 4 << 30;

/// A file's identity and version: the same inode, size, mtime and ctime
/// (which any write changes) is the same content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    /// The identity of the file `m` describes.
    pub(crate) fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The identity as a file name: every field, in hex.
    pub(crate) fn key(&self) -> String {
        format!(
            "{:x}-{:x}-{:x}-{:x}.{:x}-{:x}.{:x}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }
}

/// What a mapping record says of its file besides its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// Its GNU build ID (the kernel read it at mmap).
    BuildId(BuildId),
    /// Its device and inode (a file without a build ID, or /proc/PID/maps).
    Key(FileKey),
}

/// One mapping as bprof learned it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Learned<'a> {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    /// The file offset of `start`.
    pub off: u64,
    /// The path the mapping names.
    pub path: &'a Path,
    /// `path` is as the process names it, inside its root (the side
    /// band's records), not as bprof does (/proc/PID/maps).
    pub in_root: bool,
    pub known: Known,
}

/// One distinct file some process mapped.
#[derive(Debug)]
pub struct MappedFile {
    /// Its device and inode as `fstat` gives them (the kernel's encoding);
    /// the record's, when it could not be opened.
    pub key: FileKey,
    /// Its identity when opened.
    pub(crate) id: Option<FileId>,
    /// The path its mapping named: what its frames show as their module.
    pub path: PathBuf,
    /// `path` is as the process names it, inside its root (the side band's
    /// records), not as bprof does.
    pub in_root: bool,
    /// The descriptor, kept for the profile (none when it could not be
    /// opened, or past the descriptor budget).
    file: Option<File>,
    /// Its owner, when opened.
    pub uid: Option<u32>,
    /// Its GNU build ID, where a record or the unwinder read one.
    build_id: OnceLock<Option<BuildId>>,
    /// When bprof learned of the mapping: a file at `path` changed after
    /// that is not the one that was mapped.
    pub learned: SystemTime,
    /// Why it could not be opened.
    pub why: Option<String>,
}

impl MappedFile {
    /// A file opened (`meta` its `fstat`), its descriptor kept when `keep`.
    pub(super) fn opened(
        path: &Path,
        in_root: bool,
        file: File,
        meta: &std::fs::Metadata,
        keep: bool,
        learned: SystemTime,
    ) -> MappedFile {
        MappedFile {
            key: FileKey::of(meta),
            id: Some(FileId::of(meta)),
            path: path.to_path_buf(),
            in_root,
            file: keep.then_some(file),
            uid: Some(meta.uid()),
            build_id: OnceLock::new(),
            learned,
            why: None,
        }
    }

    /// A file that could not be opened: known by the record's key alone.
    pub(super) fn unreachable(
        key: FileKey,
        path: &Path,
        in_root: bool,
        learned: SystemTime,
        why: String,
    ) -> MappedFile {
        MappedFile {
            key,
            id: None,
            path: path.to_path_buf(),
            in_root,
            file: None,
            uid: None,
            build_id: OnceLock::new(),
            learned,
            why: Some(why),
        }
    }

    /// Its build ID as noted (`None` inside: noted as having none), or
    /// `None` when nobody noted it yet.
    pub(super) fn noted_build_id(&self) -> Option<Option<BuildId>> {
        self.build_id.get().copied()
    }

    /// Notes its build ID (the first note stands).
    pub(super) fn set_build_id(&self, id: Option<BuildId>) {
        let _ = self.build_id.set(id);
    }

    /// The kept descriptor.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Another descriptor of it, for a reader that owns its own.
    pub fn reopen(&self) -> Option<File> {
        self.file.as_ref()?.try_clone().ok()
    }

    /// Its build ID, where known.
    pub fn build_id(&self) -> Option<BuildId> {
        self.build_id.get().copied().flatten()
    }

    /// The name its frames show for their module: the file name, without
    /// the " (deleted)" the kernel appends to an unlinked file's path.
    pub fn module_name(&self) -> String {
        module_name(&self.path)
    }

    /// Whether the file now at `path` (opened, `meta`) is the one that was
    /// mapped: same device and inode, and (where it was opened then) the
    /// same size and times; else not changed since the mapping was learned.
    pub(crate) fn same_as(&self, meta: &std::fs::Metadata) -> bool {
        if FileKey::of(meta) != self.key {
            return false;
        }
        match self.id {
            Some(id) => FileId::of(meta) == id,
            None => changed_at(meta) <= self.learned,
        }
    }
}

/// The file name a module is shown under, without " (deleted)".
pub fn module_name(path: &Path) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    match name.strip_suffix(" (deleted)") {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => name,
    }
}

/// A file's ctime as a wall-clock time.
fn changed_at(meta: &std::fs::Metadata) -> SystemTime {
    let (s, ns) = (meta.ctime(), meta.ctime_nsec());
    if s < 0 {
        return SystemTime::UNIX_EPOCH;
    }
    SystemTime::UNIX_EPOCH + std::time::Duration::new(s as u64, ns.clamp(0, 999_999_999) as u32)
}

/// The key of the file mapping `m` maps, by `stat` through its map_files
/// link (while the process lives).
pub(super) fn mapped_key(m: &Learned) -> Option<FileKey> {
    let link = format!("/proc/{}/map_files/{:x}-{:x}", m.pid, m.start, m.end);
    std::fs::metadata(link)
        .ok()
        .filter(|meta| meta.file_type().is_file())
        .map(|meta| FileKey::of(&meta))
}

/// Whether the file open as `f` is on overlayfs (whose files /proc and
/// `fstat` show under the overlay's device, the kernel's records under the
/// layer's).
fn on_overlayfs(f: &File) -> bool {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes a statfs into st on success; read only then.
    let ok = unsafe { libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(f), st.as_mut_ptr()) } == 0;
    // SAFETY: initialized by the successful call.
    ok && unsafe { st.assume_init() }.f_type == OVERLAYFS_SUPER_MAGIC
}

/// Whether the opened `f` (`meta`) is the file a record named `want`.
fn is_wanted(f: &File, meta: &std::fs::Metadata, want: Option<FileKey>) -> bool {
    let Some(k) = want else { return true };
    let got = FileKey::of(meta);
    got == k || (got.ino == k.ino && on_overlayfs(f))
}

/// Opens the file of mapping `m` as its process sees it: through the
/// mapping's map_files link, else by path inside the process's root (for
/// a path as the process names it), else by path as bprof sees it, checked
/// against `want` and against changes after `learned`. `Err` says why not.
pub(super) fn open_as_mapped(
    m: &Learned,
    want: Option<FileKey>,
    learned: SystemTime,
) -> Result<File, String> {
    let check = |c: fsafe::Checked| -> Result<File, String> {
        let meta = c.file.metadata().map_err(|e| e.to_string())?;
        if is_wanted(&c.file, &meta, want) {
            Ok(c.file)
        } else {
            Err("another file is there now".into())
        }
    };
    let first = match fsafe::open_mapped(m.pid, m.start, m.end, MAX_FILE) {
        Ok(c) => match check(c) {
            Ok(f) => return Ok(f),
            Err(e) => e,
        },
        Err(e) => e.to_string(),
    };
    let rel = m.path.strip_prefix("/").unwrap_or(m.path);
    // A file known by its build ID alone: a path's file with that ID.
    let Some(want) = want else {
        let Known::BuildId(id) = m.known else {
            return Err(first);
        };
        let same = |c: fsafe::Checked| {
            (crate::process::buildid::of_file(&c.file) == Some(id)).then_some(c.file)
        };
        let root = PathBuf::from(format!("/proc/{}/root", m.pid));
        let in_root = m
            .in_root
            .then(|| fsafe::open_untrusted_in_root(&root, rel, Owner::Any, MAX_FILE).ok())
            .flatten();
        return in_root
            .and_then(same)
            .or_else(|| {
                fsafe::open_untrusted(m.path, Owner::Any, MAX_FILE)
                    .ok()
                    .and_then(same)
            })
            .ok_or(first);
    };
    if m.in_root {
        let root = PathBuf::from(format!("/proc/{}/root", m.pid));
        if let Ok(c) = fsafe::open_untrusted_in_root(&root, rel, Owner::Any, MAX_FILE) {
            if let Ok(f) = check(c) {
                return Ok(f);
            }
        }
    }
    let c = fsafe::open_untrusted(m.path, Owner::Any, MAX_FILE).map_err(|e: Refused| match e {
        Refused::Io(e) if e.kind() == std::io::ErrorKind::NotFound => "gone".to_string(),
        e => e.to_string(),
    })?;
    let meta = c.file.metadata().map_err(|e| e.to_string())?;
    // The path's file now: the same inode, not changed since the mapping
    // (a new file at the path with a reused inode number is newer).
    if FileKey::of(&meta) == want && changed_at(&meta) <= learned {
        Ok(c.file)
    } else {
        Err("changed since it was mapped".into())
    }
}
