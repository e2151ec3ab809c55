//! Gather and scatter builders: per-element coordinates, gathers along a dim or at coordinates,
//! elementwise and row scatters, slice scatters, and the positions and coordinates of nonzero
//! entries (into a buffer of every entry, for the data-dependent ops).

use super::ctx::*;
use super::reduce::*;
use super::shape::*;
use tpuc_ir::Opcode as O;
use tpuc_ir::ScatterKind;

/// `[*idx, rank]` coordinates: `idx` along `dim`, iotas along the others.
pub fn full_coords(cx: &mut Ctx, idx: ValueId, dim: usize, rank: usize) -> R<ValueId> {
    coords(cx, idx, dim, &(0..rank as i64).collect::<Vec<_>>())
}

/// `torch.gather(x, dim, idx)`: `x` at `idx` along `dim`, element by element (the result has
/// `idx`'s shape). Dims other than `dim` where `idx` spans `x` whole are batch dims of the
/// gather; the rest take iota coordinates.
pub fn gather_along(cx: &mut Ctx, x: ValueId, idx: ValueId, dim: usize) -> R<ValueId> {
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    let r = xd.len();
    if id.len() != r || dim >= r {
        return err(format!("index {} must have the rank of {} to gather along dim {dim}", cx.ty(idx), cx.ty(x)));
    }
    let batch: Vec<i64> = (0..r).filter(|&j| j != dim && xd[j] == id[j]).map(|j| j as i64).collect();
    let indexed: Vec<i64> = (0..r as i64).filter(|j| !batch.contains(j)).collect();
    let coords = coords(cx, idx, dim, &indexed)?;
    let dims = GatherDims {
        offset_dims: vec![],
        collapsed_slice_dims: indexed.clone(),
        operand_batching_dims: batch.clone(),
        start_indices_batching_dims: batch,
        start_index_map: indexed,
        index_vector_dim: r as i64,
        slice_sizes: vec![1; r],
    };
    Ok(cx.b.gather(x, coords, dims)?)
}

/// Scatters `updates` into `x` one element per point: `coords` is `updates`' shape with a last
/// dim of `rank(x)` full coordinates (every operand dim inserted, no window).
pub fn elementwise_scatter(cx: &mut Ctx, x: ValueId, coords: ValueId, updates: ValueId, kind: ScatterKind) -> R<ValueId> {
    let dims = ScatterDims::points(cx.rank(x));
    Ok(cx.b.scatter(x, coords, updates, dims, kind)?)
}

/// `x` [N, rest...] with the rows of `updates` [*I, rest...] combined by `kind` into the rows
/// the integer `idx` [*I] names (along dim 0).
pub fn scatter_rows(cx: &mut Ctx, x: ValueId, idx: ValueId, updates: ValueId, kind: ScatterKind) -> R<ValueId> {
    let nb = cx.rank(idx) as i64;
    let window: Vec<i64> = (nb..cx.rank(updates) as i64).collect();
    let mut col = cx.dims(idx);
    col.push(Dim::Static(1));
    let coords = cx.reshape(idx, col)?;
    let dims = ScatterDims {
        update_window_dims: window,
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: nb,
        ..ScatterDims::default()
    };
    Ok(cx.b.scatter(x, coords, updates, dims, kind)?)
}

/// `x` at the coordinates `coords` [rows, k] of its dims `at..at + k`, the rows in their place
/// (`x[mask]` with the mask's nonzero coordinates).
pub fn gather_coords(cx: &mut Ctx, x: ValueId, at: usize, k: usize, coords: ValueId, rows: i64) -> R<ValueId> {
    let ai = AdvIndex { pos: (at..at + k).collect(), bshape: vec![Dim::Static(rows)], coords, batch_at: at };
    gather_adv(cx, x, &ai)
}

