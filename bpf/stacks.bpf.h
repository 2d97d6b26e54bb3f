/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The stacks stage of profile.bpf.c: where kernel and user stacks are
 * stored, each content once under its own id (the ids count-map keys
 * name), and the frame-pointer user stack taken by the kernel's build-ID
 * walk, with its raw-stack cache. The dwarf walk (unwind.bpf.h) hashes
 * its records with hash_record and interns them here too.
 */
#ifndef BPROF_STACKS_BPF_H
#define BPROF_STACKS_BPF_H

#include "current_task.bpf.h"
#include "ids.bpf.h"
#include "kernel.bpf.h"
#include "loop.bpf.h"
#include "profile.h"

/*
 * Kernel stacks, stored by content so that two stacks never share an id
 * (a STACK_TRACE map buckets by hash and drops a colliding stack):
 * kern_stack_ids maps a 64-bit hash of the IPs to an id, kern_stacks holds
 * the content; a hash hit is compared word by word, and a different
 * content is stored under a new id. User space copies entries it reads and
 * deletes them to keep the map small; ids are never reused, so a deleted
 * id stays resolvable from its copy, and a hash whose id was deleted gets
 * a new one.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u32);
	__type(value, struct kern_stack);
} kern_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u64);
	__type(value, __u32);
} kern_stack_ids SEC(".maps");

/* The next kern_stacks id. */
__u32 next_kern_stack_id = 0;

/*
 * User stacks by id. Not a stack-trace map: those are preallocated (16384 x
 * 4 KiB the kernel zeroes at start-up) and bucket build-ID stacks by their
 * raw addresses, so a library swapped in where another was collides with
 * it forever. Entries here are allocated as stacks appear, each under its
 * own id; identical stacks are shared through user_stack_ids (and
 * user_stack_cache). Most stacks fit user_stacks' short values (struct
 * user_stack_short); deeper ones go to user_stacks_deep, whole.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u32);
	__type(value, struct user_stack_short);
} user_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u32);
	__type(value, struct user_stack);
} user_stacks_deep SEC(".maps");

/* The next user_stacks id. */
__u32 next_user_stack_id = 0;

/* Content dedup of user_stacks, as kern_stack_ids: hash of the records → id. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u64);
	__type(value, __u32);
} user_stack_ids SEC(".maps");

/*
 * Turning IPs into (build ID, offset) records costs the kernel a VMA lookup
 * and an ELF note read per frame: most of a sample's cost. A raw frame-pointer
 * walk is cheap, so each sample walks raw first and looks the result up here;
 * only a stack not seen before in this exact address-space layout takes the
 * build-ID walk. LRU: a full cache only costs speed.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, struct ustack_key);
	__type(value, __s32);
} user_stack_cache SEC(".maps");

/*
 * Per-CPU scratch: one raw user stack, one build-ID stack, one kernel stack. One slot per
 * program: an NMI (hardware-cycles sample) can interrupt offcpu_switch on
 * its CPU while it uses its slot.
 */
enum scratch_slot { SCRATCH_ON_CPU, SCRATCH_OFF_CPU, SCRATCH_SLOTS };
_Static_assert(SCRATCH_ON_CPU == ID_ON_CPU && SCRATCH_OFF_CPU == ID_OFF_CPU, "a slot is its id context");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__uint(value_size, BPROF_MAX_STACK_DEPTH * sizeof(__u64));
} raw_user_stack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct user_stack);
} user_stack_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct kern_stack);
} kern_stack_scratch SEC(".maps");

#define USER_STACK_WORDS ((BPROF_UNWIND_DEPTH + 1) * sizeof(struct frame_record) / sizeof(__u64))

/* bpf_loop callbacks over a stack's words: a bounded loop of ~1000
 * iterations is verified once per path into it, which no verifier limit
 * allows for the unwound stack sizes; a callback is verified once. */
struct words_ctx {
	const __u64 *a, *b; /* the frames of two stacks */
	__u64 h; /* 64-bit FNV-1a over whole words, each premixed so that its
		  * high bits reach the low ones */
	__u32 same;
	__u32 nr; /* records to compare */
};

/* One FNV-1a step over a whole word, premixed so that its high bits reach
 * the low ones. */
static __always_inline __u64 fnv_word(__u64 h, __u64 word)
{
	__u64 x = word * 0x9e3779b97f4a7c15ULL;

	return (h ^ x ^ (x >> 32)) * 0x100000001b3ULL;
}

