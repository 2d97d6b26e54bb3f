/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types of the CPython frame walker (pyframes.bpf.h) shared with the Rust
 * side (src/pyframes/): what user space tells the walker about each Python
 * process (where its runtime is, the layout of its version), the Python
 * stacks the walker stores, the new code objects it announces, and why a
 * walk ended. Plain integer types only, as profile.h.
 */
#ifndef BPROF_PYFRAMES_H
#define BPROF_PYFRAMES_H

enum py_limits {
	/* Python frames one stored Python stack holds; deeper ones end with
	 * PY_END_DEPTH. */
	PY_MAX_DEPTH = 128,
	/* Stacks of at most this many frames are stored in py_stacks, the
	 * others in py_stacks_deep (see user_stack_short in profile.h). */
	PY_SHORT_FRAMES = 24,
	/* py_stacks_deep ids have this bit. */
	PY_DEEP_STACK_ID = 1 << 30,
	/* Bytes of a code object's qualified name, file name and line table
	 * copied into its announcement. */
	PY_NAME_BYTES = 128,
	PY_FILE_BYTES = 256,
	PY_LINES_BYTES = 2048,
	/* Thread states and interpreters one search for a thread visits. */
	PY_MAX_THREADS = 512,
	PY_MAX_INTERPS = 8,
	/* py_frame.flags: the frame a C-level call of the interpreter's eval
	 * function began with (so, walking from the leaf, the last frame of
	 * that call's run of Python frames). */
	PY_FRAME_ENTRY = 1,
	/* py_frame.lasti when the frame has not run an instruction yet. */
	PY_NO_LASTI = -1,
	/* py_code_event: a string's kind (bytes per character) in its low 3
	 * bits, this bit when it was longer than the bytes copied. */
	PY_STR_CUT = 8,
	/* A thread found without a thread state is searched for again after
	 * this long (it may create one later). */
	PY_RETRY_NS = 200000000,
	/* The Python-stack part of a sample_key: none taken. */
	PY_STACK_NONE = 0,
};

/* How a version keeps its frames: the walker's branches. */
enum py_model {
	PY_MODEL_NONE = 0,
	/* 3.10: PyFrameObject chained by f_back, f_lasti an index, every frame
	 * its own eval call; a thread found by its pthread id (the TLS base). */
	PY_MODEL_310,
	/* 3.11: _PyInterpreterFrame by previous, prev_instr a pointer into the
	 * code object, is_entry marks an eval call's first frame; the current
	 * frame behind tstate->cframe. */
	PY_MODEL_311,
	/* 3.12 and 3.13: as 3.11, but an eval call begins below its first
	 * frame with a shim frame owned by the C stack; 3.13 keeps the current
	 * frame in the thread state itself. */
	PY_MODEL_312,
};

/* Byte offsets into CPython's structures, per version (user space fills
 * them from its tables, or from 3.13's _Py_DebugOffsets). */
struct py_offsets {
	__u16 rt_interp_head; /* _PyRuntimeState.interpreters.head */
	__u16 interp_next;
	__u16 interp_threads; /* PyInterpreterState.threads.head */
	__u16 ts_next;
	__u16 ts_interp;
	__u16 ts_thread_id; /* native_thread_id; 3.10: thread_id, the pthread id */
	__u16 ts_frame;     /* frame, cframe (cframe_frame set) or current_frame */
	__u16 cframe_frame; /* _PyCFrame.current_frame, + 1 (0: no cframe) */
	__u16 f_back;
	__u16 f_code;
	__u16 f_instr;  /* f_lasti (an int), or the instruction pointer */
	__u16 f_entry;  /* is_entry (3.11) or owner (3.12+): one byte */
	__u16 co_filename;
	__u16 co_name;  /* co_qualname from 3.11, co_name before */
	__u16 co_linetable;
	__u16 co_firstlineno;
	__u16 co_argcount;
	__u16 co_code;  /* co_code_adaptive: where instructions start (3.11+) */
	__u16 str_state;
	__u16 str_length;
	__u16 str_ascii_size;   /* data of a compact ASCII string */
	__u16 str_compact_size; /* data of another compact string */
	__u16 bytes_size;
	__u16 bytes_data;
	__u16 ts_read; /* bytes of a thread state the walker reads */
	__u16 f_read;  /* ... of a frame */
	__u16 co_read; /* ... of a code object */
	/* co_version (3.12+: numbers code objects as they are made), 0 where
	 * there is none: then the identity takes the strings' contents. */
	__u16 co_version;
	/* 3.13: the counter co_version is taken from, in the interpreter
	 * (func_state.next_version); 0: none, or py_proc.gen_addr. */
	__u16 interp_gen;
	/* 3.11+: the thread state's datastack_chunk, the base of the chunk
	 * its newest frames lie in, followed 16 bytes on by datastack_limit,
	 * the chunk's end (0: none, 3.10). */
	__u16 ts_chunk;
	__u16 pad[2];
};

