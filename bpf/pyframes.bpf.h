/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frames, walked in the sample program. For a process user space
 * learned runs a known interpreter (py_procs), the sampled thread's thread
 * state is found on the interpreter's thread list (by its kernel tid, or on
 * 3.10 its pthread id, the task's TLS base), cached per thread and checked
 * again at every use; its frame chain is walked from the current frame,
 * one py_frame per Python function call (the code object's address, an
 * identity hash of what it holds, the instruction, and whether the frame
 * began a C-level call of the eval loop), and stored by content in
 * py_stacks, whose id goes into the count key beside the native stacks'.
 * User space places each run of Python frames where its
 * _PyEval_EvalFrameDefault activation stands in the native stack.
 *
 * A thread's frames lie close together (from 3.11 in its data stack): the
 * walk reads the page of the frame it wants into a per-CPU copy (py_at),
 * which holds the next frames too, and takes their fields from there.
 * Other objects are read alone (a page read costs ~10 small ones here),
 * each once a walk however often it recurs.
 *
 * A code object's identity is its address and a hash of what it holds:
 * its pointers, first line and argument count, and 3.12+'s co_version
 * (numbered as code objects are made), or before 3.12 (no co_version) a
 * fingerprint of its name, file and line table (length, cached hash, first
 * and last bytes): another code object made at a freed one's address, with
 * its strings at the freed strings' addresses, has another identity. From
 * 3.12 identities are kept per CPU while the counter co_version is taken
 * from has not moved (py_code_id): a steady program's walks then read
 * no code object at all.
 *
 * The process's memory is hostile: every read is bounded, every pointer
 * checked (user range, aligned), every code object's type compared with
 * PyCode_Type; a chain that does not hold ends the walk, counted by why
 * (py_stats.end), keeping the frames read so far.
 *
 * A stack stored for the first time announces its code objects not
 * announced yet to user space (py_events) with their names and line
 * tables, copied here while the process lives: its names survive the
 * process's exit.
 *
 * Uses stacks.bpf.h's scratch slots and fnv_word.
 */
#ifndef BPROF_PYFRAMES_BPF_H
#define BPROF_PYFRAMES_BPF_H

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

/* Per CPU, the identities of the code objects of the last walk, by
 * depth, valid while the process's code object counter (co_version's
 * source) stays where it was when they were read: no code object made
 * since, so none at a freed one's address. A program's samples mostly
 * share their callers: frame n's code object is the last walk's frame n's,
 * whose identity lies in a few adjacent lines (each cold line a sample
 * touches costs ~60 ns here). */
#define PY_LAST 64