/* Each callback bounds the index by its own array: the verifier needs a
 * constant there, so the user and kernel stacks have one each. */
static long hash_word(__u32 i, struct words_ctx *w)
{
	if (i >= USER_STACK_WORDS)
		return 1;
	w->h = fnv_word(w->h, w->a[i]);
	return 0;
}

/* One callback per COMPARE_BATCH 32-byte records (4 words each): a
 * callback costs more than the compares it holds. 2, not more: each compare
 * is unrolled and verified twice (short and deep stacks), at every load,
 * for a compare that runs only when a stack's hash is already stored. */
#define COMPARE_BATCH 2

static __always_inline long compare_batch(__u32 i, struct words_ctx *w, const __u32 bound)
{
	const struct frame_record *ra = (const void *)w->a, *rb = (const void *)w->b;
	__u32 first = i * COMPARE_BATCH;

	for (__u32 k = 0; k < COMPARE_BATCH; k++) {
		__u32 idx = first + k;
		const __u64 *a, *b;

		if (idx >= w->nr || idx >= bound)
			return 1;
		/* The checked index, not a pointer clang advanced before it. */
		barrier_var(idx);
		if (idx >= bound)
			return 1;
		a = (const __u64 *)&ra[idx];
		b = (const __u64 *)&rb[idx];
		if (a[0] != b[0] || a[1] != b[1] || a[2] != b[2] || a[3] != b[3]) {
			w->same = 0;
			return 1;
		}
	}
	return 0;
}

/* w->b in user_stacks_deep, or in user_stacks (whose values are shorter). */
static long compare_records(__u32 i, struct words_ctx *w)
{
	return compare_batch(i, w, BPROF_UNWIND_DEPTH + 1);
}

static long compare_short_records(__u32 i, struct words_ctx *w)
{
	return compare_batch(i, w, BPROF_SHORT_FRAMES);
}

/* bpf_loop callbacks over the words of a stack of BPROF_MAX_STACK_DEPTH
 * IPs, a kernel stack or a raw user one (see words_ctx): the verifier walks
 * a bounded loop once per iteration, 127 of them here, but a callback
 * once. */
static long hash_ips_word(__u32 i, struct words_ctx *w)
{
	if (i >= BPROF_MAX_STACK_DEPTH)
		return 1;
	w->h = fnv_word(w->h, w->a[i]);
	return 0;
}

static long compare_ips_word(__u32 i, struct words_ctx *w)
{
	if (i >= BPROF_MAX_STACK_DEPTH)
		return 1;
	if (w->a[i] != w->b[i]) {
		w->same = 0;
		return 1;
	}
	return 0;
}

/* A tracepoint calls its one BPF program straight (a static call), several
 * through its iterator, one frame more than the off-CPU skip counts: where
 * an off-CPU stack starts within [traceiter_lo, traceiter_hi), set by user
 * space, it is taken again one frame further. */
__u64 traceiter_lo = 0;
__u64 traceiter_hi = 0;

/* The current kernel stack (skipping `flags & BPF_F_SKIP_FIELD_MASK` frames)
 * as a kern_stacks id: the id of the same content when stored, else a new
 * one. -EFAULT: no kernel stack (a user-mode sample); -E2BIG: map full. */
static __always_inline __s32 kern_stack_id(void *ctx, struct profile_stats *st, __u64 flags, __u32 slot,
					    const int open)
{
	struct words_ctx w = { .h = 0xcbf29ce484222325ULL };
	struct kern_stack *s, *old;
	__u32 *idp, words;
	__s32 id;
	long n;

	s = bpf_map_lookup_elem(&kern_stack_scratch, &slot);
	if (!s)
		return -ENOMEM;
	/* bpf_get_stack zeroes the buffer past the frames it copies. */
	n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), flags);
	if (slot == SCRATCH_OFF_CPU && n > 0 && s->ips[0] >= traceiter_lo && s->ips[0] < traceiter_hi)
		n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), flags + 1);
	if (n <= 0)
		return n ? n : -EFAULT;
	words = n / sizeof(__u64);
	w.a = s->ips;
	LOOP(open, words, BPROF_MAX_STACK_DEPTH, hash_ips_word, &w);
	idp = bpf_map_lookup_elem(&kern_stack_ids, &w.h);
	if (idp) {
		id = *idp;
		old = bpf_map_lookup_elem(&kern_stacks, &id);
		if (old) {
			/* Both are zero past their frames and no kernel IP is 0:
			 * the same first `words` and a 0 after them is the same
			 * stack. The words past it are never touched. */
			w.b = old->ips;
			w.same = 1;
			LOOP(open, words < BPROF_MAX_STACK_DEPTH ? words + 1 : words, BPROF_MAX_STACK_DEPTH,
			     compare_ips_word, &w);
			if (w.same)
				return id;
			__sync_fetch_and_add(&st->stack_collisions, 1);
		}
	}
	n = take_id(&next_kern_stack_id, ID_KERN, slot, open);
	if (n < 0)
		return -E2BIG;
	id = n;
	if (bpf_map_update_elem(&kern_stacks, &id, s, BPF_NOEXIST))
		return -E2BIG;
	__sync_fetch_and_add(&st->kern_stacks_stored, 1);
	/* A collision keeps the first content's mapping; a deleted id is
	 * replaced. */
	if (!idp || !bpf_map_lookup_elem(&kern_stacks, idp))
		bpf_map_update_elem(&kern_stack_ids, &w.h, &id, BPF_ANY);
	return id;
}

