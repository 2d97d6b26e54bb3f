/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: a frame's record and rule. frame_rule writes the
 * frame's (build ID, offset) record and takes its rule from the last
 * walk, the rule memo or the file's table, where find_rule searches the
 * rows (narrowed by the page index) in unwind_segs.
 */
#ifndef BPROF_UNWIND_ROWS_BPF_H
#define BPROF_UNWIND_ROWS_BPF_H

#include "kernel.bpf.h"
#include "loop.bpf.h"
#include "profile.h"
#include "stacks.bpf.h"
#include "unwind_state.bpf.h"

/* One halving of find_rule's search, as a bpf_loop callback: the verifier
 * walks a bounded loop once per iteration (24 here, on every path into
 * it: a third of the program's verification), a callback once. */
struct row_search {
	__u64 off;
	__u32 seg, first_row, lo, hi, fault;
};

static long search_step(__u32 i, struct row_search *r)
{
	struct unwind_row *row;
	__u32 mid, idx, s = r->seg;
	void *seg;

	if (r->hi - r->lo <= 1)
		return 1;
	mid = r->lo + (r->hi - r->lo) / 2;
	idx = r->first_row + mid;
	/* Looked up again, not passed: a map pointer kept in the caller's
	 * frame is one more thing older verifiers may not follow. */
	seg = bpf_map_lookup_elem(&unwind_segs, &s);
	row = seg ? bpf_map_lookup_elem(seg, &idx) : 0;
	if (!row) {
		r->fault = 1;
		return 1;
	}
	if (row->pc <= r->off)
		r->lo = mid;
	else
		r->hi = mid;
	return 0;
}

/* The rule id of file offset `off`: its row's, the last row with pc <= off
 * (the page index narrows the search to the rows of off's page), or -1.
 * open: the program is built without bpf_loop (loop.bpf.h). */
static __always_inline __s64 find_rule_in(const struct unwind_file *f, __u64 off, const int open)
{
	struct row_search r = { .off = off };
	struct unwind_row *row;
	__u32 idx, s;
	void *seg;

	if (!f)
		return -1;
	r.seg = s = f->seg;
	r.first_row = f->first_row;
	r.hi = f->nr_rows;
	seg = bpf_map_lookup_elem(&unwind_segs, &s);
	if (!seg)
		return -1;
	if (f->nr_pages) {
		__u64 page = off >> UNWIND_PAGE_SHIFT;

		if (page < f->page_base)
			return -1;
		page -= f->page_base;
		if (page < f->nr_pages) {
			struct unwind_page *pg;

			idx = f->first_page + (__u32)page;
			pg = (struct unwind_page *)bpf_map_lookup_elem(seg, &idx);
			if (!pg)
				return -1;
			r.lo = pg->lo;
			r.hi = pg->hi + 1;
		} else {
			r.lo = r.hi - 1; /* past the last row's page: the last row */
		}
	}
	if (r.hi > f->nr_rows || r.lo >= r.hi)
		return -1;
	idx = f->first_row + r.lo;
	row = bpf_map_lookup_elem(seg, &idx);
	if (!row || row->pc > off)
		return -1;
	/* 24 halvings: up to 16M rows per file. */
	LOOP(open, 24, 24, search_step, &r);
	if (r.fault)
		return -1;
	idx = f->first_row + r.lo;
	row = bpf_map_lookup_elem(seg, &idx);
	return row ? row->rule : -1;
}

/* find_rule_in as a global function, verified once: inlined, each of its
 * ways out was checked with the rest of frame_rule. */
__noinline __s64 find_rule(const struct unwind_file *f, __u64 off)
{
	return find_rule_in(f, off, 0);
}

/* The same without bpf_loop (5.10: numbers only as a global function's
 * arguments): `off` in the file of context `slot`'s walk. A function of
 * its own, not inlined in frame_rule_open: together their stacks took the
 * walk's deepest chain of calls past 512 bytes. */
__noinline __s64 find_rule_open(__u32 slot, __u64 off)
{
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);

	if (!cs)
		return -1;
	return find_rule_in(&cs->walk.file, off, 1);
}

/* Record n's part in the walk's hashes: none for the leaf (record 0), which
 * goes into the count key while the stored stack holds FRAME_IN_KEY there
 * (unwound_stack_id), so the hashes name the callers alone. */
static __always_inline void hash_frame(struct walk_state *s, __u32 n, const struct frame_record *rec)
{
	if (n)
		hash_record(&s->hash, &s->hash2, (const __u64 *)rec);
}

/* A frame known by its address alone (no mapping, or anonymous memory).
 * Records are hashed and compared whole: no stale bytes. */
