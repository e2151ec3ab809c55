//! Normalization: batch, layer, group, instance and RMS norm.
//!
//! Batch norm follows the CPU kernels: `invstd = 1 / sqrt(var + eps)`, then
//! `y = x * (invstd * w) + (b - mean * invstd * w)`; training statistics are two-pass (mean,
//! then the biased variance) and running statistics use the unbiased variance.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::ReduceKind;

/// Computation dtype for normalization statistics (f32 for half types).
pub(super) fn stat_dtype(d: DType) -> DType {
    if d.is_float() {
        dtypes::compute_dtype(d)
    } else {
        dtypes::DEFAULT_FLOAT
    }
}

/// `v` (shape [C]) broadcast along dim 1 of `shape`.
fn per_channel(cx: &mut Ctx, v: ValueId, shape: &[Dim], dtype: DType) -> R<ValueId> {
    let v = cx.convert(v, dtype)?;
    if cx.rank(v) != 1 {
        return err(format!("per-channel parameter must be 1-D, got {}", cx.ty(v)));
    }
    Ok(cx.b.broadcast_in_dim(v, &[1], shape.to_vec())?)
}

/// `1 / sqrt(v + eps)`
fn inv_std(cx: &mut Ctx, var: ValueId, eps: f64) -> R<ValueId> {
    let e = cx.bin_c(O::Add, var, eps)?;
    let s = cx.un(O::Sqrt, e)?;
    let o = cx.full_like(Scalar::Float(1.0), s)?;
    cx.bin(O::Div, o, s)
}

/// `x * (invstd * w) + (b - mean * invstd * w)` with per-channel [C] statistics.
fn bn_apply(cx: &mut Ctx, x: ValueId, mean: ValueId, invstd: ValueId, w: Option<ValueId>, b: Option<ValueId>, cd: DType) -> R<ValueId> {
    let mut alpha = invstd;
    if let Some(w) = w {
        let w = cx.convert(w, cd)?;
        alpha = cx.bin(O::Mul, alpha, w)?;
    }
    let ma = cx.bin(O::Mul, mean, alpha)?;
    let beta = match b {
        Some(b) => {
            let b = cx.convert(b, cd)?;
            cx.bin(O::Sub, b, ma)?
        }
        None => cx.un(O::Neg, ma)?,
    };
    let xd = cx.dtype(x);
    let shape = cx.dims(x);
    let xc = cx.convert(x, cd)?;
    let ab = per_channel(cx, alpha, &shape, cd)?;
    let bb = per_channel(cx, beta, &shape, cd)?;
    let y = cx.bin(O::Mul, xc, ab)?;
    let y = cx.bin(O::Add, y, bb)?;
    cx.convert(y, xd)
}

/// Batch statistics over all dims but 1: (mean [C], biased var [C]).
fn batch_stats(cx: &mut Ctx, x: ValueId, cd: DType) -> R<(ValueId, ValueId, ValueId)> {
    let r = cx.rank(x);
    if r < 2 {
        return err(format!("batch norm needs rank >= 2, got {}", cx.ty(x)));
    }
    let dims: Vec<usize> = (0..r).filter(|&d| d != 1).collect();
    let xc = cx.convert(x, cd)?;
    let n = cx.count(xc, &dims, cd)?;
    let s = cx.reduce(xc, ReduceKind::Sum, &dims, false)?;
    let c = cx.dims(s);
    let nb = cx.broadcast_to(n, &c)?;
    let mean = cx.bin(O::Div, s, nb)?;
    let shape = cx.dims(xc);
    let mb = cx.b.broadcast_in_dim(mean, &[1], shape)?;
    let d = cx.bin(O::Sub, xc, mb)?;
    let sq = cx.bin(O::Mul, d, d)?;
    let ss = cx.reduce(sq, ReduceKind::Sum, &dims, false)?;
    let var = cx.bin(O::Div, ss, nb)?;
    Ok((mean, var, n))
}

