/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A code object's identity: its address and a hash of what it holds, so a
 * code object made at a freed one's address has another (see pyframes.bpf.h).
 */
#ifndef BPROF_PYFRAMES_IDENTITY_BPF_H
#define BPROF_PYFRAMES_IDENTITY_BPF_H

#include "pyframes_state.bpf.h"

/* A fingerprint of the str (`bytes`: the bytes object) at p: its length,
 * cached hash, first and last 8 bytes; 0 when it cannot be read. Kept per
 * walk by address. */
static __always_inline __u64 py_print_in(struct py_walk *w, __u64 p, int bytes)
{
	struct py_offsets *o;
	__u64 len, data, h, first = 0, last = 0;
	__u32 state, k, off, got = PY_PRINT_BUF;

	if (!py_ptr_ok(p))
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

/* py_print_in as a global function, verified once. */
__noinline __u64 py_print(struct py_walk *w, __u64 p, int bytes)
{
	if (!w)
		return 0;
	return py_print_in(w, p, bytes);
}

/* The identity of the code object at `code` (from this walk's memo, else
 * read into w->co; the caller looked at the last walk's frame first): 0,
 * with w->why set, when it is not one or cannot be read. open: built
 * without bpf_loop. */
static __always_inline __u64 py_code_id_in(struct py_walk *w, __u64 code, const int open)
{
	struct py_offsets *o;
	__u64 id, version = 0, name, file, table, p;
	__u32 k;

	for (k = 0; k < PY_MEMO; k++)
		if (k < w->next_memo && w->memo[k].code == code)
			goto found;
	goto read;
found:
	return w->memo[k & (PY_MEMO - 1)].id;
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
		/* Without bpf_loop, inline: a frame of its own took the
		 * deepest chain of calls (off-CPU's) past 5.10's 512 bytes. */
		p = open ? py_print_in(w, name, 0) : py_print(w, name, 0);
		id = p ? fnv_word(id, p) : 0;
		p = id ? (open ? py_print_in(w, file, 0) : py_print(w, file, 0)) : 0;
		id = p ? fnv_word(id, p) : 0;
		p = id ? (open ? py_print_in(w, table, 1) : py_print(w, table, 1)) : 0;
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
	return id;
}

/* py_code_id_in as a global function, verified once. */
__noinline __u64 py_code_id(struct py_walk *w, __u64 code)
{
	if (!w)
		return 0;
	return py_code_id_in(w, code, 0);
}

/* The same for a program built without bpf_loop: 5.10's verifier takes
 * only numbers for a global function's arguments, so the walk is found by
 * its scratch slot. */
__noinline __u64 py_code_id_open(__u32 slot, __u64 code)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);

	if (!w)
		return 0;
	return py_code_id_in(w, code, 1);
}

#endif /* BPROF_PYFRAMES_IDENTITY_BPF_H */
