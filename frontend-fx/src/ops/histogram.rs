//! Histograms as torch computes them: `histogram` (over `bins` equal bins or given edges) and
//! `histogramdd` (`_histogramdd_bin_edges`, `_histogramdd_from_bin_cts`,
//! `_histogramdd_from_bin_tensors`). `histc`, with its own range rule, is in `reduce`.
//!
//! For a bin count, each dim's outer edges are `range` or the data's min and max, widened by
//! 0.5 each way when equal, and the edges are ATen's linspace between them in the input's
//! dtype (each point one fused multiply-add, reproduced in f64). An element's bin is the linear
//! estimate from the outer edges corrected against the neighbouring edges, so an element on
//! an edge lands in the bin that edge opens, exactly as the CPU kernel's local search does.
//! For given edges, the bin is the last edge at or below the element (a search over all
//! edges). Elements outside the outer edges are not counted; the last bin includes its right
//! edge. Counts are summed `weight`s when given; `density` divides by the total and then by
//! each dim's bin widths.

use crate::ops::build::*;
use tpuc_ir::{Direction, ReduceKind, ScatterKind};
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("histogram.bin_ct", histogram),
    ("histogram.bins_tensor", histogram_edges),
    ("_histogramdd_bin_edges.default", histogramdd_bin_edges),
    ("_histogramdd_from_bin_cts.default", histogramdd_from_bin_cts),
    ("_histogramdd_from_bin_tensors.default", histogramdd_from_bin_tensors),
];

/// One dim of a histogram: its values `[n]`, its edges `[bins + 1]`, and where each value
/// falls (`bin`, i64 `[n]`) and whether it is counted (`valid`, bool `[n]`).
struct Axis {
    edges: ValueId,
    bins: i64,
    bin: ValueId,
    valid: ValueId,
}

/// The input as `[n, d]` columns: a histogram's input is one column of all its elements, a
/// histogramdd's input `[..., d]` has `d` columns. Returns the columns, each `[n]`, and `n`.
fn columns(cx: &mut Ctx, x: ValueId, dd: bool) -> R<(Vec<ValueId>, SymExpr)> {
    let dt = cx.dtype(x);
    if !dt.is_float() {
        return err(format!("histogram needs a floating-point input, got {}", cx.ty(x)));
    }
    let dims = cx.dims(x);
    if !dd {
        let n = cx.ty(x).num_elements_expr();
        return Ok((vec![cx.reshape(x, vec![Dim::from_expr(n.clone())])?], n));
    }
    let d = match dims.last() {
        Some(Dim::Static(d)) if (1..=64).contains(d) => *d,
        _ => return err(format!("histogramdd needs an input [..., d] with a static d of 1 to 64, got {}", cx.ty(x))),
    };
    let n = dims[..dims.len() - 1].iter().fold(SymExpr::constant(1), |a, d| a.mul(&d.to_expr()));
    let table = cx.reshape(x, vec![Dim::from_expr(n.clone()), Dim::Static(d)])?;
    let mut cols = Vec::with_capacity(d as usize);
    for j in 0..d {
        let c = slice_static(cx, table, 1, j, j + 1, 1)?;
        cols.push(cx.reshape(c, vec![Dim::from_expr(n.clone())])?);
    }
    Ok((cols, n))
}

/// `range` as one `(min, max)` pair per dim (`None`: from the data).
fn ranges(cx: &Ctx, dims: usize) -> R<Vec<Option<(f64, f64)>>> {
    let r = match cx.opt("range")? {
        None => return Ok(vec![None; dims]),
        Some(Arg::Floats(r)) => r,
        Some(a) => return err(format!("histogram range must be a float list, got a {}", a.kind())),
    };
    if r.len() != 2 * dims {
        return err(format!("histogram range has {} entries for {dims} dim(s); it needs a min and a max per dim", r.len()));
    }
    r.chunks(2)
        .map(|p| {
            let (a, b) = (p[0], p[1]);
            if !(a.is_finite() && b.is_finite()) || a > b {
                return err(format!("histogram range [{a}, {b}] must be finite with min <= max"));
            }
            Ok(Some((a, b)))
        })
        .collect()
}

