//! The ops only the reference mode evaluates: what could differ from XLA in the last bit
//! (transcendental functions, float contractions and sums, whose order XLA chooses) and the
//! ops constant folding has no use for (gather/scatter, windows, sort, scan, the high-level
//! ops). Values are read once into numbers ([`N`]), computed in f64 (floats) or wrapping i64
//! (integers), and stored in the result dtype at the end of the op.

use super::{as_f, as_i, build, combine, identity, read, rounded, supported, N};
use std::cmp::Ordering;
use tpuc_ir::{payload, ArgReduceKind, Attrs, DType, GatherDims, GeluApproximation, Opcode, ReduceKind, ScatterDims, TensorData, TensorType};

/// A dense value as numbers, row-major.
struct Arr {
    dtype: DType,
    dims: Vec<usize>,
    strides: Vec<usize>,
    vals: Vec<N>,
}

impl Arr {
    fn of(t: &TensorData) -> Option<Arr> {
        if !supported(t.ty.dtype) {
            return None;
        }
        let dims: Vec<usize> = t.ty.static_dims()?.iter().map(|&d| d as usize).collect();
        let n: usize = dims.iter().product();
        let vals = (0..n).map(|i| read(t, i)).collect();
        Some(Arr { dtype: t.ty.dtype, strides: strides(&dims), dims, vals })
    }

    fn at(&self, idx: &[usize]) -> N {
        self.vals[idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<usize>()]
    }

    fn f(&self, idx: &[usize]) -> f64 {
        as_f(self.at(idx))
    }
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        if dims[d] > 0 {
            out[d] = i % dims[d];
            i /= dims[d];
        }
    }
    out
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(strides(dims)).map(|(i, s)| i * s).sum()
}

fn dims_of(t: &TensorType) -> Option<Vec<usize>> {
    Some(t.static_dims()?.iter().map(|&d| d as usize).collect())
}

fn usizes(v: &[i64]) -> Option<Vec<usize>> {
    v.iter().map(|&v| usize::try_from(v).ok()).collect()
}

fn float_result(rt: &TensorType, vals: Vec<f64>) -> Option<TensorData> {
    build(rt, vals.into_iter().map(N::F).collect(), false)
}

/// `acc + x * y` in the dtype's arithmetic (f64 for floats, wrapping for integers).
fn mac(float: bool, acc: N, x: N, y: N) -> N {
    if float {
        N::F(as_f(acc) + as_f(x) * as_f(y))
    } else {
        N::I(as_i(acc).wrapping_add(as_i(x).wrapping_mul(as_i(y))))
    }
}

fn zero(float: bool) -> N {
    if float {
        N::F(0.0)
    } else {
        N::I(0)
    }
}

fn round_half_even(x: f64) -> f64 {
    let f = x.floor();
    let d = x - f;
    if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
        f + 1.0
    } else {
        f
    }
}

fn gelu(x: f64, tanh: bool) -> f64 {
    if tanh {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    } else {
        0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    }
}

/// Integer power as XLA computes it: repeated multiplication (wrapping); a negative exponent
/// gives 0 except for bases 1 and -1.
fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut acc, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    acc
}

