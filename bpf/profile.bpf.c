// SPDX-License-Identifier: GPL-2.0
/*
 * bprof's kernel side. Every event is counted in place into a hash map keyed
 * by (thread, kernel stack, user stack, kind); nothing per event is sent to
 * user space, which drains the unique keys and stacks into its own
 * aggregate while recording (see count_slot) and once more at the end.
 *
 * - do_sample (perf_event): on-CPU samples.
 * - offcpu_switch (tp_btf/sched_switch): time spent switched out, charged to
 *   the stack the thread blocked in. Its kernel stacks are taken inside the
 *   BPF program, so they start with BPF and tracepoint frames: those are
 *   skipped in the kernel with a skip count user space measures at start-up
 *   (see calib_stack).
 * - follow_fork (tp_btf/sched_process_fork): children of targets become
 *   targets.
 * - arm_command (tp_btf/task_rename): -- COMMAND becomes a target at its
 *   exec, as perf record's enable_on_exec.
 */
#include "kernel.bpf.h"
#include "loop.bpf.h"
#include "profile.h"
#include "targets.bpf.h"
#include "filter.bpf.h"
#include "stacks.bpf.h"
#include "unwind_state.bpf.h"
#include "unwind_mappings.bpf.h"
#include "walk_memo.bpf.h"
#include "unwind.bpf.h"
#include "profile_stats.bpf.h"
#include "pyframes.bpf.h"

const volatile struct profile_config cfg = {};

/* Kernel frames to skip in off-CPU stacks; set by user space after load. */
__u32 kernel_skip = 0;
/* 1 + the CPU whose calib_stack holds a raw (skip 0) stack of
 * offcpu_switch; 0 until one does. */
__u64 calib_done = 0;
/* Off-CPU accounting starts once kernel_skip is known. */
__u32 offcpu_armed = 0;

/*
 * The count map is the inner map of a one-slot map-in-map. To drain it, user
 * space puts a fresh inner map in the slot: the update returns only after an
 * RCU grace period (maybe_wait_bpf_programs), so no program still holds a
 * value pointer of the old map, which user space then reads at leisure.
 * Reading and deleting in place would lose the increments of a program that
 * looked a value up just before its key was deleted.
 */
struct count_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	/* Only a template: user space creates the count maps with
	 * --stack-storage-size entries (a hash inner map's size may differ),
	 * and a larger one here was preallocated at every start for nothing. */
	__uint(max_entries, 1);
	/* Entries allocated as keys arrive: preallocated, every count map
	 * would be filled out at every start and at the first drain. An entry
	 * that cannot be had (the map full, or no memory) loses its sample,
	 * counted. */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(struct sample_key));
	__uint(value_size, sizeof(__u64));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct count_map);
} count_slot SEC(".maps");

/*
 * The count cache: per CPU, the on-CPU samples of recent keys, counted
 * there and moved into the count map when another key takes their slot
 * (direct-mapped by a hash of the key). A sample whose key is cached
 * touches its slot's lines alone, where the count map's lookup is an
 * indirect call (the inner map is not known to the verifier), a hash of the
 * whole key and four dependent lines (BENCHMARKS.md, scripts/bench-ab.sh).
 * User space empties every CPU's cache into the count map before an
 * interval's drain (flush_counts: --every, bprof top), and reads what the
 * caches hold after the last sample; a drain for room leaves them be.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNT_CACHE_PARTS);
	__type(key, __u32);
	__type(value, struct count_cache_part);
} count_cache SEC(".maps");

/* Never used by the programs: a skeleton generates the types of globals, so
 * this puts every type and constant of profile.h that Rust reads (the inner
 * count maps' key, the limits, the frame records) into the generated code. */
struct {
	struct sample_key key;
	struct count_cache_slot count_cache_slot;
	enum count_cache_limits count_cache_limits;
	enum profile_limits limits;
	enum sample_kind kind;
	enum frame_status frame_status;
	struct frame_record frame;
	struct file_key file_key;
	enum unwind_limits unwind_limits;
	enum unwind_cfa unwind_cfa;
	enum unwind_rbp unwind_rbp;
	enum unwind_end unwind_end;
	struct unwind_row unwind_row;
	struct unwind_rule unwind_rule;
	struct unwind_page unwind_page;
	struct unwind_file unwind_file;
	struct unwind_chunk unwind_chunk;
	struct unwind_map_key unwind_map_key;
	enum py_limits py_limits;
	enum py_model py_model;
	enum py_end py_end;
	struct py_proc py_proc;
	struct py_stack py_stack;
	struct py_code_event py_code_event;
} bprof_abi = {};

/* frame_record is bpf_get_stack's build-ID record under another name. */
_Static_assert(sizeof(struct file_key) == BPROF_BUILD_ID_SIZE, "file_key");
_Static_assert(sizeof(struct frame_record) == sizeof(struct bpf_stack_build_id), "frame_record");
_Static_assert(__builtin_offsetof(struct frame_record, offset) ==
		       __builtin_offsetof(struct bpf_stack_build_id, offset),
	       "frame_record.offset");

/* Off-CPU: switch-out time and stacks, per thread id; an entry goes when
 * its thread exits (offcpu_exit). Not task storage, which tracing programs
 * have only from 5.11: a hash by thread id asks nothing of the kernel the
 * rest of the program does not (its elements come from BPF's own
 * allocator, 6.1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_start SEC(".maps");

static const struct offcpu_start offcpu_none = { .kern_stack_id = -1, .user_stack_id = -1 };

/* Thread `tid`'s entry in offcpu_start, made if it has none; 0 when the
 * map has no room. */