struct BnOut {
    out: ValueId,
    save_mean: Option<ValueId>,
    save_invstd: Option<ValueId>,
    new_rm: Option<ValueId>,
    new_rv: Option<ValueId>,
}

#[allow(clippy::too_many_arguments)]
fn bn_core(
    cx: &mut Ctx,
    x: ValueId,
    w: Option<ValueId>,
    b: Option<ValueId>,
    rm: Option<ValueId>,
    rv: Option<ValueId>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> R<BnOut> {
    let cd = stat_dtype(cx.dtype(x));
    if !training {
        let (Some(rm), Some(rv)) = (rm, rv) else {
            return err("batch norm in eval mode needs running_mean and running_var");
        };
        let m = cx.convert(rm, cd)?;
        let v = cx.convert(rv, cd)?;
        let is = inv_std(cx, v, eps)?;
        let out = bn_apply(cx, x, m, is, w, b, cd)?;
        return Ok(BnOut { out, save_mean: None, save_invstd: None, new_rm: None, new_rv: None });
    }
    let (mean, var, n) = batch_stats(cx, x, cd)?;
    let is = inv_std(cx, var, eps)?;
    let out = bn_apply(cx, x, mean, is, w, b, cd)?;
    let mut new_rm = None;
    let mut new_rv = None;
    // The new running statistics stay in the computation dtype: each caller rounds them once,
    // to the type its op gives them.
    if let Some(rm) = rm {
        let r = cx.convert(rm, cd)?;
        let a = cx.bin_c(O::Mul, mean, momentum)?;
        let c = cx.bin_c(O::Mul, r, 1.0 - momentum)?;
        new_rm = Some(cx.bin(O::Add, a, c)?);
    }
    if let Some(rv) = rv {
        // unbiased = var * n / (n - 1)
        let one_ = cx.scalar(Scalar::Float(1.0), cd)?;
        let nm1 = cx.bin(O::Sub, n, one_)?;
        let sh = cx.dims(var);
        let nb = cx.broadcast_to(n, &sh)?;
        let nm1b = cx.broadcast_to(nm1, &sh)?;
        let vs = cx.bin(O::Mul, var, nb)?;
        let unb = cx.bin(O::Div, vs, nm1b)?;
        let r = cx.convert(rv, cd)?;
        let a = cx.bin_c(O::Mul, unb, momentum)?;
        let c = cx.bin_c(O::Mul, r, 1.0 - momentum)?;
        new_rv = Some(cx.bin(O::Add, a, c)?);
    }
    Ok(BnOut { out, save_mean: Some(mean), save_invstd: Some(is), new_rm, new_rv })
}

/// An output slot: the value (converted to torch's recorded dtype), an empty tensor of the
/// recorded type when torch returns one, or Absent when unread.
fn out_or_empty(cx: &mut Ctx, i: usize, v: Option<ValueId>) -> R<Val> {
    if !cx.used(i) {
        return Ok(Val::Absent);
    }
    match v {
        Some(v) => {
            let v = match cx.out_type(i) {
                Some(t) if t.dtype != cx.dtype(v) => cx.convert(v, t.dtype)?,
                _ => v,
            };
            Ok(Val::Tensor(v))
        }
        None => match cx.out_type(i) {
            Some(t) if t.is_static() => Ok(Val::Tensor(cx.b.splat(Scalar::Int(0), t)?)),
            _ => err(format!("output {i} is read but has no value")),
        },
    }
}

/// (input, weight, bias, momentum, eps)
type BnArgs = (ValueId, Option<ValueId>, Option<ValueId>, f64, f64);

fn bn_args(cx: &Ctx) -> R<BnArgs> {
    Ok((cx.t("input")?, cx.opt_t("weight")?, cx.opt_t("bias")?, cx.float("momentum")?, cx.float("eps")?))
}

pub(super) fn batch_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.opt_t("running_mean")?;
    let rv = cx.opt_t("running_var")?;
    let training = cx.bool("training")?;
    let r = bn_core(cx, x, w, b, rm, rv, training, m, eps)?;
    one(r.out)
}

