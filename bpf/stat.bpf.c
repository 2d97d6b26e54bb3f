// SPDX-License-Identifier: GPL-2.0
/*
 * bprof stat: bperf-style counting without fentry/fexit.
 *
 * The hardware (or software) counters are one set of per-CPU perf events per
 * event attribute, held in one PERF_EVENT_ARRAY that is pinned in bpffs with
 * BPF_F_PRESERVE_ELEMS and shared by every concurrent session (a pinned attr
 * map says which slot holds which attribute): sessions never open counters
 * of their own, so nothing multiplexes however many run.
 *
 * perf's followers are fexit programs on a shared leader; fexit cannot load
 * here, so instead every session loads this small program of its own on
 * raw_tp/sched_switch, reusing the pinned array. At a switch into or out of
 * one of the session's targets it reads the counters of its events on this
 * CPU, keeps its own previous reading per CPU, and charges the difference to
 * the task being switched out if that is a target. The same program, run
 * with BPF_PROG_TEST_RUN on each CPU, charges the running task's share
 * before user space reads: counts are exact. A system-wide session needs
 * no switches at all: its syncs alone read the CPUs' counters.
 *
 * Per-cgroup counts, as perf's bperf cgroup mode: at every switch between
 * cgroups the counts since the last one are charged to every
 * --for-each-cgroup cgroup the outgoing task is in (the cgroup or any below
 * it). The sync run closes the open interval.
 */
#include "kernel.bpf.h"
#include "stat.h"
#include "targets.bpf.h"

const volatile struct stat_config cfg = {};

/* Never used by the program: puts stat.h's constants and value layout into
 * BTF, so the skeleton generates them for Rust. */
struct {
	enum stat_limits limits;
	enum stat_scope scope;
	struct stat_value value;
} bprof_stat_abi = {};

/* The shared counters: replaced before load by the pinned array (same
 * name), whose entry slot * nr_cpus + cpu is the perf event of one event
 * attribute on one CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 1);
} events SEC(".maps");

/* This session's last reading of each event, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BPROF_STAT_MAX_EVENTS);
	__type(key, __u32);
	__type(value, struct stat_value);
} prev SEC(".maps");

/* This session's last reading of each event at a cgroup switch, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BPROF_STAT_MAX_EVENTS);
	__type(key, __u32);
	__type(value, struct stat_value);
} cg_prev SEC(".maps");

/* Sums per CPU: slot event for the target, then one block of events per
 * --for-each-cgroup entry. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (BPROF_STAT_MAX_CGROUPS + 1) * BPROF_STAT_MAX_EVENTS);
	__type(key, __u32);
	__type(value, struct stat_value);
} sums SEC(".maps");

/* -C: CPUs whose counts belong to this session. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} counted_cpus SEC(".maps");

static __always_inline long read_event(__u32 i, struct bpf_perf_event_value *v)
{
	/* The mask keeps the index provably in bounds even when the compiler
	 * reloads i from the stack (the verifier then sees an unknown value). */
	__u64 index = (__u64)cfg.event_slots[i & (BPROF_STAT_MAX_EVENTS - 1)] * cfg.nr_cpus +
		      bpf_get_smp_processor_id();

	return bpf_perf_event_read_value(&events, index & BPF_F_INDEX_MASK, v, sizeof(*v));
}

static __always_inline void add(__u32 slot, const struct stat_value *d)
{
	struct stat_value *s = bpf_map_lookup_elem(&sums, &slot);

	if (s) {
		s->counter += d->counter;
		s->enabled += d->enabled;
		s->running += d->running;
	}
}

static __always_inline int cpu_counted(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u8 *on;

	if (!cfg.match_cpu)
		return 1;
	on = bpf_map_lookup_elem(&counted_cpus, &cpu);
	return on && *on;
}

static __always_inline int task_counted(void)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (cfg.scope == STAT_SCOPE_ALL)
		return 1;
	/* Idle is never a target process. */
	if ((__u32)id == 0)
		return 0;
	return in_targets(cfg.match_tgid, cfg.match_tid, id >> 32, (__u32)id);
}

/* This CPU's counts of event i since `last` was taken, and a new `last`;
 * false on the first reading (a baseline only). */
static __always_inline int delta(__u32 i, struct stat_value *last, struct stat_value *d)
{
	struct bpf_perf_event_value v = {};

	if (read_event(i, &v))
		return 0;
	d->counter = v.counter - last->counter;
	d->enabled = v.enabled - last->enabled;
	d->running = v.running - last->running;
	if (!last->enabled)
		d->counter = d->enabled = d->running = 0;
	last->counter = v.counter;
	last->enabled = v.enabled;
	last->running = v.running;
	return 1;
}

