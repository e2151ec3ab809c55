//! `grid_sampler_3d`: samples a volume [N, C, D, H, W] at the points of a grid
//! [N, Do, Ho, Wo, 3] (x, y, z in [-1, 1]), trilinearly or at the nearest voxel, with zeros,
//! border or reflection padding. (torch decomposes the 2-D op itself, see
//! python/tpuc/decompositions.py; it has no decomposition for 3-D.)
//!
//! It follows ATen's CPU kernel (`grid_sampler_3d_cpu_impl`): each coordinate is unnormalized
//! (`align_corners`: ((c + 1) / 2)(size - 1), else ((c + 1) size - 1) / 2), clipped to the
//! border or reflected about the edges, and then, when not finite or outside the `int` range,
//! set to -100 (outside, so it reads nothing). Trilinear weights are products of the distances
//! to the opposite corner, x by y by z, and the eight corners inside the volume are summed in
//! the kernel's order (top/bottom in z, north/south in y, west/east in x); nearest rounds half
//! to even. Each corner is one gather over the flattened volume with the batch and channel dims
//! as the gather's batch dims. 16-bit floats compute in f32 and round once.

use crate::ops::build::*;
use crate::dtypes;
use gather_along;
use Opcode as O;
use tpuc_ir::Direction;

/// `int` bounds of `safe_downgrade_to_int_range`, as the compute dtype compares them.
const INT_MAX_LESS_ONE: f64 = (i32::MAX - 1) as f64;
const INT_MIN: f64 = i32::MIN as f64;

#[derive(Copy, Clone, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// `min(size - 1, max(c, 0))` with `std::min`/`std::max`'s NaN rule (NaN gives size - 1).
fn clip(cx: &mut Ctx, c: ValueId, size: i64) -> R<ValueId> {
    let zero = cx.full_like(Scalar::Float(0.0), c)?;
    let top = cx.full_like(Scalar::Float((size - 1) as f64), c)?;
    let lo = cx.bin(O::Max, c, zero)?;
    let clipped = cx.bin(O::Min, lo, top)?;
    let nan = cx.cmp(Direction::Ne, c, c)?;
    cx.select(nan, top, clipped)
}

/// `reflect_coordinates(c, twice_low, twice_high)`: c reflected about min and min + span
/// until it lies between them.
fn reflect(cx: &mut Ctx, c: ValueId, twice_low: i64, twice_high: i64) -> R<ValueId> {
    if twice_low == twice_high {
        return cx.full_like(Scalar::Float(0.0), c);
    }
    let min = twice_low as f64 / 2.0;
    let span = (twice_high - twice_low) as f64 / 2.0;
    let shifted = cx.bin_c(O::Sub, c, min)?;
    let d = cx.un(O::Abs, shifted)?;
    let spanv = cx.full_like(Scalar::Float(span), d)?;
    let extra = cx.bin(O::Rem, d, spanv)?;
    let q = cx.bin(O::Div, d, spanv)?;
    let flips = cx.un(O::Floor, q)?;
    let parity = cx.bin_c(O::Rem, flips, 2.0)?;
    let zero = cx.full_like(Scalar::Float(0.0), parity)?;
    let even = cx.cmp(Direction::Eq, parity, zero)?;
    let fwd = cx.bin_c(O::Add, extra, min)?;
    let back = cx.bin(O::Sub, spanv, extra)?;
    let back = cx.bin_c(O::Add, back, min)?;
    cx.select(even, fwd, back)
}

