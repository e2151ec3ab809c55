//! `embedding_bag` (`nn.EmbeddingBag`): sums, means or maxima of embedding rows over bags of
//! a flat index list cut by `offsets`, and its backwards.
//!
//! Index `i` belongs to bag `b(i)` = (number of offsets <= i) - 1, computed by marking each
//! bag's start and a running sum, as torch's `offset2bag`. An index equal to `padding_idx`
//! (when that is >= 0) takes no part: it adds nothing, counts in no bag's size and gets no
//! gradient. Bags without an element are 0. Sums go through a scatter-add into the bags (in
//! f32 for 16-bit weights, rounded once); a bag's maximum is, per column, the first element
//! (in index order) holding the largest value, whose row index is `max_indices`, as the CPU
//! kernel keeps the first of equal values. (That kernel lets a NaN win only as a bag's first
//! element; here a NaN anywhere in the bag wins.)
//!
//! The auxiliary results (`offset2bag`, `bag_size`, `max_indices`) take the shapes torch
//! recorded and the values the CPU kernel gives where its backward reads them, so a backward
//! that runs in eager PyTorch can take them: `offset2bag` each index's bag (empty on the
//! kernel's fast path of plain sums), `bag_size` the elements per bag for mean and max (zeros
//! for sum), `max_indices` the chosen rows for max (zeros otherwise). The backwards read only
//! `max_indices` from them and recompute the bags from `indices` and `offsets`.
//!
//! With `include_last_offset` the last offset closes the last bag; indices past it (torch
//! documents it must equal their count) are in no bag.

use crate::ops::build::*;
use take_along;
use Opcode as O;
use tpuc_ir::{Direction, ReduceKind, ScatterKind};

const SUM: i64 = 0;
const MEAN: i64 = 1;
const MAX: i64 = 2;

fn mode_name(mode: i64) -> &'static str {
    match mode {
        SUM => "sum",
        MEAN => "mean",
        MAX => "max",
        _ => "unknown",
    }
}

/// Each index's bag and whether it takes part.
struct Bags {
    /// i64 [L]: the bag of each index, clamped to `0..B` (meaningful where `valid`).
    bag: ValueId,
    /// i64 [L]: the bag as torch's `offset2bag` holds it (not clamped).
    raw: ValueId,
    /// bool [L]: in a bag and not `padding_idx`.
    valid: ValueId,
    /// Number of bags.
    n: i64,
}

/// `indices` as a 1-D i64 tensor of static length.
fn flat_indices(cx: &mut Ctx, indices: ValueId) -> R<(ValueId, i64)> {
    if !cx.dtype(indices).is_int() || cx.rank(indices) != 1 {
        return err(format!("embedding_bag needs 1-D integer indices, got {}", cx.ty(indices)));
    }
    let l = static_of(&cx.dim_size(indices, 0)?, "embedding_bag: the number of indices")?;
    Ok((cx.convert(indices, DType::I64)?, l))
}

/// `v` (i64 [L]) clamped to `0..=hi`.
fn clamp(cx: &mut Ctx, v: ValueId, hi: i64) -> R<ValueId> {
    let lo = cx.full_like(Scalar::Int(0), v)?;
    let h = cx.full_like(Scalar::Int(hi.max(0)), v)?;
    let v = cx.bin(O::Max, v, lo)?;
    cx.bin(O::Min, v, h)
}

