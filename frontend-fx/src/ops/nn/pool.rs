//! Pooling: max pooling (with indices), average pooling and adaptive average and max pooling.
//!
//! Output sizes follow `pooling_output_shape` (ceil_mode drops windows that start in the right
//! padding); max pooling pads with -inf, average pooling divides by the per-window count
//! ATen uses. Index outputs (max-pool indices) are built only when something reads them.

use super::conv::expand_list;
use crate::ops::build::*;
use tpuc_ir::ScatterKind;
use Opcode as O;
use tpuc_ir::{AttrEnum, Direction, WindowKind};

/// Window geometry of one spatial dim.
#[derive(Clone, Copy, Debug)]
struct Win {
    n: i64,
    k: i64,
    s: i64,
    pad: i64,
    d: i64,
    out: i64,
    /// extra high padding the reduce_window needs
    hi: i64,
}

/// `pooling_output_shape` plus the padding that makes reduce_window produce it.
fn window(n: i64, k: i64, s: i64, pad: i64, d: i64, ceil: bool) -> R<Win> {
    if k <= 0 || s <= 0 || d <= 0 || pad < 0 {
        return err(format!("bad pooling window: kernel {k}, stride {s}, padding {pad}, dilation {d}"));
    }
    if pad > k / 2 {
        return err(format!("pad {pad} should be at most half of the kernel size {k}"));
    }
    let num = n + 2 * pad - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= n + pad {
        out -= 1;
    }
    if out <= 0 {
        return err(format!("pooling output size {out} is too small (input {n}, kernel {k})"));
    }
    let needed = (out - 1) * s + d * (k - 1) + 1;
    let hi = (needed - n - pad).max(0);
    Ok(Win { n, k, s, pad, d, out, hi })
}

struct Pool {
    lead: usize,
    wins: Vec<Win>,
}

fn pool_geometry(cx: &Ctx, x: ValueId, nsp: usize, ceil: bool, with_dilation: bool) -> R<Pool> {
    let dims = cx.dims(x);
    if dims.len() < nsp + 1 {
        return err(format!("pooling needs at least {} dims, got {}", nsp + 1, cx.ty(x)));
    }
    let lead = dims.len() - nsp;
    let k = expand_list(&cx.ints("kernel_size")?, nsp, "kernel_size")?;
    let s = cx.ints("stride")?;
    let s = if s.is_empty() { k.clone() } else { expand_list(&s, nsp, "stride")? };
    let p = expand_list(&cx.ints("padding")?, nsp, "padding")?;
    let d = if with_dilation { expand_list(&cx.ints("dilation")?, nsp, "dilation")? } else { vec![1; nsp] };
    for v in [&k, &s, &p, &d] {
        for &e in v.iter() {
            check_window(e, 0, "pooling parameter")?;
        }
    }
    let mut wins = Vec::new();
    for i in 0..nsp {
        let n = static_of(&dims[lead + i], "pooled dim")?;
        wins.push(window(n, k[i], s[i], p[i], d[i], ceil)?);
    }
    Ok(Pool { lead, wins })
}

fn reduce_window(cx: &mut Ctx, x: ValueId, kind: WindowKind, pool: &Pool) -> R<ValueId> {
    let r = cx.rank(x);
    let mut wd = vec![1i64; r];
    let mut ws = vec![1i64; r];
    let mut wdil = vec![1i64; r];
    let mut pad = vec![0i64; 2 * r];
    for (i, w) in pool.wins.iter().enumerate() {
        let a = pool.lead + i;
        wd[a] = w.k;
        ws[a] = w.s;
        wdil[a] = w.d;
        pad[2 * a] = w.pad;
        pad[2 * a + 1] = w.hi;
    }
    let attrs = Attrs::new()
        .with("kind", kind.attr())
        .with("window_dimensions", Attr::Ints(wd))
        .with("window_strides", Attr::Ints(ws))
        .with("base_dilations", Attr::Ints(vec![1; r]))
        .with("window_dilations", Attr::Ints(wdil))
        .with("padding", Attr::Ints(pad));
    let y = cx.b.build1(O::ReduceWindow, &[x], attrs, None)?;
    // the window arithmetic must reproduce torch's output size
    let got = cx.dims(y);
    for (i, w) in pool.wins.iter().enumerate() {
        if got[pool.lead + i] != Dim::Static(w.out) {
            return err(format!("internal: pooling produced {} for output size {}", got[pool.lead + i], w.out));
        }
    }
    Ok(y)
}

