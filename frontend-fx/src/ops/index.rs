//! Indexing: gather/scatter along a dim, advanced indexing (`index.Tensor`, `index_put`),
//! `index_select`, `index_add` and the slice/select scatters.
//!
//! `torch.gather` maps to a StableHLO gather of single elements whose batch dims are the dims
//! the index spans whole (so no iota stands in for a position along them, and a padded batch
//! dim pairs operand and index positions directly); the index supplies the coordinate along
//! `dim` and iotas the coordinates along dims it covers only in part. `scatter` uses a full
//! coordinate vector per element (iotas for the other dims). Both are exactly torch's
//! element-wise definition.
//! Advanced indexing uses one gather whose batch dims are the broadcast index shape, placed
//! where torch puts them (in place when the indexed dims are adjacent, else first).

use unsqueeze_v;
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::{Direction, ScatterKind};

pub const OPS: &[(&str, OpFn)] = &[
    ("gather.default", gather),
    ("scatter.value", scatter_value),
    ("scatter.src", scatter_src),
    ("scatter.reduce", scatter_src_reduce),
    ("scatter.value_reduce", scatter_value_reduce),
    ("scatter_add.default", scatter_add),
    ("scatter_reduce.two", scatter_reduce),
    ("index_select.default", index_select),
    ("index.Tensor", index_tensor),
    ("_unsafe_index.Tensor", index_tensor),
    ("index_put.default", index_put),
    ("masked_scatter.default", masked_scatter),
    ("masked_scatter_backward.default", masked_scatter_backward),
    ("put.default", put),
    ("nonzero_static.default", nonzero_static),
    ("_unsafe_index_put.default", index_put),
    ("index_add.default", index_add),
    ("index_reduce.default", index_reduce),
    ("slice_scatter.default", slice_scatter),
    ("select_scatter.default", select_scatter),
];

fn check_index(cx: &Ctx, idx: ValueId, x: ValueId) -> R<()> {
    if !cx.dtype(idx).is_int() {
        return err(format!("index must be an integer tensor, got {}", cx.ty(idx)));
    }
    if cx.rank(idx) != cx.rank(x) && !(cx.rank(x) == 0 && cx.rank(idx) <= 1) {
        return err(format!("index {} must have the rank of {}", cx.ty(idx), cx.ty(x)));
    }
    Ok(())
}

/// A rank-0 tensor as rank 1 (torch treats it so in gather/scatter).
fn at_least_1d(cx: &mut Ctx, v: ValueId) -> R<ValueId> {
    if cx.rank(v) == 0 {
        cx.reshape(v, vec![Dim::Static(1)])
    } else {
        Ok(v)
    }
}

fn gather(cx: &mut Ctx) -> R<Vec<Val>> {
    let x0 = cx.t("self")?;
    let idx = cx.t("index")?;
    check_index(cx, idx, x0)?;
    let scalar = cx.rank(x0) == 0;
    let x = at_least_1d(cx, x0)?;
    let idx = at_least_1d(cx, idx)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let g = gather_along(cx, x, idx, dim)?;
    if scalar {
        return one(cx.reshape(g, vec![])?);
    }
    one(g)
}

/// `src` cut to the index's shape (torch reads only that corner of `src`).
fn fit_src(cx: &mut Ctx, src: ValueId, idx: ValueId) -> R<ValueId> {
    let (sd, id) = (cx.dims(src), cx.dims(idx));
    if sd == id {
        return Ok(src);
    }
    if sd.len() != id.len() {
        return err(format!("scatter src {} and index {} differ in rank", cx.ty(src), cx.ty(idx)));
    }
    let mut start = Vec::new();
    let mut limit = Vec::new();
    for (s, i) in sd.iter().zip(&id) {
        match (s, i) {
            (Dim::Static(a), Dim::Static(b)) if b <= a => {
                start.push(0);
                limit.push(*b);
            }
            (a, b) if a == b => {
                start.push(0);
                limit.push(a.as_static().unwrap_or(i64::MAX));
            }
            _ => return err(format!("scatter src {} is smaller than index {}", cx.ty(src), cx.ty(idx))),
        }
    }
    let ones = vec![1; start.len()];
    Ok(cx.b.slice(src, &start, &limit, &ones)?)
}

