//! Backward ops that aot_autograd graphs keep after core-ATen decomposition:
//! convolution_backward, max_pool*_with_indices_backward, the CPU flash-attention backward,
//! plus the common activation, softmax and normalization backwards.
//!
//! convolution_backward is the transposed convolution for the input gradient and a
//! convolution of the input with the output gradient (batch and feature roles swapped;
//! groups through `batch_group_count`) for the weight gradient, as JAX derives them. Of a
//! transposed convolution (the adjoint of a convolution with the same weight) the input
//! gradient is that plain convolution of the output gradient, and the weight gradient the
//! same formula with input and output gradient exchanged.

use super::nn::{attention_scores, build_conv, conv_attrs, flip_kernel, sdpa_args};
use super::*;
use Opcode as O;
use tpuc_ir::{AttrEnum, Direction, ReduceKind, ScatterKind, WindowKind};

pub const OPS: &[(&str, OpFn)] = &[
    ("convolution_backward.default", convolution_backward),
    ("max_pool2d_with_indices_backward.default", max_pool_backward),
    ("max_pool3d_with_indices_backward.default", max_pool_backward),
    ("_scaled_dot_product_flash_attention_for_cpu_backward.default", sdpa_flash_cpu_backward),
    ("threshold_backward.default", threshold_backward),
    ("_softmax_backward_data.default", softmax_backward),
    ("_log_softmax_backward_data.default", log_softmax_backward),
    ("tanh_backward.default", tanh_backward),
    ("sigmoid_backward.default", sigmoid_backward),
    ("gelu_backward.default", gelu_backward),
    ("silu_backward.default", silu_backward),
    ("native_layer_norm_backward.default", layer_norm_backward),
    ("native_batch_norm_backward.default", batch_norm_backward),
    ("embedding_dense_backward.default", embedding_dense_backward),
    ("nll_loss_backward.default", nll_loss_backward),
    ("nll_loss2d_backward.default", nll_loss_backward),
    ("select_backward.default", select_backward),
    ("slice_backward.default", slice_backward),
    ("avg_pool2d_backward.default", avg_pool_backward),
    ("avg_pool3d_backward.default", avg_pool_backward),
    ("_adaptive_avg_pool2d_backward.default", adaptive_avg_pool_backward),
    ("_adaptive_avg_pool3d_backward.default", adaptive_avg_pool_backward),
];

fn out_used(cx: &Ctx, mask: &[bool], i: usize) -> bool {
    mask.get(i).copied().unwrap_or(true) && cx.used(i)
}

