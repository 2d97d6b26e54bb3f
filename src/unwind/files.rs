//! Each mapped file's unwind table: read from the descriptor opened as the
//! process maps it (crate::process::mapped), built once per dev:inode with
//! gimli (table.rs), and loaded into the BPF side's maps (see
//! bpf/unwind.h).

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use libbpf_rs::MapCore;

use super::procmaps::Slot;
use super::{table, Unwinder, VDSO_KEY};
use crate::bpf::abi;
use crate::bpf::maps;
use crate::bpf::stacks::{FileKey, BUILD_ID_SIZE};
use crate::mmap::Mmap;
use crate::process::buildid::{build_id_only, padded};
use crate::process::mapped::{FileId, MappedFile, MappedFiles};

/// Largest file bprof reads to build a table.
const MAX_FILE: u64 = 2 << 30;

/// Whether `fd` is a file on overlayfs.
fn on_overlayfs(fd: std::os::fd::BorrowedFd) -> bool {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    fs_type(fd) == Some(OVERLAYFS_SUPER_MAGIC)
}

/// Whether `fd` is a file on FUSE: its server, any user's program, says
/// what its inode numbers, sizes and times are, so they identify nothing
/// (its tables are not kept, see cache.rs).
fn on_fuse(fd: std::os::fd::BorrowedFd) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    fs_type(fd) == Some(FUSE_SUPER_MAGIC)
}

/// The file system type (`statfs.f_type`) of `fd`'s file.
fn fs_type(fd: std::os::fd::BorrowedFd) -> Option<i64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes a statfs into st on success; read only then.
    let ok = unsafe { libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(&fd), st.as_mut_ptr()) } == 0;
    // SAFETY: initialized by the successful call.
    ok.then(|| unsafe { st.assume_init() }.f_type)
}

impl Unwinder {
    /// Builds and loads the table of `f` (opened as its process maps it,
    /// see crate::process::mapped) from its kept descriptor, unless its
    /// dev:inode is loaded already; returns its `unwind_files` key.
    // Long on purpose: check, parse and load one file's table: each step's failure is counted under its own reason.
    pub(super) fn add_file(
        &mut self,
        files: &dyn MapCore,
        known: &mut MappedFiles,
        f: &Arc<MappedFile>,
    ) -> Option<(u64, u64)> {
        let key = (u64::from(f.key.dev), f.key.ino);
        if self.files.contains_key(&key) {
            return Some(key);
        }
        if self.failed.contains_key(&key) {
            return None;
        }
        let Some(file) = f.file() else {
            self.unreachable += 1;
            return None;
        };
        let Ok(meta) = file.metadata() else {
            return None;
        };
        let fail = |s: &mut Self, why: String| {
            s.failed.insert(key, (f.path.clone(), why));
        };
        // Once per file, as its table is built (see alias_kernel_names).
        if on_overlayfs(file.as_fd()) {
            self.overlay.insert(key);
        }
        let t0 = Instant::now();
        if meta.len() > MAX_FILE {
            fail(self, format!("{} bytes, over the size limit", meta.len()));
            return None;
        }
        // SAFETY: a read-only private mapping of a regular file of at most
        // MAX_FILE bytes; a file truncated meanwhile could fault, as for any
        // mmap reader (perf, blazesym do the same).
        let data = match unsafe { Mmap::read_only(file.as_fd(), meta.len() as usize) } {
            Ok(d) => d,
            Err(e) => {
                fail(self, e.to_string());
                return None;
            }
        };
        self.bytes_read += data.len() as u64;
        let room = self.tables.room();
        let id = FileId::of(&meta);
        let limit = room.max(1);
        let mut cache = self.cache.as_mut().filter(|_| !on_fuse(file.as_fd()));
        let kept = cache
            .as_mut()
            .and_then(|c| c.get(&id, limit, || build_id_only(data.bytes())));
        let built = match kept {
            Some(t) => Ok(t),
            None => {
                self.parsed += 1;
                let built = table::build(data.bytes(), limit);
                if let (Ok(t), Some(c)) = (&built, cache) {
                    c.put(&id, t);
                }
                built
            }
        };
        let (rows, build_id) = match built {
            Ok(t) => {
                self.unsupported += t.unsupported;
                (t.rows, t.build_id)
            }
            Err(table::NoTable::TooLarge(_)) => {
                self.full += 1;
                (Vec::new(), build_id_only(data.bytes()))
            }
            Err(table::NoTable::NotElf(_)) => {
                fail(self, "not an x86-64 ELF file".into());
                return None;
            }
            Err(_) => (Vec::new(), build_id_only(data.bytes())),
        };
        // The kernel's records pad a build ID to 20 bytes; a longer one
        // is not one frames can carry.
        let build_id = build_id.filter(|b| !b.is_empty() && b.len() <= BUILD_ID_SIZE);
        known.note_build_id(f, build_id.as_deref().map(padded));
        if rows.is_empty() {
            self.no_table += 1;
        }
        if let Err(e) = self.load(files, key, &rows, build_id.as_deref()) {
            fail(self, e);
            return None;
        }
        self.files.insert(key, !rows.is_empty());
        self.build_time += t0.elapsed();
        Some(key)
    }