static __always_inline struct offcpu_start *offcpu_entry(__u32 tid)
{
	struct offcpu_start *s = bpf_map_lookup_elem(&offcpu_start, &tid);

	if (s)
		return s;
	bpf_map_update_elem(&offcpu_start, &tid, &offcpu_none, BPF_NOEXIST);
	return bpf_map_lookup_elem(&offcpu_start, &tid);
}

/* One raw kernel stack of offcpu_switch, to measure the skip count: per
 * CPU, so no CPU writes where another does and no atomic is needed. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__uint(value_size, BPROF_MAX_STACK_DEPTH * sizeof(__u64));
} calib_stack SEC(".maps");

static __always_inline int is_target(__u32 tgid, __u32 pid)
{
	if (cfg.nr_fixed_tgids) {
		int hit = 0;

		/* Constants to the verifier (.rodata is frozen): the loop
		 * folds to nr_fixed_tgids compares. */
		for (int i = 0; i < BPROF_FIXED_TGIDS; i++)
			if (i < cfg.nr_fixed_tgids && cfg.fixed_tgids[i] == tgid)
				hit = 1;
		return hit && in_targets(0, cfg.match_tid, tgid, pid);
	}
	return in_targets(cfg.match_tgid, cfg.match_tid, tgid, pid);
}

/* The key of each count map's own total (user space inserts it, 0, when it
 * creates the map, so a full map still has it). */
static const struct sample_key total_key = { .kind = SAMPLE_TOTAL };

/* Adds `n` to the key's count in the count map in the slot (and to the
 * map's own total); 0, or the error of a new key that found no room
 * (-E2BIG: the map is full; -ENOMEM: no element to be had now). copy: key
 * is a global function's argument, which 6.1's verifier takes as a map key
 * only once copied to the stack (inlined, key is a map value, taken as it
 * is: the copy's 80 bytes took the off-CPU program's deepest chain of calls
 * past 512 bytes on 5.10). */
static __always_inline int map_add_in(struct profile_stats *st, const struct sample_key *key, __u64 n,
				      const int copy)
{
	__u32 zero = 0;
	struct sample_key k;
	const struct sample_key *kp = key;
	void *counts = bpf_map_lookup_elem(&count_slot, &zero);
	__u64 *val;
	int err;

	if (!counts || !st || !key)
		return -ENOENT;
	if (copy) {
		k = *key;
		kp = &k;
	}
	val = bpf_map_lookup_elem(counts, kp);
	if (val) {
		__sync_fetch_and_add(val, n);
		goto added;
	}
	err = bpf_map_update_elem(counts, kp, &n, BPF_NOEXIST);
	if (err == -EEXIST) {
		/* Another CPU inserted the same key first. */
		val = bpf_map_lookup_elem(counts, kp);
		if (val) {
			__sync_fetch_and_add(val, n);
			goto added;
		}
	}
	if (err)
		return err;
	__sync_fetch_and_add(&st->count_keys, 1);
added:
	/* The same total kept in the map itself: drained with its keys, it says
	 * exactly what they hold. The global counters cannot: samples count
	 * into the next map (and bump them) while a swap waits out its grace
	 * period, so no moment of reading them is the swap's. Only bprof top
	 * needs it (at each refresh); a profile's totals are checked after the
	 * programs are detached, when the global counters are exact. */
	if (!cfg.map_totals)
		return 0;
	val = bpf_map_lookup_elem(counts, &total_key);
	if (val)
		__sync_fetch_and_add(val, n);
	return 0;
}

/* map_add_in as a global function: verified once for its callers. Before
 * 5.12 a global function takes no pointer: the programs built without
 * bpf_loop (for kernels before 5.17) inline map_add_in instead. */
__noinline int map_add(struct profile_stats *st, const struct sample_key *key, __u64 n)
{
	return map_add_in(st, key, n, 1);
}

#define MAP_ADD(open, st, key, n) ((open) ? map_add_in(st, key, n, 0) : map_add(st, key, n))

/* One sample of weight n counted, or lost to a full map. */
static __always_inline void count(struct profile_stats *st, const struct sample_key *key, __u64 n, const int open)
{
	if (MAP_ADD(open, st, key, n)) {
		st->count_map_full++;
		return;
	}
	/* Atomic: an NMI sample may interrupt offcpu_switch on this CPU. */
	__sync_fetch_and_add(&st->counted, 1);
	__sync_fetch_and_add(&st->counted_weight, n);
}

