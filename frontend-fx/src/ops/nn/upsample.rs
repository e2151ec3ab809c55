//! Upsampling: nearest and nearest-exact (a gather per upsampled dim) and linear, bilinear
//! and trilinear interpolation (an interpolation matrix applied along each upsampled dim).

use take_along;
use super::pool::apply_along;
use crate::ops::build::*;

/// Output sizes and scale factors of an upsample op over `nsp` trailing dims.
/// (input sizes, output sizes, scale factors) of the upsampled dims.
type UpsampleSizes = (Vec<i64>, Vec<i64>, Vec<Option<f64>>);

fn upsample_sizes(cx: &Ctx, x: ValueId, nsp: usize) -> R<UpsampleSizes> {
    let dims = cx.dims(x);
    if dims.len() < nsp + 2 {
        return err(format!("upsampling needs rank {}, got {}", nsp + 2, cx.ty(x)));
    }
    let ins: Vec<i64> = dims[dims.len() - nsp..].iter().map(|d| static_of(d, "upsampled dim")).collect::<R<_>>()?;
    let out_sizes = cx.opt_ints("output_size")?;
    let scale_factors: Option<Vec<f64>> = match cx.opt("scale_factors")? {
        Some(Arg::Floats(f)) => Some(f),
        Some(a) => return err(format!("scale_factors must be floats, got a {}", a.kind())),
        None => None,
    };
    let mut scales: Vec<Option<f64>> = Vec::new();
    for n in scale_names(nsp) {
        scales.push(cx.opt_float(n)?);
    }
    let outs = match (out_sizes, &scale_factors) {
        (Some(o), _) if !o.is_empty() => {
            if o.len() != nsp {
                return err("output_size does not match the spatial rank");
            }
            if let Some(sf) = &scale_factors {
                scales = sf.iter().map(|&s| Some(s)).collect();
            }
            o
        }
        (_, Some(sf)) => {
            if sf.len() != nsp {
                return err("scale_factors does not match the spatial rank");
            }
            scales = sf.iter().map(|&s| Some(s)).collect();
            ins.iter().zip(sf).map(|(&n, &s)| (n as f64 * s).floor() as i64).collect()
        }
        _ => return err("upsampling needs output_size or scale_factors"),
    };
    for (&o, &n) in outs.iter().zip(&ins) {
        if !(1..=MAX_SIZE).contains(&o) {
            return err(format!("upsampled size {o} out of range"));
        }
        table_size(&[o, n], "interpolation table")?;
    }
    Ok((ins, outs, scales))
}

/// The argument names of the per-dim scales of an upsample over `nsp` dims.
fn scale_names(nsp: usize) -> &'static [&'static str] {
    match nsp {
        1 => &["scales"],
        2 => &["scales_h", "scales_w"],
        _ => &["scales_d", "scales_h", "scales_w"],
    }
}

fn spatial_rank(cx: &Ctx) -> usize {
    let t = &cx.node.target;
    if t.contains("1d") {
        1
    } else if t.contains("3d") {
        3
    } else {
        2
    }
}

/// `compute_scales_value`: 1/scale when given, else in/out (as f32, like the kernels).
fn scale_value(scale: Option<f64>, n: i64, o: i64) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => n as f32 / o as f32,
    }
}

fn nearest_impl(cx: &mut Ctx, exact: bool) -> R<Vec<Val>> {
    let x = cx.opt_t("input")?.map_or_else(|| cx.t("self"), Ok)?;
    let nsp = spatial_rank(cx);
    let (ins, outs, scales) = upsample_sizes(cx, x, nsp)?;
    let lead = cx.rank(x) - nsp;
    let mut y = x;
    for i in 0..nsp {
        let (n, o) = (ins[i], outs[i]);
        let sc = scale_value(scales.get(i).copied().flatten(), n, o);
        table_size(&[o], "nearest-neighbour index table")?;
        let idx: Vec<i64> = (0..o)
            .map(|d| {
                let src = if exact {
                    ((d as f32 + 0.5) * sc).floor() as i64
                } else if o == n {
                    d
                } else if o == 2 * n {
                    d >> 1
                } else {
                    (d as f32 * sc).floor() as i64
                };
                src.min(n - 1).max(0)
            })
            .collect();
        let ic = cx.const_i64(&[o], &idx)?;
        y = take_along(cx, y, lead + i, ic)?;
    }
    one(y)
}
pub(super) fn upsample_nearest(cx: &mut Ctx) -> R<Vec<Val>> {
    nearest_impl(cx, false)
}
pub(super) fn upsample_nearest_exact(cx: &mut Ctx) -> R<Vec<Val>> {
    nearest_impl(cx, true)
}