/// Bags from `offsets` (the first `n` of them start bags; with `close`, offset `n` ends the
/// last one).
fn bags_from_offsets(cx: &mut Ctx, idx: ValueId, l: i64, offsets: ValueId, close: bool, pad: i64) -> R<Bags> {
    if !cx.dtype(offsets).is_int() || cx.rank(offsets) != 1 {
        return err(format!("embedding_bag needs 1-D integer offsets, got {}", cx.ty(offsets)));
    }
    let k = static_of(&cx.dim_size(offsets, 0)?, "embedding_bag: the number of offsets")?;
    let n = if close { k - 1 } else { k };
    if n < 0 {
        return err("embedding_bag with include_last_offset needs at least one offset");
    }
    let off = cx.convert(offsets, DType::I64)?;
    let starts = if n == k { off } else { cx.b.slice(off, &[0], &[n], &[1])? };
    // marks[j] = number of bags starting at j (j = L: bags after every index), then a
    // running sum: bags started at or before each index.
    let ld = [Dim::Static(l)];
    let raw = if n == 0 || l == 0 {
        cx.full(Scalar::Int(-1), DType::I64, &ld)?
    } else {
        let marks = cx.full(Scalar::Int(0), DType::I64, &[Dim::Static(l + 1)])?;
        let at = clamp(cx, starts, l)?;
        let ones = cx.full(Scalar::Int(1), DType::I64, &[Dim::Static(n)])?;
        let marks = scatter_rows(cx, marks, at, ones, ScatterKind::Add)?;
        let marks = cx.b.slice(marks, &[0], &[l], &[1])?;
        let run = scan(cx, marks, 0, tpuc_ir::ScanKind::Sum)?;
        cx.bin_c(O::Sub, run, 1.0)?
    };
    let zero = cx.full_like(Scalar::Int(0), raw)?;
    let mut valid = cx.cmp(Direction::Ge, raw, zero)?;
    if close && l > 0 {
        let end = cx.b.slice(off, &[n], &[n + 1], &[1])?;
        let end = cx.b.broadcast_in_dim(end, &[0], ld.to_vec())?;
        let pos = cx.iota(DType::I64, &ld, 0)?;
        let before = cx.cmp(Direction::Lt, pos, end)?;
        valid = cx.bin(O::And, valid, before)?;
    }
    finish_bags(cx, idx, raw, valid, n, pad)
}

/// Bags from a given `offset2bag`.
fn bags_from_offset2bag(cx: &mut Ctx, idx: ValueId, o2b: ValueId, n: i64, pad: i64) -> R<Bags> {
    let raw = cx.convert(o2b, DType::I64)?;
    let zero = cx.full_like(Scalar::Int(0), raw)?;
    let valid = cx.cmp(Direction::Ge, raw, zero)?;
    finish_bags(cx, idx, raw, valid, n, pad)
}

fn finish_bags(cx: &mut Ctx, idx: ValueId, raw: ValueId, valid: ValueId, n: i64, pad: i64) -> R<Bags> {
    let mut valid = valid;
    if pad >= 0 {
        let p = cx.full_like(Scalar::Int(pad), idx)?;
        let not_pad = cx.cmp(Direction::Ne, idx, p)?;
        valid = cx.bin(O::And, valid, not_pad)?;
    }
    let bag = clamp(cx, raw, n - 1)?;
    Ok(Bags { bag, raw, valid, n })
}

/// Elements per bag (i64 [B]).
fn bag_sizes(cx: &mut Ctx, bags: &Bags) -> R<ValueId> {
    let z = cx.full(Scalar::Int(0), DType::I64, &[Dim::Static(bags.n)])?;
    if bags.n == 0 {
        return Ok(z);
    }
    let ones = cx.convert(bags.valid, DType::I64)?;
    scatter_rows(cx, z, bags.bag, ones, ScatterKind::Add)
}

/// `v` [L] broadcast along the columns of [L, D] `like`.
fn rows_of(cx: &mut Ctx, v: ValueId, like: &[Dim]) -> R<ValueId> {
    Ok(cx.b.broadcast_in_dim(v, &[0], like.to_vec())?)
}

/// Rows [L, D] summed into their bags: [B, D] (rows outside every bag must be zero).
fn sum_into(cx: &mut Ctx, rows: ValueId, at: ValueId, n: i64) -> R<ValueId> {
    let d = cx.dim_size(rows, 1)?;
    let z = cx.full(Scalar::Int(0), cx.dtype(rows), &[Dim::Static(n), d])?;
    scatter_rows(cx, z, at, rows, ScatterKind::Add)
}

