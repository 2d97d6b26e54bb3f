/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CPython walker's state (see pyframes.bpf.h): the maps user space and
 * the walk share (processes, threads' cached thread states, code objects
 * announced, stacks by content), the per-CPU walk with its window onto the
 * thread's frames, and the bounded reads everything else goes through.
 */
#ifndef BPROF_PYFRAMES_STATE_BPF_H
#define BPROF_PYFRAMES_STATE_BPF_H

#include "kernel.bpf.h"
#include "profile.h"
#include "profile_stats.bpf.h"
#include "pyframes.h"
#include "stacks.bpf.h"

/* FRAME_OWNED_BY_CSTACK in 3.12 and 3.13: the shim frame of an eval call. */
#define PY_OWNED_BY_CSTACK 3
/* PyASCIIObject.hash and PyBytesObject.ob_shash, 3.10 to 3.13. */
#define PY_CACHED_HASH 24

/* Filled by user space as it learns Python processes; an exec or the
 * process's end removes its entry (py_exec, py_exit). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* A thread's state, as the last search found it (0 with `at`: none, at
 * that time). LRU: a thread evicted is searched for again. */
struct py_thread {
	__u64 tstate;
	__u64 at;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* tgid << 32 | tid */
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* Code objects announced, so each is sent once (LRU: one evicted is sent
 * again, user space keeps the first). */
struct py_code_key {
	__u32 tgid;
	__u32 pad;
	__u64 code;
	__u64 id;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct py_code_key);
	__type(value, __u8);
} py_codes_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} py_events SEC(".maps");

/* Python stacks by id (from 1: 0 in a key is "none"), stored by content:
 * py_stack_ids maps a hash of a process's stack to its id and a second,
 * independent hash, which a hit must match (each frame enters both as one
 * 64-bit word of its code, identity and instruction: two different stacks
 * of one process sharing both are not to be expected, and a process that
 * crafted such a pair could only mislabel its own samples). The hashes
 * take the process: each process announces its own code objects. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u32);
	__type(value, struct py_stack_short);
} py_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u32);
	__type(value, struct py_stack);
} py_stacks_deep SEC(".maps");

struct py_stack_ref {
	__u64 h2;
	__s32 id;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u64);
	__type(value, struct py_stack_ref);
} py_stack_ids SEC(".maps");

__u32 next_py_stack_id = 1;

/* The copies one walk reads: PY_SLOTS of at most PY_SPAN bytes. */
#define PY_SPAN 4096
#define PY_SLOTS 2
#define PY_WIN (PY_SLOTS * PY_SPAN)
/* After the slots, a copy of the C stack around 3.12's innermost _PyCFrame:
 * the eval call's shim frame is a local of the same activation, read with
 * it rather than alone. */
#define PY_CST 1024
#define PY_BUF (PY_WIN + PY_CST)
#define PY_AT_FAIL 0xffffffffU
/* py_at: read the object alone, or the page that holds it. */
#define PY_ALONE 0
#define PY_PAGE 1
/* A search of the interpreters' thread lists for the thread's state. */
struct py_search {
	__u64 interp;
	__u64 ts;
	struct py_thread entry; /* py_threads' value: what was found, when */
	__u32 interps;
	__u32 bad;
};

/* Code objects (and strings) a walk keeps the identity of: recursion
 * repeats them, a module's functions share their file. */
#define PY_MEMO 8

struct py_code_memo {
	__u64 code, id;
};

#define PY_CO_BUF 160
#define PY_STR_BUF 64
/* py_print reads this much at once: most names, files and line tables
 * whole, so their last bytes need no read of their own. */
#define PY_PRINT_BUF 192

/* Per CPU, what the last walk leaves the next: the frames it recorded
 * (w->stack, not cleared between walks) keep their code objects'
 * identities by depth, valid while the process's code object counter
 * (co_version's source) stays where it was when they were read: no code
 * object made since, so none at a freed one's address. A program's
 * samples mostly share their callers: frame n's code object is the last
 * walk's frame n's, and its identity is in the line the walk writes frame
 * n to anyway. */
struct py_last_walk {
	__u64 mm;
	__u32 tgid;
	__u32 gen;   /* 0: none valid */
	__u32 valid; /* frames of w->stack that hold identities under gen */
	__u32 pad;
	/* The thread state the last walk found, and its thread's py_threads
	 * key: the same thread's next sample skips that lookup. */
	__u64 thread, tstate;
};

/* Per CPU, the stacks stored lately by their hashes: a hit skips
 * py_stack_ids (a cold hash lookup). */
#define PY_STACK_MEMO_BITS 6

struct py_stack_memo {
	__u64 h1, h2;
	__s32 id;
	__u32 pad;
};

