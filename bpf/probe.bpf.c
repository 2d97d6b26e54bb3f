// SPDX-License-Identifier: GPL-2.0
/*
 * Feature probes that libbpf's helper and type probes cannot make: each
 * program uses one instruction-level feature and is loaded alone (see
 * src/bpf/kfeatures.rs). A load that fails means the kernel lacks it.
 */
#include "kernel.bpf.h"

__u64 probe_counter = 0;

/* Atomic fetch-and-add with its result used (BPF_ATOMIC | BPF_FETCH,
 * Linux 5.12): how the profile program hands out stack ids. */
SEC("socket")
int atomic_fetch(void *ctx)
{
	return __sync_fetch_and_add(&probe_counter, 1) & 1;
}

/* A BTF tracepoint (Linux 5.5), as the scheduler and fork hooks are;
 * libbpf's program-type probe cannot tell, it needs an attach target. */
SEC("tp_btf/sched_switch")
int tp_btf(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
