//! torch's random ops (dropout, the samplers, their `*.generator` overloads with
//! `generator=None`), lowered onto the counter-based generator of `build::random`: every random
//! op of a program draws its own stream of one more user input, the seed, so an executable holds
//! no hidden state and stays correct when cached. The CLI fills the seed from `--seed`; the
//! `torch.compile` backend and `train_step` draw it from torch's generator at every call.

use crate::ops::build::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("native_dropout.default", native_dropout),
    ("dropout.default", dropout),
    ("rand.default", rand),
    ("rand_like.default", rand),
    ("randn.default", randn),
    ("randn_like.default", randn),
    ("bernoulli.p", bernoulli),
    ("bernoulli.default", bernoulli),
    ("uniform.default", uniform_range),
    ("exponential.default", exponential),
    ("normal.float_float", normal),
    ("normal_functional.default", normal),
    ("randint.default", randint),
    ("randint.low", randint),
    ("randint_like.default", randint),
    ("randint_like.low_dtype", randint),
    // The overloads with an explicit `generator` argument (`torch.randn(size, generator=g)`):
    // with `generator=None`, as Dynamo and torch.export leave them, the plain op.
    ("rand.generator", rand),
    ("randn.generator", randn),
    ("randint.generator", randint),
    ("randint.low_generator", randint),
    ("randperm.default", randperm),
    ("randperm.generator", randperm),
    ("normal.Tensor_float", normal_tensors),
    ("normal.float_Tensor", normal_tensors),
    ("normal.Tensor_Tensor", normal_tensors),
];

/// Whether `node` draws random numbers: one of the ATen random ops (the targets of `OPS`; a
/// dropout only in training with `p > 0`), or attention with `dropout_p > 0`. A
/// program with any such node gets one more user input, the seed (see `SEED_INPUT`).
pub fn draws(node: &crate::schema::Node<'_>) -> bool {
    let Some(op) = node.target.strip_prefix("torch.ops.aten.") else { return false };
    let arg = |name: &str| node.inputs.iter().find(|a| a.name == name).and_then(|a| a.arg.decode().ok());
    if op == "scaled_dot_product_attention.default" {
        return matches!(arg("dropout_p"), Some(Arg::Float(p)) if p != 0.0);
    }
    if !OPS.iter().any(|(t, _)| *t == op) {
        return false;
    }
    if op.contains("dropout") {
        let train = !matches!(arg("train"), Some(Arg::Bool(false)));
        let p = match arg("p") {
            Some(Arg::Float(p)) => p,
            Some(Arg::Int(p)) => p as f64,
            _ => 0.5,
        };
        return train && p != 0.0;
    }
    true
}

// ---------------------------------------------------------------- ATen random ops
//
// Each op of the program draws from its own stream, numbered in graph order; sizes and dtypes
// are those torch recorded for the result.

fn result_type(cx: &Ctx) -> R<TensorType> {
    cx.out_type(0).ok_or_else(|| OpError::Refused(format!("{}: the result has no recorded tensor type", cx.node.target)))
}

/// Uniform numbers of the result's shape, in `dt`.
fn draw_like_result(cx: &mut Ctx, dt: DType) -> R<ValueId> {
    let ty = result_type(cx)?;
    let (seed, stream) = next_draw(cx)?;
    draw(cx, seed, stream, &ty.dims, dt)
}

/// Box-Muller on two streams, in f32 (f64 for f64 results).
fn standard_normal(cx: &mut Ctx, dt: DType) -> R<ValueId> {
    let work = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    let u1 = draw_like_result(cx, work)?;
    let u2 = draw_like_result(cx, work)?;
    let n = cx.un(O::Neg, u1)?;
    let l = cx.un(O::Log1p, n)?;
    let l = cx.bin_c(O::Mul, l, -2.0)?;
    let r = cx.un(O::Sqrt, l)?;
    let t = cx.bin_c(O::Mul, u2, 2.0 * std::f64::consts::PI)?;
    let c = cx.un(O::Cos, t)?;
    let z = cx.bin(O::Mul, r, c)?;
    cx.convert(z, dt)
}