fn max_pool_impl(cx: &mut Ctx, with_indices: bool) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let k = cx.ints("kernel_size")?;
    let nsp = match k.len() {
        1 if cx.node.target.contains("1d") => 1,
        1 => cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize,
        n => n,
    };
    let ceil = cx.bool("ceil_mode")?;
    let pool = pool_geometry(cx, x, nsp, ceil, true)?;
    let y = reduce_window(cx, x, WindowKind::Max, &pool)?;
    if !with_indices {
        return one(y);
    }
    let idx = if cx.used(1) { Val::Tensor(max_pool_indices(cx, x, &pool)?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), idx])
}

pub(super) fn max_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    max_pool_impl(cx, false)
}
pub(super) fn max_pool_with_indices(cx: &mut Ctx) -> R<Vec<Val>> {
    max_pool_impl(cx, true)
}

/// All combinations of per-dim ranges, row-major.
fn product(ranges: &[i64]) -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for &r in ranges {
        let mut next = Vec::new();
        for p in &out {
            for i in 0..r {
                let mut q = p.clone();
                q.push(i);
                next.push(q);
            }
        }
        out = next;
    }
    out
}

/// Max-pool indices as the CPU kernel computes them: the flat spatial index of the first
/// maximum in window order (a NaN replaces the running max); windows start at their first
/// in-bounds element.
fn max_pool_indices(cx: &mut Ctx, x: ValueId, pool: &Pool) -> R<ValueId> {
    let dims = cx.dims(x);
    let nsp = pool.wins.len();
    let outs: Vec<i64> = pool.wins.iter().map(|w| w.out).collect();
    let count = table_size(&outs, "max-pool index table")?;
    let kernel = table_size(&pool.wins.iter().map(|w| w.k).collect::<Vec<_>>(), "max-pool window")?;
    if count.saturating_mul(kernel) > MAX_TABLE {
        return err("max-pool indices for so large a pooling are not supported");
    }
    let strides_in: Vec<i64> = {
        let mut st = vec![1i64; nsp];
        for i in (0..nsp.saturating_sub(1)).rev() {
            st[i] = st[i + 1] * pool.wins[i + 1].n;
        }
        st
    };
    let out_positions = product(&outs);
    let mut out_shape: Vec<Dim> = dims[..pool.lead].to_vec();
    out_shape.extend(outs.iter().map(|&o| Dim::Static(o)));
    let dt = cx.dtype(x);
    // padded input
    let low = cx.scalar(dt.lowest(), dt)?;
    let r = dims.len();
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    for (i, w) in pool.wins.iter().enumerate() {
        lo[pool.lead + i] = w.pad;
        hi[pool.lead + i] = w.hi;
    }
    let padded = cx.b.pad(x, low, &lo, &hi, &vec![0; r])?;
    // initial: -inf and the first in-bounds index of each window
    let first: Vec<i64> = out_positions
        .iter()
        .map(|p| {
            (0..nsp)
                .map(|i| {
                    let w = pool.wins[i];
                    let mut s = p[i] * w.s - w.pad;
                    while s < 0 {
                        s += w.d;
                    }
                    s * strides_in[i]
                })
                .sum()
        })
        .collect();
    let bdims: Vec<i64> = (pool.lead..r).map(|d| d as i64).collect();
    let first_c = cx.const_i64(&outs, &first)?;
    let mut best_i = cx.b.broadcast_in_dim(first_c, &bdims, out_shape.clone())?;
    let mut best_v = cx.full(dt.lowest(), dt, &out_shape)?;
    let offsets = product(&pool.wins.iter().map(|w| w.k).collect::<Vec<_>>());
    for off in offsets {
        let mut start = vec![0i64; r];
        let mut limit = vec![0i64; r];
        let mut stride = vec![1i64; r];
        for (a, d) in dims.iter().enumerate().take(pool.lead) {
            limit[a] = d.as_static().unwrap_or(i64::MAX);
        }
        for (i, w) in pool.wins.iter().enumerate() {
            let a = pool.lead + i;
            start[a] = off[i] * w.d;
            limit[a] = start[a] + (w.out - 1) * w.s + 1;
            stride[a] = w.s;
        }
        let v = cx.b.slice(padded, &start, &limit, &stride)?;
        let idx: Vec<i64> = out_positions
            .iter()
            .map(|p| (0..nsp).map(|i| (p[i] * pool.wins[i].s - pool.wins[i].pad + off[i] * pool.wins[i].d) * strides_in[i]).sum())
            .collect();
        let ic = cx.const_i64(&outs, &idx)?;
        let ib = cx.b.broadcast_in_dim(ic, &bdims, out_shape.clone())?;
        let gt = cx.cmp(Direction::Gt, v, best_v)?;
        let take = if dt.is_float() {
            let nan = cx.cmp(Direction::Ne, v, v)?;
            cx.bin(O::Or, gt, nan)?
        } else {
            gt
        };
        best_v = cx.select(take, v, best_v)?;
        best_i = cx.select(take, ib, best_i)?;
    }
    Ok(best_i)
}

