/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The sampled thread's Python thread state: found on the interpreters'
 * thread lists (by kernel tid, or on 3.10 by pthread id), cached per thread
 * and checked again at every use.
 */
#ifndef BPROF_PYFRAMES_THREAD_BPF_H
#define BPROF_PYFRAMES_THREAD_BPF_H

#include "pyframes_state.bpf.h"

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

/* A search of the interpreters' thread lists (over w->search: one thread
 * state or interpreter a step; 1 ends it). */
static __always_inline long py_search_step_in(struct py_walk *w)
{
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

/* py_search_step_in as bpf_loop's callback. */
static long py_search_step(__u32 i, struct py_step_ctx *c)
{
	return py_search_step_in(c->w);
}

/* One step of scratch slot `slot`'s search, for a program built without
 * bpf_loop: a global function of numbers (5.10), so the search's loop is
 * verified as one call a turn. */
__noinline int py_search_step_open(__u32 slot)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);

	if (!w)
		return 1;
	return py_search_step_in(w);
}

/* The thread state of the current thread (the walk of scratch slot
 * `slot`, key tgid << 32 | tid): from py_threads (checked again), else
 * searched for; 0 when it has none. Its state lives in the walk, not on
 * the stack: this frame is in the deepest chain of calls (offcpu_switch's,
 * with bpf_loop's callbacks), which 6.1 holds to 512 bytes. */
static __always_inline __u64 py_thread_state_in(__u32 slot, __u64 key, const int open)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);
	struct py_step_ctx step = { .w = w };
	struct py_thread *t;

	if (!w)
		return 0;
	if (w->last.thread == key && py_ts_is_ours(w, w->last.tstate))
		return w->last.tstate;
	t = bpf_map_lookup_elem(&py_threads, &key);
	if (t && t->tstate && py_ts_is_ours(w, t->tstate)) {
		w->last.thread = key;
		w->last.tstate = t->tstate;
		return t->tstate;
	}
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
	if (open) {
		for (__u32 i = 0; i < PY_MAX_THREADS + PY_MAX_INTERPS; i++)
			if (py_search_step_open(slot))
				break;
	} else {
		bpf_loop(PY_MAX_THREADS + PY_MAX_INTERPS, py_search_step, &step, 0);
	}
	/* A torn list proves nothing about this thread: searched again. */
	if (w->search.entry.tstate || !w->search.bad)
		bpf_map_update_elem(&py_threads, &key, &w->search.entry, BPF_ANY);
	return w->search.entry.tstate;
}

__noinline __u64 py_thread_state(__u32 slot, __u64 key)
{
	return py_thread_state_in(slot, key, 0);
}

/* The same without bpf_loop (loop.bpf.h). */
__noinline __u64 py_thread_state_open(__u32 slot, __u64 key)
{
	return py_thread_state_in(slot, key, 1);
}

#endif /* BPROF_PYFRAMES_THREAD_BPF_H */
