/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by profile.bpf.c and the Rust side (which sees them through the
 * generated skeleton): keep every struct that crosses the boundary here.
 */
#ifndef BPROF_PROFILE_H
#define BPROF_PROFILE_H

#define BPROF_COMM_LEN 16
/* The kernel's PERF_MAX_STACK_DEPTH default; deeper stacks are truncated. */
#define BPROF_MAX_STACK_DEPTH 127
#define BPROF_BUILD_ID_SIZE 20

/* One key of the in-kernel count map: a thread and the two stacks it was in. */
struct sample_key {
	__u32 tgid;
	__u32 pid;
	/* Ids into kern_stacks / user_stacks; negative when not taken or lost. */
	__s32 kern_stack_id;
	__s32 user_stack_id;
	char comm[BPROF_COMM_LEN];
};

/*
 * Per-CPU accounting of every sample the program saw. Each sample lands in
 * exactly one of counted / idle / not_target / filtered / count_map_full, so
 * user space can check that nothing went missing.
 */
struct profile_stats {
	__u64 samples;         /* program runs */
	__u64 counted;         /* added to the count map */
	__u64 idle;            /* idle task, skipped without -I */
	__u64 not_target;      /* outside -p / -L / the command's process tree */
	__u64 filtered;        /* dropped by --filter */
	__u64 count_map_full;  /* counts map had no room for a new key */
	__u64 kern_stack_lost; /* kernel stack map full or hash collision */
	__u64 user_stack_lost; /* user stack map full or hash collision */
	__u64 no_stack;        /* neither stack usable: counted as [unknown] */
};

/* Read-only configuration, fixed before load. */
struct profile_config {
	__u8 kernel_stacks;   /* take kernel stacks */
	__u8 user_stacks;     /* take user stacks */
	__u8 include_idle;    /* count the idle task */
	__u8 match_tgid;      /* only tgids in target_tgids */
	__u8 match_tid;       /* only tids in target_tids */
	__u8 follow_children; /* add forked processes of targets to target_tgids */
};

#endif /* BPROF_PROFILE_H */
