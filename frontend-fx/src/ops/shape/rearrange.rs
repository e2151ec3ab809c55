//! Rearrangements by index: pixel shuffle and unshuffle, `as_strided` of a contiguous tensor
//! and `unfold` (sliding windows as a new last dim).

use crate::ops::build::*;

pub(super) fn pixel_shuffle(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub(super) fn pixel_unshuffle(cx: &mut Ctx) -> R<Vec<Val>> {
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

/// The flat positions an `as_strided(size, stride, storage_offset)` view of the node's
/// `self` reads, in the view's row-major order, with the input's element count. torch's
/// strides refer to the input's storage, which the input's recorded strides describe: defined
/// here when the input starts its storage and fills it densely, in row-major order or in any
/// order of its dims (a transposed tensor viewed again, as Longformer's overlapping chunks
/// are); its storage position s is then its element `storage[s]` in row-major order.
fn strided_positions(cx: &Ctx, x: ValueId, size: &[i64], stride: &[i64], offset: i64) -> R<(i64, Vec<i64>)> {
    if size.len() != stride.len() {
        return err("as_strided: size and stride differ in length");
    }
    let mut storage: Option<Vec<i64>> = None;
    if let Some(Arg::Tensor(name)) = cx.get("self")? {
        if let Some(meta) = cx.st.metas.get(&name) {
            let sizes: Vec<i64> = meta.sizes.iter().filter_map(|s| s.as_int()).collect();
            let strides: Vec<i64> = meta.strides.iter().filter_map(|s| s.as_int()).collect();
            let want = crate::archive::contiguous_strides(&sizes);
            let contiguous = sizes.len() == strides.len()
                && sizes.iter().zip(strides.iter().zip(&want)).all(|(&n, (&s, &w))| n <= 1 || s == w);
            let off = meta.storage_offset.as_ref().and_then(|o| o.as_int()).unwrap_or(0);
            if off != 0 {
                return err("as_strided of an input that does not start its storage (a storage offset) is not supported");
            }
            if !contiguous {
                let dense = sizes.len() == strides.len() && dense_permuted(&sizes, &strides);
                if !dense {
                    return err(format!(
                        "as_strided of an input whose storage has gaps or overlaps (sizes {sizes:?}, strides {strides:?}) is not supported"
                    ));
                }
                storage = Some(storage_order(&sizes, &strides)?);
            }
        }
    }
    let t = cx.ty(x);
    let n = t.num_elements().ok_or("as_strided of a symbolic tensor")?;
    let mut total: i64 = 1;
    for &s in size {
        if !(0..=MAX_SIZE).contains(&s) {
            return err(format!("as_strided size {s} out of range"));
        }
        total = total.checked_mul(s).filter(|&v| v <= MAX_TABLE).ok_or("as_strided result too large")?;
    }
    let mut idx = Vec::with_capacity(total as usize);
    let mut pos = vec![0i64; size.len()];
    for _ in 0..total {
        let mut flat = offset;
        for (p, s) in pos.iter().zip(stride) {
            flat = flat.checked_add(p.checked_mul(*s).ok_or("stride overflow")?).ok_or("stride overflow")?;
        }
        if flat < 0 || flat >= n {
            return err(format!("as_strided reaches element {flat} of a tensor with {n}"));
        }
        idx.push(storage.as_ref().map_or(flat, |st| st[flat as usize]));
        for d in (0..size.len()).rev() {
            pos[d] += 1;
            if pos[d] < size[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok((n, idx))
}

/// Whether `strides` lay `sizes` out densely: some order of the dims (size-1 dims aside) is
/// row-major over exactly the elements.
fn dense_permuted(sizes: &[i64], strides: &[i64]) -> bool {
    let mut dims: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] > 1).collect();
    dims.sort_by_key(|&d| std::cmp::Reverse(strides[d]));
    let mut expect = 1i64;
    for &d in dims.iter().rev() {
        if strides[d] != expect {
            return false;
        }
        match expect.checked_mul(sizes[d]) {
            Some(e) => expect = e,
            None => return false,
        }
    }
    true
}

/// For a dense layout: the row-major position of the element at each storage position.
fn storage_order(sizes: &[i64], strides: &[i64]) -> R<Vec<i64>> {
    let n: i64 = sizes.iter().product();
    if n > MAX_TABLE {
        return err("as_strided input too large");
    }
    let mut order = vec![0i64; n as usize];
    let mut pos = vec![0i64; sizes.len()];
    for logical in 0..n {
        let s: i64 = pos.iter().zip(strides).map(|(p, st)| p * st).sum();
        order[s as usize] = logical;
        for d in (0..sizes.len()).rev() {
            pos[d] += 1;
            if pos[d] < sizes[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok(order)
}

/// `as_strided` of a tensor whose storage its recorded strides lay out densely: a gather of the
/// flat elements at the strided positions.
pub(super) fn as_strided(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    // A None offset is the input's own, 0 for the contiguous tensors the importer builds.
    let offset = cx.opt_int("storage_offset")?.unwrap_or(0);
    let (n, idx) = strided_positions(cx, x, &size, &stride, offset)?;
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    let iv = cx.const_i64(&[idx.len() as i64], &idx)?;
    let g = take_along(cx, flat, 0, iv)?;
    one(cx.reshape(g, size.iter().map(|&s| Dim::Static(s)).collect())?)
}

/// `as_strided_scatter(self, src, size, stride, storage_offset)`: `self` with the elements an
/// `as_strided` view reads replaced by `src` (a scatter into the flat elements; where the view
/// overlaps itself the last write wins, which torch leaves unspecified).
pub(super) fn as_strided_scatter(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let src = cx.t("src")?;
    let size = cx.ints("size")?;
    let stride = cx.ints("stride")?;
    let offset = cx.opt_int("storage_offset")?.unwrap_or(0);
    let (n, idx) = strided_positions(cx, x, &size, &stride, offset)?;
    let total = idx.len() as i64;
    if cx.ty(src).num_elements() != Some(total) {
        return err(format!("as_strided_scatter: src {} does not fill a view of size {size:?}", cx.ty(src)));
    }
    let dims = cx.dims(x);
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    let updates = cx.reshape(src, vec![Dim::Static(total)])?;
    let updates = cx.convert(updates, cx.dtype(x))?;
    let coords = cx.const_i64(&[total, 1], &idx)?;
    let s = elementwise_scatter(cx, flat, coords, updates, tpuc_ir::ScatterKind::Replace)?;
    one(cx.reshape(s, dims)?)
}

/// `unfold(dimension, size, step)`: windows along a dim become a new last dim. A rank-0
/// tensor counts as one element along dim 0 and gives `[size]` (size 0 or 1), as in torch.
pub(super) fn unfold(cx: &mut Ctx) -> R<Vec<Val>> {
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
