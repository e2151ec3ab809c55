//! Convolution: the general `convolution` op, `conv1d/2d/3d` (including string padding
//! `'same'` and `'valid'`) and transposed convolution, computed as the IR's `convolution`
//! with a flipped kernel for the transposed form (the kernel flip is shared with the
//! convolution backward).
//!
//! `convolution_backward` is the transposed convolution for the input gradient and a
//! convolution of the input with the output gradient (batch and feature roles swapped;
//! groups through `batch_group_count`) for the weight gradient, as JAX derives them. Of a
//! transposed convolution (the adjoint of a convolution with the same weight) the input
//! gradient is that plain convolution of the output gradient, and the weight gradient the
//! same formula with input and output gradient exchanged.

use crate::ops::build::*;
use Opcode as O;

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

/// The IR convolution's attributes; `padding` is (low, high) per spatial dim.
pub fn conv_attrs(stride: &[i64], padding: &[(i64, i64)], lhs_dil: &[i64], rhs_dil: &[i64], groups: i64, batch_groups: i64) -> Attrs {
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
    let x = if unbatched { unsqueeze_v(cx, x, 0)? } else { x };
    if cx.rank(x) != wr {
        return err(format!("convolution input {} does not match weight {}", cx.ty(x), cx.ty(w)));
    }
    let out_dt = cx.result_type(&[Operand::T(x), Operand::T(w)])?;
    // 16-bit floats convolve and add the bias in f32 and round once, as the CPU kernels do
    // (the widened operands are exact; on TPU the MXU reads them as bf16 with f32 accumulation).
    let dt = crate::dtypes::compute_dtype(out_dt);
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
    let y = cx.convert(y, out_dt)?;
    if unbatched {
        return squeeze_v(cx, y, Some(&[0]));
    }
    Ok(y)
}

fn conv_params(cx: &Ctx, n: usize, transposed: bool) -> R<ConvParams> {
    let stride = expand_list(&cx.ints("stride")?, n, "stride")?;
    let dilation = expand_list(&cx.ints("dilation")?, n, "dilation")?;
    // conv1d/2d/3d have no `output_padding`: 0.
    let output_padding = expand_list(&cx.opt_ints("output_padding")?.unwrap_or_else(|| vec![0]), n, "output_padding")?;
    let groups = cx.int("groups")?;
    positive(&stride, "stride")?;
    positive(&dilation, "dilation")?;
    non_negative(&output_padding, "output_padding")?;
    if !(1..=MAX_SIZE).contains(&groups) {
        return err(format!("groups {groups} must be positive"));
    }
    let padding = match cx.opt("padding")? {
        Some(Arg::Str(mode)) => return err(format!("internal: string padding `{mode}` here")),
        _ => {
            let p = expand_list(&cx.ints("padding")?, n, "padding")?;
            non_negative(&p, "padding")?;
            p.into_iter().map(|v| (v, v)).collect()
        }
    };
    Ok(ConvParams { stride, padding, dilation, transposed, output_padding, groups })
}

pub(super) fn convolution(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    let transposed = cx.bool("transposed")?;
    let p = conv_params(cx, n, transposed)?;
    one(conv_v(cx, x, w, b, &p)?)
}

pub(super) fn conv_nd(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    if let Some(Arg::Str(mode)) = cx.opt("padding")? {
        let k = cx.static_dims(w, "convolution weight")?;
        if k.len() != n + 2 {
            return err(format!("convolution weight must have rank >= 3, got {}", cx.ty(w)));
        }
        let stride = expand_list(&cx.ints("stride")?, n, "stride")?;
        let dilation = expand_list(&cx.ints("dilation")?, n, "dilation")?;
        let groups = cx.int("groups")?;
        positive(&stride, "stride")?;
        positive(&dilation, "dilation")?;
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

pub(super) fn conv_transpose(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let b = cx.opt_t("bias")?;
    let n = cx.rank(w).saturating_sub(2).max(1);
    let p = conv_params(cx, n, true)?;
    one(conv_v(cx, x, w, b, &p)?)
}

pub fn convolution_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let dy = cx.t("grad_output")?;
    let x = cx.t("input")?;
    let w = cx.t("weight")?;
    let transposed = cx.bool("transposed")?;
    let mask = cx.bools("output_mask")?.unwrap_or_else(|| vec![true; 3]);
    let wd = cx.static_dims(w, "convolution weight")?;
    let xd = cx.static_dims(x, "convolution input")?;
    let dyd = cx.static_dims(dy, "convolution grad_output")?;
    let r = wd.len();
    if r < 3 || xd.len() != r || dyd.len() != r {
        return err("convolution_backward needs batched input, weight and grad_output of one rank");
    }
    let n = r - 2;
    let stride = expand_list(&cx.ints("stride")?, n, "stride")?;
    let padding = expand_list(&cx.ints("padding")?, n, "padding")?;
    let dilation = expand_list(&cx.ints("dilation")?, n, "dilation")?;
    let groups = cx.int("groups")?;
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
