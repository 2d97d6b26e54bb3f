/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Target sets shared by the profile and stat programs: processes (-p, a
 * command and its descendants) and threads (-L / -t), filled by user space
 * and, for descendants, by the fork tracepoint.
 */
#ifndef BPROF_TARGETS_BPF_H
#define BPROF_TARGETS_BPF_H

#include "kernel.bpf.h"
#include "targets.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, enum target_state);
} target_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} target_tids SEC(".maps");

static __always_inline int in_targets(int match_tgid, int match_tid, __u32 tgid, __u32 pid)
{
	enum target_state *state;

	if (match_tgid) {
		state = bpf_map_lookup_elem(&target_tgids, &tgid);
		if (!state || *state != TARGET_ACTIVE)
			return 0;
	}
	if (match_tid && !bpf_map_lookup_elem(&target_tids, &pid))
		return 0;
	return 1;
}

/* A process forked by a target process is a target (-- COMMAND's tree). */
static __always_inline void follow_child(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	enum target_state active = TARGET_ACTIVE, *state;

	state = bpf_map_lookup_elem(&target_tgids, &ptgid);
	if (ptgid != ctgid && state && *state == TARGET_ACTIVE)
		bpf_map_update_elem(&target_tgids, &ctgid, &active, 0);
}

/*
 * For tp_btf/task_rename: begin_new_exec() calls perf_event_exec() (where
 * perf enables enable_on_exec events) and then __set_task_comm(), which
 * fires task_rename. A TARGET_AT_EXEC process renamed by its own exec
 * becomes active here. Returns 1 when it did, so the caller can start its
 * accounting at this very point.
 */
static __always_inline int arm_at_exec(struct task_struct *task)
{
	__u32 tgid = task->tgid;
	enum target_state *state = bpf_map_lookup_elem(&target_tgids, &tgid);

	/* Only the task renaming itself: writes to /proc/PID/comm rename
	 * others. */
	if (!state || *state != TARGET_AT_EXEC || task->pid != (__u32)bpf_get_current_pid_tgid())
		return 0;
	*state = TARGET_ACTIVE;
	return 1;
}

#endif /* BPROF_TARGETS_BPF_H */
