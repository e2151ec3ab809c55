//! Ops whose result size depends on the values: `nonzero` (`argwhere`), `masked_select`,
//! `_unique2` (`torch.unique`, flattened), `unique_consecutive`, and indexing by a boolean mask
//! (`x[mask]`, lowered in `index` from `index.Tensor` with the same builders).
//!
//! Each computes its result into a buffer of the largest size it can have (every element,
//! see `build::sizes`) and a count of its valid rows,
//! and binds the two with `bind_size` to the data-dependent symbol torch recorded (`u0`).
//! The `specialize` pass then treats the symbol as a padded dim whose real size the program
//! computes: later ops mask the padding as for any bucket, and the program returns the count
//! so that the caller cuts the results.

use crate::ops::build::*;
use Opcode as O;
use tpuc_ir::ScatterKind;

pub const OPS: &[(&str, OpFn)] = &[
    ("nonzero.default", nonzero),
    ("argwhere.default", nonzero),
    ("masked_select.default", masked_select),
    ("_unique2.default", unique2),
    ("unique_consecutive.default", unique_consecutive),
];

/// `v` with its leading dim declared data-dependent (see [`bind_dim`]).
fn bind_rows(cx: &mut Ctx, v: ValueId, count: ValueId, out: usize, what: &str) -> R<ValueId> {
    bind_dim(cx, v, 0, count, out, what)
}

/// `nonzero` / `argwhere`: the coordinates [u0, rank] of the nonzero elements, computed into a
/// buffer of the largest possible size (every element) and bound to the count.
fn nonzero(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let n: i64 = cx.static_dims(x, "nonzero")?.iter().product();
    let coords = nonzero_coords(cx, x, buffer_rows(n), -1, "nonzero")?;
    let count = count_true(cx, x)?;
    one(bind_rows(cx, coords, count, 0, "nonzero")?)
}

/// `masked_select`: the elements of `self` where `mask` (both broadcast to one shape) is true,
/// in row-major order: gathered from the mask's nonzero positions, then bound to their count.
fn masked_select(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    let mask = cx.t("mask")?;
    let shape = tpuc_ir::infer::broadcast_shapes(&cx.dims(x), &cx.dims(mask))?;
    let x = cx.broadcast_to(x, &shape)?;
    let mask = cx.broadcast_to(mask, &shape)?;
    let n: i64 = cx.static_dims(x, "masked_select")?.iter().product();
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    if n == 0 {
        let count = count_true(cx, mask)?;
        return one(bind_rows(cx, flat, count, 0, "masked_select")?);
    }
    let pos = nonzero_positions(cx, mask, buffer_rows(n), "masked_select")?;
    // Past the count, positions are n: clamp them into range (those rows are padding).
    let last = cx.full_like(Scalar::Int(n - 1), pos)?;
    let pos = cx.bin(O::Min, pos, last)?;
    let picked = take_along(cx, flat, 0, pos)?;
    let count = count_true(cx, mask)?;
    one(bind_rows(cx, picked, count, 0, "masked_select")?)
}

/// Runs of equal values in `s` [n] (n >= 1): per position its run's index (i64 [n]), and the
/// number of runs (an i64 scalar). NaNs are unequal to everything, as in ATen's comparison.
fn runs(cx: &mut Ctx, s: ValueId, n: i64) -> R<(ValueId, ValueId)> {
    let prev = cx.b.slice(s, &[0], &[n - 1], &[1])?;
    let next = cx.b.slice(s, &[1], &[n], &[1])?;
    let differs = cx.cmp(Direction::Ne, next, prev)?; // [n-1]
    let first = cx.full(Scalar::Bool(true), DType::Bool, &[Dim::Static(1)])?;
    let starts = cx.b.concatenate(&[first, differs], 0)?;
    let ones = cx.convert(starts, DType::I64)?;
    let ends = scan(cx, ones, 0, tpuc_ir::ScanKind::Sum)?;
    let one_v = cx.full_like(Scalar::Int(1), ends)?;
    let group = cx.bin(O::Sub, ends, one_v)?;
    let count = cx.reduce(ones, ReduceKind::Sum, &[0], false)?;
    Ok((group, count))
}

