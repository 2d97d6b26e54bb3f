/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: the user stack walked here, in the sample program,
 * with unwind tables user space built from each mapped file's .eh_frame
 * (src/unwind/). The result is the same (build ID, file offset) records
 * bpf_get_stack(BPF_F_USER_BUILD_ID) gives, so storage, counting and
 * symbolization do not change.
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
 * Included by profile.bpf.c after its maps.
 */
#ifndef BPROF_UNWIND_BPF_H
#define BPROF_UNWIND_BPF_H

#include "unwind_state.bpf.h"

struct unwind_ctx {
	struct user_stack *us;
	struct walk_state *s;
	struct stack_window *win;
	struct rule_memos *memo;
	struct map_memos *maps;
	struct last_walk *last;
	struct walk_memos *wm;
};

/* VM_EXEC: the same bit in every kernel. */
#define BPROF_VM_EXEC 0x4

static long vma_cb(struct task_struct *task, struct vm_area_struct *vma, struct vma_info *v)
{
	/* Read as plain memory, not through the trusted pointer: the verifier
	 * looks each such pointer load up by name among ~150 000 BTF types. */
	struct file *f = BPF_CORE_READ(vma, vm_file);

	/* Not code: no mapping for a walk (a return address there is garbage)
	 * nor one to learn. */
	if (!(BPF_CORE_READ(vma, vm_flags) & BPROF_VM_EXEC)) {
		v->start = v->end = 0;
		return 0;
	}
	v->start = BPF_CORE_READ(vma, vm_start);
	v->end = BPF_CORE_READ(vma, vm_end);
	v->off = BPF_CORE_READ(vma, vm_pgoff) << PAGE_SHIFT_X86;
	v->key.dev = 0;
	v->key.ino = 0;
	if (f) {
		v->key.ino = BPF_CORE_READ(f, f_inode, i_ino);
		v->key.dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	}
	return 0;
}

/* learn's look at one slot (a bpf_loop callback: the slot loop unrolled
 * in learn cost ~5 ms of verification in each program that calls it). */
struct learn_scan {
	struct unwind_chunk *ch;
	const struct vma_info *v;
	/* 64-bit, as slot_search's hit: 6.1's verifier bounds a 32-bit one
	 * too loosely for the slot's offset. */
	__u64 free;
	__u32 known;
	__u32 drop; /* slots learned for another address space */
};

static long scan_slot(__u32 k, struct learn_scan *ls)
{
	const struct vma_info *v = ls->v;
	struct unwind_map_slot *sl;

	if (k >= UNWIND_CHUNK_SLOTS)
		return 1;
	sl = &ls->ch->slots[k];
	if (ls->drop >> k & 1) {
		sl->start = 0;
		sl->end = 0;
	} else if (sl->end && sl->start < v->end && v->start < sl->end) {
		if (sl->start == v->start && sl->end == v->end && sl->off == v->off && sl->file.ino == v->key.ino &&
		    sl->file.dev == v->key.dev) {
			ls->known = 1;
			return 1;
		}
		sl->start = 0;
		sl->end = 0;
		ls->ch->learned &= ~(1U << k);
	}
	if (!sl->end && ls->free == UNWIND_CHUNK_SLOTS)
		ls->free = k;
	return 0;
}

/*
 * Keeps a mapping the kernel showed (bpf_find_vma) in chunk mk of
 * unwind_maps, at a target's mmap or exec (learn_mmap, learn_exec) or after
 * a walk that had to ask for it, so that a process's first ms walk before
 * user space has read its mmap records.
 * The slot is marked learned for address space mm: learned slots of another
 * (before an exec, or of a process whose pid this one reuses) are dropped
 * first, and a slot the new mapping overlaps is replaced (the kernel
 * unmapped it). User space's own view replaces the chunk when it comes, and
 * moves unwind_gen on then: until that, the walks' memos can still hold a
 * replaced mapping, as they did before any learning. Returns 1 when a slot
 * was added. A global function: verified once, not at each caller.
 */
