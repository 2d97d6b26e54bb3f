//! Unwind tables kept per boot.
//!
//! A file's table is built by parsing its whole `.eh_frame`: for python3's
//! files, most of a short profile's start (BENCHMARKS.md), and the same
//! libraries are mapped by profile after profile. Each table built (its
//! rows, build ID and count of unsupported rules) is kept in root's state
//! directory under the file's identity (device, inode, size, mtime and
//! ctime: any write changes one), and a later profile of the same file
//! reads it instead, after checking the build ID the file itself names.
//! The directory is this boot's (inode numbers mean nothing after a
//! reboot); earlier boots' are removed.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::bpf::shared_counters::STATE_DIR;
use crate::symbolize::elfcheck::FileId;
use crate::unwind::table::{Row, Table};

/// A kept table's first bytes: the format.
const MAGIC: &[u8; 8] = b"bprofut1";
/// What this cache may hold in all, in bytes (it lives in /run, memory),
/// the least recently used tables going first when it is full, and at most this share of its file system (1/SHARE), whose free space
/// must stay above that share too, or above FREE_FLOOR where that is less
/// (where /run is a big disk, 5% of it is more than anyone keeps free).
const MAX_TOTAL: u64 = 128 << 20;
const SHARE: u64 = 20;
const FREE_FLOOR: u64 = 1 << 30;
/// Bytes of one row in a kept table.
const ROW_BYTES: usize = 12;
/// The directory's name in [`STATE_DIR`], before the boot ID.
const DIR_PREFIX: &str = "unwind-";

/// This boot's kept tables.
pub(crate) struct TableCache {
    dir: PathBuf,
    /// `dir`, checked by private_dir when the cache was opened.
    dir_fd: File,
    /// Bytes in the directory, counted at the first [`TableCache::put`].
    used: Option<u64>,
    /// What the directory may hold: [`MAX_TOTAL`], less in tests.
    cap: u64,
    /// Tables read from the cache.
    pub(crate) hits: usize,
    /// Whether the directory's file system has room (see [`room_on_fs`]);
    /// a field so that tests do not depend on how full the test machine's disk is.
    room: fn(&File, u64, u64) -> bool,
}

impl TableCache {
    /// This boot's cache; `None` when root's state directory is unusable.
    pub(crate) fn open() -> Option<TableCache> {
        Self::open_in(Path::new(STATE_DIR), &crate::fsafe::boot_id()?, room_on_fs)
    }

    fn open_in(state: &Path, boot: &str, room: fn(&File, u64, u64) -> bool) -> Option<TableCache> {
        crate::fsafe::private_dir(state).ok()?;
        let name = format!("{DIR_PREFIX}{boot}");
        let dir = state.join(&name);
        let dir_fd = match crate::fsafe::private_dir(&dir) {
            Ok(fd) => fd,
            Err(_) => return None,
        };
        crate::fsafe::remove_other_boots(state, DIR_PREFIX, &name);
        Some(TableCache {
            dir,
            dir_fd,
            used: None,
            cap: MAX_TOTAL,
            hits: 0,
            room,
        })
    }

    /// The kept table of the file `id` names, if its build ID is still the
    /// one `build_id` gives (read from the file only on a hit) and it has at
    /// most `limit` rows.
    pub(crate) fn get(
        &mut self,
        id: &FileId,
        limit: usize,
        build_id: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Option<Table> {
        let mut f = crate::fsafe::private_file_existing(&self.dir_fd, &id.key())?;
        let len = f.metadata().ok()?.len();
        if len > MAX_TOTAL {
            return None;
        }
        let mut bytes = Vec::with_capacity(len as usize);
        f.read_to_end(&mut bytes).ok()?;
        let table = decode(&bytes, &id.key(), limit)?;
        if table.build_id != build_id() {
            return None;
        }
        // Used now: the last to go when the cache is full.
        let _ = f.set_modified(std::time::SystemTime::now());
        self.hits += 1;
        Some(table)
    }

    /// Keeps `table` for the file `id` names, if the cache has room: any
    /// user's files can be profiled, and /run is memory other services
    /// need.
    pub(crate) fn put(&mut self, id: &FileId, table: &Table) {
        let bytes = encode(table, &id.key());
        let size = bytes.len() as u64;
        if size > self.cap / 4 {
            return;
        }
        let mut used = *self.used.get_or_insert_with(|| dir_bytes(&self.dir));
        if used.saturating_add(size) > self.cap {
            // Full: the least recently used go, down to 3/4 so that the
            // next tables do not each cost a scan.
            used = evict_oldest(&self.dir, (self.cap / 4 * 3).saturating_sub(size));
        }
        let after = used.saturating_add(size);
        if after > self.cap || !(self.room)(&self.dir_fd, after, size) {
            self.used = Some(used);
            return;
        }
        if crate::fsafe::replace_private_file(&self.dir_fd, &self.dir, &id.key(), &bytes).is_ok() {
            self.used = Some(after);
        }
    }
}

/// Whether the cache's file system can take `more` bytes with the cache at
/// `total`: the cache within 1/SHARE of its size, and as much (at most
/// FREE_FLOOR) left free.
fn room_on_fs(dir: &File, total: u64, more: u64) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs writes a statvfs into st on success; read only then.
    if unsafe { libc::fstatvfs(std::os::fd::AsRawFd::as_raw_fd(dir), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: initialized by the successful call.
    let st = unsafe { st.assume_init() };
    fits(
        st.f_blocks.saturating_mul(st.f_frsize),
        st.f_bavail.saturating_mul(st.f_frsize),
        total,
        more,
    )
}

/// Whether a file system of `size` bytes with `free` left can take `more`
/// with the cache at `total`: see [`room_on_fs`].
fn fits(size: u64, free: u64, total: u64, more: u64) -> bool {
    total <= size / SHARE && free.saturating_sub(more) >= (size / SHARE).min(FREE_FLOOR)
}

/// Removes the least recently used (oldest mtime: a hit renews it) tables
/// in `dir` until at most `keep` bytes are left; the bytes left.
fn evict_oldest(dir: &Path, keep: u64) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return u64::MAX;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut left: u64 = files.iter().map(|f| f.1).sum();
    for (_, len, path) in files {
        if left <= keep {
            break;
        }
        // The directory is root's own (private_dir): no one swaps a name.
        if std::fs::remove_file(&path).is_ok() {
            left -= len;
        }
    }
    left
}

/// The bytes of the files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(u64::MAX)
}