static __always_inline void ip_record(struct frame_record *rec, __u64 ip)
{
	rec->status = FRAME_IP;
	__builtin_memset(rec->build_id, 0, sizeof(rec->build_id));
	rec->offset = ip;
}

/* Frame n (at s->ip in mapping s->vma): writes its record into rec and
 * hashes it, and puts its rule into s->rule from the last walk, the rule
 * memo or the file's table. Returns 1 when a rule was found. open: built
 * without bpf_loop, s being context slot's walk. */
static __always_inline int frame_rule_in(struct walk_state *s, struct frame_record *rec, struct last_walk *lw,
					 struct rule_memos *memo, __u32 n, __u32 slot, const int open)
{
	struct unwind_file *file;
	struct unwind_rule *rule = 0;
	__u64 off, lookup;
	int found = 0;

	off = s->ip - s->vma.start + s->vma.off;
	file = s->have_file ? &s->file : 0;
	if (file && (file->flags & (UNWIND_FILE_BUILD_ID | UNWIND_FILE_KEY))) {
		rec->status = file->flags & UNWIND_FILE_BUILD_ID ? FRAME_FILE : FRAME_FILE_KEY;
		__builtin_memcpy(rec->build_id, file->build_id, sizeof(rec->build_id));
		rec->offset = off;
	} else if (s->vma.key.ino) {
		/* A file whose table (and build ID) user space has not loaded
		 * yet: the kernel's name of it, which user space resolves to the
		 * file it opened, so the frame keeps at least its module. */
		struct file_key *k = (struct file_key *)rec->build_id;

		rec->status = FRAME_FILE_KEY;
		k->dev = s->vma.key.dev;
		k->ino_lo = s->vma.key.ino;
		k->ino_hi = s->vma.key.ino >> 32;
		k->zero[0] = 0;
		k->zero[1] = 0;
		rec->offset = off;
	} else {
		ip_record(rec, s->ip);
	}
	hash_frame(s, n, rec);
	if (!file || !file->nr_rows)
		return 0;

	/* A return address is just past its call: its frame is the call's. */
	lookup = s->exact ? off : off - 1;
	__u64 wtag = s->ip << 1 | s->exact;
	__u32 k = n & (LAST_WALK_FRAMES - 1);

	if (n < LAST_WALK_FRAMES && n < lw->nvalid && lw->f[k].tag == wtag) {
		s->rule = lw->f[k].rule;
		return 1;
	}
	/* (table, offset) names one rule for the whole session (see
	 * unwind_file). */
	__u64 tag = ((__u64)file->table << 32 | (__u32)lookup) + 1;
	struct rule_memo *m = &memo->e[(tag * 0x9e3779b97f4a7c15ULL) >> (64 - UNWIND_MEMO_BITS)];

	if (m->tag == tag) {
		s->rule = m->rule;
		found = 1;
	} else {
		__s64 id = open ? find_rule_open(slot, lookup) : find_rule(file, lookup);
		__u32 rid = id;

		if (id >= 0)
			rule = bpf_map_lookup_elem(&unwind_rules, &rid);
		if (rule) {
			s->rule = *rule;
			found = 1;
			m->tag = tag;
			m->rule = s->rule;
		}
	}
	/* Entries stay in frame order: one past the valid ones at most. */
	if (found && n < LAST_WALK_FRAMES && n <= lw->nvalid) {
		lw->f[k].tag = wtag;
		lw->f[k].rule = s->rule;
		if (n == lw->nvalid)
			lw->nvalid = n + 1;
	}
	return found;
}

/* frame_rule_in as a global function: the verifier checks it once, where
 * inlined its three sources of a rule times the two kinds of record were
 * each checked with the rest of the frame. */
__noinline int frame_rule(struct walk_state *s, struct frame_record *rec, struct last_walk *lw,
			  struct rule_memos *memo, __u32 n)
{
	if (!s || !rec || !lw || !memo)
		return 0;
	return frame_rule_in(s, rec, lw, memo, n, 0, 0);
}

/* The same without bpf_loop, for 5.10's verifier (numbers only as a global
 * function's arguments): context `slot`'s walk, frame n into the record
 * at rec_slot (see frame_slot). */
__noinline int frame_rule_open(__u32 slot, __u32 n, __u32 rec_slot)
{
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
	struct user_stack *us = bpf_map_lookup_elem(&user_stack_scratch, &slot);

	if (!cs || !us)
		return 0;
	return frame_rule_in(&cs->walk, &us->frames[rec_slot & (BPROF_UNWIND_DEPTH - 1)], &cs->last, &cs->memo, n,
			     slot, 1);
}

#endif /* BPROF_UNWIND_ROWS_BPF_H */
