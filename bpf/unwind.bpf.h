/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: the user stack walked here, in the sample program,
 * with unwind tables user space built from each mapped file's .eh_frame
 * (src/unwind/). The result is the (build ID, file offset) records
 * bpf_get_stack(BPF_F_USER_BUILD_ID) gives, and (file key, file offset)
 * records for files without a build ID or whose table is not loaded yet.
 *
 * Per frame: the PC's mapping (bpf_find_vma, cached while the PC stays in
 * it) names the file by (dev, inode); unwind_files gives its build ID and
 * its rows in unwind_segs; a binary search finds the row of the PC, whose
 * rule gives the CFA (the caller's rsp), the return address at CFA - 8 and
 * where the caller's rbp was saved. A PC without a table (JIT code, the vDSO,
 * a file not loaded yet) is walked by its frame pointer. Every early end is
 * counted by kind and leaves a FRAME_TRUNCATED record. Past the leaf, most
 * walks are taken from the walk memo instead (walk_memo.bpf.h).
 *
 * The mapping lookup is unwind_mappings.bpf.h's, the rows' search
 * unwind_rows.bpf.h's, the stack reads stack_window.bpf.h's; the walk
 * itself is here.
 */
#ifndef BPROF_UNWIND_BPF_H
#define BPROF_UNWIND_BPF_H

#include "kernel.bpf.h"
#include "current_task.bpf.h"
#include "profile.h"
#include "epilogue.bpf.h"
#include "stack_window.bpf.h"
#include "unwind_mappings.bpf.h"
#include "unwind_rows.bpf.h"
#include "unwind_state.bpf.h"
#include "walk_memo.bpf.h"

static __always_inline long stop(struct unwind_ctx *c, enum unwind_end why)
{
	c->s->end = why + 1;
	return 1;
}

/* The slot of walked frame n: the innermost frames in order, then (past
 * the slot of the FRAME_ELIDED record) a ring of the outermost. */
static __always_inline __u32 frame_slot(__u32 n)
{
	if (n < UNWIND_INNER)
		return n;
	return UNWIND_INNER + 1 + ((n - UNWIND_INNER) & (UNWIND_OUTER - 1));
}

/* Records kept once n frames were walked. */
static __always_inline __u32 frames_kept(__u32 n)
{
	if (n <= UNWIND_INNER)
		return n;
	n -= UNWIND_INNER;
	return UNWIND_INNER + 1 + (n < UNWIND_OUTER ? n : UNWIND_OUTER);
}

/* One frame: records c->s->ip, then moves ip/sp/bp to the caller. 1 ends.
 * open: the program is built without bpf_loop (loop.bpf.h): the mapping,
 * rule and window helpers are its global functions of numbers, and the
 * walk memo is left out (its entries are compared in a loop of their own). */