/* What one walk reads, per CPU and context (one slot per scratch_slot). */
struct py_walk {
	struct py_proc proc; /* the process's entry, copied */
	__u64 start[PY_SLOTS]; /* the user address each slot's copy starts at */
	__u32 len[PY_SLOTS];   /* and its length; 0: none */
	/* The data stack's frames the last PY_PAGE read copied, at w->win +
	 * fast_at: the frames in it skip py_at's search (fast_len 0: none). */
	__u64 fast_lo;
	__u32 fast_len, fast_at;
	__u64 cst_start;       /* the C stack copy's user address (PY_CST bytes) */
	__u32 cst_len;         /* PY_CST, or 0: none */
	__u32 cst_pad;
	__u64 frame;          /* the frame to read next */
	/* The thread's current data stack chunk, [chunk, limit) (0: not
	 * known), whether a read took its frames at once yet, and whether the
	 * walk found frames of the thread's earlier chunks (outside it). */
	__u64 chunk, limit;
	__u32 wide, older;
	__u64 want;           /* the thread's id as its thread state keeps it */
	__u64 ts;             /* the thread state */
	__u64 mm;             /* the address space */
	__u64 h1, h2;         /* of the frames recorded (py_hash) */
	__u32 gen;            /* the code object counter at the walk's start; 0: none */
	__u32 gen_pad;
	struct py_search search;
	struct py_stack_ref ref; /* py_stack_ids' value for a new stack */
	__u64 t0; /* when the walk began */
	struct py_code_memo memo[PY_MEMO];
	struct py_code_memo prints[PY_MEMO]; /* strings' fingerprints, by address */
	__u32 next_slot;
	__u32 next_memo;
	__u32 next_print;
	__u32 pad;
	__u32 tgid;
	__u32 end;  /* enum py_end + 1 once ended */
	__u32 why;  /* enum py_end of a code object that failed */
	__u32 dropped; /* an announcement found the ring full */
	__u32 stored;  /* py_intern stored the stack anew */
	__u32 pad2;
	struct py_stack stack;
	__u8 co[PY_CO_BUF];  /* the code object read last */
	__u8 s[PY_STR_BUF];  /* the string or bytes object read last */
	__u8 pr[PY_PRINT_BUF]; /* the one py_print read last */
	__u8 win[PY_BUF] __attribute__((aligned(8)));
	struct py_last_walk last;
	struct py_stack_memo stacks[1 << PY_STACK_MEMO_BITS];
};

_Static_assert(sizeof(struct py_walk) <= 32768, "a per-CPU value is at most 32 KiB");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct py_walk);
} py_scratch SEC(".maps");

/* One more of py_stats' `field` (a map value holds no pointer to keep). */
#define PY_COUNT(field, n)                                           \
	do {                                                         \
		struct profile_stats *_st = stats();                 \
		if (_st)                                             \
			__sync_fetch_and_add(&_st->py.field, n);     \
	} while (0)

/* Where a user-space object can be: not null, below the kernel half,
 * 8-aligned (CPython's allocators align every object). */
static __always_inline int py_ptr_ok(__u64 p)
{
	return p >= 4096 && p < (1ULL << 47) && !(p & 7);
}

/* Where the `len` bytes of user memory at `addr` are in w->win, read now
 * if no slot holds them: into the next slot, alone or (PY_PAGE) with what
 * lies below them in their page when they lie in one; the first frame in
 * the thread's current data stack chunk with what lies below it down to
 * the chunk's base, up to the whole window: one read for a stack's
 * frames, not one a page. PY_AT_FAIL when they cannot be read. Inline: as
 * a function of its own it took the deepest chain of calls past 6.1's 512
 * bytes of stack. */