/// The auxiliary result `i` fitted to the type torch recorded for it: empty when that is
/// empty, padded with zeros (or cut) along dim 0 to its length otherwise, in its dtype.
fn fit(cx: &mut Ctx, i: usize, v: ValueId) -> R<Val> {
    if !cx.used(i) {
        return Ok(Val::Absent);
    }
    let Some(t) = cx.out_type(i) else { return Ok(Val::Tensor(v)) };
    let v = cx.convert(v, t.dtype)?;
    let want = t.static_dims().ok_or_else(|| OpError::Refused(format!("embedding_bag: result {i} has a symbolic type {t}")))?;
    let have = cx.static_dims(v, "embedding_bag result")?;
    if want == have {
        return Ok(Val::Tensor(v));
    }
    if want.iter().product::<i64>() == 0 || want.len() != have.len() || want[1..] != have[1..] {
        return Ok(Val::Tensor(cx.full(Scalar::Int(0), t.dtype, &t.dims)?));
    }
    let (w, h) = (want[0], have[0]);
    let r = want.len();
    let v = if w < h {
        let mut lim = have.clone();
        lim[0] = w;
        cx.b.slice(v, &vec![0; r], &lim, &vec![1; r])?
    } else {
        let z = cx.scalar(Scalar::Int(0), t.dtype)?;
        let mut hi = vec![0; r];
        hi[0] = w - h;
        cx.b.pad(v, z, &vec![0; r], &hi, &vec![0; r])?
    };
    Ok(Val::Tensor(v))
}

/// `_embedding_bag`, `_embedding_bag_forward_only` and `embedding_bag` (default and
/// `padding_idx` overloads): (output, offset2bag, bag_size, max_indices).
pub(super) fn embedding_bag(cx: &mut Ctx) -> R<Vec<Val>> {
    let w = cx.t("weight")?;
    let indices = cx.t("indices")?;
    let offsets = cx.t("offsets")?;
    let mode = cx.int("mode")?;
    let psw = cx.opt_t("per_sample_weights")?;
    let close = cx.bool("include_last_offset")?;
    let pad = cx.opt_int("padding_idx")?.unwrap_or(-1);
    if !(SUM..=MAX).contains(&mode) {
        return err(format!("embedding_bag: unknown mode {mode}"));
    }
    if cx.rank(w) != 2 || !cx.dtype(w).is_float() {
        return err(format!("embedding_bag needs a 2-D floating weight, got {}", cx.ty(w)));
    }
    if psw.is_some() && mode != SUM {
        return err(format!("embedding_bag: per_sample_weights only with mode sum, not {}", mode_name(mode)));
    }
    let (idx, l) = flat_indices(cx, indices)?;
    let bags = bags_from_offsets(cx, idx, l, offsets, close, pad)?;
    let out_dt = cx.dtype(w);
    let dt = dtypes::compute_dtype(out_dt);
    let wc = cx.convert(w, dt)?;
    let rows = take_along(cx, wc, 0, idx)?; // [L, D]
    let rd = cx.dims(rows);
    let vb = rows_of(cx, bags.valid, &rd)?;
    let zeros = cx.full_like(Scalar::Int(0), rows)?;
    let n = bags.n;
    let sizes = bag_sizes(cx, &bags)?;
    let (out, max_idx) = match mode {
        SUM | MEAN => {
            let mut r = rows;
            if let Some(p) = psw {
                let p = cx.convert(p, dt)?;
                let p = cx.reshape(p, vec![Dim::Static(l)])?;
                let pb = rows_of(cx, p, &rd)?;
                r = cx.bin(O::Mul, r, pb)?;
            }
            let r = cx.select(vb, r, zeros)?;
            let s = sum_into(cx, r, bags.bag, n)?;
            let s = if mode == MEAN { divide_by_size(cx, s, sizes)? } else { s };
            (s, None)
        }
        _ => {
            let (m, mi) = bag_max(cx, rows, idx, &bags, sizes)?;
            (m, Some(mi))
        }
    };
    let out = cx.convert(out, out_dt)?;
    let o2b = fit(cx, 1, bags.raw)?;
    let bag_size = match mode {
        _ if !cx.used(2) => Val::Absent,
        SUM => {
            let z = cx.full_like(Scalar::Int(0), sizes)?;
            fit(cx, 2, z)?
        }
        _ => fit(cx, 2, sizes)?,
    };
    let max_idx = match max_idx {
        _ if !cx.used(3) => Val::Absent,
        Some(m) => fit(cx, 3, m)?,
        None => {
            let z = cx.full_like(Scalar::Int(0), sizes)?;
            fit(cx, 3, z)?
        }
    };
    Ok(vec![Val::Tensor(out), o2b, bag_size, max_idx])
}

