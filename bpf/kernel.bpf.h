/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel as every BPF source here sees it: its types (vmlinux.h),
 * libbpf's helpers, and the #defines BTF does not carry (errno values,
 * task flags and states, x86-64's page size, VM_EXEC), each defined once.
 */
#ifndef BPROF_KERNEL_BPF_H
#define BPROF_KERNEL_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define E2BIG 7
#define EBUSY 16
#define EEXIST 17
#define EFAULT 14
#define ENOENT 2
#define ENOMEM 12
#define PF_KTHREAD 0x00200000
#define TASK_INTERRUPTIBLE 0x1
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_DEAD 0x80
#define PAGE_SHIFT_X86 12
/* VM_EXEC: the same bit in every kernel. */
#define BPROF_VM_EXEC 0x4

#endif /* BPROF_KERNEL_BPF_H */
