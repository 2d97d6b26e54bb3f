//! Sharing counters between concurrent bprof sessions (bperf's idea,
//! without fexit): one perf event per CPU per event attribute, held in a
//! single PERF_EVENT_ARRAY pinned in bpffs and created with
//! BPF_F_PRESERVE_ELEMS, so the events live as long as the array has a user
//! (a pin or an open fd), not as long as the process that opened them.
//!
//! Layout under the pin directory (default /sys/fs/bpf/bprof-stat):
//! - `events`: the PERF_EVENT_ARRAY, entry `slot * nr_cpus + cpu`;
//! - `attrs`: HASH event attribute key → slot (perf's `perf_attr_map`);
//! - `sessions`: HASH session id → (0, mask of the slots it uses).
//!
//! The pin directory and the state directory ([`STATE_DIR`]: the lock and one
//! liveness file per session) are root's own, mode 0700, checked before use:
//! a local user can neither plant nor swap anything in them. Setup and
//! teardown hold an exclusive flock, waited for at most [`LOCK_WAIT`]. A
//! session holds a flock on its liveness file for its whole life, so a
//! session that crashed is known by a lock anyone can take (never by a pid,
//! which means nothing across PID namespaces): it is pruned; when no live
//! session remains the pins are stale and replaced. A
//! slot no live session uses is closed; the last session to leave removes
//! every pin, and the kernel frees the array and its events once the last fd
//! closes.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::bpf::abi;
use crate::events::counting::EventSpec;

/// The default pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/bprof-stat";

/// Root's own state: the setup lock and the sessions' liveness files.
pub const STATE_DIR: &str = "/run/bprof";

/// How long a session waits for the setup lock before it gives up.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

const ATTR_KEY: usize = 32;

/// Where one requested event is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// In this slot of the shared array.
    Slot(u32),
    /// Nowhere: the machine cannot count it (e.g. no hardware PMU).
    NotSupported,
}

/// This session's membership; leaving happens on drop.
pub struct Session {
    dir: PathBuf,
    state: File,
    lock_name: String,
    id: u32,
    /// Held (flocked) for the session's life: its liveness.
    _alive: File,
    /// The shared array (this fd keeps its events alive).
    pub array: MapHandle,
    /// Per requested event, in order.
    pub events: Vec<Shared>,
    /// Possible CPUs: the stride of a slot.
    pub nr_cpus: u32,
    /// How many slots this session had to open (the rest were reused).
    pub created: usize,
}

struct Lock(File);

impl Lock {
    /// Takes the setup lock `name` in the state directory, waiting at most
    /// [`LOCK_WAIT`]; then says who holds it.
    fn take(state: &File, name: &str) -> Result<Lock> {
        let f = crate::fsafe::private_file(state, name)
            .with_context(|| format!("opening lock file {STATE_DIR}/{name}"))?;
        let start = Instant::now();
        loop {
            // SAFETY: flock on a valid fd we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lock(f));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e).context("locking the shared counters");
            }
            if start.elapsed() >= LOCK_WAIT {
                let holder = f
                    .metadata()
                    .ok()
                    .and_then(|m| lock_holder(m.ino()))
                    .map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
                bail!(
                    "{holder} has held the shared-counter lock {STATE_DIR}/{name} for over {} s; giving up",
                    LOCK_WAIT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The pid (in our namespace) holding a flock on inode `ino`, from /proc/locks.
fn lock_holder(ino: u64) -> Option<u32> {
    let locks = fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (pid, dev_ino) = (w.get(4)?, w.get(5)?);
        (dev_ino.rsplit(':').next()?.parse::<u64>().ok()? == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: unlocking our own fd.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A session's liveness file.
fn alive_name(id: u32) -> String {
    format!("session-{id:08x}")
}

/// Whether session `id` still holds its liveness lock; a dead one's file is
/// removed.
fn session_alive(state: &File, id: u32) -> bool {
    let name = alive_name(id);
    let Ok(f) = crate::fsafe::private_file(state, &name) else {
        return false;
    };
    // SAFETY: flock on a valid fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        unlink_in(state, &name);
        return false;
    }
    true
}

fn unlink_in(dir: &File, name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        // SAFETY: a valid directory fd and a NUL-terminated name.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    }
}

/// A session id no registered session has.
fn new_session_id(sessions: &MapHandle) -> Result<u32> {
    for _ in 0..64 {
        let mut id = 0u32;
        // SAFETY: getrandom writes at most 4 bytes into id.
        let n = unsafe { libc::getrandom((&raw mut id).cast(), 4, 0) };
        if n == 4 && id != 0 && sessions.lookup(&id.to_ne_bytes(), MapFlags::ANY)?.is_none() {
            return Ok(id);
        }
    }
    bail!("could not pick a session id")
}

fn ensure_bpffs(dir: &Path) -> Result<()> {
    if dir.starts_with("/sys/fs/bpf") && !is_bpffs("/sys/fs/bpf") {
        let (src, target, fs) = (c"bpf", c"/sys/fs/bpf", c"bpf");
        // SAFETY: mount(2) with valid NUL-terminated strings and no data.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fs.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error()).context("mounting bpffs on /sys/fs/bpf");
        }
    }
    pin_dir(dir).map(drop)
}

/// The pin directory: root's own, 0700, checked (a user could otherwise
/// pre-create it in the world-writable bpffs and swap its pins).
fn pin_dir(dir: &Path) -> Result<File> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("creating directory {}", parent.display()))?;
    }
    crate::fsafe::private_dir(dir)
}

/// The state directory, created (with /run) if needed and checked.
fn state_dir() -> Result<File> {
    crate::fsafe::private_dir(Path::new(STATE_DIR))
}

fn is_bpffs(path: &str) -> bool {
    fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
        m.lines().any(|l| {
            let mut w = l.split_whitespace().skip(1);
            w.next() == Some(path) && w.next() == Some("bpf")
        })
    })
}