static __always_inline int same_key(const struct sample_key *a, const struct sample_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	__u64 d = 0;

	for (int i = 0; i < sizeof(*a) / 8; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

/* An on-CPU sample's count: kept in this CPU's count cache (see
 * count_cache), which moves an older key into the map when the new one
 * takes its slot. Straight into the map while a flush of this CPU's cache
 * runs (this sample interrupted it), or when the older key finds no room
 * there: it stays cached, and a full map loses one sample, as without the
 * cache, never a cached key's many. */
static __always_inline int count_on_cpu_in(struct profile_stats *st, struct sample_scratch *sc, __u64 n,
					   const int open)
{
	const __u64 *k;
	__u64 h;
	__u32 idx, part;
	struct count_cache_part *cp;
	struct count_cache_slot *s;

	/* Maybe NULL to the verifier, which checks a global function once. */
	if (!st || !sc)
		return 0;
	k = (const __u64 *)&sc->key;
	h = k[0] * 0x9e3779b97f4a7c15ULL ^ k[1] * 0xc2b2ae3d27d4eb4fULL ^ k[9] * 0xff51afd7ed558ccdULL ^
	    k[4] * 0x94d049bb133111ebULL;
	idx = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ULL >> (64 - COUNT_CACHE_BITS);
	part = idx / COUNT_CACHE_PART;
	cp = sc->count_busy ? 0 : bpf_map_lookup_elem(&count_cache, &part);
	if (!cp) {
		count(st, &sc->key, n, open);
		return 0;
	}
	s = &cp->s[idx % COUNT_CACHE_PART];
	if (s->samples && !same_key(&s->key, &sc->key)) {
		if (MAP_ADD(open, st, &s->key, s->weight)) {
			count(st, &sc->key, n, open);
			return 0;
		}
		s->samples = 0;
		s->weight = 0;
	}
	if (!s->samples)
		s->key = sc->key;
	s->samples++;
	s->weight += n;
	__sync_fetch_and_add(&st->counted, 1);
	__sync_fetch_and_add(&st->counted_weight, n);
	return 0;
}

/* count_on_cpu_in as a global function: verified once, not once for each
 * way the stacks were taken (inlined where bpf_loop is not, see map_add). */
__noinline int count_on_cpu(struct profile_stats *st, struct sample_scratch *sc, __u64 n)
{
	return count_on_cpu_in(st, sc, n, 0);
}

/* The raw-stack cache's layout generations (stacks.bpf.h), on kernels
 * without mm_lock_seq: these mark the address space busy while a syscall
 * that changes it runs, and move its generation when the syscall ends.
 * Raw tracepoints on every syscall's entry and exit, filtered here by
 * number: twelve perf syscall tracepoint events each waited out RCU grace
 * periods when closed, at every profile's end. */
/* x86-64's mmap syscall number. */
#define BPROF_NR_MMAP 9

static __always_inline int moves_code(__u64 nr)
{
	/* x86-64: mmap, munmap, mremap, shmat, shmdt, remap_file_pages */
	return nr == BPROF_NR_MMAP || nr == 11 || nr == 25 || nr == 30 || nr == 67 || nr == 216;
}

/* The syscall a raw sys_exit tracepoint fires after (its pt_regs' orig_ax;
 * the tracepoint's own arguments are the regs and the return value). */
static __always_inline __u64 exiting_syscall(struct bpf_raw_tracepoint_args *ctx)
{
	struct x86_regs *regs = (struct x86_regs *)ctx->args[0];
	__u64 nr = 0;

	bpf_probe_read_kernel(&nr, sizeof(nr), &regs->orig_ax);
	return nr;
}

SEC("raw_tp/sys_enter")
int layout_enter(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task;
	struct layout_gen *g;
	__u64 mm;

	if (!moves_code(ctx->args[1]))
		return 0;
	task = current_task();
	mm = (__u64)BPF_CORE_READ(task, mm);
	if (!mm)
		return 0;
	g = layout_gen_of(mm, ID_SYSCALL);
	if (g)
		__sync_fetch_and_add(&g->busy, 1);
	return 0;
}

SEC("raw_tp/sys_exit")
int layout_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task;
	struct layout_gen *g;
	__s64 gen;
	__u64 mm;

	if (!moves_code(exiting_syscall(ctx)))
		return 0;
	task = current_task();
	mm = (__u64)BPF_CORE_READ(task, mm);
	if (!mm)
		return 0;
	g = layout_gen_of(mm, ID_SYSCALL);
	if (!g)
		return 0;
	gen = take_id(&next_layout_gen, ID_LAYOUT, ID_SYSCALL, 1);
	if (gen < 0) {
		/* No generation left: the entry goes, and none is made again,
		 * so no cached stack outlives this change. */
		bpf_map_delete_elem(&layout_gens, &mm);
		return 0;
	}
	g->gen = gen;
	/* An entry evicted and re-created mid-call starts at 0 busy. */
	if (g->busy)
		__sync_fetch_and_add(&g->busy, -1);
	return 0;
}

/* --call-graph dwarf: the user stack walked with unwind tables, from the
 * registers in cs (the context's scratch, which the caller looked up). */
static __always_inline __s32 unwound_stack_id(struct profile_stats *st, struct cpu_scratch *cs, __u32 slot,
					       struct frame_record *leaf, __u64 mm, const int open)
{
	struct stack_memo_entry *e;
	struct stack_memo *memo;
	struct user_stack *us;
	__u64 hash, hash2;
	__u32 tgid;
	__s32 id;
	long n;

	us = bpf_map_lookup_elem(&user_stack_scratch, &slot);
	if (!us)
		return -ENOMEM;
	memo = &cs->smemo;
	n = unwind_user(st, &cs->sample.ur, us, cs, mm, &hash, &hash2, slot, open);
	if (n <= 0)
		return n ? n : -EFAULT;
	/* The leaf goes into the count key and the stack is stored without it
	 * (the walk's hashes leave it out): a loop's samples differ mostly in
	 * their leaf PC, and each new stack stored and read back costs far
	 * more than a new key. */
	__builtin_memcpy(leaf, &us->frames[0], sizeof(*leaf));
	__builtin_memset(&us->frames[0], 0, sizeof(us->frames[0]));
	us->frames[0].status = FRAME_IN_KEY;
	if (cs->walk.wm_state == WALK_MEMO_HIT) {
		st->user_stack_cached++;
		return cs->walk.wm_id;
	}
	tgid = bpf_get_current_pid_tgid() >> 32;
	e = &memo->e[((hash ^ tgid) * 0x9e3779b97f4a7c15ULL) >> (64 - STACK_MEMO_BITS)];
	if (e->h == hash && e->h2 == hash2 && e->tgid == tgid && e->h) {
		st->user_stack_cached++;
		if (!open) /* (no walk memo without bpf_loop) */
			walk_memo_keep(cs, e->id);
		return e->id;
	}
	id = intern_user_stack(st, us, n, &hash, slot, open);
	if (id >= 0) {
		e->h = hash;
		e->h2 = hash2;
		e->tgid = tgid;
		e->id = id;
		if (!open)
			walk_memo_keep(cs, id);
	}
	return id;
}

/* The current task's user stack as a user_stacks id: from the cache when
 * this raw stack was seen in this address-space layout, else stored anew
 * (and cached). */
static __always_inline __s32 user_stack_id(void *ctx, struct profile_stats *st, __u32 slot,
					    struct cpu_scratch *cs, struct frame_record *leaf, const int open)
{
	struct task_struct *task = current_task();
	struct mm_struct *mm;
	struct ustack_key k = {};
	struct words_ctx w = { .h = 0xcbf29ce484222325ULL };
	__u64 *ips;
	__s32 *cached, id;
	long n;

	if (cfg.dwarf) {
		__u64 m = (__u64)BPF_CORE_READ(task, mm);

		if (!m)
			return -EFAULT; /* a kernel thread has no user stack */
		return unwound_stack_id(st, cs, slot, leaf, m, open);
	}
	mm = TASK_FIELD(task, mm);
	if (!mm)
		return -EFAULT;
	/* Without the kernel's layout generation (no per-VMA locks), bprof's
	 * own (layout_gens); without either, nothing says when a cached stack
	 * went stale: take the build-ID walk. */
	if (!layout_seq(mm, &k.mm_seq)) {
		struct layout_gen *g;

		if (!layout_gens_on)
			return store_user_stack(ctx, st, slot, open);
		/* A 32-bit task's (ia32, x32) syscalls have other numbers than
		 * layout_enter/layout_exit watch for: its mmaps would leave the
		 * generation alone. Its address space ends at 4 GiB. */
		if (MM_FIELD(mm, task_size) <= (1ULL << 32))
			return store_user_stack(ctx, st, slot, open);
		g = layout_gen_of((__u64)mm, slot);
		if (!g || g->busy)
			return store_user_stack(ctx, st, slot, open);
		k.mm_seq = g->gen;
	}
	ips = bpf_map_lookup_elem(&raw_user_stack, &slot);
	if (!ips)
		return -ENOMEM;
	n = bpf_get_stack(ctx, ips, BPROF_MAX_STACK_DEPTH * sizeof(__u64), BPF_F_USER_STACK);
	if (n <= 0)
		return n ? n : -EFAULT;
	/* 64 bits of hash make a collision within one address space
	 * vanishingly unlikely. */
	w.a = ips;
	LOOP(open, n / sizeof(__u64), BPROF_MAX_STACK_DEPTH, hash_ips_word, &w);
	k.mm = (__u64)mm;
	k.hash = w.h;
	k.tgid = TASK_FIELD(task, tgid);
	k.exec_id = TASK_FIELD(task, self_exec_id);
	k.depth = n;
	cached = bpf_map_lookup_elem(&user_stack_cache, &k);
	if (cached) {
		st->user_stack_cached++;
		return *cached;
	}
	id = store_user_stack(ctx, st, slot, open);
	if (id >= 0)
		bpf_map_update_elem(&user_stack_cache, &k, &id, BPF_ANY);
	return id;
}

/* Takes the wanted stacks; -EFAULT just means "no stack in that mode".
 * cs: the context's scratch (slot's), its user registers set. in_user: the
 * sample hit user mode, so it has no kernel stack (asking bpf_get_stack
 * would only zero its 1 KiB buffer, cold lines every sample). open: the
 * program is built without bpf_loop (loop.bpf.h). */
static __always_inline void take_stacks(void *ctx, struct profile_stats *st, __u32 tgid, __u64 kflags,
					__u32 slot, struct cpu_scratch *cs, int in_user, __s32 *kid, __s32 *uid,
					struct frame_record *leaf, __s32 *pyid, const int open)
{
	*kid = -1;
	*uid = -1;
	*pyid = PY_STACK_NONE;
	__builtin_memset(leaf, 0, sizeof(*leaf)); /* FRAME_EMPTY: the leaf is in the stack */
	if (cfg.kernel_stacks && !in_user) {
		*kid = kern_stack_id(ctx, st, kflags, slot, open);
		if (*kid < 0 && *kid != -EFAULT)
			st->kern_stack_lost++;
	}
	if (cfg.user_stacks && tgid != 0) {
		*uid = user_stack_id(ctx, st, slot, cs, leaf, open);
		if (*uid < 0 && *uid != -EFAULT)
			st->user_stack_lost++;
		if (cfg.python)
			*pyid = open ? py_stack_id_open(slot) : py_stack_id(slot);
	}
	if (*kid < 0 && *uid < 0)
		st->no_stack++;
}

static __always_inline int sample(struct perf_sample_ctx *ctx, const int open)
{
	__u64 n;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, pid = (__u32)id;
	struct profile_stats *st = stats();
	struct filter_sample fs;
	__u32 slot = SCRATCH_ON_CPU;
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
	struct sample_scratch *sc;
	struct sample_key *key;
	struct uregs *ur;
	int in_user;

	if (!st || !cs)
		return 0;
	sc = &cs->sample;
	ur = &sc->ur;
	key = &sc->key;
	st->samples++;

	if (pid == 0 && !cfg.include_idle) {
		st->idle++;
		return 0;
	}
	if (!is_target(tgid, pid)) {
		st->not_target++;
		return 0;
	}
	__builtin_memset(key, 0, sizeof(*key));
	bpf_get_current_comm(&key->comm, sizeof(key->comm));
	/* Before any stack is taken, so a dropped sample costs little. */
	if (cfg.filter_len) {
		fs.id = id;
		fs.period = ctx->sample_period;
		fs.ip = ctx->regs.ip;
		fs.comm = key->comm;
		if (!filter_pass(&fs, &cfg.filter_len)) {
			st->filtered++;
			return 0;
		}
	}
	key->tgid = tgid;
	key->tid = pid;
	key->kind = SAMPLE_ON_CPU;
	if (cfg.cgroups)
		key->cgroup = bpf_get_current_cgroup_id();
	/* A sample in user mode has the user registers; one in the kernel
	 * takes them from the task (unwind_user). (User addresses are the
	 * lower half: cs's layout varies by kernel.) */
	in_user = ctx->regs.ip < (1ULL << 47);
	ur->valid = cfg.dwarf && in_user;
	if (ur->valid) {
		ur->ip = ctx->regs.ip;
		DWARF_REGS(ur->r, &ctx->regs);
	}
	take_stacks(ctx, st, tgid, 0, SCRATCH_ON_CPU, cs, in_user, &key->kern_stack_id, &key->user_stack_id,
		    &key->user_leaf, &key->py_stack_id, open);
	/* --wall counts time: a cpu-clock sample's period is its nanoseconds. */
	n = cfg.period_as_us ? ctx->sample_period / 1000 : 1;
	if (open)
		count_on_cpu_in(st, sc, n, 1);
	else
		count_on_cpu(st, sc, n);
	/* 0: the sample is not also written to the perf ring buffer. */
	return 0;
}

SEC("perf_event")
int do_sample(struct perf_sample_ctx *ctx)
{
	return sample(ctx, 0);
}

/* do_sample without bpf_loop, for kernels before 5.17 (see take_stacks). */
SEC("perf_event")
int do_sample_open(struct perf_sample_ctx *ctx)
{
	return sample(ctx, 1);
}

static __always_inline void calibrate(void *ctx)
{
	__u32 zero = 0;
	void *buf;

	if (calib_done)
		return;
	buf = bpf_map_lookup_elem(&calib_stack, &zero);
	if (buf && bpf_get_stack(ctx, buf, BPROF_MAX_STACK_DEPTH * sizeof(__u64), 0) > 0)
		calib_done = bpf_get_smp_processor_id() + 1;
}

/* prev blocks (is switched out), next resumes: stamp one, charge the other. */
static __always_inline int switch_out_in(void *ctx, bool preempt, struct task_struct *prev, struct task_struct *next,
					 unsigned int prev_state, const int open)
{
	struct profile_stats *st = stats();
	struct offcpu_start *start;
	__u32 tgid = prev->tgid, pid = prev->pid;

	if (!st)
		return 0;
	calibrate(ctx);
	if (!offcpu_armed)
		return 0;

	/* prev is current here: its stacks are the ones it blocked in. */
	/* A task preempted after setting a sleeping state (before it called
	 * schedule() itself) is still runnable: that is not a block. */
	/* A dead task is switched out for the last time: nothing resumes. */
	if (pid != 0 && !(prev_state & TASK_DEAD) &&
	    (cfg.all_states || (!preempt && (prev_state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE)))) &&
	    (cfg.kernel_threads || !(prev->flags & PF_KTHREAD)) && is_target(tgid, pid)) {
		struct filter_sample fs = { .id = ((__u64)tgid << 32) | pid };
		__u32 slot = SCRATCH_OFF_CPU;
		struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
		/* The name in the scratch's key (filled anew at switch-in): on
		 * the stack it took the deepest chain of calls (the dwarf walk's
		 * without bpf_loop) past 512 bytes on 5.10. */
		char *comm = cs ? cs->sample.key.comm : 0;

		if (!comm)
			return 0;
		__builtin_memset(comm, 0, BPROF_COMM_LEN);
		bpf_probe_read_kernel_str(comm, BPROF_COMM_LEN, prev->comm);
		fs.comm = comm;
		if (cfg.filter_len && !filter_pass(&fs, &cfg.filter_len)) {
			st->filtered++;
		} else {
			start = offcpu_entry(pid);
			if (!start)
				st->blocks_untracked++;
			if (start && cs) {
				cs->sample.ur.valid = 0; /* switching out: the task's saved registers */
				start->ts = bpf_ktime_get_ns();
				/* prev is current: its cgroup, for the block's key. */
				if (cfg.cgroups)
					start->cgroup = bpf_get_current_cgroup_id();
				take_stacks(ctx, st, tgid, kernel_skip & BPF_F_SKIP_FIELD_MASK, SCRATCH_OFF_CPU, cs, 0,
					    &start->kern_stack_id, &start->user_stack_id, &start->user_leaf,
					    &start->py_stack_id, open);
				st->switches_out++;
			}
		}
	}

	pid = next->pid;
	start = pid ? bpf_map_lookup_elem(&offcpu_start, &pid) : 0;
	if (start && start->ts) {
		__u64 delta = bpf_ktime_get_ns() - start->ts;
		__u32 slot = SCRATCH_OFF_CPU;
		struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
		/* The key in the context's scratch, not on the stack: the
		 * deepest chain of calls (into the Python walk) has no room. */
		struct sample_key *key = cs ? &cs->sample.key : 0;

		start->ts = 0;
		if (!key)
			return 0;
		if (delta < cfg.min_block_ns || (cfg.max_block_ns && delta > cfg.max_block_ns)) {
			st->blocks_outside++;
			return 0;
		}
		__builtin_memset(key, 0, sizeof(*key));
		key->tgid = next->tgid;
		key->tid = next->pid;
		bpf_probe_read_kernel_str(key->comm, sizeof(key->comm), next->comm);
		key->kern_stack_id = start->kern_stack_id;
		key->user_stack_id = start->user_stack_id;
		key->user_leaf = start->user_leaf;
		key->py_stack_id = start->py_stack_id;
		key->kind = SAMPLE_OFF_CPU;
		key->cgroup = start->cgroup;
		st->blocks_counted++;
		count(st, key, delta / 1000, open);
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return switch_out_in(ctx, preempt, prev, next, prev_state, 0);
}

/* Before 5.14 the state is task_struct.state (a long), not __state. */
struct task_struct___state {
	long state;
} __attribute__((preserve_access_index));

/* offcpu_switch without bpf_loop, for kernels before 5.17 (see
 * take_stacks). Before 5.18 the tracepoint passes no prev_state: the
 * task's own is read (which a pending signal may have set back to
 * running, so such a switch is a preemption, as it is). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch_open, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	unsigned int state;

	if (bpf_core_field_exists(prev->__state))
		state = BPF_CORE_READ(prev, __state);
	else
		state = BPF_CORE_READ((struct task_struct___state *)prev, state);
	return switch_out_in(ctx, preempt, prev, next, state, 1);
}

/* A thread ends: its off-CPU entry goes before its id can be reused. */
SEC("raw_tp/sched_process_exit")
int offcpu_exit(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&offcpu_start, &tid);
	return 0;
}

