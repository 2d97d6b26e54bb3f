/* SPDX-License-Identifier: GPL-2.0 */
/* Target-set values shared by the BPF programs and the Rust side. */
#ifndef BPROF_TARGETS_H
#define BPROF_TARGETS_H

/* A target_tgids entry. */
enum target_state {
	TARGET_ACTIVE = 1,  /* counted and sampled */
	/* A command held before exec: it becomes active at its exec, where
	 * perf's enable_on_exec would enable its events, so the forked
	 * child's own pre-exec work (bprof's code) is never counted. */
	TARGET_AT_EXEC = 2,
};

#endif /* BPROF_TARGETS_H */