pub(super) fn bn_no_training(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.t("running_mean")?;
    let rv = cx.t("running_var")?;
    let r = bn_core(cx, x, w, b, Some(rm), Some(rv), false, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, None)?, out_or_empty(cx, 2, None)?])
}

pub(super) fn bn_legit(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.opt_t("running_mean")?;
    let rv = cx.opt_t("running_var")?;
    let training = cx.bool("training")?;
    let r = bn_core(cx, x, w, b, rm, rv, training, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, r.save_mean)?, out_or_empty(cx, 2, r.save_invstd)?])
}

pub(super) fn bn_no_stats(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let r = bn_core(cx, x, w, b, None, None, true, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, r.save_mean)?, out_or_empty(cx, 2, r.save_invstd)?])
}

pub(super) fn bn_functional(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.t("running_mean")?;
    let rv = cx.t("running_var")?;
    let training = cx.bool("training")?;
    let r = bn_core(cx, x, w, b, Some(rm), Some(rv), training, m, eps)?;
    // In eval mode the running stats come back unchanged. Their type is the one torch records
    // (its meta function gives float32 statistics for 16-bit running stats, eager the running
    // stats' own dtype), else the running stats'.
    let mut stat = |i: usize, new: Option<ValueId>, old: ValueId| -> R<Val> {
        let v = new.unwrap_or(old);
        let to = cx.out_type(i).map(|t| t.dtype).unwrap_or(cx.dtype(old));
        Ok(Val::Tensor(cx.convert(v, to)?))
    };
    let new_rm = stat(3, r.new_rm, rm)?;
    let new_rv = stat(4, r.new_rv, rv)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, r.save_mean)?, out_or_empty(cx, 2, r.save_invstd)?, new_rm, new_rv])
}

/// Layer norm over the trailing `normalized` dims; returns (out, mean, rstd).
pub fn layer_norm_v(
    cx: &mut Ctx,
    x: ValueId,
    normalized: &[i64],
    w: Option<ValueId>,
    b: Option<ValueId>,
    eps: f64,
) -> R<(ValueId, ValueId, ValueId)> {
    let dims = cx.dims(x);
    let n = normalized.len();
    if n == 0 || n > dims.len() {
        return err(format!("normalized_shape {normalized:?} does not fit {}", cx.ty(x)));
    }
    for (i, &s) in normalized.iter().enumerate() {
        let d = &dims[dims.len() - n + i];
        if d != &Dim::Static(s) {
            return err(format!("normalized_shape {normalized:?} does not match the trailing dims of {}", cx.ty(x)));
        }
    }
    let xd = cx.dtype(x);
    let cd = stat_dtype(xd);
    let xc = cx.convert(x, cd)?;
    let r = cx.b.build(
        O::LayerNorm,
        &[xc],
        Attrs::new().with("normalized_rank", Attr::Int(n as i64)).with("epsilon", Attr::Float(eps)),
        None,
    )?;
    let (mut y, mean, rstd) = match r.as_slice() {
        [a, b, c] => (*a, *b, *c),
        _ => return err("internal: layer_norm results"),
    };
    let trailing: Vec<i64> = ((dims.len() - n) as i64..dims.len() as i64).collect();
    if let Some(w) = w {
        let w = cx.convert(w, cd)?;
        let w = cx.b.broadcast_in_dim(w, &trailing, dims.clone())?;
        y = cx.bin(O::Mul, y, w)?;
    }
    if let Some(b) = b {
        let b = cx.convert(b, cd)?;
        let b = cx.b.broadcast_in_dim(b, &trailing, dims.clone())?;
        y = cx.bin(O::Add, y, b)?;
    }
    let y = cx.convert(y, xd)?;
    Ok((y, mean, rstd))
}

