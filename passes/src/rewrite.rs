//! Rewrite rules and the two drivers that apply them: one sweep in program order (the
//! `fold-constants`, `fold-trivial` and `collapse-shapes` passes) and a worklist to a fixed point
//! (`canonicalize`).
//!
//! A [`Rule`] looks at one op and its operands' producers and, when it matches, replaces the op
//! (through [`crate::util::replace_op`] or by editing it in place). The worklist relies on that
//! locality, as MLIR's greedy rewriter does: after a rule fires on an op, only the op itself
//! (when it survives), the ops that used its results, the ops defining its operands and the ops
//! the rule created can have a new match; debug builds (the tests) confirm the fixed point with
//! one more sweep, which must find nothing.

use crate::util::all_blocks;
use crate::PassError;
use smallvec::SmallVec;
use std::collections::HashSet;
use tpuc_ir::{Module, OpId};

/// One rewrite rule set.
pub trait Rule {
    /// The pass the rules belong to (for messages).
    fn name(&self) -> &'static str;
    /// Rewrites `op` (attached to a block) when a rule matches; returns whether one did.
    fn apply(&self, m: &mut Module, op: OpId) -> Result<bool, PassError>;
}

/// The first of `rules` that rewrites `op`; whether one did.
fn apply_first(rules: &[&dyn Rule], m: &mut Module, op: OpId) -> Result<bool, PassError> {
    for r in rules {
        if r.apply(m, op)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every attached op of the module, in program order (composite bodies after their op's block).
fn program_order(m: &Module) -> Vec<OpId> {
    all_blocks(m).into_iter().flat_map(|b| m.block_ops(b)).collect()
}

/// Applies `rules` to every op once, in program order (an op a rewrite detached is skipped);
/// returns whether any fired.
pub fn sweep(m: &mut Module, rules: &[&dyn Rule]) -> Result<bool, PassError> {
    let mut changed = false;
    for b in all_blocks(m) {
        for op in m.block_ops(b) {
            if m.op(op).block() == Some(b) {
                changed |= apply_first(rules, m, op)?;
            }
        }
    }
    Ok(changed)
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

/// Runs `rules` on `op`; when one fires, queues what the rewrite touched (see the module doc).
fn visit(rules: &[&dyn Rule], m: &mut Module, op: OpId, work: &mut Worklist) -> Result<bool, PassError> {
    let d = m.op(op);
    // Taken before the rewrite moves the uses; on the stack for the common small op (every op
    // is visited, most rewrite nothing).
    let users: SmallVec<[OpId; 8]> = d.results().iter().flat_map(|&r| m.users(r)).collect();
    let producers: SmallVec<[OpId; 4]> = d.operands().iter().filter_map(|&v| m.defining_op(v)).collect();
    let first_new = m.ops.len();
    if !apply_first(rules, m, op)? {
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

/// Applies `rules` until none fires anywhere: every op once in program order, then only the ops
/// a rewrite can have given a new match. Returns whether any fired.
pub fn fixed_point(m: &mut Module, rules: &[&dyn Rule]) -> Result<bool, PassError> {
    let mut changed = false;
    let mut work = Worklist::default();
    for op in program_order(m).into_iter().rev() {
        work.push(op);
    }
    while let Some(op) = work.pop() {
        if m.op(op).block().is_some() {
            changed |= visit(rules, m, op, &mut work)?;
        }
    }
    if cfg!(debug_assertions) {
        for op in program_order(m) {
            if m.op(op).block().is_some() && apply_first(rules, m, op)? {
                let names: Vec<&str> = rules.iter().map(|r| r.name()).collect();
                panic!("{}: the worklist missed a rewrite of `{}`", names.join("+"), m.op(op).opcode().name());
            }
        }
    }
    Ok(changed)
}
