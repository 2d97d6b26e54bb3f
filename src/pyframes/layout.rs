//! Where CPython keeps what the walker reads, per version: tables for 3.10
//! to 3.12 (each checked against the interpreters the tests run, whose
//! headers give the same offsets, and at run time against the size of
//! `_PyRuntime`), and 3.13's own `_Py_DebugOffsets`, read from the start of
//! `_PyRuntime`.

use crate::bpf::abi::{py_model, py_offsets, PY_MODEL_310, PY_MODEL_311, PY_MODEL_312};

/// One version's layout, as the walker takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// `enum py_model`.
    pub(crate) model: py_model,
    /// The offsets.
    pub(crate) offsets: py_offsets,
}

/// A table row: the minor version, the size of `_PyRuntimeState` it was
/// taken with, and the layout.
struct Table {
    minor: u32,
    runtime_size: u64,
    model: py_model,
    o: py_offsets,
}

/// The tables. `ts_read`, `f_read` and `co_read` are the bytes the walker
/// reads of a thread state, a frame and a code object: up to the furthest
/// field it takes (each object is larger).
fn tables() -> [Table; 3] {
    [
        Table {
            minor: 10,
            runtime_size: 672,
            model: PY_MODEL_310,
            o: py_offsets {
                rt_interp_head: 32,
                interp_next: 0,
                interp_threads: 8,
                ts_next: 8,
                ts_interp: 16,
                ts_thread_id: 176,
                ts_frame: 24,
                cframe_frame: 0,
                f_back: 24,
                f_code: 32,
                f_instr: 96,
                f_entry: 0,
                co_filename: 104,
                co_name: 112,
                co_linetable: 120,
                co_firstlineno: 40,
                co_argcount: 16,
                co_code: 0,
                str_state: 32,
                str_length: 16,
                str_ascii_size: 48,
                str_compact_size: 72,
                bytes_size: 16,
                bytes_data: 32,
                ts_read: 184,
                f_read: 104,
                co_read: 128,
                co_version: 0,
                interp_gen: 0,
                ts_chunk: 0,
                pad: [0; 2],
            },
        },
        Table {
            minor: 11,
            runtime_size: 166_688,
            model: PY_MODEL_311,
            o: py_offsets {
                rt_interp_head: 40,
                interp_next: 0,
                interp_threads: 16,
                ts_next: 8,
                ts_interp: 16,
                ts_thread_id: 160,
                ts_frame: 56,
                cframe_frame: 8 + 1,
                f_back: 48,
                f_code: 32,
                f_instr: 56,
                f_entry: 68,
                co_filename: 112,
                co_name: 128,
                co_linetable: 136,
                co_firstlineno: 72,
                co_argcount: 56,
                co_code: 184,
                str_state: 32,
                str_length: 16,
                str_ascii_size: 48,
                str_compact_size: 72,
                bytes_size: 16,
                bytes_data: 32,
                ts_read: 320,
                f_read: 72,
                co_read: 144,
                co_version: 0,
                interp_gen: 0,
                ts_chunk: 296,
                pad: [0; 2],
            },
        },
        Table {
            minor: 12,
            runtime_size: 459_944,
            model: PY_MODEL_312,
            o: py_offsets {
                rt_interp_head: 40,
                interp_next: 0,
                interp_threads: 72,
                ts_next: 8,
                ts_interp: 16,
                ts_thread_id: 144,
                ts_frame: 56,
                cframe_frame: 1,
                f_back: 8,
                f_code: 0,
                f_instr: 56,
                f_entry: 70,
                co_filename: 112,
                co_name: 128,
                co_linetable: 136,
                co_firstlineno: 68,
                co_argcount: 52,
                co_code: 192,
                str_state: 32,
                str_length: 16,
                str_ascii_size: 40,
                str_compact_size: 56,
                bytes_size: 16,
                bytes_data: 32,
                ts_read: 256,
                f_read: 72,
                co_read: 144,
                co_version: 92,
                interp_gen: 0,
                ts_chunk: 232,
                pad: [0; 2],
            },
        },
    ]
}

