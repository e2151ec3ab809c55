//! Layout arithmetic: unifying two operands' layouts of a dim, regrouping factors through a
//! reshape, and regathering a prefix into a product of padded sizes where operands pair
//! positions.

use super::{from_factors, Sp, R};
use tpuc_ir::{DimLayout, Factor, Layout, SymExpr, ValueId};

impl Sp<'_> {
    /// Two operands' layouts of one dim of an elementwise op.
    pub(super) fn unify(&self, a: &DimLayout, b: &DimLayout, v: ValueId, d: usize) -> R<DimLayout> {
        Ok(match (a, b) {
            (DimLayout::Uniform(_), x) | (x, DimLayout::Uniform(_)) => x.clone(),
            (x, y) if x == y => x.clone(),
            (DimLayout::Exact, _) | (_, DimLayout::Exact) => {
                return Err(self.fail(format!("{} is padded in one operand and not in another", self.padded_dim_note(v, d))))
            }
            _ => {
                return Err(self.fail(format!(
                    "{} is padded differently in two operands (e.g. a reshaped product of sizes meets an iota)",
                    self.padded_dim_note(v, d)
                )))
            }
        })
    }

    /// Regroups the input's factors into the output dims.
    pub(super) fn reshape_layout(&self, x: ValueId, lay: &Layout, out: ValueId) -> R<Layout> {
        let in_shape = self.spec_type(&self.old.values[x].ty)?.static_dims().unwrap_or_default();
        let out_ty = self.spec_type(&self.old.values[out].ty)?;
        let out_shape = out_ty.static_dims().unwrap_or_default();
        let mut pieces: Vec<Factor> = Vec::new();
        for (i, l) in lay.iter().enumerate() {
            pieces.extend(l.factors(in_shape[i]).into_iter().filter(|f| f.padded != 1));
        }
        pieces.reverse(); // pop from the outermost
        let mut res = Vec::with_capacity(out_shape.len());
        for &q in &out_shape {
            let mut got: Vec<Factor> = Vec::new();
            let mut prod: i64 = 1;
            while prod < q {
                let Some(f) = pieces.pop() else { break };
                if prod * f.padded <= q {
                    prod *= f.padded;
                    got.push(f);
                } else if f.extent.as_const() == Some(f.padded) && f.padded % (q / prod) == 0 && q % prod == 0 {
                    let take = q / prod;
                    got.push(Factor { padded: take, extent: SymExpr::constant(take) });
                    let rest = f.padded / take;
                    pieces.push(Factor { padded: rest, extent: SymExpr::constant(rest) });
                    prod = q;
                } else {
                    return Err(self.fail(format!(
                        "reshape {} -> {} splits a padded dim of size {} (padded to {})",
                        self.old.values[x].ty, self.old.values[out].ty, f.extent, f.padded
                    )));
                }
            }
            if prod != q {
                return Err(self.fail(format!("reshape {} -> {}: internal factor mismatch", self.old.values[x].ty, self.old.values[out].ty)));
            }
            res.push(from_factors(got));
        }
        Ok(res)
    }

    /// For a reshape of old value `x` (new `xv`, laid out `lay`) into `out`: every input dim
    /// that is a prefix and that the reshape splits into several output dims, regathered into
    /// the layout of those dims (their padded sizes, their real sizes from `out`'s type).
    /// None when no dim is such a split or the sizes do not agree.
    pub(super) fn regather_splits(&mut self, xv: ValueId, x: ValueId, lay: &Layout, out: ValueId) -> R<Option<(ValueId, Layout)>> {
        let in_shape = self.spec_type(&self.old.values[x].ty)?.static_dims().unwrap_or_default();
        let out_shape = self.spec_type(&self.old.values[out].ty)?.static_dims().unwrap_or_default();
        let out_dims = self.old_dims(out);
        let (mut v, mut lay, mut changed) = (xv, lay.clone(), false);
        for i in 0..in_shape.len() {
            let Some(Some(extent)) = lay[i].prefix_extent() else { continue };
            if matches!(lay[i], DimLayout::Uniform(_)) {
                continue;
            }
            let extent = extent.clone();
            // The output dims j..k that hold input dim i alone.
            let lead: i64 = in_shape[..i].iter().product();
            let (mut j, mut p) = (0, 1i64);
            while j < out_shape.len() && p < lead {
                p *= out_shape[j];
                j += 1;
            }
            if p != lead {
                continue;
            }
            let (mut k, mut q) = (j, 1i64);
            while k < out_shape.len() && q < in_shape[i] {
                q *= out_shape[k];
                k += 1;
            }
            if q != in_shape[i] {
                continue;
            }
            let target: Vec<Factor> = (j..k)
                .filter(|&m| out_shape[m] != 1)
                .map(|m| Factor { padded: out_shape[m], extent: out_dims[m].clone().unwrap_or_else(|| SymExpr::constant(out_shape[m])) })
                .collect();
            let total = target.iter().fold(SymExpr::constant(1), |acc, f| acc.mul(&f.extent));
            if target.len() < 2 || total != extent {
                continue;
            }
            let want = DimLayout::Factors(target);
            v = self.regather(v, i, &lay[i], &want)?;
            lay[i] = want;
            changed = true;
        }
        Ok(changed.then_some((v, lay)))
    }

    /// Operands 0 and 1 pair positions along dim `dims[0]` of the first and `dims[1]` of the
    /// second (a contraction, a gather's batch dims), so they must lay it out alike: a prefix
    /// meeting a product of padded sizes of the same extent is regathered into the product's
    /// layout (`ins` and `lays` updated); any other mismatch is an error naming old value `v`'s
    /// dim. Returns the agreed layout and the side regathered, if one was.
    pub(super) fn pair_dims(&mut self, ins: &mut [ValueId], lays: &mut [Layout], dims: [usize; 2], v: ValueId) -> R<(DimLayout, Option<usize>)> {
        let (a, b) = (lays[0][dims[0]].clone(), lays[1][dims[1]].clone());
        let mismatch = match self.unify(&a, &b, v, dims[1]) {
            Ok(agreed) => return Ok((agreed, None)),
            Err(e) => e,
        };
        let (side, want) = match (a.prefix_extent(), b.prefix_extent()) {
            (Some(Some(_)), None) => (0, b),
            (None, Some(Some(_))) => (1, a),
            _ => return Err(mismatch),
        };
        let dim = dims[side];
        ins[side] = self.regather(ins[side], dim, &lays[side][dim], &want)?;
        lays[side][dim] = want.clone();
        Ok((want, Some(side)))
    }
}

/// For a row-major reshape from `inn` to `out`: the input dim whose positions output dim `d`
/// walks one for one (same size, same product of the dims before it), if any.
pub(super) fn kept_reshape_dim(inn: &[i64], out: &[i64], d: usize) -> Option<usize> {
    let before: i64 = out[..d].iter().product();
    let mut p = 1i64;
    for (e, &n) in inn.iter().enumerate() {
        if p == before && n == out[d] {
            return Some(e);
        }
        p *= n;
        if p > before {
            return None;
        }
    }
    None
}