static __always_inline long unwind_step_in(struct unwind_ctx *c, const int open)
{
	struct frame_record *rec;
	struct unwind_rule r;
	int found;
	struct user_stack *us = c->us;
	__u64 cfa, ra;
	__u32 n = c->s->walked, slot;
	long err;

	if (n >= UNWIND_STEPS)
		return stop(c, UNWIND_END_DEPTH);
	if (c->s->ip == 0)
		return stop(c, UNWIND_END_ROOT);
	if (!open && n == 1 && walk_memo_hit(c->s, c->wm, c->win, c->last->tgid))
		return 1;
	/* Below BPROF_UNWIND_DEPTH by construction; masked where the
	 * verifier sees it (6.1's loses the bound through frame_slot). */
	slot = frame_slot(n);
	barrier_var(slot);
	slot &= BPROF_UNWIND_DEPTH - 1;
	if (c->s->ip < c->s->vma.start || c->s->ip >= c->s->vma.end) {
		err = open ? map_frame_open(c->win->slot) : map_frame(c->s, c->maps);
		if (err) {
			/* An address in no executable mapping is no code (what a
			 * frame pointer walk through code without them reads, or
			 * a sample in exec between two images): not a frame. One
			 * the kernel could not look up is kept by its address. */
			if (err == -EBUSY) {
				rec = &us->frames[slot];
				ip_record(rec, c->s->ip);
				c->s->walked = n + 1;
				us->nr = frames_kept(n + 1);
				hash_frame(c->s, n, rec);
			}
			return stop(c, err == -EBUSY ? UNWIND_END_VMA_BUSY : UNWIND_END_NO_MAPPING);
		}
	}
	rec = &us->frames[slot];
	found = open ? frame_rule_open(c->win->slot, n, slot) : frame_rule(c->s, rec, c->last, c->memo, n);
	c->s->walked = n + 1;
	us->nr = frames_kept(n + 1);
	r = c->s->rule;
	c->s->exact = 0;

	if (!found || r.cfa_type == UNWIND_CFA_NONE) {
		/* No table: an epilogue at the PC, else the frame pointer. */
		c->s->wm_skip = 1;
		err = follow_epilogue(c, open);
		if (err)
			return err > 0 ? 0 : stop(c, UNWIND_END_READ_FAULT);
		if (!c->s->bp_valid)
			return stop(c, UNWIND_END_NO_TABLE);
		if (c->s->bp == 0)
			return stop(c, UNWIND_END_FP_END);
		if (c->s->bp + 16 <= c->s->sp)
			return stop(c, UNWIND_END_BAD_CFA);
		/* Lower address first: the window grows upward. */
		cfa = c->s->bp + 16;
		if (load_bp(c, c->s->bp, open) || read_u64(c, &ra, cfa - 8, open))
			return stop(c, UNWIND_END_READ_FAULT);
		c->s->fp_frames++;
		c->s->sp = cfa;
		c->s->ip = ra;
		return 0;
	}

	switch (r.cfa_type) {
	case UNWIND_CFA_RSP:
		cfa = c->s->sp + r.cfa_off;
		break;
	case UNWIND_CFA_RBP:
		if (!open)
			uses_bp(c);
		if (!c->s->bp_valid)
			return stop(c, UNWIND_END_BAD_CFA);
		cfa = c->s->bp + r.cfa_off;
		break;
	case UNWIND_CFA_PLT:
		cfa = c->s->sp + r.cfa_off + ((c->s->ip & 15) >= (__u64)r.rbp_off ? 8 : 0);
		break;
	case UNWIND_CFA_DEREF_RBP:
		c->s->wm_skip = 1;
		if (!c->s->bp_valid)
			return stop(c, UNWIND_END_BAD_CFA);
		if (read_u64(c, &cfa, c->s->bp + r.cfa_off, open))
			return stop(c, UNWIND_END_READ_FAULT);
		break;
	case UNWIND_CFA_SIGNAL: {
		/* Returned into __restore_rt: rsp is the rt_sigframe's ucontext,
		 * whose uc_mcontext (at 40) holds the interrupted registers. */
		__u64 mc = c->s->sp + 40;

		c->s->wm_skip = 1;
		if (load_bp(c, mc + 80, open) || read_u64(c, &c->s->sp, mc + 120, open) ||
		    read_u64(c, &c->s->ip, mc + 128, open))
			return stop(c, UNWIND_END_READ_FAULT);
		c->s->bp_valid = 1;
		c->s->exact = 1;
		return 0;
	}
	case UNWIND_CFA_STOP:
		return stop(c, UNWIND_END_ROOT);
	default:
		/* A register other than rsp/rbp: known in the first frame only
		 * (n records before this one's). */
		if (r.cfa_type < UNWIND_CFA_REG || r.cfa_type >= UNWIND_CFA_REG + 16 || n != 0)
			return stop(c, UNWIND_END_UNSUPPORTED);
		cfa = c->s->r[(r.cfa_type - UNWIND_CFA_REG) & 15] + r.cfa_off;
		break;
	}
	/* The caller's rsp is above this frame's. */
	if (cfa <= c->s->sp)
		return stop(c, UNWIND_END_BAD_CFA);
	/* The saved rbp (below the return address) first: the window grows
	 * upward. */
	if (r.rbp_type == UNWIND_RBP_OFFSET) {
		if (load_bp(c, cfa + r.rbp_off, open))
			return stop(c, UNWIND_END_READ_FAULT);
		c->s->bp_valid = 1;
	} else if (r.rbp_type == UNWIND_RBP_UNKNOWN) {
		c->s->bp_valid = 0;
	}
	if (read_u64(c, &ra, cfa - 8, open))
		return stop(c, UNWIND_END_READ_FAULT);
	if (!open)
		memo_record(c, cfa - 8, ra);
	c->s->sp = cfa;
	c->s->ip = ra;
	return 0;
}

/* The walk of context cs into us. */
static __always_inline void unwind_ctx_of(struct unwind_ctx *c, struct cpu_scratch *cs, struct user_stack *us)
{
	c->us = us;
	c->s = &cs->walk;
	c->win = &cs->win;
	c->memo = &cs->memo;
	c->maps = &cs->maps;
	c->last = &cs->last;
	c->wm = &cs->wmemo;
}

/* unwind_step_in as bpf_loop's callback. */
static long unwind_step(__u32 i, struct unwind_ctx *c)
{
	return unwind_step_in(c, 0);
}

/* One frame of context `slot`'s walk, for a program built without bpf_loop:
 * a global function of numbers (5.10's verifier takes no others), so the
 * walk's loop of UNWIND_STEPS calls is verified as one call. */
__noinline int unwind_step_open(__u32 slot)
{
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
	struct user_stack *us = bpf_map_lookup_elem(&user_stack_scratch, &slot);
	struct unwind_ctx c;

	if (!cs || !us)
		return 1;
	unwind_ctx_of(&c, cs, us);
	return unwind_step_in(&c, 1);
}