/* The unwinder's hashes of one record, per frame as it is written. The
 * first takes its first word (status and the build ID's first 4 bytes) and
 * its offset: cheaper than all 4 words, and as good there, since a hit in
 * user_stack_ids is compared whole (intern_user_stack). The second, with
 * other constants, takes all 4 words: with the first it keys the per-CPU
 * stack memo, whose hits are not compared (see stack_memo). */
static __always_inline void hash_record(__u64 *h, __u64 *h2, const __u64 *r)
{
	__u64 x;

	*h = fnv_word(fnv_word(*h, r[0]), r[3]);
	for (int k = 0; k < 4; k++) {
		x = r[k] * 0xc2b2ae3d27d4eb4fULL;
		*h2 = (*h2 ^ x ^ (x >> 29)) * 0xff51afd7ed558ccdULL;
	}
}

/* 1 when user stack `id` is stored and holds the same records as `w->a`
 * (w->nr of them); sets *stored when it is stored at all. */
static __always_inline int same_user_stack(__s32 id, struct words_ctx *w, int *stored, const int open)
{
	__u32 batches = (w->nr + COMPARE_BATCH - 1) / COMPARE_BATCH;

	w->same = 1;
	if (id & BPROF_DEEP_STACK_ID) {
		struct user_stack *old = bpf_map_lookup_elem(&user_stacks_deep, &id);

		*stored = !!old;
		if (!old || old->nr != w->nr)
			return 0;
		w->b = (__u64 *)old->frames;
		/* (An unwound stack's records, up to BPROF_UNWIND_DEPTH + 1.) */
		LOOP(open, batches, (BPROF_UNWIND_DEPTH + COMPARE_BATCH) / COMPARE_BATCH, compare_records, w);
	} else {
		struct user_stack_short *old = bpf_map_lookup_elem(&user_stacks, &id);

		*stored = !!old;
		if (!old || old->nr != w->nr)
			return 0;
		w->b = (__u64 *)old->frames;
		LOOP(open, batches, (BPROF_SHORT_FRAMES + COMPARE_BATCH - 1) / COMPARE_BATCH, compare_short_records,
		     w);
	}
	return w->same;
}

/* Stores the `n` bytes of records in `us` under the id of the same content
 * when stored, else under a new id. Returns the id, or a negative error
 * (-E2BIG: the stack map is full). */