/// One element of an elementwise op the exact mode leaves out.
pub(super) fn elementwise(op: Opcode, dtype: DType, attrs: &Attrs, xs: &[N]) -> Option<N> {
    use Opcode::*;
    if dtype.is_float() {
        let x = as_f(xs[0]);
        let y = || as_f(xs[1]);
        return Some(N::F(match op {
            Exp => x.exp(),
            Expm1 => x.exp_m1(),
            Log => x.ln(),
            Log1p => x.ln_1p(),
            Rsqrt => 1.0 / x.sqrt(),
            Tanh => x.tanh(),
            Logistic => 1.0 / (1.0 + (-x).exp()),
            Sin => x.sin(),
            Cos => x.cos(),
            Tan => x.tan(),
            Erf => libm::erf(x),
            Erfc => libm::erfc(x),
            Lgamma => libm::lgamma(x),
            Acosh => libm::acosh(x),
            Asinh => libm::asinh(x),
            Atanh => libm::atanh(x),
            NextAfter if dtype == DType::F64 => libm::nextafter(x, y()),
            NextAfter if dtype == DType::F32 => libm::nextafterf(x as f32, y() as f32) as f64,
            Floor => x.floor(),
            Ceil => x.ceil(),
            RoundEven => round_half_even(x),
            Sign if x.is_nan() => x,
            Sign if x == 0.0 => x,
            Sign => x.signum(),
            IsFinite => return Some(N::I(i64::from(x.is_finite()))),
            Rem => x % y(),
            Pow => x.powf(y()),
            Atan2 => x.atan2(y()),
            Gelu => gelu(x, payload::Gelu::of(attrs)?.approximate == GeluApproximation::Tanh),
            _ => return None,
        }));
    }
    let x = as_i(xs[0]);
    let y = || as_i(xs[1]);
    Some(N::I(match op {
        Sign => x.signum(),
        Floor | Ceil | RoundEven => x,
        IsFinite => 1,
        Div if y() == 0 => -1,
        Rem if y() == 0 => x,
        Pow => int_pow(x, y()),
        _ => return None,
    }))
}

/// A conversion the exact mode leaves out: float to integer saturates to the target's range
/// (NaN gives 0); an integer too large for f64 to hold exactly is rounded.
pub(super) fn convert(to: DType, x: N) -> N {
    match x {
        N::F(f) if !to.is_float() => {
            if f.is_nan() {
                return N::I(0);
            }
            let lo = to.lowest().as_f64();
            let hi = to.highest().as_f64();
            let t = f.trunc().clamp(lo, hi);
            // i64's bounds are not exact in f64: saturate there without a wrapping cast.
            if t >= i64::MAX as f64 {
                N::I(to.highest().as_i64())
            } else {
                N::I(t as i64)
            }
        }
        N::I(i) if to.is_float() => N::F(i as f64),
        other => other,
    }
}

/// A one-result op only the reference mode evaluates.
pub(super) fn single(op: Opcode, a: &Attrs, args: &[&TensorData], rt: &TensorType) -> Option<TensorData> {
    use Opcode::*;
    if !supported(rt.dtype) {
        return None;
    }
    match op {
        Pad => pad(args, a, rt),
        DotGeneral => dot_general(&Arr::of(args[0])?, &Arr::of(args[1])?, a, rt),
        Convolution => convolution(&Arr::of(args[0])?, &Arr::of(args[1])?, a, rt),
        ArgReduce => arg_reduce(&Arr::of(args[0])?, a, rt),
        ReduceWindow => reduce_window(&Arr::of(args[0])?, a, rt),
        Gather => gather(&Arr::of(args[0])?, &Arr::of(args[1])?, a, rt),
        Scatter => scatter(&Arr::of(args[0])?, &Arr::of(args[1])?, &Arr::of(args[2])?, a, rt),
        Scan => scan(&Arr::of(args[0])?, a, rt),
        Softmax => softmax(&Arr::of(args[0])?, payload::Softmax::of(a)?.dimension as usize, false, rt),
        LogSoftmax => softmax(&Arr::of(args[0])?, payload::LogSoftmax::of(a)?.dimension as usize, true, rt),
        Attention => attention(args, a, rt),
        _ => None,
    }
}

/// An op with several results.
pub(super) fn multi(op: Opcode, a: &Attrs, args: &[&TensorData], results: &[TensorType]) -> Option<Vec<TensorData>> {
    if results.iter().any(|t| !supported(t.dtype)) {
        return None;
    }
    match op {
        Opcode::Sort => sort(&Arr::of(args[0])?, a, results),
        Opcode::LayerNorm => layer_norm(&Arr::of(args[0])?, a, results),
        _ => None,
    }
}