pub(super) fn layer_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    let (y, _, _) = layer_norm_v(cx, x, &ns, w, b, eps)?;
    one(y)
}

pub(super) fn native_layer_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    let (y, m, r) = layer_norm_v(cx, x, &ns, w, b, eps)?;
    Ok(vec![Val::Tensor(y), out_or_empty(cx, 1, Some(m))?, out_or_empty(cx, 2, Some(r))?])
}

/// RMS norm: `x * rsqrt(mean(x^2) + eps) * w`, eps defaulting to the epsilon of the computation
/// dtype (f32's for f16 and bf16 inputs), as ATen's `rms_norm` does.
pub(super) fn rms_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let xd = cx.dtype(x);
    let cd = stat_dtype(xd);
    let eps = cx.opt_float("eps")?.unwrap_or(cd.eps().unwrap_or(f64::from(f32::EPSILON)));
    let dims = cx.dims(x);
    let n = ns.len();
    if n == 0 || n > dims.len() {
        return err("rms_norm: normalized_shape does not fit the input");
    }
    let red: Vec<usize> = (dims.len() - n..dims.len()).collect();
    let xc = cx.convert(x, cd)?;
    let sq = cx.bin(O::Mul, xc, xc)?;
    let m = mean_v(cx, sq, &red, true, cd)?;
    let m = cx.bin_c(O::Add, m, eps)?;
    let r = cx.un(O::Rsqrt, m)?;
    let r = cx.broadcast_to(r, &dims)?;
    let mut y = cx.bin(O::Mul, xc, r)?;
    if let Some(w) = w {
        let w = cx.convert(w, cd)?;
        let trailing: Vec<i64> = ((dims.len() - n) as i64..dims.len() as i64).collect();
        let w = cx.b.broadcast_in_dim(w, &trailing, dims.clone())?;
        y = cx.bin(O::Mul, y, w)?;
    }
    one(cx.convert(y, xd)?)
}

/// Group norm of `x` [N, C, *] in `g` groups; returns (out, mean [N, G], rstd [N, G]).
fn group_norm_v(cx: &mut Ctx, x: ValueId, g: i64, w: Option<ValueId>, b: Option<ValueId>, eps: f64) -> R<(ValueId, ValueId, ValueId)> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        return err("group norm needs rank >= 2");
    }
    let c = static_of(&dims[1], "channels")?;
    if g <= 0 || c % g != 0 {
        return err(format!("{c} channels are not divisible into {g} groups"));
    }
    let xd = cx.dtype(x);
    let cd = stat_dtype(xd);
    let xc = cx.convert(x, cd)?;
    let rest = dims[2..].iter().fold(Dim::Static(c / g), |a, d| a.mul(d));
    let grouped = cx.reshape(xc, vec![dims[0].clone(), Dim::Static(g), rest])?;
    let (var, mean) = var_v(cx, grouped, &[2], 0.0, true)?;
    let zero = cx.full_like(Scalar::Float(0.0), var)?;
    let var = cx.bin(O::Max, var, zero)?;
    let rstd = inv_std(cx, var, eps)?;
    let gs = cx.dims(grouped);
    let mb = cx.broadcast_to(mean, &gs)?;
    let rb = cx.broadcast_to(rstd, &gs)?;
    let d = cx.bin(O::Sub, grouped, mb)?;
    let y = cx.bin(O::Mul, d, rb)?;
    let mut y = cx.reshape(y, dims.clone())?;
    if let Some(w) = w {
        let wb = per_channel(cx, w, &dims, cd)?;
        y = cx.bin(O::Mul, y, wb)?;
    }
    if let Some(b) = b {
        let bb = per_channel(cx, b, &dims, cd)?;
        y = cx.bin(O::Add, y, bb)?;
    }
    let y = cx.convert(y, xd)?;
    let stat_shape = vec![dims[0].clone(), Dim::Static(g)];
    let mean = cx.reshape(mean, stat_shape.clone())?;
    let rstd = cx.reshape(rstd, stat_shape)?;
    Ok((y, mean, rstd))
}