static __always_inline __u32 py_at(struct py_walk *w, __u64 addr, __u32 len, __u32 how)
{
	__u64 page = addr & ~(__u64)(PY_SPAN - 1), lo;
	__u32 k, n;
	long err;

	if (!w || !len || len > PY_SPAN)
		return PY_AT_FAIL;
	for (k = 0; k < PY_SLOTS; k++)
		if (w->len[k] && addr >= w->start[k] && addr + len <= w->start[k] + w->len[k])
			return k * PY_SPAN + (__u32)(addr - w->start[k]);
	/* Across the two slots of one read (a frame on a page boundary). */
	if (w->len[0] == PY_SPAN && w->len[1] && w->start[1] == w->start[0] + PY_SPAN &&
	    addr >= w->start[0] && addr + len <= w->start[1] + w->len[1])
		return (__u32)(addr - w->start[0]);
	if (w->cst_len && addr >= w->cst_start && addr + len <= w->cst_start + PY_CST)
		return PY_WIN + (__u32)(addr - w->cst_start);
	if (how == PY_PAGE && !w->wide && addr >= w->chunk && addr + len <= w->limit) {
		w->wide = 1;
		/* Less than the window: the mask below then changes nothing
		 * and bounds n for verifiers before 6.18, which lose a check's
		 * bounds when clang spills n and checks a copy. */
		lo = addr + len - w->chunk >= PY_WIN ? addr + len - (PY_WIN - 8) : w->chunk;
		n = (__u32)(addr + len - lo) & (PY_WIN - 1);
		if (n > PY_SPAN) {
			w->len[0] = 0;
			w->len[1] = 0;
			w->fast_len = 0;
			err = bpf_probe_read_user(w->win, n, (void *)lo);
			PY_COUNT(reads, 1);
			if (!err) {
				w->start[0] = lo;
				w->len[0] = PY_SPAN;
				w->start[1] = lo + PY_SPAN;
				w->len[1] = n - PY_SPAN;
				w->fast_lo = lo;
				w->fast_len = n;
				w->fast_at = 0;
				return (__u32)(addr - lo);
			}
		} else {
			/* All of it within a page's size, from lo (nothing below
			 * the chunk's base): the read below. */
			page = lo;
		}
	}
	k = w->next_slot++ & (PY_SLOTS - 1);
	w->len[k] = 0;
	/* The fast copy goes with the slot it lies in (or across). */
	if (w->fast_at == k * PY_SPAN || w->fast_len > PY_SPAN)
		w->fast_len = 0;
	PY_COUNT(reads, 1);
	if (how == PY_PAGE && addr + len <= page + PY_SPAN) {
		/* The page up to the frame's end: its callers lie below it in
		 * the data stack, never above (copying costs by the byte). */
		n = (__u32)(addr - page) + len;
		/* 1 to PY_SPAN by the test above: masked rather than checked
		 * again, as 5.10's verifier loses the bounds of a checked
		 * length clang spilled. */
		barrier_var(n);
		n = ((n - 1) & (PY_SPAN - 1)) + 1;
		if (!bpf_probe_read_user(&w->win[k * PY_SPAN], n, (void *)page)) {
			w->start[k] = page;
			w->len[k] = n;
			w->fast_lo = page;
			w->fast_len = n;
			w->fast_at = k * PY_SPAN;
			return k * PY_SPAN + (__u32)(addr - page);
		}
	}
	n = len;
	/* The checked length, not one clang merged the checks of. */
	barrier_var(n);
	if (n > PY_SPAN)
		return PY_AT_FAIL;
	if (bpf_probe_read_user(&w->win[k * PY_SPAN], n, (void *)addr))
		return PY_AT_FAIL;
	w->start[k] = addr;
	w->len[k] = n;
	return k * PY_SPAN;
}

/* A field at byte `field` of an object py_at placed at `at`. */
static __always_inline __u64 py_u64(struct py_walk *w, __u32 at, __u32 field)
{
	__u32 i = at + field;

	if (i > PY_BUF - 8)
		return 0;
	return *(__u64 *)__builtin_assume_aligned(&w->win[i], 8);
}

static __always_inline __u32 py_u32(struct py_walk *w, __u32 at, __u32 field)
{
	__u32 i = at + field;

	if (i > PY_BUF - 4)
		return 0;
	return *(__u32 *)__builtin_assume_aligned(&w->win[i], 4);
}

static __always_inline __u8 py_u8(struct py_walk *w, __u32 at, __u32 field)
{
	__u32 i = at + field;

	if (i > PY_BUF - 1)
		return 0;
	return w->win[i];
}

/* A field of a buffer read whole (w->co, w->s): bounded by the buffer. */
static __always_inline __u64 py_b64(const __u8 *buf, __u32 off, const __u32 size)
{
	if (off > size - 8)
		return 0;
	return *(const __u64 *)(buf + off);
}

static __always_inline __u32 py_b32(const __u8 *buf, __u32 off, const __u32 size)
{
	if (off > size - 4)
		return 0;
	return *(const __u32 *)(buf + off);
}

/* Reads n (at most cap) bytes of user memory at src into dst. */
static __always_inline int py_read(void *dst, __u32 n, const __u32 cap, __u64 src)
{
	if (n > cap)
		n = cap;
	if (!n)
		return -1;
	return bpf_probe_read_user(dst, n, (const void *)src);
}

static __always_inline long py_stop(struct py_walk *w, enum py_end why)
{
	w->end = why + 1;
	return 1;
}

/* bpf_loop's context must be on the stack: it points to the walk. */
struct py_step_ctx {
	struct py_walk *w;
};

/* One word into the walk's two stack hashes. */
static __always_inline void py_hash(struct py_walk *w, __u64 word)
{
	__u64 x = word * 0xc2b2ae3d27d4eb4fULL;

	w->h1 = fnv_word(w->h1, word);
	w->h2 = (w->h2 ^ x ^ (x >> 29)) * 0xff51afd7ed558ccdULL;
}

#endif /* BPROF_PYFRAMES_STATE_BPF_H */