/// Why an interpreter's layout is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoLayout {
    /// A version bprof has no table for.
    Version,
    /// A known version whose `_PyRuntime` has another size than the table's
    /// (another build configuration): the table may not fit.
    RuntimeSize(u64),
    /// 3.13's debug offsets are missing or malformed.
    DebugOffsets(&'static str),
    /// A free-threaded build (its objects and frames differ).
    FreeThreaded,
    /// Not a 64-bit x86 build: the tables are x86-64's.
    Arch,
}

impl std::fmt::Display for NoLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoLayout::Version => write!(f, "a version bprof cannot walk"),
            NoLayout::RuntimeSize(n) => write!(
                f,
                "its _PyRuntime is {n} bytes, not the size of the build bprof knows"
            ),
            NoLayout::DebugOffsets(why) => write!(f, "its debug offsets are {why}"),
            NoLayout::FreeThreaded => write!(f, "a free-threaded build"),
            NoLayout::Arch => write!(f, "not an x86-64 build"),
        }
    }
}

/// The layout of `minor` (3.`minor`) for 3.10 to 3.12, whose `_PyRuntime`
/// is `runtime_size` bytes.
pub(crate) fn table_layout(minor: u32, runtime_size: u64) -> Result<Layout, NoLayout> {
    let t = tables()
        .into_iter()
        .find(|t| t.minor == minor)
        .ok_or(NoLayout::Version)?;
    if t.runtime_size != runtime_size {
        return Err(NoLayout::RuntimeSize(runtime_size));
    }
    Ok(Layout {
        model: t.model,
        offsets: t.o,
    })
}

/// The fields of 3.13's `_Py_DebugOffsets` the walker uses, by index of
/// their 8-byte word (the struct is 8-byte words after its cookie).
mod debug313 {
    pub(super) const VERSION: usize = 1;
    pub(super) const FREE_THREADED: usize = 2;
    // runtime_state: size, finalizing, interpreters_head
    pub(super) const RT_INTERP_HEAD: usize = 5;
    // interpreter_state: size, id, next, threads_head, ...
    pub(super) const INTERP: usize = 6;
    pub(super) const INTERP_NEXT: usize = INTERP + 2;
    pub(super) const INTERP_THREADS: usize = INTERP + 3;
    // thread_state (after interpreter_state's 13 words): size, prev, next,
    // interp, current_frame, thread_id, native_thread_id, datastack_chunk,
    // status
    pub(super) const TS: usize = INTERP + 13;
    pub(super) const TS_NEXT: usize = TS + 2;
    pub(super) const TS_INTERP: usize = TS + 3;
    pub(super) const TS_FRAME: usize = TS + 4;
    pub(super) const TS_NATIVE_ID: usize = TS + 6;
    pub(super) const TS_CHUNK: usize = TS + 7;
    // interpreter_frame (after thread_state's 9): size, previous,
    // executable, instr_ptr, localsplus, owner
    pub(super) const FRAME: usize = TS + 9;
    pub(super) const F_BACK: usize = FRAME + 1;
    pub(super) const F_CODE: usize = FRAME + 2;
    pub(super) const F_INSTR: usize = FRAME + 3;
    pub(super) const F_OWNER: usize = FRAME + 5;
    // code_object (after interpreter_frame's 6): size, filename, name,
    // qualname, linetable, firstlineno, argcount, localsplusnames,
    // localspluskinds, co_code_adaptive
    pub(super) const CODE: usize = FRAME + 6;
    pub(super) const CO_FILENAME: usize = CODE + 1;
    pub(super) const CO_QUALNAME: usize = CODE + 3;
    pub(super) const CO_LINETABLE: usize = CODE + 4;
    pub(super) const CO_FIRSTLINENO: usize = CODE + 5;
    pub(super) const CO_ARGCOUNT: usize = CODE + 6;
    pub(super) const CO_CODE: usize = CODE + 9;
    // then pyobject (2), type_object (4), tuple_object (3), list_object
    // (3), dict_object (3), float_object (2), long_object (3),
    // bytes_object: size, ob_size, ob_sval
    pub(super) const BYTES: usize = CODE + 10 + 2 + 4 + 3 + 3 + 3 + 2 + 3;
    pub(super) const BYTES_SIZE: usize = BYTES + 1;
    pub(super) const BYTES_DATA: usize = BYTES + 2;
    // unicode_object: size, state, length, asciiobject_size
    pub(super) const STR: usize = BYTES + 3;
    pub(super) const STR_STATE: usize = STR + 1;
    pub(super) const STR_LENGTH: usize = STR + 2;
    pub(super) const STR_ASCII_SIZE: usize = STR + 3;
    /// Words up to the last field used.
    pub(super) const WORDS: usize = STR + 4;
}