pub(super) fn group_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let g = cx.int("num_groups")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    let (y, _, _) = group_norm_v(cx, x, g, w, b, eps)?;
    one(y)
}

pub(super) fn native_group_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let g = cx.int("group")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    let (y, m, r) = group_norm_v(cx, x, g, w, b, eps)?;
    Ok(vec![Val::Tensor(y), out_or_empty(cx, 1, Some(m))?, out_or_empty(cx, 2, Some(r))?])
}

pub(super) fn instance_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float("eps")?;
    if !cx.bool("use_input_stats")? {
        let rm = cx.opt_t("running_mean")?;
        let rv = cx.opt_t("running_var")?;
        let r = bn_core(cx, x, w, b, rm, rv, false, 0.1, eps)?;
        return one(r.out);
    }
    let c = static_of(cx.dims(x).get(1).ok_or("instance norm needs rank >= 2")?, "channels")?;
    let (y, _, _) = group_norm_v(cx, x, c, w, b, eps)?;
    one(y)
}

pub fn layer_norm_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let mean = cx.t("mean")?;
    let rstd = cx.t("rstd")?;
    let w = cx.opt_t("weight")?;
    let mask = cx.bools("output_mask")?.unwrap_or_else(|| vec![true; 3]);
    let dims = cx.dims(x);
    let r = dims.len();
    let k = ns.len();
    if k == 0 || k > r {
        return err("layer_norm backward: normalized_shape does not fit");
    }
    let axis = r - k;
    let inner: Vec<usize> = (axis..r).collect();
    let outer: Vec<usize> = (0..axis).collect();
    let dt = cx.dtype(x);
    let mean = cx.convert(mean, dt)?;
    let rstd = cx.convert(rstd, dt)?;
    let mb = cx.broadcast_to(mean, &dims)?;
    let rb = cx.broadcast_to(rstd, &dims)?;
    let xm = cx.bin(O::Sub, x, mb)?;
    let xhat = cx.bin(O::Mul, xm, rb)?;
    let trailing: Vec<i64> = (axis as i64..r as i64).collect();
    let g = match w {
        Some(w) => {
            let w = cx.convert(w, dt)?;
            let wb = cx.b.broadcast_in_dim(w, &trailing, dims.clone())?;
            cx.bin(O::Mul, dy, wb)?
        }
        None => dy,
    };
    let mut outs = vec![Val::None, Val::None, Val::None];
    if out_used(cx, &mask, 0) {
        let n = cx.count(x, &inner, dt)?;
        let nb = cx.broadcast_to(n, &dims)?;
        let ng = cx.bin(O::Mul, g, nb)?;
        let sg = cx.reduce(g, ReduceKind::Sum, &inner, true)?;
        let sg = cx.broadcast_to(sg, &dims)?;
        let gx = cx.bin(O::Mul, g, xhat)?;
        let sgx = cx.reduce(gx, ReduceKind::Sum, &inner, true)?;
        let sgx = cx.broadcast_to(sgx, &dims)?;
        let t = cx.bin(O::Sub, ng, sg)?;
        let xs = cx.bin(O::Mul, xhat, sgx)?;
        let t = cx.bin(O::Sub, t, xs)?;
        let rn = cx.bin(O::Div, rb, nb)?;
        outs[0] = Val::Tensor(cx.bin(O::Mul, rn, t)?);
    } else if mask.first().copied().unwrap_or(true) {
        outs[0] = Val::Absent;
    }
    if out_used(cx, &mask, 1) && w.is_some() {
        let p = cx.bin(O::Mul, dy, xhat)?;
        outs[1] = Val::Tensor(cx.reduce(p, ReduceKind::Sum, &outer, false)?);
    } else if mask.get(1).copied().unwrap_or(true) {
        outs[1] = Val::Absent;
    }
    if out_used(cx, &mask, 2) {
        outs[2] = Val::Tensor(cx.reduce(dy, ReduceKind::Sum, &outer, false)?);
    } else if mask.get(2).copied().unwrap_or(true) {
        outs[2] = Val::Absent;
    }
    Ok(outs)
}

