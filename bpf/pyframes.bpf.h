/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frames, walked in the sample program. For a process user space
 * learned runs a known interpreter (py_procs), the sampled thread's thread
 * state is found on the interpreter's thread list (by its kernel tid, or on
 * 3.10 its pthread id, the task's TLS base), cached per thread and checked
 * again at every use; its frame chain is walked from the current frame,
 * one py_frame per Python function call (the code object's address, an
 * identity hash of what it holds, the instruction, and whether the frame
 * began a C-level call of the eval loop), and stored by content in
 * py_stacks, whose id goes into the count key beside the native stacks'.
 * User space places each run of Python frames where its
 * _PyEval_EvalFrameDefault activation stands in the native stack.
 *
 * A thread's frames lie close together (from 3.11 in its data stack, its
 * callers below it): the walk copies the leaf frame with what lies below
 * it, down to the base of the thread's current data stack chunk (its
 * bounds are in the thread state) or else its page, into a per-CPU copy
 * (py_at) and takes the next frames' fields from there: one read for most
 * stacks, and a frame in the copy the last read made is found without
 * py_at's search. An eval call's shim on the C stack, or a generator's
 * frame, is read alone (3.12's innermost shim comes with the C stack
 * around the thread's current _PyCFrame, which is read anyway); other
 * objects too, each once a walk however often it recurs. The sampled
 * thread's state is kept per CPU as well: its next sample skips the hash
 * lookup.
 *
 * A code object's identity is its address and a hash of what it holds:
 * its pointers, first line and argument count, and 3.12+'s co_version
 * (numbered as code objects are made), or before 3.12 (no co_version) a
 * fingerprint of its name, file and line table (length, cached hash, first
 * and last bytes): another code object made at a freed one's address, with
 * its strings at the freed strings' addresses, has another identity. From
 * 3.12 the last walk's frames, kept per CPU, lend the next walk their
 * identities by depth while the counter co_version is taken from has not
 * moved (py_last_walk): a steady program's walks then read no code object
 * at all.
 *
 * The process's memory is hostile: every read is bounded, every pointer
 * checked (user range, aligned), every code object's type compared with
 * PyCode_Type; a chain that does not hold ends the walk, counted by why
 * (py_stats.end), keeping the frames read so far.
 *
 * A stack stored for the first time announces its code objects not
 * announced yet to user space (py_events) with their names and line
 * tables, copied here while the process lives: its names survive the
 * process's exit.
 *
 * Uses stacks.bpf.h's scratch slots and fnv_word. By what it does:
 * pyframes_state.bpf.h (the maps, the per-CPU walk and its reads),
 * pyframes_thread.bpf.h (the thread state), pyframes_identity.bpf.h (code
 * objects' identities), pyframes_announce.bpf.h (new code objects to user
 * space); here the frame chain's walk and the programs.
 */
#ifndef BPROF_PYFRAMES_BPF_H
#define BPROF_PYFRAMES_BPF_H

#include "pyframes_announce.bpf.h"
#include "pyframes_identity.bpf.h"
#include "pyframes_thread.bpf.h"

/* One frame of the chain: records w->frame and moves to its caller. 1 ends
 * the walk. open: built without bpf_loop, w being slot `slot`'s walk. */
static __always_inline long py_frame_step_in(struct py_walk *w, __u32 slot, const int open)
{
	struct py_offsets *o = &w->proc.o;
	__u64 f = w->frame, back, code, instr, start, id, off;
	__u32 n = w->stack.nr, flags = 0, at;
	struct py_frame *rec;
	__s32 lasti;
	int outside;

	if (!f)
		return py_stop(w, PY_END_ROOT);
	if (n >= PY_MAX_DEPTH)
		return py_stop(w, PY_END_DEPTH);
	off = f - w->fast_lo;
	if (off < w->fast_len && o->f_read <= w->fast_len - off && !(f & 7)) {
		/* In the data stack copy the last read made (most frames). */
		at = w->fast_at + (__u32)off;
		outside = 0;
	} else {
		if (!py_ptr_ok(f))
			return py_stop(w, PY_END_POINTER);
		/* A frame outside the thread's current data stack chunk is
		 * an eval call's shim on the C stack or a generator's, read
		 * alone, until one of an earlier chunk shows the stack goes
		 * on there. */
		outside = w->chunk && (f < w->chunk || f + o->f_read > w->limit);
		at = py_at(w, f, o->f_read,
			   w->proc.model == PY_MODEL_310 || (outside && !w->older) ? PY_ALONE : PY_PAGE);
		if (at == PY_AT_FAIL)
			return py_stop(w, PY_END_READ);
	}
	back = py_u64(w, at, o->f_back);
	if (back == f)
		return py_stop(w, PY_END_LOOP);
	if (w->proc.model == PY_MODEL_312 && py_u8(w, at, o->f_entry) == PY_OWNED_BY_CSTACK) {
		/* An eval call's shim: the frame below it began that call. */
		if (n > 0 && n <= PY_MAX_DEPTH) {
			w->stack.frames[(n - 1) & (PY_MAX_DEPTH - 1)].flags |= PY_FRAME_ENTRY;
			py_hash(w, PY_FRAME_ENTRY);
		}
		w->frame = back;
		return 0;
	}
	if (outside && !w->older)
		w->older = 1;
	code = py_u64(w, at, o->f_code);
	if (w->proc.model == PY_MODEL_310) {
		lasti = (__s32)py_u32(w, at, o->f_instr);
		if (lasti < 0)
			lasti = PY_NO_LASTI;
		flags = PY_FRAME_ENTRY;
	} else {
		instr = py_u64(w, at, o->f_instr);
		start = code + o->co_code;
		lasti = instr >= start && instr - start < (1U << 30) ? (__s32)((instr - start) / 2) : PY_NO_LASTI;
		if (w->proc.model == PY_MODEL_311 && py_u8(w, at, o->f_entry))
			flags = PY_FRAME_ENTRY;
	}
	if (!py_ptr_ok(code))
		return py_stop(w, PY_END_POINTER);
	/* The last walk's identity at this depth (the record this frame
	 * replaces), without a call. */
	rec = &w->stack.frames[n & (PY_MAX_DEPTH - 1)];
	id = w->gen && n < w->last.valid && rec->code == code ? rec->id : 0;
	if (!id)
		id = open ? py_code_id_open(slot, code) : py_code_id(w, code);
	if (!id)
		return py_stop(w, w->why < PY_END_KINDS ? w->why : PY_END_READ);
	rec->code = code;
	rec->id = id;
	rec->lasti = lasti;
	rec->flags = flags;
	w->stack.nr = n + 1;
	w->frame = back;
	/* One word of the frame: code and id mixed (ids are hashes). */
	py_hash(w, (code ^ id * 0x9e3779b97f4a7c15ULL) + ((__u64)(__u32)lasti << 32 | flags));
	return 0;
}

/* py_frame_step_in as bpf_loop's callback. */
static long py_frame_step(__u32 i, struct py_step_ctx *c)
{
	return py_frame_step_in(c->w, 0, 0);
}

/* One frame of scratch slot `slot`'s walk, for a program built without
 * bpf_loop: a global function of numbers (5.10), verified once. */
__noinline int py_frame_step_open(__u32 slot)
{
	struct py_walk *w = bpf_map_lookup_elem(&py_scratch, &slot);

	if (!w)
		return 1;
	return py_frame_step_in(w, slot, 1);
}

/* The process's entry; a forked child that has not exec'd runs its
 * parent's interpreter at the same addresses, and takes a copy of its
 * parent's entry (see parent_chunk in unwind.bpf.h). */
static __always_inline struct py_proc *py_proc_of(struct task_struct *task, __u32 tgid)
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
	PY_COUNT(forked, 1);
	return bpf_map_lookup_elem(&py_procs, &tgid);
}

