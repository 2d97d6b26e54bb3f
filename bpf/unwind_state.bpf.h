/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: what the walk (unwind.bpf.h) reads and keeps. The
 * tables user space loads (rows, rules, page index, files, mappings and
 * their generation), the sample's registers and count key, and the per-CPU
 * memos that spare a walk its cold lines: the mappings and rules found
 * lately, a window onto the stack, and the last walk's rules by frame.
 */
#ifndef BPROF_UNWIND_STATE_BPF_H
#define BPROF_UNWIND_STATE_BPF_H

#include "kernel.bpf.h"
#include "profile.h"
#include "stacks.bpf.h"

/* The files' tables: each file's page index followed by its rows (both 8
 * bytes an entry), in one of the segments user space creates as tables
 * arrive (from 512 KiB on, up to --unwind-rows in all) and writes through
 * mmap, far faster than map updates. Allocating the whole budget up front
 * made every start zero pages for tables that mostly take a small part
 * of it. */
struct unwind_seg {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	/* INNER_MAP: the segments differ in size. */
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	/* Sizes, not BTF types: user space creates the segments without BTF,
	 * and 6.1 refuses an inner map whose BTF-derived fields (timer_off)
	 * differ from the template's. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct unwind_row));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, UNWIND_SEGMENTS);
	__type(key, __u32);
	__array(values, struct unwind_seg);
} unwind_segs SEC(".maps");

/* The distinct rules the rows name, written like the rows. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, UNWIND_MAX_RULES);
	__type(key, __u32);
	__type(value, struct unwind_rule);
} unwind_rules SEC(".maps");

/* Only user space adds entries, so none need be preallocated (all 16384
 * and their free lists, set up at every start for a few dozen files). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct unwind_file_key);
	__type(value, struct unwind_file);
} unwind_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct unwind_map_key);
	__type(value, struct unwind_chunk);
} unwind_maps SEC(".maps");

/* Moved on by user space after it changed unwind_maps or unwind_files:
 * entries of the mapping memo from before are stale. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} unwind_gen SEC(".maps");

/* A new unwind_maps chunk starts empty. */
struct unwind_chunk unwind_zero_chunk = {};

/* User registers at the sample. */
struct uregs {
	__u64 ip;
	__u64 r[16]; /* by DWARF number: rsp is r[7], rbp r[6] */
	__u64 valid; /* 0: take them from the task's pt_regs */
};

/* A sample's user registers and (on-CPU) its count key, per CPU and
 * context: on the program's stack they took the combined stack of
 * do_sample and the walk's callbacks past 512 bytes (refused by 6.1's
 * verifier). One value, so the key's lines neighbour the registers', which
 * every sample writes. */
struct sample_scratch {
	struct uregs ur;
	struct sample_key key;
	__u64 count_busy; /* on-CPU: flush_counts is emptying this CPU's count cache */
};

/* x86-64's pt_regs as the ptrace ABI fixes it, and the perf_event program's
 * context (UAPI), read without CO-RE: libbpf searches all the kernel's BTF
 * types once per relocated struct at every load. */
struct x86_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct perf_sample_ctx {
	struct x86_regs regs;
	__u64 sample_period;
	__u64 addr;
};
_Static_assert(sizeof(struct x86_regs) == sizeof(struct pt_regs), "pt_regs layout");
_Static_assert(__builtin_offsetof(struct x86_regs, ip) == __builtin_offsetof(struct pt_regs, ip), "pt_regs ip");
_Static_assert(__builtin_offsetof(struct x86_regs, sp) == __builtin_offsetof(struct pt_regs, sp), "pt_regs sp");
_Static_assert(__builtin_offsetof(struct perf_sample_ctx, sample_period) ==
		       __builtin_offsetof(struct bpf_perf_event_data, sample_period),
	       "bpf_perf_event_data layout");

/* pt_regs p's general registers into d[16], by DWARF number. */
#define DWARF_REGS(d, p)          \
	do {                      \
		(d)[0] = (p)->ax;  \
		(d)[1] = (p)->dx;  \
		(d)[2] = (p)->cx;  \
		(d)[3] = (p)->bx;  \
		(d)[4] = (p)->si;  \
		(d)[5] = (p)->di;  \
		(d)[6] = (p)->bp;  \
		(d)[7] = (p)->sp;  \
		(d)[8] = (p)->r8;  \
		(d)[9] = (p)->r9;  \
		(d)[10] = (p)->r10; \
		(d)[11] = (p)->r11; \
		(d)[12] = (p)->r12; \
		(d)[13] = (p)->r13; \
		(d)[14] = (p)->r14; \
		(d)[15] = (p)->r15; \
	} while (0)

/* The PC's mapping, as bpf_find_vma's callback reads it. */
struct vma_info {
	__u64 start, end, off;
	struct unwind_file_key key;
};

/* A stack word a walk read (see walk_memos). */
#define WALK_MEMO_WORDS 16

struct memo_word {
	__u64 addr, val;
};

/* The walk's registers, in a per-CPU map value rather than on the stack:
 * the verifier tracks no values in a map, so the bpf_loop callback's state
 * is the same on every iteration and is verified once. */
struct walk_state {
	__u64 ip, sp, bp;
	struct vma_info vma; /* the last mapping looked up */
	struct unwind_file file; /* its file's unwind_files entry, when have_file */
	struct unwind_rule rule; /* the frame's, from frame_rule */
	__u32 have_file;
	__u32 fp_frames; /* frames left by frame pointer */
	__u32 walked;    /* frames walked (kept or not) */
	__u64 r[16];       /* the sample's registers (DWARF numbers): first frame only */
	__u64 hash, hash2; /* of the records written (hash_record) */
	__u64 gen;         /* unwind_gen at the walk's start */
	__u64 mm;
	__u32 bp_valid;
	__u32 exact; /* ip is where the frame is, not a return address */
	__u32 end;   /* enum unwind_end + 1 once the walk ended */
	__u32 learn; /* learn_key and learn_vma hold what bpf_find_vma found */
	__u32 find_vma; /* bpf_find_vma calls that found a mapping */
	struct unwind_map_key learn_key;
	struct vma_info learn_vma;
	/* The walk memo (walk_memos) from frame 1 on: */
	__u32 wm_slot;     /* WALK_MEMO_RECORDING: the entry walk_memo_keep fills */
	__u32 wm_state;    /* enum walk_memo_state */
	__u32 wm_words;    /* stack words read from frame 1 on (recorded up to WALK_MEMO_WORDS) */
	__u32 wm_uses_bp;  /* frame 1's rbp was used before one was loaded from the stack */
	__u32 wm_bp_loaded; /* rbp now is the stack word at wm_bp_addr (load_bp) */
	__u32 wm_bp_kept;   /* and that word is among the recorded ones */
	__u64 wm_bp_addr;
	__s32 wm_id;       /* WALK_MEMO_HIT: the stack's id */
	__u32 wm_frames;   /* WALK_MEMO_HIT: the frames of the walk it saved */
	__u32 wm_fp_frames;
	__u32 wm_end;
	__u64 wm_tag, wm_sp, wm_bp; /* frame 1's inputs (walk_memo_entry) */
	__u32 wm_bp_valid;
	__u32 wm_skip; /* a read the walk memo does not record: not kept */
};

/*
 * The walks this CPU's context took lately, from their second frame on.
 * From frame 1 the walk depends only on frame 1's ip, rsp and rbp (when a
 * rule reads rbp before one is restored from the stack), the stack words
 * it reads, and the mappings and tables (the address space and unwind_gen,
 * as map_memo_entry). So an entry keeps those inputs and the stack id the
 * walk ended in: a sample whose frame 1 matches, and whose stack still
 * holds the same words at the same addresses (return addresses, saved
 * registers: compared, not trusted), has that stack without the walk's
 * other frames. A loop's samples differ in their leaf (frame 0, walked and
 * in the count key) and share their callers, most of their frames. Only
 * walks that reached the outermost
 * frame are kept: the other ends may not repeat (a read fault, the mm lock).
 * 16 entries (8 sets of 2 ways) of up to WALK_MEMO_WORDS words: deeper
 * walks are not kept (cpu_scratch's 32 KiB has no room for more).
 */
#define WALK_MEMO_BITS 4

enum walk_memo_state {
	WALK_MEMO_OFF,       /* not checked yet (frame 0), or nothing to record */
	WALK_MEMO_RECORDING, /* missed: the walk records its reads (walk_memos.rec) */
	WALK_MEMO_HIT,
};

struct walk_memo_entry {
	__u64 mm;
	__u64 gen;
	__u64 tag; /* frame 1's ip << 1 | exact */
	__u64 sp;  /* frame 1's */
	__u64 bp;  /* frame 1's, compared when uses_bp */
	__u32 tgid;
	__u32 words; /* valid entries of w; 0: the entry is empty */
	__u32 bp_valid;
	__u32 uses_bp;
	__s32 id;
	__u16 frames; /* the walk's records, as unwind_frames counts them */
	__u16 fp_frames;
	__u32 end; /* enum unwind_end */
	__u32 mru; /* a set's first entry: the way used last */
	struct memo_word w[WALK_MEMO_WORDS];
};

struct walk_memos {
	struct walk_memo_entry e[1 << WALK_MEMO_BITS];
	/* The return addresses the walk read (frame 0's too: recording is
	 * branch-free; they are dropped at frame 1), kept here rather than in
	 * walk_state, which every sample clears. Past WALK_MEMO_WORDS they
	 * wrap, and the walk is not kept. */
	struct memo_word rec[WALK_MEMO_WORDS];
};

/* The mappings (and their files' unwind_files entries) walks on this CPU
 * found lately, by address space and 2 MiB chunk: a hit is two lines of one
 * per-CPU page where unwind_maps and unwind_files cost two hash lookups,
 * cold after the workload ran (a third of a walk's cost on xz). Valid while
 * unwind_gen has not moved: user space moves it after every change, and a
 * walk reads it before its lookups, so an entry filled from a lookup older
 * than a change carries an older generation. */
#define MAP_MEMO_BITS 4

struct map_memo_entry {
	__u64 mm;
	__u64 gen;
	struct vma_info vma;
	__u32 tgid;
	__u32 have_file;
	struct unwind_file file;
};

struct map_memos {
	struct map_memo_entry e[1 << MAP_MEMO_BITS];
};

/* A copy of the part of the user stack the walk reads next. A
 * bpf_probe_read_user costs about the same for 8 bytes as for 1 KiB, and
 * a walk reads upward from the sample's rsp: so reads come from this copy,
 * refilled from the address wanted when the address leaves it:
 * UNWIND_WINDOW bytes, or where that crosses into a page that is not there
 * (past the stack's top), to the end of the address's page. A 30-frame
 * stack then costs a few reads, not 30+; 2 KiB, read across pages, holds a
 * typical walk's frames in one (BENCHMARKS.md, scripts/bench-ab.sh). */
#define UNWIND_WINDOW 2048

struct stack_window {
	__u64 lo, hi; /* the copy holds user addresses [lo, hi); lo == hi: none */
	__u32 reads; /* bpf_probe_read_user calls */
	__u32 slot;  /* the context whose cpu_scratch holds this window */
	__u64 w[UNWIND_WINDOW / 8];
};

/* Rules of recently walked return addresses, per CPU and context (slot):
 * samples of one program mostly repeat their callers, and a hit costs one
 * load where a table search takes several scattered ones (cache and TLB
 * misses, dear under nested paging).
 * A context never nests with itself, so an entry is never seen half
 * written. */
#define UNWIND_MEMO_BITS 10

struct rule_memo {
	__u64 tag; /* (table << 32 | offset) + 1; 0: empty */
	struct unwind_rule rule;
};

struct rule_memos {
	struct rule_memo e[1 << UNWIND_MEMO_BITS];
};

/* The rules of this CPU's last walk, by frame number: a program's samples
 * mostly share their callers, so frame n's return address is usually the
 * last walk's frame n. Its rules lie in a few consecutive lines where the
 * rule memo's lie one per frame, each cold after the workload ran (dear
 * under nested paging). Valid for one address space, process and
 * unwind_gen (as map_memo_entry): an address there names one file offset,
 * so one rule. */
#define LAST_WALK_FRAMES 32

struct last_walk {
	__u64 mm;
	__u64 gen;
	__u32 tgid; /* with mm: a freed mm's address can come back */
	__u32 nvalid; /* entries [0, nvalid) hold this mm's and gen's rules */
	struct {
		__u64 tag; /* ip << 1 | exact */
		struct unwind_rule rule;
	} f[LAST_WALK_FRAMES];
};

/*
 * The ids of the user stacks this CPU's context interned lately, by the
 * walk's two 64-bit hashes and the process. A hit skips user_stack_ids,
 * user_stacks and the compare of the stored stack: cold lines and TLB
 * misses, much of a sample's cost on cache-hostile work. A hit is
 * not compared: two different stacks of one process would need the same
 * 128 bits of two independent hashes, and the process in the key means a
 * process crafting such a stack could only mislabel its own samples. Ids
 * are never reused (user space keeps a drained stack's copy), so an entry
 * never goes stale. 128 entries: the walk memo (walk_memos) answers most
 * samples before it, and its space went to the stack window.
 */
#define STACK_MEMO_BITS 7

struct stack_memo_entry {
	__u64 h, h2;
	__u32 tgid;
	__s32 id; /* 0 with h == 0: empty */
};

struct stack_memo {
	struct stack_memo_entry e[1 << STACK_MEMO_BITS];
};

/*
 * Every per-CPU scratch and memo of a sample, one value per context (slot):
 * one lookup, where each map of its own cost a lookup, and with it a cold
 * line of the map's own struct, at every sample (BENCHMARKS.md,
 * scripts/bench-ab.sh). The parts every sample writes come first, so they
 * share lines; a value is at most 32 KiB.
 */
struct cpu_scratch {
	struct sample_scratch sample;
	struct walk_state walk;
	struct last_walk last;
	struct stack_window win;
	struct walk_memos wmemo;
	struct map_memos maps;
	struct stack_memo smemo;
	struct rule_memos memo;
};

_Static_assert(sizeof(struct cpu_scratch) <= 32768, "a per-CPU value is at most 32 KiB");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct cpu_scratch);
} cpu_scratch SEC(".maps");

#endif /* BPROF_UNWIND_STATE_BPF_H */