/// Input pixels per output pixel (`area_pixel_compute_scale`): corner to corner with
/// `align_corners`, else from the given scale or the size ratio.
fn source_scale(n: i64, o: i64, align_corners: bool, scale: Option<f64>) -> f32 {
    if !align_corners {
        scale_value(scale, n, o)
    } else if o > 1 {
        (n - 1) as f32 / (o - 1) as f32
    } else {
        0.0
    }
}

/// Linear interpolation matrix [o, n] as `compute_source_index_and_lambda` (f32 math).
fn linear_matrix(n: i64, o: i64, align_corners: bool, scale: Option<f64>) -> Vec<f64> {
    let mut m = vec![0.0f64; (o * n) as usize];
    let sc = source_scale(n, o, align_corners, scale);
    for d in 0..o {
        let (i0, i1, l0, l1) = if o == n {
            (d, d, 1.0f32, 0.0f32)
        } else {
            let real = if align_corners { sc * d as f32 } else { (sc * (d as f32 + 0.5) - 0.5).max(0.0) };
            let i0 = (real as i64).min(n - 1);
            let i1 = i0 + if i0 < n - 1 { 1 } else { 0 };
            let l1 = (real - i0 as f32).clamp(0.0, 1.0);
            (i0, i1, 1.0 - l1, l1)
        };
        m[(d * n + i0) as usize] += l0 as f64;
        m[(d * n + i1) as usize] += l1 as f64;
    }
    m
}

pub(super) fn upsample_linear(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.opt_t("input")?.map_or_else(|| cx.t("self"), Ok)?;
    let nsp = spatial_rank(cx);
    let align = cx.bool("align_corners")?;
    let (ins, outs, scales) = upsample_sizes(cx, x, nsp)?;
    let lead = cx.rank(x) - nsp;
    let xd = cx.dtype(x);
    if !xd.is_float() {
        return err("linear upsampling needs a floating-point input");
    }
    let mut y = x;
    for i in (0..nsp).rev() {
        let m = linear_matrix(ins[i], outs[i], align, scales.get(i).copied().flatten());
        let mc = cx.const_f(&[outs[i], ins[i]], &m, xd)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(y)
}

/// The antialiasing filters of `_upsample_{bilinear,bicubic}2d_aa`: a triangle of support 1,
/// or Keys' cubic convolution with a = -0.5 (as PIL) of support 2.
#[derive(Clone, Copy)]
enum AaFilter {
    Triangle,
    Cubic,
}

impl AaFilter {
    fn support(self) -> f32 {
        match self {
            AaFilter::Triangle => 1.0,
            AaFilter::Cubic => 2.0,
        }
    }
    fn weight(self, x: f32) -> f32 {
        let x = x.abs();
        match self {
            AaFilter::Triangle => (1.0 - x).max(0.0),
            AaFilter::Cubic => {
                const A: f32 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
                } else {
                    0.0
                }
            }
        }
    }
}

