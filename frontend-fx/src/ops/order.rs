//! Order statistics by sorting: `median`, `nanmedian`, `kthvalue` and `mode`.
//!
//! Each sorts along the dim (NaN sorts last, as in ATen) and reads one position per row from
//! the sorted values and their source indices (`torch.gather` semantics):
//! - median: the lower median, position (n-1)/2; a row with a NaN gives NaN (the first NaN);
//! - nanmedian: the lower median of the row's non-NaN values, position (k-1)/2 of k;
//! - kthvalue: position k-1;
//! - mode: the most frequent value, the smallest on ties. In the sorted row, the length of the
//!   run ending at i is i - (start of that run) + 1, the start being a running maximum of the
//!   positions where a run starts; the first position reaching the longest run is the mode.
//!
//! The index outputs point at an element holding the value; which one, when several do, is
//! not specified (as in ATen).
//!
//! Searching a sorted sequence (`searchsorted`, `bucketize`) counts, for each value, the
//! elements of its row below it (or at most it, for `right`).

use gather_along;
use sort_v;
use crate::ops::build::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("median.default", median_all),
    ("median.dim", median_dim),
    ("nanmedian.default", nanmedian_all),
    ("nanmedian.dim", nanmedian_dim),
    ("kthvalue.default", kthvalue),
    ("mode.default", mode),
    ("searchsorted.Tensor", searchsorted),
    ("searchsorted.Scalar", searchsorted),
    ("bucketize.Tensor", bucketize),
    ("bucketize.Scalar", bucketize),
];

/// `x` along `dim` at one position per row: `pos` has `x`'s shape with `dim` of size 1.
fn pick(cx: &mut Ctx, x: ValueId, dim: usize, pos: ValueId) -> R<ValueId> {
    gather_along(cx, x, pos, dim)
}

/// The values and indices of `x` at `pos` (per row, along `dim`) of the sorted rows, with
/// `dim` kept (size 1) or dropped.
fn sorted_at(cx: &mut Ctx, sorted: (ValueId, ValueId), dim: usize, pos: ValueId, keep: bool) -> R<Vec<Val>> {
    let v = pick(cx, sorted.0, dim, pos)?;
    let i = pick(cx, sorted.1, dim, pos)?;
    if keep {
        return Ok(vec![Val::Tensor(v), Val::Tensor(i)]);
    }
    let mut dims = cx.dims(v);
    dims.remove(dim);
    let v = cx.reshape(v, dims.clone())?;
    let i = cx.reshape(i, dims)?;
    Ok(vec![Val::Tensor(v), Val::Tensor(i)])
}

/// The operand and its dim, a rank-0 operand seen as [1].
fn operand(cx: &mut Ctx) -> R<(ValueId, usize, bool)> {
    let x = cx.t("self")?;
    let scalar = cx.rank(x) == 0;
    let x = if scalar { cx.reshape(x, vec![Dim::Static(1)])? } else { x };
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    if cx.dims(x)[dim].as_static().is_none() {
        return err("order statistics along a symbolic dim are not supported");
    }
    Ok((x, dim, scalar))
}

/// Per-row count of NaNs along `dim` (kept, i64), zero for non-float types.
fn nan_count(cx: &mut Ctx, x: ValueId, dim: usize) -> R<ValueId> {
    if !cx.dtype(x).is_float() {
        let mut dims = cx.dims(x);
        dims[dim] = Dim::Static(1);
        return cx.full(Scalar::Int(0), DType::I64, &dims);
    }
    let nan = cx.cmp(Direction::Ne, x, x)?;
    let n = cx.convert(nan, DType::I64)?;
    cx.reduce(n, ReduceKind::Sum, &[dim], true)
}

/// Position of the (lower) median per row: of all n values, or of the k non-NaN ones.
fn median_pos(cx: &mut Ctx, x: ValueId, dim: usize, skip_nan: bool) -> R<ValueId> {
    let n = cx.dims(x)[dim].as_static().unwrap_or(0);
    let nans = nan_count(cx, x, dim)?;
    let nv = cx.full_like(Scalar::Int(n), nans)?;
    if skip_nan {
        // (k - 1) / 2 with k = n - nans; k = 0 reads position 0 (a NaN).
        let k = cx.bin(O::Sub, nv, nans)?;
        let one_v = cx.full_like(Scalar::Int(1), k)?;
        let zero = cx.full_like(Scalar::Int(0), k)?;
        let km1 = cx.bin(O::Sub, k, one_v)?;
        let km1 = cx.bin(O::Max, km1, zero)?;
        let two = cx.full_like(Scalar::Int(2), k)?;
        return cx.bin(O::Div, km1, two);
    }
    // The first NaN (at n - nans) when the row has one, else (n - 1) / 2.
    let first_nan = cx.bin(O::Sub, nv, nans)?;
    let mid = cx.full_like(Scalar::Int((n - 1).max(0) / 2), nans)?;
    let zero = cx.full_like(Scalar::Int(0), nans)?;
    let has = cx.cmp(Direction::Gt, nans, zero)?;
    cx.select(has, first_nan, mid)
}

