//! Shape ops: views (view, reshape, permute, expand, squeeze, ...), copies and dtype casts,
//! slicing and joining, padding, repetition.
//!
//! Views become value semantics: the IR has no aliasing, and torch.export graphs are
//! functional. Sizes may be symbolic; a slice of a symbolic dim that is not taken whole
//! becomes a gather with an iota index (the IR's `slice` needs static bounds).

use super::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("view.default", view),
    ("view_copy.default", view),
    ("_unsafe_view.default", view),
    ("reshape.default", reshape),
    ("_reshape_alias.default", view),
    ("_reshape_alias_copy.default", view),
    ("alias.default", identity),
    ("alias_copy.default", identity),
    ("clone.default", identity),
    ("contiguous.default", identity),
    ("detach.default", identity),
    ("detach_.default", identity),
    ("detach_copy.default", identity),
    ("lift_fresh_copy.default", identity),
    ("lift_fresh.default", identity),
    ("_assert_tensor_metadata.default", noop),
    ("_assert_async.msg", noop),
    ("_assert_async.default", noop),
    ("_assert_scalar.default", noop),
    ("sym_constrain_range.default", noop),
    ("sym_constrain_range_for_size.default", noop),
    ("_functional_sym_constrain_range.default", noop),
    ("_functional_sym_constrain_range_for_size.default", noop),
    ("copy.default", copy),
    ("_to_copy.default", to_copy),
    ("to.dtype", to_copy),
    ("to.dtype_layout", to_copy),
    ("to.device", to_copy),
    ("to.other", to_other),
    ("type_as.default", to_other),
    ("_to_dim_order_copy.default", to_copy),
    ("permute.default", permute),
    ("permute_copy.default", permute),
    ("transpose.int", transpose),
    ("transpose_copy.int", transpose),
    ("swapaxes.default", swapaxes),
    ("swapdims.default", swapaxes),
    ("t.default", t),
    ("t_copy.default", t),
    ("numpy_T.default", numpy_t),
    ("mT.default", m_t),
    ("movedim.int", movedim),
    ("movedim.intlist", movedim),
    ("moveaxis.int", movedim),
    ("expand.default", expand),
    ("expand_copy.default", expand),
    ("expand_as.default", expand_as),
    ("broadcast_to.default", expand),
    ("unsqueeze.default", unsqueeze),
    ("unsqueeze_copy.default", unsqueeze),
    ("squeeze.default", squeeze),
    ("squeeze.dim", squeeze),
    ("squeeze.dims", squeeze),
    ("squeeze_copy.default", squeeze),
    ("squeeze_copy.dim", squeeze),
    ("squeeze_copy.dims", squeeze),
    ("flatten.using_ints", flatten),
    ("unflatten.int", unflatten),
    ("split.Tensor", split),
    ("split_copy.Tensor", split),
    ("split.sizes", split_with_sizes),
    ("split_with_sizes.default", split_with_sizes),
    ("split_with_sizes_copy.default", split_with_sizes),
    ("chunk.default", chunk),
    ("unbind.int", unbind),
    ("unbind_copy.int", unbind),
    ("cat.default", cat),
    ("concat.default", cat),
    ("concatenate.default", cat),
    ("stack.default", stack),
    ("hstack.default", hstack),
    ("vstack.default", vstack),
    ("slice.Tensor", slice),
    ("slice_copy.Tensor", slice),
    ("select.int", select),
    ("select_copy.int", select),
    ("narrow.default", narrow),
    ("repeat.default", repeat),
    ("repeat_interleave.self_int", repeat_interleave),
    ("view_as.default", view_as),
    ("reshape_as.default", view_as),
    ("tile.default", tile),
    ("flip.default", flip),
    ("roll.default", roll),
    ("constant_pad_nd.default", constant_pad_nd),
    ("pad.default", pad),
    ("reflection_pad1d.default", reflection_pad),
    ("reflection_pad2d.default", reflection_pad),
    ("reflection_pad3d.default", reflection_pad),
    ("replication_pad1d.default", replication_pad),
    ("replication_pad2d.default", replication_pad),
    ("replication_pad3d.default", replication_pad),
    ("pixel_shuffle.default", pixel_shuffle),
    ("pixel_unshuffle.default", pixel_unshuffle),
    ("as_strided.default", as_strided),
    ("as_strided_copy.default", as_strided),
    ("unfold.default", unfold),
];

fn identity(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("self")?)
}

/// A node that checks something at run time in torch: nothing to compute.
fn noop(cx: &mut Ctx) -> R<Vec<Val>> {
    Ok(cx.outs.iter().map(|_| Val::None).collect())
}

