//! Pairwise distances and trilinear products: `_cdist_forward`, `_pdist_forward`, `_trilinear`.
//!
//! Distances are computed from the differences, [..., P, R, M] (the exact form; ATen's CPU
//! kernel may use a matrix-product form for p = 2, which rounds differently), as p-norms:
//! p = 0 counts nonzero differences, p = ∞ takes the largest, others (Σ|d|^p)^(1/p).

use crate::ops::build::*;
use unsqueeze_v;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("_cdist_forward.default", cdist),
    ("_pdist_forward.default", pdist),
    ("_trilinear.default", trilinear),
];

/// p-norm over the last dim of `d`.
fn pnorm_last(cx: &mut Ctx, d: ValueId, p: f64) -> R<ValueId> {
    let last = cx.rank(d) - 1;
    let a = cx.un(O::Abs, d)?;
    if p == 0.0 {
        let zero = cx.full_like(Scalar::Float(0.0), a)?;
        let nz = cx.cmp(Direction::Ne, a, zero)?;
        let c = cx.convert(nz, cx.dtype(d))?;
        return cx.reduce(c, ReduceKind::Sum, &[last], false);
    }
    if p.is_infinite() {
        return cx.reduce(a, ReduceKind::Max, &[last], false);
    }
    if p == 1.0 {
        return cx.reduce(a, ReduceKind::Sum, &[last], false);
    }
    if p == 2.0 {
        let sq = cx.bin(O::Mul, a, a)?;
        let s = cx.reduce(sq, ReduceKind::Sum, &[last], false)?;
        return cx.un(O::Sqrt, s);
    }
    let pw = cx.full_like(Scalar::Float(p), a)?;
    let t = cx.bin(O::Pow, a, pw)?;
    let s = cx.reduce(t, ReduceKind::Sum, &[last], false)?;
    let inv = cx.full_like(Scalar::Float(1.0 / p), s)?;
    cx.bin(O::Pow, s, inv)
}

fn check_p(p: f64) -> R<()> {
    if p < 0.0 || p.is_nan() {
        return err(format!("distance p must be non-negative, got {p}"));
    }
    Ok(())
}

/// Distances between the rows of x1 [..., P, M] and x2 [..., R, M]: [..., P, R].
fn cdist_v(cx: &mut Ctx, x1: ValueId, x2: ValueId, p: f64) -> R<ValueId> {
    let (r1, r2) = (cx.rank(x1), cx.rank(x2));
    if r1 < 2 || r2 < 2 || cx.dims(x1)[r1 - 1] != cx.dims(x2)[r2 - 1] {
        return err(format!("cdist needs [..., P, M] and [..., R, M], got {} and {}", cx.ty(x1), cx.ty(x2)));
    }
    let a = unsqueeze_v(cx, x1, r1 as i64 - 1)?; // [..., P, 1, M]
    let b = unsqueeze_v(cx, x2, r2 as i64 - 2)?; // [..., 1, R, M]
    let shape = tpuc_ir::infer::broadcast_shapes(&cx.dims(a), &cx.dims(b))?;
    let a = cx.broadcast_to(a, &shape)?;
    let b = cx.broadcast_to(b, &shape)?;
    let d = cx.bin(O::Sub, a, b)?;
    pnorm_last(cx, d, p)
}

fn cdist(cx: &mut Ctx) -> R<Vec<Val>> {
    let x1 = cx.t("x1")?;
    let x2 = cx.t("x2")?;
    let p = cx.float("p")?;
    check_p(p)?;
    let dt = cx.result_type(&[Operand::T(x1), Operand::T(x2)])?;
    if !dt.is_float() {
        return err(format!("cdist needs floating-point inputs, got {}", dt.name()));
    }
    let (x1, x2) = (cx.convert(x1, dt)?, cx.convert(x2, dt)?);
    one(cdist_v(cx, x1, x2, p)?)
}

/// The distances of the pairs i < j of the rows of x [N, M], in row-major order.
fn pdist(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.float("p")?;
    check_p(p)?;
    if cx.rank(x) != 2 || !cx.dtype(x).is_float() {
        return err(format!("pdist needs a float [N, M] tensor, got {}", cx.ty(x)));
    }
    let Some(n) = cx.dims(x)[0].as_static() else { return err("pdist needs a static number of rows") };
    let pairs: Vec<i64> = (0..n).flat_map(|i| (i + 1..n).map(move |j| i * n + j)).collect();
    table_size(&[pairs.len() as i64], "pdist pair table")?;
    let full = cdist_v(cx, x, x, p)?;
    let flat = cx.reshape(full, vec![Dim::Static(n * n)])?;
    if pairs.is_empty() {
        return one(cx.full(Scalar::Float(0.0), cx.dtype(x), &[Dim::Static(0)])?);
    }
    let idx = cx.const_i64(&[pairs.len() as i64], &pairs)?;
    one(take_along(cx, flat, 0, idx)?)
}

/// Σ over `sumdim` of i1·i2·i3, each first unsqueezed at its `expand` positions.
fn trilinear(cx: &mut Ctx) -> R<Vec<Val>> {
    let mut xs = Vec::new();
    for (t, e) in [("i1", "expand1"), ("i2", "expand2"), ("i3", "expand3")] {
        let mut v = cx.t(t)?;
        let mut exp = cx.ints(e)?;
        exp.sort_unstable();
        for d in exp {
            v = unsqueeze_v(cx, v, d)?;
        }
        xs.push(v);
    }
    let dt = cx.result_type(&xs.iter().map(|&v| Operand::T(v)).collect::<Vec<_>>())?;
    // Products and their sum in the compute dtype (f32 for 16-bit floats), rounded once, as
    // eager's matmul-based kernel accumulates; rounding each product in f16 drifts by ulps.
    let ct = dtypes::compute_dtype(dt);
    let mut shape = Vec::new();
    for &v in &xs {
        shape = tpuc_ir::infer::broadcast_shapes(&shape, &cx.dims(v))?;
    }
    let mut prod: Option<ValueId> = None;
    for v in xs {
        let v = cx.convert(v, ct)?;
        let v = cx.broadcast_to(v, &shape)?;
        prod = Some(match prod {
            Some(p) => cx.bin(O::Mul, p, v)?,
            None => v,
        });
    }
    let prod = prod.ok_or("no operands")?;
    let r = shape.len();
    let mut sum: Vec<usize> = cx.ints("sumdim")?.into_iter().map(|d| norm_dim(d, r)).collect::<R<_>>()?;
    sum.sort_unstable();
    sum.dedup();
    let out = if sum.is_empty() { prod } else { cx.reduce(prod, ReduceKind::Sum, &sum, false)? };
    one(cx.convert(out, dt)?)
}
