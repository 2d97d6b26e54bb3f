//! Stacks as they come out of the kernel: plain data, before symbolization.

/// Size of a GNU build ID as the kernel reports it.
pub const BUILD_ID_SIZE: usize = super::abi::BUILD_ID_SIZE;

// A file key fills a build ID's bytes exactly (`struct file_key`).
const _: () = assert!(std::mem::size_of::<super::abi::file_key>() == BUILD_ID_SIZE);

/// A mapped file as the kernel names it (`struct file_key`): its device
/// (the kernel's encoding, `major << 20 | minor`) and inode. Frames of files
/// without a build ID carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// `s_dev`: `major << 20 | minor`.
    pub dev: u32,
    /// `i_ino`.
    pub ino: u64,
}

impl FileKey {
    /// The key of a file `stat` describes.
    pub fn of(meta: &std::fs::Metadata) -> FileKey {
        use std::os::unix::fs::MetadataExt;
        FileKey {
            dev: kernel_dev(meta.dev()),
            ino: meta.ino(),
        }
    }

    /// The key as a frame record's 20 bytes hold it.
    pub fn to_record(self) -> [u8; BUILD_ID_SIZE] {
        let mut b = [0u8; BUILD_ID_SIZE];
        b[..4].copy_from_slice(&self.dev.to_ne_bytes());
        b[4..8].copy_from_slice(&(self.ino as u32).to_ne_bytes());
        b[8..12].copy_from_slice(&((self.ino >> 32) as u32).to_ne_bytes());
        b
    }

    /// The key a frame record's 20 bytes hold.
    pub fn from_record(b: &[u8; BUILD_ID_SIZE]) -> FileKey {
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        FileKey {
            dev: word(0),
            ino: u64::from(word(4)) | u64::from(word(8)) << 32,
        }
    }
}

impl std::fmt::Display for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:x}:{:x} inode {}",
            self.dev >> 20,
            self.dev & 0xf_ffff,
            self.ino
        )
    }
}

/// The kernel's encoding of a device (`major << 20 | minor`, as BPF and
/// perf records see `s_dev`) from `stat`'s `st_dev`.
pub fn kernel_dev(st_dev: u64) -> u32 {
    (libc::major(st_dev) << 20) | (libc::minor(st_dev) & 0xf_ffff)
}

/// One user-space frame as `BPF_F_STACK_BUILD_ID` stack maps store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UserFrame {
    /// A file offset within the ELF file with this build ID.
    File {
        /// The file's build ID (shorter IDs are zero-padded, as the kernel
        /// reports them).
        build_id: [u8; BUILD_ID_SIZE],
        /// Offset into the file.
        offset: u64,
    },
    /// A file offset within a file without a build ID, by its key.
    FileKey {
        /// The file's key.
        key: FileKey,
        /// Offset into the file.
        offset: u64,
    },
    /// The kernel could not name the file (anonymous memory such as JIT
    /// code, a file without a build ID under `--call-graph fp`, or the mm
    /// lock was busy): a raw virtual address.
    Ip(u64),
    /// The unwinder stopped early here (`--call-graph dwarf`); the value is
    /// why (`enum unwind_end`, see `unwind::END_NAMES`).
    Truncated(u8),
    /// A deep stack's frames left out between its innermost and its
    /// outermost (`--call-graph dwarf`): how many.
    Elided(u32),
}

/// One distinct (thread, kernel stack, user stack) and how often it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawStack {
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// cgroup v2 id of the thread at the sample (0: unknown).
    pub cgroup: u64,
    /// Thread name at the time of the sample.
    pub comm: String,
    /// Kernel frames, leaf first.
    pub kernel: Vec<u64>,
    /// User frames, leaf first.
    pub user: Vec<UserFrame>,
    /// The kernel stack was wanted but lost (map full or collision).
    pub kernel_lost: bool,
    /// The user stack was wanted but lost (map full or collision).
    pub user_lost: bool,
    /// Off-CPU time rather than an on-CPU sample.
    pub off_cpu: bool,
    /// Samples, or microseconds for off-CPU and `--wall` profiles.
    pub count: u64,
    /// Python frames, leaf first (none when the thread ran no Python).
    pub python: Vec<PyFrame>,
}