/// `size` entries as dims: -1 (at most one) inferred from the element count.
pub fn resolve_shape(cx: &Ctx, x: ValueId, size: &[SymExpr]) -> R<Vec<Dim>> {
    let input = cx.dims(x);
    let mut infer_at = None;
    let mut dims = Vec::with_capacity(size.len());
    for (i, e) in size.iter().enumerate() {
        match e.as_const() {
            Some(-1) => {
                if infer_at.replace(i).is_some() {
                    return err("only one dimension can be inferred (-1)");
                }
                dims.push(Dim::Static(-1));
            }
            Some(c) if !(0..=MAX_SIZE).contains(&c) => return err(format!("invalid size {c}")),
            _ => dims.push(Dim::from_expr(e.clone())),
        }
    }
    let Some(at) = infer_at else { return Ok(dims) };
    let known: Vec<Dim> = dims.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, d)| d.clone()).collect();
    // Cancel equal factors, then divide what remains by the remaining constant.
    let mut rest: Vec<Dim> = input.clone();
    let mut divisor: i64 = 1;
    let mut ok = true;
    for k in &known {
        if let Some(p) = rest.iter().position(|d| d == k) {
            rest.remove(p);
        } else if let Dim::Static(c) = k {
            divisor = divisor.checked_mul(*c).ok_or("reshape target overflows")?;
        } else {
            ok = false;
        }
    }
    if ok {
        let prod = rest.iter().fold(SymExpr::constant(1), |acc, d| acc.mul(&d.to_expr()));
        if divisor == 0 {
            if prod.as_const() == Some(0) {
                return err("cannot infer a -1 dimension of a tensor with no elements");
            }
        } else if divisor > 0 && prod.modulo(divisor).as_const() == Some(0) {
            dims[at] = Dim::from_expr(prod.floordiv(divisor));
            return Ok(dims);
        } else if prod.as_const().is_some() {
            return err(format!("cannot view {} as {}", cx.ty(x), fmt_dims(&dims)));
        }
    }
    // Fall back to the size torch recorded for the result.
    if let Some(t) = cx.out_type(0) {
        if let Some(d) = t.dims.get(at) {
            dims[at] = d.clone();
            return Ok(dims);
        }
    }
    err(format!("cannot infer the -1 dimension of {} for {}", fmt_dims(&dims), cx.ty(x)))
}

/// Reshape checking the element count.
pub fn reshape_to(cx: &mut Ctx, x: ValueId, dims: Vec<Dim>) -> R<ValueId> {
    let t = cx.ty(x);
    let want = TensorType::new(t.dtype, dims.clone());
    if want.num_elements_expr() != t.num_elements_expr() {
        // torch's own size for the result may spell the same count differently.
        if let (Some(a), Some(b)) = (want.num_elements(), t.num_elements()) {
            if a != b {
                return err(format!("cannot view {t} as {}", fmt_dims(&dims)));
            }
        }
        return err(format!("cannot prove {t} and {} have the same number of elements", fmt_dims(&dims)));
    }
    cx.reshape(x, dims)
}

fn view(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("size")?;
    let dims = resolve_shape(cx, x, &size)?;
    one(reshape_to(cx, x, dims)?)
}

fn reshape(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("shape")?;
    let dims = resolve_shape(cx, x, &size)?;
    one(reshape_to(cx, x, dims)?)
}

fn copy(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let t = cx.ty(x);
    let s = cx.convert(src, t.dtype)?;
    one(cx.broadcast_to(s, &t.dims)?)
}

fn to_copy(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    match cx.opt_dtype("dtype")? {
        Some(d) => one(cx.convert(x, d)?),
        None => one(x),
    }
}

fn to_other(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let o = cx.t("other")?;
    let d = cx.dtype(o);
    one(cx.convert(x, d)?)
}

pub fn permute_v(cx: &mut Ctx, x: ValueId, dims: &[i64]) -> R<ValueId> {
    let r = cx.rank(x);
    if dims.len() != r {
        return err(format!("permute with {} dims on a rank-{r} tensor", dims.len()));
    }
    let perm: Vec<i64> = dims.iter().map(|&d| norm_dim(d, r).map(|d| d as i64)).collect::<R<_>>()?;
    let mut seen = vec![false; r];
    for &p in &perm {
        if std::mem::replace(&mut seen[p as usize], true) {
            return err(format!("permute dims {dims:?} repeat a dim"));
        }
    }
    cx.transpose(x, &perm)
}

fn permute(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.ints("dims")?;
    one(permute_v(cx, x, &dims)?)
}

/// Swaps two dims.
pub fn swap(cx: &mut Ctx, x: ValueId, a: i64, b: i64) -> R<ValueId> {
    let r = cx.rank(x);
    if r == 0 {
        return Ok(x);
    }
    let (a, b) = (norm_dim(a, r)?, norm_dim(b, r)?);
    let mut perm: Vec<i64> = (0..r as i64).collect();
    perm.swap(a, b);
    cx.transpose(x, &perm)
}

fn transpose(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (a, b) = (cx.int("dim0")?, cx.int("dim1")?);
    one(swap(cx, x, a, b)?)
}

