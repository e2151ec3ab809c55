//! Shape builders: static and symbolic slices, `take_along` (a gather along one dim), concatenation,
//! selecting one index, adding and removing unit dims.

use super::arith::sym_range;
use super::ctx::*;
use tpuc_ir::Opcode as O;

/// Elements `start..end` by `step` along `dim` (start/end already within `0..=size`).
pub fn slice_static(cx: &mut Ctx, x: ValueId, dim: usize, start: i64, end: i64, step: i64) -> R<ValueId> {
    let dims = cx.dims(x);
    let n = match dims.get(dim) {
        Some(Dim::Static(n)) => *n,
        // A static cut of a symbolic dim (`topk`): the dim must reach `end`, checked where
        // its size is known.
        Some(_) if end != i64::MAX && start >= 0 && end >= start => i64::MAX,
        Some(_) => return err("internal: static slice of a symbolic dim"),
        None => return err(format!("dim {dim} out of range")),
    };
    if start == 0 && end >= n && step == 1 {
        return Ok(x);
    }
    let mut s = Vec::new();
    let mut l = Vec::new();
    let mut st = Vec::new();
    for (i, d) in dims.iter().enumerate() {
        if i == dim {
            s.push(start);
            l.push(end.max(start));
            st.push(step);
        } else {
            match d {
                Dim::Static(m) => {
                    s.push(0);
                    l.push(*m);
                }
                Dim::Sym(_) => {
                    s.push(0);
                    l.push(i64::MAX);
                }
            }
            st.push(1);
        }
    }
    Ok(cx.b.slice(x, &s, &l, &st)?)
}

/// Rows of `x` along `dim` at the positions of the 1-D integer `idx`.
pub fn take_along(cx: &mut Ctx, x: ValueId, dim: usize, idx: ValueId) -> R<ValueId> {
    let dims = cx.dims(x);
    let r = dims.len();
    let mut slice_sizes = Vec::with_capacity(r);
    for (i, d) in dims.iter().enumerate() {
        slice_sizes.push(if i == dim { 1 } else { d.as_static().unwrap_or(-1) });
    }
    let n = cx.dims(idx);
    let idx2 = {
        let mut d2 = n.clone();
        d2.push(Dim::Static(1));
        cx.reshape(idx, d2)?
    };
    let ib = n.len() as i64; // index batch rank
    // output: dims before `dim`, index dims, dims after
    let offset_dims: Vec<i64> = (0..r as i64 - 1).map(|i| if i < dim as i64 { i } else { i + ib }).collect();
    let dims = GatherDims {
        offset_dims,
        collapsed_slice_dims: vec![dim as i64],
        start_index_map: vec![dim as i64],
        index_vector_dim: ib,
        slice_sizes,
        ..GatherDims::default()
    };
    Ok(cx.b.gather(x, idx2, dims)?)
}

/// A slice along `dim` with ATen's `slice.Tensor` semantics (None, negative and out-of-range
/// bounds), static or symbolic.
pub fn slice_any(cx: &mut Ctx, x: ValueId, dim: usize, start: Option<SymExpr>, end: Option<SymExpr>, step: i64) -> R<ValueId> {
    if step <= 0 {
        return err(format!("slice step must be positive, got {step}"));
    }
    let dims = cx.dims(x);
    let size = dims.get(dim).cloned().ok_or_else(|| OpError::Refused(format!("dim {dim} out of range")))?;
    let const_of = |e: &Option<SymExpr>| e.as_ref().map(|e| e.as_const());
    if let Dim::Static(n) = size {
        let clampi = |v: i64| -> i64 {
            let v = if v < 0 { v.saturating_add(n) } else { v };
            v.clamp(0, n)
        };
        let s = match const_of(&start) {
            None => 0,
            Some(Some(v)) => clampi(v),
            Some(None) => {
                // A span between sizes read from the data (a split at such sizes): the
                // elements from `start` up to `end`, gathered (torch checks both in range).
                let (Some(start), Some(end)) = (start, end) else { return err("slice start is symbolic on a static dim") };
                return take_range(cx, x, dim, start, end, step);
            }
        };
        let e = match const_of(&end) {
            None => n,
            Some(Some(v)) => clampi(v),
            Some(None) => {
                // a symbolic end on a static dim: use the recorded result size when static;
                // else (`buffer[:, :s]`, a position table cut to the sequence length) the
                // elements `s, s + step, ..` below the end, gathered (torch guards end <= n)
                match cx.out_type(0).and_then(|t| t.dims.get(dim).and_then(Dim::as_static)) {
                    Some(len) => (s + len * step).min(n),
                    None => {
                        let end = end.expect("a symbolic end");
                        return take_range(cx, x, dim, SymExpr::constant(s), end, step);
                    }
                }
            }
        };
        return slice_static(cx, x, dim, s, e.max(s), step);
    }
    // Symbolic dim.
    let n = size.to_expr();
    let s = match const_of(&start) {
        None => Some(0),
        Some(Some(v)) => Some(v),
        Some(None) => None,
    };
    let end_expr = match &end {
        None => n.clone(),
        Some(e) => match e.as_const() {
            Some(v) if v >= MAX_SIZE => n.clone(),
            Some(v) if v < 0 => n.add(&SymExpr::constant(v)),
            _ => e.clone(),
        },
    };
    match s {
        Some(0) if end_expr == n && step == 1 => Ok(x),
        Some(s) if s >= 0 => take_range(cx, x, dim, SymExpr::constant(s), end_expr, step),
        Some(s) if s < 0 && end_expr == n && step == 1 => {
            // the last -s elements: reverse, take the first -s, reverse back
            let k = s.checked_neg().ok_or("slice start out of range")?;
            let rev = cx.b.build1(O::Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(vec![dim as i64])), None)?;
            let idx = cx.iota(DType::I64, &[Dim::Static(k)], 0)?;
            let g = take_along(cx, rev, dim, idx)?;
            Ok(cx.b.build1(O::Reverse, &[g], Attrs::new().with("dimensions", Attr::Ints(vec![dim as i64])), None)?)
        }
        _ => err(format!("slicing the symbolic dim {n} from {start:?} to {end:?} is not supported")),
    }
}

