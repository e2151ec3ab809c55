//! Linear-algebra builders the solvers share: identity, diagonal, batched transpose and
//! broadcasting, triangular solves, checks that a matrix is square and float, and the index of
//! a batch's first failure.

use super::ctx::*;
use super::shape::*;
use tpuc_ir::Opcode as O;

/// The identity matrices of `dims` [..., n, n] in `dtype`.
pub fn identity_matrix(cx: &mut Ctx, dims: &[Dim], dtype: DType) -> R<ValueId> {
    let r = dims.len();
    let i = cx.iota(DType::I64, dims, r - 2)?;
    let j = cx.iota(DType::I64, dims, r - 1)?;
    let on = cx.cmp(Direction::Eq, i, j)?;
    cx.convert(on, dtype)
}

/// The diagonal [..., min(m, n)] of `a` [..., m, n].
pub fn diagonal(cx: &mut Ctx, a: ValueId) -> R<ValueId> {
    let dims = cx.dims(a);
    let r = dims.len();
    let (m, n) = (dims[r - 2].as_static().unwrap_or(0), dims[r - 1].as_static().unwrap_or(0));
    let sq = slice_static(cx, a, r - 1, 0, m.min(n), 1)?;
    let sq = slice_static(cx, sq, r - 2, 0, m.min(n), 1)?;
    let sd = cx.dims(sq);
    let i = cx.iota(DType::I64, &sd, r - 2)?;
    let j = cx.iota(DType::I64, &sd, r - 1)?;
    let on = cx.cmp(Direction::Eq, i, j)?;
    let zero = cx.full_like(Scalar::Float(0.0), sq)?;
    let d = cx.select(on, sq, zero)?;
    cx.reduce(d, ReduceKind::Sum, &[r - 1], false)
}

/// Swaps the trailing two dims.
pub fn mt(cx: &mut Ctx, a: ValueId) -> R<ValueId> {
    let r = cx.rank(a) as i64;
    if r < 2 {
        return err(format!("expected a matrix stack [..., m, n], got {}", cx.ty(a)));
    }
    let mut p: Vec<i64> = (0..r).collect();
    p.swap(r as usize - 1, r as usize - 2);
    cx.transpose(a, &p)
}

/// `a` and `b` with their batch dims broadcast to a common shape (matrix dims kept).
pub fn broadcast_batch(cx: &mut Ctx, a: ValueId, b: ValueId) -> R<(ValueId, ValueId)> {
    let (da, db) = (cx.dims(a), cx.dims(b));
    if da.len() < 2 || db.len() < 2 {
        return err(format!("expected two matrix stacks [..., m, n], got {} and {}", cx.ty(a), cx.ty(b)));
    }
    let (ba, bb) = (&da[..da.len() - 2], &db[..db.len() - 2]);
    let batch = tpuc_ir::infer::broadcast_shapes(ba, bb)?;
    let grow = |cx: &mut Ctx, v: ValueId, d: &[Dim]| -> R<ValueId> {
        let mut full = batch.clone();
        full.extend_from_slice(&d[d.len() - 2..]);
        if full == d {
            return Ok(v);
        }
        cx.broadcast_to(v, &full)
    };
    Ok((grow(cx, a, &da)?, grow(cx, b, &db)?))
}

/// Flags: left_side, lower, unit_diagonal, transpose_a.
pub fn tri_solve(cx: &mut Ctx, a: ValueId, b: ValueId, flags: [bool; 4]) -> R<ValueId> {
    let [left, lower, unit, transpose] = flags;
    let attrs = Attrs::new()
        .with("left_side", Attr::Bool(left))
        .with("lower", Attr::Bool(lower))
        .with("unit_diagonal", Attr::Bool(unit))
        .with("transpose_a", Attr::Bool(transpose));
    Ok(cx.b.build1(O::TriangularSolve, &[a, b], attrs, None)?)
}

/// LAPACK's `info` from per-step success flags `good` [..., k]: 0 when every step succeeded,
/// else the 1-based number of the first that failed (int32 [...]).
pub fn first_failure(cx: &mut Ctx, good: ValueId) -> R<ValueId> {
    let gd = cx.dims(good);
    let last = gd.len() - 1;
    let k = gd[last].as_static().unwrap_or(0);
    let order = cx.iota(DType::I32, &gd, last)?;
    let order = cx.bin_c(O::Add, order, 1.0)?;
    let none = cx.full_like(Scalar::Int(k + 1), order)?;
    let first = cx.select(good, none, order)?;
    let first = cx.reduce(first, ReduceKind::Min, &[last], false)?;
    let big = cx.full_like(Scalar::Int(k + 1), first)?;
    let ok = cx.cmp(Direction::Eq, first, big)?;
    let zero = cx.full_like(Scalar::Int(0), first)?;
    cx.select(ok, zero, first)
}

/// Checks `a` is a float matrix stack [..., m, n] of static matrix dims; returns (m, n).
pub fn float_matrix(cx: &Ctx, a: ValueId, what: &str) -> R<(i64, i64)> {
    let d = cx.dims(a);
    let r = d.len();
    if r < 2 || !cx.dtype(a).is_float() {
        return err(format!("{what} needs float matrices [..., m, n], got {}", cx.ty(a)));
    }
    match (d[r - 2].as_static(), d[r - 1].as_static()) {
        (Some(m), Some(n)) => Ok((m, n)),
        _ => err(format!("{what} needs matrices of static size, got {}", cx.ty(a))),
    }
}

/// Checks `a` is a float matrix stack [..., n, n] of static matrix dims; returns n.
pub fn square_matrix(cx: &Ctx, a: ValueId, what: &str) -> R<i64> {
    let (m, n) = float_matrix(cx, a, what)?;
    if m != n {
        return err(format!("{what} needs square matrices, got {}", cx.ty(a)));
    }
    Ok(n)
}