fn swapaxes(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let a = cx.opt_int("axis0")?.map_or_else(|| cx.int("dim0"), Ok)?;
    let b = cx.opt_int("axis1")?.map_or_else(|| cx.int("dim1"), Ok)?;
    one(swap(cx, x, a, b)?)
}

fn t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) > 2 {
        return err(format!("t() expects a tensor of rank <= 2, got {}", cx.ty(x)));
    }
    if cx.rank(x) < 2 {
        return one(x);
    }
    one(swap(cx, x, 0, 1)?)
}

fn numpy_t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x) as i64;
    let perm: Vec<i64> = (0..r).rev().collect();
    one(cx.transpose(x, &perm)?)
}

fn m_t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) < 2 {
        return err("mT needs a tensor of rank >= 2");
    }
    one(swap(cx, x, -1, -2)?)
}

fn movedim(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let src = cx.syms("source")?;
    let dst = cx.syms("destination")?;
    let konst = |v: Vec<SymExpr>| -> R<Vec<i64>> { v.iter().map(|e| e.as_const().ok_or_else(|| OpError("symbolic dim".into()))).collect() };
    let (src, dst) = (konst(src)?, konst(dst)?);
    if src.len() != dst.len() {
        return err("movedim: source and destination differ in length");
    }
    let src: Vec<usize> = src.iter().map(|&d| norm_dim(d, r)).collect::<R<_>>()?;
    let dst: Vec<usize> = dst.iter().map(|&d| norm_dim(d, r)).collect::<R<_>>()?;
    if r == 0 {
        // dims 0 and -1 of a rank-0 tensor: nothing to move
        return one(x);
    }
    let mut perm: Vec<Option<usize>> = vec![None; r];
    for (&s, &d) in src.iter().zip(&dst) {
        if perm[d].replace(s).is_some() {
            return err("movedim: repeated destination");
        }
    }
    let mut rest = (0..r).filter(|i| !src.contains(i));
    let perm: Vec<i64> = perm.into_iter().map(|p| p.or_else(|| rest.next()).map_or(0, |v| v as i64)).collect();
    one(permute_v(cx, x, &perm)?)
}

/// `expand`: -1 keeps a dim, new leading dims allowed.
pub fn expand_v(cx: &mut Ctx, x: ValueId, size: &[SymExpr]) -> R<ValueId> {
    let have = cx.dims(x);
    if size.len() < have.len() {
        return err(format!("expand to {} dims of a rank-{} tensor", size.len(), have.len()));
    }
    let off = size.len() - have.len();
    let mut shape = Vec::with_capacity(size.len());
    for (i, e) in size.iter().enumerate() {
        let d = match e.as_const() {
            Some(-1) if i >= off => have[i - off].clone(),
            Some(-1) => return err("expand: -1 is not allowed in a new leading dim"),
            Some(c) if !(0..=MAX_SIZE).contains(&c) => return err(format!("expand: invalid size {c}")),
            _ => Dim::from_expr(e.clone()),
        };
        shape.push(d);
    }
    cx.broadcast_to(x, &shape)
}

fn expand(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("size")?;
    one(expand_v(cx, x, &size)?)
}

fn expand_as(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let o = cx.t("other")?;
    let d = cx.dims(o);
    one(cx.broadcast_to(x, &d)?)
}

pub fn unsqueeze_v(cx: &mut Ctx, x: ValueId, d: i64) -> R<ValueId> {
    let mut dims = cx.dims(x);
    let d = norm_dim(d, dims.len() + 1)?;
    dims.insert(d, Dim::Static(1));
    cx.reshape(x, dims)
}