fn create_opts(flags: u32) -> libbpf_rs::libbpf_sys::bpf_map_create_opts {
    libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: flags,
        ..Default::default()
    }
}

/// Opens the pinned map at `dir/name` if it has the expected shape, else
/// creates and pins a new one.
fn pinned(
    dir: &Path,
    name: &str,
    ty: MapType,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
) -> Result<MapHandle> {
    let path = dir.join(name);
    if let Ok(m) = MapHandle::from_pinned_path(&path) {
        if m.map_type() == ty
            && m.key_size() == key
            && m.value_size() == value
            && m.max_entries() == entries
        {
            return Ok(m);
        }
        let _ = fs::remove_file(&path);
    }
    let mut m = MapHandle::create(ty, Some(name), key, value, entries, &create_opts(flags))
        .with_context(|| format!("creating the shared map {name}"))?;
    m.pin(&path)
        .with_context(|| format!("pinning {}", path.display()))?;
    Ok(m)
}

fn sessions_map(dir: &Path) -> Result<MapHandle> {
    pinned(dir, "sessions", MapType::Hash, 4, 16, 1024, 0)
}

/// Slot masks of the live sessions, after dropping the dead ones.
fn prune(sessions: &MapHandle, state: &File) -> Result<Vec<u64>> {
    let mut live = Vec::new();
    let keys: Vec<Vec<u8>> = sessions.keys().collect();
    for k in keys {
        let id = u32::from_ne_bytes(k[..4].try_into().unwrap_or_default());
        let v = sessions.lookup(&k, MapFlags::ANY)?.unwrap_or_default();
        let mask = v
            .get(8..16)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()));
        match mask {
            Some(m) if session_alive(state, id) => live.push(m),
            _ => {
                let _ = sessions.delete(&k);
            }
        }
    }
    Ok(live)
}

fn attr_key(spec: &EventSpec) -> [u8; ATTR_KEY] {
    let mut k = [0u8; ATTR_KEY];
    let s = spec.key();
    let n = s.len().min(ATTR_KEY);
    k[..n].copy_from_slice(&s.as_bytes()[..n]);
    k
}

fn remove_all(dir: &Path) {
    for name in ["events", "attrs", "sessions"] {
        let _ = fs::remove_file(dir.join(name));
    }
    let _ = fs::remove_dir(dir);
}

/// The setup lock of pin directory `dir`, in the state directory.
fn lock_name(dir: &Path) -> String {
    let name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '_' })
        .collect();
    format!("lock{name}")
}