/// `grid_sampler_compute_source_index`: the voxel coordinate of normalized `c` along a dim
/// of `size`.
fn source_index(cx: &mut Ctx, c: ValueId, size: i64, padding: Padding, align_corners: bool) -> R<ValueId> {
    let c1 = cx.bin_c(O::Add, c, 1.0)?;
    let mut x = if align_corners {
        let h = cx.bin_c(O::Div, c1, 2.0)?;
        cx.bin_c(O::Mul, h, (size - 1) as f64)?
    } else {
        let s = cx.bin_c(O::Mul, c1, size as f64)?;
        let s = cx.bin_c(O::Sub, s, 1.0)?;
        cx.bin_c(O::Div, s, 2.0)?
    };
    match padding {
        Padding::Zeros => {}
        Padding::Border => x = clip(cx, x, size)?,
        Padding::Reflection => {
            x = if align_corners { reflect(cx, x, 0, 2 * (size - 1))? } else { reflect(cx, x, -1, 2 * size - 1)? };
            x = clip(cx, x, size)?;
        }
    }
    // safe_downgrade_to_int_range
    let finite = cx.un(O::IsFinite, x)?;
    let hi = cx.full_like(Scalar::Float(INT_MAX_LESS_ONE), x)?;
    let lo = cx.full_like(Scalar::Float(INT_MIN), x)?;
    let le = cx.cmp(Direction::Le, x, hi)?;
    let ge = cx.cmp(Direction::Ge, x, lo)?;
    let ok = cx.bin(O::And, finite, le)?;
    let ok = cx.bin(O::And, ok, ge)?;
    let off = cx.full_like(Scalar::Float(-100.0), x)?;
    cx.select(ok, x, off)
}

struct Volume {
    /// The input as [N, C, D·H·W].
    flat: ValueId,
    /// (D, H, W).
    size: [i64; 3],
    n: i64,
    c: i64,
    p: i64,
}

impl Volume {
    /// The values [N, C, P] at the integer-valued coordinates (z, y, x) [N, P], 0 outside the
    /// volume.
    fn read(&self, cx: &mut Ctx, at: [ValueId; 3]) -> R<ValueId> {
        let mut inside: Option<ValueId> = None;
        let mut lin: Option<ValueId> = None;
        for (k, v) in at.into_iter().enumerate() {
            let size = self.size[k];
            let zero = cx.full_like(Scalar::Float(0.0), v)?;
            let end = cx.full_like(Scalar::Float(size as f64), v)?;
            let ge = cx.cmp(Direction::Ge, v, zero)?;
            let lt = cx.cmp(Direction::Lt, v, end)?;
            let ok = cx.bin(O::And, ge, lt)?;
            inside = Some(match inside {
                Some(i) => cx.bin(O::And, i, ok)?,
                None => ok,
            });
            let top = cx.full_like(Scalar::Float((size - 1) as f64), v)?;
            let c = cx.bin(O::Max, v, zero)?;
            let c = cx.bin(O::Min, c, top)?;
            let c = cx.convert(c, DType::I64)?;
            lin = Some(match lin {
                Some(l) => {
                    let s = cx.full_like(Scalar::Int(size), l)?;
                    let l = cx.bin(O::Mul, l, s)?;
                    cx.bin(O::Add, l, c)?
                }
                None => c,
            });
        }
        let (Some(inside), Some(lin)) = (inside, lin) else { return err("internal: no coordinates") };
        let wide = [Dim::Static(self.n), Dim::Static(self.c), Dim::Static(self.p)];
        let col = vec![Dim::Static(self.n), Dim::Static(1), Dim::Static(self.p)];
        let lin = cx.reshape(lin, col.clone())?;
        let lin = cx.broadcast_to(lin, &wide)?;
        let inside = cx.reshape(inside, col)?;
        let inside = cx.broadcast_to(inside, &wide)?;
        let v = gather_along(cx, self.flat, lin, 2)?;
        let zero = cx.full_like(Scalar::Float(0.0), v)?;
        cx.select(inside, v, zero)
    }

    /// [N, P] broadcast to [N, C, P].
    fn spread(&self, cx: &mut Ctx, w: ValueId) -> R<ValueId> {
        let w = cx.reshape(w, vec![Dim::Static(self.n), Dim::Static(1), Dim::Static(self.p)])?;
        cx.broadcast_to(w, &[Dim::Static(self.n), Dim::Static(self.c), Dim::Static(self.p)])
    }
}