/// 3.13's `co_version`, which its debug offsets do not give (headers of
/// 3.13.0; checked with the rest against each interpreter the tests run).
const CO_VERSION_313: u16 = 92;

/// 3.13's code object counter (`func_state.next_version`) in its
/// interpreter, which its debug offsets do not give either.
const INTERP_GEN_313: u16 = 17000;

/// Bytes of `_PyRuntime`'s start that [`debug_layout`] reads.
pub(crate) const DEBUG_OFFSETS_BYTES: usize = debug313::WORDS * 8;

/// 3.13's layout from the `_Py_DebugOffsets` at the start of `_PyRuntime`
/// (`bytes`, as the file initialises it). Every offset must lie within the
/// bytes the walker reads of its object.
pub(crate) fn debug_layout(bytes: &[u8]) -> Result<(Layout, u32), NoLayout> {
    use debug313::*;
    if bytes.len() < DEBUG_OFFSETS_BYTES || &bytes[..8] != b"xdebugpy" {
        return Err(NoLayout::DebugOffsets("missing"));
    }
    let word = |i: usize| {
        u64::from_ne_bytes(
            bytes[i * 8..i * 8 + 8]
                .try_into()
                .expect("8 bytes within the length checked"),
        )
    };
    let version = word(VERSION);
    if version >> 16 != 0x030d {
        return Err(NoLayout::Version);
    }
    if word(FREE_THREADED) != 0 {
        return Err(NoLayout::FreeThreaded);
    }
    // An offset the walker takes as a u16 within the bytes it reads.
    let within = |i: usize, limit: u16, width: u64| -> Result<u16, NoLayout> {
        let v = word(i);
        if v + width > u64::from(limit) {
            return Err(NoLayout::DebugOffsets("outside the objects bprof reads"));
        }
        Ok(v as u16)
    };
    let any = |i: usize| -> Result<u16, NoLayout> {
        u16::try_from(word(i)).map_err(|_| NoLayout::DebugOffsets("out of range"))
    };
    let (ts_read, f_read, co_read) = (256u16, 72u16, 144u16);
    let o = py_offsets {
        rt_interp_head: any(RT_INTERP_HEAD)?,
        interp_next: any(INTERP_NEXT)?,
        interp_threads: any(INTERP_THREADS)?,
        ts_next: within(TS_NEXT, ts_read, 8)?,
        ts_interp: within(TS_INTERP, ts_read, 8)?,
        ts_thread_id: within(TS_NATIVE_ID, ts_read, 8)?,
        ts_frame: within(TS_FRAME, ts_read, 8)?,
        cframe_frame: 0,
        f_back: within(F_BACK, f_read, 8)?,
        f_code: within(F_CODE, f_read, 8)?,
        f_instr: within(F_INSTR, f_read, 8)?,
        f_entry: within(F_OWNER, f_read, 1)?,
        co_filename: within(CO_FILENAME, co_read, 8)?,
        co_name: within(CO_QUALNAME, co_read, 8)?,
        co_linetable: within(CO_LINETABLE, co_read, 8)?,
        co_firstlineno: within(CO_FIRSTLINENO, co_read, 4)?,
        co_argcount: within(CO_ARGCOUNT, co_read, 4)?,
        co_code: any(CO_CODE)?,
        str_state: within(STR_STATE, 64, 4)?,
        str_length: within(STR_LENGTH, 64, 8)?,
        str_ascii_size: any(STR_ASCII_SIZE)?,
        // Not in the debug offsets: PyCompactUnicodeObject adds utf8_length
        // and utf8 to the ASCII header in 3.12 and 3.13.
        str_compact_size: any(STR_ASCII_SIZE)? + 16,
        bytes_size: within(BYTES_SIZE, 64, 8)?,
        bytes_data: any(BYTES_DATA)?,
        ts_read,
        f_read,
        co_read,
        co_version: CO_VERSION_313,
        interp_gen: INTERP_GEN_313,
        ts_chunk: within(TS_CHUNK, ts_read, 24)?,
        pad: [0; 2],
    };
    Ok((
        Layout {
            model: PY_MODEL_312,
            offsets: o,
        },
        version as u32,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_offset_lies_within_what_the_walker_reads() {
        for t in tables() {
            let o = t.o;
            for (v, w) in [(o.ts_next, 8), (o.ts_interp, 8), (o.ts_thread_id, 8)] {
                assert!(v + w <= o.ts_read, "3.{} thread state {v}", t.minor);
            }
            assert!(o.ts_frame + 8 <= o.ts_read && o.ts_chunk + 24 <= o.ts_read);
            for (v, w) in [(o.f_back, 8), (o.f_code, 8), (o.f_instr, 4), (o.f_entry, 1)] {
                assert!(v + w <= o.f_read, "3.{} frame {v}", t.minor);
            }
            for v in [o.co_filename, o.co_name, o.co_linetable] {
                assert!(v + 8 <= o.co_read, "3.{} code {v}", t.minor);
            }
            // The walker's buffers (pyframes.bpf.h).
            assert!(o.ts_read <= 320 && o.f_read <= 128 && o.co_read <= 160);
        }
    }

    #[test]
    fn a_table_refuses_another_runtime_size_and_version() {
        assert!(table_layout(11, 166_688).is_ok());
        assert_eq!(
            table_layout(11, 166_680).unwrap_err(),
            NoLayout::RuntimeSize(166_680)
        );
        assert_eq!(table_layout(9, 672).unwrap_err(), NoLayout::Version);
    }

    #[test]
    fn debug_offsets_are_checked_before_use() {
        assert_eq!(
            debug_layout(b"short").unwrap_err(),
            NoLayout::DebugOffsets("missing")
        );
        let mut b = vec![0u8; DEBUG_OFFSETS_BYTES];
        b[..8].copy_from_slice(b"xdebugpy");
        b[8..16].copy_from_slice(&0x030c_01f0u64.to_ne_bytes());
        assert_eq!(debug_layout(&b).unwrap_err(), NoLayout::Version);
        b[8..16].copy_from_slice(&0x030d_00f0u64.to_ne_bytes());
        b[16..24].copy_from_slice(&1u64.to_ne_bytes());
        assert_eq!(debug_layout(&b).unwrap_err(), NoLayout::FreeThreaded);
        b[16..24].copy_from_slice(&0u64.to_ne_bytes());
        // A thread-state offset far past what is read.
        let at = debug313::TS_FRAME * 8;
        b[at..at + 8].copy_from_slice(&4096u64.to_ne_bytes());
        assert!(matches!(
            debug_layout(&b).unwrap_err(),
            NoLayout::DebugOffsets(_)
        ));
    }
}
