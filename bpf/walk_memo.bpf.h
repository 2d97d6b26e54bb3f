/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The walk memo (walk_memos, unwind_state.bpf.h): a walk records the stack
 * words it reads from frame 1 on (memo_record, uses_bp), walk_memo_hit
 * compares a later walk's frame 1 and those words with an entry and gives
 * its stack id without walking on, and walk_memo_keep completes the entry
 * once the walk's stack has an id.
 */
#ifndef BPROF_WALK_MEMO_BPF_H
#define BPROF_WALK_MEMO_BPF_H

#include "kernel.bpf.h"
#include "stack_window.bpf.h"
#include "unwind_state.bpf.h"

#define WALK_MEMO_MASK ((1 << WALK_MEMO_BITS) - 1)

/* Keeps a word the walk read, for the walk memo. */
static __always_inline void memo_record(struct unwind_ctx *c, __u64 addr, __u64 val)
{
	__u32 k = c->s->wm_words;

	c->wm->rec[k & (WALK_MEMO_WORDS - 1)].addr = addr;
	c->wm->rec[k & (WALK_MEMO_WORDS - 1)].val = val;
	c->s->wm_words = k + 1;
}

/* rbp restored from the stack word at addr. Not yet an input of the walk:
 * code without frame pointers saves rbp as any callee-saved register, its
 * value changing from sample to sample, and only a frame that uses rbp
 * (uses_bp) makes the word one. */
static __always_inline int load_bp(struct unwind_ctx *c, __u64 addr, const int open)
{
	struct walk_state *s = c->s;

	if (win_read(c->win, &s->bp, addr, open))
		return -1;
	s->wm_bp_loaded = 1;
	s->wm_bp_addr = addr;
	s->wm_bp_kept = 0;
	return 0;
}

/* This frame uses rbp: frame 1's (the walk memo's entry must match it),
 * or the stack word it was restored from (kept with the entry's words). */
static __always_inline void uses_bp(struct unwind_ctx *c)
{
	struct walk_state *s = c->s;

	if (!s->wm_bp_loaded) {
		s->wm_uses_bp = 1;
		return;
	}
	if (s->wm_bp_kept)
		return;
	s->wm_bp_kept = 1;
	memo_record(c, s->wm_bp_addr, s->bp);
}

/* One word of a walk memo entry compared with the stack now, as a bpf_loop
 * callback (verified once). */
struct memo_check {
	struct stack_window *w;
	struct walk_memo_entry *e;
	__u32 bad;
	__u32 pad;
};

static long check_word(__u32 k, struct memo_check *m)
{
	__u64 v;

	if (k >= WALK_MEMO_WORDS || k >= m->e->words)
		return 1;
	if (win_read(m->w, &v, m->e->w[k].addr, 0) || v != m->e->w[k].val) {
		m->bad = 1;
		return 1;
	}
	return 0;
}

/* Whether entry e holds the rest of this walk: its inputs match frame 1's
 * and the stack still holds the words it read. */
static __always_inline int memo_match(struct walk_state *s, struct stack_window *w, struct walk_memo_entry *e,
				      __u64 tag, __u32 tgid)
{
	struct memo_check m = { .w = w, .e = e };

	if (!e->words || e->tag != tag || e->sp != s->sp || e->mm != s->mm || e->gen != s->gen || e->tgid != tgid ||
	    e->bp_valid != s->bp_valid || (e->uses_bp && e->bp != s->bp))
		return 0;
	bpf_loop(WALK_MEMO_WORDS, check_word, &m, 0);
	return !m.bad;
}

/* At frame 1: 1 when this CPU's walk memo holds the rest of the walk, with
 * the stack id and what the walk counted in s. Else the set's less
 * recently used entry is this walk's to record into, from here on. Two
 * ways: one frame 1 (a function at one depth) is often called from two
 * places, and the two walks alternate. A global function, verified once. */
__noinline int walk_memo_hit(struct walk_state *s, struct walk_memos *wm, struct stack_window *w, __u32 tgid)
{
	struct walk_memo_entry *e0, *e1, *e = 0;
	__u64 tag;
	__u32 set, way;

	if (!s || !wm || !w)
		return 0;
	tag = s->ip << 1 | s->exact;
	set = ((tag ^ s->sp * 0x9e3779b97f4a7c15ULL ^ s->mm) * 0x9e3779b97f4a7c15ULL) >> (64 - WALK_MEMO_BITS + 1);
	e0 = &wm->e[(set * 2) & WALK_MEMO_MASK];
	e1 = &wm->e[(set * 2 + 1) & WALK_MEMO_MASK];
	if (memo_match(s, w, e0, tag, tgid)) {
		e = e0;
		way = 0;
	} else if (memo_match(s, w, e1, tag, tgid)) {
		e = e1;
		way = 1;
	}
	if (e) {
		e0->mru = way;
		s->wm_state = WALK_MEMO_HIT;
		s->wm_id = e->id;
		s->wm_frames = e->frames;
		s->wm_fp_frames = e->fp_frames;
		s->wm_end = e->end;
		return 1;
	}
	/* Frame 1's inputs, for walk_memo_keep; the entry stays as it is
	 * until then, as the walk may not be kept. */
	way = e0->mru ? 0 : 1;
	s->wm_slot = set * 2 + way;
	s->wm_tag = tag;
	s->wm_sp = s->sp;
	s->wm_bp = s->bp;
	s->wm_bp_valid = s->bp_valid;
	s->wm_state = WALK_MEMO_RECORDING;
	s->wm_fp_frames = s->fp_frames; /* frame 0's: the entry keeps the rest's */
	s->wm_words = 0;
	s->wm_skip = 0;
	s->wm_uses_bp = 0;
	s->wm_bp_loaded = 0;
	return 0;
}

/* Completes the entry the walk recorded into (walk_memo_hit), once its
 * stack has an id: the entry is whole only when its words are set. A
 * global function, verified once for its two callers. */
__noinline int walk_memo_keep(struct cpu_scratch *cs, __s32 id)
{
	struct walk_memos *wm;
	struct walk_state *s;
	struct walk_memo_entry *e;

	if (!cs)
		return 0;
	s = &cs->walk;
	wm = &cs->wmemo;
	if (s->wm_state != WALK_MEMO_RECORDING || id < 0)
		return 0;
	e = &wm->e[s->wm_slot & WALK_MEMO_MASK];
	wm->e[s->wm_slot & WALK_MEMO_MASK & ~1].mru = s->wm_slot & 1;
	e->tag = s->wm_tag;
	e->sp = s->wm_sp;
	e->bp = s->wm_bp;
	e->bp_valid = s->wm_bp_valid;
	e->mm = s->mm;
	e->gen = s->gen;
	e->tgid = cs->last.tgid; /* the walk's, as walk_memo_hit compared it */
	e->uses_bp = s->wm_uses_bp;
	e->id = id;
	e->frames = s->wm_frames;
	e->fp_frames = s->wm_fp_frames;
	e->end = s->wm_end;
	__builtin_memcpy(e->w, wm->rec, sizeof(e->w));
	e->words = s->wm_words;
	return 0;
}

#endif /* BPROF_WALK_MEMO_BPF_H */
