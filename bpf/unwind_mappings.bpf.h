/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --call-graph dwarf: which mapping (and so which file's table) a PC is
 * in. map_frame asks this CPU's mapping memo, then unwind_maps (user
 * space's view, or the parent's for a fork that has not exec'd), then the
 * kernel (bpf_find_vma); learn keeps what the kernel showed in
 * unwind_maps, after a walk or at a target's mmap or exec (learn_mmap,
 * learn_exec in profile.bpf.c).
 */
#ifndef BPROF_UNWIND_MAPPINGS_BPF_H
#define BPROF_UNWIND_MAPPINGS_BPF_H

#include "kernel.bpf.h"
#include "current_task.bpf.h"
#include "loop.bpf.h"
#include "profile.h"
#include "unwind_state.bpf.h"

/* A file's key (device, inode) into key; 0, 0 for none. */
static __always_inline void file_key_of(struct file *f, struct unwind_file_key *key)
{
	key->dev = 0;
	key->ino = 0;
	if (f) {
		key->ino = BPF_CORE_READ(f, f_inode, i_ino);
		key->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	}
}

/* Mapping vma into v; end 0 where it is not code. */
static __always_inline void vma_info_of(struct vm_area_struct *vma, struct vma_info *v)
{
	/* Not code: no mapping for a walk (a return address there is garbage)
	 * nor one to learn. */
	if (!(BPF_CORE_READ(vma, vm_flags) & BPROF_VM_EXEC)) {
		v->start = v->end = 0;
		return;
	}
	v->start = BPF_CORE_READ(vma, vm_start);
	v->end = BPF_CORE_READ(vma, vm_end);
	v->off = BPF_CORE_READ(vma, vm_pgoff) << PAGE_SHIFT_X86;
	file_key_of(BPF_CORE_READ(vma, vm_file), &v->key);
}

/* bpf_find_vma's callback. Fields are read as plain memory, not through
 * the trusted pointer: the verifier looks each such pointer load up by name
 * among all the kernel's BTF types. */
static long vma_cb(struct task_struct *task, struct vm_area_struct *vma, struct vma_info *v)
{
	vma_info_of(vma, v);
	return 0;
}

