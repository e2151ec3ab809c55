//! `collapse-shapes`: chains of reshapes, transposes and broadcasts become one op.
//!
//! Needs: a verified module with static shapes where a rule looks at sizes (rules skip
//! symbolic dims they cannot reason about).
//! Guarantees (each rewrite computes exactly the same elements):
//! - `reshape(reshape x)` → `reshape x` (or `x` when the shape is back);
//! - `transpose(transpose x)` → one `transpose` by the composed permutation (or `x`);
//! - a `transpose` that keeps the order of the non-unit dims → `reshape` (a bitcast for XLA);
//! - `broadcast_in_dim(broadcast_in_dim x)` → one `broadcast_in_dim` (how `expand` of an
//!   `unsqueeze`d or already expanded value ends up as one broadcast);
//! - `broadcast_in_dim(reshape x)` where the reshape only adds or drops unit dims and `x` has
//!   none → `broadcast_in_dim x`;
//! - `reshape` or `transpose` of a broadcast scalar → a broadcast of the scalar, and a
//!   `transpose` of any broadcast whose dims stay in order → one `broadcast_in_dim`;
//! - `dot_general(x, broadcast_in_dim(w))` batched only over dims the broadcast added (a
//!   `bmm` with an expanded weight) → a plain `dot_general(x, w)` with the same result.
//!
//! Changed when a rule fired; bypassed ops are left for `dce`.

use crate::util::{def_is, Inserter};
use crate::{Pass, PassError};
use tpuc_ir::{payload, Attrs, Dim, Module, OpId, Opcode, ValueId};

pub struct CollapseShapes;