/// Antialiased interpolation matrix [o, n]: each output sample averages the inputs under the
/// filter stretched by the downscale factor (not stretched when upscaling), weights normalised
/// to sum to one, in f32 like the CPU kernel.
fn aa_matrix(n: i64, o: i64, align_corners: bool, scale: Option<f64>, f: AaFilter) -> Vec<f64> {
    let sc = source_scale(n, o, align_corners, scale);
    let (support, invscale) = if sc >= 1.0 { (f.support() * sc, 1.0 / sc) } else { (f.support(), 1.0) };
    let mut m = vec![0.0f64; (o * n) as usize];
    for d in 0..o {
        let center = sc * (d as f32 + 0.5);
        let lo = ((center - support + 0.5) as i64).max(0);
        let hi = ((center + support + 0.5) as i64).min(n);
        let w: Vec<f32> = (lo..hi).map(|j| f.weight((j as f32 - center + 0.5) * invscale)).collect();
        let total: f32 = w.iter().sum();
        if total != 0.0 {
            for (j, wj) in (lo..hi).zip(&w) {
                m[(d * n + j) as usize] = (wj / total) as f64;
            }
        }
    }
    m
}

fn aa_filter(cx: &Ctx) -> AaFilter {
    if cx.node.target.contains("bicubic") {
        AaFilter::Cubic
    } else {
        AaFilter::Triangle
    }
}

/// `_upsample_{bilinear,bicubic}2d_aa`: the separable antialiased resize, one constant matrix
/// per spatial dim.
pub(super) fn upsample_aa(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.opt_t("input")?.map_or_else(|| cx.t("self"), Ok)?;
    let align = cx.bool("align_corners")?;
    let (ins, outs, scales) = upsample_sizes(cx, x, 2)?;
    let lead = cx.rank(x) - 2;
    let xd = cx.dtype(x);
    if !xd.is_float() {
        return err("antialiased upsampling needs a floating-point input");
    }
    let f = aa_filter(cx);
    let mut y = x;
    for i in (0..2).rev() {
        let m = aa_matrix(ins[i], outs[i], align, scales.get(i).copied().flatten(), f);
        let mc = cx.const_f(&[outs[i], ins[i]], &m, xd)?;
        y = apply_along(cx, y, lead + i, mc)?;
    }
    one(y)
}

/// The backward of the linear and antialiased resizes: the transposed interpolation matrices
/// applied to the output gradient.
pub(super) fn upsample_interp_backward(cx: &mut Ctx) -> R<Vec<Val>> {
    let g = cx.t("grad_output")?;
    let os = cx.ints("output_size")?;
    let is = cx.ints("input_size")?;
    let align = cx.bool("align_corners")?;
    let nsp = os.len();
    if nsp == 0 || is.len() != nsp + 2 || cx.rank(g) != nsp + 2 {
        return err(format!("upsample backward: output_size {os:?}, input_size {is:?} and grad {} disagree", cx.ty(g)));
    }
    let gd = cx.dims(g);
    for (i, &o) in os.iter().enumerate() {
        if static_of(&gd[2 + i], "upsampled dim")? != o {
            return err(format!("upsample backward: grad {} does not have output_size {os:?}", cx.ty(g)));
        }
    }
    let names = scale_names(nsp);
    let gdt = cx.dtype(g);
    if !gdt.is_float() {
        return err("upsample backward needs a floating-point gradient");
    }
    let aa = cx.node.target.contains("_aa");
    let f = aa_filter(cx);
    let mut y = g;
    for i in (0..nsp).rev() {
        let (n, o) = (is[2 + i], os[i]);
        if !(1..=MAX_SIZE).contains(&n) || !(1..=MAX_SIZE).contains(&o) {
            return err(format!("upsample backward: size {n} or {o} out of range"));
        }
        table_size(&[o, n], "interpolation table")?;
        let scale = cx.opt_float(names[i])?;
        let m = if aa { aa_matrix(n, o, align, scale, f) } else { linear_matrix(n, o, align, scale) };
        // Transpose [o, n] -> [n, o].
        let mt: Vec<f64> = (0..n).flat_map(|j| (0..o).map(move |d| (d, j))).map(|(d, j)| m[(d * n + j) as usize]).collect();
        let mc = cx.const_f(&[n, o], &mt, gdt)?;
        y = apply_along(cx, y, 2 + i, mc)?;
    }
    one(y)
}