fn median_impl(cx: &mut Ctx, skip_nan: bool, whole: bool) -> R<Vec<Val>> {
    let (x, dim, scalar) = if whole {
        let x = cx.t("self")?;
        let n = cx.ty(x).num_elements_expr();
        (cx.reshape(x, vec![Dim::from_expr(n)])?, 0, true)
    } else {
        operand(cx)?
    };
    if cx.dims(x)[dim].as_static() == Some(0) {
        return err("median of an empty dim is not defined");
    }
    let keep = !scalar && cx.bool("keepdim")?;
    let sorted = sort_v(cx, x, dim, false)?;
    let pos = median_pos(cx, x, dim, skip_nan)?;
    let picked = sorted_at(cx, sorted, dim, pos, keep || scalar)?;
    let mut out = finish(cx, picked, scalar)?;
    if whole {
        out.truncate(1);
    }
    Ok(out)
}

fn median_all(cx: &mut Ctx) -> R<Vec<Val>> {
    median_impl(cx, false, true)
}
fn median_dim(cx: &mut Ctx) -> R<Vec<Val>> {
    median_impl(cx, false, false)
}
fn nanmedian_all(cx: &mut Ctx) -> R<Vec<Val>> {
    median_impl(cx, true, true)
}
fn nanmedian_dim(cx: &mut Ctx) -> R<Vec<Val>> {
    median_impl(cx, true, false)
}

fn finish(cx: &mut Ctx, out: Vec<Val>, scalar: bool) -> R<Vec<Val>> {
    if !scalar {
        return Ok(out);
    }
    let mut r = Vec::with_capacity(out.len());
    for v in out {
        r.push(match v {
            Val::Tensor(t) => Val::Tensor(cx.reshape(t, vec![])?),
            other => other,
        });
    }
    Ok(r)
}

fn kthvalue(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, dim, scalar) = operand(cx)?;
    let n = cx.dims(x)[dim].as_static().unwrap_or(0);
    let k = cx.int("k")?;
    if k < 1 || k > n {
        return err(format!("kthvalue k={k} out of range for a dim of size {n}"));
    }
    let keep = !scalar && cx.bool("keepdim")?;
    let sorted = sort_v(cx, x, dim, false)?;
    let mut dims = cx.dims(x);
    dims[dim] = Dim::Static(1);
    let pos = cx.full(Scalar::Int(k - 1), DType::I64, &dims)?;
    let out = sorted_at(cx, sorted, dim, pos, keep || scalar)?;
    finish(cx, out, scalar)
}

fn mode(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, dim, scalar) = operand(cx)?;
    let keep = !scalar && cx.bool("keepdim")?;
    let n = cx.dims(x)[dim].as_static().unwrap_or(0);
    if n == 0 {
        return err("mode of an empty dim is not defined");
    }
    let (s, si) = sort_v(cx, x, dim, false)?;
    let dims = cx.dims(s);
    let io = cx.iota(DType::I64, &dims, dim)?;
    // A run starts where the sorted value differs from the previous one (always at 0).
    let prev = slice_static(cx, s, dim, 0, n - 1, 1)?;
    let cur = slice_static(cx, s, dim, 1, n, 1)?;
    let differs = cx.cmp(Direction::Ne, cur, prev)?;
    let mut first_dims = dims.clone();
    first_dims[dim] = Dim::Static(1);
    let yes = cx.full(Scalar::Bool(true), DType::Bool, &first_dims)?;
    let starts = cat_v(cx, &[yes, differs], dim as i64)?;
    let neg = cx.full(Scalar::Int(-1), DType::I64, &dims)?;
    let start_pos = cx.select(starts, io, neg)?;
    let run_start = scan(cx, start_pos, dim, tpuc_ir::ScanKind::Max)?;
    let len = cx.bin(O::Sub, io, run_start)?;
    // The first position of the longest run: the largest length, and among those positions the
    // smallest.
    let longest = cx.reduce(len, ReduceKind::Max, &[dim], true)?;
    let longest = cx.broadcast_to(longest, &dims)?;
    let at_max = cx.cmp(Direction::Eq, len, longest)?;
    let big = cx.full(Scalar::Int(n), DType::I64, &dims)?;
    let cand = cx.select(at_max, io, big)?;
    let pos = cx.reduce(cand, ReduceKind::Min, &[dim], true)?;
    let out = sorted_at(cx, (s, si), dim, pos, keep || scalar)?;
    finish(cx, out, scalar)
}

