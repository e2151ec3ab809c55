//! Embedding lookup, the feature and alpha dropouts (only the identity: in training they are
//! not lowered; `dropout` and `native_dropout` are random ops, see `ops::random`) and the NLL
//! loss forward.

use crate::ops::shape::take_along;
use super::*;
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
    let p = cx.float_or("p", 0.5)?;
    let train = cx.bool_or("train", false)?;
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
    let reduction = cx.int_or("reduction", 1)?;
    let ignore = cx.int_or("ignore_index", -100)?;
    let dt = cx.dtype(x);
    let r = cx.rank(x);
    if r == 0 || cx.rank(target) + 1 != r {
        return err(format!("nll_loss of {} with target {}", cx.ty(x), cx.ty(target)));
    }
    let cdim = if r == 1 { 0 } else { 1 };
    let (w, safe) = crate::ops::backward::nll_weights(cx, target, weight, ignore, dt)?;
    let idx = crate::ops::shape::unsqueeze_v(cx, safe, cdim as i64)?;
    // picked = x.gather(cdim, target.unsqueeze(cdim)).squeeze(cdim)
    let picked = crate::ops::index::gather_along(cx, x, idx, cdim)?;
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