/* Target counts: the difference since this CPU's last task switch goes to
 * the task that ran, if it is a target (`charge`). The reading is taken at
 * every switch either way, so no other task's counts leak into the next. */
static __always_inline void charge_target(__u32 i, int charge)
{
	struct stat_value d, *last = bpf_map_lookup_elem(&prev, &i);

	if (last && delta(i, last, &d) && charge)
		add(i, &d);
}

/* Per-cgroup counts: the difference since this CPU's last cgroup switch
 * goes to every listed cgroup the running task is in (or below). */
static __always_inline void charge_cgroups(__u32 i)
{
	struct stat_value d, *last = bpf_map_lookup_elem(&cg_prev, &i);

	if (!last || !delta(i, last, &d))
		return;
	/* No early exit: a loop with one exit is what the verifier bounds best. */
	for (__u32 c = 0; c < BPROF_STAT_MAX_CGROUPS; c++) {
		if (c < cfg.nr_cgroups &&
		    bpf_get_current_ancestor_cgroup_id(cfg.cgroup_levels[c]) == cfg.cgroup_ids[c])
			add((c + 1) * BPROF_STAT_MAX_EVENTS + i, &d);
	}
}

/* Charges every event's counts since the last cgroup switch. */
static __always_inline void charge_all_cgroups(void)
{
#pragma unroll
	for (__u32 i = 0; i < BPROF_STAT_MAX_EVENTS; i++) {
		if (i < cfg.nr_events)
			charge_cgroups(i);
	}
}

static __always_inline void charge_all_targets(int charge)
{
#pragma unroll
	for (__u32 i = 0; i < BPROF_STAT_MAX_EVENTS; i++) {
		if (i < cfg.nr_events)
			charge_target(i, charge);
	}
}

/*
 * At a task switch prev -> next (and at every sync, run by user space on
 * each CPU with BPF_PROG_TEST_RUN and args[0] == BPROF_STAT_SYNC).
 *
 * Targets: a target's counts are the difference between the readings at
 * its switch-in and its switch-out, so the counters are read only when prev
 * or next is a target; a switch between two other tasks costs two lookups,
 * not a read per event. System-wide (-a) counts are every CPU's counters in
 * full: the syncs alone read them.
 *
 * --for-each-cgroup: at a switch between tasks of different cgroup v2
 * cgroups (the cgroup-switches software event's condition), the counts
 * since the last one go to every listed cgroup prev is in. Not on the
 * cgroup-switches event itself: a perf_event BPF program is skipped when
 * the CPU's bpf_prog_active is held, which a task preempted inside a BPF
 * map syscall leaves held, and one missed switch would charge a cgroup
 * with everything since the previous one. Raw tracepoints have no such
 * gap.
 */
SEC("raw_tp/sched_switch")
int stat_switch(__u64 *args)
{
	struct task_struct *prev = (struct task_struct *)args[1];
	struct task_struct *next = (struct task_struct *)args[2];
	int prev_counted, next_counted;

	if (!cpu_counted())
		return 0;
	if (args[0] == BPROF_STAT_SYNC) {
		/* current is whatever runs here: close its open intervals. */
		charge_all_targets(task_counted());
		if (cfg.nr_cgroups)
			charge_all_cgroups();
		return 0;
	}
	/* current is prev. */
	if (cfg.nr_cgroups &&
	    BPF_CORE_READ(prev, cgroups, dfl_cgrp) != BPF_CORE_READ(next, cgroups, dfl_cgrp))
		charge_all_cgroups();
	if (cfg.scope == STAT_SCOPE_ALL)
		return 0;
	prev_counted = task_counted();
	next_counted = BPF_CORE_READ(next, pid) != 0 &&
		       in_targets(cfg.match_tgid, cfg.match_tid, BPF_CORE_READ(next, tgid),
				  BPF_CORE_READ(next, pid));
	/* A reading now charges prev, or starts next's interval, or both. */
	if (prev_counted || next_counted)
		charge_all_targets(prev_counted);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(stat_follow_fork, struct task_struct *parent, struct task_struct *child)
{
	if (cfg.follow_children)
		follow_child(parent, child);
	return 0;
}

/* -- COMMAND is counted from its exec on, where perf stat's enable_on_exec
 * starts counting: this CPU's reading is retaken without charging anyone,
 * so the forked child's pre-exec work is not the command's. */
SEC("tp_btf/task_rename")
int BPF_PROG(stat_arm_command, struct task_struct *task, const char *comm)
{
	if (arm_at_exec(task) && cpu_counted())
		charge_all_targets(0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
