//! Padding: constant padding and the reflect, replicate and circular modes.

use crate::ops::build::*;
use Opcode as O;

/// Torch pad lists go from the last dim backwards: [lo_last, hi_last, lo_prev, hi_prev, ...].
fn pad_pairs(pad: &[i64], rank: usize) -> R<Vec<(usize, i64, i64)>> {
    if pad.len() & 1 == 1 || pad.len() / 2 > rank {
        return err(format!("padding {pad:?} does not fit a rank-{rank} tensor"));
    }
    let mut out = Vec::new();
    for (k, p) in pad.chunks(2).enumerate() {
        let (lo, hi) = (check_size(p[0], "padding")?, check_size(p[1], "padding")?);
        out.push((rank - 1 - k, lo, hi));
    }
    Ok(out)
}

pub fn constant_pad(cx: &mut Ctx, x: ValueId, pad: &[i64], value: Num) -> R<ValueId> {
    let r = cx.rank(x);
    let mut lo = vec![0i64; r];
    let mut hi = vec![0i64; r];
    for (d, l, h) in pad_pairs(pad, r)? {
        lo[d] = l;
        hi[d] = h;
    }
    if lo.iter().chain(&hi).all(|&p| p == 0) {
        return Ok(x);
    }
    let dt = cx.dtype(x);
    let v = cx.scalar(value.scalar(), dt)?;
    Ok(cx.b.pad(x, v, &lo, &hi, &vec![0; r])?)
}

pub(super) fn constant_pad_nd(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let pad = cx.ints("pad")?;
    let value = cx.opt_num("value")?.unwrap_or(Num::Int(0));
    one(constant_pad(cx, x, &pad, value)?)
}

fn mode_pad(cx: &mut Ctx, x: ValueId, pad: &[i64], mode: &str) -> R<ValueId> {
    let r = cx.rank(x);
    let mut v = x;
    for (d, lo, hi) in pad_pairs(pad, r)? {
        if lo < 0 || hi < 0 {
            return err(format!("{mode} padding must be non-negative"));
        }
        if lo == 0 && hi == 0 {
            continue;
        }
        let n = static_dim_size(cx, v, d, "padding")?;
        let mut parts = Vec::new();
        let rev = |cx: &mut Ctx, t: ValueId| -> R<ValueId> {
            Ok(cx.b.build1(O::Reverse, &[t], Attrs::new().with("dimensions", Attr::Ints(vec![d as i64])), None)?)
        };
        match mode {
            "reflect" => {
                if lo >= n || hi >= n {
                    return err(format!("reflect padding {lo},{hi} needs a dim larger than the padding, got {n}"));
                }
                if lo > 0 {
                    let s = slice_static(cx, v, d, 1, lo + 1, 1)?;
                    parts.push(rev(cx, s)?);
                }
                parts.push(v);
                if hi > 0 {
                    let s = slice_static(cx, v, d, n - 1 - hi, n - 1, 1)?;
                    parts.push(rev(cx, s)?);
                }
            }
            "replicate" => {
                if n == 0 {
                    return err("replicate padding of an empty dim");
                }
                let edge = |cx: &mut Ctx, at: i64, count: i64| -> R<ValueId> {
                    let s = slice_static(cx, v, d, at, at + 1, 1)?;
                    let mut shape = cx.dims(s);
                    shape[d] = Dim::Static(count);
                    cx.broadcast_to(s, &shape)
                };
                if lo > 0 {
                    parts.push(edge(cx, 0, lo)?);
                }
                parts.push(v);
                if hi > 0 {
                    parts.push(edge(cx, n - 1, hi)?);
                }
            }
            "circular" => {
                if lo > n || hi > n {
                    return err("circular padding larger than the dim");
                }
                if lo > 0 {
                    parts.push(slice_static(cx, v, d, n - lo, n, 1)?);
                }
                parts.push(v);
                if hi > 0 {
                    parts.push(slice_static(cx, v, d, 0, hi, 1)?);
                }
            }
            other => return err(format!("unknown padding mode `{other}`")),
        }
        v = cx.b.concatenate(&parts, d as i64)?;
    }
    Ok(v)
}

pub(super) fn pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("pad")?;
    let mode = cx.str("mode")?;
    if mode == "constant" {
        let value = cx.opt_num("value")?.unwrap_or(Num::Int(0));
        return one(constant_pad(cx, x, &p, value)?);
    }
    one(mode_pad(cx, x, &p, &mode)?)
}

pub(super) fn reflection_pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("padding")?;
    one(mode_pad(cx, x, &p, "reflect")?)
}

pub(super) fn replication_pad(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let p = cx.ints("padding")?;
    one(mode_pad(cx, x, &p, "replicate")?)
}