/// Scatter along `dim` with torch semantics; `kind` is replace/add/mul/max/min.
fn scatter_impl(cx: &mut Ctx, updates_from: Operand, kind: ScatterKind) -> R<Vec<Val>> {
    let x0 = cx.t("self")?;
    let idx = cx.t("index")?;
    check_index(cx, idx, x0)?;
    let scalar = cx.rank(x0) == 0;
    let x = at_least_1d(cx, x0)?;
    let idx = at_least_1d(cx, idx)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let dt = cx.dtype(x);
    let ishape = cx.dims(idx);
    let upd = match updates_from {
        Operand::T(s) => {
            let s = at_least_1d(cx, s)?;
            let s = cx.convert(s, dt)?;
            fit_src(cx, s, idx)?
        }
        other => cx.mat(&other, dt, &ishape)?,
    };
    let coords = full_coords(cx, idx, dim, cx.rank(x))?;
    let y = elementwise_scatter(cx, x, coords, upd, kind)?;
    if scalar {
        return one(cx.reshape(y, vec![])?);
    }
    one(y)
}

fn reduce_kind(r: &str) -> R<ScatterKind> {
    Ok(match r {
        "add" | "sum" => ScatterKind::Add,
        "multiply" | "prod" => ScatterKind::Mul,
        "amax" => ScatterKind::Max,
        "amin" => ScatterKind::Min,
        other => return err(format!("scatter reduce `{other}` is not supported")),
    })
}

fn scatter_value(cx: &mut Ctx) -> R<Vec<Val>> {
    let v = cx.operand("value")?;
    scatter_impl(cx, v, ScatterKind::Replace)
}
fn scatter_src(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("src")?;
    scatter_impl(cx, Operand::T(s), ScatterKind::Replace)
}
fn scatter_src_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("src")?;
    let k = reduce_kind(&cx.str("reduce")?)?;
    scatter_impl(cx, Operand::T(s), k)
}
fn scatter_value_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let v = cx.operand("value")?;
    let k = reduce_kind(&cx.str("reduce")?)?;
    scatter_impl(cx, v, k)
}
fn scatter_add(cx: &mut Ctx) -> R<Vec<Val>> {
    let s = cx.t("src")?;
    scatter_impl(cx, Operand::T(s), ScatterKind::Add)
}

/// The identity of a scatter reduction, as a scalar of `dt`.
fn identity_of(kind: ScatterKind, dt: DType) -> Scalar {
    kind.combiner().map_or(Scalar::Int(0), |k| k.identity(dt))
}

fn scatter_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let idx = cx.t("index")?;
    let src = cx.t("src")?;
    check_index(cx, idx, x)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let reduce = cx.str("reduce")?;
    let include_self = cx.bool("include_self")?;
    let dt = cx.dtype(x);
    let src = cx.convert(src, dt)?;
    let src = fit_src(cx, src, idx)?;
    let coords = full_coords(cx, idx, dim, cx.rank(x))?;
    let shape = cx.dims(x);
    // which positions receive at least one update
    let touched = {
        let z = cx.full(Scalar::Bool(false), DType::Bool, &shape)?;
        let t = cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(idx))?;
        elementwise_scatter(cx, z, coords, t, ScatterKind::Replace)?
    };
    if reduce == "mean" {
        let base = if include_self { x } else { cx.full(Scalar::Int(0), dt, &shape)? };
        let sum = elementwise_scatter(cx, base, coords, src, ScatterKind::Add)?;
        let ones = cx.full(Scalar::Int(1), dt, &cx.dims(idx))?;
        let c0 = cx.full(Scalar::Int(if include_self { 1 } else { 0 }), dt, &shape)?;
        let count = elementwise_scatter(cx, c0, coords, ones, ScatterKind::Add)?;
        let one_ = cx.full_like(Scalar::Int(1), count)?;
        let count = cx.bin(O::Max, count, one_)?;
        let mean = if dt.is_float() { cx.bin(O::Div, sum, count)? } else { floor_div_v(cx, sum, count)? };
        return one(cx.select(touched, mean, x)?);
    }
    let kind = reduce_kind(&reduce)?;
    let base = if include_self {
        x
    } else {
        let id = cx.full(identity_of(kind, dt), dt, &shape)?;
        cx.select(touched, id, x)?
    };
    one(elementwise_scatter(cx, base, coords, src, kind)?)
}

