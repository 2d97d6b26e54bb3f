/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Target sets shared by the profile and stat programs: processes (-p, a
 * command and its descendants) and threads (-L / -t), filled by user space
 * and, for descendants, by the fork tracepoint.
 */
#ifndef BPROF_TARGETS_BPF_H
#define BPROF_TARGETS_BPF_H

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

static __always_inline int in_targets(int match_tgid, int match_tid, __u32 tgid, __u32 pid)
{
	if (match_tgid && !bpf_map_lookup_elem(&target_tgids, &tgid))
		return 0;
	if (match_tid && !bpf_map_lookup_elem(&target_tids, &pid))
		return 0;
	return 1;
}

/* A process forked by a target process is a target (-- COMMAND's tree). */
static __always_inline void follow_child(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 one = 1;

	if (ptgid != ctgid && bpf_map_lookup_elem(&target_tgids, &ptgid))
		bpf_map_update_elem(&target_tgids, &ctgid, &one, 0);
}

#endif /* BPROF_TARGETS_BPF_H */