/// Sample accounting, summed over CPUs (see `struct profile_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Program runs.
    pub samples: u64,
    /// Samples counted into stacks.
    pub counted: u64,
    /// Idle samples skipped (no `-I`).
    pub idle: u64,
    /// Samples of other processes than the target.
    pub not_target: u64,
    /// Samples dropped by `--filter`.
    pub filtered: u64,
    /// Samples lost because the count map was full.
    pub count_map_full: u64,
    /// Kernel stacks lost (stack map full or hash collision).
    pub kern_stack_lost: u64,
    /// User stacks lost (stack map full or hash collision).
    pub user_stack_lost: u64,
    /// Samples with neither stack usable.
    pub no_stack: u64,
    /// User stacks found in the cache, without a build-ID walk.
    pub user_stack_cached: u64,
    /// Off-CPU: switch-outs recorded.
    pub switches_out: u64,
    /// Off-CPU: blocks charged to a stack.
    pub blocks_counted: u64,
    /// Off-CPU: blocks outside --min-block/--max-block.
    pub blocks_outside: u64,
    /// Off-CPU: switch-outs not stamped (no room for the thread's entry).
    pub blocks_untracked: u64,
    /// Sum of what the counted samples added (1 each, or microseconds for
    /// off-CPU and `--wall`): the outputs add up to this.
    pub counted_weight: u64,
    /// New keys inserted into the count map.
    pub count_keys: u64,
    /// Entries stored into the kernel stack map.
    pub kern_stacks_stored: u64,
    /// Entries stored into the user stack map.
    pub user_stacks_stored: u64,
    /// Distinct stacks with the same 64-bit hash (each stored on its own).
    pub stack_collisions: u64,
    /// `--call-graph dwarf`: walks by how they ended (`enum unwind_end`).
    pub unwind_end: [u64; 9],
    /// `--call-graph dwarf`: frames recorded.
    pub unwind_frames: u64,
    /// `--call-graph dwarf`: frames walked by frame pointer (no table).
    pub unwind_fp_frames: u64,
    /// `--call-graph dwarf`: walks started from the task's saved registers.
    pub unwind_task_regs: u64,
    /// `--call-graph dwarf`: mappings found by the kernel, not the table.
    pub unwind_find_vma: u64,
    /// `--call-graph dwarf`: mapping slots the BPF side kept in the mapping
    /// table (from walks' lookups and from targets' mmaps and execs).
    pub unwind_learned: u64,
    /// `--call-graph dwarf`: target mappings learned at their mmap or exec.
    pub unwind_learned_early: u64,
    /// `--call-graph dwarf`: reads of user stack memory (window refills).
    pub unwind_reads: u64,
    /// `--call-graph dwarf`: walks whose frames past the leaf came from the
    /// walk memo (their stack words matched a recent walk's).
    pub unwind_memo_walks: u64,
    /// `--call-graph dwarf`: frames walked and left out of deep stacks'
    /// middles (an `[elided N]` frame stands for them).
    pub unwind_elided: u64,
    /// Python frames (`struct py_stats`).
    pub py: PyStats,
}

impl Stats {
    /// Samples that were wanted but not counted.
    pub fn lost(&self) -> u64 {
        self.count_map_full
    }
}

/// One Python frame as the walker recorded it: a code object (address and
/// identity hash) and the instruction it was at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyFrame {
    /// The code object's address.
    pub code: u64,
    /// A hash of fields read from it (another object at a freed one's
    /// address has another).
    pub id: u64,
    /// The instruction index (code units); negative before the first.
    pub lasti: i32,
    /// The frame began a C-level call of the eval loop.
    pub entry: bool,
}

/// The walker's counters (`struct py_stats`), summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyStats {
    /// Samples of a Python process walked.
    pub walks: u64,
    /// Python frames recorded.
    pub frames: u64,
    /// Walks by how they ended (`enum py_end`).
    pub end: [u64; super::abi::PY_END_KINDS as usize],
    /// Reads of frames and thread states (a span of frames each).
    pub reads: u64,
    /// Searches of a thread list for a thread state.
    pub searches: u64,
    /// Code objects announced.
    pub announced: u64,
    /// Announcements that found the ring full.
    pub dropped: u64,
    /// Python stacks stored.
    pub stored: u64,
    /// Python stacks lost (map full).
    pub lost: u64,
    /// Forked processes that took their parent's entry.
    pub forked: u64,
    /// Nanoseconds spent in the walks.
    pub ns: u64,
}

impl PyStats {
    /// Adds one CPU's counters.
    pub(crate) fn add(&mut self, c: &super::abi::py_stats) {
        self.walks += c.walks;
        self.frames += c.frames;
        for (a, b) in self.end.iter_mut().zip(c.end) {
            *a += b;
        }
        self.reads += c.reads;
        self.searches += c.searches;
        self.announced += c.announced;
        self.dropped += c.dropped;
        self.stored += c.stored;
        self.lost += c.lost;
        self.forked += c.forked;
        self.ns += c.ns;
    }
}

/// Parses a stored Python stack (`struct py_stack` or its short form):
/// its frames, leaf first, never past what the bytes hold.
pub(crate) fn parse_py_stack(bytes: &[u8]) -> Vec<PyFrame> {
    let size = std::mem::size_of::<super::abi::py_frame>();
    let nr = bytes.get(..4).map_or(0, |b| {
        u32::from_ne_bytes(b.try_into().unwrap_or_default()) as usize
    });
    bytes
        .get(8..)
        .unwrap_or_default()
        .chunks_exact(size)
        .take(nr)
        .filter_map(super::abi::read_plain::<super::abi::py_frame>)
        .map(|f| PyFrame {
            code: f.code,
            id: f.id,
            lasti: f.lasti,
            entry: f.flags & super::abi::PY_FRAME_ENTRY != 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::{self, py_frame};

    #[test]
    fn stored_stacks_parse_up_to_nr_and_never_past_the_bytes() {
        let mut b = Vec::new();
        b.extend_from_slice(&3u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for (code, flags) in [(0x1000u64, 0u32), (0x2000, abi::PY_FRAME_ENTRY)] {
            let f = py_frame {
                code,
                id: code + 1,
                lasti: 7,
                flags,
            };
            b.extend_from_slice(abi::plain_bytes(&f));
        }
        let frames = parse_py_stack(&b);
        assert_eq!(frames.len(), 2, "nr says 3, the bytes hold 2");
        assert_eq!(frames[1].code, 0x2000);
        assert!(frames[1].entry && !frames[0].entry);
        assert!(parse_py_stack(&b[..3]).is_empty());
    }
}