fn pad(args: &[&TensorData], a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let (x, value) = (Arr::of(args[0])?, Arr::of(args[1])?);
    let payload::Pad { edge_padding_low: lo, interior_padding: interior, .. } = payload::Pad::of(a)?;
    let rdims = dims_of(rt)?;
    let mut out = vec![*value.vals.first()?; rdims.iter().product()];
    for (i, &v) in x.vals.iter().enumerate() {
        let xi = unravel(i, &x.dims);
        let pos: Vec<i64> = xi.iter().enumerate().map(|(k, &j)| lo[k] + j as i64 * (interior[k] + 1)).collect();
        if pos.iter().zip(&rdims).all(|(&p, &s)| p >= 0 && (p as usize) < s) {
            let p: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
            out[ravel(&p, &rdims)] = v;
        }
    }
    build(rt, out, false)
}

fn dot_general(x: &Arr, y: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let dot = payload::DotGeneral::of(a)?;
    let (lb, rb) = (usizes(dot.lhs_batching_dimensions)?, usizes(dot.rhs_batching_dimensions)?);
    let (lc, rc) = (usizes(dot.lhs_contracting_dimensions)?, usizes(dot.rhs_contracting_dimensions)?);
    let lfree: Vec<usize> = (0..x.dims.len()).filter(|d| !lb.contains(d) && !lc.contains(d)).collect();
    let rfree: Vec<usize> = (0..y.dims.len()).filter(|d| !rb.contains(d) && !rc.contains(d)).collect();
    let cdims: Vec<usize> = lc.iter().map(|&d| x.dims[d]).collect();
    let cn: usize = cdims.iter().product();
    let rdims = dims_of(rt)?;
    let float = rt.dtype.is_float();
    let n: usize = rdims.iter().product();
    let mut out = Vec::with_capacity(n);
    let (mut xi, mut yi) = (vec![0; x.dims.len()], vec![0; y.dims.len()]);
    for i in 0..n {
        let ri = unravel(i, &rdims);
        for (k, (&l, &r)) in lb.iter().zip(&rb).enumerate() {
            xi[l] = ri[k];
            yi[r] = ri[k];
        }
        for (k, &d) in lfree.iter().enumerate() {
            xi[d] = ri[lb.len() + k];
        }
        for (k, &d) in rfree.iter().enumerate() {
            yi[d] = ri[lb.len() + lfree.len() + k];
        }
        let mut acc = zero(float);
        for c in 0..cn {
            let ci = unravel(c, &cdims);
            for (k, (&l, &r)) in lc.iter().zip(&rc).enumerate() {
                xi[l] = ci[k];
                yi[r] = ci[k];
            }
            acc = mac(float, acc, x.at(&xi), y.at(&yi));
        }
        out.push(acc);
    }
    build(rt, out, false)
}

/// lhs [N, C, spatial...], rhs [O, I, spatial...], result [N, O, spatial...].
fn convolution(x: &Arr, w: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let conv = payload::Convolution::of(a)?;
    let (strides_, pad, lhs_dil, rhs_dil) = (conv.window_strides, conv.padding, conv.lhs_dilation, conv.rhs_dilation);
    let groups = conv.feature_group_count as usize;
    let batch_groups = conv.batch_group_count as usize;
    let spatial = x.dims.len().checked_sub(2)?;
    let (batch, channels) = (x.dims[0], x.dims[1]);
    let (features, in_per_group) = (w.dims[0], w.dims[1]);
    let rdims = dims_of(rt)?;
    let float = rt.dtype.is_float();
    let per_group = features / groups.max(1);
    let per_batch_group = features / batch_groups.max(1);
    let batch_per_group = batch / batch_groups.max(1);
    let kdims: Vec<usize> = w.dims[2..].to_vec();
    let kn: usize = kdims.iter().product();
    let n: usize = rdims.iter().product();
    let mut out = Vec::with_capacity(n);
    for oi in 0..n {
        let idx = unravel(oi, &rdims);
        let (b, f) = (idx[0], idx[1]);
        let group = f / per_group.max(1);
        let bn = (f / per_batch_group.max(1)) * batch_per_group + b;
        let mut acc = zero(float);
        for cin in 0..in_per_group {
            let xc = group * in_per_group + cin;
            if xc >= channels {
                continue;
            }
            'window: for kk in 0..kn {
                let k = unravel(kk, &kdims);
                let mut xi = vec![bn, xc];
                for s in 0..spatial {
                    let p = idx[2 + s] as i64 * strides_[s] + k[s] as i64 * rhs_dil[s] - pad[2 * s];
                    if p < 0 || p % lhs_dil[s] != 0 {
                        continue 'window;
                    }
                    let q = (p / lhs_dil[s]) as usize;
                    if q >= x.dims[2 + s] {
                        continue 'window;
                    }
                    xi.push(q);
                }
                let mut wi = vec![f, cin];
                wi.extend(&k);
                acc = mac(float, acc, x.at(&xi), w.at(&wi));
            }
        }
        out.push(acc);
    }
    build(rt, out, false)
}