fn unsqueeze(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.int("dim")?;
    one(unsqueeze_v(cx, x, d)?)
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

fn squeeze(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let which = if cx.has("dim") { Some(cx.ints("dim")?) } else { None };
    one(squeeze_v(cx, x, which.as_deref())?)
}

fn flatten(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.dims(x);
    if dims.is_empty() {
        return one(cx.reshape(x, vec![Dim::Static(1)])?);
    }
    let s = norm_dim(cx.int_or("start_dim", 0)?, dims.len())?;
    let e = norm_dim(cx.int_or("end_dim", -1)?, dims.len())?;
    if s > e {
        return err("flatten: start_dim after end_dim");
    }
    let mut out: Vec<Dim> = dims[..s].to_vec();
    out.push(dims[s..=e].iter().fold(Dim::Static(1), |a, d| a.mul(d)));
    out.extend_from_slice(&dims[e + 1..]);
    one(cx.reshape(x, out)?)
}

fn unflatten(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.dims(x);
    if dims.is_empty() {
        return err("unflatten of a rank-0 tensor");
    }
    let d = norm_dim(cx.int("dim")?, dims.len())?;
    let sizes = cx.syms("sizes")?;
    let mut target: Vec<SymExpr> = dims[..d].iter().map(Dim::to_expr).collect();
    target.extend(sizes);
    target.extend(dims[d + 1..].iter().map(Dim::to_expr));
    let out = resolve_shape(cx, x, &target)?;
    one(reshape_to(cx, x, out)?)
}

/// Elements `start..end` by `step` along `dim` (start/end already within `0..=size`).
pub fn slice_static(cx: &mut Ctx, x: ValueId, dim: usize, start: i64, end: i64, step: i64) -> R<ValueId> {
    let dims = cx.dims(x);
    let n = match dims.get(dim) {
        Some(Dim::Static(n)) => *n,
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
    let attrs = Attrs::new()
        .with("offset_dims", Attr::Ints(offset_dims))
        .with("collapsed_slice_dims", Attr::Ints(vec![dim as i64]))
        .with("operand_batching_dims", Attr::Ints(vec![]))
        .with("start_indices_batching_dims", Attr::Ints(vec![]))
        .with("start_index_map", Attr::Ints(vec![dim as i64]))
        .with("index_vector_dim", Attr::Int(ib))
        .with("slice_sizes", Attr::Ints(slice_sizes));
    let g = cx.b.build1(O::Gather, &[x, idx2], attrs, None)?;
    Ok(g)
}

/// A slice along `dim` with ATen's `slice.Tensor` semantics (None, negative and out-of-range
/// bounds), static or symbolic.
pub fn slice_any(cx: &mut Ctx, x: ValueId, dim: usize, start: Option<SymExpr>, end: Option<SymExpr>, step: i64) -> R<ValueId> {
    if step <= 0 {
        return err(format!("slice step must be positive, got {step}"));
    }
    let dims = cx.dims(x);
    let size = dims.get(dim).cloned().ok_or_else(|| OpError(format!("dim {dim} out of range")))?;
    let const_of = |e: &Option<SymExpr>| e.as_ref().map(|e| e.as_const());
    if let Dim::Static(n) = size {
        let clampi = |v: i64| -> i64 {
            let v = if v < 0 { v.saturating_add(n) } else { v };
            v.clamp(0, n)
        };
        let s = match const_of(&start) {
            None => 0,
            Some(Some(v)) => clampi(v),
            Some(None) => return err("slice start is symbolic on a static dim"),
        };
        let e = match const_of(&end) {
            None => n,
            Some(Some(v)) => clampi(v),
            Some(None) => {
                // a symbolic end on a static dim: use the recorded result size
                match cx.out_type(0).and_then(|t| t.dims.get(dim).and_then(Dim::as_static)) {
                    Some(len) => (s + len * step).min(n),
                    None => return err("slice end is symbolic on a static dim"),
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
        Some(s) if s >= 0 => {
            let span = end_expr.sub(&SymExpr::constant(s));
            let len = if step == 1 { span } else { span.add(&SymExpr::constant(step - 1)).floordiv(step) };
            let len = Dim::from_expr(len);
            let mut idx = cx.iota(DType::I64, std::slice::from_ref(&len), 0)?;
            if step != 1 {
                idx = cx.bin_c(O::Mul, idx, step as f64)?;
            }
            if s != 0 {
                idx = cx.bin_c(O::Add, idx, s as f64)?;
            }
            take_along(cx, x, dim, idx)
        }
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

fn split_at(cx: &mut Ctx, x: ValueId, dim: usize, sizes: &[i64]) -> R<Vec<Val>> {
    let mut out = Vec::with_capacity(sizes.len());
    let mut start: i64 = 0;
    for (i, &s) in sizes.iter().enumerate() {
        if s < 0 {
            return err(format!("split size {s} is negative"));
        }
        let end = start.checked_add(s).ok_or("split sizes overflow")?;
        if !cx.used(i) {
            out.push(Val::Absent);
        } else {
            out.push(Val::Tensor(slice_static(cx, x, dim, start, end, 1)?));
        }
        start = end;
    }
    Ok(out)
}

fn static_dim_size(cx: &Ctx, x: ValueId, dim: usize, what: &str) -> R<i64> {
    match cx.dims(x).get(dim) {
        Some(Dim::Static(n)) => Ok(*n),
        Some(d) => err(format!("{what} of the symbolic dim {d} is not supported")),
        None => err(format!("dim {dim} out of range")),
    }
}

fn split(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int_or("dim", 0)?, cx.rank(x))?;
    let n = static_dim_size(cx, x, dim, "split")?;
    let ss = cx.int("split_size")?;
    if ss <= 0 && n > 0 {
        return err(format!("split size must be positive, got {ss}"));
    }
    let pieces = if n == 0 { 1 } else { (n + ss - 1) / ss };
    if pieces != cx.outs.len() as i64 {
        return err(format!("split gives {pieces} pieces, the node has {} outputs", cx.outs.len()));
    }
    let mut sizes = Vec::new();
    let mut left = n;
    while left > 0 {
        sizes.push(ss.min(left));
        left -= ss.min(left);
    }
    if sizes.is_empty() {
        sizes.push(0);
    }
    if sizes.len() != cx.outs.len() {
        return err(format!("split gives {} pieces, the node has {} outputs", sizes.len(), cx.outs.len()));
    }
    split_at(cx, x, dim, &sizes)
}

fn split_with_sizes(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int_or("dim", 0)?, cx.rank(x))?;
    let sizes = if cx.has("split_sizes") { cx.ints("split_sizes")? } else { cx.ints("split_size")? };
    let n = static_dim_size(cx, x, dim, "split")?;
    if sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s)) != Some(n) {
        return err(format!("split sizes {sizes:?} do not add up to {n}"));
    }
    split_at(cx, x, dim, &sizes)
}

fn chunk(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int_or("dim", 0)?, cx.rank(x))?;
    let n = static_dim_size(cx, x, dim, "chunk")?;
    let chunks = cx.int("chunks")?;
    if chunks <= 0 {
        return err("chunk needs a positive number of chunks");
    }
    let each = (n + chunks - 1) / chunks;
    let pieces = if each == 0 { 0 } else { (n + each - 1) / each };
    if pieces != cx.outs.len() as i64 {
        return err(format!("chunk gives {pieces} pieces, the node has {} outputs", cx.outs.len()));
    }
    let mut sizes = Vec::new();
    let mut left = n;
    while left > 0 {
        sizes.push(each.min(left));
        left -= each.min(left);
    }
    if sizes.len() != cx.outs.len() {
        return err(format!("chunk gives {} pieces, the node has {} outputs", sizes.len(), cx.outs.len()));
    }
    split_at(cx, x, dim, &sizes)
}

fn unbind(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int_or("dim", 0)?, cx.rank(x))?;
    let n = static_dim_size(cx, x, dim, "unbind")?;
    if n as usize != cx.outs.len() {
        return err(format!("unbind gives {n} pieces, the node has {} outputs", cx.outs.len()));
    }
    let mut out = Vec::new();
    for i in 0..n {
        if !cx.used(i as usize) {
            out.push(Val::Absent);
            continue;
        }
        let s = slice_static(cx, x, dim, i, i + 1, 1)?;
        out.push(Val::Tensor(squeeze_v(cx, s, Some(&[dim as i64]))?));
    }
    Ok(out)
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

fn cat(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let dim = cx.int_or("dim", 0)?;
    one(cat_v(cx, &xs, dim)?)
}

fn stack(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let Some(&first) = xs.first() else { return err("stack of an empty list") };
    let d = norm_dim(cx.int_or("dim", 0)?, cx.rank(first) + 1)? as i64;
    let mut us = Vec::new();
    for x in xs {
        us.push(unsqueeze_v(cx, x, d)?);
    }
    one(cat_v(cx, &us, d)?)
}

fn hstack(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let Some(&first) = xs.first() else { return err("hstack of an empty list") };
    let d = if cx.rank(first) == 1 { 0 } else { 1 };
    one(cat_v(cx, &xs, d)?)
}

fn vstack(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let mut ys = Vec::new();
    for x in xs {
        let y = match cx.rank(x) {
            0 => cx.reshape(x, vec![Dim::Static(1), Dim::Static(1)])?,
            1 => unsqueeze_v(cx, x, 0)?,
            _ => x,
        };
        ys.push(y);
    }
    one(cat_v(cx, &ys, 0)?)
}

fn slice(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int_or("dim", 0)?, cx.rank(x))?;
    let start = cx.opt_sym("start")?;
    let end = cx.opt_sym("end")?;
    let step = cx.int_or("step", 1)?;
    one(slice_any(cx, x, dim, start, end, step)?)
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

fn select(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let index = cx.int("index")?;
    one(select_v(cx, x, dim, index)?)
}

fn narrow(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let start = cx.sym("start")?;
    let len = cx.sym("length")?;
    let start = match (start.as_const(), cx.dims(x).get(dim)) {
        (Some(s), Some(Dim::Static(n))) if s < 0 => SymExpr::constant(s + n),
        _ => start,
    };
    let end = start.add(&len);
    one(slice_any(cx, x, dim, Some(start), Some(end), 1)?)
}

/// Tiles `x` by `reps` (len >= rank; leading dims added).
pub fn repeat_v(cx: &mut Ctx, x: ValueId, reps: &[i64]) -> R<ValueId> {
    let dims = cx.dims(x);
    if reps.len() < dims.len() {
        return err("repeat: fewer repeats than dims");
    }
    let off = reps.len() - dims.len();
    let mut shape = Vec::new();
    let mut bdims = Vec::new();
    let mut final_dims = Vec::new();
    if reps.len() > 64 {
        return err("repeat with too many dims");
    }
    for (i, &r) in reps.iter().enumerate() {
        if !(0..=MAX_SIZE).contains(&r) {
            return err(format!("repeat count {r} out of range"));
        }
        let d = if i >= off { dims[i - off].clone() } else { Dim::Static(1) };
        shape.push(Dim::Static(r));
        if i >= off {
            bdims.push(shape.len() as i64);
        }
        shape.push(d.clone());
        final_dims.push(Dim::Static(r).mul(&d));
    }
    let b = cx.b.broadcast_in_dim(x, &bdims, shape)?;
    cx.reshape(b, final_dims)
}

fn repeat(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let reps = cx.ints("repeats")?;
    one(repeat_v(cx, x, &reps)?)
}

fn tile(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let mut reps = cx.ints("dims")?;
    let r = cx.rank(x);
    while reps.len() < r {
        reps.insert(0, 1);
    }
    one(repeat_v(cx, x, &reps)?)
}

fn flip(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let dims: Vec<i64> = cx.ints("dims")?.iter().map(|&d| norm_dim(d, r).map(|d| d as i64)).collect::<R<_>>()?;
    if dims.is_empty() {
        return one(x);
    }
    one(cx.b.build1(O::Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(dims)), None)?)
}

fn roll_dim(cx: &mut Ctx, x: ValueId, dim: usize, shift: i64) -> R<ValueId> {
    let n = static_dim_size(cx, x, dim, "roll")?;
    if n == 0 {
        return Ok(x);
    }
    let s = shift.rem_euclid(n);
    if s == 0 {
        return Ok(x);
    }
    let a = slice_static(cx, x, dim, n - s, n, 1)?;
    let b = slice_static(cx, x, dim, 0, n - s, 1)?;
    Ok(cx.b.concatenate(&[a, b], dim as i64)?)
}

fn roll(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let shifts = cx.ints("shifts")?;
    let dims = cx.ints_or("dims", &[])?;
    if dims.is_empty() {
        let t = cx.ty(x);
        let n = t.num_elements().ok_or("roll of a symbolic tensor")?;
        let flat = cx.reshape(x, vec![Dim::Static(n)])?;
        let s = *shifts.first().ok_or("roll needs a shift")?;
        let r = roll_dim(cx, flat, 0, s)?;
        return one(cx.reshape(r, t.dims.to_vec())?);
    }
    if dims.len() != shifts.len() {
        return err("roll: shifts and dims differ in length");
    }
    let r = cx.rank(x);
    let mut v = x;
    for (&s, &d) in shifts.iter().zip(&dims) {
        v = roll_dim(cx, v, norm_dim(d, r)?, s)?;
    }
    one(v)
}

/// Torch pad lists go from the last dim backwards: [lo_last, hi_last, lo_prev, hi_prev, ...].
fn pad_pairs(pad: &[i64], rank: usize) -> R<Vec<(usize, i64, i64)>> {
    if pad.len() & 1 == 1 || pad.len() / 2 > rank {
        return err(format!("padding {pad:?} does not fit a rank-{rank} tensor"));
    }
    let mut out = Vec::new();
    for (k, p) in pad.chunks(2).enumerate() {
        let (lo, hi) = (check_size(p[0], "padding")?, check_size(p[1], "padding")?);
        out.push((rank - 1 - k, lo, hi));
    }
    Ok(out)
}

pub fn constant_pad(cx: &mut Ctx, x: ValueId, pad: &[i64], value: Num) -> R<ValueId> {
    let r = cx.rank(x);
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    for (d, l, h) in pad_pairs(pad, r)? {
        lo[d] = l;
        hi[d] = h;
    }
    if lo.iter().chain(&hi).all(|&p| p == 0) {
        return Ok(x);
    }
    let dt = cx.dtype(x);
    let v = cx.scalar(value.scalar(), dt)?;
    Ok(cx.b.pad(x, v, &lo, &hi, &vec![0; r])?)
}

fn constant_pad_nd(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let pad = cx.ints("pad")?;
    let value = cx.opt_num("value")?.unwrap_or(Num::Int(0));
    one(constant_pad(cx, x, &pad, value)?)
}

fn mode_pad(cx: &mut Ctx, x: ValueId, pad: &[i64], mode: &str) -> R<ValueId> {
    let r = cx.rank(x);
    let mut v = x;
    for (d, lo, hi) in pad_pairs(pad, r)? {
        if lo < 0 || hi < 0 {
            return err(format!("{mode} padding must be non-negative"));
        }
        if lo == 0 && hi == 0 {
            continue;
        }
        let n = static_dim_size(cx, v, d, "padding")?;
        let mut parts = Vec::new();
        let rev = |cx: &mut Ctx, t: ValueId| -> R<ValueId> {
            Ok(cx.b.build1(O::Reverse, &[t], Attrs::new().with("dimensions", Attr::Ints(vec![d as i64])), None)?)
        };
        match mode {
            "reflect" => {
                if lo >= n || hi >= n {
                    return err(format!("reflect padding {lo},{hi} needs a dim larger than the padding, got {n}"));
                }
                if lo > 0 {
                    let s = slice_static(cx, v, d, 1, lo + 1, 1)?;
                    parts.push(rev(cx, s)?);
                }
                parts.push(v);
                if hi > 0 {
                    let s = slice_static(cx, v, d, n - 1 - hi, n - 1, 1)?;
                    parts.push(rev(cx, s)?);
                }
            }
            "replicate" => {
                if n == 0 {
                    return err("replicate padding of an empty dim");
                }
                let edge = |cx: &mut Ctx, at: i64, count: i64| -> R<ValueId> {
                    let s = slice_static(cx, v, d, at, at + 1, 1)?;
                    let mut shape = cx.dims(s);
                    shape[d] = Dim::Static(count);
                    cx.broadcast_to(s, &shape)
                };
                if lo > 0 {
                    parts.push(edge(cx, 0, lo)?);
                }
                parts.push(v);
                if hi > 0 {
                    parts.push(edge(cx, n - 1, hi)?);
                }
            }
            "circular" => {
                if lo > n || hi > n {
                    return err("circular padding larger than the dim");
                }
                if lo > 0 {
                    parts.push(slice_static(cx, v, d, n - lo, n, 1)?);
                }
                parts.push(v);
                if hi > 0 {
                    parts.push(slice_static(cx, v, d, 0, hi, 1)?);
                }
            }
            other => return err(format!("unknown padding mode `{other}`")),
        }
        v = cx.b.concatenate(&parts, d as i64)?;
    }
    Ok(v)
}

fn pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("pad")?;
    let mode = cx.str_or("mode", "constant")?;
    if mode == "constant" {
        let value = cx.opt_num("value")?.unwrap_or(Num::Int(0));
        return one(constant_pad(cx, x, &p, value)?);
    }
    one(mode_pad(cx, x, &p, &mode)?)
}