impl Session {
    /// Joins (or starts) the sharing for `specs`, opening counters on
    /// `cpus` for attributes no live session counts yet.
    pub fn join(dir: &Path, specs: &[EventSpec], cpus: &[u32]) -> Result<Session> {
        // The lock first: a session that cannot get it leaves nothing behind.
        let state = state_dir()?;
        let lock_name = lock_name(dir);
        let _lock = Lock::take(&state, &lock_name)?;
        ensure_bpffs(dir)?;
        if prune(&sessions_map(dir)?, &state)?.is_empty() {
            // Nobody is using what is pinned: left by a crash, replace it.
            remove_all(dir);
            pin_dir(dir)?;
        }
        let sessions = sessions_map(dir)?;
        let nr_cpus = libbpf_rs::num_possible_cpus().context("counting possible CPUs")? as u32;
        let flags = libbpf_rs::libbpf_sys::BPF_F_PRESERVE_ELEMS;
        let array = pinned(
            dir,
            "events",
            MapType::PerfEventArray,
            4,
            4,
            abi::STAT_MAX_SLOTS * nr_cpus,
            flags,
        )?;
        let attrs = pinned(
            dir,
            "attrs",
            MapType::Hash,
            ATTR_KEY as u32,
            4,
            abi::STAT_MAX_SLOTS,
            0,
        )?;
        let (events, created) = claim_slots(&array, &attrs, specs, nr_cpus, cpus)?;
        let mask = events.iter().fold(0u64, |m, e| match e {
            Shared::Slot(s) => m | 1 << s,
            Shared::NotSupported => m,
        });
        let id = new_session_id(&sessions)?;
        let alive = crate::fsafe::private_file(&state, &alive_name(id))
            .context("creating the session's liveness file")?;
        // SAFETY: flock on a valid fd we own; nobody else knows this id yet.
        if unsafe { libc::flock(alive.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking the liveness file");
        }
        let mut value = [0u8; 16];
        value[8..].copy_from_slice(&mask.to_ne_bytes());
        sessions
            .update(&id.to_ne_bytes(), &value, MapFlags::ANY)
            .context("registering the session")?;
        Ok(Session {
            dir: dir.to_path_buf(),
            state,
            lock_name,
            id,
            _alive: alive,
            array,
            events,
            nr_cpus,
            created,
        })
    }
}

/// Finds each event's shared slot, opening counters for attributes no live
/// session counts yet; returns the slots and how many this session opened.
fn claim_slots(
    array: &MapHandle,
    attrs: &MapHandle,
    specs: &[EventSpec],
    nr_cpus: u32,
    cpus: &[u32],
) -> Result<(Vec<Shared>, usize)> {
    let slot_of = |v: Vec<u8>| u32::from_ne_bytes(v[..4].try_into().unwrap_or_default());
    let mut events = Vec::with_capacity(specs.len());
    let mut created = 0;
    for spec in specs {
        let key = attr_key(spec);
        if let Some(v) = attrs.lookup(&key, MapFlags::ANY)? {
            events.push(Shared::Slot(slot_of(v)));
            continue;
        }
        let used: Vec<u32> = attrs
            .keys()
            .filter_map(|k| attrs.lookup(&k, MapFlags::ANY).ok().flatten())
            .map(slot_of)
            .collect();
        let slot = (0..abi::STAT_MAX_SLOTS)
            .find(|s| !used.contains(s))
            .context("all shared counter slots are in use")?;
        if open_slot(array, spec, slot, nr_cpus, cpus)? {
            attrs.update(&key, &slot.to_ne_bytes(), MapFlags::ANY)?;
            created += 1;
            events.push(Shared::Slot(slot));
        } else {
            events.push(Shared::NotSupported);
        }
    }
    Ok((events, created))
}

/// Opens `spec` on every CPU into `slot`; false when the machine cannot
/// count it at all.
fn open_slot(
    array: &MapHandle,
    spec: &EventSpec,
    slot: u32,
    nr_cpus: u32,
    cpus: &[u32],
) -> Result<bool> {
    for &cpu in cpus {
        let fd = match spec.open_on_cpu(cpu) {
            Ok(fd) => fd,
            Err(e) if crate::events::not_supported(&e) => {
                close_slot(array, slot, nr_cpus);
                return Ok(false);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                bail!("opening {spec} on CPU {cpu}: not permitted (need root or CAP_PERFMON)")
            }
            Err(e) => bail!("opening {spec} on CPU {cpu}: {e}"),
        };
        // The array keeps the event (BPF_F_PRESERVE_ELEMS); our fd may close.
        let index = slot * nr_cpus + cpu;
        array
            .update(
                &index.to_ne_bytes(),
                &(fd.as_raw_fd() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .with_context(|| format!("storing the {spec} counter of CPU {cpu}"))?;
    }
    Ok(true)
}

/// Closes a slot's events (deleting an entry releases its perf event).
fn close_slot(array: &MapHandle, slot: u32, nr_cpus: u32) {
    for cpu in 0..nr_cpus {
        let _ = array.delete(&(slot * nr_cpus + cpu).to_ne_bytes());
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Ok(_lock) = Lock::take(&self.state, &self.lock_name) else {
            return;
        };
        unlink_in(&self.state, &alive_name(self.id));
        let Ok(sessions) = MapHandle::from_pinned_path(self.dir.join("sessions")) else {
            return;
        };
        let _ = sessions.delete(&self.id.to_ne_bytes());
        let live = prune(&sessions, &self.state).unwrap_or_default();
        if live.is_empty() {
            remove_all(&self.dir);
            return;
        }
        // Close the slots no remaining session counts.
        let in_use = live.iter().fold(0u64, |m, s| m | s);
        let Ok(attrs) = MapHandle::from_pinned_path(self.dir.join("attrs")) else {
            return;
        };
        let keys: Vec<Vec<u8>> = attrs.keys().collect();
        for k in keys {
            let Ok(Some(v)) = attrs.lookup(&k, MapFlags::ANY) else {
                continue;
            };
            let slot = u32::from_ne_bytes(v[..4].try_into().unwrap_or_default());
            if in_use & (1 << slot) == 0 {
                close_slot(&self.array, slot, self.nr_cpus);
                let _ = attrs.delete(&k);
            }
        }
    }
}