__noinline int learn(const struct unwind_map_key *mk, const struct vma_info *v, __u64 mm)
{
	struct learn_scan ls = { .v = v, .free = UNWIND_CHUNK_SLOTS };
	struct unwind_map_slot *sl;
	struct unwind_map_key key;
	__u64 k;

	/* A global function's pointer arguments may be NULL to the verifier,
	 * which checks it once for all callers; and 6.1's takes a map key only
	 * from the stack. */
	if (!mk || !v)
		return 0;
	key = *mk;
	ls.ch = bpf_map_lookup_elem(&unwind_maps, &key);
	if (!ls.ch) {
		bpf_map_update_elem(&unwind_maps, &key, &unwind_zero_chunk, BPF_NOEXIST);
		ls.ch = bpf_map_lookup_elem(&unwind_maps, &key);
		if (!ls.ch)
			return 0;
	}
	if (ls.ch->learned_mm != mm) {
		ls.drop = ls.ch->learned;
		ls.ch->learned = 0;
		ls.ch->learned_mm = mm;
	}
	bpf_loop(UNWIND_CHUNK_SLOTS, scan_slot, &ls, 0);
	k = ls.free;
	if (ls.known || k >= UNWIND_CHUNK_SLOTS)
		return 0;
	sl = &ls.ch->slots[k];
	sl->start = v->start;
	sl->off = v->off;
	sl->file = v->key;
	sl->end = v->end;
	ls.ch->learned |= 1U << k;
	return 1;
}

/* One halving of find_row's search, as a bpf_loop callback: the verifier
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

/* Which slot of a chunk holds `ip`, as a bpf_loop callback: unrolled, the
 * eight ways out of the search were eight states the verifier carried
 * through the rest of the frame. */
struct slot_search {
	struct unwind_chunk *ch;
	__u64 ip;
	/* 64-bit: 6.1's verifier bounds a 32-bit compare's result loosely,
	 * and the slot's offset (hit * 40) then past the chunk's end. */
	__u64 hit;
	__u32 skip; /* slots learned for another address space */
	__u32 pad;
};

static long slot_step(__u32 k, struct slot_search *s)
{
	struct unwind_map_slot *sl;

	if (k >= UNWIND_CHUNK_SLOTS)
		return 1;
	sl = &s->ch->slots[k];
	if (s->ip >= sl->start && s->ip < sl->end && !(s->skip >> k & 1)) {
		s->hit = k;
		return 1;
	}
	return 0;
}

/* The slot of chunk ch that holds ip, into v: learned slots only if they
 * were learned in address space mm. */
static __always_inline int chunk_slot(struct unwind_chunk *ch, __u64 ip, __u64 mm, struct vma_info *v)
{
	struct slot_search ss = { .ch = ch, .ip = ip, .hit = UNWIND_CHUNK_SLOTS };
	struct unwind_map_slot *sl;

	if (ch->learned_mm != mm)
		ss.skip = ch->learned;
	bpf_loop(UNWIND_CHUNK_SLOTS, slot_step, &ss, 0);
	if (ss.hit >= UNWIND_CHUNK_SLOTS)
		return -ENOENT;
	sl = &ch->slots[ss.hit];
	v->start = sl->start;
	v->end = sl->end;
	v->off = sl->off;
	v->key = sl->file;
	return 0;
}

/* A forked child that has not exec'd runs a copy of its parent's image:
 * until user space has read the fork record and copied the parent's
 * mappings (the child has no chunk there yet), the parent's chunk serves,
 * if the parent has not exec'd since either (the exec ids), with *mm set to
 * the parent's for its learned slots. Without it each of the child's first
 * samples could ask the kernel for one mapping only (see learn), and a
 * shell's children would end their walks at the second. */
static __always_inline struct unwind_chunk *parent_chunk(struct task_struct *task, __u64 chunk, __u64 *mm)
{
	struct task_struct *parent;
	struct unwind_map_key pk = { .chunk = chunk };
	__u64 id = BPF_CORE_READ(task, parent_exec_id);

	if (BPF_CORE_READ(task, self_exec_id) != id)
		return 0;
	parent = BPF_CORE_READ(task, real_parent);
	if (!parent || BPF_CORE_READ(parent, self_exec_id) != id)
		return 0;
	pk.tgid = BPF_CORE_READ(parent, tgid);
	if (pk.tgid == task->tgid)
		return 0;
	*mm = (__u64)BPF_CORE_READ(parent, mm);
	return bpf_map_lookup_elem(&unwind_maps, &pk);
}