/// The bin count of each of `dims` dims (one count is repeated for every dim).
fn bin_counts(cx: &Ctx, dims: usize) -> R<Vec<i64>> {
    let bins = cx.ints("bins")?;
    let bins = if bins.len() == 1 { vec![bins[0]; dims] } else { bins };
    if bins.len() != dims {
        return err(format!("histogramdd has {} bin counts for {dims} dims", bins.len()));
    }
    if let Some(b) = bins.iter().find(|b| !(1..=MAX_TABLE).contains(*b)) {
        return err(format!("histogram bins {b} out of range"));
    }
    if bins.iter().try_fold(1i64, |a, &b| a.checked_mul(b)).is_none_or(|t| t > MAX_TABLE) {
        return err(format!("histogramdd of {bins:?} bins has more than {MAX_TABLE} cells"));
    }
    Ok(bins)
}

/// The `bins + 1` edges of one dim: the outer edges from `range` or the column's min and max,
/// then ATen's linspace between them.
fn linspace_edges(cx: &mut Ctx, col: ValueId, n: &SymExpr, bins: i64, range: Option<(f64, f64)>) -> R<ValueId> {
    let dt = cx.dtype(col);
    let (lo, hi) = match range {
        Some((a, b)) => {
            let (a, b) = if a == b { (a - 0.5, b + 0.5) } else { (a, b) };
            (cx.scalar(Scalar::Float(a), dt)?, cx.scalar(Scalar::Float(b), dt)?)
        }
        None if n.as_const() == Some(0) => (cx.scalar(Scalar::Float(0.0), dt)?, cx.scalar(Scalar::Float(1.0), dt)?),
        None => {
            let lo = cx.reduce(col, ReduceKind::Min, &[0], false)?;
            let hi = cx.reduce(col, ReduceKind::Max, &[0], false)?;
            let (lo, hi) = (cx.convert(lo, DType::F64)?, cx.convert(hi, DType::F64)?);
            let same = cx.cmp(Direction::Eq, lo, hi)?;
            let lo_w = cx.bin_c(O::Sub, lo, 0.5)?;
            let hi_w = cx.bin_c(O::Add, hi, 0.5)?;
            let lo = cx.select(same, lo_w, lo)?;
            let hi = cx.select(same, hi_w, hi)?;
            (cx.convert(lo, dt)?, cx.convert(hi, dt)?)
        }
    };
    // The step rounded to the dtype as ATen rounds it; divided in f64 because XLA may turn a
    // division by a constant into a multiplication by its (inexact) reciprocal.
    let span = cx.bin(O::Sub, hi, lo)?;
    let span = cx.convert(span, DType::F64)?;
    let step = cx.bin_c(O::Div, span, bins as f64)?;
    let step = cx.convert(step, dt)?;
    let ne = [Dim::Static(bins + 1)];
    let i = cx.iota(DType::I64, &ne, 0)?;
    let fi = cx.convert(i, DType::F64)?;
    let top = cx.full_like(Scalar::Int(bins), i)?;
    let rev = cx.bin(O::Sub, top, i)?;
    let frev = cx.convert(rev, DType::F64)?;
    let (lo64, hi64, step64) = (cx.convert(lo, DType::F64)?, cx.convert(hi, DType::F64)?, cx.convert(step, DType::F64)?);
    let (lob, hib, stepb) = (cx.broadcast_to(lo64, &ne)?, cx.broadcast_to(hi64, &ne)?, cx.broadcast_to(step64, &ne)?);
    let up = cx.bin(O::Mul, stepb, fi)?;
    let up = cx.bin(O::Add, lob, up)?;
    let down = cx.bin(O::Mul, stepb, frev)?;
    let down = cx.bin(O::Sub, hib, down)?;
    let half = cx.full_like(Scalar::Int((bins + 1) / 2), i)?;
    let first = cx.cmp(Direction::Lt, i, half)?;
    let edges = cx.select(first, up, down)?;
    cx.convert(edges, dt)
}