/* learn's look at one slot (a bpf_loop callback: the slot loop unrolled
 * in learn was verified again in each program that calls it). */
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
 * Keeps a mapping the kernel showed (bpf_find_vma, or without it an mmap's
 * arguments or the mm's list of mappings) in chunk mk of
 * unwind_maps, at a target's mmap or exec (learn_mmap, learn_exec) or after
 * a walk that had to ask for it, so that a process's first ms walk before
 * user space has read its mmap records.
 * The slot is marked learned for address space mm: learned slots of another
 * (before an exec, or of a process whose pid this one reuses) are dropped
 * first, and a slot the new mapping overlaps is replaced (the kernel
 * unmapped it). User space's own view replaces the chunk when it comes, and
 * moves unwind_gen on then: until that, the walks' memos can still hold a
 * replaced mapping, as they did before any learning. Returns 1 when a slot
 * was added. open: the program is built without bpf_loop.
 */
static __always_inline int learn_in(const struct unwind_map_key *mk, const struct vma_info *v, __u64 mm,
				    const int open)
{
	struct learn_scan ls = { .v = v, .free = UNWIND_CHUNK_SLOTS };
	struct unwind_map_slot *sl;
	struct unwind_map_key key;
	__u64 k;

	/* 6.1's verifier takes a map key only from the stack. */
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
	LOOP(open, UNWIND_CHUNK_SLOTS, UNWIND_CHUNK_SLOTS, scan_slot, &ls);
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

/* learn_in as a global function: verified once, not at each caller. */
__noinline int learn(const struct unwind_map_key *mk, const struct vma_info *v, __u64 mm)
{
	/* A global function's pointer arguments may be NULL to the verifier,
	 * which checks it once for all callers. */
	if (!mk || !v)
		return 0;
	return learn_in(mk, v, mm, 0);
}

/* What learn_open learns: set by its caller, per CPU, as 5.10's verifier
 * takes only numbers for a global function's arguments. */
struct learn_args {
	struct vma_info v;
	__u64 mm;
	__u32 tgid;
	__u32 vmas; /* learn_exec_step: mappings of the list looked at */
	__u64 next_vma; /* learn_exec_step: the list's next mapping */
	__u64 chunk, last_chunk; /* learn_exec_step: v's chunks left */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct learn_args);
} learn_args SEC(".maps");

/* learn for a program built without bpf_loop: learn_args' mapping into
 * its chunk `chunk`. */
__noinline int learn_open(__u64 chunk)
{
	__u32 zero = 0;
	struct learn_args *a = bpf_map_lookup_elem(&learn_args, &zero);
	struct unwind_map_key mk = { .chunk = chunk };

	if (!a)
		return 0;
	mk.tgid = a->tgid;
	return learn_in(&mk, &a->v, a->mm, 1);
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
static __always_inline int chunk_slot(struct unwind_chunk *ch, __u64 ip, __u64 mm, struct vma_info *v,
				      const int open)
{
	struct slot_search ss = { .ch = ch, .ip = ip, .hit = UNWIND_CHUNK_SLOTS };
	struct unwind_map_slot *sl;

	if (ch->learned_mm != mm)
		ss.skip = ch->learned;
	LOOP(open, UNWIND_CHUNK_SLOTS, UNWIND_CHUNK_SLOTS, slot_step, &ss);
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
	if (pk.tgid == TASK_FIELD(task, tgid))
		return 0;
	*mm = (__u64)BPF_CORE_READ(parent, mm);
	return bpf_map_lookup_elem(&unwind_maps, &pk);
}

/* The mapping of s->ip (and its file's unwind_files entry) into s->vma,
 * s->have_file and s->file: from this CPU's memo, unwind_maps (user
 * space's view, or the parent's for a fork that has not exec'd) or the
 * kernel. 0, or -ENOENT / -EBUSY. The walk is always the current task's.
 * open: the program is built without bpf_loop, and so without
 * bpf_find_vma (both 5.17): the mappings are user space's (from /proc and
 * the mmap records) and what learn_mmap_open and learn_exec_open learned. */
static __always_inline int map_frame_in(struct walk_state *s, struct map_memos *maps, const int open)
{
	struct task_struct *task = current_task();
	struct unwind_map_key mk = {};
	struct map_memo_entry *me;
	struct unwind_chunk *ch;
	struct unwind_file *file;
	struct vma_info v = {};
	__u64 mm;
	long err;

	mk.tgid = TASK_FIELD(task, tgid);
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
	err = ch ? chunk_slot(ch, s->ip, mm, &v, open) : -ENOENT;
	/* Neither user space nor learn_mmap has it: ask the kernel (once per
	 * run). */
	if (err && !open) {
		/* (A kernel with bpf_find_vma has the BTF task too.) */
		err = bpf_find_vma(bpf_get_current_task_btf(), s->ip, vma_cb, &v, 0);
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

/* map_frame_in as a global function, verified once: inlined, its ways to a
 * mapping were each checked with the rest of the frame, and its stack
 * added to the walk's past 6.1's 512 bytes. */
__noinline int map_frame(struct walk_state *s, struct map_memos *maps)
{
	if (!s || !maps)
		return -ENOENT;
	return map_frame_in(s, maps, 0);
}

/* The same without bpf_loop (numbers only as arguments: 5.10): context
 * `slot`'s walk. */
__noinline int map_frame_open(__u32 slot)
{
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);

	if (!cs)
		return -ENOENT;
	return map_frame_in(&cs->walk, &cs->maps, 1);
}

#endif /* BPROF_UNWIND_MAPPINGS_BPF_H */
