/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frames, walked in the sample program. For a process user space
 * learned runs a known interpreter (py_procs), the sampled thread's thread
 * state is found on the interpreter's thread list (by its kernel tid, or on
 * 3.10 its pthread id, the task's TLS base), cached per thread and checked
 * again at every use; its frame chain is walked from the current frame,
 * one py_frame per Python function call (the code object's address, a
 * hash of fields read from it, the instruction, and whether the frame began
 * a C-level call of the eval loop), and stored by content in py_stacks,
 * whose id goes into the count key beside the native stacks'. User space
 * places each run of Python frames where its _PyEval_EvalFrameDefault
 * activation stands in the native stack.
 *
 * The process's memory is hostile: every read is bounded, every pointer
 * checked (user range, aligned), every code object's type compared with
 * PyCode_Type; a chain that does not hold ends the walk, counted by why
 * (py_stats.end), keeping the frames read so far.
 *
 * A code object seen for the first time is announced to user space
 * (py_events) with its names and line table, copied here while the
 * process lives: its names survive the process's exit.
 *
 * Included by profile.bpf.c after stacks.bpf.h (scratch slots, fnv_word).
 */
#ifndef BPROF_PYFRAMES_BPF_H
#define BPROF_PYFRAMES_BPF_H

#include "pyframes.h"

/* FRAME_OWNED_BY_CSTACK in 3.12 and 3.13: the shim frame of an eval call. */
#define PY_OWNED_BY_CSTACK 3

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

/* Python stacks by id (from 1: 0 in a key is "none"), stored by content
 * as user stacks are (stacks.bpf.h): py_stack_ids maps a hash of the
 * frames to an id, a hit is compared whole. */
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, __u64);
	__type(value, __u32);
} py_stack_ids SEC(".maps");

__u32 next_py_stack_id = 1;

/* What one walk reads, per CPU and context (one slot per scratch_slot). */
#define PY_TS_BUF 192
#define PY_F_BUF 128
#define PY_CO_BUF 160
#define PY_STR_BUF 64

struct py_walk {
	struct py_proc proc; /* the process's entry, copied */
	__u64 frame; /* the frame to read next */
	__u64 hash;  /* of the frames recorded */
	__u64 want;  /* the thread's id as its thread state keeps it */
	__u64 code, id; /* the frame just recorded: to announce */
	__u32 tgid;
	__u32 end; /* enum py_end + 1 once ended */
	__u8 ts[PY_TS_BUF];
	__u8 f[PY_F_BUF];
	__u8 co[PY_CO_BUF];
	__u8 s[PY_STR_BUF];
	struct py_stack stack;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SCRATCH_SLOTS);
	__type(key, __u32);
	__type(value, struct py_walk);
} py_scratch SEC(".maps");

/* One more of py_stats' `field` (a map value holds no pointer to keep). */
#define PY_COUNT(field)                                               \
	do {                                                          \
		struct profile_stats *_st = stats();                  \
		if (_st)                                              \
			__sync_fetch_and_add(&_st->py.field, 1);      \
	} while (0)

/* Where a user-space object can be: not null, below the kernel half,
 * 8-aligned (CPython's allocators align every object). */