/// Index of the first max (`argmax`) or min (`argmin`) along `dimension`; NaN wins.
fn arg_reduce(x: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let payload::ArgReduce { dimension, kind } = payload::ArgReduce::of(a)?;
    let (d, max) = (dimension as usize, kind == ArgReduceKind::Argmax);
    let rdims = dims_of(rt)?;
    let mut best: Vec<Option<(N, usize)>> = vec![None; rdims.iter().product()];
    for (i, &v) in x.vals.iter().enumerate() {
        let xi = unravel(i, &x.dims);
        let ri: Vec<usize> = xi.iter().enumerate().filter(|(k, _)| *k != d).map(|(_, &j)| j).collect();
        let slot = &mut best[ravel(&ri, &rdims)];
        let better = match *slot {
            None => true,
            Some((b, _)) => {
                let (vn, bn) = (matches!(v, N::F(f) if f.is_nan()), matches!(b, N::F(f) if f.is_nan()));
                if bn {
                    false
                } else if vn {
                    true
                } else {
                    compare(v, b) == Some(if max { Ordering::Greater } else { Ordering::Less })
                }
            }
        };
        if better {
            *slot = Some((v, xi[d]));
        }
    }
    build(rt, best.into_iter().map(|b| N::I(b.map_or(0, |(_, i)| i as i64))).collect(), false)
}

fn compare(a: N, b: N) -> Option<Ordering> {
    match (a, b) {
        (N::I(x), N::I(y)) => Some(x.cmp(&y)),
        _ => as_f(a).partial_cmp(&as_f(b)),
    }
}

fn reduce_window(x: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let w = payload::ReduceWindow::of(a)?;
    let kind = ReduceKind::from(w.kind);
    let window = usizes(w.window_dimensions)?;
    let (wstrides, base_dil, win_dil, pad) = (w.window_strides, w.base_dilations, w.window_dilations, w.padding);
    let init = identity(kind, x.dtype)?;
    let rdims = dims_of(rt)?;
    let wn: usize = window.iter().product();
    let n: usize = rdims.iter().product();
    let mut out = Vec::with_capacity(n);
    for oi in 0..n {
        let idx = unravel(oi, &rdims);
        let mut acc = init;
        for kk in 0..wn {
            let k = unravel(kk, &window);
            let mut xi = Vec::with_capacity(x.dims.len());
            for d in 0..x.dims.len() {
                let p = idx[d] as i64 * wstrides[d] + k[d] as i64 * win_dil[d] - pad[2 * d];
                if p < 0 || p % base_dil[d] != 0 || (p / base_dil[d]) as usize >= x.dims[d] {
                    break;
                }
                xi.push((p / base_dil[d]) as usize);
            }
            // Padding holds the identity, which leaves the accumulator as it is.
            if xi.len() == x.dims.len() {
                acc = combine(kind, x.dtype, acc, x.at(&xi))?;
            }
        }
        out.push(acc);
    }
    build(rt, out, false)
}