pub struct PoolGeo {
    pub lead: usize,
    pub wins: Vec<WinPub>,
}

/// Public view of one pooled dim's geometry.
#[derive(Clone, Copy, Debug)]
pub struct WinPub {
    pub n: i64,
    pub k: i64,
    pub s: i64,
    pub pad: i64,
    pub out: i64,
}

/// Average-pooling geometry from the node's kernel_size/stride/padding.
pub fn avg_geometry(cx: &Ctx, x: ValueId, nsp: usize, ceil: bool) -> R<PoolGeo> {
    let pool = pool_geometry(cx, x, nsp, ceil, false)?;
    Ok(PoolGeo { lead: pool.lead, wins: pool.wins.iter().map(|w| WinPub { n: w.n, k: w.k, s: w.s, pad: w.pad, out: w.out }).collect() })
}

/// The per-window divisor of average pooling, broadcast to `like`'s shape.
pub fn avg_divisor(cx: &mut Ctx, like: ValueId, geo: &PoolGeo, include_pad: bool, divisor: Option<i64>) -> R<ValueId> {
    match divisor {
        Some(d) if d != 0 => cx.full_like(Scalar::Int(d), like),
        Some(_) => err("divisor_override must be non-zero"),
        None => {
            let outs: Vec<i64> = geo.wins.iter().map(|w| w.out).collect();
            table_size(&outs, "average-pooling divisor table")?;
            let counts: Vec<f64> = product(&outs)
                .iter()
                .map(|p| {
                    let mut c_pad = 1i64;
                    let mut c_real = 1i64;
                    for (i, w) in geo.wins.iter().enumerate() {
                        let start = p[i] * w.s - w.pad;
                        let end = (start + w.k).min(w.n + w.pad);
                        c_pad *= end - start;
                        c_real *= end.min(w.n) - start.max(0);
                    }
                    (if include_pad { c_pad } else { c_real }) as f64
                })
                .collect();
            let dt = cx.dtype(like);
            let c = cx.const_f(&outs, &counts, dt)?;
            let r = cx.rank(like);
            let bdims: Vec<i64> = (geo.lead..r).map(|d| d as i64).collect();
            let shape = cx.dims(like);
            Ok(cx.b.broadcast_in_dim(c, &bdims, shape)?)
        }
    }
}

pub(super) fn avg_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let k = cx.ints("kernel_size")?;
    let nsp = match k.len() {
        1 => cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize,
        n => n,
    };
    let ceil = cx.bool("ceil_mode")?;
    let include_pad = cx.bool("count_include_pad")?;
    let divisor = cx.opt_int("divisor_override")?;
    // Integer inputs average with truncating integer division, as ATen's CPU kernel does.
    if !(cx.dtype(x).is_float() || cx.dtype(x).is_int()) {
        return err(format!("avg_pool needs a numeric input, got {}", cx.dtype(x).name()));
    }
    // 16-bit floats sum and divide in f32 and round once, as the CPU kernel does.
    let xd = cx.dtype(x);
    let xc = cx.convert(x, dtypes::compute_dtype(xd))?;
    let pool = pool_geometry(cx, xc, nsp, ceil, false)?;
    let s = reduce_window(cx, xc, WindowKind::Sum, &pool)?;
    let geo = avg_geometry(cx, xc, nsp, ceil)?;
    let div = avg_divisor(cx, s, &geo, include_pad, divisor)?;
    let y = cx.bin(O::Div, s, div)?;
    one(cx.convert(y, xd)?)
}

