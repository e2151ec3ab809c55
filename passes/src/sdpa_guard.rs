//! `sdpa-guard`: removes the fully-masked-row guard of decomposed attention when the mask
//! leaves every row at least one key.
//!
//! PyTorch's SDPA decomposition (core ATen) zeroes the probabilities of rows whose scores are
//! all `-inf`:
//!
//! ```text
//! p    = softmax(s, d)
//! row  = not(reduce_or(not(s == -inf), d))      (possibly reshaped to keep d as size 1)
//! out  = select(broadcast(row), 0, p)
//! ```
//!
//! Needs: a verified module; the scores `s` are `a + mask` or `select(keep, a, -inf)` where the
//! mask (or `keep`) depends only on constants and iotas (a causal mask does), and `a` (the
//! scaled q·kᵀ) is finite, as it is for finite inputs.
//! Guarantees: when evaluating the mask proves that every row along `d` keeps at least one
//! finite score, no row can be fully masked, the guard is the identity, and `out` is replaced
//! by `p` (the guard's ops are left for `dce`). Unmasked scores (`s` the scaled q·kᵀ itself,
//! as SDPA without `attn_mask` decomposes) keep every entry, so their guard goes too. Masks that
//! depend on inputs, or that do mask a whole row, keep the guard. Changed when a guard was
//! removed.

use crate::eval::eval_f64s;
use crate::util::{all_blocks, def_is, def_op, splat_f64, unary};
use crate::{Pass, PassError};
use std::collections::HashMap;
use tpuc_ir::{payload, Direction, Module, OpId, Opcode, ReduceKind, ValueId};

pub struct SdpaGuard;

/// Elements a mask may have for the proof (a causal mask of 2048 x 2048 fits).
const MASK_LIMIT: i64 = 1 << 22;

/// Looks through `reshape` and `broadcast_in_dim`.
fn strip_shape(m: &Module, mut v: ValueId) -> ValueId {
    while let Some(op) = def_op(m, v) {
        match m.ops[op].opcode() {
            Opcode::Reshape | Opcode::BroadcastInDim => v = m.ops[op].operands()[0],
            _ => break,
        }
    }
    v
}

/// `s != -inf` as the decomposition writes it: `not(s == -inf)` or `s != -inf`.
fn not_neg_inf_of(m: &Module, v: ValueId) -> Option<ValueId> {
    let (cmp, want) = match unary(m, v, Opcode::Not) {
        Some(inner) => (def_is(m, inner, Opcode::Compare)?, Direction::Eq),
        None => (def_is(m, v, Opcode::Compare)?, Direction::Ne),
    };
    let d = &m.ops[cmp];
    if d.payload::<payload::Compare>().direction != want {
        return None;
    }
    let (a, b) = (d.operands()[0], d.operands()[1]);
    if splat_f64(m, b) == Some(f64::NEG_INFINITY) {
        Some(a)
    } else if splat_f64(m, a) == Some(f64::NEG_INFINITY) {
        Some(b)
    } else {
        None
    }
}

/// If `sel` is the guard around `softmax(s, d)`, returns (softmax value, s, d).
fn match_guard(m: &Module, sel: OpId) -> Option<(ValueId, ValueId, i64)> {
    let d = &m.ops[sel];
    if d.opcode() != Opcode::Select {
        return None;
    }
    let (pred, zero, p) = (d.operands()[0], d.operands()[1], d.operands()[2]);
    if splat_f64(m, zero) != Some(0.0) {
        return None;
    }
    let sm = def_is(m, p, Opcode::Softmax)?;
    let dim = m.ops[sm].payload::<payload::Softmax>().dimension;
    let s = m.ops[sm].operands()[0];
    let none_kept = strip_shape(m, pred);
    let any_kept = strip_shape(m, unary(m, none_kept, Opcode::Not)?);
    let red = def_is(m, any_kept, Opcode::Reduce)?;
    let rd = &m.ops[red];
    let reduce = rd.payload::<payload::Reduce>();
    if reduce.kind != ReduceKind::Or || reduce.dimensions != [dim] {
        return None;
    }
    let scores = not_neg_inf_of(m, rd.operands()[0])?;
    (scores == s).then_some((p, s, dim))
}

/// Proofs already made in this run, by (mask value, row dim in it, which test): the layers of a
/// model share one mask after CSE, so each is evaluated once.
type Proofs = HashMap<(ValueId, Option<usize>, Test), bool>;

