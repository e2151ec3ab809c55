//! Ops with bodies: reduce, arg_reduce, reduce_window, scan, sort, scatter and
//! select_and_scatter_add.
//!
//! Bodies work on rank-0 tensors of the element type. Init values are the identities of the
//! combining op: 0 for sum, 1 for prod, -inf (or the lowest finite value / MIN) for max, +inf
//! (highest / MAX) for min, all ones for `and`; on bool, sum/max are `or` and prod/min `and`.

use crate::emitter::{Emitter, Ty, V};
use crate::literal::Lit;
use crate::EmitError;
use smallvec::SmallVec;
use std::fmt::Write;
use tpuc_ir::{payload, DType, ReduceKind, ScatterDims};

/// The combining op and its identity for a reduction `kind` on `dt`; `None` where the kind
/// has no meaning for the type (max of complex numbers, `and` of floats).
pub(crate) fn combiner(kind: ReduceKind, dt: DType) -> Option<(&'static str, Lit)> {
    use ReduceKind::*;
    if dt.is_bool() {
        return Some(match kind {
            Sum | Max | Or => ("or", Lit::B(false)),
            Prod | Min | And => ("and", Lit::B(true)),
        });
    }
    let ordered = !dt.is_complex();
    let int = dt.is_int();
    match kind {
        Sum => Some(("add", Lit::I(0))),
        Prod => Some(("multiply", Lit::I(1))),
        Max if ordered => Some(("maximum", Lit::Lowest)),
        Min if ordered => Some(("minimum", Lit::Highest)),
        And if int => Some(("and", Lit::AllOnes)),
        Or if int => Some(("or", Lit::I(0))),
        Max | Min | And | Or => None,
    }
}