/* What one run of flush_counts did, tallied per CPU by flush_slot: the
 * loop that calls it carries nothing, so an open-coded one (1024 turns,
 * each verified) stays small for the verifier. */
struct flush_tally {
	__u32 moved; /* slots moved into the map */
	__u32 left;  /* slots that found no room there */
	__u32 nomem; /* some for want of an element (-ENOMEM), not a full map */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flush_tally);
} flush_tally SEC(".maps");

/* Moves slot i of this CPU's count cache into the count map, tallied in
 * flush_tally; 1 ends the run. A global function of a scalar: verified
 * once, however many turns of a loop call it. */
__noinline int flush_slot(__u32 i)
{
	__u32 part = i / COUNT_CACHE_PART, zero = 0;
	struct count_cache_part *cp = bpf_map_lookup_elem(&count_cache, &part);
	struct flush_tally *t = bpf_map_lookup_elem(&flush_tally, &zero);
	struct profile_stats *st = stats();
	struct count_cache_slot *s;
	int err;

	if (!cp || !t || !st)
		return 1;
	s = &cp->s[i % COUNT_CACHE_PART];
	if (!s->samples)
		return 0;
	/* -ENOMEM: the map's per-CPU element cache is empty, refilled after
	 * this run (an irq_work); user space runs it again. */
	err = map_add_in(st, &s->key, s->weight, 0);
	if (err) {
		t->left++;
		if (err == -ENOMEM)
			t->nomem = 1;
		return 0;
	}
	t->moved++;
	s->samples = 0;
	s->weight = 0;
	return 0;
}