static __always_inline __s32 intern_user_stack(struct profile_stats *st, struct user_stack *us, long n,
						 const __u64 *hash, __u32 slot, const int open)
{
	struct words_ctx w = { .a = (__u64 *)us->frames, .h = 0xcbf29ce484222325ULL };
	int stored = 0;
	__u32 *idp, words;
	__s32 id;

	us->nr = n / sizeof(us->frames[0]);
	words = n / sizeof(__u64);
	if (words > USER_STACK_WORDS)
		words = USER_STACK_WORDS;
	/* The unwinder hashes records as it writes them. */
	if (hash)
		w.h = *hash;
	else
		LOOP(open, words, BPROF_MAX_STACK_DEPTH * sizeof(struct frame_record) / sizeof(__u64), hash_word, &w);
	w.nr = us->nr;
	idp = bpf_map_lookup_elem(&user_stack_ids, &w.h);
	if (idp) {
		id = *idp;
		if (same_user_stack(id, &w, &stored, open))
			return id;
		if (stored)
			__sync_fetch_and_add(&st->stack_collisions, 1);
	}
	n = take_id(&next_user_stack_id, ID_USER, slot, open);
	id = n;
	if (n < 0 || n >= BPROF_DEEP_STACK_ID)
		return -E2BIG; /* a billion stacks: ids would run into the flag */
	if (us->nr > BPROF_SHORT_FRAMES) {
		id |= BPROF_DEEP_STACK_ID;
		n = bpf_map_update_elem(&user_stacks_deep, &id, us, BPF_NOEXIST);
	} else {
		/* The value is us's first BPROF_SHORT_FRAMES records. */
		n = bpf_map_update_elem(&user_stacks, &id, us, BPF_NOEXIST);
	}
	if (n)
		return n;
	__sync_fetch_and_add(&st->user_stacks_stored, 1);
	/* A colliding hash keeps its stored stack; one whose stack user space
	 * deleted names the new one. */
	if (!stored)
		bpf_map_update_elem(&user_stack_ids, &w.h, &id, BPF_ANY);
	return id;
}

/* 6.4 to 6.12 (per-VMA locks, before mm_lock_seq became a seqcount): a
 * plain int that moves at every mmap_write_unlock, as the seqcount does. */
struct mm_struct___intseq {
	int mm_lock_seq;
} __attribute__((preserve_access_index));

/* The address space's layout generation, when the kernel keeps one: 0 when
 * it does not (before 6.4), else 1 with *seq set. */
static __always_inline int layout_seq(struct mm_struct *mm, __u32 *seq)
{
	if (bpf_core_field_exists(mm->mm_lock_seq.sequence)) {
		*seq = MM_FIELD(mm, mm_lock_seq.sequence);
		return 1;
	}
	if (bpf_core_field_exists(((struct mm_struct___intseq *)mm)->mm_lock_seq)) {
		*seq = BPF_CORE_READ((struct mm_struct___intseq *)mm, mm_lock_seq);
		return 1;
	}
	return 0;
}

/*
 * Kernels before 6.4 keep no layout generation, so bprof keeps one per
 * address space: the syscalls that can unmap or move code (mmap, munmap,
 * mremap, shmat, shmdt, remap_file_pages) mark their mm busy on entry and
 * give it a fresh generation on exit (from counters that never hand out a
 * value twice, ids.bpf.h, so a generation is never reused, even after an
 * LRU eviction). A sample uses the cache only
 * when its mm is not busy. exec is covered by exec_id in the key.
 * User space attaches layout_enter/layout_exit to those tracepoints and then
 * sets layout_gens_on, only on kernels without mm_lock_seq.
 */
struct layout_gen {
	__u32 busy; /* threads inside one of the syscalls */
	__u32 gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct mm_struct * */
	__type(value, struct layout_gen);
} layout_gens SEC(".maps");

__u32 next_layout_gen = 1;
__u32 layout_gens_on = 0;

/* The mm's generation entry; a new one starts at a fresh generation.
 * Generations come from per-CPU counters on every kernel (ids.bpf.h): the
 * layout tracepoints hand them out too, and must load without atomic
 * fetch. */
static __always_inline struct layout_gen *layout_gen_of(__u64 mm, __u32 ctx)
{
	struct layout_gen *g = bpf_map_lookup_elem(&layout_gens, &mm), fresh = {};
	__s64 gen;

	if (g)
		return g;
	gen = take_id(&next_layout_gen, ID_LAYOUT, ctx, 1);
	if (gen < 0)
		return 0;
	fresh.gen = gen;
	bpf_map_update_elem(&layout_gens, &mm, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&layout_gens, &mm);
}

/* Stores the current task's user stack as build-ID records (the kernel's
 * frame-pointer walk). Returns the id, or a negative error. */
static __always_inline __s32 store_user_stack(void *ctx, struct profile_stats *st, __u32 slot, const int open)
{
	struct user_stack *us;
	long n;

	us = bpf_map_lookup_elem(&user_stack_scratch, &slot);
	if (!us)
		return -ENOMEM;
	n = bpf_get_stack(ctx, us->frames, BPROF_MAX_STACK_DEPTH * sizeof(us->frames[0]),
			  BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	if (n <= 0)
		return n ? n : -EFAULT;
	return intern_user_stack(st, us, n, 0, slot, open);
}

#endif /* BPROF_STACKS_BPF_H */