    /// Gives the names the BPF side learned `slot`'s mapping of `pid` by (the
    /// kernel's inode of the file) the `unwind_files` entry of the same file
    /// as user space keyed it, so that mappings learned from the kernel find
    /// its table: on overlayfs the kernel names the layer's inode, /proc and
    /// fstat the overlay's, and a new process's first ms would otherwise
    /// walk without one. `known` learns the names too, so frames recorded
    /// under them before the table was loaded find `file`.
    pub(super) fn alias_kernel_names(
        &mut self,
        (files, maps): (&dyn MapCore, &dyn MapCore),
        pid: u32,
        slot: &Slot,
        (known, file): (&mut MappedFiles, &Arc<MappedFile>),
    ) {
        let user = slot.file;
        // Only an overlay's file (checked first: the chunk's lookup is a
        // syscall per mapping record) under a layer's name: overlayfs shows
        // the layer's inode number under its own device. (A process that
        // remaps the range before its record is read could otherwise lend
        // one file's table to another.)
        if !self.overlay.contains(&user) {
            return;
        }
        let k = |(dev, ino): (u64, u64)| abi::unwind_file_key { dev, ino };
        for kernel in self.procmaps.kernel_names(maps, pid, slot) {
            if kernel.1 != user.1
                || kernel.0 == user.0
                || self.files.contains_key(&kernel)
                || self.aliased.contains(&kernel)
            {
                continue;
            }
            known.alias(
                FileKey {
                    dev: kernel.0 as u32,
                    ino: kernel.1,
                },
                file,
            );
            let Ok(Some(entry)) =
                files.lookup(abi::plain_bytes(&k(user)), libbpf_rs::MapFlags::ANY)
            else {
                return;
            };
            if files
                .update(
                    abi::plain_bytes(&k(kernel)),
                    &entry,
                    libbpf_rs::MapFlags::ANY,
                )
                .is_ok()
            {
                self.aliased.insert(kernel);
                self.files_changed = true;
            }
        }
    }