/// Sums [B, D] divided by their bag's size; 0 for an empty bag.
fn divide_by_size(cx: &mut Ctx, s: ValueId, sizes: ValueId) -> R<ValueId> {
    let sd = cx.dims(s);
    let dt = cx.dtype(s);
    let zero = cx.full_like(Scalar::Int(0), sizes)?;
    let empty = cx.cmp(Direction::Eq, sizes, zero)?;
    let one_ = cx.full_like(Scalar::Int(1), sizes)?;
    let safe = cx.select(empty, one_, sizes)?;
    let f = cx.convert(safe, dt)?;
    let fb = rows_of(cx, f, &sd)?;
    cx.bin(O::Div, s, fb)
}

/// Per bag and column, the largest value and the row index of the first element holding it
/// (0 and 0 for an empty bag).
fn bag_max(cx: &mut Ctx, rows: ValueId, idx: ValueId, bags: &Bags, sizes: ValueId) -> R<(ValueId, ValueId)> {
    let rd = cx.dims(rows);
    let l = static_of(&rd[0], "embedding_bag: the number of indices")?;
    let n = bags.n;
    let d = rd[1].clone();
    let bd = [Dim::Static(n), d.clone()];
    let dt = cx.dtype(rows);
    let vb = rows_of(cx, bags.valid, &rd)?;
    let low = cx.full_like(Scalar::Float(f64::NEG_INFINITY), rows)?;
    let cand = cx.select(vb, rows, low)?;
    // The maximum per bag: a scatter-max into -inf.
    let init = cx.full(Scalar::Float(f64::NEG_INFINITY), dt, &bd)?;
    let m = scatter_rows(cx, init, bags.bag, cand, ScatterKind::Max)?;
    // The first position holding it: a scatter-min of positions where an element equals its
    // bag's maximum (or is NaN, which the maximum propagates).
    let mb = take_along(cx, m, 0, bags.bag)?; // [L, D]
    let hit = cx.cmp(Direction::Eq, rows, mb)?;
    let nan = cx.cmp(Direction::Ne, rows, rows)?;
    let hit = cx.bin(O::Or, hit, nan)?;
    let hit = cx.bin(O::And, hit, vb)?;
    let pos = cx.iota(DType::I64, &rd, 0)?;
    let none = cx.full_like(Scalar::Int(l), pos)?;
    let pos = cx.select(hit, pos, none)?;
    let pinit = cx.full(Scalar::Int(l), DType::I64, &bd)?;
    let first = scatter_rows(cx, pinit, bags.bag, pos, ScatterKind::Min)?; // [B, D], L when empty
    let first = clamp(cx, first, l - 1)?;
    // The values and row indices at those positions (taken, so value and index agree).
    let value = gather_along(cx, rows, first, 0)?;
    let ib = rows_of(cx, idx, &rd)?;
    let row = gather_along(cx, ib, first, 0)?;
    let zero = cx.full_like(Scalar::Int(0), sizes)?;
    let empty = cx.cmp(Direction::Eq, sizes, zero)?;
    let eb = rows_of(cx, empty, &bd)?;
    let zv = cx.full_like(Scalar::Int(0), value)?;
    let zr = cx.full_like(Scalar::Int(0), row)?;
    Ok((cx.select(eb, zv, value)?, cx.select(eb, zr, row)?))
}

