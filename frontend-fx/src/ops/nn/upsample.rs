//! Upsampling: nearest and nearest-exact (a gather per upsampled dim) and linear, bilinear
//! and trilinear interpolation (an interpolation matrix applied along each upsampled dim).

use crate::ops::shape::take_along;
use super::*;

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
    let names = match nsp {
        1 => vec!["scales"],
        2 => vec!["scales_h", "scales_w"],
        _ => vec!["scales_d", "scales_h", "scales_w"],
    };
    let mut scales: Vec<Option<f64>> = Vec::new();
    for n in &names {
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

/// Linear interpolation matrix [o, n] as `compute_source_index_and_lambda` (f32 math).
fn linear_matrix(n: i64, o: i64, align_corners: bool, scale: Option<f64>) -> Vec<f64> {
    let mut m = vec![0.0f64; (o * n) as usize];
    let sc: f32 = if align_corners {
        if o > 1 {
            (n - 1) as f32 / (o - 1) as f32
        } else {
            0.0
        }
    } else {
        scale_value(scale, n, o)
    };
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
    let align = cx.bool_or("align_corners", false)?;
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
