/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ABI of stat.bpf.c, defined once: Rust sees these types and constants
 * only through the generated skeleton (stat.bpf.c's `bprof_stat_abi` global
 * puts them into BTF). Constants are enum members so that they reach BTF.
 */
#ifndef BPROF_STAT_H
#define BPROF_STAT_H

enum stat_limits {
	/* Events one session counts (a power of two: used as a mask). */
	BPROF_STAT_MAX_EVENTS = 8,
	/* Distinct event attributes all sessions together can share: the
	 * shared PERF_EVENT_ARRAY holds slot * nr_cpus + cpu. */
	BPROF_STAT_MAX_SLOTS = 64,
	/* --for-each-cgroup entries. */
	BPROF_STAT_MAX_CGROUPS = 16,
	/* args[0] of a BPF_PROG_TEST_RUN sync (sched_switch's is a bool). */
	BPROF_STAT_SYNC = 0x62707266,
};

/* A reading, as bpf_perf_event_read_value reports it. */
struct stat_value {
	__u64 counter;
	__u64 enabled;
	__u64 running;
};

enum stat_scope {
	STAT_SCOPE_ALL,     /* -a: every task on the counted CPUs */
	STAT_SCOPE_TARGETS, /* -p / -t / -- COMMAND: the target sets */
};

struct stat_config {
	__u32 nr_events;
	__u32 nr_cpus;        /* possible CPUs: the stride of a slot */
	__u32 event_slots[BPROF_STAT_MAX_EVENTS];
	__u32 nr_cgroups;
	__u8 scope;           /* enum stat_scope */
	__u8 match_tgid;
	__u8 match_tid;
	__u8 follow_children;
	__u8 match_cpu;       /* -C: only CPUs set in counted_cpus */
	__u8 pad[3];
	/* cgroup v2 ids and their depth, for --for-each-cgroup. */
	__u64 cgroup_ids[BPROF_STAT_MAX_CGROUPS];
	__u32 cgroup_levels[BPROF_STAT_MAX_CGROUPS];
};

#endif /* BPROF_STAT_H */
