//! Random numbers with their state an explicit input of the program: `tpuc.uniform(seed,
//! stream, size, dtype)` (the op tpuc's `torch.compile` backend writes for torch's random ops,
//! see `python/tpuc/random.py`) is a counter-based generator, so an executable holds no hidden
//! state and stays correct when cached.
//!
//! The `k`-th element (row-major) of a draw is a hash of `k` keyed by the program's `seed`
//! input (two 31-bit words drawn from torch's generator per call) and the draw's `stream`
//! number (one per random op of the graph):
//!
//! ```text
//! a = mix(seed[0] + 0x9E3779B9·stream + 0x7F4A7C15)      mix: a 32-bit integer finalizer
//! b = mix(seed[1] ^ a)                                    (xor-shift-multiply, all u32,
//! h = mix(mix(k ^ a) + b)                                  wrapping)
//! u = (h >> (32 - m)) · 2^-m                              m: mantissa bits of the dtype + 1
//! ```
//!
//! so `u` is uniform on `[0, 1)` with every value exactly representable in the result dtype
//! (24 bits for f32, 11 for f16, 8 for bf16, 32 for f64). Python's eager kernel of the op
//! computes the same bits. Positions follow the real sizes, so a bucketed program (symbolic
//! dims padded) draws the same numbers for the real elements as the unpadded one. Shifts are divisions by powers of two (unsigned), which XLA turns
//! back into shifts.