fn convolution_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_output")?;
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let transposed = cx.bool_or("transposed", false)?;
    let mask = cx.bools("output_mask")?.unwrap_or_else(|| vec![true; 3]);
    let wd = cx.static_dims(w, "convolution weight")?;
    let xd = cx.static_dims(x, "convolution input")?;
    let dyd = cx.static_dims(dy, "convolution grad_output")?;
    let r = wd.len();
    if r < 3 || xd.len() != r || dyd.len() != r {
        return err("convolution_backward needs batched input, weight and grad_output of one rank");
    }
    let n = r - 2;
    let stride = super::nn::expand_list(&cx.ints_or("stride", &[1])?, n, "stride")?;
    let padding = super::nn::expand_list(&cx.ints_or("padding", &[0])?, n, "padding")?;
    let dilation = super::nn::expand_list(&cx.ints_or("dilation", &[1])?, n, "dilation")?;
    let groups = cx.int_or("groups", 1)?;
    for &v in stride.iter().chain(&dilation) {
        check_window(v, 1, "stride or dilation")?;
    }
    for &p in &padding {
        check_window(p, 0, "padding")?;
    }
    if !(1..=MAX_SIZE).contains(&groups) {
        return err("bad groups");
    }
    // A transposed convolution is the adjoint of the convolution with the same weight, so its
    // gradients are the convolution's with input and output exchanged: the input gradient is
    // that convolution of the output gradient, the weight gradient that of the convolution
    // from `grad_output` to `input`. `a` is the convolution's input, `b` its output.
    let (a, ad, b, bd) = if transposed { (dy, &dyd, x, &xd) } else { (x, &xd, dy, &dyd) };
    // High padding of the convolution from `a` to `b`: what makes its output exactly `b`'s
    // size (negative where a transposed convolution's output_padding adds rows no input reaches).
    let pads: Vec<(i64, i64)> = (0..n)
        .map(|i| (padding[i], (wd[2 + i] - 1) * dilation[i] + (bd[2 + i] - 1) * stride[i] + 1 - ad[2 + i] - padding[i]))
        .collect();
    let ones = vec![1i64; n];
    let mut outs = vec![Val::None, Val::None, Val::None];
    for (i, o) in outs.iter_mut().enumerate() {
        if mask.get(i).copied().unwrap_or(true) && !cx.used(i) {
            *o = Val::Absent;
        }
    }
    if out_used(cx, &mask, 0) {
        let gi = if transposed {
            build_conv(cx, dy, w, conv_attrs(&stride, &pads, &ones, &dilation, groups, 1))?
        } else {
            let kernel = flip_kernel(cx, w, groups)?;
            let tpads: Vec<(i64, i64)> = (0..n)
                .map(|i| (dilation[i] * (wd[2 + i] - 1) - padding[i], xd[2 + i] - (dyd[2 + i] - 1) * stride[i] - 1 + padding[i]))
                .collect();
            build_conv(cx, dy, kernel, conv_attrs(&ones, &tpads, &stride, &dilation, groups, 1))?
        };
        if cx.static_dims(gi, "input gradient")? != xd {
            return err(format!("internal: convolution_backward's input gradient is {}", cx.ty(gi)));
        }
        outs[0] = Val::Tensor(gi);
    }
    if out_used(cx, &mask, 1) {
        let mut perm: Vec<i64> = (0..r as i64).collect();
        perm.swap(0, 1);
        let lhs = cx.transpose(a, &perm)?;
        let rhs = cx.transpose(b, &perm)?;
        let gw = build_conv(cx, lhs, rhs, conv_attrs(&dilation, &pads, &ones, &stride, 1, groups))?;
        let gw = cx.transpose(gw, &perm)?;
        if cx.static_dims(gw, "weight gradient")? != wd {
            return err(format!("internal: convolution_backward's weight gradient is {}", cx.ty(gw)));
        }
        outs[1] = Val::Tensor(gw);
    }
    if out_used(cx, &mask, 2) {
        let dims: Vec<usize> = (0..r).filter(|&d| d != 1).collect();
        outs[2] = Val::Tensor(cx.reduce(dy, ReduceKind::Sum, &dims, false)?);
    }
    Ok(outs)
}

/// Scatter-adds the output gradient into the positions the indices name (flat per spatial
/// block), as the CPU kernel does.
fn max_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
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
    let all: Vec<i64> = (0..=lead as i64).collect();
    let attrs = Attrs::new()
        .with("update_window_dims", Attr::Ints(vec![]))
        .with("inserted_window_dims", Attr::Ints(all.clone()))
        .with("input_batching_dims", Attr::Ints(vec![]))
        .with("scatter_indices_batching_dims", Attr::Ints(vec![]))
        .with("scatter_dims_to_operand_dims", Attr::Ints(all))
        .with("index_vector_dim", Attr::Int(gshape.len() as i64))
        .with("kind", ScatterKind::Add.attr());
    let s = cx.b.build1(O::Scatter, &[z, coords, g], attrs, None)?;
    one(cx.reshape(s, xd)?)
}

/// The CPU flash-attention backward given the forward's logsumexp. When the "logsumexp" has
/// the scores' rank (the math-decomposed forward passes the attention weights instead), the
/// kernel reads its element [..., 0] per row; that is reproduced.
fn sdpa_flash_cpu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", false)?;
    let dout = cx.t("grad_out")?;
    let out = cx.t("out")?;
    let mut lse = cx.t("logsumexp")?;
    let r = cx.rank(a.q);
    let dt = cx.dtype(a.q);
    if cx.rank(lse) == r {
        let d = cx.dims(lse);
        let first = super::shape::slice_any(cx, lse, r - 1, Some(SymExpr::constant(0)), Some(SymExpr::constant(1)), 1)?;
        lse = cx.reshape(first, d[..r - 1].to_vec())?;
    }
    let lse = cx.convert(lse, dt)?;
    let s = attention_scores(cx, &a)?;
    let shape = cx.dims(s);
    let lb = cx.b.broadcast_in_dim(lse, &(0..r as i64 - 1).collect::<Vec<_>>(), shape.clone())?;
    let d = cx.bin(O::Sub, s, lb)?;
    let p = cx.un(O::Exp, d)?;
    let batch: Vec<i64> = (0..r as i64 - 2).collect();
    let (l2, l1) = (r as i64 - 2, r as i64 - 1);
    // dV = P^T dO
    let dv = cx.b.dot_general(p, dout, &batch, &batch, &[l2], &[l2])?;
    // dP = dO V^T
    let dp = cx.b.dot_general(dout, a.v, &batch, &batch, &[l1], &[l1])?;
    // D = rowsum(dO * O)
    let oo = cx.bin(O::Mul, dout, out)?;
    let dsum = cx.reduce(oo, ReduceKind::Sum, &[r - 1], true)?;
    let dsum = cx.broadcast_to(dsum, &shape)?;
    let diff = cx.bin(O::Sub, dp, dsum)?;
    let ds = cx.bin(O::Mul, p, diff)?;
    let dq = cx.b.dot_general(ds, a.k, &batch, &batch, &[l1], &[l2])?;
    let dq = cx.bin_c(O::Mul, dq, a.scale)?;
    let dk = cx.b.dot_general(ds, a.q, &batch, &batch, &[l2], &[l2])?;
    let dk = cx.bin_c(O::Mul, dk, a.scale)?;
    if cx.dims(dk) != cx.dims(cx.t("key")?) {
        return err("flash-attention backward with grouped-query heads is not supported");
    }
    Ok(vec![Val::Tensor(dq), Val::Tensor(dk), Val::Tensor(dv)])
}

