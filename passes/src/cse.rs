//! `cse`: common-subexpression elimination.
//!
//! Needs: a verified module.
//! Guarantees: within each block, of two pure, region-free ops with the same opcode, operands
//! (in any order for commutative ops), attributes (floats compared by bits, constants by type
//! and bytes) and result types, the later one is removed and its uses go to the earlier one.
//! Blocks are separate scopes (a composite's region is isolated, so nothing merges across it).
//! Ops are visited in order, so chains of equal ops merge in one run. Changed when an op was
//! merged.

use crate::{Pass, PassError};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use tpuc_ir::opcode::traits::COMMUTATIVE;
use tpuc_ir::{Attr, Attrs, Module, OpId, TensorType, ValueId};

pub struct Cse;

fn attr_eq(a: &Attr, b: &Attr) -> bool {
    match (a, b) {
        (Attr::Float(x), Attr::Float(y)) => x.to_bits() == y.to_bits(),
        (Attr::Tensor(x), Attr::Tensor(y)) => {
            x.ty == y.ty && x.is_splat() == y.is_splat() && (x.raw_bytes().as_ptr() == y.raw_bytes().as_ptr() && x.raw_bytes().len() == y.raw_bytes().len() || x.raw_bytes() == y.raw_bytes())
        }
        _ => a == b,
    }
}

fn attrs_eq(a: &Attrs, b: &Attrs) -> bool {
    a.len() == b.len() && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| ka == kb && attr_eq(va, vb))
}

fn hash_attrs(a: &Attrs, h: &mut impl Hasher) {
    for (k, v) in a.iter() {
        k.hash(h);
        match v {
            Attr::Bool(b) => b.hash(h),
            Attr::Int(i) => i.hash(h),
            Attr::Float(f) => f.to_bits().hash(h),
            Attr::Str(s) => s.hash(h),
            Attr::Ints(v) => v.hash(h),
            Attr::DType(d) => d.hash(h),
            Attr::Tensor(t) => {
                t.ty.hash(h);
                t.is_splat().hash(h);
                let b = t.raw_bytes();
                b.len().hash(h);
                b[..b.len().min(64)].hash(h);
                b[b.len().saturating_sub(64)..].hash(h);
            }
        }
    }
}

/// The operands in a canonical order (sorted for commutative ops), without allocating.
fn operands_key(m: &Module, op: OpId) -> SmallVec<[ValueId; 4]> {
    let d = &m.ops[op];
    let mut ops: SmallVec<[ValueId; 4]> = d.operands().iter().copied().collect();
    if d.opcode().has_trait(COMMUTATIVE) {
        ops.sort();
    }
    ops
}

fn result_types(m: &Module, op: OpId) -> impl Iterator<Item = &TensorType> + '_ {
    m.ops[op].results().iter().map(|&r| &m.values[r].ty)
}

fn same(m: &Module, a: OpId, b: OpId) -> bool {
    let (da, db) = (&m.ops[a], &m.ops[b]);
    da.opcode() == db.opcode()
        && operands_key(m, a) == operands_key(m, b)
        && result_types(m, a).eq(result_types(m, b))
        && attrs_eq(&da.attrs, &db.attrs)
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        crate::PassId::Cse.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for b in crate::util::all_blocks(m) {
            let mut seen: HashMap<u64, SmallVec<[OpId; 1]>> = HashMap::new();
            for op in m.block_ops(b) {
                let d = &m.ops[op];
                if !d.opcode().is_pure() || d.opcode().is_terminator() || !d.regions().is_empty() || d.results().is_empty() {
                    continue;
                }
                let mut h = std::collections::hash_map::DefaultHasher::new();
                d.opcode().hash(&mut h);
                operands_key(m, op).hash(&mut h);
                for t in result_types(m, op) {
                    t.hash(&mut h);
                }
                hash_attrs(&d.attrs, &mut h);
                let hash = h.finish();
                let bucket = seen.entry(hash).or_default();
                if let Some(&keep) = bucket.iter().find(|&&k| same(m, k, op)) {
                    let pairs: Vec<(ValueId, ValueId)> =
                        m.ops[op].results().iter().copied().zip(m.ops[keep].results().iter().copied()).collect();
                    for (from, to) in pairs {
                        m.replace_all_uses(from, to);
                    }
                    m.erase_op(op);
                    changed = true;
                } else {
                    bucket.push(op);
                }
            }
        }
        Ok(changed)
    }
}
