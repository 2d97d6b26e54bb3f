//! A checked filter compiled into the entries of the `filters` map that
//! profile.bpf.c walks (filter.bpf.h).

use anyhow::{Context, Result};

use crate::bpf::skel::profile::types::{filter_entry, filter_op, filter_term};
use crate::filter::{self, Filter, Op, Term, Value};
use crate::target::cgroup;

/// Encodes a parsed filter as the map entries profile.bpf.c walks:
/// single tests stand alone, OR groups are bracketed by GROUP_BEGIN/END.
/// Cgroup paths are resolved to ids here, before anything is loaded.
pub fn compile_filter(f: &Filter) -> Result<Vec<filter_entry>> {
    let mut out = Vec::new();
    let bracket = |op| filter_entry {
        op,
        ..Default::default()
    };
    for group in &f.groups {
        if group.len() > 1 {
            out.push(bracket(filter_op::FILTER_OP_GROUP_BEGIN));
        }
        for t in group {
            let mut e = filter_entry {
                op: match t.op {
                    Op::Eq => filter_op::FILTER_OP_EQ,
                    Op::Ne => filter_op::FILTER_OP_NE,
                    Op::Lt => filter_op::FILTER_OP_LT,
                    Op::Le => filter_op::FILTER_OP_LE,
                    Op::Gt => filter_op::FILTER_OP_GT,
                    Op::Ge => filter_op::FILTER_OP_GE,
                    Op::And => filter_op::FILTER_OP_AND,
                },
                term: match t.term {
                    Term::Tid => filter_term::FILTER_TERM_TID,
                    Term::Pid => filter_term::FILTER_TERM_PID,
                    Term::Cpu => filter_term::FILTER_TERM_CPU,
                    Term::Period => filter_term::FILTER_TERM_PERIOD,
                    Term::Ip => filter_term::FILTER_TERM_IP,
                    Term::Uid => filter_term::FILTER_TERM_UID,
                    Term::Gid => filter_term::FILTER_TERM_GID,
                    Term::Cgroup => filter_term::FILTER_TERM_CGROUP,
                    Term::Comm => filter_term::FILTER_TERM_COMM,
                    Term::Mode => filter_term::FILTER_TERM_MODE,
                },
                ..Default::default()
            };
            match &t.value {
                Value::Num(n) => e.value = *n,
                Value::Path(p) => {
                    let cg = cgroup::resolve(p)
                        .with_context(|| format!("in filter term 'cgroup {p}'"))?;
                    e.value = cg.id;
                    e.level = cg.level;
                }
                Value::Comm(c) => {
                    for (d, s) in e.comm.iter_mut().zip(c) {
                        *d = *s as i8;
                    }
                }
                Value::Mode(m) => e.value = u64::from(*m == filter::CpuMode::Kernel),
            }
            out.push(e);
        }
        if group.len() > 1 {
            out.push(bracket(filter_op::FILTER_OP_GROUP_END));
        }
    }
    Ok(out)
}