fn threshold_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let th = cx.num("threshold")?;
    let shape = cx.broadcast_shape(&[Operand::T(g), Operand::T(x)])?;
    let dt = cx.dtype(g);
    let xb = cx.broadcast_to(x, &shape)?;
    let gb = cx.broadcast_to(g, &shape)?;
    let xd = cx.dtype(xb);
    let t = cx.full(th.scalar(), xd, &shape)?;
    let le = cx.cmp(Direction::Le, xb, t)?;
    let z = cx.full(Scalar::Int(0), dt, &shape)?;
    one(cx.select(le, z, gb)?)
}

fn softmax_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(y))?;
    let dt = cx.opt_dtype("input_dtype")?.unwrap_or(cx.dtype(g));
    let gy = cx.bin(O::Mul, g, y)?;
    let s = cx.reduce(gy, ReduceKind::Sum, &[dim], true)?;
    let shape = cx.dims(g);
    let s = cx.broadcast_to(s, &shape)?;
    let d = cx.bin(O::Sub, g, s)?;
    let r = cx.bin(O::Mul, y, d)?;
    one(cx.convert(r, dt)?)
}

fn log_softmax_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(y))?;
    let dt = cx.opt_dtype("input_dtype")?.unwrap_or(cx.dtype(g));
    let s = cx.reduce(g, ReduceKind::Sum, &[dim], true)?;
    let shape = cx.dims(g);
    let s = cx.broadcast_to(s, &shape)?;
    let e = cx.un(O::Exp, y)?;
    let es = cx.bin(O::Mul, e, s)?;
    let r = cx.bin(O::Sub, g, es)?;
    one(cx.convert(r, dt)?)
}

fn tanh_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let yy = cx.bin(O::Mul, y, y)?;
    let o = cx.full_like(Scalar::Float(1.0), y)?;
    let d = cx.bin(O::Sub, o, yy)?;
    one(cx.bin(O::Mul, g, d)?)
}

fn sigmoid_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let o = cx.full_like(Scalar::Float(1.0), y)?;
    let d = cx.bin(O::Sub, o, y)?;
    let gd = cx.bin(O::Mul, g, d)?;
    one(cx.bin(O::Mul, gd, y)?)
}

