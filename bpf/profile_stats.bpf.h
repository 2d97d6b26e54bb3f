/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The sample program's per-CPU accounting (struct profile_stats), in a
 * header of its own: the program and the Python walker both count into it.
 */
#ifndef BPROF_PROFILE_STATS_BPF_H
#define BPROF_PROFILE_STATS_BPF_H

#include "kernel.bpf.h"
#include "profile.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct profile_stats);
} profile_stats SEC(".maps");

/* This CPU's counters. */
static __always_inline struct profile_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&profile_stats, &zero);
}

#endif /* BPROF_PROFILE_STATS_BPF_H */
