//! `diagonal` (`diagonal_copy`) and `diagonal_scatter`.
//!
//! The two dims move last and are flattened to one of n·m elements; the diagonal at `offset`
//! is then every (m+1)-th element from `start` (column `offset` of row 0, or row `-offset` of
//! column 0): a strided slice. Scattering back pads the source with m zeros between elements
//! (interior padding) to the same positions and selects it there. Both dims must be static.

use crate::ops::build::*;

struct Plan {
    /// The operand with the two dims moved last and flattened: `batch ++ [n·m]`.
    flat: ValueId,
    /// The permutation that moved them (identity when they were already last, in order).
    perm: Vec<i64>,
    batch: Vec<Dim>,
    n: i64,
    m: i64,
    /// Length of the diagonal, and flat index of its first element.
    len: i64,
    start: i64,
}

fn plan(cx: &mut Ctx, x: ValueId) -> R<Plan> {
    let rank = cx.rank(x);
    if rank < 2 {
        return err(format!("diagonal needs at least 2 dims, got {rank}"));
    }
    let offset = cx.int("offset")?;
    let d1 = norm_dim(cx.int("dim1")?, rank)?;
    let d2 = norm_dim(cx.int("dim2")?, rank)?;
    if d1 == d2 {
        return err(format!("diagonal dims cannot be equal (both {d1})"));
    }
    let dims = cx.dims(x);
    let (Dim::Static(n), Dim::Static(m)) = (&dims[d1], &dims[d2]) else {
        return err("diagonal of symbolic dims is not supported");
    };
    let (n, m) = (*n, *m);
    let mut perm: Vec<i64> = (0..rank as i64).filter(|&d| d != d1 as i64 && d != d2 as i64).collect();
    perm.extend([d1 as i64, d2 as i64]);
    let batch: Vec<Dim> = perm[..rank - 2].iter().map(|&d| dims[d as usize].clone()).collect();
    let moved = if perm.iter().enumerate().all(|(i, &p)| p == i as i64) { x } else { cx.transpose(x, &perm)? };
    let mut flat_dims = batch.clone();
    flat_dims.push(Dim::Static(n * m));
    let flat = cx.reshape(moved, flat_dims)?;
    let (len, start) =
        if offset >= 0 { ((m - offset).min(n).max(0), offset) } else { ((n + offset).min(m).max(0), -offset * m) };
    Ok(Plan { flat, perm, batch, n, m, len, start })
}

pub(super) fn diagonal(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = plan(cx, x)?;
    let last = p.batch.len();
    let mut start = vec![0i64; last + 1];
    let mut limit: Vec<i64> = cx.static_dims(p.flat, "diagonal")?;
    let mut strides = vec![1i64; last + 1];
    if p.len == 0 {
        limit[last] = 0;
    } else {
        start[last] = p.start;
        limit[last] = p.start + (p.len - 1) * (p.m + 1) + 1;
        strides[last] = p.m + 1;
    }
    one(cx.b.slice(p.flat, &start, &limit, &strides)?)
}

pub(super) fn diagonal_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let p = plan(cx, x)?;
    if p.len == 0 {
        return one(x);
    }
    let mut want = p.batch.clone();
    want.push(Dim::Static(p.len));
    if cx.dims(src) != want {
        return err(format!("diagonal_scatter: src has shape {}, the diagonal {}", fmt_dims(&cx.dims(src)), fmt_dims(&want)));
    }
    let src = if cx.dtype(src) != cx.dtype(x) { cx.convert(src, cx.dtype(x))? } else { src };
    let last = p.batch.len();
    let total = p.n * p.m;
    let end = p.start + (p.len - 1) * (p.m + 1) + 1;
    let mut low = vec![0i64; last + 1];
    let mut high = vec![0i64; last + 1];
    let mut interior = vec![0i64; last + 1];
    low[last] = p.start;
    high[last] = total - end;
    interior[last] = p.m;
    let zero = cx.scalar(Scalar::Int(0), cx.dtype(x))?;
    let placed = cx.b.pad(src, zero, &low, &high, &interior)?;
    // Where the diagonal is: ones padded the same way.
    let ones = cx.full(Scalar::Bool(true), DType::Bool, &[Dim::Static(p.len)])?;
    let no = cx.scalar(Scalar::Bool(false), DType::Bool)?;
    let on_diag = cx.b.pad(ones, no, &[p.start], &[total - end], &[p.m])?;
    let flat_dims = cx.dims(p.flat);
    let mask = cx.b.broadcast_in_dim(on_diag, &[last as i64], flat_dims)?;
    let out = cx.select(mask, placed, p.flat)?;
    let mut moved_dims = p.batch.clone();
    moved_dims.extend([Dim::Static(p.n), Dim::Static(p.m)]);
    let out = cx.reshape(out, moved_dims)?;
    if p.perm.iter().enumerate().all(|(i, &q)| q == i as i64) {
        return one(out);
    }
    let mut inv = vec![0i64; p.perm.len()];
    for (i, &q) in p.perm.iter().enumerate() {
        inv[q as usize] = i as i64;
    }
    one(cx.transpose(out, &inv)?)
}