/// Averaging matrix [o, n] of adaptive pooling: row i averages [floor(i*n/o), ceil((i+1)*n/o)).
pub fn adaptive_matrix(n: i64, o: i64) -> Vec<f64> {
    let mut m = vec![0.0; (o * n) as usize];
    for i in 0..o {
        let s = (i * n) / o;
        let e = ((i + 1) * n + o - 1) / o;
        for j in s..e {
            m[(i * n + j) as usize] = 1.0 / (e - s) as f64;
        }
    }
    m
}

/// Contracts dim `d` of `x` with `m` [o, n] (m applied along d), keeping d's position.
pub fn apply_along(cx: &mut Ctx, x: ValueId, d: usize, m: ValueId) -> R<ValueId> {
    let y = cx.b.dot_general(x, m, &[], &[], &[d as i64], &[1])?;
    // y: dims of x without d, then o -> move o back to d
    let r = cx.rank(y);
    let mut perm: Vec<i64> = (0..r as i64 - 1).collect();
    perm.insert(d, r as i64 - 1);
    cx.transpose(y, &perm)
}

/// The operands of adaptive pooling: input, output sizes, input dims and the number of leading
/// (not pooled) dims.
fn adaptive_args(cx: &mut Ctx) -> R<(ValueId, Vec<i64>, Vec<Dim>, usize)> {
    let x = cx.t("self")?;
    let os = cx.ints("output_size")?;
    let dims = cx.dims(x);
    if dims.len() < os.len() + 1 {
        return err("adaptive pooling: input rank too small");
    }
    let lead = dims.len() - os.len();
    Ok((x, os, dims, lead))
}

pub(super) fn adaptive_avg_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, os, dims, lead) = adaptive_args(cx)?;
    let nsp = os.len();
    // 16-bit floats average in f32 and round once, as the CPU kernel does.
    let out_dt = cx.dtype(x);
    let x = cx.convert(x, dtypes::compute_dtype(out_dt))?;
    let xd = cx.dtype(x);
    let mut divisible = true;
    let mut ns = Vec::new();
    for (i, &o) in os.iter().enumerate() {
        let n = static_of(&dims[lead + i], "pooled dim")?;
        if o <= 0 || o > MAX_SIZE {
            return err(format!("adaptive pooling output size {o} must be positive"));
        }
        divisible &= n % o == 0;
        ns.push(n);
    }
    if divisible {
        let wins: Vec<Win> = ns
            .iter()
            .zip(&os)
            .map(|(&n, &o)| Win { n, k: n / o, s: n / o, pad: 0, d: 1, out: o, hi: 0 })
            .collect();
        let pool = Pool { lead, wins };
        let s = reduce_window(cx, x, WindowKind::Sum, &pool)?;
        let k: i64 = ns.iter().zip(&os).fold(1i64, |a, (n, o)| a.saturating_mul(n / o));
        let div = cx.full_like(Scalar::Int(k), s)?;
        let y = cx.bin(O::Div, s, div)?;
        return one(cx.convert(y, out_dt)?);
    }
    let mut y = x;
    for i in (0..nsp).rev() {
        table_size(&[ns[i], os[i]], "adaptive pooling matrix")?;
        let m = adaptive_matrix(ns[i], os[i]);
        let mc = cx.const_f(&[os[i], ns[i]], &m, xd)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(cx.convert(y, out_dt)?)
}

pub(super) fn adaptive_max_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, os, dims, lead) = adaptive_args(cx)?;
    let mut wins = Vec::new();
    let mut sizes = Vec::new();
    for (i, &o) in os.iter().enumerate() {
        let n = static_of(&dims[lead + i], "pooled dim")?;
        if o <= 0 {
            return err(format!("adaptive max pooling to size {o}"));
        }
        sizes.push((n, o));
        wins.push(Win { n, k: n / o, s: n / o, pad: 0, d: 1, out: o, hi: 0 });
    }
    if sizes.iter().any(|&(n, o)| n % o != 0) {
        return adaptive_max_uneven(cx, x, lead, &sizes);
    }
    let pool = Pool { lead, wins };
    let y = reduce_window(cx, x, WindowKind::Max, &pool)?;
    let idx = if cx.used(1) { Val::Tensor(max_pool_indices(cx, x, &pool)?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), idx])
}