/// Edge `k` of `edges` as a scalar.
fn edge(cx: &mut Ctx, edges: ValueId, k: i64) -> R<ValueId> {
    let e = slice_static(cx, edges, 0, k, k + 1, 1)?;
    cx.reshape(e, vec![])
}

/// Whether each element of `col` lies within the outer edges, and those edges broadcast.
fn within(cx: &mut Ctx, col: ValueId, edges: ValueId, bins: i64) -> R<(ValueId, ValueId, ValueId)> {
    let shape = cx.dims(col);
    let e0 = edge(cx, edges, 0)?;
    let en = edge(cx, edges, bins)?;
    let (e0b, enb) = (cx.broadcast_to(e0, &shape)?, cx.broadcast_to(en, &shape)?);
    let ge = cx.cmp(Direction::Ge, col, e0b)?;
    let le = cx.cmp(Direction::Le, col, enb)?;
    Ok((cx.bin(O::And, ge, le)?, e0b, enb))
}

/// Bins over linspace edges: the linear estimate, then ATen's local search among the edges
/// `[est - 1, est + 2)`.
fn linear_axis(cx: &mut Ctx, col: ValueId, edges: ValueId, bins: i64) -> R<Axis> {
    let (valid, e0b, enb) = within(cx, col, edges, bins)?;
    let off = cx.bin(O::Sub, col, e0b)?;
    let off = cx.bin_c(O::Mul, off, bins as f64)?;
    let width = cx.bin(O::Sub, enb, e0b)?;
    let est = cx.bin(O::Div, off, width)?;
    let zero_f = cx.full_like(Scalar::Float(0.0), est)?;
    let top_f = cx.full_like(Scalar::Float(bins as f64), est)?;
    let est = cx.select(valid, est, zero_f)?;
    let est = cx.bin(O::Min, est, top_f)?;
    let pos = cx.convert(est, DType::I64)?;
    // bin = max(pos - 1, 0) - 1 + #{j in [pos - 1, pos + 2) within [0, bins] : edges[j] <= x}
    let one_i = cx.full_like(Scalar::Int(1), pos)?;
    let zero_i = cx.full_like(Scalar::Int(0), pos)?;
    let last_edge = cx.full_like(Scalar::Int(bins), pos)?;
    let pm1 = cx.bin(O::Sub, pos, one_i)?;
    let pos_min = cx.bin(O::Max, pm1, zero_i)?;
    let mut bin = cx.bin(O::Sub, pos_min, one_i)?;
    for k in -1..=1i64 {
        let kk = cx.full_like(Scalar::Int(k), pos)?;
        let j = cx.bin(O::Add, pos, kk)?;
        let lo_ok = cx.cmp(Direction::Ge, j, pos_min)?;
        let hi_ok = cx.cmp(Direction::Le, j, last_edge)?;
        let inside = cx.bin(O::And, lo_ok, hi_ok)?;
        let jc = cx.bin(O::Max, j, zero_i)?;
        let jc = cx.bin(O::Min, jc, last_edge)?;
        let ej = take_along(cx, edges, 0, jc)?;
        let below = cx.cmp(Direction::Le, ej, col)?;
        let hit = cx.bin(O::And, inside, below)?;
        let hit = cx.convert(hit, DType::I64)?;
        bin = cx.bin(O::Add, bin, hit)?;
    }
    Ok(Axis { edges, bins, bin, valid })
}