pub fn batch_norm_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let train = cx.bool("train")?;
    let eps = cx.float("eps")?;
    let mask = cx.bools("output_mask")?.unwrap_or_else(|| vec![true; 3]);
    let dims = cx.dims(x);
    let r = dims.len();
    if r < 2 {
        return err("batch norm backward needs rank >= 2");
    }
    let red: Vec<usize> = (0..r).filter(|&d| d != 1).collect();
    let dt = cx.dtype(x);
    let (mean, invstd) = if train {
        (cx.t("save_mean")?, cx.t("save_invstd")?)
    } else {
        let m = cx.t("running_mean")?;
        let v = cx.t("running_var")?;
        let v = cx.bin_c(O::Add, v, eps)?;
        let s = cx.un(O::Sqrt, v)?;
        let o = cx.full_like(Scalar::Float(1.0), s)?;
        (m, cx.bin(O::Div, o, s)?)
    };
    let mean = cx.convert(mean, dt)?;
    let invstd = cx.convert(invstd, dt)?;
    let chan = |cx: &mut Ctx, v: ValueId| -> R<ValueId> { Ok(cx.b.broadcast_in_dim(v, &[1], dims.clone())?) };
    let mb = chan(cx, mean)?;
    let xm = cx.bin(O::Sub, x, mb)?;
    let sum_dy = cx.reduce(dy, ReduceKind::Sum, &red, false)?;
    let dyxm = cx.bin(O::Mul, dy, xm)?;
    let dot = cx.reduce(dyxm, ReduceKind::Sum, &red, false)?;
    let mut outs = vec![Val::None, Val::None, Val::None];
    if out_used(cx, &mask, 0) {
        let wv = match w {
            Some(w) => cx.convert(w, dt)?,
            None => cx.full_like(Scalar::Float(1.0), invstd)?,
        };
        let scale = cx.bin(O::Mul, invstd, wv)?;
        let sb = chan(cx, scale)?;
        let gi = if train {
            let n = cx.count(x, &red, dt)?;
            let c = cx.dims(dot);
            let nb = cx.broadcast_to(n, &c)?;
            let gm = cx.bin(O::Div, sum_dy, nb)?;
            let is2 = cx.bin(O::Mul, invstd, invstd)?;
            let k = cx.bin(O::Mul, dot, is2)?;
            let k = cx.bin(O::Div, k, nb)?;
            let kb = chan(cx, k)?;
            let proj = cx.bin(O::Mul, xm, kb)?;
            let gmb = chan(cx, gm)?;
            let t = cx.bin(O::Sub, dy, proj)?;
            let t = cx.bin(O::Sub, t, gmb)?;
            cx.bin(O::Mul, t, sb)?
        } else {
            cx.bin(O::Mul, dy, sb)?
        };
        outs[0] = Val::Tensor(gi);
    } else if mask.first().copied().unwrap_or(true) {
        outs[0] = Val::Absent;
    }
    if out_used(cx, &mask, 1) {
        outs[1] = Val::Tensor(cx.bin(O::Mul, dot, invstd)?);
    } else if mask.get(1).copied().unwrap_or(true) {
        outs[1] = Val::Absent;
    }
    if out_used(cx, &mask, 2) {
        outs[2] = Val::Tensor(sum_dy);
    } else if mask.get(2).copied().unwrap_or(true) {
        outs[2] = Val::Absent;
    }
    Ok(outs)
}
