//! Neural-network ops: convolution, normalization, pooling, attention, upsampling, dropout.
//!
//! Batch norm follows the CPU kernels: `invstd = 1 / sqrt(var + eps)`, then
//! `y = x * (invstd * w) + (b - mean * invstd * w)`; training statistics are two-pass (mean,
//! then the biased variance) and running statistics use the unbiased variance. Pooling output
//! sizes follow `pooling_output_shape` (ceil_mode drops windows that start in the right
//! padding); max pooling pads with -inf, average pooling divides by the per-window count
//! ATen uses. Index outputs (max-pool indices) are built only when something reads them.

use super::shape::take_along;
use super::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("convolution.default", convolution),
    ("_convolution.default", convolution),
    ("conv1d.default", conv_nd),
    ("conv2d.default", conv_nd),
    ("conv3d.default", conv_nd),
    ("conv1d.padding", conv_nd),
    ("conv2d.padding", conv_nd),
    ("conv3d.padding", conv_nd),
    ("conv_transpose1d.default", conv_transpose),
    ("conv_transpose2d.input", conv_transpose),
    ("conv_transpose3d.input", conv_transpose),
    ("batch_norm.default", batch_norm),
    ("_native_batch_norm_legit_no_training.default", bn_no_training),
    ("_native_batch_norm_legit.default", bn_legit),
    ("_native_batch_norm_legit.no_stats", bn_no_stats),
    ("_native_batch_norm_legit_functional.default", bn_functional),
    ("native_batch_norm.default", bn_legit),
    ("layer_norm.default", layer_norm),
    ("native_layer_norm.default", native_layer_norm),
    ("group_norm.default", group_norm),
    ("native_group_norm.default", native_group_norm),
    ("instance_norm.default", instance_norm),
    ("rms_norm.default", rms_norm),
    ("max_pool1d.default", max_pool),
    ("max_pool2d.default", max_pool),
    ("max_pool3d.default", max_pool),
    ("max_pool1d_with_indices.default", max_pool_with_indices),
    ("max_pool2d_with_indices.default", max_pool_with_indices),
    ("max_pool3d_with_indices.default", max_pool_with_indices),
    ("avg_pool1d.default", avg_pool),
    ("avg_pool2d.default", avg_pool),
    ("avg_pool3d.default", avg_pool),
    ("adaptive_avg_pool1d.default", adaptive_avg_pool),
    ("adaptive_avg_pool2d.default", adaptive_avg_pool),
    ("adaptive_avg_pool3d.default", adaptive_avg_pool),
    ("_adaptive_avg_pool2d.default", adaptive_avg_pool),
    ("_adaptive_avg_pool3d.default", adaptive_avg_pool),
    ("adaptive_max_pool1d.default", adaptive_max_pool),
    ("adaptive_max_pool2d.default", adaptive_max_pool),
    ("scaled_dot_product_attention.default", sdpa),
    ("_scaled_dot_product_flash_attention_for_cpu.default", sdpa_flash_cpu),
    ("_scaled_dot_product_efficient_attention.default", sdpa_efficient),
    ("embedding.default", embedding),
    ("nll_loss_forward.default", nll_loss_forward),
    ("nll_loss2d_forward.default", nll_loss_forward),
    ("dropout.default", dropout),
    ("feature_dropout.default", dropout),
    ("alpha_dropout.default", dropout),
    ("feature_alpha_dropout.default", dropout),
    ("native_dropout.default", native_dropout),
    ("upsample_nearest1d.vec", upsample_nearest),
    ("upsample_nearest2d.vec", upsample_nearest),
    ("upsample_nearest3d.vec", upsample_nearest),
    ("upsample_nearest1d.default", upsample_nearest),
    ("upsample_nearest2d.default", upsample_nearest),
    ("upsample_nearest3d.default", upsample_nearest),
    ("_upsample_nearest_exact1d.vec", upsample_nearest_exact),
    ("_upsample_nearest_exact2d.vec", upsample_nearest_exact),
    ("_upsample_nearest_exact2d.default", upsample_nearest_exact),
    ("upsample_linear1d.vec", upsample_linear),
    ("upsample_linear1d.default", upsample_linear),
    ("upsample_bilinear2d.vec", upsample_linear),
    ("upsample_bilinear2d.default", upsample_linear),
    ("upsample_trilinear3d.vec", upsample_linear),
    ("upsample_trilinear3d.default", upsample_linear),
];

/// Expands a length-1 list to `n` entries; checks the length otherwise.
pub fn expand_list(v: &[i64], n: usize, what: &str) -> R<Vec<i64>> {
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        k if k == n => Ok(v.to_vec()),
        _ => err(format!("{what} {v:?} does not fit {n} spatial dims")),
    }
}

fn positive(v: &[i64], what: &str) -> R<()> {
    if v.iter().any(|&x| !(1..=MAX_WINDOW).contains(&x)) {
        return err(format!("{what} {v:?} must be positive"));
    }
    Ok(())
}

fn non_negative(v: &[i64], what: &str) -> R<()> {
    if v.iter().any(|&x| !(0..=MAX_WINDOW).contains(&x)) {
        return err(format!("{what} {v:?} must be non-negative"));
    }
    Ok(())
}