/// `searchsorted` / `bucketize`: for each value, how many elements of its row of the sorted
/// sequence are below it (`right`: at most it), counted over a broadcast comparison. A `sorter`
/// puts the sequence in order first. The dtype is the promoted type of both operands.
fn search(cx: &mut Ctx, seq: ValueId, vals: Operand, right: bool, out_i32: bool) -> R<Vec<Val>> {
    let common = cx.result_type(&[Operand::T(seq), vals])?;
    let v = match vals {
        Operand::T(v) => v,
        Operand::N(n) => cx.scalar(n.scalar(), common)?,
        _ => return err("searchsorted needs a tensor or a number to search for"),
    };
    let seq = if cx.dtype(seq) != common { cx.convert(seq, common)? } else { seq };
    let v = if cx.dtype(v) != common { cx.convert(v, common)? } else { v };
    let (sd, vd) = (cx.dims(seq), cx.dims(v));
    let Some(m) = sd.last().cloned() else { return err("searchsorted needs a sequence of at least one dim") };
    // Both as [..., K, M]: values along K, the sequence along M.
    let (vb, sb, out_dims) = if sd.len() == 1 {
        let mut full = vd.clone();
        full.push(m);
        let vb = cx.reshape(v, vd.iter().cloned().chain([Dim::Static(1)]).collect())?;
        let vb = cx.broadcast_to(vb, &full)?;
        let sb = cx.broadcast_to(seq, &full)?;
        (vb, sb, vd)
    } else {
        if vd.len() != sd.len() || vd[..vd.len() - 1] != sd[..sd.len() - 1] {
            return err(format!(
                "searchsorted: values {} and sorted sequence {} differ in their leading dims",
                fmt_dims(&vd),
                fmt_dims(&sd)
            ));
        }
        let lead = &sd[..sd.len() - 1];
        let k = vd.last().cloned().unwrap_or(Dim::Static(1));
        let full: Vec<Dim> = lead.iter().cloned().chain([k.clone(), m.clone()]).collect();
        let vb = cx.reshape(v, lead.iter().cloned().chain([k, Dim::Static(1)]).collect())?;
        let vb = cx.broadcast_to(vb, &full)?;
        let s1 = cx.reshape(seq, lead.iter().cloned().chain([Dim::Static(1), m]).collect())?;
        let sb = cx.broadcast_to(s1, &full)?;
        (vb, sb, vd)
    };
    let below = cx.cmp(if right { Direction::Le } else { Direction::Lt }, sb, vb)?;
    let dt = if out_i32 { DType::I32 } else { DType::I64 };
    let c = cx.convert(below, dt)?;
    let last = cx.rank(c) - 1;
    let r = cx.reduce(c, ReduceKind::Sum, &[last], false)?;
    one(cx.reshape(r, out_dims)?)
}

fn side_is_right(cx: &Ctx) -> R<bool> {
    let right = cx.bool("right")?;
    match cx.opt_str("side")?.as_deref().unwrap_or("") {
        "" => Ok(right),
        "left" if !right => Ok(false),
        "right" => Ok(true),
        s => err(format!("searchsorted side={s:?} (with right={right}) is not valid")),
    }
}

fn searchsorted(cx: &mut Ctx) -> R<Vec<Val>> {
    let seq = cx.t("sorted_sequence")?;
    let vals = cx.operand("self")?;
    let right = side_is_right(cx)?;
    let out_i32 = cx.bool("out_int32")?;
    let seq = match cx.opt_t("sorter")? {
        Some(sorter) => {
            let last = cx.rank(seq).saturating_sub(1);
            gather_along(cx, seq, sorter, last)?
        }
        None => seq,
    };
    search(cx, seq, vals, right, out_i32)
}

fn bucketize(cx: &mut Ctx) -> R<Vec<Val>> {
    let bounds = cx.t("boundaries")?;
    if cx.rank(bounds) != 1 {
        return err(format!("bucketize needs 1-D boundaries, got {}", cx.ty(bounds)));
    }
    let vals = cx.operand("self")?;
    let right = cx.bool("right")?;
    let out_i32 = cx.bool("out_int32")?;
    search(cx, bounds, vals, right, out_i32)
}