fn index_select(cx: &mut Ctx) -> R<Vec<Val>> {
    let x0 = cx.t("self")?;
    let idx = cx.t("index")?;
    if !cx.dtype(idx).is_int() || cx.rank(idx) > 1 {
        return err(format!("index_select needs a 1-D integer index, got {}", cx.ty(idx)));
    }
    let scalar = cx.rank(x0) == 0;
    let x = at_least_1d(cx, x0)?;
    let idx = at_least_1d(cx, idx)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let g = take_along(cx, x, dim, idx)?;
    if scalar {
        return one(cx.reshape(g, vec![])?);
    }
    one(g)
}

fn adv_index(cx: &mut Ctx, x: ValueId, idxs: &[Option<ValueId>]) -> R<AdvIndex> {
    let dims = cx.dims(x);
    if idxs.len() > dims.len() {
        return err(format!("too many indices ({}) for {}", idxs.len(), cx.ty(x)));
    }
    let mut pos = Vec::new();
    let mut tensors = Vec::new();
    for (i, t) in idxs.iter().enumerate() {
        if let Some(t) = t {
            let d = cx.dtype(*t);
            if d.is_bool() || d == DType::U8 {
                return err("a boolean mask among integer indices is not supported");
            }
            if !d.is_int() {
                return err(format!("index tensors must be integers, got {}", cx.ty(*t)));
            }
            pos.push(i);
            tensors.push(*t);
        }
    }
    if pos.is_empty() {
        return err("indexing without index tensors");
    }
    let ops: Vec<Operand> = tensors.iter().map(|&t| Operand::T(t)).collect();
    let bshape = cx.broadcast_shape(&ops)?;
    let mut col = bshape.clone();
    col.push(Dim::Static(1));
    let mut parts = Vec::new();
    for (&p, &t) in pos.iter().zip(&tensors) {
        let t = cx.convert(t, DType::I64)?;
        let mut t = cx.broadcast_to(t, &bshape)?;
        if let Dim::Static(n) = dims[p] {
            // wrap negative indices
            let z = cx.full_like(Scalar::Int(0), t)?;
            let neg = cx.cmp(Direction::Lt, t, z)?;
            let nn = cx.full_like(Scalar::Int(n), t)?;
            let w = cx.bin(O::Add, t, nn)?;
            t = cx.select(neg, w, t)?;
        }
        parts.push(cx.reshape(t, col.clone())?);
    }
    let coords = cx.b.concatenate(&parts, bshape.len() as i64)?;
    let adjacent = pos.windows(2).all(|w| w[1] == w[0] + 1);
    let batch_at = if adjacent { pos[0] } else { 0 };
    Ok(AdvIndex { pos, bshape, coords, batch_at })
}

fn index_tensor(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let idxs = cx.opt_tensors("indices")?;
    if idxs.iter().flatten().any(|&t| cx.dtype(t).is_bool() || cx.dtype(t) == DType::U8) {
        return one(index_by_mask(cx, x, &idxs)?);
    }
    let ai = adv_index(cx, x, &idxs)?;
    one(gather_adv(cx, x, &ai)?)
}