fn gelu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let approx = cx.str_or("approximate", "none")?;
    let deriv = if approx == "tanh" {
        let k_beta = std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5;
        let k_kappa = 0.044715;
        let x2 = cx.bin(O::Mul, x, x)?;
        let x3 = cx.bin(O::Mul, x2, x)?;
        let kx3 = cx.bin_c(O::Mul, x3, k_kappa)?;
        let s = cx.bin(O::Add, x, kx3)?;
        let inner = cx.bin_c(O::Mul, s, k_beta)?;
        let t = cx.un(O::Tanh, inner)?;
        let left = cx.bin_c(O::Mul, x, 0.5)?;
        let right = cx.bin_c(O::Add, t, 1.0)?;
        let left_d = cx.bin_c(O::Mul, right, 0.5)?;
        let tt = cx.bin(O::Mul, t, t)?;
        let o = cx.full_like(Scalar::Float(1.0), x)?;
        let one_m = cx.bin(O::Sub, o, tt)?;
        let ldr = cx.bin(O::Mul, left, one_m)?;
        let k3 = cx.bin_c(O::Mul, x2, 3.0 * k_kappa)?;
        let k3 = cx.bin_c(O::Add, k3, 1.0)?;
        let k3 = cx.bin_c(O::Mul, k3, k_beta)?;
        let right_d = cx.bin(O::Mul, ldr, k3)?;
        cx.bin(O::Add, left_d, right_d)?
    } else {
        let xs = cx.bin_c(O::Mul, x, std::f64::consts::FRAC_1_SQRT_2)?;
        let e = cx.un(O::Erf, xs)?;
        let e1 = cx.bin_c(O::Add, e, 1.0)?;
        let cdf = cx.bin_c(O::Mul, e1, 0.5)?;
        let x2 = cx.bin(O::Mul, x, x)?;
        let h = cx.bin_c(O::Mul, x2, -0.5)?;
        let ex = cx.un(O::Exp, h)?;
        let pdf = cx.bin_c(O::Mul, ex, 1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
        let xp = cx.bin(O::Mul, x, pdf)?;
        cx.bin(O::Add, cdf, xp)?
    };
    one(cx.bin(O::Mul, g, deriv)?)
}

fn silu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let s = cx.un(O::Logistic, x)?;
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    let om = cx.bin(O::Sub, o, s)?;
    let xo = cx.bin(O::Mul, x, om)?;
    let t = cx.bin(O::Add, o, xo)?;
    let st = cx.bin(O::Mul, s, t)?;
    one(cx.bin(O::Mul, g, st)?)
}

fn layer_norm_backward(cx: &mut Ctx) -> R<Vec<Val>> {
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

fn batch_norm_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_out")?;
    let x = cx.t("input")?;
    let w = cx.opt_t("weight")?;
    let train = cx.bool_or("train", true)?;
    let eps = cx.float_or("eps", 1e-5)?;
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

fn embedding_dense_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let idx = cx.t("indices")?;
    let nw = cx.int("num_weights")?;
    let pad = cx.int_or("padding_idx", -1)?;
    if cx.bool_or("scale_grad_by_freq", false)? {
        return err("embedding backward with scale_grad_by_freq is not supported");
    }
    if !(0..=MAX_SIZE).contains(&nw) {
        return err("num_weights out of range");
    }
    let gd = cx.dims(g);
    let id = cx.dims(idx);
    if gd.len() != id.len() + 1 {
        return err("embedding backward: grad_output must have one more dim than indices");
    }
    let dcol = gd[gd.len() - 1].clone();
    let dt = cx.dtype(g);
    let mut g = g;
    let idx64 = cx.convert(idx, DType::I64)?;
    if pad >= 0 {
        let pv = cx.full_like(Scalar::Int(pad), idx64)?;
        let keep = cx.cmp(Direction::Ne, idx64, pv)?;
        let bd: Vec<i64> = (0..id.len() as i64).collect();
        let kb = cx.b.broadcast_in_dim(keep, &bd, gd.clone())?;
        let z = cx.full_like(Scalar::Int(0), g)?;
        g = cx.select(kb, g, z)?;
    }
    let z = cx.full(Scalar::Int(0), dt, &[Dim::Static(nw), dcol])?;
    one(super::index::scatter_rows(cx, z, idx64, g, ScatterKind::Add)?)
}

/// Per-element weights of an NLL loss: `weight[target]` (or 1), 0 where target is ignored;
/// and the target made safe to gather with (ignored entries point at class 0).
pub fn nll_weights(cx: &mut Ctx, target: ValueId, weight: Option<ValueId>, ignore: i64, dt: DType) -> R<(ValueId, ValueId)> {
    let t = cx.convert(target, DType::I64)?;
    let ig = cx.full_like(Scalar::Int(ignore), t)?;
    let keep = cx.cmp(Direction::Ne, t, ig)?;
    let z = cx.full_like(Scalar::Int(0), t)?;
    let safe = cx.select(keep, t, z)?;
    let w = match weight {
        Some(w) => {
            let w = cx.convert(w, dt)?;
            super::shape::take_along(cx, w, 0, safe)?
        }
        None => cx.full(Scalar::Int(1), dt, &cx.dims(t))?,
    };
    let zw = cx.full_like(Scalar::Int(0), w)?;
    Ok((cx.select(keep, w, zw)?, safe))
}