/// The flat positions [size] of the first `size` nonzero elements of `x` (static shape, `n`
/// elements) in row-major order, `n` where there are fewer. Linear in `n`: each nonzero
/// element's slot is the running count of nonzeros before it, and its position is scattered
/// there; every other element (a zero, or a nonzero past `size`) goes to one extra slot that is
/// cut off after.
pub fn nonzero_positions(cx: &mut Ctx, x: ValueId, size: i64, what: &str) -> R<ValueId> {
    let dims = cx.static_dims(x, what)?;
    let n: i64 = dims.iter().product();
    let nz = cx.truthy(x)?;
    let flat = cx.reshape(nz, vec![Dim::Static(n)])?;
    let ones = cx.convert(flat, DType::I64)?;
    let run = scan(cx, ones, 0, tpuc_ir::ScanKind::Sum)?; // [n], inclusive
    let slot = cx.bin(O::Sub, run, ones)?;
    let size_v = cx.full_like(Scalar::Int(size), slot)?;
    let kept = cx.cmp(Direction::Lt, slot, size_v)?;
    let kept = cx.bin(O::And, kept, flat)?;
    let slot = cx.select(kept, slot, size_v)?;
    let coords = cx.reshape(slot, vec![Dim::Static(n), Dim::Static(1)])?;
    let position = cx.iota(DType::I64, &[Dim::Static(n)], 0)?;
    let buf = cx.full(Scalar::Int(n), DType::I64, &[Dim::Static(size + 1)])?;
    let placed = elementwise_scatter(cx, buf, coords, position, ScatterKind::Replace)?;
    Ok(cx.b.slice(placed, &[0], &[size], &[1])?)
}

/// The coordinates [size, rank] of the first `size` nonzero elements of `x`, `fill` past them.
pub fn nonzero_coords(cx: &mut Ctx, x: ValueId, size: i64, fill: i64, what: &str) -> R<ValueId> {
    let dims = cx.static_dims(x, what)?;
    let r = dims.len();
    let n: i64 = dims.iter().product();
    if size == 0 || n == 0 {
        return cx.full(Scalar::Int(fill), DType::I64, &[Dim::Static(size), Dim::Static(r as i64)]);
    }
    let pos = nonzero_positions(cx, x, size, what)?; // [size]: flat position, n when none
    // Unravel into coordinates [size, rank].
    let mut cols = Vec::with_capacity(r.max(1));
    let mut stride = n;
    for &d in &dims {
        stride /= d.max(1);
        let q = cx.bin_c(O::Div, pos, stride.max(1) as f64)?;
        let dv = cx.full_like(Scalar::Int(d.max(1)), q)?;
        let c = cx.bin(O::Rem, q, dv)?;
        cols.push(cx.reshape(c, vec![Dim::Static(size), Dim::Static(1)])?);
    }
    let coords = if r == 0 {
        cx.full(Scalar::Int(0), DType::I64, &[Dim::Static(size), Dim::Static(0)])?
    } else {
        cat_v(cx, &cols, 1)?
    };
    let nv = cx.full(Scalar::Int(n), DType::I64, &[Dim::Static(size)])?;
    let none = cx.cmp(Direction::Ge, pos, nv)?;
    let none = cx.b.broadcast_in_dim(none, &[0], vec![Dim::Static(size), Dim::Static(r as i64)])?;
    let f = cx.full_like(Scalar::Int(fill), coords)?;
    cx.select(none, f, coords)
}

