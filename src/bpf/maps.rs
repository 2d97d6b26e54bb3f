//! Maps: the layouts of counts, stacks and loss counters as they come out of
//! the kernel, the count maps' creation and the batch reads (when to read
//! and what it means, while recording, is `collect`).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::bpf::abi::{self, read_plain};
use crate::bpf::skel::profile::types;
use crate::bpf::stacks::{Stats, UserFrame};

/// When a process in `target_tgids` (shared by the profile and stat
/// objects) starts to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetFrom {
    /// Now (`-p`).
    Now,
    /// Its next exec (`-- COMMAND`, forked and held before exec), as perf's
    /// enable_on_exec: the fork's own pre-exec work is not the command's.
    Exec,
}

/// Writes `key` → `value` (plain ABI types), replacing what was there.
pub(crate) fn put<K: abi::Plain, V: abi::Plain>(
    map: &dyn MapCore,
    key: &K,
    value: &V,
) -> libbpf_rs::Result<()> {
    map.update(
        abi::plain_bytes(key),
        abi::plain_bytes(value),
        MapFlags::ANY,
    )
}

/// Deletes `key` (a plain ABI type); a missing key is not an error worth
/// reporting to callers that only forget.
pub(crate) fn remove<K: abi::Plain>(map: &dyn MapCore, key: &K) {
    let _ = map.delete(abi::plain_bytes(key));
}

/// The value of the u32-keyed `map` at `key`, as bytes.
pub(crate) fn get_by_u32(map: &dyn MapCore, key: u32) -> libbpf_rs::Result<Option<Vec<u8>>> {
    map.lookup(&key.to_ne_bytes(), MapFlags::ANY)
}

/// "Is this process one the profile is about?" for the side band, whose
/// records come from every process on the machine: yes for all when the
/// profile has no targets, else what `target_tgids` says (it holds every
/// target, exited ones too, and a child from its fork on, before it maps
/// anything). One lookup per process per drain: a machine that starts a
/// thousand processes a second costs a syscall each, not one per mapping.
pub(crate) struct TargetCheck<'a> {
    map: Option<&'a dyn MapCore>,
    seen: std::collections::HashMap<u32, bool>,
}

impl<'a> TargetCheck<'a> {
    pub(crate) fn new(map: Option<&'a dyn MapCore>) -> Self {
        TargetCheck {
            map,
            seen: std::collections::HashMap::new(),
        }
    }

    pub(crate) fn wants(&mut self, pid: u32) -> bool {
        match self.map {
            None => true,
            Some(m) => *self.seen.entry(pid).or_insert_with(|| holds_u32(m, pid)),
        }
    }
}

/// Whether the u32-keyed `map` holds `key` (a failed lookup counts as no).
pub(crate) fn holds_u32(map: &dyn MapCore, key: u32) -> bool {
    get_by_u32(map, key).ok().flatten().is_some()
}

/// Puts the map `inner` in slot 0 of the one-slot map-in-map `outer`.
pub(crate) fn install_inner(outer: &dyn MapCore, inner: &MapHandle) -> Result<()> {
    let fd = inner.as_fd().as_raw_fd() as u32;
    outer
        .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
        .context("installing a fresh count map")
}

/// Attaches the pair every object with `-- COMMAND` targets carries
/// (bpf/targets.bpf.h): the fork follower (tp_btf/sched_process_fork) and
/// the command's arming at its exec (tp_btf/task_rename).
pub fn attach_followers(
    fork: &libbpf_rs::ProgramMut<'_>,
    arm: &libbpf_rs::ProgramMut<'_>,
) -> Result<[libbpf_rs::Link; 2]> {
    Ok([
        fork.attach()
            .context("attaching tp_btf/sched_process_fork")?,
        arm.attach().context("attaching tp_btf/task_rename")?,
    ])
}