static __always_inline int py_ptr_ok(__u64 p)
{
	return p >= 4096 && p < (1ULL << 47) && !(p & 7);
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

/* Fields of a buffer read from the process, at offsets from its layout:
 * bounded by the buffer (a layout can only point inside it). */
static __always_inline __u64 py_u64(const __u8 *buf, __u32 off, const __u32 size)
{
	if (off > size - 8)
		return 0;
	return *(const __u64 *)(buf + off);
}

static __always_inline __u32 py_u32(const __u8 *buf, __u32 off, const __u32 size)
{
	if (off > size - 4)
		return 0;
	return *(const __u32 *)(buf + off);
}

static __always_inline __u8 py_u8(const __u8 *buf, __u32 off, const __u32 size)
{
	if (off > size - 1)
		return 0;
	return buf[off];
}

static __always_inline long py_stop(struct py_walk *w, enum py_end why)
{
	w->end = why + 1;
	return 1;
}

/* Whether the thread state at ts is this thread's (w->want): read into
 * w->ts. */
static __always_inline int py_ts_is_ours(struct py_walk *w, __u64 ts)
{
	if (!py_ptr_ok(ts) || py_read(w->ts, w->proc.o.ts_read, PY_TS_BUF, ts))
		return 0;
	return py_u64(w->ts, w->proc.o.ts_thread_id, PY_TS_BUF) == w->want &&
	       py_u64(w->ts, w->proc.o.ts_interp, PY_TS_BUF) != 0;
}

/* A search of the interpreters' thread lists (a bpf_loop callback: one
 * thread state or interpreter a step). */
struct py_search {
	struct py_walk *w;
	__u64 interp;
	__u64 ts;
	__u64 found;
	__u32 interps;
	__u32 bad;
};

static long py_search_step(__u32 i, struct py_search *s)
{
	struct py_walk *w = s->w;
	__u64 next = 0;

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
		s->found = s->ts;
		return 1;
	}
	next = py_u64(w->ts, w->proc.o.ts_next, PY_TS_BUF);
	if (next == s->ts) {
		s->bad = 1;
		return 1;
	}
	s->ts = next;
	return 0;
}

/* The thread state of the current thread, into w->ts: from py_threads
 * (checked again), else searched for; 0 when it has none. */
__noinline __u64 py_thread_state(struct py_walk *w, __u64 key)
{
	struct py_search s = {};
	struct py_thread *t, fresh = {};
	__u64 now;

	if (!w)
		return 0;
	t = bpf_map_lookup_elem(&py_threads, &key);
	now = bpf_ktime_get_ns();
	if (t) {
		if (t->tstate && py_ts_is_ours(w, t->tstate))
			return t->tstate;
		if (!t->tstate && now - t->at < PY_RETRY_NS)
			return 0;
	}
	PY_COUNT(searches);
	s.w = w;
	if (bpf_probe_read_user(&s.interp, 8, (void *)(w->proc.runtime + w->proc.o.rt_interp_head)))
		return 0;
	bpf_loop(PY_MAX_THREADS + PY_MAX_INTERPS, py_search_step, &s, 0);
	fresh.tstate = s.found;
	fresh.at = now;
	/* A torn list proves nothing about this thread: searched again. */
	if (s.found || !s.bad)
		bpf_map_update_elem(&py_threads, &key, &fresh, BPF_ANY);
	/* py_ts_is_ours left the last state read in w->ts: the found one. */
	return s.found;
}

/* A compact str at p, into dst (cap bytes): its bytes and kind, 0 when p
 * is not one. */
static __always_inline void py_str(struct py_walk *w, __u64 p, __u8 *dst, const __u32 cap, __u16 *len,
				   __u16 *kind)
{
	struct py_offsets *o = &w->proc.o;
	__u32 state, k, n;
	__s64 length;
	__u64 data, bytes;

	*len = 0;
	*kind = 0;
	if (!py_ptr_ok(p) || bpf_probe_read_user(w->s, PY_STR_BUF, (void *)p))
		return;
	if (py_u64(w->s, 8, PY_STR_BUF) != w->proc.str_type)
		return;
	state = py_u32(w->s, o->str_state, PY_STR_BUF);
	k = (state >> 2) & 7;
	/* Compact only: a legacy string keeps its data elsewhere. */
	if (!((state >> 5) & 1) || (k != 1 && k != 2 && k != 4))
		return;
	data = p + (((state >> 6) & 1) ? o->str_ascii_size : o->str_compact_size);
	length = py_u64(w->s, o->str_length, PY_STR_BUF);
	if (length < 0 || length > (1 << 20))
		return;
	bytes = (__u64)length * k;
	n = bytes > cap ? cap : bytes;
	if (n && bpf_probe_read_user(dst, n, (void *)data))
		return;
	*len = n;
	*kind = k | (bytes > cap ? PY_STR_CUT : 0);
}

