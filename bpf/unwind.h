/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types of the .eh_frame unwinder (--call-graph dwarf) shared with the Rust
 * side: the unwind table rows user space builds from .eh_frame /
 * .debug_frame, the per-file index into them, and why a walk ended.
 */
#ifndef BPROF_UNWIND_H
#define BPROF_UNWIND_H

/* Frames of one unwound user stack kept (what the stored stack holds):
 * the innermost UNWIND_INNER, then, past that, one FRAME_ELIDED record and
 * the outermost UNWIND_OUTER, so a deep recursion's stack still ends at
 * its root. A walk takes at most UNWIND_STEPS frames. */
#define BPROF_UNWIND_DEPTH 256

/* Constants Rust reads too: enum members, so they reach BTF. */
enum unwind_limits {
	/* unwind_maps: by 2 MiB chunk of address space, 8 mappings each. */
	UNWIND_CHUNK_SHIFT = 21,
	UNWIND_CHUNK_SLOTS = 8,
	/* The page index: one entry per 4 KiB of a file's covered offsets. */
	UNWIND_PAGE_SHIFT = 12,
	/* unwind_file.flags: build_id is valid, frames are (build ID, offset). */
	UNWIND_FILE_BUILD_ID = 1,
	/* unwind_file.flags: build_id holds the file's struct file_key (it has
	 * no build ID), frames are FRAME_FILE_KEY records. */
	UNWIND_FILE_KEY = 2,
	/* Distinct rules unwind_rules holds (8 bytes each: 512 KiB). */
	UNWIND_MAX_RULES = 65536,
	/* Table segments unwind_segs holds. */
	UNWIND_SEGMENTS = 32,
	/* A deep walk's frames kept (see BPROF_UNWIND_DEPTH); OUTER is a ring,
	 * a power of two. */
	UNWIND_OUTER = 64,
	UNWIND_INNER = BPROF_UNWIND_DEPTH - UNWIND_OUTER - 1,
	UNWIND_STEPS = 8192,
};

/* How the canonical frame address (the caller's rsp) is found. */
enum unwind_cfa {
	UNWIND_CFA_NONE = 0,  /* no FDE covers this address: no table */
	UNWIND_CFA_RSP,       /* rsp + cfa_off */
	UNWIND_CFA_RBP,       /* rbp + cfa_off */
	UNWIND_CFA_PLT,       /* PLT stub: rsp + cfa_off (+ 8 when (pc & 15) >= 11) */
	UNWIND_CFA_DEREF_RBP, /* *(rbp + cfa_off): stack realignment (DW_OP_breg6 off; DW_OP_deref) */
	UNWIND_CFA_SIGNAL,    /* __restore_rt: registers come from the rt_sigframe at rsp */
	UNWIND_CFA_STOP,      /* return address undefined: the outermost frame */
	UNWIND_CFA_UNSUPPORTED, /* a rule this unwinder cannot follow */
	/* UNWIND_CFA_REG + n: DWARF register n + cfa_off (n < 16, not rsp or
	 * rbp), as leaf code keeps it (OpenSSL's perlasm realigning the stack,
	 * Rust's stack probes, glibc's setcontext). Only the sample's own
	 * registers have such a value: the first frame only. */
	UNWIND_CFA_REG = 16,
};

/* Where the caller's rbp is. */
enum unwind_rbp {
	UNWIND_RBP_SAME = 0, /* unchanged */
	UNWIND_RBP_OFFSET,   /* saved at CFA + rbp_off */
	UNWIND_RBP_UNKNOWN,  /* some other rule: rbp is not known past this frame */
};

/* One rule: how to find the caller's registers. Rules repeat across rows
 * and files (a few thousand distinct ones in a whole system's millions of
 * rows), so each is stored once in unwind_rules and rows name it. */
struct unwind_rule {
	__s32 cfa_off;
	__s16 rbp_off; /* UNWIND_CFA_PLT: the (pc & 15) threshold */
	__u8 cfa_type; /* enum unwind_cfa */
	__u8 rbp_type; /* enum unwind_rbp */
};