/// Sizes the `target_tgids` and `target_tids` maps (bpf/targets.bpf.h) for
/// every -p / -t id given: at least their defaults of 65536 and 4096, but
/// only the processes given when no forked child is followed (nothing
/// else is ever added, and 65536 entries or buckets would be allocated and
/// zeroed at every start).
pub fn size_targets(
    tgids: &mut libbpf_rs::OpenMapMut<'_>,
    tids: &mut libbpf_rs::OpenMapMut<'_>,
    nr_pids: usize,
    nr_tids: usize,
    follows: bool,
) -> Result<()> {
    let fit = |n: usize, default: u32| u32::try_from(n).unwrap_or(u32::MAX).max(default);
    tgids.set_max_entries(fit(nr_pids, if follows { 65536 } else { 1 }))?;
    tids.set_max_entries(fit(nr_tids, 4096))?;
    Ok(())
}

/// Adds a process to a `target_tgids` map.
pub fn add_target_tgid(map: &dyn MapCore, tgid: u32, from: TargetFrom) -> Result<()> {
    let state = match from {
        TargetFrom::Now => types::target_state::TARGET_ACTIVE,
        TargetFrom::Exec => types::target_state::TARGET_AT_EXEC,
    };
    map.update(&tgid.to_ne_bytes(), &state.0.to_ne_bytes(), MapFlags::ANY)
        .context("adding a target process")
}

/// Sums the per-CPU `profile_stats` counters.
pub fn read_stats(map: &dyn MapCore) -> Result<Stats> {
    let per_cpu = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .context("reading profile_stats")?
        .unwrap_or_default();
    let mut s = Stats::default();
    for bytes in per_cpu {
        let Some(c) = read_plain::<types::profile_stats>(&bytes) else {
            continue;
        };
        s.samples += c.samples;
        s.counted += c.counted;
        s.idle += c.idle;
        s.not_target += c.not_target;
        s.filtered += c.filtered;
        s.count_map_full += c.count_map_full;
        s.kern_stack_lost += c.kern_stack_lost;
        s.user_stack_lost += c.user_stack_lost;
        s.no_stack += c.no_stack;
        s.user_stack_cached += c.user_stack_cached;
        s.switches_out += c.switches_out;
        s.blocks_counted += c.blocks_counted;
        s.blocks_outside += c.blocks_outside;
        s.blocks_untracked += c.blocks_untracked;
        s.counted_weight += c.counted_weight;
        s.count_keys += c.count_keys;
        s.kern_stacks_stored += c.kern_stacks_stored;
        s.user_stacks_stored += c.user_stacks_stored;
        s.stack_collisions += c.stack_collisions;
        for (a, b) in s.unwind_end.iter_mut().zip(c.unwind_end) {
            *a += b;
        }
        s.unwind_frames += c.unwind_frames;
        s.unwind_fp_frames += c.unwind_fp_frames;
        s.unwind_task_regs += c.unwind_task_regs;
        s.unwind_find_vma += c.unwind_find_vma;
        s.unwind_learned += c.unwind_learned;
        s.unwind_learned_early += c.unwind_learned_early;
        s.unwind_reads += c.unwind_reads;
        s.unwind_memo_walks += c.unwind_memo_walks;
        s.unwind_elided += c.unwind_elided;
        s.py.add(&c.py);
    }
    Ok(s)
}

/// `struct sample_key` (profile.h): the count map's key, as generated.
pub type SampleKey = abi::sample_key;

/// Parses `struct kern_stack` (profile.h): IPs, leaf first, zero-padded.
pub fn parse_kernel_stack(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .take_while(|&ip| ip != 0)
        .collect()
}