/* Announces w->code (identity w->id) to user space unless it was: its
 * qualified name, file name, first line and line table. A global
 * function, verified once. */
__noinline int py_announce(struct py_walk *w)
{
	struct py_code_key key = {};
	struct py_code_event *ev;
	struct py_offsets *o;
	__u64 table, size;
	__u8 one = 1;
	__u32 n;

	if (!w)
		return 0;
	key.tgid = w->tgid;
	key.code = w->code;
	key.id = w->id;
	if (bpf_map_lookup_elem(&py_codes_seen, &key))
		return 0;
	ev = bpf_ringbuf_reserve(&py_events, sizeof(*ev), 0);
	if (!ev) {
		PY_COUNT(dropped);
		return 0;
	}
	o = &w->proc.o;
	ev->tgid = w->tgid;
	ev->version = w->proc.version;
	ev->code = w->code;
	ev->id = w->id;
	ev->firstlineno = py_u32(w->co, o->co_firstlineno, PY_CO_BUF);
	ev->lines_total = 0;
	ev->lines_len = 0;
	py_str(w, py_u64(w->co, o->co_name, PY_CO_BUF), ev->name, PY_NAME_BYTES, &ev->name_len, &ev->name_kind);
	py_str(w, py_u64(w->co, o->co_filename, PY_CO_BUF), ev->file, PY_FILE_BYTES, &ev->file_len,
	       &ev->file_kind);
	table = py_u64(w->co, o->co_linetable, PY_CO_BUF);
	if (py_ptr_ok(table) && !bpf_probe_read_user(w->s, PY_STR_BUF, (void *)table) &&
	    py_u64(w->s, 8, PY_STR_BUF) == w->proc.bytes_type) {
		size = py_u64(w->s, o->bytes_size, PY_STR_BUF);
		if (size < (1 << 24)) {
			n = size > PY_LINES_BYTES ? PY_LINES_BYTES : size;
			if (!n || !bpf_probe_read_user(ev->lines, n, (void *)(table + o->bytes_data))) {
				ev->lines_len = n;
				ev->lines_total = size;
			}
		}
	}
	bpf_ringbuf_submit(ev, 0);
	bpf_map_update_elem(&py_codes_seen, &key, &one, BPF_ANY);
	PY_COUNT(announced);
	return 0;
}

/* bpf_loop's context must be on the stack: it points to the walk. */
struct py_step_ctx {
	struct py_walk *w;
};

/* One frame of the chain (a bpf_loop callback): records w->frame and moves
 * to its caller. 1 ends the walk. */
