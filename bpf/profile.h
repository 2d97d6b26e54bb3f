/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ABI of profile.bpf.c: every type and constant that crosses to Rust is
 * defined here, once, from plain integer types (no vmlinux types). Rust sees
 * them only through the generated skeleton (profile.bpf.c's `bprof_abi`
 * global puts each into the object's BTF), so nothing is written twice.
 * Constants are enum members, not #defines, because only those reach BTF.
 */
#ifndef BPROF_PROFILE_H
#define BPROF_PROFILE_H

enum profile_limits {
	BPROF_COMM_LEN = 16,
	/* The kernel's PERF_MAX_STACK_DEPTH default; deeper stacks are truncated. */
	BPROF_MAX_STACK_DEPTH = 127,
	BPROF_BUILD_ID_SIZE = 20,
	/* --filter: at most this many entries (perf uses the same bound). */
	BPROF_MAX_FILTERS = 64,
	/* User stacks of at most this many records are stored in user_stacks,
	 * whose values hold no more; deeper ones in user_stacks_deep, under ids
	 * with BPROF_DEEP_STACK_ID set. */
	BPROF_SHORT_FRAMES = 30,
	BPROF_DEEP_STACK_ID = 1 << 30,
};

#include "unwind.h"
#include "pyframes.h"

/* frame_record.status: the kernel's enum bpf_stack_build_id_status. */
enum frame_status {
	FRAME_EMPTY = 0, /* no frame */
	FRAME_FILE = 1,  /* build_id and a file offset */
	FRAME_IP = 2,    /* no file known: offset holds the raw address */
	FRAME_TRUNCATED = 3, /* the unwinder stopped early: offset holds enum unwind_end */
	FRAME_IN_KEY = 4,    /* a stored unwound stack's record 0: its leaf is the count key's user_leaf */
	FRAME_FILE_KEY = 5,  /* a file without a build ID: build_id holds a struct file_key, offset a file offset */
	FRAME_ELIDED = 6,    /* a deep walk's middle left out: offset holds how many frames; the records
			      * after it are a ring of the outermost ones, the first __u32 of build_id
			      * the index in it of the innermost (see unwind_user) */
};

/* A mapped file as the kernel names it, for a file without a GNU build ID
 * (a Go binary, a BOLTed library, code linked --build-id=none): in a
 * FRAME_FILE_KEY record's build_id, so it is 20 bytes (frame_record keeps
 * bpf_stack_build_id's layout) of 4-byte words. User space keeps the file
 * open under this key from when it learned the mapping, so the frames are
 * named after their process exits. */
struct file_key {
	__u32 dev;    /* s_dev, the kernel's encoding (major << 20 | minor) */
	__u32 ino_lo; /* i_ino */
	__u32 ino_hi;
	__u32 zero[2];
};

/* One user frame: the layout of the kernel's struct bpf_stack_build_id
 * (profile.bpf.c asserts they match), with the offset/ip union as one field. */
struct frame_record {
	__s32 status; /* enum frame_status */
	__u8 build_id[BPROF_BUILD_ID_SIZE];
	__u64 offset; /* file offset, or the IP for FRAME_IP */
};

/* One key of the in-kernel count map: a thread and the two stacks it was in. */
struct sample_key {
	__u32 tgid;
	__u32 tid; /* thread id (the kernel's task pid) */
	/* Ids into kern_stacks / user_stacks; negative when not taken or lost. */
	__s32 kern_stack_id;
	__s32 user_stack_id;
	char comm[BPROF_COMM_LEN];
	__u32 kind; /* enum sample_kind */
	/* An id into py_stacks (pyframes.bpf.h): the thread's Python frames;
	 * PY_STACK_NONE when it ran none, negative when lost. */
	__s32 py_stack_id;
	__u64 cgroup; /* cgroup v2 id of the task when sampled (or blocked) */
	/* --call-graph dwarf: the user stack's leaf, apart from its callers
	 * (user_stack_id): most new stacks of a busy loop differ in the leaf
	 * alone, and a new key costs far less than a new stored stack. */
	struct frame_record user_leaf;
};

/* One slot of a CPU's count cache (profile.bpf.c): a key and what its
 * samples added since the slot took it. */
struct count_cache_slot {
	struct sample_key key;
	__u64 samples; /* 0: the slot is free */
	__u64 weight;
};

enum count_cache_limits {
	/* 2^COUNT_CACHE_BITS slots per CPU, COUNT_CACHE_PART to an element
	 * (a per-CPU value is at most 32 KiB). */
	COUNT_CACHE_BITS = 10,
	COUNT_CACHE_PART = 256,
	COUNT_CACHE_PARTS = (1 << COUNT_CACHE_BITS) / COUNT_CACHE_PART,
	/* flush_counts' return value: slots left in the low bits, this bit
	 * when some of them found no element (-ENOMEM, not a full map), the
	 * slots moved from this bit up. */
	FLUSH_NOMEM = 1 << 16,
	FLUSH_MOVED_SHIFT = 17,
};

struct count_cache_part {
	struct count_cache_slot s[COUNT_CACHE_PART];
};

enum sample_kind {
	SAMPLE_ON_CPU,  /* a perf_event sample */
	SAMPLE_OFF_CPU, /* time switched out (--off-cpu, --wall) */
	SAMPLE_TOTAL,   /* the count map's own total: the key { .kind = SAMPLE_TOTAL } */
};

/*
 * Per-CPU accounting of every sample the program saw. Each sample lands in
 * exactly one of counted / idle / not_target / filtered / count_map_full, so
 * user space can check that nothing went missing.
 */
struct profile_stats {
	__u64 samples;         /* program runs */
	__u64 counted;         /* added to the count map */
	__u64 idle;            /* idle task, skipped without -I */
	__u64 not_target;      /* outside -p / -L / the command's process tree */
	__u64 filtered;        /* dropped by --filter */
	__u64 count_map_full;  /* counts map had no room for a new key */
	__u64 kern_stack_lost; /* kernel stack map full or hash collision */
	__u64 user_stack_lost; /* user stack map full or hash collision */
	__u64 no_stack;        /* neither stack usable: counted as [unknown] */
	__u64 user_stack_cached; /* user stack id found in user_stack_cache */
	__u64 switches_out;    /* off-CPU: blocks recorded at switch-out */
	__u64 blocks_counted;  /* off-CPU: blocks charged at switch-in */
	__u64 blocks_outside;  /* off-CPU: outside --min-block/--max-block */
	__u64 blocks_untracked; /* off-CPU: switch-outs with no room to stamp */
	/* Sum of what `counted` samples added to the count map (1 each, or
	 * microseconds off-CPU and with --wall): the outputs must add up to it. */
	__u64 counted_weight;
	__u64 count_keys;        /* new keys inserted into the count map */
	__u64 kern_stacks_stored; /* new entries in kern_stacks */
	__u64 user_stacks_stored; /* new entries in user_stacks */
	__u64 stack_collisions;  /* same 64-bit hash, other content: stored anew */
	/* --call-graph dwarf (unwind.bpf.h) */
	__u64 unwind_end[UNWIND_END_KINDS]; /* walks by how they ended */
	__u64 unwind_frames;     /* frames recorded */
	__u64 unwind_fp_frames;  /* frames left by frame pointer (no table) */
	__u64 unwind_task_regs;  /* walks started from the task's saved user registers */
	__u64 unwind_find_vma;   /* mappings found by bpf_find_vma, not unwind_maps */
	__u64 unwind_learned;    /* mapping slots the BPF side kept in unwind_maps */
	__u64 unwind_learned_early; /* target mappings learned at their mmap or exec */
	__u64 unwind_reads;      /* bpf_probe_read_user calls of the walks (stack window refills) */
	__u64 unwind_memo_walks; /* walks whose frames past the leaf came from the walk memo */
	__u64 unwind_elided;     /* frames walked and left out of deep stacks' middles (FRAME_ELIDED) */
	struct py_stats py;      /* Python frames (pyframes.bpf.h) */
};

enum filter_op {
	FILTER_OP_EQ = 1,
	FILTER_OP_NE,
	FILTER_OP_LT,
	FILTER_OP_LE,
	FILTER_OP_GT,
	FILTER_OP_GE,
	FILTER_OP_AND,         /* (field & value) != 0 */
	FILTER_OP_GROUP_BEGIN, /* the tests up to GROUP_END are ORed */
	FILTER_OP_GROUP_END,
};

enum filter_term {
	FILTER_TERM_NONE,
	FILTER_TERM_TID,
	FILTER_TERM_PID,
	FILTER_TERM_CPU,
	FILTER_TERM_PERIOD,
	FILTER_TERM_IP,
	FILTER_TERM_UID,
	FILTER_TERM_GID,
	FILTER_TERM_CGROUP, /* value: cgroup v2 id; level: its depth */
	FILTER_TERM_COMM,   /* compares comm[] */
	FILTER_TERM_MODE,   /* value: 0 user, 1 kernel */
};

/* One test of the compiled filter: outside a group a failing test drops the
 * sample; inside a group one passing test is enough. */
struct filter_entry {
	enum filter_op op;
	enum filter_term term;
	__u32 level;
	__u32 pad;
	__u64 value;
	char comm[BPROF_COMM_LEN];
};

/* At most this many -p processes are compared in the program (more: the
 * target_tgids map). */
#define BPROF_FIXED_TGIDS 8

/* Read-only configuration, fixed before load. */
struct profile_config {
	__u8 kernel_stacks;   /* take kernel stacks */
	__u8 user_stacks;     /* take user stacks */
	__u8 include_idle;    /* count the idle task */
	__u8 match_tgid;      /* only tgids in target_tgids */
	__u8 match_tid;       /* only tids in target_tids */
	__u8 follow_children; /* add forked processes of targets to target_tgids */
	__u8 on_cpu;          /* perf_event samples are counted */
	__u8 off_cpu;         /* switched-out time is counted */
	__u8 all_states;      /* --wall: also runnable (preempted) time */
	__u8 kernel_threads;  /* off-CPU time of kernel threads too */
	__u8 period_as_us;    /* --wall: an on-CPU sample counts its period in us */
	__u8 dwarf;           /* --call-graph dwarf: walk user stacks with unwind tables */
	__u8 cgroups;         /* keys name the cgroup (pprof labels it): a helper call */
	__u8 map_totals;      /* keep each count map's own total (bprof top): a lookup a sample */
	__u8 python;          /* walk the Python frames of the processes in py_procs */
	__u8 cfg_pad;
	__u32 filter_len;     /* entries used in filters[] */
	/* > 0: the target processes are exactly fixed_tgids[0, n) (-p, no
	 * child followed), compared here rather than looked up in
	 * target_tgids, whose lines are cold at most samples. */
	__u32 nr_fixed_tgids;
	__u64 min_block_ns;   /* off-CPU blocks shorter than this are ignored */
	__u64 max_block_ns;   /* ... and longer than this */
	__u32 fixed_tgids[BPROF_FIXED_TGIDS];
};

/* One kernel stack: the IPs, leaf first, zero-padded. */
struct kern_stack {
	__u64 ips[BPROF_MAX_STACK_DEPTH];
};


/*
 * One user stack as (build ID, file offset) records, so that a process that
 * exits before the profile ends can still be symbolized from its files.
 * Only the first nr records are meaningful.
 */
struct user_stack {
	__u32 nr;
	__u32 pad;
	/* Frame-pointer stacks fill at most BPROF_MAX_STACK_DEPTH; unwound ones
	 * BPROF_UNWIND_DEPTH and a FRAME_TRUNCATED record. */
	struct frame_record frames[BPROF_UNWIND_DEPTH + 1];
};

/* user_stacks' values: a user_stack's first BPROF_SHORT_FRAMES records.
 * A store copies its value whole into a fresh allocation: 8 KiB of mostly
 * unused records made each store of a short stack slow on a cache-cold
 * CPU. */
struct user_stack_short {
	__u32 nr;
	__u32 pad;
	struct frame_record frames[BPROF_SHORT_FRAMES];
};

/*
 * user_stack_cache key: one raw user stack of one address space, as it was
 * laid out then. The same raw stack in the same layout has the same build-ID
 * stack, so the costly build-ID walk runs once per key, not per sample.
 */
struct ustack_key {
	__u64 mm;     /* struct mm_struct *: the address space */
	__u64 hash;   /* of the raw user IPs */
	__u32 tgid;
	__u32 mm_seq; /* mm->mm_lock_seq: moves with every mmap, munmap, mprotect */
	__u32 exec_id; /* task->self_exec_id: moves with every exec */
	__u32 depth;  /* bytes of IPs */
};

/* Off-CPU: when and where a thread was switched out. */
struct offcpu_start {
	__u64 ts;
	__u64 cgroup; /* the blocked task's cgroup v2 id at switch-out */
	__s32 kern_stack_id;
	__s32 user_stack_id;
	struct frame_record user_leaf;
	__s32 py_stack_id;
	__u32 pad;
};

#endif /* BPROF_PROFILE_H */
