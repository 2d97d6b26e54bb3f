/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Loops over a callback: bpf_loop (5.17), or in a program built for a
 * kernel without it the same callback in an open-coded loop bounded by
 * `max`. 5.10's verifier refuses a program that merely holds a callback's
 * address, so each program is built one way: `open` is a constant its
 * always-inline callers pass down, and the other branch never reaches the
 * program's code.
 */
#ifndef BPROF_LOOP_BPF_H
#define BPROF_LOOP_BPF_H

#include "kernel.bpf.h"

#define LOOP(open, n, max, cb, arg)                                                \
	do {                                                                       \
		if (open) {                                                        \
			for (__u32 _i = 0; _i < (__u32)(max) && _i < (__u32)(n); _i++) \
				if (cb(_i, arg))                                   \
					break;                                     \
		} else {                                                           \
			bpf_loop(n, cb, arg, 0);                                   \
		}                                                                  \
	} while (0)

#endif /* BPROF_LOOP_BPF_H */
