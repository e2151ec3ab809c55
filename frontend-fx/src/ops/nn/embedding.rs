//! Embedding lookup, the feature and alpha dropouts (only the identity: in training they are
//! not lowered; `dropout` and `native_dropout` are random ops, see `ops::random`) and the NLL
//! loss forward.

use take_along;
use crate::ops::build::*;
use tpuc_ir::ScatterKind;
use Opcode as O;
use tpuc_ir::ReduceKind;

pub(super) fn embedding(cx: &mut Ctx) -> R<Vec<Val>> {
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

/// `feature_dropout`, `alpha_dropout`, `feature_alpha_dropout` in eval mode (the identity).
pub(super) fn dropout(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let p = cx.float("p")?;
    let train = cx.bool("train")?;
    if train && p != 0.0 {
        return err(format!("{} in training mode is not supported (nn.Dropout's dropout is)", cx.node.target));
    }
    one(x)
}

/// NLL loss over the class dim (1, or 0 for an unbatched input): (loss, total_weight).
pub(super) fn nll_loss_forward(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let target = cx.t("target")?;
    let weight = cx.opt_t("weight")?;
    let reduction = cx.int("reduction")?;
    let ignore = cx.int("ignore_index")?;
    let dt = cx.dtype(x);
    let r = cx.rank(x);
    if r == 0 || cx.rank(target) + 1 != r {
        return err(format!("nll_loss of {} with target {}", cx.ty(x), cx.ty(target)));
    }
    let cdim = if r == 1 { 0 } else { 1 };
    let (w, safe) = nll_weights(cx, target, weight, ignore, dt)?;
    let idx = unsqueeze_v(cx, safe, cdim as i64)?;
    // picked = x.gather(cdim, target.unsqueeze(cdim)).squeeze(cdim)
    let picked = gather_along(cx, x, idx, cdim)?;
    let picked = cx.reshape(picked, cx.dims(w))?;
    let l = cx.bin(O::Mul, picked, w)?;
    let l = cx.un(O::Neg, l)?;
    let all_dims: Vec<usize> = (0..cx.rank(w)).collect();
    let tw = cx.reduce(w, ReduceKind::Sum, &all_dims, false)?;
    let out = match reduction {
        0 => l,
        1 => {
            let s = cx.reduce(l, ReduceKind::Sum, &all_dims, false)?;
            cx.bin(O::Div, s, tw)?
        }
        2 => cx.reduce(l, ReduceKind::Sum, &all_dims, false)?,
        other => return err(format!("unknown reduction {other}")),
    };
    let tw = if reduction == 0 { cx.scalar(Scalar::Int(0), dt)? } else { tw };
    let tw = if cx.used(1) { Val::Tensor(tw) } else { Val::Absent };
    Ok(vec![Val::Tensor(out), tw])
}

pub fn embedding_dense_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let idx = cx.t("indices")?;
    let nw = cx.int("num_weights")?;
    let pad = cx.int("padding_idx")?;
    if cx.bool("scale_grad_by_freq")? {
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
    one(scatter_rows(cx, z, idx64, g, ScatterKind::Add)?)
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
            take_along(cx, w, 0, safe)?
        }
        None => cx.full(Scalar::Int(1), dt, &cx.dims(t))?,
    };
    let zw = cx.full_like(Scalar::Int(0), w)?;
    Ok((cx.select(keep, w, zw)?, safe))
}

/// One-hot of `target` along dim 1 of `shape` (class dim), as bool.
pub fn one_hot(cx: &mut Ctx, target: ValueId, shape: &[Dim]) -> R<ValueId> {
    let r = shape.len();
    let cdim = if r == 1 { 0 } else { 1 };
    let io = cx.iota(DType::I64, shape, cdim)?;
    let bd: Vec<i64> = (0..r as i64).filter(|&d| d != cdim as i64).collect();
    let tb = cx.b.broadcast_in_dim(target, &bd, shape.to_vec())?;
    cx.cmp(Direction::Eq, io, tb)
}

pub fn nll_loss_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let x = cx.t("self")?;
    let target = cx.t("target")?;
    let weight = cx.opt_t("weight")?;
    let reduction = cx.int("reduction")?;
    let ignore = cx.int("ignore_index")?;
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