pub(super) fn grid_sampler_3d(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("input")?;
    let grid = cx.t("grid")?;
    let mode = cx.int("interpolation_mode")?;
    let padding = match cx.int("padding_mode")? {
        0 => Padding::Zeros,
        1 => Padding::Border,
        2 => Padding::Reflection,
        p => return err(format!("unknown padding_mode {p}")),
    };
    let align_corners = cx.bool("align_corners")?;
    let dt = cx.dtype(x);
    if !dt.is_float() || cx.dtype(grid) != dt {
        return err(format!("grid_sampler_3d needs float input and grid of one dtype, got {} and {}", cx.ty(x), cx.ty(grid)));
    }
    let xd = cx.static_dims(x, "grid_sampler_3d input")?;
    let gd = cx.static_dims(grid, "grid_sampler_3d grid")?;
    if xd.len() != 5 || gd.len() != 5 || gd[4] != 3 || gd[0] != xd[0] {
        return err(format!("grid_sampler_3d needs input [N, C, D, H, W] and grid [N, D, H, W, 3], got {} and {}", cx.ty(x), cx.ty(grid)));
    }
    if mode != 0 && mode != 1 {
        return err(format!("grid_sampler_3d supports bilinear (0) and nearest (1) interpolation, got mode {mode}"));
    }
    let (n, c, size) = (xd[0], xd[1], [xd[2], xd[3], xd[4]]);
    let p = gd[1] * gd[2] * gd[3];
    let cd = dtypes::compute_dtype(dt);
    let xc = cx.convert(x, cd)?;
    let flat = cx.reshape(xc, vec![Dim::Static(n), Dim::Static(c), Dim::Static(size.iter().product())])?;
    let vol = Volume { flat, size, n, c, p };
    let g = cx.convert(grid, cd)?;
    let g = cx.reshape(g, vec![Dim::Static(n), Dim::Static(p), Dim::Static(3)])?;
    // Grid component k is x, y, z for k = 0, 1, 2; volume dims are (D, H, W).
    let mut at = Vec::with_capacity(3);
    for k in [2usize, 1, 0] {
        let comp = slice_static(cx, g, 2, k as i64, k as i64 + 1, 1)?;
        let comp = cx.reshape(comp, vec![Dim::Static(n), Dim::Static(p)])?;
        at.push(source_index(cx, comp, size[2 - k], padding, align_corners)?);
    }
    let out = if mode == 1 {
        let mut near = [at[0], at[1], at[2]];
        for v in near.iter_mut() {
            *v = cx.un(O::RoundEven, *v)?;
        }
        vol.read(cx, near)?
    } else {
        // Lower corner and the weights of the lower (1 - frac) and upper (frac) neighbours.
        let mut lower = [at[0]; 3];
        let mut w = [[at[0]; 2]; 3];
        for k in 0..3 {
            let f = cx.un(O::Floor, at[k])?;
            let up = cx.bin_c(O::Add, f, 1.0)?;
            lower[k] = f;
            w[k] = [cx.bin(O::Sub, up, at[k])?, cx.bin(O::Sub, at[k], f)?];
        }
        // The kernel starts from 0 and adds the corners inside the volume.
        let mut acc = cx.full(Scalar::Float(0.0), cd, &[Dim::Static(n), Dim::Static(c), Dim::Static(p)])?;
        for dz in 0..2 {
            for dy in 0..2 {
                for dx in 0..2 {
                    let mut pos = lower;
                    for (k, d) in [dz, dy, dx].into_iter().enumerate() {
                        if d == 1 {
                            pos[k] = cx.bin_c(O::Add, lower[k], 1.0)?;
                        }
                    }
                    // x weight times y weight times z weight, as the kernel multiplies.
                    let wxy = cx.bin(O::Mul, w[2][dx], w[1][dy])?;
                    let wt = cx.bin(O::Mul, wxy, w[0][dz])?;
                    let wt = vol.spread(cx, wt)?;
                    let v = vol.read(cx, pos)?;
                    let term = cx.bin(O::Mul, v, wt)?;
                    acc = cx.bin(O::Add, acc, term)?;
                }
            }
        }
        acc
    };
    let out = cx.reshape(out, vec![Dim::Static(n), Dim::Static(c), Dim::Static(gd[1]), Dim::Static(gd[2]), Dim::Static(gd[3])])?;
    one(cx.convert(out, dt)?)
}