/// The start index vector for batch position `batch` of `indices`.
fn index_vector(indices: &Arr, batch: &[usize], index_vector_dim: usize) -> Vec<i64> {
    if index_vector_dim == indices.dims.len() {
        return vec![as_i(indices.at(batch))];
    }
    (0..indices.dims[index_vector_dim])
        .map(|k| {
            let mut full = batch.to_vec();
            full.insert(index_vector_dim, k);
            as_i(indices.at(&full))
        })
        .collect()
}

fn gather(x: &Arr, indices: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let g = GatherDims::of(a)?;
    let offset_dims = usizes(&g.offset_dims)?;
    let collapsed = usizes(&g.collapsed_slice_dims)?;
    let operand_batching = usizes(&g.operand_batching_dims)?;
    let indices_batching = usizes(&g.start_indices_batching_dims)?;
    let start_index_map = usizes(&g.start_index_map)?;
    let ivd = usize::try_from(g.index_vector_dim).ok()?;
    let sizes = g.slice_sizes;
    let rdims = dims_of(rt)?;
    let rank = x.dims.len();
    let batch_dims: Vec<usize> = (0..rdims.len()).filter(|d| !offset_dims.contains(d)).collect();
    let window_dims: Vec<usize> = (0..rank).filter(|d| !collapsed.contains(d) && !operand_batching.contains(d)).collect();
    let n: usize = rdims.iter().product();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let ri = unravel(i, &rdims);
        let bi: Vec<usize> = batch_dims.iter().map(|&d| ri[d]).collect();
        let start = index_vector(indices, &bi, ivd);
        let mut xi = vec![0i64; rank];
        for (k, &d) in start_index_map.iter().enumerate() {
            let size = if sizes[d] < 0 { x.dims[d] as i64 } else { sizes[d] };
            xi[d] = start[k].clamp(0, (x.dims[d] as i64 - size).max(0));
        }
        for (k, &d) in operand_batching.iter().enumerate() {
            let ds = indices_batching[k];
            xi[d] += bi[if ds < ivd { ds } else { ds - 1 }] as i64;
        }
        for (k, &d) in window_dims.iter().enumerate() {
            xi[d] += ri[offset_dims[k]] as i64;
        }
        let xu: Vec<usize> = xi.iter().map(|&v| v as usize).collect();
        out.push(x.at(&xu));
    }
    build(rt, out, false)
}

fn scatter(x: &Arr, indices: &Arr, updates: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let sd = ScatterDims::of(a)?;
    let window_dims = usizes(&sd.update_window_dims)?;
    let inserted = usizes(&sd.inserted_window_dims)?;
    let input_batching = usizes(&sd.input_batching_dims)?;
    let indices_batching = usizes(&sd.scatter_indices_batching_dims)?;
    let to_operand = usizes(&sd.scatter_dims_to_operand_dims)?;
    let ivd = usize::try_from(sd.index_vector_dim).ok()?;
    let kind = payload::Scatter::of(a)?.kind.combiner();
    let rank = x.dims.len();
    let mut out = x.vals.clone();
    let scatter_dims: Vec<usize> = (0..updates.dims.len()).filter(|d| !window_dims.contains(d)).collect();
    let operand_window_dims: Vec<usize> = (0..rank).filter(|d| !inserted.contains(d) && !input_batching.contains(d)).collect();
    for (i, &u) in updates.vals.iter().enumerate() {
        let ui = unravel(i, &updates.dims);
        let si: Vec<usize> = scatter_dims.iter().map(|&d| ui[d]).collect();
        let start = index_vector(indices, &si, ivd);
        let mut xi = vec![0i64; rank];
        for (k, &d) in to_operand.iter().enumerate() {
            xi[d] = start[k];
        }
        for (k, &d) in input_batching.iter().enumerate() {
            let ds = indices_batching[k];
            xi[d] += si[if ds < ivd { ds } else { ds - 1 }] as i64;
        }
        for (k, &d) in operand_window_dims.iter().enumerate() {
            xi[d] += ui[window_dims[k]] as i64;
        }
        if xi.iter().zip(&x.dims).all(|(&v, &s)| v >= 0 && (v as usize) < s) {
            let xu: Vec<usize> = xi.iter().map(|&v| v as usize).collect();
            let o = ravel(&xu, &x.dims);
            out[o] = match kind {
                None => rounded(x.dtype, u),
                Some(k) => rounded(x.dtype, combine(k, x.dtype, out[o], u)?),
            };
        }
    }
    build(rt, out, false)
}

