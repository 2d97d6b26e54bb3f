//! Maps: reading counts, stacks and loss counters out of the kernel once the
//! recording has stopped.

use std::collections::HashMap;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use crate::skel::profile::types;
use crate::stacks::{RawStack, Stats, UserFrame, BUILD_ID_SIZE};

/// Skeleton types made of integers only, with no implicit padding, so any
/// byte pattern of the right size is a valid value and every byte is set.
pub trait Plain: Copy {}
impl Plain for types::sample_key {}
impl Plain for types::profile_stats {}
impl Plain for types::filter_entry {}

fn read_plain<T: Plain>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= std::mem::size_of::<T>())
        // SAFETY: T is Plain (every bit pattern valid) and the length is checked.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The bytes of a value, to write it into a map.
pub fn plain_bytes<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain: no padding, so all size_of::<T>() bytes are initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

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
    }
    Ok(s)
}

/// Reads every counted key with its stacks.
pub fn read_stacks(
    counts: &dyn MapCore,
    kern: &dyn MapCore,
    user: &dyn MapCore,
    want_kernel: bool,
    want_user: bool,
) -> Result<Vec<RawStack>> {
    let mut kcache: HashMap<i32, Vec<u64>> = HashMap::new();
    let mut ucache: HashMap<i32, Vec<UserFrame>> = HashMap::new();
    let mut out = Vec::new();
    let batch = counts
        .lookup_batch(4096, MapFlags::ANY, MapFlags::ANY)
        .context("reading the count map")?;
    for (k, v) in batch {
        let Some(key) = read_plain::<types::sample_key>(&k) else {
            continue;
        };
        let count = v
            .get(..8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()))
            .unwrap_or(0);
        let kernel = stack_of(&mut kcache, key.kern_stack_id, |id| {
            read_kernel_stack(kern, id)
        })?;
        let user = stack_of(&mut ucache, key.user_stack_id, |id| {
            read_user_stack(user, id)
        })?;
        out.push(RawStack {
            tgid: key.tgid,
            pid: key.pid,
            comm: comm_string(&key.comm),
            kernel,
            user,
            kernel_lost: want_kernel && lost(key.kern_stack_id),
            user_lost: want_user && key.tgid != 0 && lost(key.user_stack_id),
            off_cpu: key.kind == SAMPLE_OFF_CPU,
            count,
        });
    }
    Ok(out)
}

/// `enum sample_kind` in profile.h.
const SAMPLE_OFF_CPU: u32 = 1;

/// -EFAULT means "no stack in that mode" (e.g. the kernel stack of a
/// user-mode sample); -1 means "not taken"; anything else is a lost stack.
fn lost(id: i32) -> bool {
    id < 0 && id != -libc::EFAULT && id != -1
}

fn stack_of<F: Copy + Clone>(
    cache: &mut HashMap<i32, Vec<F>>,
    id: i32,
    read: impl FnOnce(i32) -> Result<Vec<F>>,
) -> Result<Vec<F>> {
    if id < 0 {
        return Ok(Vec::new());
    }
    if let Some(s) = cache.get(&id) {
        return Ok(s.clone());
    }
    let s = read(id)?;
    cache.insert(id, s.clone());
    Ok(s)
}

fn read_kernel_stack(map: &dyn MapCore, id: i32) -> Result<Vec<u64>> {
    let Some(bytes) = map
        .lookup(&id.to_ne_bytes(), MapFlags::ANY)
        .context("reading a kernel stack")?
    else {
        return Ok(Vec::new());
    };
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .take_while(|&ip| ip != 0)
        .collect())
}

// The record layout read_user_stack parses.
const _: () = assert!(std::mem::size_of::<types::bpf_stack_build_id>() == 32);

/// `struct bpf_stack_build_id` statuses (uapi/linux/bpf.h).
const BPF_STACK_BUILD_ID_VALID: i32 = 1;
const BPF_STACK_BUILD_ID_IP: i32 = 2;

/// Reads `struct user_stack` (profile.h) `id`: `nr` records of
/// `struct bpf_stack_build_id` {status: i32, build_id: [u8; 20], offset or ip: u64}.
fn read_user_stack(map: &dyn MapCore, id: i32) -> Result<Vec<UserFrame>> {
    let Some(bytes) = map
        .lookup(&id.to_ne_bytes(), MapFlags::ANY)
        .context("reading a user stack")?
    else {
        return Ok(Vec::new());
    };
    let record = std::mem::size_of::<types::bpf_stack_build_id>();
    let start = std::mem::offset_of!(types::user_stack, frames);
    let nr = bytes.get(..4).map_or(0, |b| {
        u32::from_ne_bytes(b.try_into().unwrap_or_default()) as usize
    });
    let mut frames = Vec::with_capacity(nr);
    for rec in bytes
        .get(start..)
        .unwrap_or_default()
        .chunks_exact(record)
        .take(nr)
    {
        let status = i32::from_ne_bytes(rec[0..4].try_into().unwrap_or_default());
        let value = u64::from_ne_bytes(rec[24..32].try_into().unwrap_or_default());
        match status {
            BPF_STACK_BUILD_ID_VALID => {
                let mut build_id = [0u8; BUILD_ID_SIZE];
                build_id.copy_from_slice(&rec[4..4 + BUILD_ID_SIZE]);
                frames.push(UserFrame::File {
                    build_id,
                    offset: value,
                });
            }
            BPF_STACK_BUILD_ID_IP => frames.push(UserFrame::Ip(value)),
            _ => break,
        }
    }
    Ok(frames)
}

fn comm_string(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