static long py_frame_step(__u32 i, struct py_step_ctx *c)
{
	struct py_walk *w = c->w;
	struct py_offsets *o = &w->proc.o;
	__u64 f = w->frame, back, code, instr, start, id;
	__u32 n = w->stack.nr, flags = 0;
	struct py_frame *rec;
	__s32 lasti;

	if (!f)
		return py_stop(w, PY_END_ROOT);
	if (n >= PY_MAX_DEPTH)
		return py_stop(w, PY_END_DEPTH);
	if (!py_ptr_ok(f))
		return py_stop(w, PY_END_POINTER);
	if (py_read(w->f, o->f_read, PY_F_BUF, f))
		return py_stop(w, PY_END_READ);
	back = py_u64(w->f, o->f_back, PY_F_BUF);
	if (back == f)
		return py_stop(w, PY_END_LOOP);
	if (w->proc.model == PY_MODEL_312 && py_u8(w->f, o->f_entry, PY_F_BUF) == PY_OWNED_BY_CSTACK) {
		/* An eval call's shim: the frame below it began that call. */
		if (n > 0 && n <= PY_MAX_DEPTH)
			w->stack.frames[(n - 1) & (PY_MAX_DEPTH - 1)].flags |= PY_FRAME_ENTRY;
		w->frame = back;
		return 0;
	}
	code = py_u64(w->f, o->f_code, PY_F_BUF);
	if (!py_ptr_ok(code))
		return py_stop(w, PY_END_POINTER);
	if (py_read(w->co, o->co_read, PY_CO_BUF, code))
		return py_stop(w, PY_END_READ);
	if (py_u64(w->co, 8, PY_CO_BUF) != w->proc.code_type)
		return py_stop(w, PY_END_NOT_CODE);
	if (w->proc.model == PY_MODEL_310) {
		lasti = (__s32)py_u32(w->f, o->f_instr, PY_F_BUF);
		if (lasti < 0)
			lasti = PY_NO_LASTI;
		flags = PY_FRAME_ENTRY;
	} else {
		instr = py_u64(w->f, o->f_instr, PY_F_BUF);
		start = code + o->co_code;
		lasti = instr >= start && instr - start < (1U << 30) ? (__s32)((instr - start) / 2) : PY_NO_LASTI;
		if (w->proc.model == PY_MODEL_311 && py_u8(w->f, o->f_entry, PY_F_BUF))
			flags = PY_FRAME_ENTRY;
	}
	/* Fields a code object never changes, hashed: another object made at
	 * a freed one's address has other names, file, line table or lines. */
	id = fnv_word(0xcbf29ce484222325ULL, py_u64(w->co, o->co_name, PY_CO_BUF));
	id = fnv_word(id, py_u64(w->co, o->co_filename, PY_CO_BUF));
	id = fnv_word(id, py_u64(w->co, o->co_linetable, PY_CO_BUF));
	id = fnv_word(id, (__u64)py_u32(w->co, o->co_firstlineno, PY_CO_BUF) << 32 |
				  py_u32(w->co, o->co_argcount, PY_CO_BUF));
	id |= !id;
	rec = &w->stack.frames[n & (PY_MAX_DEPTH - 1)];
	rec->code = code;
	rec->id = id;
	rec->lasti = lasti;
	rec->flags = flags;
	w->stack.nr = n + 1;
	w->code = code;
	w->id = id;
	py_announce(w);
	w->frame = back;
	return 0;
}

/* bpf_loop callbacks over a stored Python stack's words (3 a frame). */
static long py_hash_word(__u32 i, struct words_ctx *w)
{
	if (i >= PY_MAX_DEPTH * 3)
		return 1;
	w->h = fnv_word(w->h, w->a[i]);
	return 0;
}

static long py_compare_word(__u32 i, struct words_ctx *w)
{
	if (i >= PY_MAX_DEPTH * 3 || i >= w->nr)
		return 1;
	if (w->a[i] != w->b[i]) {
		w->same = 0;
		return 1;
	}
	return 0;
}

static long py_compare_short_word(__u32 i, struct words_ctx *w)
{
	if (i >= PY_SHORT_FRAMES * 3 || i >= w->nr)
		return 1;
	if (w->a[i] != w->b[i]) {
		w->same = 0;
		return 1;
	}
	return 0;
}

/* Stores w->stack under the id of the same content when stored, else a new
 * one. A global function, verified once. */
