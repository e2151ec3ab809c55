//! `grid_sampler_2d` and `grid_sampler_3d` and their backwards: sample an image [N, C, H, W]
//! or a volume [N, C, D, H, W] at the points of a grid [N, Ho, Wo, 2] or [N, Do, Ho, Wo, 3]
//! (x, y[, z] in [-1, 1]), bilinearly (trilinearly) or at the nearest pixel, with zeros, border
//! or reflection padding. Bicubic interpolation (2-D mode 2) is refused here; under
//! `torch.compile` torch's own decomposition of the 2-D forward handles it (see
//! python/tpuc/decompositions.py), and its backward is refused by name.
//!
//! It follows ATen's CPU kernels (`grid_sampler_3d_cpu_impl` and its backward): each coordinate
//! is unnormalized (`align_corners`: ((c + 1) / 2)(size - 1), else ((c + 1) size - 1) / 2),
//! clipped to the border or reflected about the edges, and then, when not finite or outside the
//! `int` range, set to -100 (outside, so it reads nothing). Linear weights are products of the
//! distances to the opposite corner, x by y (by z), and the corners inside the image are summed
//! in the kernel's order (top/bottom in z, north/south in y, west/east in x); nearest rounds
//! half to even. Each corner is one gather over the flattened image with the batch and channel
//! dims as the gather's batch dims. 16-bit floats compute in f32 and round once.
//!
//! The backward scatters each corner's weighted output gradient back into the flattened image
//! (an add-scatter, masked outside it) and, for linear interpolation, differentiates the weights:
//! d out / d x_k = Σ corners v · (±1 along k) · Π_(j≠k) w_j, summed over channels and scaled by
//! d x_k / d grid_k: the unnormalization's scale, times 0 where the border clips the coordinate
//! and ±1 where reflection folds it (`grid_sampler_compute_source_index_set_grad`). Nearest
//! interpolation has a zero grid gradient.