/// Scatters `updates` [n] to positions `at` [n] of a [size] buffer of `init`s, by `kind`.
fn scatter_to(cx: &mut Ctx, init: Scalar, dtype: DType, size: i64, at: ValueId, updates: ValueId, kind: ScatterKind) -> R<ValueId> {
    let buf = cx.full(init, dtype, &[Dim::Static(size)])?;
    let n = cx.static_dims(at, "unique")?[0];
    let coords = cx.reshape(at, vec![Dim::Static(n), Dim::Static(1)])?;
    elementwise_scatter(cx, buf, coords, updates, kind)
}

/// The shared body of `_unique2` and `unique_consecutive` on the flattened `x`: `order` sorts
/// it first (the source position of each sorted element is then where the inverse goes).
fn unique_of(cx: &mut Ctx, x: ValueId, order: bool, what: &str) -> R<Vec<Val>> {
    let inverse_wanted = cx.bool("return_inverse")?;
    let counts_wanted = cx.bool("return_counts")?;
    let dims = cx.static_dims(x, what)?;
    let n: i64 = dims.iter().product();
    let dt = cx.dtype(x);
    let flat = cx.reshape(x, vec![Dim::Static(n)])?;
    let empty_i64 = |cx: &mut Ctx| cx.full(Scalar::Int(0), DType::I64, &[Dim::Static(0)]);
    if n == 0 {
        let count = cx.full(Scalar::Int(0), DType::I64, &[])?;
        let values = bind_rows(cx, flat, count, 0, what)?;
        let inverse = if inverse_wanted { cx.full(Scalar::Int(0), DType::I64, &dims.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>())? } else { empty_i64(cx)? };
        let counts = empty_i64(cx)?;
        let counts = if counts_wanted { bind_rows(cx, counts, count, 2, what)? } else { counts };
        return Ok(vec![Val::Tensor(values), Val::Tensor(inverse), Val::Tensor(counts)]);
    }
    let (sorted, source) = if order {
        sort_v(cx, flat, 0, false)?
    } else {
        (flat, cx.iota(DType::I64, &[Dim::Static(n)], 0)?)
    };
    let (group, count) = runs(cx, sorted, n)?;
    let size = buffer_rows(n);
    let values = scatter_to(cx, Scalar::Int(0), dt, size, group, sorted, ScatterKind::Replace)?;
    let values = bind_rows(cx, values, count, 0, what)?;
    let inverse = if inverse_wanted {
        let inv = scatter_to(cx, Scalar::Int(0), DType::I64, n, source, group, ScatterKind::Replace)?;
        cx.reshape(inv, dims.iter().map(|&d| Dim::Static(d)).collect())?
    } else {
        empty_i64(cx)?
    };
    let counts = if counts_wanted {
        let ones = cx.full(Scalar::Int(1), DType::I64, &[Dim::Static(n)])?;
        let c = scatter_to(cx, Scalar::Int(0), DType::I64, size, group, ones, ScatterKind::Add)?;
        bind_rows(cx, c, count, 2, what)?
    } else {
        empty_i64(cx)?
    };
    Ok(vec![Val::Tensor(values), Val::Tensor(inverse), Val::Tensor(counts)])
}

/// `_unique2` (`torch.unique` without `dim`): the distinct values in ascending order (also
/// for `sorted=False`, which ATen's CPU kernel leaves in an unspecified order), the index of
/// each element's value among them, and how often each occurs.
fn unique2(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    unique_of(cx, x, true, "_unique2")
}

/// `unique_consecutive` without `dim`: one value per run of equal neighbours.
fn unique_consecutive(cx: &mut Ctx) -> R<Vec<Val>> {
    let x = cx.t("self")?;
    if cx.opt("dim")?.is_some_and(|a| !matches!(a, schema::Arg::None)) {
        return err("unique_consecutive with `dim` is not supported (only the flattened form)");
    }
    unique_of(cx, x, false, "unique_consecutive")
}