fn reflection_pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("padding")?;
    one(mode_pad(cx, x, &p, "reflect")?)
}

fn replication_pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("padding")?;
    one(mode_pad(cx, x, &p, "replicate")?)
}

fn pixel_shuffle(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = check_window(cx.int("upscale_factor")?, 1, "upscale_factor")?;
    let d = cx.dims(x);
    if d.len() < 3 || r <= 0 {
        return err("pixel_shuffle needs a rank >= 3 tensor and a positive factor");
    }
    let k = d.len();
    let c = static_of(&d[k - 3], "channels")?;
    if c % (r * r) != 0 {
        return err(format!("pixel_shuffle: {c} channels not divisible by {}", r * r));
    }
    let mut s: Vec<Dim> = d[..k - 3].to_vec();
    s.extend([Dim::Static(c / (r * r)), Dim::Static(r), Dim::Static(r), d[k - 2].clone(), d[k - 1].clone()]);
    let v = cx.reshape(x, s)?;
    let b = (k - 3) as i64;
    let mut perm: Vec<i64> = (0..b).collect();
    perm.extend([b, b + 3, b + 1, b + 4, b + 2]);
    let v = cx.transpose(v, &perm)?;
    let mut out: Vec<Dim> = d[..k - 3].to_vec();
    out.extend([Dim::Static(c / (r * r)), d[k - 2].mul(&Dim::Static(r)), d[k - 1].mul(&Dim::Static(r))]);
    one(cx.reshape(v, out)?)
}