static long flush_one(__u32 i, void *unused)
{
	/* 0 or 1, as bpf_loop wants a callback's result to be seen. */
	return flush_slot(i) ? 1 : 0;
}

/*
 * Empties this CPU's count cache into the count map. Not attached: user
 * space runs it on each CPU (BPF_PROG_TEST_RUN, BPF_F_TEST_RUN_ON_CPU)
 * before an interval's drain, so that the interval holds every sample
 * counted before its end.
 * A sample interrupting it on this CPU (the run's own CPU runs it with
 * interrupts on) counts straight into the map. A key that finds no room
 * stays cached for a later run (a map's new elements come from a small
 * per-CPU cache the kernel refills after the run; a full map is drained),
 * so a flush loses nothing. Returns the slots moved << FLUSH_MOVED_SHIFT,
 * FLUSH_NOMEM when some found no element, and the slots left.
 */
static __always_inline int flush(const int open)
{
	__u32 slot = SCRATCH_ON_CPU;
	struct cpu_scratch *cs = bpf_map_lookup_elem(&cpu_scratch, &slot);
	__u32 zero = 0;
	struct flush_tally *t = bpf_map_lookup_elem(&flush_tally, &zero);

	if (!cs || !t)
		return 0;
	__builtin_memset(t, 0, sizeof(*t));
	cs->sample.count_busy = 1;
	/* (bpf_loop's context: a stack slot, which every verifier takes.) */
	LOOP(open, 1 << COUNT_CACHE_BITS, 1 << COUNT_CACHE_BITS, flush_one, &zero);
	cs->sample.count_busy = 0;
	return t->moved << FLUSH_MOVED_SHIFT | (t->nomem ? FLUSH_NOMEM : 0) | t->left;
}