#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum Test {
    /// Kept where the additive mask is finite.
    Finite,
    /// Kept where the boolean mask is true.
    True,
}

impl Test {
    fn kept(self, v: f64) -> bool {
        match self {
            Test::Finite => v > f64::NEG_INFINITY && !v.is_nan(),
            Test::True => v != 0.0,
        }
    }
}

/// True if every row along result dim `dim` of `mask_bcast` (a broadcast of a computable
/// mask) has an element the test keeps.
fn every_row_keeps(m: &Module, mask_bcast: ValueId, dim: i64, test: Test, proofs: &mut Proofs) -> bool {
    // Follow broadcasts and reshapes back to the computed mask, tracking where `dim` goes.
    let mut v = mask_bcast;
    let mut d = Some(dim as usize);
    loop {
        let Some(op) = def_op(m, v) else { return false };
        let od = &m.ops[op];
        match od.opcode() {
            Opcode::BroadcastInDim => {
                let bd = od.payload::<payload::BroadcastInDim>().broadcast_dimensions;
                d = d.and_then(|d| bd.iter().position(|&x| x == d as i64));
                v = od.operands()[0];
            }
            _ => break,
        }
    }
    *proofs.entry((v, d, test)).or_insert_with(|| row_check(m, v, d, test))
}

fn row_check(m: &Module, v: ValueId, d: Option<usize>, test: Test) -> bool {
    let kept = |x: f64| test.kept(x);
    let Some((dims, vals)) = eval_f64s(m, v, MASK_LIMIT) else { return false };
    match d {
        // The mask does not vary along the row: every element must keep.
        None => vals.iter().all(|&x| kept(x)),
        Some(d) => {
            let n = dims[d] as usize;
            let inner: usize = dims[d + 1..].iter().product::<i64>() as usize;
            let outer: usize = dims[..d].iter().product::<i64>() as usize;
            (0..outer).all(|o| (0..inner).all(|i| (0..n).any(|k| kept(vals[(o * n + k) * inner + i]))))
        }
    }
}

/// Whether the scores `s` provably keep a finite entry in every row along `dim`.
fn rows_never_fully_masked(m: &Module, s: ValueId, dim: i64, proofs: &mut Proofs) -> bool {
    let Some(op) = def_op(m, s) else { return false };
    let d = &m.ops[op];
    match d.opcode() {
        Opcode::Add => d.operands().iter().any(|&x| every_row_keeps(m, x, dim, Test::Finite, proofs)),
        Opcode::Select => {
            splat_f64(m, d.operands()[2]) == Some(f64::NEG_INFINITY)
                && every_row_keeps(m, d.operands()[0], dim, Test::True, proofs)
        }
        _ => unmasked_scores(m, s),
    }
}

/// Whether `s` is q·kᵀ with no mask: a `dot_general`, behind reshapes, converts and products
/// with finite splats (the scale). Finite like its inputs, so no entry is `-inf`.
fn unmasked_scores(m: &Module, mut s: ValueId) -> bool {
    loop {
        let Some(op) = def_op(m, s) else { return false };
        let d = &m.ops[op];
        match d.opcode() {
            Opcode::DotGeneral => return true,
            Opcode::Reshape | Opcode::Convert => s = d.operands()[0],
            Opcode::Mul => {
                let finite = |v: ValueId| splat_f64(m, v).is_some_and(f64::is_finite);
                s = match (finite(d.operands()[0]), finite(d.operands()[1])) {
                    (_, true) => d.operands()[0],
                    (true, false) => d.operands()[1],
                    (false, false) => return false,
                };
            }
            _ => return false,
        }
    }
}

impl Pass for SdpaGuard {
    fn name(&self) -> &'static str {
        crate::PassId::SdpaGuard.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        let mut proofs = Proofs::new();
        for b in all_blocks(m) {
            for op in m.block_ops(b) {
                if m.ops[op].block() != Some(b) {
                    continue;
                }
                let Some((p, s, dim)) = match_guard(m, op) else { continue };
                if rows_never_fully_masked(m, s, dim, &mut proofs) {
                    crate::util::replace_op(m, op, p);
                    changed = true;
                }
            }
        }
        if changed {
            crate::util::remove_dead(m);
        }
        Ok(changed)
    }
}