/* The rule id of file offset `off`: its row's, the last row with pc <= off
 * (the page index narrows the search to the rows of off's page), or -1. A
 * global function, verified once: inlined, each of its ways out was
 * checked with the rest of frame_rule. */
__noinline __s64 find_rule(const struct unwind_file *f, __u64 off)
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
	bpf_loop(24, search_step, &r, 0);
	if (r.fault)
		return -1;
	idx = f->first_row + r.lo;
	row = bpf_map_lookup_elem(seg, &idx);
	return row ? row->rule : -1;
}

static __always_inline long stop(struct unwind_ctx *c, enum unwind_end why)
{
	c->s->end = why + 1;
	return 1;
}

/* Record n's part in the walk's hashes: none for the leaf (record 0), which
 * goes into the count key while the stored stack holds FRAME_IN_KEY there
 * (unwound_stack_id), so the hashes name the callers alone. */
static __always_inline void hash_frame(struct walk_state *s, __u32 n, const struct frame_record *rec)
{
	if (n)
		hash_record(&s->hash, &s->hash2, (const __u64 *)rec);
}

/* A frame known by its address alone (no mapping, or a file without a
 * build ID). Records are hashed and compared whole: no stale bytes. */
static __always_inline void ip_record(struct frame_record *rec, __u64 ip)
{
	rec->status = FRAME_IP;
	__builtin_memset(rec->build_id, 0, sizeof(rec->build_id));
	rec->offset = ip;
}

/* Refills the window from user address addr: UNWIND_WINDOW bytes, or if
 * they are not all there, to the end of addr's page (or the one word when
 * it crosses into the next page).
 * A global function, verified once rather than at each of the walk's eight
 * reads; the reads themselves stay inline, as most hit the window. */
