/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Code without a table and without a frame pointer: a JIT's stubs, such as
 * CPython 3.12 and 3.13's `-X perf` trampolines (`sub $8,%rsp; call *%rcx;
 * add $8,%rsp; ret`), which save no rbp and have no CFI. When the code at
 * the frame's PC is an epilogue (what will run when the frame returns) the
 * frame's extent is exactly what that epilogue pops: `ret`, `add
 * $imm,%rsp; ret`, `pop %rbp; ret`. Anything else is left to the frame
 * pointer.
 *
 * unwind.bpf.h's walk tries it where a PC has no table.
 */
#ifndef BPROF_EPILOGUE_BPF_H
#define BPROF_EPILOGUE_BPF_H

#include "kernel.bpf.h"
#include "stack_window.bpf.h"
#include "unwind_state.bpf.h"

/* Follows the epilogue at c->s->ip, if there is one: 1 when the frame was
 * left (sp, ip, maybe bp moved to the caller's), 0 when the code is no
 * epilogue this knows, -1 when the stack could not be read. */
static __always_inline int follow_epilogue(struct unwind_ctx *c, const int open)
{
	struct walk_state *s = c->s;
	__u8 b[8] = {};
	__u64 cfa, ra;
	int pop_bp = 0;

	if (bpf_probe_read_user(b, sizeof(b), (void *)s->ip))
		return 0;
	if (b[0] == 0xc3) {
		cfa = s->sp + 8; /* ret */
	} else if (b[0] == 0x48 && b[1] == 0x83 && b[2] == 0xc4 && b[4] == 0xc3 && b[3] < 0x80) {
		cfa = s->sp + b[3] + 8; /* add $imm8,%rsp; ret */
	} else if (b[0] == 0x5d && b[1] == 0xc3) {
		cfa = s->sp + 16; /* pop %rbp; ret */
		pop_bp = 1;
	} else {
		return 0;
	}
	if (pop_bp) {
		if (load_bp(c, s->sp, open))
			return -1;
		s->bp_valid = 1;
	}
	if (read_u64(c, &ra, cfa - 8, open))
		return -1;
	s->fp_frames++;
	s->sp = cfa;
	s->ip = ra;
	return 1;
}

#endif /* BPROF_EPILOGUE_BPF_H */
