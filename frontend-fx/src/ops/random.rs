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
//! computes the same bits. Shifts are divisions by powers of two (unsigned), which XLA turns
//! back into shifts.

use super::*;
use Opcode as O;

pub const OPS: &[(&str, OpFn)] = &[("torch.ops.tpuc.uniform.default", uniform)];

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
    let m = bits_for(dt)?;
    let mut n: u64 = 1;
    let mut shape = Vec::with_capacity(dims.len());
    for d in &dims {
        match d {
            Dim::Static(s) => {
                n = n.saturating_mul(*s as u64);
                shape.push(*s);
            }
            Dim::Sym(_) => return err("random numbers over a symbolic size are drawn per shape (the graph compiles per shape)"),
        }
    }
    if n > u32::MAX as u64 {
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
    let flat = [Dim::Static(n as i64)];
    let idx = cx.iota(DType::U32, &flat, 0)?;
    let a = cx.broadcast_to(a, &flat)?;
    let b = cx.broadcast_to(b, &flat)?;
    let h = cx.bin(O::Xor, idx, a)?;
    let h = mix(cx, h)?;
    let h = cx.bin(O::Add, h, b)?;
    let h = mix(cx, h)?;
    let top = shr(cx, h, 32 - m)?;
    let u = cx.convert(top, dt)?;
    let u = cx.bin_c(O::Mul, u, 2f64.powi(-(m as i32)))?;
    one(cx.reshape(u, shape.into_iter().map(Dim::Static).collect())?)
}