/* The current thread's Python stack, walked into w->stack (w->proc set):
 * how the walk ended. Inline in py_stack_id: a frame of its own took the
 * deepest chain of calls (offcpu_switch's) past 6.1's 512 bytes. */
static __always_inline __u32 py_walk(struct py_walk *w, __u32 slot, __u64 pid_tgid, const int open)
{
	struct task_struct *task = current_task();
	struct py_step_ctx step;
	__u64 ts, frame = 0, cframe;
	__u32 at;

	if (!w)
		return PY_END_READ;
	/* 3.10 keeps no kernel tid: its pthread id is the thread's TLS base. */
	w->want = w->proc.model == PY_MODEL_310 ? BPF_CORE_READ(task, thread.fsbase) : (__u32)pid_tgid;
	ts = open ? py_thread_state_open(slot, pid_tgid) : py_thread_state(slot, pid_tgid);
	if (!ts)
		return PY_END_NO_THREAD;
	at = py_at(w, ts, w->proc.o.ts_read, PY_ALONE);
	frame = at == PY_AT_FAIL ? 0 : py_u64(w, at, w->proc.o.ts_frame);
	w->chunk = 0;
	w->limit = 0;
	w->wide = 0;
	w->older = 0;
	if (w->proc.o.ts_chunk && at != PY_AT_FAIL) {
		w->chunk = py_u64(w, at, w->proc.o.ts_chunk);
		w->limit = py_u64(w, at, w->proc.o.ts_chunk + 16);
		if (!py_ptr_ok(w->chunk) || w->limit <= w->chunk || w->limit - w->chunk > (1U << 30))
			w->chunk = w->limit = 0;
	}
	/* The code object counter, read before any code object. */
	w->gen = 0;
	w->mm = (__u64)BPF_CORE_READ(task, mm);
	if (w->proc.gen_addr) {
		bpf_probe_read_user(&w->gen, 4, (void *)w->proc.gen_addr);
	} else if (w->proc.o.interp_gen && at != PY_AT_FAIL) {
		__u64 interp = py_u64(w, at, w->proc.o.ts_interp);

		if (py_ptr_ok(interp))
			bpf_probe_read_user(&w->gen, 4, (void *)(interp + w->proc.o.interp_gen));
	}
	/* The last walk's identities hold for this one if it was of this
	 * process and address space and no code object was made since. */
	if (!w->gen || w->last.tgid != w->tgid || w->last.mm != w->mm || w->last.gen != w->gen) {
		w->last.tgid = w->tgid;
		w->last.mm = w->mm;
		w->last.gen = w->gen;
		w->last.valid = 0;
	}
	if (frame && w->proc.o.cframe_frame) {
		cframe = frame;
		frame = 0;
		if (!py_ptr_ok(cframe))
			return PY_END_READ;
		/* 3.12: the C stack around the cframe holds the innermost
		 * eval call's shim frame too (the same activation's locals). */
		if (w->proc.model == PY_MODEL_312) {
			PY_COUNT(reads, 1);
			if (!bpf_probe_read_user(&w->win[PY_WIN], PY_CST, (void *)(cframe - PY_CST / 2))) {
				w->cst_start = cframe - PY_CST / 2;
				w->cst_len = PY_CST;
				frame = py_u64(w, PY_WIN + PY_CST / 2, w->proc.o.cframe_frame - 1);
			}
		}
		if (!w->cst_len) {
			PY_COUNT(reads, 1);
			if (bpf_probe_read_user(&frame, 8, (void *)(cframe + w->proc.o.cframe_frame - 1)))
				return PY_END_READ;
		}
	}
	if (!frame)
		return PY_END_IDLE;
	w->frame = frame;
	step.w = w;
	if (open) {
		for (__u32 i = 0; i < PY_MAX_DEPTH + 1; i++)
			if (py_frame_step_open(slot))
				break;
	} else {
		bpf_loop(PY_MAX_DEPTH + 1, py_frame_step, &step, 0);
	}
	return w->end ? w->end - 1 : PY_END_DEPTH;
}

