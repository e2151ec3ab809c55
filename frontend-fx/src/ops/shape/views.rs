//! Views and copies: view and reshape (with -1 inferred, symbolic sizes included), copies and
//! dtype casts, permutations and transposes, movedim, expand, unsqueeze and squeeze, flatten
//! and unflatten, view_as.

use crate::ops::build::*;

pub(super) fn identity(cx: &mut Ctx) -> R<Vec<Val>> {
    one(cx.t("self")?)
}

/// A node that checks something at run time in torch: nothing to compute.
pub(super) fn noop(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn view(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("size")?;
    let dims = resolve_shape(cx, x, &size)?;
    one(reshape_to(cx, x, dims)?)
}

pub(super) fn reshape(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("shape")?;
    let dims = resolve_shape(cx, x, &size)?;
    one(reshape_to(cx, x, dims)?)
}

pub(super) fn copy(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let t = cx.ty(x);
    let s = cx.convert(src, t.dtype)?;
    one(cx.broadcast_to(s, &t.dims)?)
}

pub(super) fn to_copy(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    match cx.opt_dtype("dtype")? {
        Some(d) => one(cx.convert(x, d)?),
        None => one(x),
    }
}

/// `prims.convert_element_type(a, dtype)`, which some of torch's decompositions leave in
/// the graph (renorm's, for 16-bit floats).
pub(super) fn convert_element_type(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("a")?;
    let d = cx.opt_dtype("dtype")?.ok_or("convert_element_type without a dtype")?;
    one(cx.convert(x, d)?)
}

pub(super) fn to_other(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn permute(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn transpose(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let (a, b) = (cx.int("dim0")?, cx.int("dim1")?);
    one(swap(cx, x, a, b)?)
}

pub(super) fn swapaxes(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let a = cx.opt_int("axis0")?.map_or_else(|| cx.int("dim0"), Ok)?;
    let b = cx.opt_int("axis1")?.map_or_else(|| cx.int("dim1"), Ok)?;
    one(swap(cx, x, a, b)?)
}

pub(super) fn t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) > 2 {
        return err(format!("t() expects a tensor of rank <= 2, got {}", cx.ty(x)));
    }
    if cx.rank(x) < 2 {
        return one(x);
    }
    one(swap(cx, x, 0, 1)?)
}

pub(super) fn numpy_t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x) as i64;
    let perm: Vec<i64> = (0..r).rev().collect();
    one(cx.transpose(x, &perm)?)
}

pub(super) fn m_t(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) < 2 {
        return err("mT needs a tensor of rank >= 2");
    }
    one(swap(cx, x, -1, -2)?)
}

pub(super) fn movedim(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let src = cx.syms("source")?;
    let dst = cx.syms("destination")?;
    let konst = |v: Vec<SymExpr>| -> R<Vec<i64>> { v.iter().map(|e| e.as_const().ok_or_else(|| OpError::Refused("symbolic dim".into()))).collect() };
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

pub(super) fn expand(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.syms("size")?;
    one(expand_v(cx, x, &size)?)
}

pub(super) fn expand_as(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let o = cx.t("other")?;
    let d = cx.dims(o);
    one(cx.broadcast_to(x, &d)?)
}

pub(super) fn unsqueeze(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let d = cx.int("dim")?;
    one(unsqueeze_v(cx, x, d)?)
}

pub(super) fn squeeze(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let which = if cx.has("dim") { Some(cx.ints("dim")?) } else { None };
    one(squeeze_v(cx, x, which.as_deref())?)
}

pub(super) fn flatten(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dims = cx.dims(x);
    if dims.is_empty() {
        return one(cx.reshape(x, vec![Dim::Static(1)])?);
    }
    let s = norm_dim(cx.int("start_dim")?, dims.len())?;
    let e = norm_dim(cx.int("end_dim")?, dims.len())?;
    if s > e {
        return err("flatten: start_dim after end_dim");
    }
    let mut out: Vec<Dim> = dims[..s].to_vec();
    out.push(dims[s..=e].iter().fold(Dim::Static(1), |a, d| a.mul(d)));
    out.extend_from_slice(&dims[e + 1..]);
    one(cx.reshape(x, out)?)
}

pub(super) fn unflatten(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn view_as(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let o = cx.t("other")?;
    let d = cx.dims(o);
    one(reshape_to(cx, x, d)?)
}