/// Convolution parameters, validated.
pub struct ConvParams {
    pub stride: Vec<i64>,
    /// (low, high) per spatial dim.
    pub padding: Vec<(i64, i64)>,
    pub dilation: Vec<i64>,
    pub transposed: bool,
    pub output_padding: Vec<i64>,
    pub groups: i64,
}

fn conv_attrs(stride: &[i64], padding: &[(i64, i64)], lhs_dil: &[i64], rhs_dil: &[i64], groups: i64, batch_groups: i64) -> Attrs {
    Attrs::new()
        .with("window_strides", Attr::Ints(stride.to_vec()))
        .with("padding", Attr::Ints(padding.iter().flat_map(|&(l, h)| [l, h]).collect()))
        .with("lhs_dilation", Attr::Ints(lhs_dil.to_vec()))
        .with("rhs_dilation", Attr::Ints(rhs_dil.to_vec()))
        .with("feature_group_count", Attr::Int(groups))
        .with("batch_group_count", Attr::Int(batch_groups))
}

pub fn build_conv(cx: &mut Ctx, x: ValueId, w: ValueId, attrs: Attrs) -> R<ValueId> {
    Ok(cx.b.build1(O::Convolution, &[x, w], attrs, None)?)
}

fn reverse(cx: &mut Ctx, x: ValueId, dims: Vec<i64>) -> R<ValueId> {
    Ok(cx.b.build1(O::Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(dims)), None)?)
}

/// `[G*Ci, Co, k...]` (transposed-conv weight, Ci = in/G) to `[G*Co, Ci, k...]`, spatially
/// flipped: the forward-conv kernel computing the transposed convolution.
pub fn flip_kernel(cx: &mut Ctx, w: ValueId, groups: i64) -> R<ValueId> {
    let d = cx.static_dims(w, "convolution weight")?;
    let (a, b) = (d[0], d[1]);
    if groups <= 0 || a % groups != 0 {
        return err(format!("weight dim {a} not divisible by groups {groups}"));
    }
    let mut s = vec![groups, a / groups, b];
    s.extend_from_slice(&d[2..]);
    let v = cx.reshape(w, s.iter().map(|&x| Dim::Static(x)).collect())?;
    let mut perm = vec![0i64, 2, 1];
    perm.extend((3..s.len() as i64).collect::<Vec<_>>());
    let v = cx.transpose(v, &perm)?;
    let mut out = vec![groups * b, a / groups];
    out.extend_from_slice(&d[2..]);
    let v = cx.reshape(v, out.iter().map(|&x| Dim::Static(x)).collect())?;
    let spatial: Vec<i64> = (2..d.len() as i64).collect();
    reverse(cx, v, spatial)
}

pub fn conv_v(cx: &mut Ctx, x: ValueId, w: ValueId, bias: Option<ValueId>, p: &ConvParams) -> R<ValueId> {
    let wr = cx.rank(w);
    if wr < 3 {
        return err(format!("convolution weight must have rank >= 3, got {}", cx.ty(w)));
    }
    let unbatched = cx.rank(x) == wr - 1;
    let x = if unbatched { super::shape::unsqueeze_v(cx, x, 0)? } else { x };
    if cx.rank(x) != wr {
        return err(format!("convolution input {} does not match weight {}", cx.ty(x), cx.ty(w)));
    }
    let dt = cx.result_type(&[Operand::T(x), Operand::T(w)])?;
    let x = cx.convert(x, dt)?;
    let w = cx.convert(w, dt)?;
    let n = wr - 2;
    let ones = vec![1i64; n];
    let y = if !p.transposed {
        let attrs = conv_attrs(&p.stride, &p.padding, &ones, &p.dilation, p.groups, 1);
        build_conv(cx, x, w, attrs)?
    } else {
        let k = cx.static_dims(w, "convolution weight")?;
        let kernel = flip_kernel(cx, w, p.groups)?;
        let mut pads = Vec::new();
        for i in 0..n {
            let ext = p.dilation[i] * (k[2 + i] - 1);
            let lo = ext - p.padding[i].0;
            let hi = ext - p.padding[i].0 + p.output_padding[i];
            pads.push((lo, hi));
        }
        let attrs = conv_attrs(&ones, &pads, &p.stride, &p.dilation, p.groups, 1);
        build_conv(cx, x, kernel, attrs)?
    };
    let y = match bias {
        None => y,
        Some(b) => {
            let shape = cx.dims(y);
            let b = cx.convert(b, dt)?;
            let b = cx.b.broadcast_in_dim(b, &[1], shape)?;
            cx.bin(O::Add, y, b)?
        }
    };
    if unbatched {
        return super::shape::squeeze_v(cx, y, Some(&[0]));
    }
    Ok(y)
}

