//! Property: the op layout and the use lists stay exact under any sequence of edits.
//!
//! A shadow model (a `Vec` of op ids in block order, and each op's operands) is edited alongside
//! the module: inserts before and after arbitrary ops (enough at one spot to force the sequence
//! numbers to be renumbered), detach and re-insert, erasing unused ops, `set_operand`,
//! `replace_all_uses` and `replace_uses_except`. After every edit the block's order, `is_before`,
//! the block length and every value's use list must match the model, and `compact` must keep
//! the printed module.

use proptest::prelude::*;
use std::collections::HashMap;
use tpuc_ir::{ArgInfo, ArgKind, Attrs, BlockId, DType, Module, OpId, Opcode, TensorType, ValueId};

#[derive(Clone, Debug)]
enum Edit {
    /// A new `neg` of value `a`, before op `at` (or after it).
    Insert { a: usize, at: usize, after: bool },
    /// Many new ops before the same op (exhausts the gap between two sequence numbers).
    Burst { a: usize, at: usize, n: u8 },
    /// Detach op `at` and put it back after op `to`.
    Move { at: usize, to: usize },
    /// Erase op `at` if its result is unused.
    Erase { at: usize },
    /// Operand 0 of op `at` := value `v`.
    SetOperand { at: usize, v: usize },
    /// Every use of value `from` := value `to`.
    ReplaceAll { from: usize, to: usize },
    /// Uses of `from` in ops with an even position := `to`.
    ReplaceSome { from: usize, to: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let i = 0usize..1000;
    prop_oneof![
        (i.clone(), i.clone(), any::<bool>()).prop_map(|(a, at, after)| Edit::Insert { a, at, after }),
        (i.clone(), i.clone(), 1u8..40).prop_map(|(a, at, n)| Edit::Burst { a, at, n }),
        (i.clone(), i.clone()).prop_map(|(at, to)| Edit::Move { at, to }),
        i.clone().prop_map(|at| Edit::Erase { at }),
        (i.clone(), i.clone()).prop_map(|(at, v)| Edit::SetOperand { at, v }),
        (i.clone(), i.clone()).prop_map(|(from, to)| Edit::ReplaceAll { from, to }),
        (i.clone(), i).prop_map(|(from, to)| Edit::ReplaceSome { from, to }),
    ]
}

struct World {
    m: Module,
    block: BlockId,
    /// Non-terminator ops in block order.
    order: Vec<OpId>,
    ret: OpId,
    x: ValueId,
}

impl World {
    fn new() -> World {
        let t = TensorType::from_static(DType::F32, &[4]);
        let mut m = Module::new();
        let (_, block) = m.add_func("main", vec![(t, ArgInfo::new(ArgKind::UserInput, "x"))]);
        let x = m.blocks[block].args()[0];
        let ret = m.create_op(Opcode::Return, &[x], Attrs::new(), Some(&[]), &[]).unwrap();
        m.append_op(block, ret);
        World { m, block, order: Vec::new(), ret, x }
    }

    /// Values defined before position `pos` (the argument and earlier results).
    fn values_before(&self, pos: usize) -> Vec<ValueId> {
        std::iter::once(self.x).chain(self.order[..pos].iter().map(|&o| self.m.ops[o].results()[0])).collect()
    }

    fn new_neg(&mut self, pos: usize, a: usize) -> OpId {
        let vals = self.values_before(pos);
        let v = vals[a % vals.len()];
        self.m.create_op(Opcode::Neg, &[v], Attrs::new(), None, &[]).unwrap()
    }

    fn insert_at(&mut self, pos: usize, op: OpId) {
        match self.order.get(pos) {
            Some(&next) => self.m.insert_op_before(next, op),
            None => self.m.insert_op_before(self.ret, op),
        }
        self.order.insert(pos, op);
    }

    /// Positions at or after which `v` is used (the first use), if any.
    fn first_use(&self, v: ValueId) -> Option<usize> {
        self.order.iter().position(|&o| self.m.ops[o].operands().contains(&v))
    }