fn scan(x: &Arr, a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let payload::Scan { dimension, kind } = payload::Scan::of(a)?;
    let (d, kind) = (dimension as usize, ReduceKind::from(kind));
    let step = x.strides[d];
    let mut out = x.vals.clone();
    for i in 0..out.len() {
        if unravel(i, &x.dims)[d] > 0 {
            out[i] = rounded(x.dtype, combine(kind, x.dtype, out[i - step], x.vals[i])?);
        }
    }
    build(rt, out, false)
}

fn softmax(x: &Arr, d: usize, log: bool, rt: &TensorType) -> Option<TensorData> {
    let len = *x.dims.get(d)?;
    let step = x.strides[d];
    let mut out: Vec<f64> = x.vals.iter().map(|&v| as_f(v)).collect();
    for base in 0..x.vals.len() {
        if unravel(base, &x.dims)[d] != 0 {
            continue;
        }
        let row: Vec<f64> = (0..len).map(|k| as_f(x.vals[base + k * step])).collect();
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = if m.is_finite() { m } else { 0.0 };
        let sum: f64 = row.iter().map(|v| (v - m).exp()).sum();
        for (k, v) in row.iter().enumerate() {
            out[base + k * step] = if log { v - m - sum.ln() } else { (v - m).exp() / sum };
        }
    }
    float_result(rt, out)
}

/// Stable sort along `dimension` (NaN last ascending, first descending); values and indices.
fn sort(x: &Arr, a: &Attrs, results: &[TensorType]) -> Option<Vec<TensorData>> {
    let payload::Sort { dimension, descending } = payload::Sort::of(a)?;
    let d = dimension as usize;
    let len = *x.dims.get(d)?;
    let step = x.strides[d];
    let mut vals = x.vals.clone();
    let mut idxs = vec![N::I(0); x.vals.len()];
    let key = |v: N| match v {
        N::F(f) if f.is_nan() => N::F(f64::INFINITY),
        v => v,
    };
    for base in 0..x.vals.len() {
        if unravel(base, &x.dims)[d] != 0 {
            continue;
        }
        let mut row: Vec<(N, usize)> = (0..len).map(|k| (x.vals[base + k * step], k)).collect();
        row.sort_by(|p, q| {
            let o = compare(key(p.0), key(q.0)).unwrap_or(Ordering::Equal);
            if descending {
                o.reverse()
            } else {
                o
            }
        });
        for (k, (v, i)) in row.into_iter().enumerate() {
            vals[base + k * step] = v;
            idxs[base + k * step] = N::I(i as i64);
        }
    }
    Some(vec![build(&results[0], vals, false)?, build(&results[1], idxs, false)?])
}

/// (x - mean) * rstd over the trailing `normalized_rank` dims, with mean and rstd.
fn layer_norm(x: &Arr, a: &Attrs, results: &[TensorType]) -> Option<Vec<TensorData>> {
    let payload::LayerNorm { normalized_rank, epsilon: eps } = payload::LayerNorm::of(a)?;
    let k = normalized_rank as usize;
    let inner: usize = x.dims[x.dims.len().checked_sub(k)?..].iter().product();
    let rows = x.vals.len() / inner.max(1);
    let mut y = vec![0.0; x.vals.len()];
    let (mut means, mut rstds) = (vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row: Vec<f64> = x.vals[r * inner..(r + 1) * inner].iter().map(|&v| as_f(v)).collect();
        let mean = row.iter().sum::<f64>() / inner as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / inner as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            y[r * inner + j] = (v - mean) * rstd;
        }
        means[r] = mean;
        rstds[r] = rstd;
    }
    Some(vec![float_result(&results[0], y)?, float_result(&results[1], means)?, float_result(&results[2], rstds)?])
}

