//! The BPF/Rust ABI as Rust sees it. Every constant and layout here comes
//! from the generated skeletons, that is from bpf/profile.h and bpf/stat.h:
//! nothing is typed twice, so the two sides cannot drift apart.

use super::skel::profile::types as profile;
use super::skel::stat::types as stat;

pub(crate) use profile::{
    file_key, filter_entry, frame_record, kern_stack, sample_key, user_stack,
};
pub(crate) use profile::{py_code_event, py_frame, py_model, py_offsets, py_proc, py_stats};
pub(crate) use profile::{
    unwind_cfa, unwind_chunk, unwind_file, unwind_file_key, unwind_map_key, unwind_map_slot,
    unwind_page, unwind_rbp, unwind_row, unwind_rule,
};
pub(crate) use stat::stat_value;

/// `comm` bytes, NUL included.
pub(crate) const COMM_LEN: usize = profile::profile_limits::BPROF_COMM_LEN.0 as usize;
/// Size of a build ID in a frame record.
pub(crate) const BUILD_ID_SIZE: usize = profile::profile_limits::BPROF_BUILD_ID_SIZE.0 as usize;
/// Entries of a compiled `--filter`.
pub(crate) const MAX_FILTERS: usize = profile::profile_limits::BPROF_MAX_FILTERS.0 as usize;
/// Records a `user_stacks` value holds (deeper stacks: `user_stacks_deep`).
pub(crate) const SHORT_FRAMES: usize = profile::profile_limits::BPROF_SHORT_FRAMES.0 as usize;
/// A `user_stack_id` with this bit is in `user_stacks_deep`.
pub(crate) const DEEP_STACK_ID: i32 = profile::profile_limits::BPROF_DEEP_STACK_ID.0 as i32;
/// Elements of `count_cache` (each holds `COUNT_CACHE_PART` slots per CPU).
pub(crate) const COUNT_CACHE_PARTS: u32 = profile::count_cache_limits::COUNT_CACHE_PARTS.0;
/// `flush_counts`' result: this bit when slots found no element (-ENOMEM).
pub(crate) const FLUSH_NOMEM: u32 = profile::count_cache_limits::FLUSH_NOMEM.0;
/// `flush_counts`' result: the slots moved, from this bit up.
pub(crate) const FLUSH_MOVED_SHIFT: u32 = profile::count_cache_limits::FLUSH_MOVED_SHIFT.0;
/// `sample_key.kind` of off-CPU time.
pub(crate) const SAMPLE_OFF_CPU: u32 = profile::sample_kind::SAMPLE_OFF_CPU.0;
/// `sample_key.kind` of a count map's own total.
pub(crate) const SAMPLE_TOTAL: u32 = profile::sample_kind::SAMPLE_TOTAL.0;
/// `frame_record.status`: a build ID and file offset.
pub(crate) const FRAME_FILE: i32 = profile::frame_status::FRAME_FILE.0 as i32;
/// `frame_record.status`: a raw address.
pub(crate) const FRAME_IP: i32 = profile::frame_status::FRAME_IP.0 as i32;
/// `frame_record.status`: the unwinder stopped early; offset says why.
pub(crate) const FRAME_TRUNCATED: i32 = profile::frame_status::FRAME_TRUNCATED.0 as i32;
/// `frame_record.status` of a stored unwound stack's first record: its leaf
/// is the count key's `user_leaf`.
pub(crate) const FRAME_IN_KEY: i32 = profile::frame_status::FRAME_IN_KEY.0 as i32;

/// `frame_record.status`: a deep walk's middle left out; offset says how
/// many frames, and a ring of the outermost follows.
pub(crate) const FRAME_ELIDED: i32 = profile::frame_status::FRAME_ELIDED.0 as i32;
/// A deep walk keeps its innermost this many frames...
pub(crate) const UNWIND_INNER: u32 = profile::unwind_limits::UNWIND_INNER.0;
/// ...and its outermost this many (a ring).
pub(crate) const UNWIND_OUTER: u32 = profile::unwind_limits::UNWIND_OUTER.0;

