//! Data-dependent sizes: a result computed into a buffer of the largest size it can have, with
//! the count of its valid entries bound to the symbol torch recorded (`bind_size`). The
//! `specialize` pass then treats the symbol as a padded dim whose real size the program computes.

use super::ctx::*;

/// The rows of the buffer for a result of at most `n` rows: at least 2, since a padded dim of
/// size 1 would read as unpadded (sizes are at least 1 elsewhere), and this one may be 0.
pub fn buffer_rows(n: i64) -> i64 {
    n.max(2)
}

/// The number of nonzero elements of `x`, an i64 scalar.
pub fn count_true(cx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let nz = cx.truthy(x)?;
    let ones = cx.convert(nz, DType::I64)?;
    let all: Vec<usize> = (0..cx.rank(ones)).collect();
    cx.reduce(ones, ReduceKind::Sum, &all, false)
}

/// `v` with dim `dim` declared data-dependent: its first `count` entries are valid, and the dim
/// is the symbol torch recorded for output `out` (its `u0`), bounded by `v`'s size.
pub fn bind_dim(cx: &mut Ctx, v: ValueId, dim: usize, count: ValueId, out: usize, what: &str) -> R<ValueId> {
    let want = cx.out_type(out).ok_or_else(|| OpError::Refused(format!("{what}: torch recorded no shape for the result")))?;
    let mut ty = cx.ty(v);
    match want.dims.get(dim) {
        Some(Dim::Sym(e)) if e.as_symbol().is_some() => ty.dims[dim] = Dim::Sym(e.clone()),
        // Torch knew the size (a constant input): the padded result is exactly that long.
        Some(Dim::Static(k)) if ty.dims[dim].as_static().is_some_and(|p| *k <= p) => {
            let dims = cx.static_dims(v, what)?;
            let mut limit = dims.clone();
            limit[dim] = *k;
            return Ok(cx.b.slice(v, &vec![0; dims.len()], &limit, &vec![1; dims.len()])?);
        }
        other => {
            return err(format!("{what}: the result's size {} is not one data-dependent symbol", other.map_or("?".into(), |d| d.to_string())))
        }
    }
    if let Some(sym) = match &ty.dims[dim] { Dim::Sym(e) => e.as_symbol(), _ => None } {
        cx.st.bound.borrow_mut().entry(sym.to_string()).or_insert(count);
    }
    let attrs = Attrs::new().with("dimension", Attr::Int(dim as i64));
    Ok(cx.b.build1(Opcode::BindSize, &[v, count], attrs, Some(ty))?)
}
