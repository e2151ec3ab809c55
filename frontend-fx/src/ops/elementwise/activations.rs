//! Activations: ReLU and its variants, GELU, SiLU, softplus, Mish, the hard and shrink
//! forms, ELU/SELU/CELU, `logit`, log-sigmoid and GLU.

use super::binary::{clamp_const};
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::{AttrEnum, Direction, GeluApproximation};

pub fn relu_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let z = cx.full_like(Scalar::Int(0), x)?;
    cx.bin(O::Max, x, z)
}

pub(super) fn relu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.dtype(x).is_bool() {
        return err("relu of a bool tensor is not supported by torch");
    }
    one(relu_v(cx, x)?)
}

pub(super) fn gelu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let approx = cx.str("approximate")?;
    let Some(a) = GeluApproximation::parse(&approx) else {
        return err(format!("gelu approximate `{approx}` is not `none` or `tanh`"));
    };
    let v = cx.b.build1(O::Gelu, &[x], Attrs::new().with("approximate", a.attr()), None)?;
    one(v)
}

pub(super) fn silu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let s = cx.un(O::Logistic, x)?;
    one(cx.bin(O::Mul, x, s)?)
}

/// `(x * beta) > threshold ? x : log1p(exp(x * beta)) / beta`
fn softplus_v(cx: &mut Ctx, x: ValueId, beta: f64, threshold: f64) -> R<ValueId> {
    let xb = if beta == 1.0 { x } else { cx.bin_c(O::Mul, x, beta)? };
    let big = {
        let t = cx.full_like(Scalar::Float(threshold), x)?;
        cx.cmp(Direction::Gt, xb, t)?
    };
    let e = cx.un(O::Exp, xb)?;
    let l = cx.un(O::Log1p, e)?;
    let l = if beta == 1.0 { l } else { cx.bin_c(O::Div, l, beta)? };
    cx.select(big, x, l)
}

pub(super) fn softplus(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let beta = cx.float("beta")?;
    let th = cx.float("threshold")?;
    one(softplus_v(cx, x, beta, th)?)
}

pub(super) fn mish(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let sp = softplus_v(cx, x, 1.0, 20.0)?;
    let t = cx.un(O::Tanh, sp)?;
    one(cx.bin(O::Mul, x, t)?)
}

/// `min(max(x + 3, 0), 6) / 6`
fn hardsigmoid_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let p = cx.bin_c(O::Add, x, 3.0)?;
    let c = clamp_const(cx, p, 0.0, 6.0)?;
    cx.bin_c(O::Div, c, 6.0)
}
pub(super) fn hardsigmoid(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(hardsigmoid_v(cx, x)?)
}
pub(super) fn hardswish(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.bin_c(O::Add, x, 3.0)?;
    let c = clamp_const(cx, p, 0.0, 6.0)?;
    let m = cx.bin(O::Mul, x, c)?;
    one(cx.bin_c(O::Div, m, 6.0)?)
}

pub(super) fn leaky_relu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let slope = cx.float("negative_slope")?;
    let z = cx.full_like(Scalar::Int(0), x)?;
    let pos = cx.cmp(Direction::Gt, x, z)?;
    let n = cx.bin_c(O::Mul, x, slope)?;
    one(cx.select(pos, x, n)?)
}

/// `x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale`
fn elu_v(cx: &mut Ctx, x: ValueId, alpha: f64, scale: f64, input_scale: f64) -> R<ValueId> {
    let z = cx.full_like(Scalar::Int(0), x)?;
    let neg = cx.cmp(Direction::Le, x, z)?;
    let xi = if input_scale == 1.0 { x } else { cx.bin_c(O::Mul, x, input_scale)? };
    let e = cx.un(O::Expm1, xi)?;
    let n = cx.bin_c(O::Mul, e, alpha * scale)?;
    let p = if scale == 1.0 { x } else { cx.bin_c(O::Mul, x, scale)? };
    cx.select(neg, n, p)
}

pub(super) fn elu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let alpha = cx.float("alpha")?;
    let scale = cx.float("scale")?;
    let input_scale = cx.float("input_scale")?;
    one(elu_v(cx, x, alpha, scale, input_scale)?)
}