fn conv_params(cx: &Ctx, n: usize, transposed: bool) -> R<ConvParams> {
    let stride = expand_list(&cx.ints_or("stride", &[1])?, n, "stride")?;
    let dilation = expand_list(&cx.ints_or("dilation", &[1])?, n, "dilation")?;
    let output_padding = expand_list(&cx.ints_or("output_padding", &[0])?, n, "output_padding")?;
    let groups = cx.int_or("groups", 1)?;
    positive(&stride, "stride")?;
    positive(&dilation, "dilation")?;
    non_negative(&output_padding, "output_padding")?;
    if !(1..=MAX_SIZE).contains(&groups) {
        return err(format!("groups {groups} must be positive"));
    }
    let padding = match cx.opt("padding")? {
        Some(Arg::Str(mode)) => return err(format!("internal: string padding `{mode}` here")),
        _ => {
            let p = expand_list(&cx.ints_or("padding", &[0])?, n, "padding")?;
            non_negative(&p, "padding")?;
            p.into_iter().map(|v| (v, v)).collect()
        }
    };
    Ok(ConvParams { stride, padding, dilation, transposed, output_padding, groups })
}

fn convolution(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    let transposed = cx.bool_or("transposed", false)?;
    let p = conv_params(cx, n, transposed)?;
    one(conv_v(cx, x, w, b, &p)?)
}

fn conv_nd(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    if let Some(Arg::Str(mode)) = cx.opt("padding")? {
        let stride = expand_list(&cx.ints_or("stride", &[1])?, n, "stride")?;
        let dilation = expand_list(&cx.ints_or("dilation", &[1])?, n, "dilation")?;
        let groups = cx.int_or("groups", 1)?;
        positive(&stride, "stride")?;
        positive(&dilation, "dilation")?;
        let k = cx.static_dims(w, "convolution weight")?;
        if k.len() != n + 2 {
            return err(format!("convolution weight must have rank >= 3, got {}", cx.ty(w)));
        }
        let padding = match mode.as_str() {
            "valid" => vec![(0, 0); n],
            "same" => {
                if stride.iter().any(|&s| s != 1) {
                    return err("padding='same' needs stride 1");
                }
                (0..n)
                    .map(|i| {
                        let total = dilation[i] * (k[2 + i] - 1);
                        (total / 2, total - total / 2)
                    })
                    .collect()
            }
            other => return err(format!("unknown padding mode `{other}`")),
        };
        let p = ConvParams { stride, padding, dilation, transposed: false, output_padding: vec![0; n], groups };
        return one(conv_v(cx, x, w, b, &p)?);
    }
    let p = conv_params(cx, n, false)?;
    one(conv_v(cx, x, w, b, &p)?)
}

fn conv_transpose(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    let p = conv_params(cx, n, true)?;
    one(conv_v(cx, x, w, b, &p)?)
}

// ------------------------------------------------------------------ normalization

/// Computation dtype for normalization statistics (f32 for half types).
fn stat_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d if d.is_float() => d,
        _ => dtypes::DEFAULT_FLOAT,
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
    let s = cx.reduce(xc, "sum", &dims, false)?;
    let c = cx.dims(s);
    let nb = cx.broadcast_to(n, &c)?;
    let mean = cx.bin(O::Div, s, nb)?;
    let shape = cx.dims(xc);
    let mb = cx.b.broadcast_in_dim(mean, &[1], shape)?;
    let d = cx.bin(O::Sub, xc, mb)?;
    let sq = cx.bin(O::Mul, d, d)?;
    let ss = cx.reduce(sq, "sum", &dims, false)?;
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
    if let Some(rm) = rm {
        let rd = cx.dtype(rm);
        let r = cx.convert(rm, cd)?;
        let a = cx.bin_c(O::Mul, mean, momentum)?;
        let c = cx.bin_c(O::Mul, r, 1.0 - momentum)?;
        let s = cx.bin(O::Add, a, c)?;
        new_rm = Some(cx.convert(s, rd)?);
    }
    if let Some(rv) = rv {
        let rd = cx.dtype(rv);
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
        let s = cx.bin(O::Add, a, c)?;
        new_rv = Some(cx.convert(s, rd)?);
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
    Ok((cx.t("input")?, cx.opt_t("weight")?, cx.opt_t("bias")?, cx.float_or("momentum", 0.1)?, cx.float_or("eps", 1e-5)?))
}

fn batch_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.opt_t("running_mean")?;
    let rv = cx.opt_t("running_var")?;
    let training = cx.bool_or("training", false)?;
    let r = bn_core(cx, x, w, b, rm, rv, training, m, eps)?;
    one(r.out)
}

fn bn_no_training(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.t("running_mean")?;
    let rv = cx.t("running_var")?;
    let r = bn_core(cx, x, w, b, Some(rm), Some(rv), false, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, None)?, out_or_empty(cx, 2, None)?])
}

fn bn_legit(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.opt_t("running_mean")?;
    let rv = cx.opt_t("running_var")?;
    let training = cx.bool_or("training", false)?;
    let r = bn_core(cx, x, w, b, rm, rv, training, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, r.save_mean)?, out_or_empty(cx, 2, r.save_invstd)?])
}

fn bn_no_stats(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let r = bn_core(cx, x, w, b, None, None, true, m, eps)?;
    Ok(vec![Val::Tensor(r.out), out_or_empty(cx, 1, r.save_mean)?, out_or_empty(cx, 2, r.save_invstd)?])
}