/* UNWIND_OPEN_TURN frames of the walk (1: it ended). A loop's every turn
 * leaves the verifier a branch to come back to, at most 8192 of them per
 * function, so the walk's UNWIND_STEPS + 1 frames are two nested loops,
 * each in a function of its own. */
#define UNWIND_OPEN_TURN 64

__noinline int unwind_steps_open(__u32 slot)
{
	for (__u32 i = 0; i < UNWIND_OPEN_TURN; i++)
		if (unwind_step_open(slot))
			return 1;
	return 0;
}

/* x86-64's kernel stack size (THREAD_SIZE, without KASAN). */
#define BPROF_THREAD_SIZE 16384
#define BPROF_USER_CS 0x33
#define BPROF_USER_DS 0x2b

/* The user registers task saved at kernel entry, as bpf_task_pt_regs gives
 * them: the pt_regs at the top of its kernel stack, below 16 bytes of
 * padding where the kernel is built for FRED (6.9 on), none before. Both
 * places are read at once into buf (24 words) and the one whose cs and ss
 * are the 64-bit user segments is taken (the other's words there are
 * orig_ax and rflags, whose bit 3 is always clear, or the user rsp and the
 * padding). NULL for neither: a kernel thread, a 32-bit task. */
static __always_inline struct x86_regs *task_user_regs(struct task_struct *task, __u64 *buf)
{
	__u64 top = (__u64)TASK_FIELD(task, stack) + BPROF_THREAD_SIZE;
	const __u32 n = sizeof(struct x86_regs) / 8; /* 21 */
	struct x86_regs *r;

	if (bpf_probe_read_kernel(buf, (n + 2) * 8, (void *)(top - (n + 2) * 8)))
		return 0;
	r = (struct x86_regs *)(buf + 2); /* no padding */
	if ((r->cs & 0xffff) == BPROF_USER_CS && (r->ss & 0xffff) == BPROF_USER_DS)
		return r;
	r = (struct x86_regs *)buf; /* FRED's 16 bytes */
	if ((r->cs & 0xffff) == BPROF_USER_CS && (r->ss & 0xffff) == BPROF_USER_DS)
		return r;
	return 0;
}

/* Walks the current task's user stack into `us`; counts how it ended and
 * marks an early end with a FRAME_TRUNCATED record. Returns the bytes
 * of records, or a negative error. When the walk memo held the frames
 * past the leaf, `us` holds the leaf alone and cs->walk the stack's id
 * (wm_state WALK_MEMO_HIT, wm_id: not an out argument, whose stack slot
 * took 6.1's combined stack past 512 bytes). */