/// Adaptive max pooling where an output size does not divide its input size: windows
/// [floor(i·n/o), ceil((i+1)·n/o)) differ in length. Each pooled dim is gathered into
/// [o, K] (K the longest window; a shorter window repeats its last element, which changes
/// neither the max nor the first position holding it), then the K dims are reduced. The
/// indices are flattened spatial positions, gathered the same way: the first one (in window
/// order) holding the max.
fn adaptive_max_uneven(cx: &mut Ctx, x: ValueId, lead: usize, sizes: &[(i64, i64)]) -> R<Vec<Val>> {
    let want_idx = cx.used(1);
    let dims = cx.dims(x);
    let mut v = x;
    let mut idx = if want_idx {
        // Flattened spatial position of every element.
        let mut pos: Option<ValueId> = None;
        let mut stride = 1i64;
        for (i, &(n, _)) in sizes.iter().enumerate().rev() {
            let io = cx.iota(DType::I64, &dims, lead + i)?;
            let term = if stride == 1 { io } else { cx.bin_c(O::Mul, io, stride as f64)? };
            pos = Some(match pos {
                Some(p) => cx.bin(O::Add, p, term)?,
                None => term,
            });
            stride *= n;
        }
        pos
    } else {
        None
    };
    let mut window_dims = Vec::new();
    for (i, &(n, o)) in sizes.iter().enumerate() {
        let d = lead + 2 * i;
        let bounds: Vec<(i64, i64)> = (0..o).map(|j| ((j * n) / o, ((j + 1) * n + o - 1) / o)).collect();
        let k = bounds.iter().map(|(s, e)| e - s).max().unwrap_or(1);
        table_size(&[o, k], "adaptive pooling window table")?;
        let table: Vec<i64> = bounds.iter().flat_map(|&(s, e)| (0..k).map(move |j| (s + j).min(e - 1))).collect();
        let t = cx.const_i64(&[o * k], &table)?;
        let split = |cx: &mut Ctx, g: ValueId| -> R<ValueId> {
            let mut nd = cx.dims(g);
            nd.splice(d..=d, [Dim::Static(o), Dim::Static(k)]);
            cx.reshape(g, nd)
        };
        let g = take_along(cx, v, d, t)?;
        v = split(cx, g)?;
        if let Some(p) = idx {
            let g = take_along(cx, p, d, t)?;
            idx = Some(split(cx, g)?);
        }
        window_dims.push(d + 1);
    }
    let y = cx.reduce(v, ReduceKind::Max, &window_dims, false)?;
    let Some(p) = idx else { return Ok(vec![Val::Tensor(y), Val::Absent]) };
    let yk = cx.reduce(v, ReduceKind::Max, &window_dims, true)?;
    let yb = cx.broadcast_to(yk, &cx.dims(v))?;
    // The max itself, or NaN where the window has one (max propagates it).
    let hit = cx.cmp(Direction::Eq, v, yb)?;
    let hit = if cx.dtype(v).is_float() {
        let nan = cx.cmp(Direction::Ne, v, v)?;
        cx.bin(O::Or, hit, nan)?
    } else {
        hit
    };
    let big = cx.full_like(Scalar::Int(i64::MAX), p)?;
    let cand = cx.select(hit, p, big)?;
    let i = cx.reduce(cand, ReduceKind::Min, &window_dims, false)?;
    Ok(vec![Val::Tensor(y), Val::Tensor(i)])
}

/// Scatter-adds the output gradient into the positions the indices name (flat per spatial
/// block), as the CPU kernel does.
pub fn max_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let idx = cx.t("indices")?;
    let nsp = cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize;
    let xd = cx.dims(x);
    let dyd = cx.dims(dy);
    if xd.len() < nsp + 1 || dyd.len() != xd.len() || cx.dims(idx) != dyd {
        return err("max_pool backward: shapes of self, grad_output and indices do not fit");
    }
    let lead = xd.len() - nsp;
    let spatial_in = xd[lead..].iter().fold(Dim::Static(1), |a, d| a.mul(d));
    let spatial_out = dyd[lead..].iter().fold(Dim::Static(1), |a, d| a.mul(d));
    let mut gshape: Vec<Dim> = xd[..lead].to_vec();
    gshape.push(spatial_out);
    let mut zshape: Vec<Dim> = xd[..lead].to_vec();
    zshape.push(spatial_in);
    let g = cx.reshape(dy, gshape.clone())?;
    let i = cx.reshape(idx, gshape.clone())?;
    let dt = cx.dtype(x);
    let g = cx.convert(g, dt)?;
    let z = cx.full(Scalar::Int(0), dt, &zshape)?;
    // full coordinates: iotas over the leading dims, the index over the flat spatial dim
    let mut col = gshape.clone();
    col.push(Dim::Static(1));
    let mut parts = Vec::new();
    for j in 0..=lead {
        let v = if j == lead { cx.convert(i, DType::I64)? } else { cx.iota(DType::I64, &gshape, j)? };
        parts.push(cx.reshape(v, col.clone())?);
    }
    let coords = cx.b.concatenate(&parts, gshape.len() as i64)?;
    let s = elementwise_scatter(cx, z, coords, g, ScatterKind::Add)?;
    one(cx.reshape(s, xd)?)
}