/// One-hot of `target` along dim 1 of `shape` (class dim), as bool.
fn one_hot(cx: &mut Ctx, target: ValueId, shape: &[Dim]) -> R<ValueId> {
    let r = shape.len();
    let cdim = if r == 1 { 0 } else { 1 };
    let io = cx.iota(DType::I64, shape, cdim)?;
    let bd: Vec<i64> = (0..r as i64).filter(|&d| d != cdim as i64).collect();
    let tb = cx.b.broadcast_in_dim(target, &bd, shape.to_vec())?;
    cx.cmp(Direction::Eq, io, tb)
}

fn nll_loss_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let target = cx.t("target")?;
    let weight = cx.opt_t("weight")?;
    let reduction = cx.int_or("reduction", 1)?;
    let ignore = cx.int_or("ignore_index", -100)?;
    let tw = cx.t("total_weight")?;
    let dt = cx.dtype(x);
    let shape = cx.dims(x);
    let (w, safe) = nll_weights(cx, target, weight, ignore, dt)?;
    let tdims = cx.dims(w);
    let g = cx.convert(g, dt)?;
    let gb = match reduction {
        0 => g,
        1 => {
            let tw = cx.convert(tw, dt)?;
            let q = cx.bin(O::Div, g, tw)?;
            cx.broadcast_to(q, &tdims)?
        }
        _ => cx.broadcast_to(g, &tdims)?,
    };
    let per = cx.bin(O::Mul, w, gb)?;
    let per = cx.un(O::Neg, per)?;
    let oh = one_hot(cx, safe, &shape)?;
    let r = shape.len();
    let cdim = if r == 1 { 0 } else { 1 };
    let bd: Vec<i64> = (0..r as i64).filter(|&d| d != cdim as i64).collect();
    let pb = cx.b.broadcast_in_dim(per, &bd, shape.clone())?;
    let z = cx.full(Scalar::Int(0), dt, &shape)?;
    one(cx.select(oh, pb, z)?)
}

fn zeros_of_sizes(cx: &mut Ctx, g: ValueId) -> R<ValueId> {
    let dims = cx.size_dims("input_sizes")?;
    let dt = cx.dtype(g);
    cx.full(Scalar::Int(0), dt, &dims)
}

fn select_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let z = zeros_of_sizes(cx, g)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(z))?;
    let n = static_of(&cx.dim_size(z, dim)?, "select_backward dim")?;
    let i = cx.int("index")?;
    let i = if i < 0 { i + n } else { i };
    let gu = super::shape::unsqueeze_v(cx, g, dim as i64)?;
    one(super::index::slice_scatter_v(cx, z, gu, dim, Some(i), Some(i + 1), 1)?)
}

fn slice_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let z = zeros_of_sizes(cx, g)?;
    let dim = norm_dim(cx.int("dim")?, cx.rank(z))?;
    let start = cx.opt_int("start")?;
    let end = cx.opt_int("end")?.filter(|&e| e < MAX_SIZE);
    let step = cx.int_or("step", 1)?;
    one(super::index::slice_scatter_v(cx, z, g, dim, start, end, step)?)
}

/// The transpose of average pooling: the gradient divided by each window's divisor, dilated
/// by the stride, padded, and summed over windows of the kernel size.
fn avg_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let nsp = cx.node.target.chars().find(|c| c.is_ascii_digit()).and_then(|c| c.to_digit(10)).unwrap_or(2) as usize;
    let ceil = cx.bool_or("ceil_mode", false)?;
    let include_pad = cx.bool_or("count_include_pad", true)?;
    let divisor = cx.opt_int("divisor_override")?;
    let geo = super::nn::avg_geometry(cx, x, nsp, ceil)?;
    if geo.wins.iter().any(|w| w.k - 1 - w.pad < 0) {
        return err("avg_pool backward: padding larger than the kernel");
    }
    let div = super::nn::avg_divisor(cx, g, &geo, include_pad, divisor)?;
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
fn adaptive_avg_pool_backward(cx: &mut Ctx) -> R<Vec<Val>> {
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
        let m = super::nn::adaptive_matrix(n, o);
        let mut mt = vec![0.0; m.len()];
        for r in 0..o as usize {
            for c in 0..n as usize {
                mt[c * o as usize + r] = m[r * n as usize + c];
            }
        }
        let mc = cx.const_f(&[n, o], &mt, dt)?;
        y = super::nn::apply_along(cx, y, lead + i, mc)?;
    }
    one(cx.convert(y, out_dt)?)
}
