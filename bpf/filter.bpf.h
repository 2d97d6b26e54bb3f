/* SPDX-License-Identifier: GPL-2.0 */
/*
 * --filter evaluation, shared by every program that keeps or drops events:
 * walks the entries user space compiled into the `filters` array, the way
 * perf's sample_filter.bpf.c does, with a loop bound the verifier accepts.
 */
#ifndef BPROF_FILTER_BPF_H
#define BPROF_FILTER_BPF_H

#include "kernel.bpf.h"
#include "profile.h"

/* The compiled --filter, written by user space before attaching. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BPROF_MAX_FILTERS);
	__type(key, __u32);
	__type(value, struct filter_entry);
} filters SEC(".maps");

/* What a test can look at; fields a program cannot know are 0 (user space
 * rejects the terms that need them). */
struct filter_sample {
	__u64 id; /* bpf_get_current_pid_tgid() */
	__u64 period;
	__u64 ip;
	const char *comm;
};

/* Set by user space before load when a filter names a cgroup: only then
 * does the program call bpf_get_current_ancestor_cgroup_id, which tracing
 * programs lack on older kernels (5.10). */
const volatile __u8 filter_cgroups = 0;

static __always_inline __u64 term_value(const struct filter_entry *e, const struct filter_sample *s)
{
	switch (e->term) {
	case FILTER_TERM_TID:
		return (__u32)s->id;
	case FILTER_TERM_PID:
		return s->id >> 32;
	case FILTER_TERM_CPU:
		return bpf_get_smp_processor_id();
	case FILTER_TERM_PERIOD:
		return s->period;
	case FILTER_TERM_IP:
		return s->ip;
	case FILTER_TERM_UID:
		return (__u32)bpf_get_current_uid_gid();
	case FILTER_TERM_GID:
		return bpf_get_current_uid_gid() >> 32;
	case FILTER_TERM_CGROUP:
		/* The ancestor at the filter's level: the cgroup or any below it. */
		return filter_cgroups ? bpf_get_current_ancestor_cgroup_id(e->level) : 0;
	case FILTER_TERM_MODE:
		/* Kernel addresses have the top bit set on x86_64 and arm64. */
		return s->ip >> 63;
	default:
		return 0;
	}
}

static __always_inline int comm_equal(const char *a, const char *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1];
}

static __always_inline int test_entry(const struct filter_entry *e, const struct filter_sample *s)
{
	__u64 v;

	if (e->term == FILTER_TERM_COMM) {
		int eq = comm_equal(s->comm, e->comm);

		return e->op == FILTER_OP_EQ ? eq : !eq;
	}
	v = term_value(e, s);
	switch (e->op) {
	case FILTER_OP_EQ:
		return v == e->value;
	case FILTER_OP_NE:
		return v != e->value;
	case FILTER_OP_LT:
		return v < e->value;
	case FILTER_OP_LE:
		return v <= e->value;
	case FILTER_OP_GT:
		return v > e->value;
	case FILTER_OP_GE:
		return v >= e->value;
	case FILTER_OP_AND:
		return (v & e->value) != 0;
	default:
		return 0;
	}
}

/* 1 when the event passes the tests of the first *len entries: an AND of
 * OR-groups. len points into the program's read-only config, read where
 * it is compared, as a constant to the verifier. */
static __always_inline int filter_pass(const struct filter_sample *s, const volatile __u32 *len)
{
	int in_group = 0, group_ok = 0;

	/* A 64-bit counter apart from the key: 6.1's verifier loses the value
	 * of a 32-bit stack slot (the key's address is taken, so it lives on
	 * the stack), sees two equal states and rejects an "infinite loop". */
	for (__u64 i = 0; i < BPROF_MAX_FILTERS; i++) {
		const struct filter_entry *e;
		__u32 key = i;

		if (key >= *len)
			break;
		e = bpf_map_lookup_elem(&filters, &key);
		if (!e)
			return 0;
		if (e->op == FILTER_OP_GROUP_BEGIN) {
			in_group = 1;
			group_ok = 0;
		} else if (e->op == FILTER_OP_GROUP_END) {
			if (!group_ok)
				return 0;
			in_group = 0;
		} else if (in_group) {
			if (!group_ok)
				group_ok = test_entry(e, s);
		} else if (!test_entry(e, s)) {
			return 0;
		}
	}
	return 1;
}

#endif /* BPROF_FILTER_BPF_H */
