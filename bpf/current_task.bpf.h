/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The current task, as bpf_get_current_task_btf (5.11) gives it: a BTF
 * pointer whose fields are plain loads. Without that helper (or forced, to
 * test this path on any kernel) bpf_get_current_task's plain address, whose
 * fields are read with CO-RE probe reads: TASK_FIELD and MM_FIELD take
 * whichever way the pointer allows. The choice is read-only data, so the
 * verifier walks one way only and the other costs nothing.
 */
#ifndef BPROF_CURRENT_TASK_BPF_H
#define BPROF_CURRENT_TASK_BPF_H

#include "kernel.bpf.h"

/* Set by user space before load: no bpf_get_current_task_btf. */
const volatile __u8 task_btf_missing = 0;

static __always_inline struct task_struct *current_task(void)
{
	if (task_btf_missing)
		return (struct task_struct *)bpf_get_current_task();
	return bpf_get_current_task_btf();
}

/* A field of current_task(), or of an mm read from it. */
#define TASK_FIELD(task, field) (task_btf_missing ? BPF_CORE_READ(task, field) : (task)->field)
#define MM_FIELD(mm, field) (task_btf_missing ? BPF_CORE_READ(mm, field) : (mm)->field)

#endif /* BPROF_CURRENT_TASK_BPF_H */