SEC("raw_tp")
int flush_counts(void *ctx)
{
	return flush(0);
}

/* flush_counts without bpf_loop, for kernels before 5.17. */
SEC("raw_tp")
int flush_counts_open(void *ctx)
{
	return flush(1);
}

/*
 * --call-graph dwarf: a target's new code mappings, learned when they are
 * made (see learn in unwind.bpf.h) rather than at the first walk that
 * misses them, where bpf_find_vma finds the mm lock taken whenever the
 * sample interrupted an mmap or an exec, and the process's first ms (all of
 * a short one's life) would otherwise walk before user space has read its
 * mmap records.
 */
struct learn_ctx {
	struct profile_stats *st;
	struct vma_info v;
	__u64 mm;
	__u64 first; /* the mapping's first 2 MiB chunk */
	__u32 tgid;
	__u32 pad;
};

static long learn_chunk(__u32 i, struct learn_ctx *l)
{
	struct unwind_map_key mk = { .tgid = l->tgid, .chunk = l->first + i };

	if (learn(&mk, &l->v, l->mm))
		__sync_fetch_and_add(&l->st->unwind_learned, 1);
	return 0;
}

/* The mapping at addr of task, if it is file-backed code. */
static __always_inline void learn_mapping(struct task_struct *task, __u64 addr)
{
	struct learn_ctx l = {};
	__u64 n;

	/* Read, not loaded through the trusted pointer (see vma_cb). */
	l.tgid = BPF_CORE_READ(task, tgid);
	if (!is_target(l.tgid, BPF_CORE_READ(task, pid)))
		return;
	/* A number, not a pointer, for the global learn. */
	l.mm = (__u64)BPF_CORE_READ(task, mm);
	l.st = stats();
	if (!l.mm || !l.st)
		return;
	if (bpf_find_vma(task, addr, vma_cb, &l.v, 0) || !l.v.end || !l.v.key.ino)
		return;
	__sync_fetch_and_add(&l.st->unwind_learned_early, 1);
	l.first = l.v.start >> UNWIND_CHUNK_SHIFT;
	n = ((l.v.end - 1) >> UNWIND_CHUNK_SHIFT) - l.first + 1;
	/* 1 GiB of code at most. */
	if (n > 512)
		n = 512;
	bpf_loop(n, learn_chunk, &l, 0);
}