fn pixel_unshuffle(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = check_window(cx.int("downscale_factor")?, 1, "downscale_factor")?;
    let d = cx.dims(x);
    if d.len() < 3 || r <= 0 {
        return err("pixel_unshuffle needs a rank >= 3 tensor and a positive factor");
    }
    let k = d.len();
    let (c, h, w) = (static_of(&d[k - 3], "channels")?, static_of(&d[k - 2], "height")?, static_of(&d[k - 1], "width")?);
    if h % r != 0 || w % r != 0 {
        return err("pixel_unshuffle: spatial dims not divisible by the factor");
    }
    let mut s: Vec<Dim> = d[..k - 3].to_vec();
    s.extend([c, h / r, r, w / r, r].map(Dim::Static));
    let v = cx.reshape(x, s)?;
    let b = (k - 3) as i64;
    let mut perm: Vec<i64> = (0..b).collect();
    perm.extend([b, b + 2, b + 4, b + 1, b + 3]);
    let v = cx.transpose(v, &perm)?;
    let mut out: Vec<Dim> = d[..k - 3].to_vec();
    let c2 = c.checked_mul(r * r).filter(|&v| v <= MAX_SIZE).ok_or("pixel_unshuffle: too many channels")?;
    out.extend([c2, h / r, w / r].map(Dim::Static));
    one(cx.reshape(v, out)?)
}