fn bn_functional(cx: &mut Ctx) -> R<Vec<Val>> {
    let (x, w, b, m, eps) = bn_args(cx)?;
    let rm = cx.t("running_mean")?;
    let rv = cx.t("running_var")?;
    let training = cx.bool_or("training", false)?;
    let r = bn_core(cx, x, w, b, Some(rm), Some(rv), training, m, eps)?;
    // In eval mode the running stats come back unchanged.
    let new_rm = r.new_rm.unwrap_or(rm);
    let new_rv = r.new_rv.unwrap_or(rv);
    Ok(vec![
        Val::Tensor(r.out),
        out_or_empty(cx, 1, r.save_mean)?,
        out_or_empty(cx, 2, r.save_invstd)?,
        Val::Tensor(new_rm),
        Val::Tensor(new_rv),
    ])
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

fn layer_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float_or("eps", 1e-5)?;
    let (y, _, _) = layer_norm_v(cx, x, &ns, w, b, eps)?;
    one(y)
}

fn native_layer_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float_or("eps", 1e-5)?;
    let (y, m, r) = layer_norm_v(cx, x, &ns, w, b, eps)?;
    Ok(vec![Val::Tensor(y), out_or_empty(cx, 1, Some(m))?, out_or_empty(cx, 2, Some(r))?])
}

/// RMS norm: `x * rsqrt(mean(x^2) + eps) * w`, eps defaulting to the dtype's epsilon.
fn rms_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let ns = cx.ints("normalized_shape")?;
    let w = cx.opt_t("weight")?;
    let xd = cx.dtype(x);
    let cd = stat_dtype(xd);
    let eps = cx.opt_float("eps")?.unwrap_or(match xd {
        DType::F16 => 0.0009765625,
        DType::BF16 => 0.0078125,
        DType::F64 => f64::EPSILON,
        _ => f32::EPSILON as f64,
    });
    let dims = cx.dims(x);
    let n = ns.len();
    if n == 0 || n > dims.len() {
        return err("rms_norm: normalized_shape does not fit the input");
    }
    let red: Vec<usize> = (dims.len() - n..dims.len()).collect();
    let xc = cx.convert(x, cd)?;
    let sq = cx.bin(O::Mul, xc, xc)?;
    let m = super::reduce::mean_v(cx, sq, &red, true, cd)?;
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
    let (var, mean) = super::reduce::var_v(cx, grouped, &[2], 0.0, true)?;
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

fn group_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let g = cx.int("num_groups")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float_or("eps", 1e-5)?;
    let (y, _, _) = group_norm_v(cx, x, g, w, b, eps)?;
    one(y)
}

fn native_group_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let g = cx.int("group")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float_or("eps", 1e-5)?;
    let (y, m, r) = group_norm_v(cx, x, g, w, b, eps)?;
    Ok(vec![Val::Tensor(y), out_or_empty(cx, 1, Some(m))?, out_or_empty(cx, 2, Some(r))?])
}

fn instance_norm(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let b = cx.opt_t("bias")?;
    let eps = cx.float_or("eps", 1e-5)?;
    if !cx.bool_or("use_input_stats", true)? {
        let rm = cx.opt_t("running_mean")?;
        let rv = cx.opt_t("running_var")?;
        let r = bn_core(cx, x, w, b, rm, rv, false, 0.1, eps)?;
        return one(r.out);
    }
    let c = static_of(cx.dims(x).get(1).ok_or("instance norm needs rank >= 2")?, "channels")?;
    let (y, _, _) = group_norm_v(cx, x, c, w, b, eps)?;
    one(y)
}

// ------------------------------------------------------------------ pooling

/// The lowest value of a dtype (max-pool padding).
fn lowest(d: DType) -> Scalar {
    match d {
        DType::Bool => Scalar::Bool(false),
        DType::I8 => Scalar::Int(i8::MIN as i64),
        DType::I16 => Scalar::Int(i16::MIN as i64),
        DType::I32 => Scalar::Int(i32::MIN as i64),
        DType::I64 => Scalar::Int(i64::MIN),
        d if d.is_unsigned_int() => Scalar::Int(0),
        _ => Scalar::Float(f64::NEG_INFINITY),
    }
}

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
    let s = cx.ints_or("stride", &[])?;
    let s = if s.is_empty() { k.clone() } else { expand_list(&s, nsp, "stride")? };
    let p = expand_list(&cx.ints_or("padding", &[0])?, nsp, "padding")?;
    let d = if with_dilation { expand_list(&cx.ints_or("dilation", &[1])?, nsp, "dilation")? } else { vec![1; nsp] };
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

fn reduce_window(cx: &mut Ctx, x: ValueId, kind: &str, pool: &Pool) -> R<ValueId> {
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
        .with("kind", Attr::Str(kind.into()))
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
    let ceil = cx.bool_or("ceil_mode", false)?;
    let pool = pool_geometry(cx, x, nsp, ceil, true)?;
    let y = reduce_window(cx, x, "max", &pool)?;
    if !with_indices {
        return one(y);
    }
    let idx = if cx.used(1) { Val::Tensor(max_pool_indices(cx, x, &pool)?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), idx])
}