fn increasing(v: &[i64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

/// The non-unit dims of a shape with their positions.
fn non_unit(dims: &[Dim]) -> Vec<(usize, &Dim)> {
    dims.iter().enumerate().filter(|(_, d)| !d.is_one()).collect()
}

enum Rewrite {
    Value(ValueId),
    New(Opcode, ValueId, Attrs),
}

fn rule(m: &Module, op: OpId) -> Option<Rewrite> {
    use Opcode::*;
    let d = &m.ops[op];
    let x = *d.operands().first()?;
    let rt = &m.values[*d.results().first()?].ty;
    match d.opcode() {
        Reshape => {
            if let Some(inner) = def_is(m, x, Reshape) {
                let y = m.ops[inner].operands()[0];
                return Some(if m.values[y].ty == *rt { Rewrite::Value(y) } else { Rewrite::New(Reshape, y, Attrs::new()) });
            }
            if let Some(b) = def_is(m, x, BroadcastInDim) {
                let s = m.ops[b].operands()[0];
                if m.values[s].ty.rank() == 0 {
                    return Some(Rewrite::New(BroadcastInDim, s, payload::BroadcastInDim { broadcast_dimensions: &[] }.attrs()));
                }
            }
            None
        }
        Transpose => {
            let p = d.payload::<payload::Transpose>().permutation;
            if p.iter().enumerate().all(|(i, &v)| v == i as i64) {
                return Some(Rewrite::Value(x));
            }
            if let Some(inner) = def_is(m, x, Transpose) {
                let p1 = m.ops[inner].payload::<payload::Transpose>().permutation;
                let y = m.ops[inner].operands()[0];
                let q: Vec<i64> = p.iter().map(|&i| p1[i as usize]).collect();
                if q.iter().enumerate().all(|(i, &v)| v == i as i64) {
                    return Some(Rewrite::Value(y));
                }
                return Some(Rewrite::New(Transpose, y, payload::Transpose { permutation: &q }.attrs()));
            }
            if let Some(b) = def_is(m, x, BroadcastInDim) {
                let s = m.ops[b].operands()[0];
                let bd = m.ops[b].payload::<payload::BroadcastInDim>().broadcast_dimensions;
                let mut pinv = vec![0i64; p.len()];
                for (i, &src) in p.iter().enumerate() {
                    pinv[src as usize] = i as i64;
                }
                let nd: Vec<i64> = bd.iter().map(|&j| pinv[j as usize]).collect();
                if increasing(&nd) {
                    return Some(Rewrite::New(BroadcastInDim, s, payload::BroadcastInDim { broadcast_dimensions: &nd }.attrs()));
                }
            }
            // Only unit dims move: the same elements in the same order.
            let xd = &m.values[x].ty.dims;
            let order: Vec<i64> = p.iter().copied().filter(|&i| !xd[i as usize].is_one()).collect();
            if increasing(&order) {
                return Some(Rewrite::New(Reshape, x, Attrs::new()));
            }
            None
        }
        BroadcastInDim => {
            let bd = d.payload::<payload::BroadcastInDim>().broadcast_dimensions;
            if let Some(inner) = def_is(m, x, BroadcastInDim) {
                let y = m.ops[inner].operands()[0];
                let bd1 = m.ops[inner].payload::<payload::BroadcastInDim>().broadcast_dimensions;
                let nd: Vec<i64> = bd1.iter().map(|&j| bd[j as usize]).collect();
                return Some(Rewrite::New(BroadcastInDim, y, payload::BroadcastInDim { broadcast_dimensions: &nd }.attrs()));
            }
            if let Some(inner) = def_is(m, x, Reshape) {
                let y = m.ops[inner].operands()[0];
                let (yd, xd) = (&m.values[y].ty.dims, &m.values[x].ty.dims);
                if yd.iter().any(|d| d.is_one()) {
                    return None;
                }
                let (ny, nx) = (non_unit(yd), non_unit(xd));
                if ny.len() != nx.len() || ny.iter().zip(&nx).any(|(a, b)| a.1 != b.1) {
                    return None;
                }
                let nd: Vec<i64> = nx.iter().map(|(j, _)| bd[*j]).collect();
                if increasing(&nd) {
                    return Some(Rewrite::New(BroadcastInDim, y, payload::BroadcastInDim { broadcast_dimensions: &nd }.attrs()));
                }
            }
            None
        }
        _ => None,
    }
}

/// `dot_general(x, broadcast_in_dim(w))` whose batch dims exist only because `w` was
/// broadcast (and are `x`'s leading dims): the same product as a plain dot of `x` and `w`
/// with the batch dims as free lhs dims. Returns the new rhs contracting dims.
fn unbroadcast_dot_rhs(m: &Module, op: OpId) -> Option<(ValueId, Vec<i64>)> {
    let d = &m.ops[op];
    let rhs = d.operands()[1];
    let b = def_is(m, rhs, Opcode::BroadcastInDim)?;
    let w = m.ops[b].operands()[0];
    let bd = m.ops[b].payload::<payload::BroadcastInDim>().broadcast_dimensions;
    let dot = d.payload::<payload::DotGeneral>();
    let (lb, rb, rc) = (dot.lhs_batching_dimensions, dot.rhs_batching_dimensions, dot.rhs_contracting_dimensions);
    if lb.is_empty() || !increasing(bd) || lb.iter().enumerate().any(|(i, &x)| x != i as i64) {
        return None;
    }
    let (wd, rd) = (&m.values[w].ty.dims, &m.values[rhs].ty.dims);
    // Every dim of w keeps its size (no stretching), and the added dims are exactly the batch.
    if bd.iter().enumerate().any(|(i, &j)| wd[i] != rd[j as usize]) {
        return None;
    }
    let mut added: Vec<i64> = (0..rd.len() as i64).filter(|j| !bd.contains(j)).collect();
    let mut batch = rb.to_vec();
    added.sort();
    batch.sort();
    if added != batch {
        return None;
    }
    let nc: Vec<i64> = rc.iter().map(|c| bd.iter().position(|x| x == c).map(|i| i as i64)).collect::<Option<_>>()?;
    Some((w, nc))
}

/// Applies the first rule that fits `op`; returns whether one did.
pub fn collapse_op(m: &mut Module, op: OpId) -> Result<bool, PassError> {
    if m.ops[op].opcode() == Opcode::DotGeneral {
        let Some((w, nc)) = unbroadcast_dot_rhs(m, op) else { return Ok(false) };
        m.set_operand(op, 1, w);
        let d = &mut m.ops[op];
        let unbatched = payload::DotGeneral {
            lhs_batching_dimensions: &[],
            rhs_batching_dimensions: &[],
            rhs_contracting_dimensions: &nc,
            ..d.payload()
        };
        let attrs = unbatched.attrs();
        d.attrs.update(attrs);
        return Ok(true);
    }
    let Some(rw) = rule(m, op) else { return Ok(false) };
    let v = match rw {
        Rewrite::Value(v) => v,
        Rewrite::New(opcode, x, attrs) => {
            let rt = m.values[m.ops[op].results()[0]].ty.clone();
            let given = if opcode == Opcode::Transpose { None } else { Some(rt) };
            Inserter::before(m, op).build1(opcode, &[x], attrs, given).map_err(|e| crate::failed(crate::PassId::CollapseShapes.name(), e))?
        }
    };
    crate::util::replace_op(m, op, v);
    Ok(true)
}

impl crate::rewrite::Rule for CollapseShapes {
    fn name(&self) -> &'static str {
        crate::PassId::CollapseShapes.name()
    }

    fn apply(&self, m: &mut Module, op: OpId) -> Result<bool, PassError> {
        collapse_op(m, op)
    }
}

impl Pass for CollapseShapes {
    fn name(&self) -> &'static str {
        crate::PassId::CollapseShapes.name()
    }

    fn run(&self, m: &mut Module) -> Result<bool, PassError> {
        crate::rewrite::sweep(m, &[self])
    }
}