fn index_put(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let idxs = cx.opt_tensors("indices")?;
    let values = cx.t("values")?;
    let accumulate = cx.bool("accumulate")?;
    let dt = cx.dtype(x);
    let values = cx.convert(values, dt)?;
    // x[mask] = v with a boolean mask over x's leading dims: a select of v broadcast to x, or,
    // when v has one row per true element, of the row numbered by the running count of trues.
    if let [Some(m)] = idxs.as_slice() {
        if cx.dtype(*m).is_bool() {
            let shape = cx.dims(x);
            let mr = cx.rank(*m);
            if mr > shape.len() || cx.dims(*m)[..] != shape[..mr] {
                return err(format!("index_put: boolean mask {} does not match {}", cx.ty(*m), cx.ty(x)));
            }
            let bd: Vec<i64> = (0..mr as i64).collect();
            let mb = cx.b.broadcast_in_dim(*m, &bd, shape.clone())?;
            let trailing = shape[mr..].to_vec();
            let vd = cx.dims(values);
            let vb = if vd.len() <= trailing.len() || vd[0].is_one() {
                let vr = if vd.len() > trailing.len() { cx.reshape(values, vd[1..].to_vec())? } else { values };
                cx.broadcast_to(vr, &shape)?
            } else {
                // One row per true element: torch checks that the counts agree, so no rows
                // means no trues. The rows may be a data-dependent count (`x[m] = f(y[m])`, a
                // buffer whose first u0 rows are valid): the running count of trues numbers
                // valid rows only, and the gather clamps the rest, which the select drops.
                if vd[0].as_static() == Some(0) {
                    return one(x);
                }
                let rows: Vec<Dim> = [vd[0].clone()].into_iter().chain(trailing.iter().cloned()).collect();
                let v2 = cx.broadcast_to(values, &rows)?;
                let p = cx.ty(*m).num_elements_expr();
                let mflat = cx.reshape(*m, vec![Dim::from_expr(p)])?;
                let ones = cx.convert(mflat, DType::I64)?;
                let run = scan(cx, ones, 0, tpuc_ir::ScanKind::Sum)?;
                let row = cx.bin_c(O::Sub, run, 1.0)?;
                let lo = cx.full_like(Scalar::Int(0), row)?;
                let mut row = cx.bin(O::Max, row, lo)?;
                if let Some(count) = vd[0].as_static() {
                    let hi = cx.full_like(Scalar::Int(count - 1), row)?;
                    row = cx.bin(O::Min, row, hi)?;
                }
                let g = take_along(cx, v2, 0, row)?;
                cx.reshape(g, shape.clone())?
            };
            let new = if accumulate { cx.bin(O::Add, x, vb)? } else { vb };
            return one(cx.select(mb, new, x)?);
        }
    }
    let ai = adv_index(cx, x, &idxs)?;
    let dims = cx.dims(x);
    let r = dims.len();
    // the shape x[indices] would have
    let win = window_positions(r, &ai);
    let out_rank = ai.bshape.len() + r - ai.pos.len();
    let mut out_shape = vec![Dim::Static(0); out_rank];
    let mut bi = 0;
    let rest: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| !ai.pos.contains(i)).map(|(_, d)| d.clone()).collect();
    for (i, slot) in out_shape.iter_mut().enumerate() {
        if let Some(k) = win.iter().position(|&w| w == i as i64) {
            *slot = rest[k].clone();
        } else {
            *slot = ai.bshape[bi].clone();
            bi += 1;
        }
    }
    let upd = cx.broadcast_to(values, &out_shape)?;
    let pos: Vec<i64> = ai.pos.iter().map(|&p| p as i64).collect();
    let dims = ScatterDims {
        update_window_dims: win,
        inserted_window_dims: pos.clone(),
        scatter_dims_to_operand_dims: pos,
        index_vector_dim: ai.bshape.len() as i64,
        ..ScatterDims::default()
    };
    let kind = if accumulate { ScatterKind::Add } else { ScatterKind::Replace };
    one(cx.b.scatter(x, ai.coords, upd, dims, kind)?)
}

fn index_add(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let idx = cx.t("index")?;
    let src = cx.t("source")?;
    let alpha = cx.opt_num("alpha")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    if cx.rank(idx) != 1 {
        return err("index_add needs a 1-D index");
    }
    let dt = cx.dtype(x);
    let mut src = cx.convert(src, dt)?;
    if let Some(a) = alpha {
        if !a.is(1.0) {
            let k = cx.full_like(a.scalar(), src)?;
            src = cx.bin(O::Mul, src, k)?;
        }
    }
    let sshape = cx.dims(src);
    let ib = cx.b.broadcast_in_dim(idx, &[dim as i64], sshape)?;
    let coords = full_coords(cx, ib, dim, cx.rank(x))?;
    one(elementwise_scatter(cx, x, coords, src, ScatterKind::Add)?)
}