    fn apply(&mut self, e: &Edit) {
        let n = self.order.len();
        match *e {
            Edit::Insert { a, at, after } => {
                let pos = if n == 0 { 0 } else { at % n + usize::from(after) };
                let op = self.new_neg(pos, a);
                self.insert_at(pos, op);
            }
            Edit::Burst { a, at, n: k } => {
                let pos = if n == 0 { 0 } else { at % n };
                for _ in 0..k {
                    let op = self.new_neg(pos, a);
                    self.insert_at(pos, op);
                }
            }
            Edit::Move { at, to } if n > 1 => {
                // Keep SSA: move an op to just after another position no later than its first
                // user and no earlier than its operand's definition.
                let i = at % n;
                let op = self.order[i];
                let operand = self.m.ops[op].operands()[0];
                let lo = self.order.iter().position(|&o| self.m.ops[o].results()[0] == operand).map_or(0, |p| p + 1);
                let r = self.m.ops[op].results()[0];
                let hi = self.first_use(r).unwrap_or(n);
                self.m.detach_op(op);
                self.order.remove(i);
                let (lo, hi) = (lo.min(self.order.len()), (hi.saturating_sub(1)).min(self.order.len()));
                let pos = if hi > lo { lo + to % (hi - lo + 1) } else { lo };
                self.insert_at(pos.min(hi.max(lo)), op);
            }
            Edit::Move { .. } => {}
            Edit::Erase { at } if n > 0 => {
                let op = self.order[at % n];
                if !self.m.has_uses(self.m.ops[op].results()[0]) {
                    self.m.erase_op(op);
                    self.order.retain(|&o| o != op);
                }
            }
            Edit::Erase { .. } => {}
            Edit::SetOperand { at, v } if n > 0 => {
                let i = at % n;
                let vals = self.values_before(i);
                self.m.set_operand(self.order[i], 0, vals[v % vals.len()]);
            }
            Edit::SetOperand { .. } => {}
            Edit::ReplaceAll { from, to } | Edit::ReplaceSome { from, to } if n > 1 => {
                // `to` must be defined before every use of `from`: take `to` earlier than `from`.
                let (a, b) = (from % n, to % n);
                let (to_pos, from_pos) = (a.min(b), a.max(b));
                if to_pos == from_pos {
                    return;
                }
                let (fv, tv) = (self.m.ops[self.order[from_pos]].results()[0], self.m.ops[self.order[to_pos]].results()[0]);
                if matches!(e, Edit::ReplaceAll { .. }) {
                    self.m.replace_all_uses(fv, tv);
                } else {
                    let even: std::collections::HashSet<OpId> = self.order.iter().step_by(2).copied().collect();
                    self.m.replace_uses_except(fv, tv, |u| !even.contains(&u));
                }
            }
            Edit::ReplaceAll { .. } | Edit::ReplaceSome { .. } => {}
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let mut want = self.order.clone();
        want.push(self.ret);
        let got: Vec<OpId> = self.m.ops_in(self.block).collect();
        prop_assert_eq!(&got, &want);
        let back: Vec<OpId> = self.m.ops_in(self.block).rev().collect();
        prop_assert!(back.iter().rev().eq(want.iter()));
        prop_assert_eq!(self.m.blocks[self.block].len(), want.len());
        for w in want.windows(2) {
            prop_assert!(self.m.is_before(w[0], w[1]) && !self.m.is_before(w[1], w[0]));
            prop_assert_eq!(self.m.next_op(w[0]), Some(w[1]));
            prop_assert_eq!(self.m.prev_op(w[1]), Some(w[0]));
        }
        // Use lists against a recount from the operands.
        let mut uses: HashMap<ValueId, Vec<(OpId, u32)>> = HashMap::new();
        for &op in &want {
            for (i, &v) in self.m.ops[op].operands().iter().enumerate() {
                uses.entry(v).or_default().push((op, i as u32));
            }
        }
        for (v, _) in self.m.values.iter() {
            let mut got: Vec<(OpId, u32)> = self.m.uses(v).iter().map(|u| (u.op, u.index)).collect();
            let mut exp = uses.remove(&v).unwrap_or_default();
            got.sort();
            exp.sort();
            prop_assert_eq!(got, exp, "uses of {}", v);
        }
        prop_assert!(self.m.use_list_errors().is_empty(), "{:?}", self.m.use_list_errors());
        tpuc_ir::verify(&self.m).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let mut c = self.m.clone();
        c.compact();
        prop_assert_eq!(tpuc_ir::print_module(&c), tpuc_ir::print_module(&self.m));
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn layout_and_use_lists_follow_every_edit(edits in prop::collection::vec(edit(), 1..60)) {
        let mut w = World::new();
        w.check()?;
        for e in &edits {
            w.apply(e);
            w.check()?;
        }
    }
}

/// Forty inserts at one spot exhaust the 2^20 gap between two sequence numbers (20 halvings),
/// forcing a renumbering of the block; order and `is_before` survive it.
#[test]
fn inserting_many_ops_at_one_spot_renumbers() {
    let mut w = World::new();
    w.apply(&Edit::Insert { a: 0, at: 0, after: false });
    w.apply(&Edit::Insert { a: 0, at: 0, after: true });
    for _ in 0..40 {
        let op = w.new_neg(1, 0);
        w.insert_at(1, op);
    }
    w.check().unwrap();
}