struct py_last_walk {
	__u64 mm;
	__u32 tgid;
	__u32 gen; /* 0: none valid */
	struct py_code_memo f[PY_LAST];
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
	__u64 frame;          /* the frame to read next */
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
	__u8 win[PY_WIN];
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
 * lies below them in their page when they lie in one. PY_AT_FAIL when they
 * cannot be read. Inline: as a function of its own it took the deepest
 * chain of calls past 6.1's 512 bytes of stack. */
static __always_inline __u32 py_at(struct py_walk *w, __u64 addr, __u32 len, __u32 how)
{
	__u64 page = addr & ~(__u64)(PY_SPAN - 1);
	__u32 k, n;

	if (!w || !len || len > PY_SPAN)
		return PY_AT_FAIL;
	for (k = 0; k < PY_SLOTS; k++)
		if (w->len[k] && addr >= w->start[k] && addr + len <= w->start[k] + w->len[k])
			return k * PY_SPAN + (__u32)(addr - w->start[k]);
	k = w->next_slot++ & (PY_SLOTS - 1);
	w->len[k] = 0;
	PY_COUNT(reads, 1);
	if (how == PY_PAGE && addr + len <= page + PY_SPAN) {
		/* The page up to the frame's end: its callers lie below it in
		 * the data stack, never above (copying costs by the byte). */
		n = (__u32)(addr - page) + len;
		barrier_var(n);
		if (n <= PY_SPAN && !bpf_probe_read_user(&w->win[k * PY_SPAN], n, (void *)page)) {
			w->start[k] = page;
			w->len[k] = n;
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

	if (i > PY_WIN - 8)
		return 0;
	return *(__u64 *)&w->win[i];
}

static __always_inline __u32 py_u32(struct py_walk *w, __u32 at, __u32 field)
{
	__u32 i = at + field;

	if (i > PY_WIN - 4)
		return 0;
	return *(__u32 *)&w->win[i];
}

static __always_inline __u8 py_u8(struct py_walk *w, __u32 at, __u32 field)
{
	__u32 i = at + field;

	if (i > PY_WIN - 1)
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

/* Whether the thread state at ts is this thread's (w->want). */
static __always_inline int py_ts_is_ours(struct py_walk *w, __u64 ts)
{
	__u32 at;

	if (!py_ptr_ok(ts))
		return 0;
	at = py_at(w, ts, w->proc.o.ts_read, PY_ALONE);
	if (at == PY_AT_FAIL)
		return 0;
	return py_u64(w, at, w->proc.o.ts_thread_id) == w->want && py_u64(w, at, w->proc.o.ts_interp) != 0;
}

/* A search of the interpreters' thread lists (a bpf_loop callback over
 * w->search: one thread state or interpreter a step). */
static long py_search_step(__u32 i, struct py_step_ctx *c)
{
	struct py_walk *w = c->w;
	struct py_search *s = &w->search;
	__u64 next = 0;
	__u32 at;

	if (!s->ts) {
		/* The next interpreter's threads. */
		if (!s->interp || s->interps >= PY_MAX_INTERPS)
			return 1;
		s->interps++;
		if (!py_ptr_ok(s->interp) ||
		    bpf_probe_read_user(&s->ts, 8, (void *)(s->interp + w->proc.o.interp_threads)) ||
		    bpf_probe_read_user(&next, 8, (void *)(s->interp + w->proc.o.interp_next))) {
			s->bad = 1;
			return 1;
		}
		s->interp = next;
		return 0;
	}
	if (py_ts_is_ours(w, s->ts)) {
		s->entry.tstate = s->ts;
		return 1;
	}
	at = py_ptr_ok(s->ts) ? py_at(w, s->ts, w->proc.o.ts_read, PY_ALONE) : PY_AT_FAIL;
	next = at == PY_AT_FAIL ? 0 : py_u64(w, at, w->proc.o.ts_next);
	if (at == PY_AT_FAIL || next == s->ts) {
		s->bad = 1;
		return 1;
	}
	s->ts = next;
	return 0;
}

/* The thread state of the current thread (the walk of scratch slot
 * `slot`, key tgid << 32 | tid): from py_threads (checked again), else
 * searched for; 0 when it has none. Its state lives in the walk, not on
 * the stack: this frame is in the deepest chain of calls (offcpu_switch's,
 * with bpf_loop's callbacks), which 6.1 holds to 512 bytes. */
__noinline __u64 py_thread_state(__u32 slot, __u64 key)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_step_ctx step = { .w = w };
	struct py_thread *t;

	if (!w)
		return 0;
	t = bpf_map_lookup_elem(&py_threads, &key);
	if (t && t->tstate && py_ts_is_ours(w, t->tstate))
		return t->tstate;
	w->search.entry.at = bpf_ktime_get_ns();
	if (t && !t->tstate && w->search.entry.at - t->at < PY_RETRY_NS)
		return 0;
	PY_COUNT(searches, 1);
	w->search.ts = 0;
	w->search.interps = 0;
	w->search.bad = 0;
	w->search.entry.tstate = 0;
	if (bpf_probe_read_user(&w->search.interp, 8, (void *)(w->proc.runtime + w->proc.o.rt_interp_head)))
		return 0;
	bpf_loop(PY_MAX_THREADS + PY_MAX_INTERPS, py_search_step, &step, 0);
	/* A torn list proves nothing about this thread: searched again. */
	if (w->search.entry.tstate || !w->search.bad)
		bpf_map_update_elem(&py_threads, &key, &w->search.entry, BPF_ANY);
	return w->search.entry.tstate;
}

/* A fingerprint of the str (`bytes`: the bytes object) at p: its length,
 * cached hash, first and last 8 bytes; 0 when it cannot be read. Kept per
 * walk by address. A global function, verified once. */
__noinline __u64 py_print(struct py_walk *w, __u64 p, int bytes)
{
	struct py_offsets *o;
	__u64 len, data, h, first = 0, last = 0;
	__u32 state, k, off, got = PY_PRINT_BUF;

	if (!w || !py_ptr_ok(p))
		return 0;
	for (k = 0; k < PY_MEMO; k++)
		if (k < w->next_print && w->prints[k].code == p)
			return w->prints[k].id;
	o = &w->proc.o;
	if (bpf_probe_read_user(w->pr, PY_PRINT_BUF, (void *)p)) {
		/* The object may end just below an unmapped page. */
		got = PY_STR_BUF;
		if (bpf_probe_read_user(w->pr, PY_STR_BUF, (void *)p))
			return 0;
	}
	if (bytes) {
		if (py_b64(w->pr, 8, PY_PRINT_BUF) != w->proc.bytes_type)
			return 0;
		len = py_b64(w->pr, o->bytes_size, PY_PRINT_BUF);
		off = o->bytes_data;
	} else {
		if (py_b64(w->pr, 8, PY_PRINT_BUF) != w->proc.str_type)
			return 0;
		state = py_b32(w->pr, o->str_state, PY_PRINT_BUF);
		k = (state >> 2) & 7;
		if (!((state >> 5) & 1))
			return 0;
		len = py_b64(w->pr, o->str_length, PY_PRINT_BUF) * k;
		off = ((state >> 6) & 1) ? o->str_ascii_size : o->str_compact_size;
	}
	if (len > (1 << 24))
		return 0;
	data = p + off;
	h = fnv_word(len, py_b64(w->pr, PY_CACHED_HASH, PY_PRINT_BUF));
	/* The first and last 8 bytes (files differ at their end), from the
	 * read when they are in it, else read on their own. */
	if (len >= 8) {
		first = off + 8 <= got ? py_b64(w->pr, off, PY_PRINT_BUF) : 0;
		if (off + len <= got)
			last = py_b64(w->pr, off + len - 8, PY_PRINT_BUF);
		else if (bpf_probe_read_user(&last, 8, (void *)(data + len - 8)))
			return 0;
	} else if (len) {
		if (off + 8 <= got)
			first = py_b64(w->pr, off, PY_PRINT_BUF);
		else if (bpf_probe_read_user(&first, 8, (void *)data))
			return 0;
		first &= (1ULL << (len * 8)) - 1;
	}
	h = fnv_word(fnv_word(h, first), last);
	h |= !h;
	k = w->next_print++ & (PY_MEMO - 1);
	w->prints[k].code = p;
	w->prints[k].id = h;
	return h;
}

/* The identity of the code object at `code`, frame n (from the last
 * walk or this walk's memo, else read into w->co): 0, with w->why set,
 * when it is not one or cannot be read. A global function, verified once. */
__noinline __u64 py_code_id(struct py_walk *w, __u64 code, __u32 n)
{
	struct py_code_memo *last = 0;
	struct py_offsets *o;
	__u64 id, version = 0, name, file, table, p;
	__u32 k;

	if (!w)
		return 0;
	if (w->gen && n < PY_LAST) {
		last = &w->last.f[n & (PY_LAST - 1)];
		if (last->code == code && last->id && w->last.gen == w->gen)
			return last->id;
	}
	for (k = 0; k < PY_MEMO; k++)
		if (k < w->next_memo && w->memo[k].code == code)
			goto found;
	goto read;
found:
	id = w->memo[k & (PY_MEMO - 1)].id;
	goto keep;
read:
	o = &w->proc.o;
	if (py_read(w->co, o->co_read, PY_CO_BUF, code)) {
		w->why = PY_END_READ;
		return 0;
	}
	if (py_b64(w->co, 8, PY_CO_BUF) != w->proc.code_type) {
		w->why = PY_END_NOT_CODE;
		return 0;
	}
	if (o->co_version)
		version = py_b32(w->co, o->co_version, PY_CO_BUF);
	name = py_b64(w->co, o->co_name, PY_CO_BUF);
	file = py_b64(w->co, o->co_filename, PY_CO_BUF);
	table = py_b64(w->co, o->co_linetable, PY_CO_BUF);
	id = fnv_word(0xcbf29ce484222325ULL, name);
	id = fnv_word(id, file);
	id = fnv_word(id, table);
	id = fnv_word(id, (__u64)py_b32(w->co, o->co_firstlineno, PY_CO_BUF) << 32 |
				  py_b32(w->co, o->co_argcount, PY_CO_BUF));
	if (version) {
		id = fnv_word(id, version);
	} else {
		p = py_print(w, name, 0);
		id = p ? fnv_word(id, p) : 0;
		p = id ? py_print(w, file, 0) : 0;
		id = p ? fnv_word(id, p) : 0;
		p = id ? py_print(w, table, 1) : 0;
		id = p ? fnv_word(id, p) : 0;
		if (!id) {
			w->why = PY_END_READ;
			return 0;
		}
	}
	id |= !id;
	k = w->next_memo++ & (PY_MEMO - 1);
	w->memo[k].code = code;
	w->memo[k].id = id;
keep:
	if (last) {
		last->code = code;
		last->id = id;
	}
	return id;
}

/* One word into the walk's two stack hashes. */
static __always_inline void py_hash(struct py_walk *w, __u64 word)
{
	__u64 x = word * 0xc2b2ae3d27d4eb4fULL;

	w->h1 = fnv_word(w->h1, word);
	w->h2 = (w->h2 ^ x ^ (x >> 29)) * 0xff51afd7ed558ccdULL;
}

/* One frame of the chain (a bpf_loop callback): records w->frame and moves
 * to its caller. 1 ends the walk. */
static long py_frame_step(__u32 i, struct py_step_ctx *c)
{
	struct py_walk *w = c->w;
	struct py_offsets *o = &w->proc.o;
	__u64 f = w->frame, back, code, instr, start, id;
	__u32 n = w->stack.nr, flags = 0, at;
	struct py_frame *rec;
	__s32 lasti;

	if (!f)
		return py_stop(w, PY_END_ROOT);
	if (n >= PY_MAX_DEPTH)
		return py_stop(w, PY_END_DEPTH);
	if (!py_ptr_ok(f))
		return py_stop(w, PY_END_POINTER);
	at = py_at(w, f, o->f_read, w->proc.model == PY_MODEL_310 ? PY_ALONE : PY_PAGE);
	if (at == PY_AT_FAIL)
		return py_stop(w, PY_END_READ);
	back = py_u64(w, at, o->f_back);
	if (back == f)
		return py_stop(w, PY_END_LOOP);
	if (w->proc.model == PY_MODEL_312 && py_u8(w, at, o->f_entry) == PY_OWNED_BY_CSTACK) {
		/* An eval call's shim: the frame below it began that call. */
		if (n > 0 && n <= PY_MAX_DEPTH) {
			w->stack.frames[(n - 1) & (PY_MAX_DEPTH - 1)].flags |= PY_FRAME_ENTRY;
			py_hash(w, PY_FRAME_ENTRY);
		}
		w->frame = back;
		return 0;
	}
	code = py_u64(w, at, o->f_code);
	if (w->proc.model == PY_MODEL_310) {
		lasti = (__s32)py_u32(w, at, o->f_instr);
		if (lasti < 0)
			lasti = PY_NO_LASTI;
		flags = PY_FRAME_ENTRY;
	} else {
		instr = py_u64(w, at, o->f_instr);
		start = code + o->co_code;
		lasti = instr >= start && instr - start < (1U << 30) ? (__s32)((instr - start) / 2) : PY_NO_LASTI;
		if (w->proc.model == PY_MODEL_311 && py_u8(w, at, o->f_entry))
			flags = PY_FRAME_ENTRY;
	}
	if (!py_ptr_ok(code))
		return py_stop(w, PY_END_POINTER);
	id = py_code_id(w, code, n);
	if (!id)
		return py_stop(w, w->why < PY_END_KINDS ? w->why : PY_END_READ);
	rec = &w->stack.frames[n & (PY_MAX_DEPTH - 1)];
	rec->code = code;
	rec->id = id;
	rec->lasti = lasti;
	rec->flags = flags;
	w->stack.nr = n + 1;
	w->frame = back;
	/* One word of the frame: code and id mixed (ids are hashes). */
	py_hash(w, (code ^ id * 0x9e3779b97f4a7c15ULL) + ((__u64)(__u32)lasti << 32 | flags));
	return 0;
}

/* A compact str at p, into dst (cap bytes): its bytes and kind, 0 when p
 * is not one. */
static __always_inline void py_str(struct py_walk *w, __u64 p, __u8 *dst, const __u32 cap, __u16 *len,
				   __u16 *kind)
{
	struct py_offsets *o = &w->proc.o;
	__u32 state, k, n;
	__u64 data, bytes;
	__s64 length;

	*len = 0;
	*kind = 0;
	if (!py_ptr_ok(p) || bpf_probe_read_user(w->s, PY_STR_BUF, (void *)p))
		return;
	if (py_b64(w->s, 8, PY_STR_BUF) != w->proc.str_type)
		return;
	state = py_b32(w->s, o->str_state, PY_STR_BUF);
	k = (state >> 2) & 7;
	/* Compact only: a legacy string keeps its data elsewhere. */
	if (!((state >> 5) & 1) || (k != 1 && k != 2 && k != 4))
		return;
	data = p + (((state >> 6) & 1) ? o->str_ascii_size : o->str_compact_size);
	length = py_b64(w->s, o->str_length, PY_STR_BUF);
	if (length < 0 || length > (1 << 20))
		return;
	bytes = (__u64)length * k;
	n = bytes > cap ? cap : bytes;
	if (n && bpf_probe_read_user(dst, n, (void *)data))
		return;
	*len = n;
	*kind = k | (bytes > cap ? PY_STR_CUT : 0);
}

/* The line table (bytes object) at `table` into the event: as much of it
 * as fits, and its length. */
static __always_inline void py_lines(struct py_walk *w, __u64 table, struct py_code_event *ev)
{
	__u64 size;
	__u32 n;

	if (!py_ptr_ok(table) || bpf_probe_read_user(w->s, PY_STR_BUF, (void *)table) ||
	    py_b64(w->s, 8, PY_STR_BUF) != w->proc.bytes_type)
		return;
	size = py_b64(w->s, w->proc.o.bytes_size, PY_STR_BUF);
	if (size >= (1 << 24))
		return;
	n = size > PY_LINES_BYTES ? PY_LINES_BYTES : size;
	if (n && bpf_probe_read_user(ev->lines, n, (void *)(table + w->proc.o.bytes_data)))
		return;
	ev->lines_len = n;
	ev->lines_total = size;
}

/* Announces code object `code` (identity `id`) to user space unless it
 * was: its qualified name, file name, first line and line table. Sets
 * w->dropped when the ring was full. A global function, verified once;
 * its fields go straight into the event (locals here add to the deepest
 * chain of calls, which 6.1 holds to 512 bytes of stack). */
__noinline int py_announce(struct py_walk *w, __u64 code, __u64 id)
{
	struct py_code_key key = {};
	struct py_code_event *ev;
	__u8 one = 1;

	if (!w)
		return 0;
	key.tgid = w->tgid;
	key.code = code;
	key.id = id;
	if (bpf_map_lookup_elem(&py_codes_seen, &key))
		return 0;
	ev = bpf_ringbuf_reserve(&py_events, sizeof(*ev), 0);
	if (!ev) {
		w->dropped = 1;
		PY_COUNT(dropped, 1);
		return 0;
	}
	if (py_read(w->co, w->proc.o.co_read, PY_CO_BUF, code)) {
		bpf_ringbuf_discard(ev, 0);
		return 0;
	}
	ev->tgid = w->tgid;
	ev->version = w->proc.version;
	ev->code = code;
	ev->id = id;
	ev->firstlineno = py_b32(w->co, w->proc.o.co_firstlineno, PY_CO_BUF);
	ev->lines_total = 0;
	ev->lines_len = 0;
	py_str(w, py_b64(w->co, w->proc.o.co_name, PY_CO_BUF), ev->name, PY_NAME_BYTES, &ev->name_len,
	       &ev->name_kind);
	py_str(w, py_b64(w->co, w->proc.o.co_filename, PY_CO_BUF), ev->file, PY_FILE_BYTES, &ev->file_len,
	       &ev->file_kind);
	py_lines(w, py_b64(w->co, w->proc.o.co_linetable, PY_CO_BUF), ev);
	bpf_ringbuf_submit(ev, 0);
	bpf_map_update_elem(&py_codes_seen, &key, &one, BPF_ANY);
	PY_COUNT(announced, 1);
	return 0;
}

/* Announces the code objects of a newly stored stack (a bpf_loop
 * callback over its frames). */
static long py_announce_step(__u32 i, struct py_step_ctx *c)
{
	struct py_walk *w = c->w;
	struct py_frame *f;

	if (i >= w->stack.nr || i >= PY_MAX_DEPTH)
		return 1;
	f = &w->stack.frames[i & (PY_MAX_DEPTH - 1)];
	py_announce(w, f->code, f->id);
	return 0;
}

/* Stores the stack of scratch slot `slot`'s walk under the id of the same
 * content (by its hashes, kept per CPU and in py_stack_ids) when stored,
 * else a new one, announcing its code objects then. A global function,
 * verified once; it looks its walk up itself, as 6.1's verifier stores a
 * map value only from another map's value (or the stack), not from memory
 * a global function was handed. */
__noinline __s32 py_intern(__u32 slot)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_stack_ref *ref;
	struct py_stack_memo *m;
	__u64 h1, h2;
	__u32 nr;
	__s32 id;
	long err;

	if (!w)
		return -ENOENT;
	nr = w->stack.nr;
	if (nr > PY_MAX_DEPTH)
		return -E2BIG;
	py_hash(w, (__u64)w->stack.end << 32 | nr);
	h1 = w->h1;
	h2 = w->h2;
	m = &w->stacks[(h1 * 0x9e3779b97f4a7c15ULL) >> (64 - PY_STACK_MEMO_BITS)];
	if (m->h1 == h1 && m->h2 == h2 && m->id > 0)
		return m->id;
	ref = bpf_map_lookup_elem(&py_stack_ids, &h1);
	if (ref && ref->h2 == h2 && ref->id > 0) {
		id = ref->id;
		goto keep;
	}
	id = __sync_fetch_and_add(&next_py_stack_id, 1);
	if (id <= 0 || id >= PY_DEEP_STACK_ID)
		return -E2BIG;
	if (nr > PY_SHORT_FRAMES) {
		id |= PY_DEEP_STACK_ID;
		err = bpf_map_update_elem(&py_stacks_deep, &id, &w->stack, BPF_NOEXIST);
	} else {
		/* The value is the stack's first PY_SHORT_FRAMES frames. */
		err = bpf_map_update_elem(&py_stacks, &id, &w->stack, BPF_NOEXIST);
	}
	if (err)
		return -E2BIG;
	PY_COUNT(stored, 1);
	w->stored = 1;
	return id;
keep:
	m->h1 = h1;
	m->h2 = h2;
	m->id = id;
	return id;
}

/* After a new stack was stored (py_intern): announces its code objects,
 * while its frames keep them alive; unless one found the ring full, makes
 * the stack findable by its hashes (else the next such stack is stored
 * anew and announces it again). Apart from py_intern, whose frame would
 * add to the announcements' chain of calls. */
__noinline int py_stored(__u32 slot, __s32 id)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_step_ctx step = { .w = w };
	struct py_stack_memo *m;
	__u64 h1;

	if (!w)
		return 0;
	w->dropped = 0;
	bpf_loop(w->stack.nr, py_announce_step, &step, 0);
	if (w->dropped)
		return 0;
	h1 = w->h1;
	/* The value from the walk (a map value), not the stack: this frame is
	 * in the announcements' chain of calls (see py_thread_state). */
	w->ref.h2 = w->h2;
	w->ref.id = id;
	w->ref.pad = 0;
	bpf_map_update_elem(&py_stack_ids, &h1, &w->ref, BPF_ANY);
	m = &w->stacks[(h1 * 0x9e3779b97f4a7c15ULL) >> (64 - PY_STACK_MEMO_BITS)];
	m->h1 = h1;
	m->h2 = w->h2;
	m->id = id;
	return 0;
}

/* The process's entry; a forked child that has not exec'd runs its
 * parent's interpreter at the same addresses, and takes a copy of its
 * parent's entry (see parent_chunk in unwind.bpf.h). */
static __always_inline struct py_proc *py_proc_of(struct task_struct *task, __u32 tgid)
{
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	struct task_struct *parent;
	__u64 id;
	__u32 ptgid;

	if (p)
		return p;
	id = BPF_CORE_READ(task, parent_exec_id);
	if (BPF_CORE_READ(task, self_exec_id) != id)
		return 0;
	parent = BPF_CORE_READ(task, real_parent);
	if (!parent || BPF_CORE_READ(parent, self_exec_id) != id)
		return 0;
	ptgid = BPF_CORE_READ(parent, tgid);
	if (ptgid == tgid)
		return 0;
	p = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (!p)
		return 0;
	bpf_map_update_elem(&py_procs, &tgid, p, BPF_NOEXIST);
	PY_COUNT(forked, 1);
	return bpf_map_lookup_elem(&py_procs, &tgid);
}

/* The current thread's Python stack, walked into w->stack (w->proc set):
 * how the walk ended. Inline in py_stack_id: a frame of its own took the
 * deepest chain of calls (offcpu_switch's) past 6.1's 512 bytes. */
static __always_inline __u32 py_walk(struct py_walk *w, __u32 slot, __u64 pid_tgid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct py_step_ctx step;
	__u64 ts, frame = 0, cframe;
	__u32 at;

	if (!w)
		return PY_END_READ;
	/* 3.10 keeps no kernel tid: its pthread id is the thread's TLS base. */
	w->want = w->proc.model == PY_MODEL_310 ? BPF_CORE_READ(task, thread.fsbase) : (__u32)pid_tgid;
	ts = py_thread_state(slot, pid_tgid);
	if (!ts)
		return PY_END_NO_THREAD;
	at = py_at(w, ts, w->proc.o.ts_read, PY_ALONE);
	frame = at == PY_AT_FAIL ? 0 : py_u64(w, at, w->proc.o.ts_frame);
	/* The code object counter, read before any code object. */
	w->gen = 0;
	w->mm = (__u64)BPF_CORE_READ(task, mm);
	if (w->proc.gen_addr) {
		bpf_probe_read_user(&w->gen, 4, (void *)w->proc.gen_addr);
	} else if (w->proc.o.interp_gen && at != PY_AT_FAIL) {
		__u64 interp = py_u64(w, at, w->proc.o.ts_interp);

		if (py_ptr_ok(interp))
			bpf_probe_read_user(&w->gen, 4, (void *)(interp + w->proc.o.interp_gen));
	}
	/* The last walk's identities hold for this one if it was of this
	 * process and address space and no code object was made since. */
	if (w->gen && (w->last.tgid != w->tgid || w->last.mm != w->mm || w->last.gen != w->gen)) {
		w->last.tgid = w->tgid;
		w->last.mm = w->mm;
		w->last.gen = w->gen;
		__builtin_memset(w->last.f, 0, sizeof(w->last.f));
	}
	if (frame && w->proc.o.cframe_frame) {
		cframe = frame;
		frame = 0;
		if (!py_ptr_ok(cframe) ||
		    bpf_probe_read_user(&frame, 8, (void *)(cframe + w->proc.o.cframe_frame - 1)))
			return PY_END_READ;
	}
	if (!frame)
		return PY_END_IDLE;
	w->frame = frame;
	step.w = w;
	bpf_loop(PY_MAX_DEPTH + 1, py_frame_step, &step, 0);
	return w->end ? w->end - 1 : PY_END_DEPTH;
}

/* The current thread's Python stack as a py_stacks id: PY_STACK_NONE when
 * it runs no Python, negative when the stack was lost (map full). A global
 * function: verified once for its callers. */
__noinline __s32 py_stack_id(__u32 slot)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, end;
	struct py_proc *proc;
	struct py_walk *w;
	__s32 id = PY_STACK_NONE;