static __always_inline long unwind_user(struct profile_stats *st, const struct uregs *ur, struct user_stack *us,
					struct cpu_scratch *cs, __u64 mm, __u64 *hash, __u64 *hash2, __u32 slot,
					const int open)
{
	struct task_struct *task = current_task();
	struct unwind_ctx c = {};
	struct walk_state *s;
	__u32 n, end, zero = 0;
	__u64 *gen;

	/* Inside execve the registers are the old image's and the mm the new
	 * one's, or going: no user stack to walk. */
	if (task_btf_missing ? BPF_CORE_READ_BITFIELD_PROBED(task, in_execve) : BPF_CORE_READ_BITFIELD(task, in_execve))
		return -EFAULT;
	s = &cs->walk;
	__builtin_memset(s, 0, sizeof(*s));
	cs->win.slot = slot;
	if (ur->valid) {
		s->ip = ur->ip;
		__builtin_memcpy(s->r, ur->r, sizeof(s->r));
	} else if (open || task_btf_missing) {
		/* Before bpf_task_pt_regs (5.15): found at the top of the task's
		 * kernel stack (the window's buffer, refilled below anyway, as
		 * room to read them). */
		struct x86_regs *regs = task_user_regs(task, cs->win.w);

		if (!regs)
			return -EFAULT;
		s->ip = regs->ip;
		DWARF_REGS(s->r, regs);
		__sync_fetch_and_add(&st->unwind_task_regs, 1);
	} else {
		/* The sample hit the kernel (or the task is switching out): the
		 * user registers saved at kernel entry. */
		struct x86_regs *regs = (struct x86_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		if (!regs)
			return -EFAULT;
		s->ip = regs->ip;
		DWARF_REGS(s->r, regs);
		__sync_fetch_and_add(&st->unwind_task_regs, 1);
	}
	s->sp = s->r[7];
	s->bp = s->r[6];
	unwind_ctx_of(&c, cs, us);
	*hash = 0;
	*hash2 = 0;
	gen = bpf_map_lookup_elem(&unwind_gen, &zero);
	if (!gen)
		return -ENOMEM;
	/* Read before any lookup of unwind_maps or unwind_files (see
	 * map_memo_entry). */
	s->gen = *gen;
	s->mm = mm;
	if (c.last->mm != s->mm || c.last->gen != s->gen || c.last->tgid != TASK_FIELD(task, tgid)) {
		c.last->mm = s->mm;
		c.last->gen = s->gen;
		c.last->tgid = TASK_FIELD(task, tgid);
		c.last->nvalid = 0;
	}
	c.win->reads = 0;
	c.win->lo = c.win->hi = 0; /* another task's stack, or this one's before */
	s->bp_valid = 1;
	s->exact = 1;
	s->hash = 0xcbf29ce484222325ULL;
	s->hash2 = 0x84222325cbf29ce4ULL;
	s->vma.end = 0;
	us->nr = 0;
	s->learn = 0;
	if (open) {
		for (__u32 i = 0; i < (UNWIND_STEPS + UNWIND_OPEN_TURN) / UNWIND_OPEN_TURN; i++)
			if (unwind_steps_open(slot))
				break;
	} else {
		bpf_loop(UNWIND_STEPS + 1, unwind_step, &c, 0);
	}
	/* (Only bpf_find_vma's finds are learned here: none without it.) */
	if (!open && s->learn && learn(&s->learn_key, &s->learn_vma, s->mm))
		__sync_fetch_and_add(&st->unwind_learned, 1);
	if (s->wm_state == WALK_MEMO_HIT) {
		/* Counted as the walk it saved would have been. */
		__sync_fetch_and_add(&st->unwind_memo_walks, 1);
		__sync_fetch_and_add(&st->unwind_frames, s->wm_frames);
		__sync_fetch_and_add(&st->unwind_fp_frames, s->fp_frames + s->wm_fp_frames);
		__sync_fetch_and_add(&st->unwind_reads, c.win->reads);
		if (s->find_vma) /* the leaf's mapping */
			__sync_fetch_and_add(&st->unwind_find_vma, s->find_vma);
		end = s->wm_end;
		if (end < UNWIND_END_KINDS)
			__sync_fetch_and_add(&st->unwind_end[end], 1);
		return sizeof(struct frame_record);
	}
	end = s->end ? s->end - 1 : UNWIND_END_DEPTH;
	/* The walk memo keeps walks that reached the outermost frame, from
	 * mappings it knew, with every word it read (walk_memo_keep). */
	if (s->wm_state == WALK_MEMO_RECORDING &&
	    (end > UNWIND_END_FP_END || s->wm_words > WALK_MEMO_WORDS || s->wm_skip || s->find_vma || us->nr < 2))
		s->wm_state = WALK_MEMO_OFF;
	s->wm_frames = s->walked;
	s->wm_fp_frames = s->fp_frames - s->wm_fp_frames;
	s->wm_end = end;
	__sync_fetch_and_add(&st->unwind_frames, s->walked); /* before a truncation mark */
	__sync_fetch_and_add(&st->unwind_fp_frames, s->fp_frames);
	__sync_fetch_and_add(&st->unwind_reads, c.win->reads);
	if (s->find_vma)
		__sync_fetch_and_add(&st->unwind_find_vma, s->find_vma);
	if (end < UNWIND_END_KINDS)
		__sync_fetch_and_add(&st->unwind_end[end], 1);
	if (s->walked > UNWIND_INNER) {
		/* A deep walk: its innermost frames, how many were left out,
		 * and its outermost, so its stack still ends at the root. */
		struct frame_record *rec = &us->frames[UNWIND_INNER];
		__u32 past = s->walked - UNWIND_INNER;

		rec->status = FRAME_ELIDED;
		__builtin_memset(rec->build_id, 0, sizeof(rec->build_id));
		rec->offset = past > UNWIND_OUTER ? past - UNWIND_OUTER : 0;
		*(__u32 *)rec->build_id = past > UNWIND_OUTER ? past & (UNWIND_OUTER - 1) : 0;
		__sync_fetch_and_add(&st->unwind_elided, rec->offset);
	}
	n = us->nr;
	if (end > UNWIND_END_FP_END && n < BPROF_UNWIND_DEPTH + 1) {
		struct frame_record *rec = &us->frames[n];

		rec->status = FRAME_TRUNCATED;
		__builtin_memset(rec->build_id, 0, sizeof(rec->build_id));
		rec->offset = end;
		us->nr = n + 1;
		hash_frame(s, n, rec);
	}
	*hash = s->hash;
	*hash2 = s->hash2;
	n = us->nr;
	if (n == 0)
		return -EFAULT;
	if (n > BPROF_UNWIND_DEPTH + 1)
		n = BPROF_UNWIND_DEPTH + 1;
	return n * sizeof(struct frame_record);
}

#endif /* BPROF_UNWIND_BPF_H */