/* Raw tracepoints, not the syscalls: and sched: events: closing a perf
 * tracepoint event waits out RCU grace periods at every profile's end; a
 * raw tracepoint's link does not. Any hook on a syscall sends every
 * syscall of the machine down the kernel's traced path, whatever the
 * program does, so user space attaches this one only to -- COMMAND
 * profiles (see ProfileOptions::learns_mmaps). */
SEC("raw_tp/sys_exit")
int learn_mmap(struct bpf_raw_tracepoint_args *ctx)
{
	__s64 ret = ctx->args[1];

	/* Every syscall of the machine comes here: most return small numbers
	 * or errors, and only what could be a mapping's address (page-aligned,
	 * past mmap_min_addr) costs a read of the syscall number, which every
	 * syscall would pay if it were read first. */
	if (ret < 0x10000 || (ret & 0xfff))
		return 0;
	if (exiting_syscall(ctx) != BPROF_NR_MMAP)
		return 0;
	learn_mapping(bpf_get_current_task_btf(), ret);
	return 0;
}

/* After exec loaded the program and its interpreter (sched_process_exec
 * runs in the exec'ing task): the program's text (start_code) and the entry
 * point the task starts at (the interpreter's, or a static program's own).
 * raw_tp, not tp_btf: libbpf parses the kernel's whole BTF to attach a
 * tp_btf program, at every start. */
SEC("raw_tp/sched_process_exec")
int learn_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct x86_regs *regs = (struct x86_regs *)bpf_task_pt_regs(task);
	__u64 start_code = BPF_CORE_READ(task, mm, start_code);

	if (start_code)
		learn_mapping(task, start_code);
	if (regs)
		learn_mapping(task, regs->ip);
	return 0;
}

/*
 * The learners without bpf_loop or bpf_find_vma (both 5.17): a new mapping
 * is read from its mmap's arguments and the file its fd names, an exec's
 * from the mm's list of mappings (mm_struct.mmap, which 6.1 replaced with a
 * maple tree; there only user space's view serves).
 */
#define BPROF_PROT_EXEC 4

/* learn_args' mapping into its chunks [first, first + n), at most 1 GiB of
 * code; counted as learn_mapping counts. */
static __always_inline void learn_chunks(struct profile_stats *st, __u64 first, __u64 n)
{
	for (__u32 i = 0; i < 512 && i < n; i++)
		if (learn_open(first + i))
			__sync_fetch_and_add(&st->unwind_learned, 1);
}