/* The current thread's Python stack as a py_stacks id: PY_STACK_NONE when
 * it runs no Python, negative when the stack was lost (map full). open:
 * built without bpf_loop (loop.bpf.h). */
static __always_inline __s32 py_stack_id_in(__u32 slot, const int open)
{
	struct task_struct *task = current_task();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, end;
	struct py_proc *proc;
	struct py_walk *w;
	__s32 id = PY_STACK_NONE;

	proc = py_proc_of(task, tgid);
	if (!proc)
		return PY_STACK_NONE;
	w = bpf_map_lookup_elem(&py_scratch, &slot);
	if (!w)
		return PY_STACK_NONE;
	/* In the walk, not on the stack (see py_thread_state). */
	w->t0 = bpf_ktime_get_ns();
	w->proc = *proc;
	w->tgid = tgid;
	w->end = 0;
	w->stack.nr = 0;
	w->stack.end = 0;
	w->h1 = fnv_word(0xcbf29ce484222325ULL, tgid);
	w->h2 = 0x84222325cbf29ce4ULL ^ tgid;
	/* Copies of another walk's memory, or identities of its code objects,
	 * may be stale now. */
	__builtin_memset(w->len, 0, sizeof(w->len));
	w->cst_len = 0;
	w->fast_len = 0;
	w->next_memo = 0;
	w->next_print = 0;
	PY_COUNT(walks, 1);
	end = py_walk(w, slot, pid_tgid, open);
	/* The checked value, not one clang merged the checks of. */
	barrier_var(end);
	if (end < PY_END_KINDS)
		PY_COUNT(end[end], 1);
	PY_COUNT(frames, w->stack.nr);
	/* The frames recorded hold identities the next walk may take. */
	if (w->gen && w->stack.nr > w->last.valid)
		w->last.valid = w->stack.nr;
	if (w->stack.nr) {
		w->stack.end = end;
		w->stored = 0;
		id = open ? py_intern_open(slot) : py_intern(slot);
		if (id < 0)
			PY_COUNT(lost, 1);
		else if (w->stored)
			open ? py_stored_open(slot, id) : py_stored(slot, id);
	}
	PY_COUNT(ns, bpf_ktime_get_ns() - w->t0);
	return id;
}

/* py_stack_id_in as a global function: verified once for its callers. */
__noinline __s32 py_stack_id(__u32 slot)
{
	return py_stack_id_in(slot, 0);
}

/* The same without bpf_loop. */
__noinline __s32 py_stack_id_open(__u32 slot)
{
	return py_stack_id_in(slot, 1);
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