fn max_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    max_pool_impl(cx, false)
}
fn max_pool_with_indices(cx: &mut Ctx) -> R<Vec<Val>> {
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
    let low = cx.scalar(lowest(dt), dt)?;
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
    let mut best_v = cx.full(lowest(dt), dt, &out_shape)?;
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
        let gt = cx.cmp("gt", v, best_v)?;
        let take = if dt.is_float() {
            let nan = cx.cmp("ne", v, v)?;
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

fn avg_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let k = cx.ints("kernel_size")?;
    let nsp = match k.len() {
        1 => cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize,
        n => n,
    };
    let ceil = cx.bool_or("ceil_mode", false)?;
    let include_pad = cx.bool_or("count_include_pad", true)?;
    let divisor = cx.opt_int("divisor_override")?;
    if !cx.dtype(x).is_float() {
        return err("avg_pool needs a floating-point input");
    }
    let pool = pool_geometry(cx, x, nsp, ceil, false)?;
    let s = reduce_window(cx, x, "sum", &pool)?;
    let geo = avg_geometry(cx, x, nsp, ceil)?;
    let div = avg_divisor(cx, s, &geo, include_pad, divisor)?;
    one(cx.bin(O::Div, s, div)?)
}

/// Averaging matrix [o, n] of adaptive pooling: row i averages [floor(i*n/o), ceil((i+1)*n/o)).
fn adaptive_matrix(n: i64, o: i64) -> Vec<f64> {
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

fn adaptive_avg_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let os = cx.ints("output_size")?;
    let dims = cx.dims(x);
    let nsp = os.len();
    if dims.len() < nsp + 1 {
        return err("adaptive pooling: input rank too small");
    }
    let lead = dims.len() - nsp;
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
        let s = reduce_window(cx, x, "sum", &pool)?;
        let k: i64 = ns.iter().zip(&os).fold(1i64, |a, (n, o)| a.saturating_mul(n / o));
        let div = cx.full_like(Scalar::Int(k), s)?;
        return one(cx.bin(O::Div, s, div)?);
    }
    let mut y = x;
    for i in (0..nsp).rev() {
        table_size(&[ns[i], os[i]], "adaptive pooling matrix")?;
        let m = adaptive_matrix(ns[i], os[i]);
        let mc = cx.const_f(&[os[i], ns[i]], &m, xd)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(y)
}

fn adaptive_max_pool(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let os = cx.ints("output_size")?;
    let dims = cx.dims(x);
    let nsp = os.len();
    if dims.len() < nsp + 1 {
        return err("adaptive pooling: input rank too small");
    }
    let lead = dims.len() - nsp;
    let mut wins = Vec::new();
    for (i, &o) in os.iter().enumerate() {
        let n = static_of(&dims[lead + i], "pooled dim")?;
        if o <= 0 || n % o != 0 {
            return err(format!("adaptive max pooling of size {n} to {o} (not a divisor) is not supported"));
        }
        wins.push(Win { n, k: n / o, s: n / o, pad: 0, d: 1, out: o, hi: 0 });
    }
    let pool = Pool { lead, wins };
    let y = reduce_window(cx, x, "max", &pool)?;
    let idx = if cx.used(1) { Val::Tensor(max_pool_indices(cx, x, &pool)?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), idx])
}

// ------------------------------------------------------------------ attention

/// Repeats the head dim (-3) of `k` `rep` times, each head consecutively (repeat_interleave).
fn repeat_heads(cx: &mut Ctx, k: ValueId, rep: i64) -> R<ValueId> {
    let d = cx.dims(k);
    let r = d.len();
    let mut shape: Vec<Dim> = d[..r - 2].to_vec();
    shape.insert(r - 2, Dim::Static(rep));
    shape.extend_from_slice(&d[r - 2..]);
    let bdims: Vec<i64> = (0..r as i64).map(|i| if i < r as i64 - 2 { i } else { i + 1 }).collect();
    let b = cx.b.broadcast_in_dim(k, &bdims, shape)?;
    let mut out = d.clone();
    out[r - 3] = d[r - 3].mul(&Dim::Static(rep));
    cx.reshape(b, out)
}

pub struct SdpaArgs {
    pub q: ValueId,
    pub k: ValueId,
    pub v: ValueId,
    pub mask: Option<ValueId>,
    pub causal: bool,
    pub scale: f64,
}

