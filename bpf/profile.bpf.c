// SPDX-License-Identifier: GPL-2.0
/*
 * On-CPU profiler: runs at every sample of a perf event and counts
 * (thread, kernel stack, user stack) in a hash map. Nothing per sample is sent
 * to user space; it reads the unique keys and stacks once, at the end.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "profile.h"

/* errno values are #defines, which BTF does not carry. */
#define EEXIST 17
#define EFAULT 14

const volatile struct profile_config cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* resized from --stack-storage-size */
	__type(key, struct sample_key);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, BPROF_MAX_STACK_DEPTH * sizeof(__u64));
} kern_stacks SEC(".maps");

/*
 * User stacks are stored as (build ID, file offset) records so that a process
 * that exits before the profile ends can still be symbolized from its files.
 */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, BPROF_MAX_STACK_DEPTH * sizeof(struct bpf_stack_build_id));
} user_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct profile_stats);
} profile_stats SEC(".maps");

/* Target processes (-p, the command and its descendants) and threads (-L). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} target_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} target_tids SEC(".maps");

static __always_inline struct profile_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&profile_stats, &zero);
}

static __always_inline int is_target(__u32 tgid, __u32 pid)
{
	if (cfg.match_tgid && !bpf_map_lookup_elem(&target_tgids, &tgid))
		return 0;
	if (cfg.match_tid && !bpf_map_lookup_elem(&target_tids, &pid))
		return 0;
	return 1;
}

SEC("perf_event")
int do_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, pid = (__u32)id;
	struct profile_stats *st = stats();
	struct sample_key key = {};
	__u64 one = 1, *val;
	int err;

	if (!st)
		return 0;
	st->samples++;

	if (pid == 0 && !cfg.include_idle) {
		st->idle++;
		return 0;
	}
	if (!is_target(tgid, pid)) {
		st->not_target++;
		return 0;
	}

	key.tgid = tgid;
	key.pid = pid;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	key.kern_stack_id = -1;
	key.user_stack_id = -1;
	if (cfg.kernel_stacks) {
		key.kern_stack_id = bpf_get_stackid(ctx, &kern_stacks, 0);
		/* -EFAULT just means "was in user mode"; -EEXIST/-ENOMEM lose a stack. */
		if (key.kern_stack_id < 0 && key.kern_stack_id != -EFAULT)
			st->kern_stack_lost++;
	}
	if (cfg.user_stacks && tgid != 0) {
		key.user_stack_id = bpf_get_stackid(ctx, &user_stacks, BPF_F_USER_STACK);
		if (key.user_stack_id < 0 && key.user_stack_id != -EFAULT)
			st->user_stack_lost++;
	}
	if (key.kern_stack_id < 0 && key.user_stack_id < 0)
		st->no_stack++;

	val = bpf_map_lookup_elem(&counts, &key);
	if (val) {
		__sync_fetch_and_add(val, 1);
		st->counted++;
		return 0;
	}
	err = bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
	if (err == -EEXIST) {
		/* Another CPU inserted the same key first. */
		val = bpf_map_lookup_elem(&counts, &key);
		if (val) {
			__sync_fetch_and_add(val, 1);
			err = 0;
		}
	}
	if (err)
		st->count_map_full++;
	else
		st->counted++;
	/* 0: the sample is not also written to the perf ring buffer. */
	return 0;
}

/* Follow -- COMMAND's children: a forked process of a target is a target. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 one = 1;

	if (!cfg.follow_children || ptgid == ctgid)
		return 0;
	if (bpf_map_lookup_elem(&target_tgids, &ptgid))
		bpf_map_update_elem(&target_tgids, &ctgid, &one, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