/// MAGIC, the key's length and bytes (the file it was built from), the
/// build ID's length (0: none) and bytes, the unsupported rows, the rows'
/// count and the rows (pc, cfa_off, rbp_off, cfa_type, rbp_type), all
/// little-endian.
fn encode(t: &Table, key: &str) -> Vec<u8> {
    let id = t.build_id.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(64 + key.len() + t.rows.len() * ROW_BYTES);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(key.len() as u32).to_le_bytes());
    b.extend_from_slice(key.as_bytes());
    b.extend_from_slice(&(id.len() as u32).to_le_bytes());
    b.extend_from_slice(id);
    b.extend_from_slice(&(t.unsupported as u64).to_le_bytes());
    b.extend_from_slice(&(t.rows.len() as u64).to_le_bytes());
    for r in &t.rows {
        b.extend_from_slice(&r.pc.to_le_bytes());
        b.extend_from_slice(&r.cfa_off.to_le_bytes());
        b.extend_from_slice(&r.rbp_off.to_le_bytes());
        b.push(r.cfa_type);
        b.push(r.rbp_type);
    }
    b
}

/// A kept table, if `b` is one whole, for `key`, of at most `limit` rows
/// sorted by pc (what the walker's search needs).
fn decode(b: &[u8], key: &str, limit: usize) -> Option<Table> {
    let mut r = Reader(b);
    (r.take(MAGIC.len())? == MAGIC).then_some(())?;
    let key_len = r.u32()? as usize;
    (r.take(key_len)? == key.as_bytes()).then_some(())?;
    let id_len = r.u32()? as usize;
    let id = r.take(id_len)?.to_vec();
    let unsupported = usize::try_from(r.u64()?).ok()?;
    let n = usize::try_from(r.u64()?).ok()?;
    if n > limit || r.0.len() != n.checked_mul(ROW_BYTES)? {
        return None;
    }
    let rows: Vec<Row> =
        r.0.chunks_exact(ROW_BYTES)
            .map(|c| Row {
                pc: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                cfa_off: i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                rbp_off: i16::from_le_bytes([c[8], c[9]]),
                cfa_type: c[10],
                rbp_type: c[11],
            })
            .collect();
    if !rows.windows(2).all(|w| w[0].pc < w[1].pc) {
        return None;
    }
    Some(Table {
        rows,
        build_id: (!id.is_empty()).then_some(id),
        unsupported,
    })
}

