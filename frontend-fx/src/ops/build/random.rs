//! The counter-based generator behind every random op: `draw`, the dropout builder, and the
//! program's seed input.
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
//! (24 bits for f32, 11 for f16, 8 for bf16, 32 for f64). `tests/python/rng_reference.py`
//! computes the same bits in eager PyTorch. Positions follow the real sizes, so a bucketed program (symbolic
//! dims padded) draws the same numbers for the real elements as the unpadded one. Shifts are divisions by powers of two (unsigned), which XLA turns
//! back into shifts.

use super::ctx::*;
use tpuc_ir::Opcode as O;

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
        other => return err(format!("random draws are floats, not {other}")),
    })
}

/// `dims` uniform numbers on `[0, 1)` of float type `dt` from stream `stream` of `seed`.
pub fn draw(cx: &mut Ctx, seed: ValueId, stream: i64, dims: &[Dim], dt: DType) -> R<ValueId> {
    let m = bits_for(dt)?;
    let n = dims.iter().try_fold(1u64, |acc, d| match d {
        Dim::Static(s) => Some(acc.saturating_mul(*s as u64)),
        Dim::Sym(_) => None,
    });
    if let Some(n) = n.filter(|&n| n > u32::MAX as u64) {
        return err(format!("a random draw of {n} elements exceeds the generator's 2^32 positions"));
    }
    if cx.ty(seed).dims.as_slice() != [Dim::Static(2)] {
        return err(format!("the seed input must be a tensor of 2 integers, got {}", cx.ty(seed)));
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

/// The program's seed input and the next stream number. A draw from a `torch.Generator` of
/// the program's own (a `generator` argument that is not None) is refused: tpuc's numbers come
/// from the seed input, so they could not follow that generator's state.
pub fn next_draw(cx: &mut Ctx) -> R<(ValueId, i64)> {
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

/// `x * keep / (1 - p)` with `keep = u >= p`: (result, keep mask).
/// The mask has `x`'s shape (for attention, the probabilities', not the node's result's).
pub fn drop_with(cx: &mut Ctx, x: ValueId, p: f64) -> R<(ValueId, ValueId)> {
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