/// `self` with `self[..., start:end:step, ...] = src` along `dim`.
pub fn slice_scatter_v(cx: &mut Ctx, x: ValueId, src: ValueId, dim: usize, start: Option<i64>, end: Option<i64>, step: i64) -> R<ValueId> {
    let dims = cx.dims(x);
    if let Some(Dim::Sym(n)) = dims.get(dim) {
        return slice_scatter_sym(cx, x, src, dim, n.clone(), start, end, step);
    }
    let n = static_of(dims.get(dim).ok_or("dim out of range")?, "slice_scatter dim")?;
    if step <= 0 {
        return err("slice_scatter step must be positive");
    }
    let clampi = |v: i64| (if v < 0 { v.saturating_add(n) } else { v }).clamp(0, n);
    let s = start.map_or(0, clampi);
    let e = end.map_or(n, clampi).max(s);
    let len = (e - s + step - 1) / step;
    let sd = cx.dims(src);
    if sd.get(dim) != Some(&Dim::Static(len)) || sd.len() != dims.len() {
        return err(format!("slice_scatter src {} does not fit the slice of length {len}", cx.ty(src)));
    }
    if len == 0 {
        return Ok(x);
    }
    let dt = cx.dtype(x);
    let src = cx.convert(src, dt)?;
    let r = dims.len();
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    let mut interior = vec![0i64; r];
    lo[dim] = s;
    hi[dim] = n - (s + (len - 1) * step + 1);
    interior[dim] = step - 1;
    let zero = cx.scalar(Scalar::Int(0), dt)?;
    let padded = cx.b.pad(src, zero, &lo, &hi, &interior)?;
    // mask of the written positions along dim
    let io = cx.iota(DType::I64, &[Dim::Static(n)], 0)?;
    let sv = cx.full_like(Scalar::Int(s), io)?;
    let ev = cx.full_like(Scalar::Int(s + (len - 1) * step + 1), io)?;
    let ge = cx.cmp(Direction::Ge, io, sv)?;
    let lt = cx.cmp(Direction::Lt, io, ev)?;
    let mut m = cx.bin(O::And, ge, lt)?;
    if step > 1 {
        let off = cx.bin(O::Sub, io, sv)?;
        let st = cx.full_like(Scalar::Int(step), io)?;
        let rem = cx.bin(O::Rem, off, st)?;
        let z = cx.full_like(Scalar::Int(0), io)?;
        let on = cx.cmp(Direction::Eq, rem, z)?;
        m = cx.bin(O::And, m, on)?;
    }
    let mb = cx.b.broadcast_in_dim(m, &[dim as i64], dims)?;
    cx.select(mb, padded, x)
}

/// `[*idx, dims.len()]` coordinates for the operand dims `dims`: `idx` along `dim`, iotas along
/// the others.
fn coords(cx: &mut Ctx, idx: ValueId, dim: usize, dims: &[i64]) -> R<ValueId> {
    let shape = cx.dims(idx);
    let mut col = shape.clone();
    col.push(Dim::Static(1));
    let mut parts = Vec::with_capacity(dims.len());
    for &j in dims {
        let j = j as usize;
        let v = if j == dim { cx.convert(idx, DType::I64)? } else { cx.iota(DType::I64, &shape, j)? };
        parts.push(cx.reshape(v, col.clone())?);
    }
    Ok(if parts.len() == 1 { parts[0] } else { cx.b.concatenate(&parts, shape.len() as i64)? })
}

