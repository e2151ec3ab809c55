//! Slicing and joining: static and symbolic slices, gathers along a dim (`take_along`), split
//! and chunk, unbind, cat and stack, select and narrow.

use crate::ops::build::*;
use Opcode as O;

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

pub(super) fn split(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
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

pub(super) fn split_with_sizes(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let arg = if cx.has("split_sizes") { "split_sizes" } else { "split_size" };
    let syms = cx.syms(arg)?;
    if syms.iter().any(|e| e.as_const().is_none()) {
        // Sizes read from the data (JetMoE's tokens per expert, `.tolist()`): each piece a
        // slice between running sums, which torch checks add up to the dim.
        let mut start = SymExpr::constant(0);
        let mut out = Vec::with_capacity(syms.len());
        for e in &syms {
            let end = start.add(e);
            out.push(Val::Tensor(slice_any(cx, x, dim, Some(start.clone()), Some(end.clone()), 1)?));
            start = end;
        }
        return Ok(out);
    }
    let sizes: Vec<i64> = syms.iter().filter_map(SymExpr::as_const).collect();
    let n = static_dim_size(cx, x, dim, "split")?;
    if sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s)) != Some(n) {
        return err(format!("split sizes {sizes:?} do not add up to {n}"));
    }
    split_at(cx, x, dim, &sizes)
}

pub(super) fn chunk(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
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

pub(super) fn unbind(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
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

pub(super) fn cat(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let dim = cx.int("dim")?;
    one(cat_v(cx, &xs, dim)?)
}

/// `diff(self, n=1, dim=-1, prepend=None, append=None)`: `prepend`, `self` and `append` joined
/// along `dim`, then `n` times the difference of neighbours, `x[1:] - x[:-1]` (for booleans
/// `x[1:] != x[:-1]`, torch's logical xor). A size along `dim` below `n` gives an empty
/// result, as in torch. Static sizes along `dim`.
pub(super) fn diff(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let n = cx.int("n")?;
    if n < 0 {
        return err(format!("diff expects n >= 0, got {n}"));
    }
    let rank = cx.rank(x);
    if rank == 0 {
        return err("diff expects a tensor of rank 1 or more");
    }
    let d = norm_dim(cx.int("dim")?, rank)?;
    let mut parts = Vec::new();
    parts.extend(cx.opt_t("prepend")?);
    parts.push(x);
    parts.extend(cx.opt_t("append")?);
    let mut y = if parts.len() > 1 { cat_v(cx, &parts, d as i64)? } else { x };
    for _ in 0..n {
        let len = match cx.dims(y)[d] {
            Dim::Static(len) => len,
            _ => return err("diff along a symbolic dim is not supported; export with a static size there"),
        };
        if len == 0 {
            break;
        }
        let hi = slice_static(cx, y, d, 1, len, 1)?;
        let lo = slice_static(cx, y, d, 0, len - 1, 1)?;
        y = if cx.dtype(y) == DType::Bool { cx.cmp(Direction::Ne, hi, lo)? } else { cx.bin(O::Sub, hi, lo)? };
    }
    one(y)
}

pub(super) fn stack(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let Some(&first) = xs.first() else { return err("stack of an empty list") };
    let d = norm_dim(cx.int("dim")?, cx.rank(first) + 1)? as i64;
    let mut us = Vec::new();
    for x in xs {
        us.push(unsqueeze_v(cx, x, d)?);
    }
    one(cat_v(cx, &us, d)?)
}

pub(super) fn hstack(cx: &mut Ctx) -> R<Vec<Val>> {
    let xs = cx.tensors("tensors")?;
    let Some(&first) = xs.first() else { return err("hstack of an empty list") };
    let d = if cx.rank(first) == 1 { 0 } else { 1 };
    one(cat_v(cx, &xs, d)?)
}

pub(super) fn vstack(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn slice(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let start = cx.opt_sym("start")?;
    let end = cx.opt_sym("end")?;
    let step = cx.int("step")?;
    one(slice_any(cx, x, dim, start, end, step)?)
}

pub(super) fn select(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let index = cx.int("index")?;
    one(select_v(cx, x, dim, index)?)
}

pub(super) fn narrow(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub fn zeros_of_sizes(cx: &mut Ctx, g: ValueId) -> R<ValueId> {
    let dims = cx.size_dims("input_sizes")?;
    let dt = cx.dtype(g);
    cx.full(Scalar::Int(0), dt, &dims)
}

pub fn select_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let z = zeros_of_sizes(cx, g)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(z))?;
    let n = static_of(&cx.dim_size(z, dim)?, "select_backward dim")?;
    let i = cx.int("index")?;
    let i = if i < 0 { i + n } else { i };
    let gu = unsqueeze_v(cx, g, dim as i64)?;
    one(slice_scatter_v(cx, z, gu, dim, Some(i), Some(i + 1), 1)?)
}

pub fn slice_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let z = zeros_of_sizes(cx, g)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(z))?;
    let start = cx.opt_int("start")?;
    let end = cx.opt_int("end")?.filter(|&e| e < MAX_SIZE);
    let step = cx.int("step")?;
    one(slice_scatter_v(cx, z, g, dim, start, end, step)?)
}