/// Reads and normalizes SDPA arguments (default scale, GQA head repetition, mask dtype).
pub fn sdpa_args(cx: &mut Ctx, mask_name: &str, gqa_allowed: bool) -> R<SdpaArgs> {
    let q = cx.t("query")?;
    let mut k = cx.t("key")?;
    let mut v = cx.t("value")?;
    let mask = cx.opt_t(mask_name)?;
    let causal = cx.bool_or("is_causal", false)?;
    let dropout = cx.float_or("dropout_p", 0.0)?;
    if dropout != 0.0 {
        return err("attention dropout needs random numbers; only dropout_p = 0 is supported");
    }
    if mask.is_some() && causal {
        return err("attention with both attn_mask and is_causal is not supported by torch");
    }
    let qd = cx.dims(q);
    let r = qd.len();
    if r < 2 || cx.rank(k) != r || cx.rank(v) != r {
        return err(format!("attention needs q, k, v of one rank >= 2: {}, {}, {}", cx.ty(q), cx.ty(k), cx.ty(v)));
    }
    let e = static_of(&qd[r - 1], "head dim")?;
    let scale = match cx.opt_float("scale")? {
        Some(s) => s,
        None => 1.0 / (e as f64).sqrt(),
    };
    if r >= 3 {
        let hq = cx.dims(q)[r - 3].clone();
        let hk = cx.dims(k)[r - 3].clone();
        if hq != hk {
            let gqa = cx.bool_or("enable_gqa", false)?;
            let (Some(a), Some(b)) = (hq.as_static(), hk.as_static()) else {
                return err("attention with symbolic head counts that differ");
            };
            if !(gqa || gqa_allowed) || b == 0 || a % b != 0 {
                return err(format!("query has {a} heads, key {b}: needs enable_gqa and a multiple"));
            }
            k = repeat_heads(cx, k, a / b)?;
            v = repeat_heads(cx, v, a / b)?;
        }
    }
    let dt = cx.dtype(q);
    let k = cx.convert(k, dt)?;
    let v = cx.convert(v, dt)?;
    let mask = match mask {
        Some(m) if cx.dtype(m) != DType::Bool => Some(cx.convert(m, dt)?),
        m => m,
    };
    Ok(SdpaArgs { q, k, v, mask, causal, scale })
}

pub fn attention(cx: &mut Ctx, a: &SdpaArgs) -> R<ValueId> {
    let mut ops = vec![a.q, a.k, a.v];
    ops.extend(a.mask);
    Ok(cx.b.build1(
        O::Attention,
        &ops,
        Attrs::new().with("scale", Attr::Float(a.scale)).with("is_causal", Attr::Bool(a.causal)),
        None,
    )?)
}

/// Scaled, masked scores `q k^T * scale (+ mask)` [..., L, S]; masked entries are -inf.
pub fn attention_scores(cx: &mut Ctx, a: &SdpaArgs) -> R<ValueId> {
    let r = cx.rank(a.q);
    let batch: Vec<i64> = (0..r as i64 - 2).collect();
    let s = cx.b.dot_general(a.q, a.k, &batch, &batch, &[r as i64 - 1], &[r as i64 - 1])?;
    let mut s = cx.bin_c(O::Mul, s, a.scale)?;
    let shape = cx.dims(s);
    if a.causal {
        let (l, sl) = (shape[r - 2].clone(), shape[r - 1].clone());
        let rows = cx.iota(DType::I64, &[l.clone(), sl.clone()], 0)?;
        let cols = cx.iota(DType::I64, &[l, sl], 1)?;
        let keep = cx.cmp("le", cols, rows)?;
        let keep = cx.broadcast_to(keep, &shape)?;
        let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), s)?;
        s = cx.select(keep, s, ninf)?;
    }
    if let Some(m) = a.mask {
        let m = cx.broadcast_to(m, &shape)?;
        if cx.dtype(m) == DType::Bool {
            let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), s)?;
            s = cx.select(m, s, ninf)?;
        } else {
            s = cx.bin(O::Add, s, m)?;
        }
    }
    Ok(s)
}

fn sdpa(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", false)?;
    one(attention(cx, &a)?)
}

/// `logsumexp` of the scaled, masked scores over the key dim, [..., L]. Half-precision
/// inputs are computed in f32 and the result is f32, as the CPU kernels accumulate.
pub fn attention_lse(cx: &mut Ctx, a: &SdpaArgs) -> R<ValueId> {
    let dt = stat_dtype(cx.dtype(a.q));
    let up = |cx: &mut Ctx, v: ValueId| if cx.dtype(v) == DType::Bool { Ok(v) } else { cx.convert(v, dt) };
    let a = &SdpaArgs {
        q: up(cx, a.q)?,
        k: up(cx, a.k)?,
        v: a.v,
        mask: a.mask.map(|m| up(cx, m)).transpose()?,
        causal: a.causal,
        scale: a.scale,
    };
    let s = attention_scores(cx, a)?;
    let r = cx.rank(s);
    let m = cx.reduce(s, "max", &[r - 1], true)?;
    let am = cx.un(O::Abs, m)?;
    let inf = cx.full_like(Scalar::Float(f64::INFINITY), m)?;
    let is_inf = cx.cmp("eq", am, inf)?;
    let z = cx.full_like(Scalar::Float(0.0), m)?;
    let m = cx.select(is_inf, z, m)?;
    let shape = cx.dims(s);
    let mb = cx.broadcast_to(m, &shape)?;
    let d = cx.bin(O::Sub, s, mb)?;
    let e = cx.un(O::Exp, d)?;
    let sum = cx.reduce(e, "sum", &[r - 1], false)?;
    let l = cx.un(O::Log, sum)?;
    let sh = cx.dims(l);
    let m2 = cx.reshape(m, sh)?;
    cx.bin(O::Add, l, m2)
}

fn sdpa_flash_cpu(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", true)?;
    let out = attention(cx, &a)?;
    let lse = if cx.used(1) {
        let l = attention_lse(cx, &a)?;
        let l = match cx.out_type(1) {
            Some(t) => cx.convert(l, t.dtype)?,
            None => l,
        };
        Val::Tensor(l)
    } else {
        Val::Absent
    };
    Ok(vec![Val::Tensor(out), lse])
}