/// `frame_record.status`: a file without a build ID, by its key
/// (`struct file_key`), and a file offset.
pub(crate) const FRAME_FILE_KEY: i32 = profile::frame_status::FRAME_FILE_KEY.0 as i32;

/// `unwind_maps` keys: address >> this (2 MiB chunks).
pub(crate) const UNWIND_CHUNK_SHIFT: u32 = profile::unwind_limits::UNWIND_CHUNK_SHIFT.0;
/// Mappings one `unwind_maps` chunk holds.
pub(crate) const UNWIND_CHUNK_SLOTS: usize = profile::unwind_limits::UNWIND_CHUNK_SLOTS.0 as usize;
/// One page-index entry (`unwind_page`) per 1 << this bytes of file offsets.
pub(crate) const UNWIND_PAGE_SHIFT: u32 = profile::unwind_limits::UNWIND_PAGE_SHIFT.0;
/// Segments `unwind_segs` holds.
pub(crate) const UNWIND_SEGMENTS: u32 = profile::unwind_limits::UNWIND_SEGMENTS.0;
/// Entries of `unwind_rules`.
pub(crate) const UNWIND_MAX_RULES: u32 = profile::unwind_limits::UNWIND_MAX_RULES.0;
/// `unwind_file.flags`: its build ID is valid.
pub(crate) const UNWIND_FILE_BUILD_ID: u32 = profile::unwind_limits::UNWIND_FILE_BUILD_ID.0;
/// `unwind_file.flags`: its `build_id` holds its `struct file_key`.
pub(crate) const UNWIND_FILE_KEY: u32 = profile::unwind_limits::UNWIND_FILE_KEY.0;

/// `py_frame.flags`: the frame began a C-level call of the eval loop.
pub(crate) const PY_FRAME_ENTRY: u32 = profile::py_limits::PY_FRAME_ENTRY.0;
/// `py_code_event`: a string was cut (with its kind in the low bits).
pub(crate) const PY_STR_CUT: u32 = profile::py_limits::PY_STR_CUT.0;
/// A `sample_key.py_stack_id` of none, and py_stacks ids with this bit are
/// in `py_stacks_deep`.
pub(crate) const PY_STACK_NONE: i32 = profile::py_limits::PY_STACK_NONE.0 as i32;
pub(crate) const PY_DEEP_STACK_ID: i32 = profile::py_limits::PY_DEEP_STACK_ID.0 as i32;
/// Kinds of `enum py_end`.
pub(crate) const PY_END_KINDS: u32 = profile::py_end::PY_END_KINDS.0;
/// `enum py_model`.
pub(crate) const PY_MODEL_310: py_model = py_model::PY_MODEL_310;
pub(crate) const PY_MODEL_311: py_model = py_model::PY_MODEL_311;
pub(crate) const PY_MODEL_312: py_model = py_model::PY_MODEL_312;

/// Events one `bprof stat` session counts.
pub(crate) const STAT_MAX_EVENTS: usize = stat::stat_limits::BPROF_STAT_MAX_EVENTS.0 as usize;
/// Event attributes all sessions together share.
pub(crate) const STAT_MAX_SLOTS: u32 = stat::stat_limits::BPROF_STAT_MAX_SLOTS.0;
/// `--for-each-cgroup` entries.
pub(crate) const STAT_MAX_CGROUPS: usize = stat::stat_limits::BPROF_STAT_MAX_CGROUPS.0 as usize;
/// args[0] of the BPF_PROG_TEST_RUN that syncs a session's counts.
pub(crate) const STAT_SYNC: u64 = stat::stat_limits::BPROF_STAT_SYNC.0 as u64;