use super::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[
    ("torch.ops.tpuc.uniform.default", uniform),
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

/// Whether `node` draws random numbers: one of the ATen random ops (the targets of `OPS` but
/// the first; a dropout only in training with `p > 0`), or attention with `dropout_p > 0`. A
/// program with any such node gets one more user input, the seed (see `SEED_INPUT`).
pub fn draws(node: &crate::schema::Node<'_>) -> bool {
    let Some(op) = node.target.strip_prefix("torch.ops.aten.") else { return false };
    let arg = |name: &str| node.inputs.iter().find(|a| a.name == name).and_then(|a| a.arg.decode().ok());
    if op == "scaled_dot_product_attention.default" {
        return matches!(arg("dropout_p"), Some(Arg::Float(p)) if p != 0.0);
    }
    if !OPS[1..].iter().any(|(t, _)| *t == op) {
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

/// The name of the seed input an exported program with random ops gets: an int64[2] of two
/// 31-bit words, the same input tpuc's `torch.compile` backend adds (`tpuc run --seed N`
/// fills it).
pub const SEED_INPUT: &str = "tpuc_rng_seed";

const GOLDEN: u64 = 0x9E37_79B9;
const OFFSET: u64 = 0x7F4A_7C15;

fn c32(cx: &mut Ctx, like: ValueId, c: u64) -> R<ValueId> {
    cx.full_like(Scalar::Int((c & 0xFFFF_FFFF) as i64), like)
}

fn shr(cx: &mut Ctx, v: ValueId, k: u32) -> R<ValueId> {
    let d = c32(cx, v, 1u64 << k)?;
    cx.bin(O::Div, v, d)
}

fn xor_shr(cx: &mut Ctx, v: ValueId, k: u32) -> R<ValueId> {
    let s = shr(cx, v, k)?;
    cx.bin(O::Xor, v, s)
}

fn mul_c(cx: &mut Ctx, v: ValueId, c: u64) -> R<ValueId> {
    let k = c32(cx, v, c)?;
    cx.bin(O::Mul, v, k)
}

/// The 32-bit finalizer: x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b;
/// x ^= x >> 16.
fn mix(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let x = xor_shr(cx, x, 16)?;
    let x = mul_c(cx, x, 0x7feb_352d)?;
    let x = xor_shr(cx, x, 15)?;
    let x = mul_c(cx, x, 0x846c_a68b)?;
    xor_shr(cx, x, 16)
}

/// Random bits per element of the result dtype: its mantissa and the implicit bit.
fn bits_for(dt: DType) -> R<u32> {
    Ok(match dt {
        DType::F32 => 24,
        DType::F64 => 32,
        DType::F16 => 11,
        DType::BF16 => 8,
        other => return err(format!("tpuc.uniform makes floats, not {other}")),
    })
}

fn uniform(cx: &mut Ctx) -> R<Vec<Val>> {
    let seed = cx.t("seed")?;
    let stream = cx.int("stream")?;
    let dims = cx.size_dims("size")?;
    let dt = cx.opt_dtype("dtype")?.unwrap_or(dtypes::DEFAULT_FLOAT);
    one(draw(cx, seed, stream, &dims, dt)?)
}

/// `dims` uniform numbers on `[0, 1)` of float type `dt` from stream `stream` of `seed`.
fn draw(cx: &mut Ctx, seed: ValueId, stream: i64, dims: &[Dim], dt: DType) -> R<ValueId> {
    let m = bits_for(dt)?;
    let n = dims.iter().try_fold(1u64, |acc, d| match d {
        Dim::Static(s) => Some(acc.saturating_mul(*s as u64)),
        Dim::Sym(_) => None,
    });
    if let Some(n) = n.filter(|&n| n > u32::MAX as u64) {
        return err(format!("a random draw of {n} elements exceeds the generator's 2^32 positions"));
    }
    if cx.ty(seed).dims.as_slice() != [Dim::Static(2)] {
        return err(format!("tpuc.uniform: the seed must be a tensor of 2 integers, got {}", cx.ty(seed)));
    }
    let seed = cx.convert(seed, DType::U32)?;
    let word = |cx: &mut Ctx, i: i64| -> R<ValueId> {
        let s = cx.b.slice(seed, &[i], &[i + 1], &[1])?;
        cx.reshape(s, Vec::new())
    };
    let (k0, k1) = (word(cx, 0)?, word(cx, 1)?);
    let stream_c = (stream as u64).wrapping_mul(GOLDEN).wrapping_add(OFFSET);
    let k0 = {
        let c = c32(cx, k0, stream_c)?;
        cx.bin(O::Add, k0, c)?
    };
    let a = mix(cx, k0)?;
    let b = {
        let x = cx.bin(O::Xor, k1, a)?;
        mix(cx, x)?
    };
    let idx = positions(cx, dims)?;
    let a = cx.broadcast_to(a, dims)?;
    let b = cx.broadcast_to(b, dims)?;
    let h = cx.bin(O::Xor, idx, a)?;
    let h = mix(cx, h)?;
    let h = cx.bin(O::Add, h, b)?;
    let h = mix(cx, h)?;
    let top = shr(cx, h, 32 - m)?;
    let u = cx.convert(top, dt)?;
    cx.bin_c(O::Mul, u, 2f64.powi(-(m as i32)))
}

// ---------------------------------------------------------------- ATen random ops
//
// The same arithmetic as `python/tpuc/random.py`'s rewrite of them onto `tpuc.uniform`, for
// programs that carry them as exported (`tpuc run --seed`). Each op of the program draws from
// its own stream, numbered in graph order; sizes and dtypes are those torch recorded for the
// result.

/// The program's seed input and the next stream number. A draw from a `torch.Generator` of
/// the program's own (a `generator` argument that is not None) is refused: tpuc's numbers come
/// from the seed input, so they could not follow that generator's state.
fn next_draw(cx: &mut Ctx) -> R<(ValueId, i64)> {
    if cx.opt("generator")?.is_some() {
        return err(format!(
            "{} draws from a torch.Generator object; tpuc draws random numbers from the program's seed input \
             (torch's default generator under torch.compile, `tpuc run --seed`), so only generator=None is supported",
            cx.node.target
        ));
    }
    let seed = match cx.st.env.get(SEED_INPUT) {
        Some(Val::Tensor(v)) => *v,
        _ => return err("internal: a random op in a program without a seed input"),
    };
    let stream = cx.st.streams.get();
    cx.st.streams.set(stream + 1);
    Ok((seed, stream))
}

fn result_type(cx: &Ctx) -> R<TensorType> {
    cx.out_type(0).ok_or_else(|| OpError(format!("{}: the result has no recorded tensor type", cx.node.target)))
}

/// Uniform numbers of the result's shape, in `dt`.
fn draw_like_result(cx: &mut Ctx, dt: DType) -> R<ValueId> {
    let ty = result_type(cx)?;
    let (seed, stream) = next_draw(cx)?;
    draw(cx, seed, stream, &ty.dims, dt)
}

/// Box-Muller on two streams, in f32 (f64 for f64 results), as the Python rewrite.
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

/// `x * keep / (1 - p)` with `keep = u >= p`: (result, keep mask).
/// The mask has `x`'s shape (for attention, the probabilities', not the node's result's).
pub(crate) fn drop_with(cx: &mut Ctx, x: ValueId, p: f64) -> R<(ValueId, ValueId)> {
    let (seed, stream) = next_draw(cx)?;
    let dims = cx.dims(x);
    let u = draw(cx, seed, stream, &dims, DType::F32)?;
    let p_t = cx.full_like(Scalar::Float(p), u)?;
    let keep = cx.cmp(Direction::Ge, u, p_t)?;
    let kf = cx.convert(keep, cx.dtype(x))?;
    let kept = cx.bin(O::Mul, x, kf)?;
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    Ok((cx.bin_c(O::Mul, kept, scale)?, keep))
}

/// `native_dropout(input, p, train)`: (result, keep mask). In eval mode or with `p = 0` the
/// identity and an all-true mask.
fn native_dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float_or("p", 0.5)?;
    if !cx.bool_or("train", true)? || p == 0.0 {
        let mask = if cx.used(1) { Val::Tensor(cx.full(Scalar::Bool(true), DType::Bool, &cx.dims(x))?) } else { Val::Absent };
        return Ok(vec![Val::Tensor(x), mask]);
    }
    let (y, keep) = drop_with(cx, x, p)?;
    Ok(vec![Val::Tensor(y), Val::Tensor(keep)])
}

/// `dropout(input, p, train)`; the identity in eval mode or with `p = 0`.
fn dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float_or("p", 0.5)?;
    if !cx.bool_or("train", true)? || p == 0.0 {
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
    let (lo, hi) = (cx.float_or("from", 0.0)?, cx.float_or("to", 1.0)?);
    let u = draw_like_result(cx, dt)?;
    let u = cx.bin_c(O::Mul, u, hi - lo)?;
    one(cx.bin_c(O::Add, u, lo)?)
}

/// `-log(1 - u) / lambda`.
fn exponential(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let lambd = cx.float_or("lambd", 1.0)?;
    let u = draw_like_result(cx, dt)?;
    let n = cx.un(O::Neg, u)?;
    let l = cx.un(O::Log1p, n)?;
    one(cx.bin_c(O::Mul, l, -1.0 / lambd)?)
}

/// `mean + std * z` with float mean and std.
fn normal(cx: &mut Ctx) -> R<Vec<Val>> {
    let dt = result_type(cx)?.dtype;
    let (mean, std) = (cx.float_or("mean", 0.0)?, cx.float_or("std", 1.0)?);
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
    let (_, i) = super::reduce::sort_v(cx, u, 0, false)?;
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

/// Every element's row-major position in a tensor of `dims`: `sum_d i_d * stride_d`, with the
/// strides of the real sizes. Under a bucket (symbolic dims padded) a real element keeps the
/// position it has in the unpadded tensor, so its random number does not depend on the bucket.
fn positions(cx: &mut Ctx, dims: &[Dim]) -> R<ValueId> {
    let mut k: Option<ValueId> = None;
    let mut stride = SymExpr::constant(1);
    for d in (0..dims.len()).rev() {
        let i = cx.iota(DType::U32, dims, d)?;
        let term = if stride.as_const() == Some(1) {
            i
        } else {
            let s = cx.sym_operand(&stride)?;
            let s = cx.mat(&s, DType::U32, dims)?;
            cx.bin(O::Mul, i, s)?
        };
        k = Some(match k {
            None => term,
            Some(acc) => cx.bin(O::Add, acc, term)?,
        });
        let size = match &dims[d] {
            Dim::Static(c) => SymExpr::constant(*c),
            Dim::Sym(e) => e.clone(),
        };
        stride = stride.mul(&size);
    }
    match k {
        Some(k) => Ok(k),
        None => cx.scalar(Scalar::Int(0), DType::U32),
    }
}