/* (dev, inode) of the file task's descriptor fd names, or ino 0. */
static __always_inline void fd_file_key(struct task_struct *task, __u64 fd, struct unwind_file_key *key)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;

	if (!fds || fd >= BPF_CORE_READ(fdt, max_fds) || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		f = 0;
	file_key_of(f, key);
}

SEC("raw_tp/sys_exit")
int learn_mmap_open(struct bpf_raw_tracepoint_args *ctx)
{
	struct x86_regs *regs = (struct x86_regs *)ctx->args[0];
	struct task_struct *task;
	struct profile_stats *st;
	struct learn_args *a;
	__s64 ret = ctx->args[1];
	__u64 len = 0, prot = 0, fd = 0, off = 0;
	__u32 zero = 0;

	/* As learn_mmap: only a mapping's address costs more. */
	if (ret < 0x10000 || (ret & 0xfff))
		return 0;
	if (exiting_syscall(ctx) != BPROF_NR_MMAP)
		return 0;
	/* The arguments as the syscall took them (rsi, rdx, r8, r9). */
	bpf_probe_read_kernel(&prot, sizeof(prot), &regs->dx);
	if (!(prot & BPROF_PROT_EXEC))
		return 0;
	task = current_task();
	if (!is_target(TASK_FIELD(task, tgid), TASK_FIELD(task, pid)))
		return 0;
	st = stats();
	a = bpf_map_lookup_elem(&learn_args, &zero);
	if (!st || !a)
		return 0;
	bpf_probe_read_kernel(&len, sizeof(len), &regs->si);
	bpf_probe_read_kernel(&fd, sizeof(fd), &regs->r8);
	bpf_probe_read_kernel(&off, sizeof(off), &regs->r9);
	fd_file_key(task, fd, &a->v.key);
	if (!a->v.key.ino || !len)
		return 0;
	a->v.start = ret;
	a->v.end = ret + ((len + 4095) & ~4095ULL);
	a->v.off = off;
	a->mm = (__u64)TASK_FIELD(task, mm);
	a->tgid = TASK_FIELD(task, tgid);
	__sync_fetch_and_add(&st->unwind_learned_early, 1);
	learn_chunks(st, a->v.start >> UNWIND_CHUNK_SHIFT,
		     ((a->v.end - 1) >> UNWIND_CHUNK_SHIFT) - (a->v.start >> UNWIND_CHUNK_SHIFT) + 1);
	return 0;
}

struct mm_struct___list {
	struct vm_area_struct *mmap;
};

struct vm_area_struct___list {
	struct vm_area_struct *vm_next;
};

/* One turn of learn_exec_open: the next chunk of the mapping in hand, or the
 * next mapping of the list. 1 ends. A global function of numbers, so the
 * loop over it is verified as one call a turn. */
__noinline int learn_exec_step(__u32 i)
{
	struct learn_args *a;
	struct vm_area_struct *vma;
	struct profile_stats *st = stats();
	__u32 zero = 0;

	a = bpf_map_lookup_elem(&learn_args, &zero);
	if (!a || !st || !bpf_core_field_exists(((struct vm_area_struct___list *)0)->vm_next))
		return 1;
	if (a->chunk < a->last_chunk) {
		if (learn_open(a->chunk))
			__sync_fetch_and_add(&st->unwind_learned, 1);
		a->chunk++;
		return 0;
	}
	vma = (struct vm_area_struct *)a->next_vma;
	if (!vma || ++a->vmas > 64)
		return 1;
	a->next_vma = (__u64)BPF_CORE_READ((struct vm_area_struct___list *)vma, vm_next);
	vma_info_of(vma, &a->v);
	if (!a->v.key.ino || a->v.end <= a->v.start)
		return 0;
	__sync_fetch_and_add(&st->unwind_learned_early, 1);
	a->chunk = a->v.start >> UNWIND_CHUNK_SHIFT;
	a->last_chunk = ((a->v.end - 1) >> UNWIND_CHUNK_SHIFT) + 1;
	if (a->last_chunk - a->chunk > 512) /* 1 GiB of code at most */
		a->last_chunk = a->chunk + 512;
	return 0;
}

SEC("raw_tp/sched_process_exec")
int learn_exec_open(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = current_task();
	struct mm_struct___list *mm = (void *)TASK_FIELD(task, mm);
	struct learn_args *a;
	__u32 zero = 0;

	if (!mm || !bpf_core_field_exists(mm->mmap))
		return 0;
	if (!is_target(TASK_FIELD(task, tgid), TASK_FIELD(task, pid)))
		return 0;
	a = bpf_map_lookup_elem(&learn_args, &zero);
	if (!a)
		return 0;
	a->mm = (__u64)mm;
	a->tgid = TASK_FIELD(task, tgid);
	a->next_vma = (__u64)BPF_CORE_READ(mm, mmap);
	a->vmas = 0;
	a->chunk = a->last_chunk = 0;
	for (__u32 i = 0; i < 2048; i++)
		if (learn_exec_step(i))
			break;
	return 0;
}

/* Follow -- COMMAND's children: a forked process of a target is a target. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	if (cfg.follow_children)
		follow_child(parent, child);
	return 0;
}

/* -- COMMAND is sampled from its exec on (see arm_at_exec). */
SEC("tp_btf/task_rename")
int BPF_PROG(arm_command, struct task_struct *task, const char *comm)
{
	arm_at_exec(task);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