__noinline __s32 py_intern(struct py_walk *w)
{
	struct words_ctx c = { .h = 0xcbf29ce484222325ULL };
	__u32 *idp, nr, words;
	int stored = 0;
	__s32 id;
	long err;

	if (!w)
		return -ENOENT;
	nr = w->stack.nr;
	if (nr > PY_MAX_DEPTH)
		return -E2BIG;
	words = nr * 3;
	c.a = (const __u64 *)w->stack.frames;
	c.h = fnv_word(c.h, (__u64)w->stack.end << 32 | nr);
	bpf_loop(words, py_hash_word, &c, 0);
	c.nr = words;
	idp = bpf_map_lookup_elem(&py_stack_ids, &c.h);
	if (idp) {
		id = *idp;
		c.same = 1;
		if (id & PY_DEEP_STACK_ID) {
			struct py_stack *old = bpf_map_lookup_elem(&py_stacks_deep, &id);

			stored = !!old;
			if (old && old->nr == nr && old->end == w->stack.end) {
				c.b = (const __u64 *)old->frames;
				bpf_loop(words, py_compare_word, &c, 0);
			} else {
				c.same = 0;
			}
		} else {
			struct py_stack_short *old = bpf_map_lookup_elem(&py_stacks, &id);

			stored = !!old;
			if (old && old->nr == nr && old->end == w->stack.end) {
				c.b = (const __u64 *)old->frames;
				bpf_loop(words, py_compare_short_word, &c, 0);
			} else {
				c.same = 0;
			}
		}
		if (c.same && stored)
			return id;
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
	PY_COUNT(stored);
	if (!stored)
		bpf_map_update_elem(&py_stack_ids, &c.h, &id, BPF_ANY);
	return id;
}

/* The process's entry; a forked child that has not exec'd runs its
 * parent's interpreter at the same addresses, and takes a copy of its
 * parent's entry (see parent_chunk in unwind.bpf.h). */
static __always_inline struct py_proc *py_proc_of(struct task_struct *task, __u32 tgid, struct profile_stats *st)
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
	__sync_fetch_and_add(&st->py.forked, 1);
	return bpf_map_lookup_elem(&py_procs, &tgid);
}

/* The current thread's Python stack as a py_stacks id: PY_STACK_NONE when
 * it runs no Python, negative when the stack was lost (map full). A global
 * function: verified once for its callers. */
__noinline __s32 py_stack_id(__u32 slot)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, tid = (__u32)pid_tgid, zero = 0;
	struct profile_stats *st = bpf_map_lookup_elem(&profile_stats, &zero);
	struct py_step_ctx step;
	struct py_proc *proc;
	struct py_walk *w;
	__u64 ts, frame = 0, cframe;
	__u32 end;
	__s32 id;

	if (!st)
		return PY_STACK_NONE;
	proc = py_proc_of(task, tgid, st);
	if (!proc)
		return PY_STACK_NONE;
	w = bpf_map_lookup_elem(&py_scratch, &slot);
	if (!w)
		return PY_STACK_NONE;
	w->proc = *proc;
	w->tgid = tgid;
	w->end = 0;
	w->stack.nr = 0;
	w->stack.end = 0;
	__sync_fetch_and_add(&st->py.walks, 1);
	/* 3.10 keeps no kernel tid: its pthread id is the thread's TLS base. */
	w->want = w->proc.model == PY_MODEL_310 ? BPF_CORE_READ(task, thread.fsbase) : tid;
	ts = py_thread_state(w, pid_tgid);
	if (!ts) {
		end = PY_END_NO_THREAD;
		goto out;
	}
	frame = py_u64(w->ts, w->proc.o.ts_frame, PY_TS_BUF);
	if (frame && w->proc.o.cframe_frame) {
		cframe = frame;
		frame = 0;
		if (!py_ptr_ok(cframe) ||
		    bpf_probe_read_user(&frame, 8, (void *)(cframe + w->proc.o.cframe_frame - 1))) {
			end = PY_END_READ;
			goto out;
		}
	}
	if (!frame) {
		end = PY_END_IDLE;
		goto out;
	}
	w->frame = frame;
	step.w = w;
	bpf_loop(PY_MAX_DEPTH + 1, py_frame_step, &step, 0);
	end = w->end ? w->end - 1 : PY_END_DEPTH;
out:
	if (end < PY_END_KINDS)
		__sync_fetch_and_add(&st->py.end[end], 1);
	__sync_fetch_and_add(&st->py.frames, w->stack.nr);
	if (!w->stack.nr)
		return PY_STACK_NONE;
	w->stack.end = end;
	id = py_intern(w);
	if (id < 0)
		__sync_fetch_and_add(&st->py.lost, 1);
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