/// Reads a kept table's fields in order.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("bprof-utc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
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

    /// A file system with room, whatever the test machine's disk holds.
    fn roomy(_: &File, _: u64, _: u64) -> bool {
        true
    }

    /// This test binary's own table, built as a profile would.
    fn own_table() -> (FileId, Vec<u8>, Table) {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let t = crate::unwind::table::build(&data, 1 << 24).unwrap();
        (FileId::of(&std::fs::metadata(&exe).unwrap()), data, t)
    }

    #[test]
    fn a_kept_table_is_read_back_whole_for_the_same_file_only() {
        let d = scratch("roundtrip");
        let (id, data, t) = own_table();
        assert!(t.rows.len() > 100);
        let bid = || crate::process::buildid::build_id_only(&data);
        let mut c = TableCache::open_in(&d, "boot-a", roomy).unwrap();
        assert!(c.get(&id, 1 << 24, bid).is_none());
        c.put(&id, &t);
        let back = c.get(&id, 1 << 24, bid).expect("kept");
        assert_eq!(back.rows, t.rows);
        assert_eq!(back.build_id, t.build_id);
        assert_eq!(back.unsupported, t.unsupported);
        assert_eq!(c.hits, 1);
        // Another build ID in the file now: not this table.
        assert!(c.get(&id, 1 << 24, || Some(vec![1; 20])).is_none());
        // More rows than the map has room for: built (and refused) anew.
        assert!(c.get(&id, t.rows.len() - 1, bid).is_none());
        // Another boot's directory goes; its tables are not read.
        let mut c2 = TableCache::open_in(&d, "boot-b", roomy).unwrap();
        assert!(!d.join("unwind-boot-a").exists());
        assert!(c2.get(&id, 1 << 24, bid).is_none());
    }

    #[test]
    fn a_damaged_kept_table_is_rebuilt_not_trusted() {
        let d = scratch("damaged");
        let (id, data, t) = own_table();
        let bid = || crate::process::buildid::build_id_only(&data);
        let mut c = TableCache::open_in(&d, "boot", roomy).unwrap();
        c.put(&id, &t);
        let path = d.join("unwind-boot").join(id.key());
        let good = std::fs::read(&path).unwrap();
        // Cut short, one byte longer, rows out of order, another file's key.
        let mut swapped = good.clone();
        let rows_at = good.len() - t.rows.len() * ROW_BYTES;
        swapped[rows_at..rows_at + ROW_BYTES].copy_from_slice(&good[good.len() - ROW_BYTES..]);
        let mut other_key = good.clone();
        other_key[12] ^= 1;
        for bad in [
            good[..good.len() - 1].to_vec(),
            [good.as_slice(), &[0]].concat(),
            swapped,
            other_key,
            Vec::new(),
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert!(c.get(&id, 1 << 24, bid).is_none());
        }
        // A symlink where a table was: not followed.
        std::fs::remove_file(&path).unwrap();
        let elsewhere = d.join("elsewhere");
        std::fs::write(&elsewhere, &good).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(c.get(&id, 1 << 24, bid).is_none());
    }

    #[test]
    fn a_full_cache_drops_the_least_recently_used_tables() {
        let d = scratch("lru");
        let (id, data, t) = own_table();
        let bid = || crate::process::buildid::build_id_only(&data);
        let one = encode(&t, &id.key()).len() as u64;
        let mut c = TableCache::open_in(&d, "boot", roomy).unwrap();
        // Room for four tables of this size, three after an eviction.
        c.cap = one * 4 + 8;
        let ids: Vec<FileId> = (0..4)
            .map(|i| {
                let f = d.join(format!("file{i}"));
                std::fs::write(&f, [i]).unwrap();
                FileId::of(&std::fs::metadata(&f).unwrap())
            })
            .collect();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for (i, f) in ids.iter().enumerate() {
            c.put(f, &t);
            let path = d.join("unwind-boot").join(f.key());
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(past + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        // The oldest is used again: it stays, the next oldest goes.
        assert!(c.get(&ids[0], 1 << 24, bid).is_some());
        c.put(&id, &t);
        let kept = |f: &FileId| d.join("unwind-boot").join(f.key()).exists();
        assert!(kept(&id), "the new table is kept");
        assert!(kept(&ids[0]), "a table just used is kept");
        assert!(!kept(&ids[1]) && !kept(&ids[2]), "the two oldest go");
        assert!(kept(&ids[3]));
        assert!(dir_bytes(&d.join("unwind-boot")) <= c.cap);
    }

    #[test]
    fn a_full_file_system_keeps_nothing() {
        let d = scratch("full");
        let (id, data, t) = own_table();
        let bid = || crate::process::buildid::build_id_only(&data);
        let mut c = TableCache::open_in(&d, "boot", |_, _, _| false).unwrap();
        c.put(&id, &t);
        assert!(!d.join("unwind-boot").join(id.key()).exists());
        assert!(c.get(&id, 1 << 24, bid).is_none());
        // The rule itself: the cache within 1/20 of the file system, and
        // 1/20 of it (at most 1 GiB) still free after the write.
        assert!(fits(2000, 500, 100, 100));
        assert!(!fits(2000, 500, 101, 1));
        assert!(!fits(2000, 199, 10, 100));
        assert!(fits(2000, 200, 10, 100));
        let disk = 252 << 30;
        assert!(fits(disk, 11 << 30, 1 << 20, 1 << 20));
        assert!(!fits(disk, (1 << 30) + 5, 1 << 20, 10));
    }
}