/* One Python process (py_procs, by tgid): filled by user space when it
 * learns the process runs a known interpreter. */
struct py_proc {
	__u64 runtime;    /* &_PyRuntime */
	__u64 code_type;  /* &PyCode_Type */
	__u64 str_type;   /* &PyUnicode_Type */
	__u64 bytes_type; /* &PyBytes_Type */
	/* 3.12: &_Py_next_func_version, the counter co_version is taken from
	 * (while it has not moved, no code object was made, so none took a
	 * freed one's address: identities found before still hold); 0: none. */
	__u64 gen_addr;
	__u32 model;      /* enum py_model */
	__u32 version;    /* PY_VERSION_HEX */
	struct py_offsets o;
};

/* One Python frame: which code object (its address and a hash of fields
 * read from it, so that another code object made later at a freed one's
 * address has another identity) and where in it. */
struct py_frame {
	__u64 code;
	__u64 id;    /* never 0 */
	__s32 lasti; /* instruction index (code units), PY_NO_LASTI */
	__u32 flags; /* PY_FRAME_ENTRY */
};

/* A Python stack, leaf first. */
struct py_stack {
	__u32 nr;
	__u32 end; /* enum py_end: how the walk ended */
	struct py_frame frames[PY_MAX_DEPTH];
};

struct py_stack_short {
	__u32 nr;
	__u32 end;
	struct py_frame frames[PY_SHORT_FRAMES];
};

/* Why a walk ended: index into py_stats.end[]. */
enum py_end {
	PY_END_ROOT = 0,   /* the outermost frame reached */
	PY_END_NO_THREAD,  /* the thread has no thread state (not a Python thread) */
	PY_END_NO_INTERP,  /* no interpreter (not initialised, or finalising) */
	PY_END_IDLE,       /* a thread state without a frame (not running Python) */
	PY_END_READ,       /* a read of the process's memory failed */
	PY_END_POINTER,    /* a pointer not where an object can be (null, unaligned, kernel) */
	PY_END_NOT_CODE,   /* a frame's code object is not one */
	PY_END_LOOP,       /* a frame links to itself */
	PY_END_DEPTH,      /* PY_MAX_DEPTH frames taken */
	PY_END_KINDS,
};

/* Per CPU, summed by user space (a field of profile_stats). */
struct py_stats {
	__u64 walks;      /* samples of a Python process walked */
	__u64 frames;     /* Python frames recorded */
	__u64 end[PY_END_KINDS];
	__u64 reads;      /* copies the walks read of frames, thread states and 3.12's C stack */
	__u64 searches;   /* searches of the thread list for a thread state */
	__u64 announced;  /* new code objects sent to user space */
	__u64 dropped;    /* ... that found the ring full (sent again later) */
	__u64 stored;     /* new entries in py_stacks */
	__u64 lost;       /* Python stacks lost: map full */
	__u64 forked;     /* processes that took their parent's entry (a fork) */
	__u64 ns;         /* spent in the walks (bpf_ktime_get_ns around each) */
};

/* A code object seen for the first time (py_events): its names and line
 * table, copied while the process lives, so a process that exits keeps
 * its names. */
struct py_code_event {
	__u32 tgid;
	__u32 version; /* the process's PY_VERSION_HEX */
	__u64 code;
	__u64 id;
	__s32 firstlineno;
	__u32 lines_total; /* the line table's length (it may be longer than copied) */
	__u16 name_len;    /* bytes copied */
	__u16 name_kind;   /* bytes per character, | PY_STR_CUT */
	__u16 file_len;
	__u16 file_kind;
	__u16 lines_len;
	__u16 pad[3];
	__u8 name[PY_NAME_BYTES];
	__u8 file[PY_FILE_BYTES];
	__u8 lines[PY_LINES_BYTES];
};

#endif /* BPROF_PYFRAMES_H */