/* One row: rule `rule` holds from `pc` (a file offset) up to the next
 * row's pc. 8 bytes, the array map's smallest element stride. */
struct unwind_row {
	__u32 pc;
	__u32 rule; /* index into unwind_rules */
};

/* A mapped file as the kernel names it: vma->vm_file->f_inode. */
struct unwind_file_key {
	__u64 dev; /* super_block s_dev, the kernel's encoding (major << 20 | minor) */
	__u64 ino;
};

/* Executable mappings of target processes, filled by user space from
 * /proc/PID/maps and the side band's mmap records, by 2 MiB chunk of
 * address space: bpf_find_vma takes the mm lock once per program run at
 * most in IRQ context (its unlock is deferred to an irq_work), so it only
 * serves a mapping user space has not seen yet. */
struct unwind_map_key {
	__u32 tgid;
	__u32 pad;
	__u64 chunk; /* address >> UNWIND_CHUNK_SHIFT */
};

struct unwind_map_slot {
	__u64 start, end; /* [start, end): 0, 0 is an empty slot */
	__u64 off;        /* file offset of start */
	struct unwind_file_key file;
};

/* User space writes whole chunks (learned 0). The BPF side adds what it
 * learns from the kernel (at a target's mmap and exec, or when a walk finds
 * a mapping missing), marked in `learned` and valid only for the address
 * space it was learned in: after an exec, or in a process reusing the pid,
 * those slots are ignored and recycled. */
struct unwind_chunk {
	struct unwind_map_slot slots[UNWIND_CHUNK_SLOTS];
	__u64 learned_mm; /* the mm_struct the learned slots are of */
	__u32 learned;    /* bit k: slot k was learned by the BPF side */
	__u32 pad;
};

/* One file's table: in segment `seg` of unwind_segs, rows [first_row,
 * first_row + nr_rows), sorted by pc; nr_rows 0: no table, frame pointers
 * there. Its page index is entries [first_page, first_page + nr_pages) of
 * the same segment (struct unwind_page), for the pages from page_base
 * (rows[0].pc >> UNWIND_PAGE_SHIFT) on; nr_pages 0: no index (no room
 * for one), the whole table is searched. `table` numbers the loaded tables
 * (rows are never rewritten, so (table, offset) names one rule for the
 * whole session: the rule memo's key). */
struct unwind_file {
	__u32 seg;
	__u32 table;
	__u32 first_row;
	__u32 nr_rows;
	__u32 first_page;
	__u32 nr_pages;
	__u32 page_base;
	__u32 flags; /* UNWIND_FILE_BUILD_ID or UNWIND_FILE_KEY */
	__u8 build_id[20];
};

/* The rows that can hold the rule of an offset in one page: the row in
 * effect at its first byte (lo) to the one in effect at its last (hi),
 * relative to the file's first_row. A binary search over 55 rows (libc's
 * mean per page) takes 6 steps instead of 15 over the whole table. */
struct unwind_page {
	__u32 lo;
	__u32 hi;
};

/* Why a walk ended: index into profile_stats.unwind_end[]. */
enum unwind_end {
	UNWIND_END_ROOT = 0,    /* outermost frame reached (undefined return address, or 0) */
	UNWIND_END_FP_END,      /* frame-pointer walk reached rbp 0 (code without a table) */
	UNWIND_END_NO_TABLE,    /* no table for the PC and no usable rbp */
	UNWIND_END_NO_MAPPING,  /* the PC is in no mapping */
	UNWIND_END_READ_FAULT,  /* the stack could not be read */
	UNWIND_END_BAD_CFA,     /* the CFA did not move up the stack, or needed an unknown rbp */
	UNWIND_END_UNSUPPORTED, /* a rule this unwinder cannot follow */
	UNWIND_END_DEPTH,       /* UNWIND_STEPS frames walked */
	UNWIND_END_VMA_BUSY,    /* bpf_find_vma could not take the mm lock */
	UNWIND_END_KINDS,
};


#endif /* BPROF_UNWIND_H */