/// `index_reduce`: `self[..., index[i], ...]` combined with `source[..., i, ...]` along `dim` by
/// `prod`, `amax`, `amin` or `mean`; with `include_self=False` the rows an index hits start
/// from the reduction's identity instead of `self`. `mean` divides by the number of values
/// combined (flooring for integers, as ATen).
fn index_reduce(cx: &mut Ctx) -> R<Vec<Val>> {
    let x0 = cx.t("self")?;
    let scalar = cx.rank(x0) == 0;
    let x = at_least_1d(cx, x0)?;
    let src = cx.t("source")?;
    let src = at_least_1d(cx, src)?;
    let idx = cx.t("index")?;
    let idx = at_least_1d(cx, idx)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let reduce = cx.str("reduce")?;
    let include_self = cx.bool("include_self")?;
    if cx.rank(idx) != 1 {
        return err("index_reduce needs a 1-D index");
    }
    let dt = cx.dtype(x);
    let (kind, identity) = match reduce.as_str() {
        "prod" => (ScatterKind::Mul, Scalar::Int(1)),
        "amax" => (ScatterKind::Max, dt.lowest()),
        "amin" => (ScatterKind::Min, dt.highest()),
        "mean" => (ScatterKind::Add, Scalar::Int(0)),
        r => return err(format!("index_reduce: unknown reduce {r:?} (prod, mean, amax, amin)")),
    };
    let src = cx.convert(src, dt)?;
    let sshape = cx.dims(src);
    let ib = cx.b.broadcast_in_dim(idx, &[dim as i64], sshape)?;
    let coords = full_coords(cx, ib, dim, cx.rank(x))?;
    // Where an index lands, and how many source values land there.
    let counts = {
        let zeros = cx.full(Scalar::Int(0), DType::I64, &cx.dims(x))?;
        let ones = cx.full(Scalar::Int(1), DType::I64, &cx.dims(src))?;
        elementwise_scatter(cx, zeros, coords, ones, ScatterKind::Add)?
    };
    let zero = cx.full_like(Scalar::Int(0), counts)?;
    let hit = cx.cmp(Direction::Gt, counts, zero)?;
    let base = if include_self {
        x
    } else {
        let id = cx.full_like(identity, x)?;
        cx.select(hit, id, x)?
    };
    let r = elementwise_scatter(cx, base, coords, src, kind)?;
    let r = if reduce != "mean" { r } else { mean_of(cx, r, x, counts, hit, include_self)? };
    if scalar {
        return one(cx.reshape(r, vec![])?);
    }
    one(r)
}

/// The sums `r` of an index reduction divided by the number of values in each (floored for
/// integers); where nothing landed, `x`.
fn mean_of(cx: &mut Ctx, r: ValueId, x: ValueId, counts: ValueId, hit: ValueId, include_self: bool) -> R<ValueId> {
    let dt = cx.dtype(x);
    let n = if include_self { cx.bin_c(O::Add, counts, 1.0)? } else { counts };
    let onev = cx.full_like(Scalar::Int(1), n)?;
    let n = cx.bin(O::Max, n, onev)?;
    let n = cx.convert(n, dt)?;
    let q = cx.bin(O::Div, r, n)?;
    let q = if dt.is_float() {
        q
    } else {
        // Floor: one less where the truncated quotient is inexact and negative.
        let back = cx.bin(O::Mul, q, n)?;
        let inexact = cx.cmp(Direction::Ne, back, r)?;
        let z = cx.full_like(Scalar::Int(0), r)?;
        let neg = cx.cmp(Direction::Lt, r, z)?;
        let fix = cx.bin(O::And, inexact, neg)?;
        let qm1 = cx.bin_c(O::Sub, q, 1.0)?;
        cx.select(fix, qm1, q)?
    };
    cx.select(hit, q, x)
}

fn slice_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let start = cx.opt_int("start")?;
    let end = cx.opt_int("end")?.filter(|&e| e < MAX_SIZE);
    let step = cx.int("step")?;
    one(slice_scatter_v(cx, x, src, dim, start, end, step)?)
}

