//! `canonicalize`: `fold-constants`, `fold-trivial` and `collapse-shapes` together, op by op,
//! until nothing changes, then `dce`.
//!
//! Needs: a verified module.
//! Guarantees: what the three rule sets guarantee, applied to a fixed point, so a folded
//! constant can enable a trivial fold which enables a collapse in the same run; no dead pure op
//! is left. Changed when any rule fired or any op was removed.
//!
//! A worklist drives it, as MLIR's greedy rewriter does: every op once in program order, then,
//! after a rule fires on an op, only the ops the rewrite can have given a new match: the op
//! itself when it survives, the ops that used its results (their operands changed), the ops
//! defining its operands (they may have lost a user) and the ops the rule created. The rules
//! match an op against its operands' producers, so nothing else can change; debug builds (the
//! tests) check it with one more sweep over the module, which must find nothing.

use crate::util::all_blocks;
use crate::{Pass, PassError};
use smallvec::SmallVec;
use std::collections::HashSet;
use tpuc_ir::{Module, OpId};

pub struct Canonicalize;

/// One rule set after the other on `op`; whether one fired.
fn rewrite(m: &mut Module, op: OpId) -> Result<bool, PassError> {
    Ok(crate::fold_constants::fold_op(m, op)? || crate::fold_trivial::fold_op(m, op)? || crate::collapse_shapes::collapse_op(m, op)?)
}

/// Ops awaiting a visit, in the order they were queued; each at most once at a time.
#[derive(Default)]
struct Worklist {
    stack: Vec<OpId>,
    queued: HashSet<OpId>,
}

impl Worklist {
    fn push(&mut self, op: OpId) {
        if self.queued.insert(op) {
            self.stack.push(op);
        }
    }

    fn pop(&mut self) -> Option<OpId> {
        let op = self.stack.pop()?;
        self.queued.remove(&op);
        Some(op)
    }
}

/// Runs `op`'s rules; when one fires, queues what the rewrite touched (see the module doc).
fn visit(m: &mut Module, op: OpId, work: &mut Worklist) -> Result<bool, PassError> {
    let d = m.op(op);
    // Taken before the rewrite moves the uses; on the stack for the common small op (every op
    // is visited, most rewrite nothing).
    let users: SmallVec<[OpId; 8]> = d.results().iter().flat_map(|&r| m.users(r)).collect();
    let producers: SmallVec<[OpId; 4]> = d.operands().iter().filter_map(|&v| m.defining_op(v)).collect();
    let first_new = m.ops.len();
    if !rewrite(m, op)? {
        return Ok(false);
    }
    // Pushed in reverse so that the stack visits them in this order.
    let created: Vec<OpId> = m.ops.keys().skip(first_new).collect();
    for &o in created.iter().rev().chain(producers.iter().rev()).chain(users.iter().rev()) {
        work.push(o);
    }
    if m.op(op).block().is_some() {
        for &r in m.op(op).results().to_vec().iter() {
            for u in m.users(r).collect::<Vec<_>>() {
                work.push(u);
            }
        }
        work.push(op);
    }
    Ok(true)
}

/// Every attached op of the module, in program order (composite bodies after their op's block).
fn program_order(m: &Module) -> Vec<OpId> {
    all_blocks(m).into_iter().flat_map(|b| m.block_ops(b)).collect()
}

/// Runs the three rule sets to a fixed point; returns whether anything changed.
pub fn canonicalize(m: &mut Module) -> Result<bool, PassError> {
    let mut changed = false;
    let mut work = Worklist::default();
    for op in program_order(m).into_iter().rev() {
        work.push(op);
    }
    while let Some(op) = work.pop() {
        if m.op(op).block().is_some() {
            changed |= visit(m, op, &mut work)?;
        }
    }
    // Debug builds (the tests) confirm the fixed point with one more sweep: the worklist's
    // edges cover every rule, so it must find nothing.
    if cfg!(debug_assertions) {
        for op in program_order(m) {
            if m.op(op).block().is_some() && rewrite(m, op)? {
                panic!("canonicalize: the worklist missed a rewrite of `{}`", m.op(op).opcode().name());
            }
        }
    }
    changed |= crate::util::remove_dead(m);
    Ok(changed)
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        canonicalize(m)
    }
}