	proc = py_proc_of(task, tgid);
	if (!proc)
		return PY_STACK_NONE;
	w = bpf_map_lookup_elem(&py_scratch, &slot);
	if (!w)
		return PY_STACK_NONE;
	/* In the walk, not on the stack (see py_thread_state). */
	w->t0 = bpf_ktime_get_ns();
	w->proc = *proc;
	w->tgid = tgid;
	w->end = 0;
	w->stack.nr = 0;
	w->stack.end = 0;
	w->h1 = fnv_word(0xcbf29ce484222325ULL, tgid);
	w->h2 = 0x84222325cbf29ce4ULL ^ tgid;
	/* Copies of another walk's memory, or identities of its code objects,
	 * may be stale now. */
	__builtin_memset(w->len, 0, sizeof(w->len));
	w->next_memo = 0;
	w->next_print = 0;
	PY_COUNT(walks, 1);
	end = py_walk(w, slot, pid_tgid);
	/* The checked value, not one clang merged the checks of. */
	barrier_var(end);
	if (end < PY_END_KINDS)
		PY_COUNT(end[end], 1);
	PY_COUNT(frames, w->stack.nr);
	if (w->stack.nr) {
		w->stack.end = end;
		w->stored = 0;
		id = py_intern(slot);
		if (id < 0)
			PY_COUNT(lost, 1);
		else if (w->stored)
			py_stored(slot, id);
	}
	PY_COUNT(ns, bpf_ktime_get_ns() - w->t0);
	return id;
}

/* An exec replaces the image: the process's entry goes (user space adds
 * one again if the new image is a Python it knows). */
SEC("raw_tp/sched_process_exec")
int py_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&py_procs, &tgid);
	return 0;
}

/* The process's last thread ends: its entry goes, before its pid can be
 * reused. */
SEC("raw_tp/sched_process_exit")
int py_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	__u32 tgid;

	if (BPF_CORE_READ(task, signal, live.counter))
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	bpf_map_delete_elem(&py_procs, &tgid);
	return 0;
}

#endif /* BPROF_PYFRAMES_BPF_H */