    /// Writes a file's rows, page index and `unwind_files` entry (with its
    /// build ID, when it has one, frames there are (build ID, offset);
    /// else with its key, frames there are (key, offset)).
    fn load(
        &mut self,
        files: &dyn MapCore,
        key: (u64, u64),
        rows: &[table::Row],
        build_id: Option<&[u8]>,
    ) -> Result<(), String> {
        let mut value = abi::unwind_file {
            nr_rows: rows.len() as u32,
            table: self.loaded,
            ..Default::default()
        };
        let Some(abi_rows) = self.name_rules(rows) else {
            return Err(format!(
                "unwind_rules: more than {} distinct rules",
                abi::UNWIND_MAX_RULES
            ));
        };
        if !rows.is_empty() {
            // The page index in the same segment, before the rows, when
            // there is room for both; else the whole table is searched.
            let (base, pages) = table::page_index(rows);
            let (n, with_index) = (abi_rows.len() as u64, pages.len() as u64);
            let seg = match self.tables.place(n + with_index)? {
                Some(seg) => Some((seg, true)),
                None => self.tables.place(n)?.map(|seg| (seg, false)),
            };
            let Some((seg, indexed)) = seg else {
                return Err("the tables' budget (--unwind-rows) is spent".into());
            };
            value.seg = seg;
            if indexed {
                value.first_page = self.tables.append(seg, &pages)?;
                value.nr_pages = pages.len() as u32;
                value.page_base = base;
                self.pages += with_index;
            }
            value.first_row = self.tables.append(seg, &abi_rows)?;
            self.rows += n;
        }
        self.loaded += 1;
        match build_id {
            Some(id) => {
                let n = id.len().min(value.build_id.len());
                value.flags = abi::UNWIND_FILE_BUILD_ID;
                value.build_id[..n].copy_from_slice(&id[..n]);
            }
            // Frames there carry the file's key: named from the file kept
            // open, whether or not its process still lives.
            None if key != VDSO_KEY => {
                value.flags = abi::UNWIND_FILE_KEY;
                value.build_id = FileKey {
                    dev: key.0 as u32,
                    ino: key.1,
                }
                .to_record();
            }
            None => {}
        }
        let k = abi::unwind_file_key {
            dev: key.0,
            ino: key.1,
        };
        maps::put(files, &k, &value).map_err(|e| format!("unwind_files: {e}"))?;
        self.files_changed = true;
        self.files.insert(key, !rows.is_empty());
        Ok(())
    }

    /// Loads the table of bprof's own vDSO, the one every 64-bit process
    /// of this kernel maps, under [`VDSO_KEY`] with its build ID: its
    /// frames are (build ID, offset), named from bprof's own image.
    pub fn load_vdso(&mut self, files: &dyn MapCore) {
        let Some(own) = crate::process::vdso::own() else {
            return;
        };
        let room = self.tables.room();
        let Ok(t) = table::build(&own.image, room) else {
            return;
        };
        // Its frames as (build ID, offset), named from bprof's own image.
        if self
            .load(files, VDSO_KEY, &t.rows, t.build_id.as_deref())
            .is_ok()
        {
            self.vdso_len = Some(own.image.len() as u64);
        }
    }

    /// The rows as the BPF side reads them, each naming its rule in
    /// `unwind_rules`; rules not stored yet are appended. `None` when
    /// `unwind_rules` cannot hold them.
    fn name_rules(&mut self, rows: &[table::Row]) -> Option<Vec<abi::unwind_row>> {
        let mut new = Vec::new();
        let mut next = self.rules.used();
        let mut out = Vec::with_capacity(rows.len());
        // A few hundred rules name tens of thousands of rows: a small
        // direct-mapped memo spares most rows the map's SipHash. A crafted
        // file can only make it miss.
        let mut memo = [None::<((i32, i16, u8, u8), u32)>; 256];
        for r in rows {
            let key = (r.cfa_off, r.rbp_off, r.cfa_type, r.rbp_type);
            let packed = u64::from(r.cfa_off as u32)
                | u64::from(r.rbp_off as u16) << 32
                | u64::from(r.cfa_type) << 48
                | u64::from(r.rbp_type) << 56;
            let slot = &mut memo[(packed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize];
            let id = match *slot {
                Some((k, id)) if k == key => id,
                _ => {
                    let id = *self.rule_ids.entry(key).or_insert_with(|| {
                        new.push(r.rule());
                        next += 1;
                        next - 1
                    });
                    *slot = Some((key, id));
                    id
                }
            };
            out.push(abi::unwind_row { pc: r.pc, rule: id });
        }
        if self.rules.append(&new).is_err() {
            // Forget the ids handed out for rules that were not stored.
            self.rule_ids.retain(|_, id| *id < self.rules.used());
            return None;
        }
        Some(out)
    }
}