/// `slice_scatter` along a symbolic dim of size `n` with step 1 (what a slice's backward
/// writes: `h[:, k:]`, `h[:, 1:-1]`, `h[:, -1]`). Bounds count from the start (`k >= 0`) or
/// from the end (`k < 0`, i.e. `n + k`), so every position test and source index is a constant
/// offset from an iota or from the reversed iota `n - 1 - i`: position `i` takes `src[i - start]`
/// inside `[start, end)` (a gather) and keeps `x` outside it.
#[allow(clippy::too_many_arguments)]
pub fn slice_scatter_sym(cx: &mut Ctx, x: ValueId, src: ValueId, dim: usize, n: SymExpr, start: Option<i64>, end: Option<i64>, step: i64) -> R<ValueId> {
    let s = start.unwrap_or(0);
    let show = || format!("[{}:{}:{step}]", start.map_or(String::new(), |v| v.to_string()), end.map_or(String::new(), |v| v.to_string()));
    if step != 1 {
        return err(format!("slice_scatter along the symbolic dim {n} takes step 1, got {}", show()));
    }
    let at = |k: i64| if k < 0 { n.add(&SymExpr::constant(k)) } else { SymExpr::constant(k) };
    let len = end.map_or(n.clone(), at).sub(&at(s));
    let (dims, sd) = (cx.dims(x), cx.dims(src));
    let mut want = dims.clone();
    want[dim] = Dim::from_expr(len);
    if sd != want {
        return err(format!("slice_scatter src {} does not fit the slice {} of {}", cx.ty(src), show(), cx.ty(x)));
    }
    let src = cx.convert(src, cx.dtype(x))?;
    if s == 0 && end.is_none() {
        return Ok(src);
    }
    let len_n = [dims[dim].clone()];
    let fwd = cx.iota(DType::I64, &len_n, 0)?;
    let rev = cx.b.build1(O::Reverse, &[fwd], Attrs::new().with("dimensions", Attr::Ints(vec![0])), None)?;
    let cmp = |cx: &mut Ctx, dir: Direction, v: ValueId, k: i64| -> R<ValueId> {
        let c = cx.full_like(Scalar::Int(k), v)?;
        cx.cmp(dir, v, c)
    };
    // i >= start, and the source index i - start
    let (lo, idx) = if s >= 0 {
        (cmp(cx, Direction::Ge, fwd, s)?, cx.bin_c(O::Sub, fwd, s as f64)?)
    } else {
        // i >= n + s  <=>  n - 1 - i < -s;  i - (n + s) = -(n - 1 - i) - 1 - s
        let neg = cx.un(O::Neg, rev)?;
        (cmp(cx, Direction::Lt, rev, -s)?, cx.bin_c(O::Sub, neg, (1 + s) as f64)?)
    };
    let mask = match end {
        None => lo,
        Some(e) => {
            // i < e, or i < n + e  <=>  n - 1 - i >= -e
            let hi = if e >= 0 { cmp(cx, Direction::Lt, fwd, e)? } else { cmp(cx, Direction::Ge, rev, -e)? };
            cx.bin(O::And, lo, hi)?
        }
    };
    let taken = take_along(cx, src, dim, idx)?;
    let mb = cx.b.broadcast_in_dim(mask, &[dim as i64], dims)?;
    cx.select(mb, taken, x)
}

/// Advanced-indexing layout: the indexed dims, the broadcast index shape and the coordinate
/// tensor `[*B, |P|]` (negative indices wrapped for static dims).
pub struct AdvIndex {
    pub pos: Vec<usize>,
    pub bshape: Vec<Dim>,
    pub coords: ValueId,
    /// output position of the first batch dim
    pub batch_at: usize,
}

/// Positions of the non-indexed operand dims in the result of advanced indexing.
pub fn window_positions(rank: usize, ai: &AdvIndex) -> Vec<i64> {
    let nb = ai.bshape.len();
    let mut out = Vec::new();
    let mut k = 0usize; // position among non-indexed dims
    for d in 0..rank {
        if ai.pos.contains(&d) {
            continue;
        }
        let at = if k < ai.batch_at { k } else { k + nb };
        out.push(at as i64);
        k += 1;
    }
    out
}

/// The gather of advanced indexing: `x` at `ai.coords`, the index dims at `ai.batch_at`.
pub fn gather_adv(cx: &mut Ctx, x: ValueId, ai: &AdvIndex) -> R<ValueId> {
    let dims = cx.dims(x);
    let r = dims.len();
    let slice_sizes: Vec<i64> =
        dims.iter().enumerate().map(|(i, d)| if ai.pos.contains(&i) { 1 } else { d.as_static().unwrap_or(-1) }).collect();
    let pos: Vec<i64> = ai.pos.iter().map(|&p| p as i64).collect();
    let dims = GatherDims {
        offset_dims: window_positions(r, ai),
        collapsed_slice_dims: pos.clone(),
        start_index_map: pos,
        index_vector_dim: ai.bshape.len() as i64,
        slice_sizes,
        ..GatherDims::default()
    };
    Ok(cx.b.gather(x, ai.coords, dims)?)
}
