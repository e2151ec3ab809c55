//! Repetition and reordering: repeat, tile, repeat_interleave, flip and roll.

use crate::ops::build::*;
use Opcode as O;

/// Tiles `x` by `reps` (len >= rank; leading dims added).
pub fn repeat_v(cx: &mut Ctx, x: ValueId, reps: &[i64]) -> R<ValueId> {
    let dims = cx.dims(x);
    if reps.len() < dims.len() {
        return err("repeat: fewer repeats than dims");
    }
    let off = reps.len() - dims.len();
    let mut shape = Vec::new();
    let mut bdims = Vec::new();
    let mut final_dims = Vec::new();
    if reps.len() > 64 {
        return err("repeat with too many dims");
    }
    for (i, &r) in reps.iter().enumerate() {
        if !(0..=MAX_SIZE).contains(&r) {
            return err(format!("repeat count {r} out of range"));
        }
        let d = if i >= off { dims[i - off].clone() } else { Dim::Static(1) };
        shape.push(Dim::Static(r));
        if i >= off {
            bdims.push(shape.len() as i64);
        }
        shape.push(d.clone());
        final_dims.push(Dim::Static(r).mul(&d));
    }
    let b = cx.b.broadcast_in_dim(x, &bdims, shape)?;
    cx.reshape(b, final_dims)
}

pub(super) fn repeat(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let reps = cx.ints("repeats")?;
    one(repeat_v(cx, x, &reps)?)
}

pub(super) fn tile(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let mut reps = cx.ints("dims")?;
    let r = cx.rank(x);
    while reps.len() < r {
        reps.insert(0, 1);
    }
    one(repeat_v(cx, x, &reps)?)
}

pub(super) fn flip(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let r = cx.rank(x);
    let dims: Vec<i64> = cx.ints("dims")?.iter().map(|&d| norm_dim(d, r).map(|d| d as i64)).collect::<R<_>>()?;
    if dims.is_empty() {
        return one(x);
    }
    one(cx.b.build1(O::Reverse, &[x], Attrs::new().with("dimensions", Attr::Ints(dims)), None)?)
}

fn roll_dim(cx: &mut Ctx, x: ValueId, dim: usize, shift: i64) -> R<ValueId> {
    let n = static_dim_size(cx, x, dim, "roll")?;
    if n == 0 {
        return Ok(x);
    }
    let s = shift.rem_euclid(n);
    if s == 0 {
        return Ok(x);
    }
    let a = slice_static(cx, x, dim, n - s, n, 1)?;
    let b = slice_static(cx, x, dim, 0, n - s, 1)?;
    Ok(cx.b.concatenate(&[a, b], dim as i64)?)
}

pub(super) fn roll(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let shifts = cx.ints("shifts")?;
    let dims = cx.ints("dims")?;
    if dims.is_empty() {
        let t = cx.ty(x);
        let n = t.num_elements().ok_or("roll of a symbolic tensor")?;
        let flat = cx.reshape(x, vec![Dim::Static(n)])?;
        let s = *shifts.first().ok_or("roll needs a shift")?;
        let r = roll_dim(cx, flat, 0, s)?;
        return one(cx.reshape(r, t.dims.to_vec())?);
    }
    if dims.len() != shifts.len() {
        return err("roll: shifts and dims differ in length");
    }
    let r = cx.rank(x);
    let mut v = x;
    for (&s, &d) in shifts.iter().zip(&dims) {
        v = roll_dim(cx, v, norm_dim(d, r)?, s)?;
    }
    one(v)
}

/// `repeat_interleave` with an int count: each element repeated consecutively along `dim`
/// (flattened when dim is None).
pub(super) fn repeat_interleave(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let reps = cx.int("repeats")?;
    if !(0..=MAX_SIZE).contains(&reps) {
        return err(format!("repeat count {reps} out of range"));
    }
    let (x, dim) = match cx.opt_int("dim")? {
        Some(_) if cx.rank(x) == 0 => return err("repeat_interleave along a dim of a rank-0 tensor"),
        Some(d) => (x, norm_dim(d, cx.rank(x))?),
        None => {
            let n = cx.ty(x).num_elements_expr();
            (cx.reshape(x, vec![Dim::from_expr(n)])?, 0)
        }
    };
    let d = cx.dims(x);
    let mut shape: Vec<Dim> = d[..=dim].to_vec();
    shape.push(Dim::Static(reps));
    shape.extend_from_slice(&d[dim + 1..]);
    let bdims: Vec<i64> = (0..d.len() as i64).map(|i| if i <= dim as i64 { i } else { i + 1 }).collect();
    let b = cx.b.broadcast_in_dim(x, &bdims, shape)?;
    let mut out = d.clone();
    out[dim] = d[dim].mul(&Dim::Static(reps));
    one(cx.reshape(b, out)?)
}