pub(super) fn selu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(elu_v(cx, x, 1.673_263_242_354_377_3, 1.050_700_987_355_480_5, 1.0)?)
}

pub(super) fn celu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let alpha = cx.float("alpha")?;
    one(elu_v(cx, x, alpha, 1.0, 1.0 / alpha)?)
}

/// `log(x / (1 - x))`, with x clamped to [eps, 1 - eps] when eps is given.
pub(super) fn logit(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let mut x = cx.float_of(x)?;
    if let Some(eps) = cx.opt_float("eps")? {
        x = clamp_const(cx, x, eps, 1.0 - eps)?;
    }
    let o = cx.full_like(Scalar::Float(1.0), x)?;
    let d = cx.bin(O::Sub, o, x)?;
    let q = cx.bin(O::Div, x, d)?;
    one(cx.un(O::Log, q)?)
}

/// `log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))` (the CPU kernel's stable form).
fn log_sigmoid_v(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    let m = cx.bin(O::Min, x, z)?;
    let a = cx.un(O::Abs, x)?;
    let na = cx.un(O::Neg, a)?;
    let e = cx.un(O::Exp, na)?;
    let l = cx.un(O::Log1p, e)?;
    cx.bin(O::Sub, m, l)
}
pub(super) fn log_sigmoid(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    one(log_sigmoid_v(cx, x)?)
}
pub(super) fn log_sigmoid_forward(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let y = log_sigmoid_v(cx, x)?;
    let buf = if cx.used(1) { Val::Tensor(cx.full(Scalar::Int(0), cx.dtype(x), &[Dim::Static(0)])?) } else { Val::Absent };
    Ok(vec![Val::Tensor(y), buf])
}

/// `a * sigmoid(b)` of the two halves along `dim`.
pub(super) fn glu(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.rank(x) == 0 {
        return err("glu does not take a rank-0 tensor (it halves a dim)");
    }
    let d = norm_dim(cx.int("dim")?, cx.rank(x))?;
    let n = static_of(&cx.dim_size(x, d)?, "glu dim")?;
    if n % 2 != 0 {
        return err(format!("glu needs an even dim, got {n}"));
    }
    let a = slice_static(cx, x, d, 0, n / 2, 1)?;
    let b = slice_static(cx, x, d, n / 2, n, 1)?;
    let s = cx.un(O::Logistic, b)?;
    one(cx.bin(O::Mul, a, s)?)
}

pub(super) fn hardshrink(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let l = cx.float("lambd")?;
    let a = cx.un(O::Abs, x)?;
    let lv = cx.full_like(Scalar::Float(l), x)?;
    let keep = cx.cmp(Direction::Gt, a, lv)?;
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    one(cx.select(keep, x, z)?)
}

pub(super) fn softshrink(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let l = cx.float("lambd")?;
    let lv = cx.full_like(Scalar::Float(l), x)?;
    let nl = cx.full_like(Scalar::Float(-l), x)?;
    let up = cx.cmp(Direction::Gt, x, lv)?;
    let dn = cx.cmp(Direction::Lt, x, nl)?;
    let xm = cx.bin(O::Sub, x, lv)?;
    let xp = cx.bin(O::Add, x, lv)?;
    let z = cx.full_like(Scalar::Float(0.0), x)?;
    let r = cx.select(dn, xp, z)?;
    one(cx.select(up, xm, r)?)
}

pub fn threshold_backward(cx: &mut Ctx) -> R<Vec<Val>> {
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

pub fn tanh_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let yy = cx.bin(O::Mul, y, y)?;
    let o = cx.full_like(Scalar::Float(1.0), y)?;
    let d = cx.bin(O::Sub, o, yy)?;
    one(cx.bin(O::Mul, g, d)?)
}

pub fn sigmoid_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let y = cx.t("output")?;
    let o = cx.full_like(Scalar::Float(1.0), y)?;
    let d = cx.bin(O::Sub, o, y)?;
    let gd = cx.bin(O::Mul, g, d)?;
    one(cx.bin(O::Mul, gd, y)?)
}

pub fn gelu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let approx = cx.str("approximate")?;
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

pub fn silu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
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
