/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A stack stored for the first time announces its code objects not yet
 * announced to user space (py_events), with their names and line tables
 * copied while the process lives.
 */
#ifndef BPROF_PYFRAMES_ANNOUNCE_BPF_H
#define BPROF_PYFRAMES_ANNOUNCE_BPF_H

#include "pyframes_state.bpf.h"

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
static __always_inline int py_announce_in(struct py_walk *w, __u64 code, __u64 id)
{
	struct py_code_key key = {};
	struct py_code_event *ev;
	__u8 one = 1;

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

__noinline int py_announce(struct py_walk *w, __u64 code, __u64 id)
{
	if (!w)
		return 0;
	return py_announce_in(w, code, id);
}

/* Frame i of scratch slot `slot`'s stack announced, for a program built
 * without bpf_loop (numbers only as arguments: 5.10). 1 past the last. */
__noinline int py_announce_open(__u32 slot, __u32 i)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_frame *f;

	if (!w || i >= w->stack.nr || i >= PY_MAX_DEPTH)
		return 1;
	f = &w->stack.frames[i & (PY_MAX_DEPTH - 1)];
	py_announce_in(w, f->code, f->id);
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
static __always_inline __s32 py_intern_in(__u32 slot, const int open)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_stack_ref *ref;
	struct py_stack_memo *m;
	__u64 h1, h2;
	__u32 nr;
	__s32 id;
	__s64 n;
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
	n = take_id(&next_py_stack_id, ID_PY, slot, open);
	id = n;
	if (n <= 0 || n >= PY_DEEP_STACK_ID)
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

__noinline __s32 py_intern(__u32 slot)
{
	return py_intern_in(slot, 0);
}

/* Without bpf_loop (and so, on 5.10, without an atomic fetch anywhere in
 * the program): ids from the per-CPU counters. */
__noinline __s32 py_intern_open(__u32 slot)
{
	return py_intern_in(slot, 1);
}

/* After a new stack was stored (py_intern): announces its code objects,
 * while its frames keep them alive; unless one found the ring full, makes
 * the stack findable by its hashes (else the next such stack is stored
 * anew and announces it again). Apart from py_intern, whose frame would
 * add to the announcements' chain of calls. */
static __always_inline int py_stored_in(__u32 slot, __s32 id, const int open)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_step_ctx step = { .w = w };
	struct py_stack_memo *m;
	__u64 h1;

	if (!w)
		return 0;
	w->dropped = 0;
	if (open) {
		for (__u32 i = 0; i < PY_MAX_DEPTH; i++)
			if (py_announce_open(slot, i))
				break;
	} else {
		bpf_loop(w->stack.nr, py_announce_step, &step, 0);
	}
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

__noinline int py_stored(__u32 slot, __s32 id)
{
	return py_stored_in(slot, id, 0);
}

/* The same without bpf_loop (loop.bpf.h). */
__noinline int py_stored_open(__u32 slot, __s32 id)
{
	return py_stored_in(slot, id, 1);
}

#endif /* BPROF_PYFRAMES_ANNOUNCE_BPF_H */