/// q [..., L, E], k [..., S, E], v [..., S, Ev], optional mask broadcastable to [..., L, S].
fn attention(args: &[&TensorData], a: &Attrs, rt: &TensorType) -> Option<TensorData> {
    let (q, k, v) = (Arr::of(args[0])?, Arr::of(args[1])?, Arr::of(args[2])?);
    let mask = match args.get(3) {
        Some(m) => Some(Arr::of(m)?),
        None => None,
    };
    let payload::Attention { scale, is_causal: causal, .. } = payload::Attention::of(a)?;
    let r = q.dims.len();
    let (l, e) = (q.dims[r - 2], q.dims[r - 1]);
    let s = k.dims[r - 2];
    let ev = v.dims[r - 1];
    let batch_dims = &q.dims[..r - 2];
    let rdims = dims_of(rt)?;
    let mut out = vec![0.0; rdims.iter().product()];
    for b in 0..batch_dims.iter().product() {
        let bidx = unravel(b, batch_dims);
        let at = |t: &Arr, i: usize, j: usize| {
            let mut idx = bidx.clone();
            idx.extend([i, j]);
            t.f(&idx)
        };
        for i in 0..l {
            let mut scores = vec![f64::NEG_INFINITY; s];
            for (j, score) in scores.iter_mut().enumerate() {
                if causal && j > i {
                    continue;
                }
                let mut sc = (0..e).map(|t| at(&q, i, t) * at(&k, j, t)).sum::<f64>() * scale;
                if let Some(m) = &mask {
                    // The mask broadcast to [..., L, S]: trailing dims aligned, size 1 repeated.
                    let mut full = bidx.clone();
                    full.extend([i, j]);
                    let mr = m.dims.len();
                    let mi: Vec<usize> =
                        (0..mr).map(|d| if m.dims[d] == 1 { 0 } else { full[full.len() - mr + d] }).collect();
                    let mv = m.f(&mi);
                    if m.dtype == DType::Bool {
                        if mv == 0.0 {
                            sc = f64::NEG_INFINITY;
                        }
                    } else {
                        sc += mv;
                    }
                }
                *score = sc;
            }
            let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> =
                if mx == f64::NEG_INFINITY { vec![0.0; s] } else { scores.iter().map(|x| (x - mx).exp()).collect() };
            let sum: f64 = p.iter().sum();
            for t in 0..ev {
                let acc: f64 = (0..s).filter(|&j| p[j] != 0.0).map(|j| p[j] / sum * at(&v, j, t)).sum();
                let mut oi = bidx.clone();
                oi.extend([i, t]);
                out[ravel(&oi, &rdims)] = acc;
            }
        }
    }
    float_result(rt, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_power_and_division_follow_xla() {
        assert_eq!(int_pow(3, 4), 81);
        assert_eq!(int_pow(2, -1), 0);
        assert_eq!(int_pow(-1, -3), -1);
        assert_eq!(elementwise(Opcode::Div, DType::I32, &Attrs::new(), &[N::I(7), N::I(0)]), Some(N::I(-1)));
        assert_eq!(elementwise(Opcode::Rem, DType::I32, &Attrs::new(), &[N::I(7), N::I(0)]), Some(N::I(7)));
    }

    #[test]
    fn float_to_int_conversion_saturates() {
        assert_eq!(convert(DType::I8, N::F(300.7)), N::I(127));
        assert_eq!(convert(DType::I8, N::F(-1e9)), N::I(-128));
        assert_eq!(convert(DType::I32, N::F(f64::NAN)), N::I(0));
        assert_eq!(convert(DType::I64, N::F(1e30)), N::I(i64::MAX));
        assert_eq!(convert(DType::U8, N::F(-3.0)), N::I(0));
    }

    #[test]
    fn rounding_is_half_to_even() {
        assert_eq!([0.5, 1.5, 2.5, -0.5, -1.5, 2.4].map(round_half_even), [0.0, 2.0, 2.0, -0.0, -2.0, 2.0]);
    }
}