/// Skeleton types made of integers only, with no implicit padding, so any
/// byte pattern of the right size is a valid value and every byte is set.
///
/// # Safety
/// Implement only for `#[repr(C)]` types of integers and integer arrays
/// without padding: `read_plain` and `plain_bytes` rely on it.
pub(crate) unsafe trait Plain: Copy {}
// SAFETY: integers only, eight-byte fields (profile.h).
unsafe impl Plain for profile::profile_stats {}
// SAFETY: integers and a char array, explicit pad fields (profile.h).
unsafe impl Plain for profile::filter_entry {}
// SAFETY: integers and a char array, explicit pad field (profile.h).
unsafe impl Plain for sample_key {}
// SAFETY: a sample_key (Plain, a multiple of 8 bytes) and two u64.
unsafe impl Plain for profile::count_cache_slot {}
// SAFETY: i32, [u8; 20], u64: 4 + 20 + 8, no gap (asserted in profile.bpf.c).
unsafe impl Plain for frame_record {}
// SAFETY: three u64 (stat.h).
unsafe impl Plain for stat_value {}
// SAFETY: an integer.
unsafe impl Plain for u32 {}
// SAFETY: an integer.
unsafe impl Plain for u64 {}
// SAFETY: two u32.
unsafe impl Plain for unwind_row {}
// SAFETY: i32, i16, u8, u8: 8 bytes, no gap (size asserted below).
unsafe impl Plain for unwind_rule {}
// SAFETY: two u32.
unsafe impl Plain for unwind_page {}
// SAFETY: six u32 and a 20-byte array: 44 bytes, 4-aligned, no gap.
unsafe impl Plain for unwind_file {}
// SAFETY: two u64.
unsafe impl Plain for unwind_file_key {}
// SAFETY: u32, explicit pad u32, u64.
unsafe impl Plain for unwind_map_key {}
// SAFETY: slots of five u64 each.
unsafe impl Plain for unwind_chunk {}

// SAFETY: u64, u64, i32, u32: 24 bytes, no gap.
unsafe impl Plain for py_frame {}
// SAFETY: five u64, two u32, then py_offsets (32 u16): 112 bytes, no gap
// (size asserted below).
unsafe impl Plain for py_proc {}
// SAFETY: u32, u32, three u64... then u16s and byte arrays, explicit pads:
// no gap (size asserted below).
unsafe impl Plain for py_code_event {}

/// Reads a `Plain` value from the start of `bytes`, if long enough.
pub(crate) fn read_plain<T: Plain>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= std::mem::size_of::<T>())
        // SAFETY: T is Plain (every bit pattern valid) and the length is checked.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The bytes of a value, to write it into a map.
pub(crate) fn plain_bytes<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain: no padding, so all size_of::<T>() bytes are initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

// The layouts the Plain impls above promise: no padding anywhere.
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<frame_record>() == 4 + BUILD_ID_SIZE + 8);
    assert!(size_of::<stat_value>() == 3 * 8);
    assert!(size_of::<sample_key>() == 4 * 4 + COMM_LEN + 2 * 4 + 8 + size_of::<frame_record>());
    assert!(size_of::<profile::filter_entry>() == 4 * 4 + 8 + COMM_LEN);
    assert!(size_of::<profile::profile_stats>() % 8 == 0);
    assert!(size_of::<profile::count_cache_slot>() == size_of::<sample_key>() + 2 * 8);
    assert!(size_of::<unwind_row>() == 8);
    assert!(size_of::<unwind_rule>() == 8);
    assert!(size_of::<unwind_page>() == 8);
    assert!(size_of::<unwind_file>() == 8 * 4 + 20);
    assert!(size_of::<unwind_map_key>() == 16);
    assert!(size_of::<unwind_chunk>() == UNWIND_CHUNK_SLOTS * 5 * 8 + 16);
    assert!(size_of::<py_frame>() == 24);
    assert!(size_of::<py_offsets>() == 32 * 2);
    assert!(size_of::<py_proc>() == 5 * 8 + 2 * 4 + size_of::<py_offsets>());
    assert!(size_of::<py_code_event>() == 48 + 128 + 256 + 2048);
};