/// Concatenation with ATen's promotion; legacy empty 1-D tensors are skipped.
pub fn cat_v(cx: &mut Ctx, xs: &[ValueId], dim: i64) -> R<ValueId> {
    let keep: Vec<ValueId> = {
        let max_rank = xs.iter().map(|&x| cx.rank(x)).max().unwrap_or(0);
        xs.iter()
            .copied()
            .filter(|&x| !(max_rank > 1 && cx.rank(x) == 1 && cx.dims(x).first() == Some(&Dim::Static(0))))
            .collect()
    };
    let Some(&first) = keep.first() else {
        return match xs.first() {
            Some(&x) => Ok(x),
            None => err("cat of an empty list"),
        };
    };
    let ops: Vec<Operand> = keep.iter().map(|&x| Operand::T(x)).collect();
    let dt = cx.result_type(&ops)?;
    let r = cx.rank(first);
    let d = norm_dim(dim, r)?;
    let mut conv = Vec::with_capacity(keep.len());
    for &x in &keep {
        if cx.rank(x) != r {
            return err(format!("cat of tensors of different ranks: {} and {}", cx.ty(first), cx.ty(x)));
        }
        conv.push(cx.convert(x, dt)?);
    }
    if r == 0 {
        return err("cannot concatenate zero-dim tensors");
    }
    Ok(cx.b.concatenate(&conv, d as i64)?)
}

/// `x[..., index, ...]` along `dim` (the dim removed).
pub fn select_v(cx: &mut Ctx, x: ValueId, dim: usize, index: i64) -> R<ValueId> {
    let dims = cx.dims(x);
    let s = match dims.get(dim) {
        Some(Dim::Static(n)) => {
            let i = if index < 0 { index + n } else { index };
            if i < 0 || i >= *n {
                return err(format!("index {index} out of range for dim of size {n}"));
            }
            slice_static(cx, x, dim, i, i + 1, 1)?
        }
        Some(_) if index >= 0 => slice_any(cx, x, dim, Some(SymExpr::constant(index)), Some(SymExpr::constant(index + 1)), 1)?,
        Some(d) => {
            let d = d.to_expr();
            slice_any(cx, x, dim, Some(d.add(&SymExpr::constant(index))), None, 1)
                .or_else(|_| {
                    // x[-k] of a symbolic dim: reverse then take k-1
                    let rev = cx.b.build1(O::Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(vec![dim as i64])), None)?;
                    let i = cx.iota(DType::I64, &[Dim::Static(1)], 0)?;
                    let i = cx.bin_c(O::Add, i, (-index - 1) as f64)?;
                    take_along(cx, rev, dim, i)
                })?
        }
        None => return err(format!("dim {dim} out of range")),
    };
    squeeze_v(cx, s, Some(&[dim as i64]))
}

/// `x[start:end:step]` along `dim` for a symbolic `end`: the positions, a symbolic range,
/// gathered.
fn take_range(cx: &mut Ctx, x: ValueId, dim: usize, start: SymExpr, end: SymExpr, step: i64) -> R<ValueId> {
    let idx = sym_range(cx, &start, end, step)?;
    take_along(cx, x, dim, idx)
}

pub fn static_dim_size(cx: &Ctx, x: ValueId, dim: usize, what: &str) -> R<i64> {
    match cx.dims(x).get(dim) {
        Some(Dim::Static(n)) => Ok(*n),
        Some(d) => err(format!("{what} of the symbolic dim {d} is not supported")),
        None => err(format!("dim {dim} out of range")),
    }
}

pub fn unsqueeze_v(cx: &mut Ctx, x: ValueId, d: i64) -> R<ValueId> {
    let mut dims = cx.dims(x);
    let d = norm_dim(d, dims.len() + 1)?;
    dims.insert(d, Dim::Static(1));
    cx.reshape(x, dims)
}

/// Removes the listed dims that have size 1 (others stay: squeezing a non-1 dim is a no-op).
pub fn squeeze_v(cx: &mut Ctx, x: ValueId, which: Option<&[i64]>) -> R<ValueId> {
    let dims = cx.dims(x);
    let r = dims.len();
    let sel: Vec<usize> = match which {
        None => (0..r).collect(),
        Some(ds) => ds.iter().map(|&d| norm_dim(d, r)).collect::<R<_>>()?,
    };
    let kept: Vec<Dim> = dims.iter().enumerate().filter(|(i, d)| !(sel.contains(i) && d.is_one())).map(|(_, d)| d.clone()).collect();
    cx.reshape(x, kept)
}