/// Parses `struct user_stack` (profile.h): `nr` frame records.
pub fn parse_user_stack(bytes: &[u8]) -> Vec<UserFrame> {
    let record = std::mem::size_of::<abi::frame_record>();
    let start = std::mem::offset_of!(abi::user_stack, frames);
    let nr = bytes.get(..4).map_or(0, |b| {
        u32::from_ne_bytes(b.try_into().unwrap_or_default()) as usize
    });
    // nr is the kernel's, but never trusted past what the bytes hold.
    let fit = bytes.len().saturating_sub(start) / record;
    let mut frames = Vec::with_capacity(nr.min(fit));
    // A deep walk's outermost frames: a ring, from this index of it.
    let mut ring: Option<(usize, usize)> = None;
    for (i, rec) in bytes
        .get(start..)
        .unwrap_or_default()
        .chunks_exact(record)
        .take(nr)
        .enumerate()
    {
        let Some(f) = read_plain::<abi::frame_record>(rec) else {
            break;
        };
        // An unwound stack's leaf is in its count key (leaf_frame).
        if f.status == abi::FRAME_IN_KEY && i == 0 {
            continue;
        }
        if f.status == abi::FRAME_ELIDED && ring.is_none() {
            if f.offset > 0 {
                frames.push(UserFrame::Elided(f.offset.min(u32::MAX as u64) as u32));
            }
            let head = u32::from_ne_bytes(f.build_id[..4].try_into().unwrap_or_default());
            ring = Some((frames.len(), head as usize));
            continue;
        }
        match leaf_frame(&f) {
            Some(t @ UserFrame::Truncated(_)) => {
                frames.push(t);
                break;
            }
            Some(frame) => frames.push(frame),
            None => break,
        }
    }
    // The ring in order, innermost first (a truncation mark stays last).
    if let Some((from, head)) = ring {
        let end = match frames.last() {
            Some(UserFrame::Truncated(_)) => frames.len() - 1,
            _ => frames.len(),
        };
        if let Some(outer) = frames.get_mut(from..end) {
            if head < outer.len() {
                outer.rotate_left(head);
            }
        }
    }
    frames
}

/// One frame record as a frame: None for an empty one (or one not known
/// here). Also the count key's `user_leaf`, the leaf of an unwound stack
/// stored without it.
pub fn leaf_frame(f: &abi::frame_record) -> Option<UserFrame> {
    match f.status {
        abi::FRAME_FILE => Some(UserFrame::File {
            build_id: f.build_id,
            offset: f.offset,
        }),
        abi::FRAME_FILE_KEY => Some(UserFrame::FileKey {
            key: crate::bpf::stacks::FileKey::from_record(&f.build_id),
            offset: f.offset,
        }),
        abi::FRAME_IP => Some(UserFrame::Ip(f.offset)),
        abi::FRAME_TRUNCATED => Some(UserFrame::Truncated(f.offset.min(u8::MAX as u64) as u8)),
        _ => None,
    }
}

/// A NUL-terminated `comm` as a string.
pub fn comm_string(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The key of a count map's own total (see `count()` in profile.bpf.c).
pub(crate) fn total_key() -> SampleKey {
    SampleKey {
        kind: crate::bpf::abi::SAMPLE_TOTAL,
        ..Default::default()
    }
}

/// A count map of `size` stack keys, and its total's key, at 0.
pub(crate) fn create_count_map(size: u32) -> Result<MapHandle> {
    // The flags of the template in profile.bpf.c, which an inner map must match.
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: crate::bpf::kfeatures::hash_map_flags(),
        ..Default::default()
    };
    let map = MapHandle::create(
        MapType::Hash,
        Some("bprof_counts"),
        std::mem::size_of::<SampleKey>() as u32,
        8,
        size + 1,
        &opts,
    )
    .context("creating a count map")?;
    put_total(&map).context("creating a count map's total")?;
    Ok(map)
}

/// Runs `prog` (not attached: a raw_tp program) once on `cpu`
/// (`BPF_PROG_TEST_RUN`), with `ctx` as its arguments; its return value.
pub(crate) fn run_on_cpu(
    prog: &libbpf_rs::ProgramMut,
    cpu: u32,
    ctx: Option<&mut [u8]>,
) -> libbpf_rs::Result<u32> {
    let input = libbpf_rs::ProgramInput {
        context_in: ctx,
        cpu,
        flags: libbpf_sys::BPF_F_TEST_RUN_ON_CPU,
        ..Default::default()
    };
    prog.test_run(input).map(|out| out.return_value)
}