/// Bins over given increasing edges `[k]`: the number of edges at or below each element,
/// less one.
fn search_axis(cx: &mut Ctx, col: ValueId, edges: ValueId) -> R<Axis> {
    let dt = cx.dtype(col);
    if cx.dtype(edges) != dt {
        return err(format!("histogram edges {} must have the input's dtype {}", cx.ty(edges), dt.name()));
    }
    let k = match cx.static_dims(edges, "histogram bins")?.as_slice() {
        [k] if *k >= 2 => *k,
        _ => return err(format!("histogram bins must be a 1-D tensor of at least 2 static edges, got {}", cx.ty(edges))),
    };
    let shape = cx.dims(col);
    if shape[0].as_static().is_some_and(|n| n.saturating_mul(k) > MAX_TABLE) {
        return err(format!("histogram of {} elements over {k} edges: the search table exceeds {MAX_TABLE} entries", shape[0]));
    }
    let (valid, _, _) = within(cx, col, edges, k - 1)?;
    let table = [shape[0].clone(), Dim::Static(k)];
    let xs = cx.reshape(col, vec![shape[0].clone(), Dim::Static(1)])?;
    let xs = cx.broadcast_to(xs, &table)?;
    let es = cx.reshape(edges, vec![Dim::Static(1), Dim::Static(k)])?;
    let es = cx.broadcast_to(es, &table)?;
    let below = cx.cmp(Direction::Le, es, xs)?;
    let below = cx.convert(below, DType::I64)?;
    let count = cx.reduce(below, ReduceKind::Sum, &[1], false)?;
    let one_i = cx.full_like(Scalar::Int(1), count)?;
    let bin = cx.bin(O::Sub, count, one_i)?;
    Ok(Axis { edges, bins: k - 1, bin, valid })
}

/// The histogram over `axes`: each counted element's `weight` (or 1) added into its cell,
/// shaped `[bins...]`, then `density`'s normalization.
fn count(cx: &mut Ctx, axes: &[Axis], n: &SymExpr, dt: DType) -> R<ValueId> {
    let shape = vec![Dim::from_expr(n.clone())];
    let mut cell = None;
    let mut valid = None;
    for a in axes {
        let zero_i = cx.full_like(Scalar::Int(0), a.bin)?;
        let last = cx.full_like(Scalar::Int(a.bins - 1), a.bin)?;
        let b = cx.bin(O::Min, a.bin, last)?;
        let b = cx.bin(O::Max, b, zero_i)?;
        cell = Some(match cell {
            None => b,
            Some(c) => {
                let c = cx.bin_c(O::Mul, c, a.bins as f64)?;
                cx.bin(O::Add, c, b)?
            }
        });
        valid = Some(match valid {
            None => a.valid,
            Some(v) => cx.bin(O::And, v, a.valid)?,
        });
    }
    let (Some(cell), Some(valid)) = (cell, valid) else { return err("histogram over no dims") };
    let zero_i = cx.full_like(Scalar::Int(0), cell)?;
    let cell = cx.select(valid, cell, zero_i)?;
    let w = match cx.opt_t("weight")? {
        None => cx.full(Scalar::Int(1), dt, &shape)?,
        Some(w) => {
            if cx.ty(w).num_elements_expr() != *n {
                return err(format!("histogram weight {} must have one entry per counted element ({n})", cx.ty(w)));
            }
            let w = cx.reshape(w, shape.clone())?;
            cx.convert(w, dt)?
        }
    };
    let zeros = cx.full(Scalar::Int(0), dt, &shape)?;
    let upd = cx.select(valid, w, zeros)?;
    let cells: i64 = axes.iter().map(|a| a.bins).product();
    let init = cx.full(Scalar::Int(0), dt, &[Dim::Static(cells)])?;
    let flat = scatter_rows(cx, init, cell, upd, ScatterKind::Add)?;
    let out: Vec<Dim> = axes.iter().map(|a| Dim::Static(a.bins)).collect();
    let mut hist = cx.reshape(flat, out.clone())?;
    if cx.bool("density")? {
        let all: Vec<usize> = (0..axes.len()).collect();
        let total = cx.reduce(hist, ReduceKind::Sum, &all, false)?;
        let total = cx.broadcast_to(total, &out)?;
        hist = cx.bin(O::Div, hist, total)?;
        for (d, a) in axes.iter().enumerate() {
            let right = slice_static(cx, a.edges, 0, 1, a.bins + 1, 1)?;
            let left = slice_static(cx, a.edges, 0, 0, a.bins, 1)?;
            let widths = cx.bin(O::Sub, right, left)?;
            let mut along = vec![Dim::Static(1); axes.len()];
            along[d] = Dim::Static(a.bins);
            let widths = cx.reshape(widths, along)?;
            let widths = cx.broadcast_to(widths, &out)?;
            hist = cx.bin(O::Div, hist, widths)?;
        }
    }
    Ok(hist)
}

