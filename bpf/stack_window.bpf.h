/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: the walk's context, and the reads of the user stack
 * through this CPU's copy of part of it (struct stack_window in
 * unwind_state.bpf.h). Both the walk (unwind.bpf.h) and the walk memo
 * (walk_memo.bpf.h) read the stack here.
 */
#ifndef BPROF_STACK_WINDOW_BPF_H
#define BPROF_STACK_WINDOW_BPF_H

#include "kernel.bpf.h"
#include "profile.h"
#include "unwind_state.bpf.h"

/* What one walk works on: its stack, registers and this CPU's memos. */
struct unwind_ctx {
	struct user_stack *us;
	struct walk_state *s;
	struct stack_window *win;
	struct rule_memos *memo;
	struct map_memos *maps;
	struct last_walk *last;
	struct walk_memos *wm;
};

/* Refills the window from user address addr: UNWIND_WINDOW bytes, or if
 * they are not all there, to the end of addr's page (or the one word when
 * it crosses into the next page). */
static __always_inline int win_refill_in(struct stack_window *w, __u64 addr)
{
	__u64 len;

	w->reads++;
	if (!bpf_probe_read_user(w->w, UNWIND_WINDOW, (void *)addr)) {
		w->lo = addr;
		w->hi = addr + UNWIND_WINDOW;
		return 0;
	}
	len = ((addr | 4095) + 1) - addr;
	if (len < 8) /* a word across a page boundary: read it alone */
		len = 8;
	if (len > UNWIND_WINDOW)
		len = UNWIND_WINDOW;
	if (bpf_probe_read_user(w->w, len, (void *)addr)) {
		w->lo = w->hi = 0;
		return -1;
	}
	w->lo = addr;
	w->hi = addr + len;
	return 0;
}

/* win_refill_in as a global function, verified once rather than at each of
 * the walk's eight reads; the reads themselves stay inline, as most hit the
 * window. */
__noinline int win_refill(struct stack_window *w, __u64 addr)
{
	if (!w)
		return -1;
	return win_refill_in(w, addr);
}

/* The same for a program built without bpf_loop (loop.bpf.h): 5.10's
 * verifier takes only numbers for a global function's arguments, so the
 * window is found again by its context (w->slot). */
__noinline int win_refill_open(__u32 slot, __u64 addr)
{
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);

	if (!cs)
		return -1;
	return win_refill_in(&cs->win, addr);
}

/* The user word at addr, from the window (refilled when addr is outside).
 * open: the program is built without bpf_loop. */
static __always_inline int win_read(struct stack_window *w, __u64 *dst, __u64 addr, const int open)
{
	__u64 off;

	if ((addr < w->lo || addr + 8 > w->hi) &&
	    (open ? win_refill_open(w->slot, addr) : win_refill(w, addr)))
		return -1;
	off = addr - w->lo;
	if (off > UNWIND_WINDOW - 8)
		return -1;
	*dst = *(__u64 *)((char *)w->w + off);
	return 0;
}

/* The walk's read of the user word at addr. Of its reads, only the
 * return addresses are recorded for the walk memo (unwind_step) and the
 * restored rbp where a rule uses it (uses_bp); the rarer reads (a CFA or
 * registers read from the stack) keep the walk from being kept instead
 * (wm_skip): each recording site adds to what the verifier walks. */
static __always_inline int read_u64(struct unwind_ctx *c, __u64 *dst, __u64 addr, const int open)
{
	return win_read(c->win, dst, addr, open);
}

#endif /* BPROF_STACK_WINDOW_BPF_H */