/// `as_strided` of a tensor whose storage is its contiguous row-major layout: a gather of the
/// flat elements at the strided positions.
fn as_strided(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    let offset = cx.int_or("storage_offset", 0)?;
    if size.len() != stride.len() {
        return err("as_strided: size and stride differ in length");
    }
    // torch's strides refer to the input's storage: only defined here when the input is
    // contiguous (its recorded strides are row-major).
    if let Some(Arg::Tensor(name)) = cx.get("self")? {
        if let Some(meta) = cx.st.metas.get(&name) {
            let sizes: Vec<i64> = meta.sizes.iter().filter_map(|s| s.as_int()).collect();
            let strides: Vec<i64> = meta.strides.iter().filter_map(|s| s.as_int()).collect();
            let want = crate::archive::contiguous_strides(&sizes);
            let contiguous = sizes.len() == strides.len()
                && sizes.iter().zip(strides.iter().zip(&want)).all(|(&n, (&s, &w))| n <= 1 || s == w);
            let off = meta.storage_offset.as_ref().and_then(|o| o.as_int()).unwrap_or(0);
            if !contiguous || off != 0 {
                return err("as_strided of a non-contiguous or offset input is not supported");
            }
        }
    }
    let t = cx.ty(x);
    let n = t.num_elements().ok_or("as_strided of a symbolic tensor")?;
    let mut total: i64 = 1;
    for &s in &size {
        if !(0..=MAX_SIZE).contains(&s) {
            return err(format!("as_strided size {s} out of range"));
        }
        total = total.checked_mul(s).filter(|&v| v <= MAX_TABLE).ok_or("as_strided result too large")?;
    }
    let mut idx = Vec::with_capacity(total as usize);
    let mut pos = vec![0i64; size.len()];
    for _ in 0..total {
        let mut flat = offset;
        for (p, s) in pos.iter().zip(&stride) {
            flat = flat.checked_add(p.checked_mul(*s).ok_or("stride overflow")?).ok_or("stride overflow")?;
        }
        if flat < 0 || flat >= n {
            return err(format!("as_strided reads element {flat} of a tensor with {n}"));
        }
        idx.push(flat);
        for d in (0..size.len()).rev() {
            pos[d] += 1;
            if pos[d] < size[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    let iv = cx.const_i64(&[total], &idx)?;
    let g = take_along(cx, flat, 0, iv)?;
    one(cx.reshape(g, size.iter().map(|&s| Dim::Static(s)).collect())?)
}

/// `unfold(dimension, size, step)`: windows along a dim become a new last dim. A rank-0
/// tensor counts as one element along dim 0 and gives `[size]` (size 0 or 1), as in torch.
fn unfold(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let d = norm_dim(cx.int("dimension")?, r)?;
    let size = cx.int("size")?;
    let step = cx.int("step")?;
    if r == 0 {
        if !(0..=1).contains(&size) || step <= 0 {
            return err(format!("unfold of a rank-0 tensor needs size 0 or 1 and a positive step, got size {size}, step {step}"));
        }
        let x1 = cx.reshape(x, vec![Dim::Static(1)])?;
        return one(slice_static(cx, x1, 0, 0, size, 1)?);
    }
    let n = static_dim_size(cx, x, d, "unfold")?;
    if size < 0 || size > n || step <= 0 {
        return err("unfold: bad size or step");
    }
    let count = (n - size) / step + 1;
    table_size(&[count, size], "unfold index table")?;
    let mut idx = Vec::new();
    for w in 0..count {
        for k in 0..size {
            idx.push(w * step + k);
        }
    }
    let iv = cx.const_i64(&[count, size], &idx)?;
    // gather gives dims: before d, [count, size], after d
    let g = take_along(cx, x, d, iv)?;
    let gr = cx.rank(g) as i64;
    // move the `size` dim (at d + 1) to the end
    let mut perm: Vec<i64> = (0..gr).filter(|&i| i != d as i64 + 1).collect();
    perm.push(d as i64 + 1);
    one(cx.transpose(g, &perm)?)
}

/// `repeat_interleave` with an int count: each element repeated consecutively along `dim`
/// (flattened when dim is None).
fn repeat_interleave(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let reps = cx.int("repeats")?;
    if !(0..=MAX_SIZE).contains(&reps) {
        return err(format!("repeat count {reps} out of range"));
    }
    let (x, dim) = match cx.opt_int("dim")? {
        Some(_) if cx.rank(x) == 0 => return err("repeat_interleave along a dim of a rank-0 tensor"),
        Some(d) => (x, norm_dim(d, cx.rank(x))?),
        None => {
            let n = cx.ty(x).num_elements_expr();
            (cx.reshape(x, vec![Dim::from_expr(n)])?, 0)
        }
    };
    let d = cx.dims(x);
    let mut shape: Vec<Dim> = d[..=dim].to_vec();
    shape.push(Dim::Static(reps));
    shape.extend_from_slice(&d[dim + 1..]);
    let bdims: Vec<i64> = (0..d.len() as i64).map(|i| if i <= dim as i64 { i } else { i + 1 }).collect();
    let b = cx.b.broadcast_in_dim(x, &bdims, shape)?;
    let mut out = d.clone();
    out[dim] = d[dim].mul(&Dim::Static(reps));
    one(cx.reshape(b, out)?)
}

fn view_as(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let o = cx.t("other")?;
    let d = cx.dims(o);
    one(reshape_to(cx, x, d)?)
}