use crate::ops::build::*;
use crate::dtypes;
use gather_along;
use Opcode as O;
use tpuc_ir::{Direction, ScatterKind};

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
/// until it lies between them, with d(reflected)/dc (±1, or 0 when the span is empty).
fn reflect(cx: &mut Ctx, c: ValueId, twice_low: i64, twice_high: i64) -> R<(ValueId, ValueId)> {
    if twice_low == twice_high {
        let zero = cx.full_like(Scalar::Float(0.0), c)?;
        return Ok((zero, zero));
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
    let value = cx.select(even, fwd, back)?;
    // The slope: -1 below min (the distance folds it), and once more negated on odd flips.
    let zero = cx.full_like(Scalar::Float(0.0), shifted)?;
    let below = cx.cmp(Direction::Lt, shifted, zero)?;
    let one = cx.full_like(Scalar::Float(1.0), shifted)?;
    let minus = cx.full_like(Scalar::Float(-1.0), shifted)?;
    let s = cx.select(below, minus, one)?;
    let ns = cx.un(O::Neg, s)?;
    let slope = cx.select(even, s, ns)?;
    Ok((value, slope))
}

/// d clip(c) / dc as `clip_coordinates_set_grad` has it: 1 strictly inside (0, size - 1), else 0.
fn clip_slope(cx: &mut Ctx, c: ValueId, size: i64) -> R<ValueId> {
    let zero = cx.full_like(Scalar::Float(0.0), c)?;
    let top = cx.full_like(Scalar::Float((size - 1) as f64), c)?;
    let gt = cx.cmp(Direction::Gt, c, zero)?;
    let lt = cx.cmp(Direction::Lt, c, top)?;
    let inside = cx.bin(O::And, gt, lt)?;
    let one = cx.full_like(Scalar::Float(1.0), c)?;
    cx.select(inside, one, zero)
}

/// `grid_sampler_compute_source_index`: the pixel coordinate of normalized `c` along a dim of
/// `size`, with its derivative d coordinate / d c when `slope` (the backward's `_set_grad`).
fn source_index(cx: &mut Ctx, c: ValueId, size: i64, padding: Padding, align_corners: bool, slope: bool)
    -> R<(ValueId, Option<ValueId>)> {
    let c1 = cx.bin_c(O::Add, c, 1.0)?;
    let (mut x, scale) = if align_corners {
        let h = cx.bin_c(O::Div, c1, 2.0)?;
        (cx.bin_c(O::Mul, h, (size - 1) as f64)?, (size - 1) as f64 / 2.0)
    } else {
        let s = cx.bin_c(O::Mul, c1, size as f64)?;
        let s = cx.bin_c(O::Sub, s, 1.0)?;
        (cx.bin_c(O::Div, s, 2.0)?, size as f64 / 2.0)
    };
    let mut d = if slope { Some(cx.full_like(Scalar::Float(scale), x)?) } else { None };
    match padding {
        Padding::Zeros => {}
        Padding::Border => {
            if let Some(dv) = d {
                let k = clip_slope(cx, x, size)?;
                d = Some(cx.bin(O::Mul, dv, k)?);
            }
            x = clip(cx, x, size)?;
        }
        Padding::Reflection => {
            let (r, k) = if align_corners { reflect(cx, x, 0, 2 * (size - 1))? } else { reflect(cx, x, -1, 2 * size - 1)? };
            if let Some(dv) = d {
                let kc = clip_slope(cx, r, size)?;
                let dv = cx.bin(O::Mul, dv, k)?;
                d = Some(cx.bin(O::Mul, dv, kc)?);
            }
            x = clip(cx, r, size)?;
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
    Ok((cx.select(ok, x, off)?, d))
}

/// The image being sampled, flattened, and the sample points.
struct Image {
    /// The input as [N, C, L], L the product of the spatial sizes.
    flat: ValueId,
    /// The spatial sizes, outermost first ((H, W) or (D, H, W)).
    size: Vec<i64>,
    n: i64,
    c: i64,
    /// Sample points per batch element.
    p: i64,
}

impl Image {
    fn wide(&self) -> [Dim; 3] {
        [Dim::Static(self.n), Dim::Static(self.c), Dim::Static(self.p)]
    }

    /// For integer-valued coordinates `at` [N, P] (outermost dim first): the flat positions
    /// [N, C, P] (clamped into the image) and whether each point lies inside [N, C, P].
    fn locate(&self, cx: &mut Ctx, at: &[ValueId]) -> R<(ValueId, ValueId)> {
        let mut inside: Option<ValueId> = None;
        let mut lin: Option<ValueId> = None;
        for (k, &v) in at.iter().enumerate() {
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
        let lin = self.spread(cx, lin)?;
        let inside = self.spread(cx, inside)?;
        Ok((lin, inside))
    }

    /// The values [N, C, P] at the integer-valued coordinates `at` [N, P], 0 outside the image.
    fn read(&self, cx: &mut Ctx, at: &[ValueId]) -> R<ValueId> {
        let (lin, inside) = self.locate(cx, at)?;
        let v = gather_along(cx, self.flat, lin, 2)?;
        let zero = cx.full_like(Scalar::Float(0.0), v)?;
        cx.select(inside, v, zero)
    }

    /// `acc` [N, C, L] with `upd` [N, C, P] added at the coordinates `at` [N, P] inside the image.
    fn add_at(&self, cx: &mut Ctx, acc: ValueId, at: &[ValueId], upd: ValueId) -> R<ValueId> {
        let (lin, inside) = self.locate(cx, at)?;
        let zero = cx.full_like(Scalar::Float(0.0), upd)?;
        let upd = cx.select(inside, upd, zero)?;
        let coords = full_coords(cx, lin, 2, 3)?;
        elementwise_scatter(cx, acc, coords, upd, ScatterKind::Add)
    }

    /// [N, P] broadcast to [N, C, P].
    fn spread(&self, cx: &mut Ctx, w: ValueId) -> R<ValueId> {
        let w = cx.reshape(w, vec![Dim::Static(self.n), Dim::Static(1), Dim::Static(self.p)])?;
        cx.broadcast_to(w, &self.wide())
    }
}

/// The arguments of a grid sampler (forward or backward), checked, and the sample points.
struct Sampling {
    img: Image,
    /// The input's dtype (results are rounded to it).
    dt: DType,
    /// The compute dtype.
    cd: DType,
    nearest: bool,
    /// Per spatial dim (outermost first): the pixel coordinate [N, P], and its derivative with
    /// respect to the grid's component when the backward asked for it.
    at: Vec<ValueId>,
    slope: Vec<Option<ValueId>>,
    /// The grid's dims.
    gd: Vec<i64>,
}

fn sampling(cx: &mut Ctx, name: &str, nd: usize, slopes: bool) -> R<Sampling> {
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
        return err(format!("{name} needs float input and grid of one dtype, got {} and {}", cx.ty(x), cx.ty(grid)));
    }
    let xd = cx.static_dims(x, &format!("{name} input"))?;
    let gd = cx.static_dims(grid, &format!("{name} grid"))?;
    if xd.len() != nd + 2 || gd.len() != nd + 2 || gd[nd + 1] != nd as i64 || gd[0] != xd[0] {
        let (img, g) = if nd == 2 { ("[N, C, H, W]", "[N, H, W, 2]") } else { ("[N, C, D, H, W]", "[N, D, H, W, 3]") };
        return err(format!("{name} needs input {img} and grid {g}, got {} and {}", cx.ty(x), cx.ty(grid)));
    }
    if mode != 0 && mode != 1 {
        return err(format!(
            "{name} supports bilinear (0) and nearest (1) interpolation, got mode {mode}{}",
            if mode == 2 { " (bicubic)" } else { "" }
        ));
    }
    let (n, c) = (xd[0], xd[1]);
    let size = xd[2..].to_vec();
    let p: i64 = gd[1..=nd].iter().product();
    let cd = dtypes::compute_dtype(dt);
    let xc = cx.convert(x, cd)?;
    let flat = cx.reshape(xc, vec![Dim::Static(n), Dim::Static(c), Dim::Static(size.iter().product())])?;
    let g = cx.convert(grid, cd)?;
    let g = cx.reshape(g, vec![Dim::Static(n), Dim::Static(p), Dim::Static(nd as i64)])?;
    // Grid component k is x, y(, z) for k = 0, 1(, 2); spatial dims run outermost first.
    let (mut at, mut slope) = (Vec::with_capacity(nd), Vec::with_capacity(nd));
    for k in (0..nd).rev() {
        let comp = slice_static(cx, g, 2, k as i64, k as i64 + 1, 1)?;
        let comp = cx.reshape(comp, vec![Dim::Static(n), Dim::Static(p)])?;
        let (v, d) = source_index(cx, comp, size[nd - 1 - k], padding, align_corners, slopes)?;
        at.push(v);
        slope.push(d);
    }
    Ok(Sampling { img: Image { flat, size, n, c, p }, dt, cd, nearest: mode == 1, at, slope, gd })
}

/// Linear interpolation's corners: the lower corner per dim, and the weights of the lower
/// (1 - frac) and upper (frac) neighbours.
struct Corners {
    lower: Vec<ValueId>,
    w: Vec<[ValueId; 2]>,
}

fn corners(cx: &mut Ctx, at: &[ValueId]) -> R<Corners> {
    let (mut lower, mut w) = (Vec::with_capacity(at.len()), Vec::with_capacity(at.len()));
    for &a in at {
        let f = cx.un(O::Floor, a)?;
        let up = cx.bin_c(O::Add, f, 1.0)?;
        lower.push(f);
        w.push([cx.bin(O::Sub, up, a)?, cx.bin(O::Sub, a, f)?]);
    }
    Ok(Corners { lower, w })
}

impl Corners {
    /// The offsets of every corner in the kernel's order (the outermost dim slowest).
    fn offsets(&self) -> Vec<Vec<usize>> {
        let nd = self.lower.len();
        (0..1usize << nd).map(|i| (0..nd).map(|k| (i >> (nd - 1 - k)) & 1).collect()).collect()
    }

    fn position(&self, cx: &mut Ctx, off: &[usize]) -> R<Vec<ValueId>> {
        let mut pos = self.lower.clone();
        for (k, &d) in off.iter().enumerate() {
            if d == 1 {
                pos[k] = cx.bin_c(O::Add, self.lower[k], 1.0)?;
            }
        }
        Ok(pos)
    }

    /// The product of the corner's weights over the dims other than `skip` (innermost first,
    /// as the kernel multiplies).
    fn weight(&self, cx: &mut Ctx, off: &[usize], skip: Option<usize>) -> R<Option<ValueId>> {
        let mut acc: Option<ValueId> = None;
        for k in (0..off.len()).rev() {
            if Some(k) == skip {
                continue;
            }
            let w = self.w[k][off[k]];
            acc = Some(match acc {
                Some(a) => cx.bin(O::Mul, a, w)?,
                None => w,
            });
        }
        Ok(acc)
    }
}

fn grid_sampler(cx: &mut Ctx, name: &str, nd: usize) -> R<Vec<Val>> {
    let s = sampling(cx, name, nd, false)?;
    let img = &s.img;
    let out = if s.nearest {
        let mut near = s.at.clone();
        for v in near.iter_mut() {
            *v = cx.un(O::RoundEven, *v)?;
        }
        img.read(cx, &near)?
    } else {
        let cs = corners(cx, &s.at)?;
        // The kernel starts from 0 and adds the corners inside the image.
        let mut acc = cx.full(Scalar::Float(0.0), s.cd, &img.wide())?;
        for off in cs.offsets() {
            let pos = cs.position(cx, &off)?;
            let Some(wt) = cs.weight(cx, &off, None)? else { return err("internal: no weight") };
            let wt = img.spread(cx, wt)?;
            let v = img.read(cx, &pos)?;
            let term = cx.bin(O::Mul, v, wt)?;
            acc = cx.bin(O::Add, acc, term)?;
        }
        acc
    };
    let mut dims = vec![Dim::Static(img.n), Dim::Static(img.c)];
    dims.extend(s.gd[1..=nd].iter().map(|&d| Dim::Static(d)));
    let out = cx.reshape(out, dims)?;
    one(cx.convert(out, s.dt)?)
}

pub(super) fn grid_sampler_2d(cx: &mut Ctx) -> R<Vec<Val>> {
    grid_sampler(cx, "grid_sampler_2d", 2)
}

pub(super) fn grid_sampler_3d(cx: &mut Ctx) -> R<Vec<Val>> {
    grid_sampler(cx, "grid_sampler_3d", 3)
}

/// `grid_sampler_{2,3}d_backward(grad_output, input, grid, ...)` -> (grad_input, grad_grid).
fn grid_sampler_backward(cx: &mut Ctx, name: &str, nd: usize) -> R<Vec<Val>> {
    let mask = cx.bools("output_mask")?.unwrap_or_else(|| vec![true; 2]);
    let s = sampling(cx, name, nd, true)?;
    let img = &s.img;
    let dy = cx.t("grad_output")?;
    let mut want = vec![img.n, img.c];
    want.extend_from_slice(&s.gd[1..=nd]);
    if cx.static_dims(dy, &format!("{name} grad_output"))? != want {
        return err(format!("{name}: grad_output {} does not match the sampled shape", cx.ty(dy)));
    }
    let dy = cx.convert(dy, s.cd)?;
    let dy = cx.reshape(dy, img.wide().to_vec())?;
    let input_dims = {
        let mut d = vec![Dim::Static(img.n), Dim::Static(img.c)];
        d.extend(img.size.iter().map(|&v| Dim::Static(v)));
        d
    };
    let l: i64 = img.size.iter().product();
    let flat_dims = [Dim::Static(img.n), Dim::Static(img.c), Dim::Static(l)];
    let mut outs = vec![Val::None, Val::None];
    for (i, o) in outs.iter_mut().enumerate() {
        if mask.get(i).copied().unwrap_or(true) && !cx.used(i) {
            *o = Val::Absent;
        }
    }
    let grid_dims: Vec<Dim> = s.gd.iter().map(|&d| Dim::Static(d)).collect();
    if s.nearest {
        if out_used(cx, &mask, 0) {
            let mut near = s.at.clone();
            for v in near.iter_mut() {
                *v = cx.un(O::RoundEven, *v)?;
            }
            let acc = cx.full(Scalar::Float(0.0), s.cd, &flat_dims)?;
            let gi = img.add_at(cx, acc, &near, dy)?;
            let gi = cx.reshape(gi, input_dims)?;
            outs[0] = Val::Tensor(cx.convert(gi, s.dt)?);
        }
        if out_used(cx, &mask, 1) {
            outs[1] = Val::Tensor(cx.full(Scalar::Float(0.0), s.dt, &grid_dims)?);
        }
        return Ok(outs);
    }
    let cs = corners(cx, &s.at)?;
    let mut gi = if out_used(cx, &mask, 0) { Some(cx.full(Scalar::Float(0.0), s.cd, &flat_dims)?) } else { None };
    // d out / d at[k], per channel, accumulated over the corners.
    let want_grid = out_used(cx, &mask, 1);
    let mut dk: Vec<Option<ValueId>> = vec![None; nd];
    for off in cs.offsets() {
        let pos = cs.position(cx, &off)?;
        if let Some(acc) = gi {
            let Some(wt) = cs.weight(cx, &off, None)? else { return err("internal: no weight") };
            let wt = img.spread(cx, wt)?;
            let upd = cx.bin(O::Mul, dy, wt)?;
            gi = Some(img.add_at(cx, acc, &pos, upd)?);
        }
        if want_grid {
            let v = img.read(cx, &pos)?;
            let gv = cx.bin(O::Mul, v, dy)?;
            for k in 0..nd {
                let term = match cs.weight(cx, &off, Some(k))? {
                    Some(w) => {
                        let w = img.spread(cx, w)?;
                        cx.bin(O::Mul, gv, w)?
                    }
                    None => gv,
                };
                let op = if off[k] == 1 { O::Add } else { O::Sub };
                dk[k] = Some(match dk[k] {
                    Some(a) => cx.bin(op, a, term)?,
                    None if off[k] == 1 => term,
                    None => cx.un(O::Neg, term)?,
                });
            }
        }
    }
    if let Some(acc) = gi {
        let acc = cx.reshape(acc, input_dims)?;
        outs[0] = Val::Tensor(cx.convert(acc, s.dt)?);
    }
    if want_grid {
        // Per grid component (x first): the channel sum times d at / d grid.
        let mut comps = Vec::with_capacity(nd);
        for k in (0..nd).rev() {
            let (Some(d), Some(slope)) = (dk[k], s.slope[k]) else { return err("internal: no grid slope") };
            let d = cx.reduce(d, ReduceKind::Sum, &[1], false)?;
            let d = cx.bin(O::Mul, d, slope)?;
            comps.push(cx.reshape(d, vec![Dim::Static(img.n), Dim::Static(img.p), Dim::Static(1)])?);
        }
        let g = cat_v(cx, &comps, 2)?;
        let g = cx.reshape(g, grid_dims)?;
        outs[1] = Val::Tensor(cx.convert(g, s.dt)?);
    }
    Ok(outs)
}

pub(super) fn grid_sampler_2d_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    grid_sampler_backward(cx, "grid_sampler_2d_backward", 2)
}

pub(super) fn grid_sampler_3d_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    grid_sampler_backward(cx, "grid_sampler_3d_backward", 3)
}