/// The linspace edges of every dim of a bin-count histogram.
fn bin_ct_axes(cx: &mut Ctx, cols: &[ValueId], n: &SymExpr, bins: &[i64]) -> R<Vec<Axis>> {
    let ranges = ranges(cx, cols.len())?;
    let mut axes = Vec::with_capacity(cols.len());
    for ((&col, &b), r) in cols.iter().zip(bins).zip(ranges) {
        let edges = linspace_edges(cx, col, n, b, r)?;
        axes.push(linear_axis(cx, col, edges, b)?);
    }
    Ok(axes)
}

fn histogram(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (cols, n) = columns(cx, x, false)?;
    let bins = cx.int("bins")?;
    if !(1..=MAX_TABLE).contains(&bins) {
        return err(format!("histogram bins {bins} out of range"));
    }
    let axes = bin_ct_axes(cx, &cols, &n, &[bins])?;
    let hist = count(cx, &axes, &n, cx.dtype(x))?;
    Ok(vec![Val::Tensor(hist), Val::Tensor(axes[0].edges)])
}

fn histogram_edges(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let edges = cx.t("bins")?;
    let (cols, n) = columns(cx, x, false)?;
    let axes = vec![search_axis(cx, cols[0], edges)?];
    let hist = count(cx, &axes, &n, cx.dtype(x))?;
    Ok(vec![Val::Tensor(hist), Val::Tensor(edges)])
}

fn histogramdd_bin_edges(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (cols, n) = columns(cx, x, true)?;
    let bins = bin_counts(cx, cols.len())?;
    let ranges = ranges(cx, cols.len())?;
    let mut edges = Vec::with_capacity(cols.len());
    for ((&col, &b), r) in cols.iter().zip(&bins).zip(ranges) {
        edges.push(linspace_edges(cx, col, &n, b, r)?);
    }
    if edges.len() != cx.outs.len() {
        return err(format!("histogramdd gives {} edge tensors, the node has {} outputs", edges.len(), cx.outs.len()));
    }
    Ok(edges.into_iter().map(Val::Tensor).collect())
}

fn histogramdd_from_bin_cts(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (cols, n) = columns(cx, x, true)?;
    let bins = bin_counts(cx, cols.len())?;
    let axes = bin_ct_axes(cx, &cols, &n, &bins)?;
    one(count(cx, &axes, &n, cx.dtype(x))?)
}

fn histogramdd_from_bin_tensors(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (cols, n) = columns(cx, x, true)?;
    let edges = cx.tensors("bins")?;
    if edges.len() != cols.len() {
        return err(format!("histogramdd has {} edge tensors for {} dims", edges.len(), cols.len()));
    }
    let mut axes = Vec::with_capacity(cols.len());
    for (&col, &e) in cols.iter().zip(&edges) {
        axes.push(search_axis(cx, col, e)?);
    }
    if axes.iter().map(|a| a.bins).try_fold(1i64, |a, b| a.checked_mul(b)).is_none_or(|t| t > MAX_TABLE) {
        return err(format!("histogramdd has more than {MAX_TABLE} cells"));
    }
    one(count(cx, &axes, &n, cx.dtype(x))?)
}