fn select_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    if let Dim::Sym(_) = cx.dim_size(x, dim)? {
        // `h[:, k]`'s backward along a symbolic dim: the slice [k:k+1] (k = -1: the last).
        let i = cx.int("index")?;
        let s = unsqueeze_v(cx, src, dim as i64)?;
        return one(slice_scatter_v(cx, x, s, dim, Some(i), if i == -1 { None } else { Some(i + 1) }, 1)?);
    }
    let n = static_of(&cx.dim_size(x, dim)?, "select_scatter dim")?;
    let i = cx.int("index")?;
    let i = if i < 0 { i + n } else { i };
    if i < 0 || i >= n {
        return err(format!("select_scatter index out of range for size {n}"));
    }
    let s = unsqueeze_v(cx, src, dim as i64)?;
    one(slice_scatter_v(cx, x, s, dim, Some(i), Some(i + 1), 1)?)
}

/// `masked_scatter`: the true positions of `mask` (broadcast to `self`), in row-major order,
/// take the elements of `source` one after another.
fn masked_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let m = cx.t("mask")?;
    let src = cx.t("source")?;
    let shape = cx.dims(x);
    let mb = cx.broadcast_to(m, &shape)?;
    let src = cx.convert(src, cx.dtype(x))?;
    let n = cx.ty(x).num_elements_expr();
    let ns = cx.ty(src).num_elements_expr();
    let count = ns.as_const();
    if count == Some(0) {
        return one(x);
    }
    // A source of data-dependent size (`f(x[mask])`, the rows a mask selected) is read up to
    // its size: the slots past it belong to no true position of a mask that matches it, and
    // the gather clamps them into range.
    let flat_src = cx.reshape(src, vec![Dim::from_expr(ns)])?;
    let mflat = cx.reshape(mb, vec![Dim::from_expr(n)])?;
    let at = masked_slots(cx, mflat, count)?;
    let g = take_along(cx, flat_src, 0, at)?;
    let g = cx.reshape(g, shape)?;
    one(cx.select(mb, g, x)?)
}

/// The gradient of `masked_scatter`'s source: the output gradient at the true positions of
/// `mask` (broadcast to it), in row-major order, then zeros up to the source's size `sizes`,
/// as torch's `grad.masked_select(mask)` padded. Each true position adds its element to the
/// slot its running count names; the other positions add zero to a valid slot.
fn masked_scatter_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let m = cx.t("mask")?;
    let sizes = cx.size_dims("sizes")?;
    let shape = cx.dims(g);
    let mb = cx.broadcast_to(m, &shape)?;
    let mb = cx.truthy(mb)?;
    let mut count = 1i64;
    for d in &sizes {
        count = count.saturating_mul(static_of(d, "masked_scatter_backward: the source size")?);
    }
    if count == 0 {
        return one(cx.full(Scalar::Int(0), cx.dtype(g), &sizes)?);
    }
    let n = Dim::from_expr(cx.ty(g).num_elements_expr());
    let flat_g = cx.reshape(g, vec![n.clone()])?;
    let mflat = cx.reshape(mb, vec![n])?;
    let at = masked_slots(cx, mflat, Some(count))?;
    let z = cx.full_like(Scalar::Int(0), flat_g)?;
    let upd = cx.select(mflat, flat_g, z)?;
    let zeros = cx.full(Scalar::Int(0), cx.dtype(g), &[Dim::Static(count)])?;
    let r = scatter_rows(cx, zeros, at, upd, ScatterKind::Add)?;
    one(cx.reshape(r, sizes)?)
}

/// For a flat bool mask, the slot of `masked_scatter`'s source each position maps to: the
/// running count of true positions up to it, minus one, clamped to `0..count` (a false
/// position gets its neighbour's slot; callers mask it). A source of symbolic size (`count`
/// None) is clamped below only: a gather clamps the slot into its operand's range.
fn masked_slots(cx: &mut Ctx, mflat: ValueId, count: Option<i64>) -> R<ValueId> {
    let ones = cx.convert(mflat, DType::I64)?;
    let run = scan(cx, ones, 0, tpuc_ir::ScanKind::Sum)?;
    let at = cx.bin_c(O::Sub, run, 1.0)?;
    let lo = cx.full_like(Scalar::Int(0), at)?;
    let at = cx.bin(O::Max, at, lo)?;
    match count {
        Some(count) => {
            let hi = cx.full_like(Scalar::Int(count - 1), at)?;
            cx.bin(O::Min, at, hi)
        }
        None => Ok(at),
    }
}