/// The weight gradient [num_weights, D] of a bag reduction: each index's row gets its bag's
/// gradient (times its per-sample weight for sum, divided by the bag's size for mean; for max,
/// the bag's gradient goes to the rows `max_indices` names), divided by the index's frequency
/// with `scale_grad_by_freq`.
#[allow(clippy::too_many_arguments)]
fn bag_weight_grad(
    cx: &mut Ctx,
    g: ValueId,
    idx: ValueId,
    bags: &Bags,
    max_indices: Option<ValueId>,
    num_weights: i64,
    by_freq: bool,
    mode: i64,
    psw: Option<ValueId>,
) -> R<ValueId> {
    if !(0..=MAX_SIZE).contains(&num_weights) {
        return err(format!("embedding_bag backward: num_weights {num_weights} out of range"));
    }
    if cx.rank(g) != 2 || static_of(&cx.dim_size(g, 0)?, "embedding_bag backward: the number of bags")? != bags.n {
        return err(format!("embedding_bag backward: grad {} does not fit {} bags", cx.ty(g), bags.n));
    }
    let out_dt = cx.dtype(g);
    let dt = dtypes::compute_dtype(out_dt);
    let g = cx.convert(g, dt)?;
    let d = cx.dim_size(g, 1)?;
    let wd = [Dim::Static(num_weights), d.clone()];
    let zeros = cx.full(Scalar::Int(0), dt, &wd)?;
    let sizes = bag_sizes(cx, bags)?;
    if mode == MAX {
        if by_freq {
            return err("embedding_bag backward: max mode does not scale the gradient by frequency");
        }
        let mi = max_indices.ok_or_else(|| OpError::Refused("embedding_bag backward: max mode needs max_indices".into()))?;
        let gd = cx.dims(g);
        if cx.dims(mi) != gd {
            return err(format!("embedding_bag backward: max_indices {} does not fit grad {}", cx.ty(mi), cx.ty(g)));
        }
        let mi = cx.convert(mi, DType::I64)?;
        let mi = clamp(cx, mi, num_weights - 1)?;
        let zero = cx.full_like(Scalar::Int(0), sizes)?;
        let full = cx.cmp(Direction::Gt, sizes, zero)?;
        let fb = rows_of(cx, full, &gd)?;
        let zg = cx.full_like(Scalar::Int(0), g)?;
        let upd = cx.select(fb, g, zg)?;
        let coords = full_coords(cx, mi, 0, 2)?;
        let r = elementwise_scatter(cx, zeros, coords, upd, ScatterKind::Add)?;
        return cx.convert(r, out_dt);
    }
    let gi = take_along(cx, g, 0, bags.bag)?; // [L, D]
    let rd = cx.dims(gi);
    let l = static_of(&rd[0], "embedding_bag backward: the number of indices")?;
    // Per index: its scale (per-sample weight, 1 / bag size, 1 / frequency), 0 outside bags.
    let mut scale = cx.full(Scalar::Int(1), dt, &[Dim::Static(l)])?;
    if let Some(p) = psw {
        let p = cx.convert(p, dt)?;
        let p = cx.reshape(p, vec![Dim::Static(l)])?;
        scale = cx.bin(O::Mul, scale, p)?;
    }
    if mode == MEAN {
        let s = take_along(cx, sizes, 0, bags.bag)?;
        let one_ = cx.full_like(Scalar::Int(1), s)?;
        let s = cx.bin(O::Max, s, one_)?;
        let s = cx.convert(s, dt)?;
        scale = cx.bin(O::Div, scale, s)?;
    }
    if by_freq {
        let counts = cx.full(Scalar::Int(0), DType::I64, &[Dim::Static(num_weights)])?;
        let at = clamp(cx, idx, num_weights - 1)?;
        let ones = cx.full(Scalar::Int(1), DType::I64, &[Dim::Static(l)])?;
        let counts = scatter_rows(cx, counts, at, ones, ScatterKind::Add)?;
        let c = take_along(cx, counts, 0, idx)?;
        let one_ = cx.full_like(Scalar::Int(1), c)?;
        let c = cx.bin(O::Max, c, one_)?;
        let c = cx.convert(c, dt)?;
        scale = cx.bin(O::Div, scale, c)?;
    }
    let z = cx.full_like(Scalar::Int(0), scale)?;
    let scale = cx.select(bags.valid, scale, z)?;
    let sb = rows_of(cx, scale, &rd)?;
    let upd = cx.bin(O::Mul, gi, sb)?;
    let at = clamp(cx, idx, num_weights - 1)?;
    let r = sum_into(cx, upd, at, num_weights)?;
    cx.convert(r, out_dt)
}