fn sdpa_efficient(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_bias", true)?;
    let out = attention(cx, &a)?;
    let mut vals = vec![Val::Tensor(out)];
    for i in 1..cx.outs.len() {
        if !cx.used(i) {
            vals.push(Val::Absent);
        } else if i == 1 {
            vals.push(Val::Tensor(attention_lse(cx, &a)?));
        } else {
            return err("the random-number outputs of efficient attention are not supported");
        }
    }
    Ok(vals)
}

// ------------------------------------------------------------------ embedding, dropout

fn embedding(cx: &mut Ctx) -> R<Vec<Val>> {
    let w = cx.t("weight")?;
    let i = cx.t("indices")?;
    if cx.rank(w) != 2 {
        return err(format!("embedding weight must be 2-D, got {}", cx.ty(w)));
    }
    if !cx.dtype(i).is_int() {
        return err(format!("embedding indices must be integers, got {}", cx.ty(i)));
    }
    one(take_along(cx, w, 0, i)?)
}

fn dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float_or("p", 0.5)?;
    let train = cx.bool_or("train", false)?;
    if train && p != 0.0 {
        return err("dropout in training mode needs random numbers; not supported");
    }
    one(x)
}

fn native_dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float_or("p", 0.5)?;
    let train = cx.bool_or("train", true)?;
    if train && p != 0.0 {
        return err("dropout in training mode needs random numbers; not supported");
    }
    let mask = if cx.used(1) { Val::Tensor(cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(x))?) } else { Val::Absent };
    Ok(vec![Val::Tensor(x), mask])
}

// ------------------------------------------------------------------ upsampling

/// Output sizes and scale factors of an upsample op over `nsp` trailing dims.
/// (input sizes, output sizes, scale factors) of the upsampled dims.
type UpsampleSizes = (Vec<i64>, Vec<i64>, Vec<Option<f64>>);

fn upsample_sizes(cx: &Ctx, x: ValueId, nsp: usize) -> R<UpsampleSizes> {
    let dims = cx.dims(x);
    if dims.len() < nsp + 2 {
        return err(format!("upsampling needs rank {}, got {}", nsp + 2, cx.ty(x)));
    }
    let ins: Vec<i64> = dims[dims.len() - nsp..].iter().map(|d| static_of(d, "upsampled dim")).collect::<R<_>>()?;
    let out_sizes = cx.opt_ints("output_size")?;
    let scale_factors: Option<Vec<f64>> = match cx.opt("scale_factors")? {
        Some(Arg::Floats(f)) => Some(f),
        Some(a) => return err(format!("scale_factors must be floats, got a {}", a.kind())),
        None => None,
    };
    let names = match nsp {
        1 => vec!["scales"],
        2 => vec!["scales_h", "scales_w"],
        _ => vec!["scales_d", "scales_h", "scales_w"],
    };
    let mut scales: Vec<Option<f64>> = Vec::new();
    for n in &names {
        scales.push(cx.opt_float(n)?);
    }
    let outs = match (out_sizes, &scale_factors) {
        (Some(o), _) if !o.is_empty() => {
            if o.len() != nsp {
                return err("output_size does not match the spatial rank");
            }
            if let Some(sf) = &scale_factors {
                scales = sf.iter().map(|&s| Some(s)).collect();
            }
            o
        }
        (_, Some(sf)) => {
            if sf.len() != nsp {
                return err("scale_factors does not match the spatial rank");
            }
            scales = sf.iter().map(|&s| Some(s)).collect();
            ins.iter().zip(sf).map(|(&n, &s)| (n as f64 * s).floor() as i64).collect()
        }
        _ => return err("upsampling needs output_size or scale_factors"),
    };
    for (&o, &n) in outs.iter().zip(&ins) {
        if !(1..=MAX_SIZE).contains(&o) {
            return err(format!("upsampled size {o} out of range"));
        }
        table_size(&[o, n], "interpolation table")?;
    }
    Ok((ins, outs, scales))
}

fn spatial_rank(cx: &Ctx) -> usize {
    let t = &cx.node.target;
    if t.contains("1d") {
        1
    } else if t.contains("3d") {
        3
    } else {
        2
    }
}

/// `compute_scales_value`: 1/scale when given, else in/out (as f32, like the kernels).
fn scale_value(scale: Option<f64>, n: i64, o: i64) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => n as f32 / o as f32,
    }
}

fn nearest_impl(cx: &mut Ctx, exact: bool) -> R<Vec<Val>> {
    let x = cx.opt_t("input")?.map_or_else(|| cx.t("self"), Ok)?;
    let nsp = spatial_rank(cx);
    let (ins, outs, scales) = upsample_sizes(cx, x, nsp)?;
    let lead = cx.rank(x) - nsp;
    let mut y = x;
    for i in 0..nsp {
        let (n, o) = (ins[i], outs[i]);
        let sc = scale_value(scales.get(i).copied().flatten(), n, o);
        table_size(&[o], "nearest-neighbour index table")?;
        let idx: Vec<i64> = (0..o)
            .map(|d| {
                let src = if exact {
                    ((d as f32 + 0.5) * sc).floor() as i64
                } else if o == n {
                    d
                } else if o == 2 * n {
                    d >> 1
                } else {
                    (d as f32 * sc).floor() as i64
                };
                src.min(n - 1).max(0)
            })
            .collect();
        let ic = cx.const_i64(&[o], &idx)?;
        y = take_along(cx, y, lead + i, ic)?;
    }
    one(y)
}
fn upsample_nearest(cx: &mut Ctx) -> R<Vec<Val>> {
    nearest_impl(cx, false)
}
fn upsample_nearest_exact(cx: &mut Ctx) -> R<Vec<Val>> {
    nearest_impl(cx, true)
}

