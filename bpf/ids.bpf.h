/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Ids handed out by the profile program: stack ids (kernel, user, Python)
 * and layout generations, each never reused. With atomic fetch (5.12) one
 * global counter per kind, fetched and added. Without it (or forced, to
 * test this path on any kernel) each CPU and context counts its own in a
 * per-CPU map, so no counter is ever shared: a context is a scratch slot
 * (the on-CPU and off-CPU programs, which can interrupt each other on one
 * CPU but not themselves) or the layout tracepoints, and
 *   id = first + n * (cpus * ID_CTXS) + cpu * ID_CTXS + context,
 * unique, and dense enough for user space's bit per spilled id. The
 * programs that load where bpf_loop is missing (loop.bpf.h) and layout
 * generations always count per CPU: 5.10's verifier refuses an atomic
 * fetch anywhere in a program, even where it never runs.
 */
#ifndef BPROF_IDS_BPF_H
#define BPROF_IDS_BPF_H

#include "kernel.bpf.h"

enum id_kind { ID_KERN, ID_USER, ID_PY, ID_LAYOUT, ID_KINDS };
/* The first two are enum scratch_slot's values (stacks.bpf.h). */
enum id_ctx { ID_ON_CPU, ID_OFF_CPU, ID_SYSCALL, ID_CTXS };

/* Set by user space before load: no atomic fetch, and the possible CPUs. */
const volatile __u8 ids_per_cpu = 0;
const volatile __u32 ids_cpus = 1;

struct id_counters {
	__u32 next[ID_KINDS][ID_CTXS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct id_counters);
} id_counters SEC(".maps");

/* A new id of `kind` from the counter at `global` (whose initial value is
 * the first id), taken in context `ctx`; negative when none is left.
 * per_cpu: a constant, 1 for the programs that never fetch. */
static __always_inline __s64 take_id(__u32 *global, enum id_kind kind, __u32 ctx, const int per_cpu)
{
	struct id_counters *c;
	__u32 zero = 0, cpu;
	__u64 n;

	if (!per_cpu && !ids_per_cpu)
		return __sync_fetch_and_add(global, 1);
	c = bpf_map_lookup_elem(&id_counters, &zero);
	cpu = bpf_get_smp_processor_id();
	if (!c || kind >= ID_KINDS || ctx >= ID_CTXS || cpu >= ids_cpus)
		return -1;
	n = c->next[kind][ctx]++;
	n = *global + n * ids_cpus * ID_CTXS + cpu * ID_CTXS + ctx;
	return n > 0x7fffffff ? -1 : (__s64)n;
}

#endif /* BPROF_IDS_BPF_H */