impl Emitter<'_> {
    pub(crate) fn combiner_or_err(&self, kind: ReduceKind, dt: DType) -> Result<(&'static str, Lit), EmitError> {
        combiner(kind, dt)
            .ok_or_else(|| self.unsupported(format!("reduction `{kind}` on {}", dt.name())))
    }

    pub fn reduce(
        &mut self,
        x: V,
        ty: &Ty,
        kind: ReduceKind,
        dims: &[i64],
        rt: &Ty,
    ) -> Result<V, EmitError> {
        let (body, init) = self.combiner_or_err(kind, ty.dt)?;
        let i = self.splat(&Ty::scalar(ty.dt), init);
        Ok(self.reduce_applies(x, ty, i, body, dims, rt))
    }

    /// argmax / argmin: a variadic reduce over (values, iota). The body keeps the better value
    /// and, on ties, the smaller index; NaN counts as better than any number (as in PyTorch,
    /// whose argmax and argmin both return the first NaN).
    pub fn arg_reduce(
        &mut self,
        x: V,
        ty: &Ty,
        dim: i64,
        argmax: bool,
        rt: &Ty,
    ) -> Result<V, EmitError> {
        if ty.dt.is_complex() {
            return Err(self.unsupported("argmax/argmin of complex values"));
        }
        let it = rt.dt;
        let ity = ty.with_dt(it);
        let vt = rt.with_dt(ty.dt);
        let (s, si, sb) = (Ty::scalar(ty.dt), Ty::scalar(it), Ty::scalar(DType::Bool));
        let iota = self.iota(dim, &ity);
        let v0 = self.splat(&s, if argmax { Lit::Lowest } else { Lit::Highest });
        let i0 = self.splat(&si, Lit::I(0));
        let n = self.def_multi(2);
        self.s("stablehlo.reduce(");
        self.val(x);
        self.s(" init: ");
        self.val(v0);
        self.s("), (");
        self.val(iota);
        self.s(" init: ");
        self.val(i0);
        let _ = write!(self.out, ") across dimensions = [{dim}] : (");
        for (i, t) in [ty, &ity, &s, &si].into_iter().enumerate() {
            self.s(if i == 0 { "" } else { ", " });
            self.ty(t);
        }
        self.s(") -> (");
        self.ty(&vt);
        self.s(", ");
        self.ty(rt);
        self.s(")");
        let (l, r) = self.reducer_begin(&[&s, &si]);
        let (a, ai, b, bi) = (l[0], l[1], r[0], r[1]);
        let gt = self.compare(if argmax { "GT" } else { "LT" }, a, b, &s);
        let eq = self.compare("EQ", a, b, &s);
        let (better, same) = if ty.dt.is_float() {
            let a_nan = self.compare("NE", a, a, &s);
            let b_nan = self.compare("NE", b, b, &s);
            let b_num = self.unary("not", b_nan, &sb);
            let a_only_nan = self.binary("and", a_nan, b_num, &sb);
            let better = self.binary("or", gt, a_only_nan, &sb);
            let both_nan = self.binary("and", a_nan, b_nan, &sb);
            let same = self.binary("or", eq, both_nan, &sb);
            (better, same)
        } else {
            (gt, eq)
        };
        let first = self.compare("LT", ai, bi, &si);
        let tie = self.binary("and", same, first, &sb);
        let pick = self.binary("or", better, tie, &sb);
        let v = self.select(pick, a, b, &s);
        let i = self.select(pick, ai, bi, &si);
        self.region_return(&[(v, &s), (i, &si)]);
        self.reducer_end();
        Ok(V::Res(n, 1))
    }

    /// `"stablehlo.reduce_window"` with a one-op body; `None` dilations are left out.
    #[allow(clippy::too_many_arguments)]
    fn window_reduce(
        &mut self,
        x: V,
        ty: &Ty,
        (body, init): (&str, Lit),
        window: &[i64],
        strides: &[i64],
        dilations: Option<(&[i64], &[i64])>,
        padding: &[i64],
        rt: &Ty,
    ) -> V {
        let s = Ty::scalar(ty.dt);
        let i = self.splat(&s, init);
        let r = self.def();
        self.s("\"stablehlo.reduce_window\"(");
        self.val(x);
        self.s(", ");
        self.val(i);
        self.s(") <{");
        if let Some((base, _)) = dilations {
            self.s("base_dilations = ");
            self.array_i64(base);
            self.s(", ");
        }
        self.s("padding = ");
        self.padding_attr(padding);
        if let Some((_, win)) = dilations {
            self.s(", window_dilations = ");
            self.array_i64(win);
        }
        self.s(", window_dimensions = ");
        self.array_i64(window);
        self.s(", window_strides = ");
        self.array_i64(strides);
        self.s("}> ");
        let args = self.region_begin(&[&s, &s]);
        let c = self.binary(body, args[0], args[1], &s);
        self.region_return(&[(c, &s)]);
        self.region_end();
        self.s(" : ");
        self.fn_ty(&[ty, &s], rt);
        self.end();
        r
    }

    /// Padding takes the kind's identity (-inf for max pooling, 0 for sums).
    pub fn reduce_window(&mut self, x: V, ty: &Ty, a: payload::ReduceWindow, rt: &Ty) -> Result<V, EmitError> {
        let comb = self.combiner_or_err(a.kind.into(), ty.dt)?;
        let (bd, wd) = (a.base_dilations, a.window_dilations);
        let trivial = bd.iter().chain(wd).all(|&d| d == 1);
        Ok(self.window_reduce(
            x,
            ty,
            comb,
            a.window_dimensions,
            a.window_strides,
            (!trivial).then_some((bd, wd)),
            a.padding,
            rt,
        ))
    }

    /// Inclusive prefix reduction: a reduce_window whose window spans the whole dimension,
    /// padded by n-1 identities in front.
    pub fn scan(&mut self, x: V, ty: &Ty, dim: i64, kind: ReduceKind) -> Result<V, EmitError> {
        let comb = self.combiner_or_err(kind, ty.dt)?;
        let d = dim as usize;
        let n = ty.dims[d];
        if n <= 1 {
            return Ok(x);
        }
        let r = ty.rank();
        let mut window: SmallVec<[i64; 6]> = SmallVec::from_elem(1, r);
        window[d] = n;
        let strides: SmallVec<[i64; 6]> = SmallVec::from_elem(1, r);
        let mut pad: SmallVec<[i64; 12]> = SmallVec::from_elem(0, 2 * r);
        pad[2 * d] = n - 1;
        Ok(self.window_reduce(x, ty, comb, &window, &strides, None, &pad, ty))
    }

    /// Stable sort of (values, iota) on the values. Ascending puts NaN last, descending first
    /// (NaN is the largest value, as in PyTorch); -0.0 and 0.0 tie.
    pub fn sort(&mut self, x: V, ty: &Ty, dim: i64, descending: bool) -> Result<(V, V), EmitError> {
        if ty.dt.is_complex() {
            return Err(self.unsupported("sorting complex values"));
        }
        let ity = ty.with_dt(DType::I64);
        let (s, si, sb) = (
            Ty::scalar(ty.dt),
            Ty::scalar(DType::I64),
            Ty::scalar(DType::Bool),
        );
        let iota = self.iota(dim, &ity);
        let n = self.def_multi(2);
        self.s("\"stablehlo.sort\"(");
        self.val(x);
        self.s(", ");
        self.val(iota);
        let _ = write!(
            self.out,
            ") <{{dimension = {dim} : i64, is_stable = true}}> "
        );
        let args = self.region_begin(&[&s, &s, &si, &si]);
        let (a, b) = (args[0], args[1]);
        let p = if ty.dt.is_float() {
            // ascending: a < b, or b is NaN and a is not; descending: a > b, or a is NaN and b is not.
            let (first, nan_side, num_side) = if descending {
                ("GT", a, b)
            } else {
                ("LT", b, a)
            };
            let c = self.compare(first, a, b, &s);
            let nan = self.compare("NE", nan_side, nan_side, &s);
            let num = self.compare("EQ", num_side, num_side, &s);
            let nan_case = self.binary("and", nan, num, &sb);
            self.binary("or", c, nan_case, &sb)
        } else {
            self.compare(if descending { "GT" } else { "LT" }, a, b, &s)
        };
        self.region_return(&[(p, &sb)]);
        self.region_end();
        self.s(" : (");
        self.ty(ty);
        self.s(", ");
        self.ty(&ity);
        self.s(") -> (");
        self.ty(ty);
        self.s(", ");
        self.ty(&ity);
        self.s(")");
        self.end();
        Ok((V::Res(n, 0), V::Res(n, 1)))
    }

    pub fn scatter(
        &mut self,
        (x, idx, upd): (V, V, V),
        (tx, ti, tu): (&Ty, &Ty, &Ty),
        a: payload::Scatter,
        rt: &Ty,
    ) -> Result<V, EmitError> {
        let body = match a.kind.combiner() {
            None => None,
            Some(k) => Some(self.combiner_or_err(k, tx.dt)?.0),
        };
        let s = Ty::scalar(tx.dt);
        let r = self.def();
        self.s("\"stablehlo.scatter\"(");
        self.val(x);
        self.s(", ");
        self.val(idx);
        self.s(", ");
        self.val(upd);
        self.s(") <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<");
        let sd = ScatterDims::from(a);
        self.dimension_numbers(&sd.lists(), sd.index_vector_dim);
        self.s(">, unique_indices = false}> ");
        let args = self.region_begin(&[&s, &s]);
        let c = match body {
            None => args[1],
            Some(op) => self.binary(op, args[0], args[1], &s),
        };
        self.region_return(&[(c, &s)]);
        self.region_end();
        self.s(" : (");
        for (i, t) in [tx, ti, tu].into_iter().enumerate() {
            self.s(if i == 0 { "" } else { ", " });
            self.ty(t);
        }
        self.s(") -> ");
        self.ty(rt);
        self.end();
        Ok(r)
    }

    /// Max-pool gradient: select with GE (first maximum of each window), scatter by adding.
    pub fn select_and_scatter_add(
        &mut self,
        x: V,
        src: V,
        (tx, ts): (&Ty, &Ty),
        a: payload::SelectAndScatterAdd,
    ) -> Result<V, EmitError> {
        let (add, zero) = self.combiner_or_err(ReduceKind::Sum, tx.dt)?;
        let s = Ty::scalar(tx.dt);
        let sb = Ty::scalar(DType::Bool);
        let init = self.splat(&s, zero);
        let r = self.def();
        self.s("\"stablehlo.select_and_scatter\"(");
        self.val(x);
        self.s(", ");
        self.val(src);
        self.s(", ");
        self.val(init);
        self.s(") <{padding = ");
        self.padding_attr(a.padding);
        self.s(", window_dimensions = ");
        self.array_i64(a.window_dimensions);
        self.s(", window_strides = ");
        self.array_i64(a.window_strides);
        self.s("}> ");
        let args = self.region_begin(&[&s, &s]);
        let ge = self.compare("GE", args[0], args[1], &s);
        self.region_return(&[(ge, &sb)]);
        let args = self.region_next(&[&s, &s]);
        let sum = self.binary(add, args[0], args[1], &s);
        self.region_return(&[(sum, &s)]);
        self.region_end();
        self.s(" : (");
        self.ty(tx);
        self.s(", ");
        self.ty(ts);
        self.s(", ");
        self.ty(&s);
        self.s(") -> ");
        self.ty(tx);
        self.end();
        Ok(r)
    }
}