__noinline int win_refill(struct stack_window *w, __u64 addr)
{
	__u64 len;

	if (!w)
		return -1;
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

/* The user word at addr, from the window (refilled when addr is outside). */
static __always_inline int win_read(struct stack_window *w, __u64 *dst, __u64 addr)
{
	__u64 off;

	if ((addr < w->lo || addr + 8 > w->hi) && win_refill(w, addr))
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
static __always_inline int read_u64(struct unwind_ctx *c, __u64 *dst, __u64 addr)
{
	return win_read(c->win, dst, addr);
}

#include "walk_memo.bpf.h"
#include "epilogue.bpf.h"

/* The mapping of s->ip (and its file's unwind_files entry) into s->vma,
 * s->have_file and s->file: from this CPU's memo, unwind_maps (user
 * space's view, or the parent's for a fork that has not exec'd) or the
 * kernel. 0, or -ENOENT / -EBUSY. A global function, verified once: inlined,
 * its ways to a mapping were each checked with the rest of the frame, and
 * its stack added to the walk's past 6.1's 512 bytes. The walk is always
 * the current task's. */
__noinline int map_frame(struct walk_state *s, struct map_memos *maps)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct unwind_map_key mk = {};
	struct map_memo_entry *me;
	struct unwind_chunk *ch;
	struct unwind_file *file;
	struct vma_info v = {};
	__u64 mm;
	long err;

	if (!s || !maps)
		return -ENOENT;
	mk.tgid = task->tgid;
	mk.chunk = s->ip >> UNWIND_CHUNK_SHIFT;
	me = &maps->e[((s->mm >> 6 ^ mk.chunk) * 0x9e3779b97f4a7c15ULL) >> (64 - MAP_MEMO_BITS)];
	if (me->mm == s->mm && me->gen == s->gen && me->tgid == mk.tgid && s->ip >= me->vma.start &&
	    s->ip < me->vma.end) {
		s->vma = me->vma;
		s->have_file = me->have_file;
		if (me->have_file)
			s->file = me->file;
		return 0;
	}
	ch = bpf_map_lookup_elem(&unwind_maps, &mk);
	mm = s->mm;
	if (!ch)
		ch = parent_chunk(task, mk.chunk, &mm);
	err = ch ? chunk_slot(ch, s->ip, mm, &v) : -ENOENT;
	/* Neither user space nor learn_mmap has it: ask the kernel (once per
	 * run). */
	if (err) {
		err = bpf_find_vma(task, s->ip, vma_cb, &v, 0);
		if (!err && !v.end)
			err = -ENOENT;
		/* Kept in unwind_maps after the walk (learn from here would
		 * take the combined stack past 6.1's 512 bytes): the kernel
		 * serves one lookup per program run, so a new process learns
		 * one mapping per sample where learn_mmap does not run
		 * (--mmap-hook). */
		if (!err) {
			s->find_vma++;
			if (v.key.ino && !s->learn) {
				s->learn = 1;
				s->learn_key = mk;
				s->learn_vma = v;
			}
		}
	}
	if (err)
		return err == -EBUSY ? -EBUSY : -ENOENT;
	s->vma = v;
	/* The file's entry is copied once per mapping change, not looked up
	 * per frame. */
	s->have_file = 0;
	if (v.key.ino) {
		file = bpf_map_lookup_elem(&unwind_files, &v.key);
		if (file) {
			s->file = *file;
			s->have_file = 1;
		}
	}
	me->mm = s->mm;
	me->gen = s->gen;
	me->tgid = mk.tgid;
	me->vma = v;
	me->have_file = s->have_file;
	if (s->have_file)
		me->file = s->file;
	return 0;
}

/* Frame n (at s->ip in mapping s->vma): writes its record into rec and
 * hashes it, and puts its rule into s->rule from the last walk, the rule
 * memo or the file's table. Returns 1 when a rule was found. A global
 * function: the verifier checks it once, where inlined its three sources of
 * a rule times the two kinds of record were each checked with the rest of
 * the frame. */
__noinline int frame_rule(struct walk_state *s, struct frame_record *rec, struct last_walk *lw,
			  struct rule_memos *memo, __u32 n)
{
	struct unwind_file *file;
	struct unwind_rule *rule = 0;
	__u64 off, lookup;
	int found = 0;

	if (!s || !rec || !lw || !memo)
		return 0;
	off = s->ip - s->vma.start + s->vma.off;
	file = s->have_file ? &s->file : 0;
	if (file && (file->flags & UNWIND_FILE_BUILD_ID)) {
		rec->status = FRAME_FILE;
		__builtin_memcpy(rec->build_id, file->build_id, sizeof(rec->build_id));
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
		__s64 id = find_rule(file, lookup);
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

/* One frame: records c->s->ip, then moves ip/sp/bp to the caller. 1 ends. */
static long unwind_step(__u32 i, struct unwind_ctx *c)
{
	struct frame_record *rec;
	struct unwind_rule r;
	int found;
	struct user_stack *us = c->us;
	__u64 cfa, ra;
	__u32 n = us->nr;
	long err;

	if (n >= BPROF_UNWIND_DEPTH)
		return stop(c, UNWIND_END_DEPTH);
	if (c->s->ip == 0)
		return stop(c, UNWIND_END_ROOT);
	if (n == 1 && walk_memo_hit(c->s, c->wm, c->win, c->last->tgid))
		return 1;
	if (c->s->ip < c->s->vma.start || c->s->ip >= c->s->vma.end) {
		err = map_frame(c->s, c->maps);
		if (err) {
			rec = &us->frames[n];
			ip_record(rec, c->s->ip);
			us->nr = n + 1;
			hash_frame(c->s, n, rec);
			return stop(c, err == -EBUSY ? UNWIND_END_VMA_BUSY : UNWIND_END_NO_MAPPING);
		}
	}
	rec = &us->frames[n];
	found = frame_rule(c->s, rec, c->last, c->memo, n);
	us->nr = n + 1;
	r = c->s->rule;
	c->s->exact = 0;

	if (!found || r.cfa_type == UNWIND_CFA_NONE) {
		/* No table: an epilogue at the PC, else the frame pointer. */
		c->s->wm_skip = 1;
		err = follow_epilogue(c);
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
		if (load_bp(c, c->s->bp) || read_u64(c, &ra, cfa - 8))
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
		if (read_u64(c, &cfa, c->s->bp + r.cfa_off))
			return stop(c, UNWIND_END_READ_FAULT);
		break;
	case UNWIND_CFA_SIGNAL: {
		/* Returned into __restore_rt: rsp is the rt_sigframe's ucontext,
		 * whose uc_mcontext (at 40) holds the interrupted registers. */
		__u64 mc = c->s->sp + 40;

		c->s->wm_skip = 1;
		if (load_bp(c, mc + 80) || read_u64(c, &c->s->sp, mc + 120) || read_u64(c, &c->s->ip, mc + 128))
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
		if (load_bp(c, cfa + r.rbp_off))
			return stop(c, UNWIND_END_READ_FAULT);
		c->s->bp_valid = 1;
	} else if (r.rbp_type == UNWIND_RBP_UNKNOWN) {
		c->s->bp_valid = 0;
	}
	if (read_u64(c, &ra, cfa - 8))
		return stop(c, UNWIND_END_READ_FAULT);
	memo_record(c, cfa - 8, ra);
	c->s->sp = cfa;
	c->s->ip = ra;
	return 0;
}

/* Walks the current task's user stack into `us`; counts how it ended and
 * marks an early end with a FRAME_TRUNCATED record. Returns the bytes
 * of records, or a negative error. When the walk memo held the frames
 * past the leaf, `us` holds the leaf alone and cs->walk the stack's id
 * (wm_state WALK_MEMO_HIT, wm_id: not an out argument, whose stack slot
 * took 6.1's combined stack past 512 bytes). */
static __always_inline long unwind_user(struct profile_stats *st, const struct uregs *ur, struct user_stack *us,
					struct cpu_scratch *cs, __u64 mm, __u64 *hash, __u64 *hash2)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct unwind_ctx c = {};
	struct walk_state *s;
	__u32 n, end, zero = 0;
	__u64 *gen;

	s = &cs->walk;
	__builtin_memset(s, 0, sizeof(*s));
	if (ur->valid) {
		s->ip = ur->ip;
		__builtin_memcpy(s->r, ur->r, sizeof(s->r));
	} else {
		/* The sample hit the kernel (or the task is switching out): the
		 * user registers saved at kernel entry. */
		struct x86_regs *regs = (struct x86_regs *)bpf_task_pt_regs(task);

		if (!regs)
			return -EFAULT;
		s->ip = regs->ip;
		DWARF_REGS(s->r, regs);
		__sync_fetch_and_add(&st->unwind_task_regs, 1);
	}
	s->sp = s->r[7];
	s->bp = s->r[6];
	c.us = us;
	c.s = s;
	c.win = &cs->win;
	c.memo = &cs->memo;
	c.maps = &cs->maps;
	c.last = &cs->last;
	c.wm = &cs->wmemo;
	*hash = 0;
	*hash2 = 0;
	gen = bpf_map_lookup_elem(&unwind_gen, &zero);
	if (!gen)
		return -ENOMEM;
	/* Read before any lookup of unwind_maps or unwind_files (see
	 * map_memo_entry). */
	s->gen = *gen;
	s->mm = mm;
	if (c.last->mm != s->mm || c.last->gen != s->gen || c.last->tgid != task->tgid) {
		c.last->mm = s->mm;
		c.last->gen = s->gen;
		c.last->tgid = task->tgid;
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
	bpf_loop(BPROF_UNWIND_DEPTH + 1, unwind_step, &c, 0);
	if (s->learn && learn(&s->learn_key, &s->learn_vma, s->mm))
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
	s->wm_frames = us->nr;
	s->wm_fp_frames = s->fp_frames - s->wm_fp_frames;
	s->wm_end = end;
	__sync_fetch_and_add(&st->unwind_frames, us->nr); /* before a truncation mark */
	__sync_fetch_and_add(&st->unwind_fp_frames, s->fp_frames);
	__sync_fetch_and_add(&st->unwind_reads, c.win->reads);
	if (s->find_vma)
		__sync_fetch_and_add(&st->unwind_find_vma, s->find_vma);
	if (end < UNWIND_END_KINDS)
		__sync_fetch_and_add(&st->unwind_end[end], 1);
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