/// Linear interpolation matrix [o, n] as `compute_source_index_and_lambda` (f32 math).
fn linear_matrix(n: i64, o: i64, align_corners: bool, scale: Option<f64>) -> Vec<f64> {
    let mut m = vec![0.0f64; (o * n) as usize];
    let sc: f32 = if align_corners {
        if o > 1 {
            (n - 1) as f32 / (o - 1) as f32
        } else {
            0.0
        }
    } else {
        scale_value(scale, n, o)
    };
    for d in 0..o {
        let (i0, i1, l0, l1) = if o == n {
            (d, d, 1.0f32, 0.0f32)
        } else {
            let real = if align_corners { sc * d as f32 } else { (sc * (d as f32 + 0.5) - 0.5).max(0.0) };
            let i0 = (real as i64).min(n - 1);
            let i1 = i0 + if i0 < n - 1 { 1 } else { 0 };
            let l1 = (real - i0 as f32).clamp(0.0, 1.0);
            (i0, i1, 1.0 - l1, l1)
        };
        m[(d * n + i0) as usize] += l0 as f64;
        m[(d * n + i1) as usize] += l1 as f64;
    }
    m
}

fn upsample_linear(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.opt_t("input")?.map_or_else(|| cx.t("self"), Ok)?;
    let nsp = spatial_rank(cx);
    let align = cx.bool_or("align_corners", false)?;
    let (ins, outs, scales) = upsample_sizes(cx, x, nsp)?;
    let lead = cx.rank(x) - nsp;
    let xd = cx.dtype(x);
    if !xd.is_float() {
        return err("linear upsampling needs a floating-point input");
    }
    let mut y = x;
    for i in (0..nsp).rev() {
        let m = linear_matrix(ins[i], outs[i], align, scales.get(i).copied().flatten());
        let mc = cx.const_f(&[outs[i], ins[i]], &m, xd)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(y)
}

/// NLL loss over the class dim (1, or 0 for an unbatched input): (loss, total_weight).
fn nll_loss_forward(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let target = cx.t("target")?;
    let weight = cx.opt_t("weight")?;
    let reduction = cx.int_or("reduction", 1)?;
    let ignore = cx.int_or("ignore_index", -100)?;
    let dt = cx.dtype(x);
    let r = cx.rank(x);
    if r == 0 || cx.rank(target) + 1 != r {
        return err(format!("nll_loss of {} with target {}", cx.ty(x), cx.ty(target)));
    }
    let cdim = if r == 1 { 0 } else { 1 };
    let (w, safe) = super::backward::nll_weights(cx, target, weight, ignore, dt)?;
    let idx = super::shape::unsqueeze_v(cx, safe, cdim as i64)?;
    // picked = x.gather(cdim, target.unsqueeze(cdim)).squeeze(cdim)
    let coords = {
        let shape = cx.dims(idx);
        let mut col = shape.clone();
        col.push(Dim::Static(1));
        let mut parts = Vec::new();
        for j in 0..r {
            let v = if j == cdim { idx } else { cx.iota(DType::I64, &shape, j)? };
            parts.push(cx.reshape(v, col.clone())?);
        }
        cx.b.concatenate(&parts, shape.len() as i64)?
    };
    let all: Vec<i64> = (0..r as i64).collect();
    let attrs = Attrs::new()
        .with("offset_dims", Attr::Ints(vec![]))
        .with("collapsed_slice_dims", Attr::Ints(all.clone()))
        .with("operand_batching_dims", Attr::Ints(vec![]))
        .with("start_indices_batching_dims", Attr::Ints(vec![]))
        .with("start_index_map", Attr::Ints(all))
        .with("index_vector_dim", Attr::Int(r as i64))
        .with("slice_sizes", Attr::Ints(vec![1; r]));
    let picked = cx.b.build1(O::Gather, &[x, coords], attrs, None)?;
    let picked = cx.reshape(picked, cx.dims(w))?;
    let l = cx.bin(O::Mul, picked, w)?;
    let l = cx.un(O::Neg, l)?;
    let all_dims: Vec<usize> = (0..cx.rank(w)).collect();
    let tw = cx.reduce(w, "sum", &all_dims, false)?;
    let out = match reduction {
        0 => l,
        1 => {
            let s = cx.reduce(l, "sum", &all_dims, false)?;
            cx.bin(O::Div, s, tw)?
        }
        2 => cx.reduce(l, "sum", &all_dims, false)?,
        other => return err(format!("unknown reduction {other}")),
    };
    let tw = if reduction == 0 { cx.scalar(Scalar::Int(0), dt)? } else { tw };
    let tw = if cx.used(1) { Val::Tensor(tw) } else { Val::Absent };
    Ok(vec![Val::Tensor(out), tw])
}