/// Bags for a backward: from `offset2bag` when it holds one entry per index, else (the
/// forward's fast path leaves it empty) from `offsets`.
fn backward_bags(cx: &mut Ctx, idx: ValueId, l: i64, n: i64, pad: i64) -> R<Bags> {
    let o2b = cx.t("offset2bag")?;
    let have = cx.ty(o2b).num_elements();
    if have == Some(l) || !cx.has("offsets") {
        if have != Some(l) {
            return err(format!("embedding_bag backward: offset2bag {} for {l} indices", cx.ty(o2b)));
        }
        let o2b = cx.reshape(o2b, vec![Dim::Static(l)])?;
        return bags_from_offset2bag(cx, idx, o2b, n, pad);
    }
    let offsets = cx.t("offsets")?;
    let k = static_of(&cx.dim_size(offsets, 0)?, "embedding_bag: the number of offsets")?;
    // Without include_last_offset in the arguments, a trailing offset equal to the number of
    // indices starts no index's bag, so reading every offset as a start is right either way.
    let b = bags_from_offsets(cx, idx, l, offsets, false, pad)?;
    if k != n && k != n + 1 {
        return err(format!("embedding_bag backward: {k} offsets for {n} bags"));
    }
    Ok(Bags { n, ..b })
}

/// `_embedding_bag_backward` and `_embedding_bag_dense_backward`: the weight gradient.
pub(super) fn embedding_bag_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad")?;
    let indices = cx.t("indices")?;
    let num_weights = cx.int("num_weights")?;
    let by_freq = cx.bool("scale_grad_by_freq")?;
    let mode = cx.int("mode")?;
    let psw = cx.opt_t("per_sample_weights")?;
    let pad = cx.opt_int("padding_idx")?.unwrap_or(-1);
    // `_embedding_bag_dense_backward` has no `sparse`.
    if cx.opt_bool("sparse")?.unwrap_or(false) {
        return err("embedding_bag backward with sparse=True (a sparse gradient) is not supported");
    }
    if !(SUM..=MAX).contains(&mode) {
        return err(format!("embedding_bag backward: unknown mode {mode}"));
    }
    let (idx, l) = flat_indices(cx, indices)?;
    let n = static_of(&cx.dim_size(g, 0)?, "embedding_bag backward: the number of bags")?;
    let bags = backward_bags(cx, idx, l, n, pad)?;
    let mi = if mode == MAX { Some(cx.t("maximum_indices")?) } else { None };
    one(bag_weight_grad(cx, g, idx, &bags, mi, num_weights, by_freq, mode, psw)?)
}

/// `_embedding_bag_per_sample_weights_backward`: per index, its bag's gradient dotted with
/// its weight row (0 for `padding_idx`).
pub(super) fn embedding_bag_psw_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad")?;
    let w = cx.t("weight")?;
    let indices = cx.t("indices")?;
    let mode = cx.int("mode")?;
    let pad = cx.opt_int("padding_idx")?.unwrap_or(-1);
    if mode != SUM {
        return err(format!("embedding_bag: per_sample_weights only with mode sum, not {}", mode_name(mode)));
    }
    let (idx, l) = flat_indices(cx, indices)?;
    let n = static_of(&cx.dim_size(g, 0)?, "embedding_bag backward: the number of bags")?;
    let bags = backward_bags(cx, idx, l, n, pad)?;
    let out_dt = cx.dtype(g);
    let dt = dtypes::compute_dtype(out_dt);
    let g = cx.convert(g, dt)?;
    let w = cx.convert(w, dt)?;
    let gi = take_along(cx, g, 0, bags.bag)?;
    let rows = take_along(cx, w, 0, idx)?;
    let p = cx.bin(O::Mul, gi, rows)?;
    let s = cx.reduce(p, ReduceKind::Sum, &[1], false)?;
    let z = cx.full_like(Scalar::Int(0), s)?;
    let s = cx.select(bags.valid, s, z)?;
    one(cx.convert(s, out_dt)?)
}
