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
];

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
    let idx = positions(cx, &dims)?;
    let a = cx.broadcast_to(a, &dims)?;
    let b = cx.broadcast_to(b, &dims)?;
    let h = cx.bin(O::Xor, idx, a)?;
    let h = mix(cx, h)?;
    let h = cx.bin(O::Add, h, b)?;
    let h = mix(cx, h)?;
    let top = shr(cx, h, 32 - m)?;
    let u = cx.convert(top, dt)?;
    one(cx.bin_c(O::Mul, u, 2f64.powi(-(m as i32)))?)
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