/// `put`: `self` flattened, `source` written (or added) at `index` (negative from the end).
fn put(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let idx = cx.t("index")?;
    let src = cx.t("source")?;
    let accumulate = cx.bool("accumulate")?;
    let Some(n) = cx.ty(x).num_elements() else { return err("put needs a static shape") };
    let Some(k) = cx.ty(idx).num_elements() else { return err("put needs a static index") };
    if cx.ty(src).num_elements() != Some(k) {
        return err(format!("put: source {} and index {} differ in size", cx.ty(src), cx.ty(idx)));
    }
    let shape = cx.dims(x);
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    if k == 0 {
        return one(x);
    }
    let i = cx.reshape(idx, vec![Dim::Static(k)])?;
    let i = cx.convert(i, DType::I64)?;
    let zero = cx.full_like(Scalar::Int(0), i)?;
    let neg = cx.cmp(Direction::Lt, i, zero)?;
    let wrapped = cx.bin_c(O::Add, i, n as f64)?;
    let i = cx.select(neg, wrapped, i)?;
    let coords = cx.reshape(i, vec![Dim::Static(k), Dim::Static(1)])?;
    let s = cx.reshape(src, vec![Dim::Static(k)])?;
    let s = cx.convert(s, cx.dtype(x))?;
    let r = elementwise_scatter(cx, flat, coords, s, if accumulate { ScatterKind::Add } else { ScatterKind::Replace })?;
    one(cx.reshape(r, shape)?)
}

/// `nonzero_static`: the coordinates [size, rank] of the first `size` nonzero elements in
/// row-major order, rows past the count filled with `fill_value`. Slot s holds the element
/// whose running count of nonzeros first reaches s + 1: the number of positions whose count
/// is at most s.
fn nonzero_static(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.int("size")?;
    let fill = cx.int("fill_value")?;
    if size < 0 {
        return err(format!("nonzero_static size {size} must be non-negative"));
    }
    one(nonzero_coords(cx, x, size, fill, "nonzero_static")?)
}

/// `x[mask]` (`index.Tensor` with one boolean index, after `p` full slices): the mask's `k`
/// dims of `x` become one data-dependent dim at `p` holding the selected entries in row-major
/// order. Gathered from the mask's nonzero coordinates into a buffer of every entry, then bound
/// to their count. Mixing a mask with integer indices is refused.
pub fn index_by_mask(cx: &mut Ctx, x: ValueId, idxs: &[Option<ValueId>]) -> R<ValueId> {
    let what = "indexing with a boolean mask";
    let present: Vec<(usize, ValueId)> = idxs.iter().enumerate().filter_map(|(i, t)| t.map(|t| (i, t))).collect();
    let [(p, mask)] = present[..] else {
        return err(format!("{what} together with other index tensors is not supported"));
    };
    let xd = cx.static_dims(x, what)?;
    let md = cx.static_dims(mask, what)?;
    let k = md.len();
    if p + k > xd.len() || xd[p..p + k] != md[..] {
        return err(format!("{what}: the mask {} does not match the dims {p}.. of {}", cx.ty(mask), cx.ty(x)));
    }
    let n: i64 = md.iter().product();
    let rows = buffer_rows(n);
    let mut out: Vec<Dim> = xd[..p].iter().map(|&d| Dim::Static(d)).collect();
    out.push(Dim::Static(rows));
    out.extend(xd[p + k..].iter().map(|&d| Dim::Static(d)));
    let count = count_true(cx, mask)?;
    let picked = if n == 0 || xd.contains(&0) {
        cx.full(Scalar::Int(0), cx.dtype(x), &out)?
    } else {
        // Past the count the coordinates are 0: those rows are padding.
        let coords = nonzero_coords(cx, mask, rows, 0, what)?; // [rows, k]
        gather_coords(cx, x, p, k, coords, rows)?
    };
    bind_dim(cx, picked, p, count, 0, what)
}