/// The transpose of average pooling: the gradient divided by each window's divisor, dilated
/// by the stride, padded, and summed over windows of the kernel size.
pub fn avg_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let nsp = cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize;
    let ceil = cx.bool("ceil_mode")?;
    let include_pad = cx.bool("count_include_pad")?;
    let divisor = cx.opt_int("divisor_override")?;
    let geo = avg_geometry(cx, x, nsp, ceil)?;
    if geo.wins.iter().any(|w| w.k - 1 - w.pad < 0) {
        return err("avg_pool backward: padding larger than the kernel");
    }
    let div = avg_divisor(cx, g, &geo, include_pad, divisor)?;
    let gq = cx.bin(O::Div, g, div)?;
    let xd = cx.dims(x);
    let r = xd.len();
    let dt = cx.dtype(g);
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    let mut interior = vec![0i64; r];
    let mut wdims = vec![1i64; r];
    for (i, w) in geo.wins.iter().enumerate() {
        let a = geo.lead + i;
        lo[a] = w.k - 1 - w.pad;
        hi[a] = w.n + w.pad - (w.out - 1) * w.s - 1;
        interior[a] = w.s - 1;
        wdims[a] = w.k;
    }
    let z = cx.scalar(Scalar::Int(0), dt)?;
    let padded = cx.b.pad(gq, z, &lo, &hi, &interior)?;
    let attrs = Attrs::new()
        .with("kind", WindowKind::Sum.attr())
        .with("window_dimensions", Attr::Ints(wdims))
        .with("window_strides", Attr::Ints(vec![1; r]))
        .with("base_dilations", Attr::Ints(vec![1; r]))
        .with("window_dilations", Attr::Ints(vec![1; r]))
        .with("padding", Attr::Ints(vec![0; 2 * r]));
    let y = cx.b.build1(O::ReduceWindow, &[padded], attrs, None)?;
    if cx.dims(y) != xd {
        return err(format!("internal: avg_pool backward produced {}", cx.ty(y)));
    }
    one(y)
}

/// The transpose of adaptive average pooling: along each pooled dim, the transposed averaging
/// matrix (each output's gradient spread over its window, divided by the window's length;
/// overlapping windows add up), in f32 for 16-bit floats as the forward.
pub fn adaptive_avg_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let nsp = cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize;
    let xd = cx.dims(x);
    let gd = cx.dims(g);
    if xd.len() < nsp + 1 || gd.len() != xd.len() || gd[..xd.len() - nsp] != xd[..xd.len() - nsp] {
        return err(format!("adaptive_avg_pool backward: grad_output {} does not fit self {}", cx.ty(g), cx.ty(x)));
    }
    let lead = xd.len() - nsp;
    let out_dt = cx.dtype(x);
    let dt = dtypes::compute_dtype(out_dt);
    let mut y = cx.convert(g, dt)?;
    for i in (0..nsp).rev() {
        let n = static_of(&xd[lead + i], "pooled dim")?;
        let o = static_of(&gd[lead + i], "pooled output dim")?;
        if o <= 0 || n < 0 {
            return err(format!("adaptive_avg_pool backward: output size {o} for input size {n}"));
        }
        table_size(&[n, o], "adaptive pooling matrix")?;
        let m = adaptive_matrix(n, o);
        let mut mt = vec![0.0; m.len()];
        for r in 0..o as usize {
            for c in 0..n as usize {
                mt[c * o as usize + r] = m[r * n as usize + c];
            }
        }
        let mc = cx.const_f(&[n, o], &mt, dt)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(cx.convert(y, out_dt)?)
}