/// Empties every online CPU's count cache into the count map in the slot
/// (`flush_counts` in profile.bpf.c), so that an interval's drain holds
/// every sample counted before it. A run moves a few dozen new keys at
/// most: the map takes new elements from a per-CPU cache the kernel
/// refills after the run (an irq_work, which a busy machine may delay),
/// so each CPU's runs go on while keys lack an element, waiting a little
/// when a run moved none.
/// What stays cached (a full map, or a CPU gone offline) is not lost: a
/// later drain or the end takes it (`cached_counts`). Returns the runs.
pub(crate) fn flush_count_caches(prog: &libbpf_rs::ProgramMut) -> Result<u64> {
    // Every slot of a CPU's cache at a few dozen new keys a run, with room
    // to spare, and some waits.
    const MAX_RUNS: u32 = 64;
    const MAX_STALLS: u32 = 8;
    let cpus = crate::events::sampling::online_cpus().context("listing the online CPUs")?;
    let mut runs = 0;
    for cpu in cpus {
        let mut stalls = 0;
        for _ in 0..MAX_RUNS {
            runs += 1;
            let out = match run_on_cpu(prog, cpu, None) {
                Ok(out) => out,
                // Offline since the list was read.
                Err(_) if !cpu_online(cpu) => break,
                Err(e) => {
                    return Err(e).with_context(|| format!("emptying the count cache of CPU {cpu}"))
                }
            };
            let left = out & (abi::FLUSH_NOMEM - 1);
            // Done, or only a full map stops it (drained next).
            if left == 0 || out & abi::FLUSH_NOMEM == 0 {
                break;
            }
            if out >> abi::FLUSH_MOVED_SHIFT == 0 {
                stalls += 1;
                if stalls > MAX_STALLS {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    Ok(runs)
}

fn cpu_online(cpu: u32) -> bool {
    crate::events::sampling::online_cpus().is_ok_and(|c| c.contains(&cpu))
}

/// After the programs are detached: the counts every CPU's count cache
/// still holds (`count_cache` in profile.bpf.c), as count-map entries.
pub(crate) fn cached_counts(map: &dyn MapCore) -> Result<Vec<(SampleKey, u64)>> {
    let slot = std::mem::size_of::<types::count_cache_slot>();
    let mut out = Vec::new();
    for part in 0..abi::COUNT_CACHE_PARTS {
        let per_cpu = map
            .lookup_percpu(&part.to_ne_bytes(), MapFlags::ANY)
            .context("reading the count caches")?
            .unwrap_or_default();
        for value in &per_cpu {
            for s in value.chunks_exact(slot) {
                let Some(s) = read_plain::<types::count_cache_slot>(s) else {
                    continue;
                };
                if s.samples > 0 {
                    out.push((s.key, s.weight));
                }
            }
        }
    }
    Ok(out)
}

/// Inserts an empty count map's total, at 0.
fn put_total(map: &MapHandle) -> libbpf_rs::Result<()> {
    map.update(
        crate::bpf::abi::plain_bytes(&total_key()),
        &0u64.to_ne_bytes(),
        MapFlags::NO_EXIST,
    )
}

/// Makes a drained count map (read with `delete`) ready to be installed
/// again: empty but for its total, at 0. False when something is left in it
/// (it must not be used again: its entries would be counted twice).
pub(crate) fn reset_count_map(map: &MapHandle) -> Result<bool> {
    if map.keys().next().is_some() {
        return Ok(false);
    }
    put_total(map).context("resetting a count map's total")?;
    Ok(true)
}

/// Calls `f` on every entry of a hash map, with the batch syscalls: from
/// the start to the kernel's ENOENT, however short a batch is (the kernel
/// ends a batch at a hash bucket that does not fit), growing the buffers
/// on ENOSPC (one bucket larger than the batch). `delete`: lookup and
/// delete each batch.
pub(crate) fn for_each_entry(
    fd: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    delete: bool,
    mut f: impl FnMut(&[u8], &[u8]),
) -> Result<()> {
    let mut cap: u32 = 256;
    let mut keys = vec![0u8; cap as usize * key_size];
    let mut values = vec![0u8; cap as usize * value_size];
    // The batch token: a bucket index for hash maps (u32); room for more.
    let mut token_in = [0u64; 1];
    let mut token_out = [0u64; 1];
    let mut first = true;
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        elem_flags: 0,
        flags: 0,
    };
    loop {
        let mut count = cap;
        let in_ptr = if first {
            std::ptr::null_mut()
        } else {
            token_in.as_mut_ptr().cast()
        };
        // SAFETY: keys/values hold `cap` entries of the map's key and value
        // size, the tokens are 8 bytes (a hash map's is 4), count is `cap`.
        let ret = unsafe {
            let call = if delete {
                libbpf_sys::bpf_map_lookup_and_delete_batch
            } else {
                libbpf_sys::bpf_map_lookup_batch
            };
            call(
                fd.as_raw_fd(),
                in_ptr,
                token_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let count = (count.min(cap)) as usize;
        if ret == 0 || ret == -libc::ENOENT {
            for i in 0..count {
                f(
                    &keys[i * key_size..(i + 1) * key_size],
                    &values[i * value_size..(i + 1) * value_size],
                );
            }
        }
        match ret {
            0 => {
                token_in = token_out;
                first = false;
            }
            e if e == -libc::ENOENT => return Ok(()),
            e if e == -libc::ENOSPC && cap < 1 << 20 => {
                cap *= 4;
                keys.resize(cap as usize * key_size, 0);
                values.resize(cap as usize * value_size, 0);
            }
            e => bail!(
                "map batch read failed: {}",
                std::io::Error::from_raw_os_error(-e)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::fd::AsFd;

    fn hash_map(entries: u32) -> MapHandle {
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let m = MapHandle::create(MapType::Hash, Some("bprof_test"), 4, 8, entries, &opts)
            .expect("create a hash map (needs root)");
        for k in 0..entries {
            m.update(
                &k.to_ne_bytes(),
                &(u64::from(k) * 3).to_ne_bytes(),
                MapFlags::ANY,
            )
            .unwrap();
        }
        m
    }

    #[test]
    fn batch_read_returns_every_entry_of_a_large_hash_map() {
        // Creating a map needs root: without it `cargo test` skips this one,
        // as the suite skips its BPF tests, instead of failing.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // On the real stderr: libtest hides a passing test's eprintln.
            let msg = b"bprof unit tests: not root, so batch_read_returns_every_entry_of_a_large_hash_map (a real BPF map) is skipped\n";
            // SAFETY: writing a valid buffer to fd 2.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            return;
        }
        // 20,000 entries in 256-entry batches: the kernel ends many batches
        // short, at buckets that do not fit; all must still be read.
        let m = hash_map(20_000);
        let mut seen = HashMap::new();
        for_each_entry(m.as_fd(), 4, 8, false, |k, v| {
            let k = u32::from_ne_bytes(k.try_into().unwrap());
            let v = u64::from_ne_bytes(v.try_into().unwrap());
            assert!(seen.insert(k, v).is_none(), "key {k} twice");
        })
        .unwrap();
        assert_eq!(seen.len(), 20_000);
        assert!(seen.iter().all(|(&k, &v)| v == u64::from(k) * 3));
        // Read and delete: the same entries, and the map is empty after.
        let mut n = 0;
        for_each_entry(m.as_fd(), 4, 8, true, |_, _| n += 1).unwrap();
        assert_eq!(n, 20_000);
        assert!(m.keys().next().is_none());
    }

    use crate::bpf::abi::{frame_record, plain_bytes, user_stack};

    fn record(status: i32, id: u8, offset: u64) -> frame_record {
        frame_record {
            status,
            build_id: [id; abi::BUILD_ID_SIZE],
            offset,
        }
    }

    /// `struct user_stack` bytes: nr, pad, then the records (zero-filled).
    fn user_stack_bytes(nr: u32, records: &[frame_record]) -> Vec<u8> {
        let mut b = vec![0u8; std::mem::size_of::<user_stack>()];
        b[..4].copy_from_slice(&nr.to_ne_bytes());
        let start = std::mem::offset_of!(user_stack, frames);
        for (i, r) in records.iter().enumerate() {
            let at = start + i * std::mem::size_of::<frame_record>();
            b[at..at + std::mem::size_of::<frame_record>()].copy_from_slice(plain_bytes(r));
        }
        b
    }

    #[test]
    fn user_stacks_decode_file_and_ip_frames_up_to_nr() {
        let recs = [
            record(abi::FRAME_FILE, 0x11, 0x1234),
            record(abi::FRAME_IP, 0, 0x7f00_dead_beef),
            record(abi::FRAME_FILE, 0x22, 0x10),
        ];
        let frames = parse_user_stack(&user_stack_bytes(2, &recs));
        assert_eq!(
            frames,
            vec![
                UserFrame::File {
                    build_id: [0x11; abi::BUILD_ID_SIZE],
                    offset: 0x1234
                },
                UserFrame::Ip(0x7f00_dead_beef),
            ]
        );
        // An empty record ends the stack whatever nr says.
        let frames = parse_user_stack(&user_stack_bytes(3, &[recs[0], record(0, 0, 0), recs[2]]));
        assert_eq!(frames.len(), 1);
        // A lying nr or truncated bytes never read past the value.
        let bytes = user_stack_bytes(u32::MAX, &recs);
        assert_eq!(parse_user_stack(&bytes).len(), 3);
        assert!(parse_user_stack(&bytes[..3]).is_empty());
        assert_eq!(parse_user_stack(&bytes[..8 + 32 + 5]).len(), 1);
    }

    /// A file without a build ID is named by its key: the kernel's device
    /// encoding and a 64-bit inode, as `struct file_key` lays them out.
    #[test]
    fn file_key_records_decode_to_the_device_and_inode_they_hold() {
        let key = crate::bpf::stacks::FileKey {
            dev: 0xfe << 20 | 1,
            ino: 0x1_2345_6789,
        };
        let mut rec = record(abi::FRAME_FILE_KEY, 0, 0x4321);
        rec.build_id = key.to_record();
        let words: Vec<u32> = rec
            .build_id
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [0xfe << 20 | 1, 0x2345_6789, 1, 0, 0]);
        assert_eq!(
            parse_user_stack(&user_stack_bytes(1, &[rec])),
            vec![UserFrame::FileKey {
                key,
                offset: 0x4321
            }]
        );
        assert_eq!(std::mem::size_of::<abi::file_key>(), abi::BUILD_ID_SIZE);
    }

    #[test]
    fn an_unwound_stack_stored_without_its_leaf_skips_the_in_key_record_once() {
        let recs = [
            record(abi::FRAME_IN_KEY, 0, 0),
            record(abi::FRAME_FILE, 0x11, 0x40),
            record(abi::FRAME_IN_KEY, 0, 0),
        ];
        // Record 0 only: elsewhere the record ends the stack, like any
        // status this side does not know.
        assert_eq!(
            parse_user_stack(&user_stack_bytes(3, &recs)),
            vec![UserFrame::File {
                build_id: [0x11; abi::BUILD_ID_SIZE],
                offset: 0x40
            }]
        );
        assert_eq!(leaf_frame(&recs[0]), None);
        assert_eq!(
            leaf_frame(&record(abi::FRAME_TRUNCATED, 0, 999)),
            Some(UserFrame::Truncated(u8::MAX))
        );
    }

    #[test]
    fn kernel_stacks_end_at_the_first_zero() {
        let mut b = Vec::new();
        for ip in [
            0xffff_ffff_8100_0000u64,
            0xffff_ffff_8200_0000,
            0,
            0xffff_ffff_8300_0000,
        ] {
            b.extend_from_slice(&ip.to_ne_bytes());
        }
        assert_eq!(
            parse_kernel_stack(&b),
            vec![0xffff_ffff_8100_0000, 0xffff_ffff_8200_0000]
        );
        assert!(parse_kernel_stack(&[]).is_empty());
    }

    #[test]
    fn comm_stops_at_nul_and_survives_bad_utf8() {
        let mut c = [0i8; abi::COMM_LEN];
        for (i, b) in b"fx_work\xff".iter().enumerate() {
            c[i] = *b as i8;
        }
        assert_eq!(comm_string(&c), "fx_work\u{fffd}");
        let full = [b'a' as i8; abi::COMM_LEN];
        assert_eq!(comm_string(&full).len(), abi::COMM_LEN);
    }
}
