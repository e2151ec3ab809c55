//! Scaled dot-product attention: `scaled_dot_product_attention` and the CPU flash and
//! efficient forms, whose second output is the logsumexp of the scores. The argument handling
//! and the scores are shared with the flash-attention backward.

use super::norm::stat_dtype;
use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::{Direction, ReduceKind};

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
    /// `dropout_p`: the rate of dropout on the attention probabilities.
    pub dropout: f64,
}

/// Reads and normalizes SDPA arguments (default scale, GQA head repetition, mask dtype).
pub fn sdpa_args(cx: &mut Ctx, mask_name: &str, gqa_allowed: bool) -> R<SdpaArgs> {
    let q = cx.t("query")?;
    let mut k = cx.t("key")?;
    let mut v = cx.t("value")?;
    let mask = cx.opt_t(mask_name)?;
    let causal = cx.bool("is_causal")?;
    let dropout = cx.float("dropout_p")?;
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
            // Only `scaled_dot_product_attention` has `enable_gqa`; the fused kernels' ops never
            // see differing head counts.
            let gqa = cx.opt_bool("enable_gqa")?.unwrap_or(false);
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
    Ok(SdpaArgs { q, k, v, mask, causal, scale, dropout })
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
    mask_scores(cx, a, s)
}

/// `s * scale`, masked (-inf where a causal or boolean mask hides a key; plus an additive mask).
fn mask_scores(cx: &mut Ctx, a: &SdpaArgs, s: ValueId) -> R<ValueId> {
    let r = cx.rank(s);
    let mut s = cx.bin_c(O::Mul, s, a.scale)?;
    let shape = cx.dims(s);
    if a.causal {
        let (l, sl) = (shape[r - 2].clone(), shape[r - 1].clone());
        let rows = cx.iota(DType::I64, &[l.clone(), sl.clone()], 0)?;
        let cols = cx.iota(DType::I64, &[l, sl], 1)?;
        let keep = cx.cmp(Direction::Le, cols, rows)?;
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

pub(super) fn sdpa(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", false)?;
    if a.dropout != 0.0 {
        return one(attention_with_dropout(cx, &a)?);
    }
    one(attention(cx, &a)?)
}

/// Attention with dropout on the probabilities, written out as torch's math backend computes
/// it: `dropout(softmax(scores)) @ v`, fully masked rows giving zeros, the mask drawn from the
/// program's seed (see `ops::random`). `fuse` makes it one `tpuc.attention` composite again,
/// with the keep mask an input.
fn attention_with_dropout(cx: &mut Ctx, a: &SdpaArgs) -> R<ValueId> {
    let dt = cx.dtype(a.q);
    // q @ k^T with k transposed as torch's math backend does (the form `fuse` recognises).
    let r = cx.rank(a.q);
    let mut perm: Vec<i64> = (0..r as i64).collect();
    perm.swap(r - 2, r - 1);
    let kt = cx.transpose(a.k, &perm)?;
    let batch: Vec<i64> = (0..r as i64 - 2).collect();
    let s = cx.b.dot_general(a.q, kt, &batch, &batch, &[r as i64 - 1], &[r as i64 - 2])?;
    let s = mask_scores(cx, a, s)?;
    let p = softmax_v(cx, s, r as i64 - 1, O::Softmax, dt)?;
    let p = if a.causal || a.mask.is_some() {
        // A row whose keys are all masked is zeros, not NaN.
        let ninf = cx.full_like(Scalar::Float(f64::NEG_INFINITY), s)?;
        let masked = cx.cmp(Direction::Eq, s, ninf)?;
        let all = cx.reduce(masked, ReduceKind::And, &[r - 1], true)?;
        let all = cx.broadcast_to(all, &cx.dims(p))?;
        let zero = cx.full_like(Scalar::Float(0.0), p)?;
        cx.select(all, zero, p)?
    } else {
        p
    };
    let (p, _) = drop_with(cx, p, a.dropout)?;
    Ok(cx.b.dot_general(p, a.v, &batch, &batch, &[r as i64 - 1], &[r as i64 - 2])?)
}

/// The fused CPU and efficient kernels have no dropout here (torch's CPU path for attention
/// with dropout is the math one, which graphs carry as ops).
fn no_dropout(a: &SdpaArgs) -> R<()> {
    if a.dropout != 0.0 {
        return err("fused attention kernels with dropout_p > 0 are not supported (scaled_dot_product_attention is)");
    }
    Ok(())
}

/// `logsumexp` of the scaled, masked scores over the key dim, [..., L]. Half-precision
/// inputs are computed in f32 and the result is f32, as the CPU kernels accumulate.
pub fn attention_lse(cx: &mut Ctx, a: &SdpaArgs) -> R<ValueId> {
    let a = &widened(cx, a)?;
    let s = attention_scores(cx, a)?;
    let r = cx.rank(s);
    logsumexp_v(cx, s, &[r - 1], false)
}

/// `a` with q, k, v and a float mask in the computation dtype of q (f32 for 16-bit floats), as
/// the CPU kernels compute.
fn widened(cx: &mut Ctx, a: &SdpaArgs) -> R<SdpaArgs> {
    let dt = stat_dtype(cx.dtype(a.q));
    let up = |cx: &mut Ctx, v: ValueId| if cx.dtype(v) == DType::Bool { Ok(v) } else { cx.convert(v, dt) };
    Ok(SdpaArgs { q: up(cx, a.q)?, k: up(cx, a.k)?, v: up(cx, a.v)?, mask: a.mask.map(|m| up(cx, m)).transpose()?, ..*a })
}

pub(super) fn sdpa_flash_cpu(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", true)?;
    no_dropout(&a)?;
    // The CPU flash kernel computes 16-bit inputs in f32 (scores, softmax and the weighted
    // sum) and rounds the output once: so does this.
    let wide = widened(cx, &a)?;
    let out = attention(cx, &wide)?;
    let out = cx.convert(out, cx.dtype(a.q))?;
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

pub(super) fn sdpa_efficient(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_bias", true)?;
    no_dropout(&a)?;
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

/// The CPU flash-attention backward given the forward's logsumexp. When the "logsumexp" has
/// the scores' rank (the math-decomposed forward passes the attention weights instead), the
/// kernel reads its element [..., 0] per row; that is reproduced.
pub fn sdpa_flash_cpu_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let a = sdpa_args(cx, "attn_mask", false)?;
    let dout = cx.t("grad_out")?;
    let out = cx.t("out")?;
    let mut lse = cx.t("logsumexp")?;
    let r = cx.rank(a.q);
    let dt = cx.dtype(a.q);
    if cx.rank(lse) == r {
        let d = cx.dims(lse);
        let first = slice_any(cx, lse, r - 1, Some(SymExpr::constant(0)), Some(SymExpr::constant(1)), 1)?;
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