/// `native_dropout(input, p, train)`: (result, keep mask). In eval mode or with `p = 0` the
/// identity and an all-true mask.
fn native_dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float("p")?;
    // `train` is `bool?`: only an explicit false turns dropout off.
    if !cx.opt_bool("train")?.unwrap_or(true) || p == 0.0 {
        let mask = if cx.used(1) { Val::Tensor(cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(x))?) } else { Val::Absent };
        return Ok(vec![Val::Tensor(x), mask]);
    }
    let (y, keep) = drop_with(cx, x, p)?;
    Ok(vec![Val::Tensor(y), Val::Tensor(keep)])
}

/// `dropout(input, p, train)`; the identity in eval mode or with `p = 0`.
fn dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float("p")?;
    if !cx.bool("train")? || p == 0.0 {
        return one(x);
    }
    one(drop_with(cx, x, p)?.0)
}

fn rand(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    one(draw_like_result(cx, dt)?)
}

fn randn(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    one(standard_normal(cx, dt)?)
}

fn bernoulli(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let u = draw_like_result(cx, DType::F32)?;
    let p = match cx.opt_float("p")? {
        Some(p) => cx.full_like(Scalar::Float(p), u)?,
        None if cx.node.target.ends_with(".p") => cx.full_like(Scalar::Float(0.5), u)?,
        None => {
            let p = cx.t("self")?;
            cx.convert(p, DType::F32)?
        }
    };
    let hit = cx.cmp(Direction::Lt, u, p)?;
    one(cx.convert(hit, dt)?)
}

/// `lo + u * (hi - lo)`.
fn uniform_range(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let (lo, hi) = (cx.float("from")?, cx.float("to")?);
    let u = draw_like_result(cx, dt)?;
    let u = cx.bin_c(O::Mul, u, hi - lo)?;
    one(cx.bin_c(O::Add, u, lo)?)
}

/// `-log(1 - u) / lambda`.
fn exponential(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let lambd = cx.float("lambd")?;
    let u = draw_like_result(cx, dt)?;
    let n = cx.un(O::Neg, u)?;
    let l = cx.un(O::Log1p, n)?;
    one(cx.bin_c(O::Mul, l, -1.0 / lambd)?)
}

/// `mean + std * z` with float mean and std.
fn normal(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let (mean, std) = (cx.float("mean")?, cx.float("std")?);
    let z = standard_normal(cx, dt)?;
    let z = cx.bin_c(O::Mul, z, std)?;
    one(cx.bin_c(O::Add, z, mean)?)
}

/// `mean + std * z` with a tensor mean or std (or both), broadcast to the result.
fn normal_tensors(cx: &mut Ctx) -> R<Vec<Val>> {
    let ty = result_type(cx)?;
    let mean = cx.operand("mean")?;
    let std = if cx.has("std") { cx.operand("std")? } else { Operand::N(Num::Float(1.0)) };
    let z = standard_normal(cx, ty.dtype)?;
    let std = cx.mat(&std, ty.dtype, &ty.dims)?;
    let mean = cx.mat(&mean, ty.dtype, &ty.dims)?;
    let z = cx.bin(O::Mul, z, std)?;
    one(cx.bin(O::Add, z, mean)?)
}

/// A random permutation of `0..n`: the stable order of `n` uniform draws of 32 bits (f64), as
/// the Python rewrite (`argsort(stable=True)` of the same draws).
fn randperm(cx: &mut Ctx) -> R<Vec<Val>> {
    let ty = result_type(cx)?;
    if ty.rank() != 1 {
        return err(format!("randperm: the result is {ty}, not 1-D"));
    }
    let u = draw_like_result(cx, DType::F64)?;
    let (_, i) = sort_v(cx, u, 0, false)?;
    one(cx.convert(i, ty.dtype)?)
}

/// `low + floor(u * (high - low))` with `u` of 32 bits (f64), converted to the result dtype.
fn randint(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let low = cx.opt_int("low")?.unwrap_or(0);
    let high = cx.int("high")?;
    if high <= low {
        return err(format!("randint: empty range [{low}, {high})"));
    }
    let u = draw_like_result(cx, DType::F64)?;
    let r = cx.bin_c(O::Mul, u, (high - low) as f64)?;
    let r = cx.un(O::Floor, r)?;
    let r = cx.bin_c(O::Add, r, low as f64)?;
    one(cx.convert(r, dt)?)
}
