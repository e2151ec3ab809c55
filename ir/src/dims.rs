//! The dimension numbers of `gather` and `scatter`, each as one value.
//!
//! A gather or scatter carries five dimension lists and an index vector dim whose meanings
//! only make sense together (StableHLO's `#stablehlo.gather<...>` / `#stablehlo.scatter<...>`).
//! [`GatherDims`] and [`ScatterDims`] are those bundles: the front end builds an op from one
//! (`Builder::gather`, `Builder::scatter`), and the shape rule, the evaluator, the specializer
//! and the emitter read one back with `of`. They are owned forms of the ops' typed views
//! ([`crate::payload::Gather`], [`crate::payload::Scatter`]), whose attribute words are the op
//! table's.

use crate::attr::Attrs;
use crate::enums::ScatterKind;
use crate::payload;

/// `gather`'s dimension numbers and slice sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatherDims {
    /// Result dims that hold the slice's kept dims.
    pub offset_dims: Vec<i64>,
    /// Operand dims sliced to size 1 and dropped from the result.
    pub collapsed_slice_dims: Vec<i64>,
    /// Operand dims paired with `start_indices_batching_dims`.
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    /// Which operand dim each entry of the index vector starts.
    pub start_index_map: Vec<i64>,
    /// The dim of the indices that holds the index vector (the rank for a trailing implicit 1).
    pub index_vector_dim: i64,
    /// The slice size along every operand dim.
    pub slice_sizes: Vec<i64>,
}

/// `scatter`'s dimension numbers (its kind is a separate [`ScatterKind`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScatterDims {
    /// Update dims that run along the operand's window.
    pub update_window_dims: Vec<i64>,
    /// Operand dims of window size 1 that the updates leave out.
    pub inserted_window_dims: Vec<i64>,
    /// Operand dims paired with `scatter_indices_batching_dims`.
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    /// Which operand dim each entry of the index vector addresses.
    pub scatter_dims_to_operand_dims: Vec<i64>,
    /// The dim of the indices that holds the index vector.
    pub index_vector_dim: i64,
}

impl GatherDims {
    /// A gather's bundle; `None` when an attribute is missing or of another kind (which
    /// `create_op` and the verifier refuse, so a verified gather always has one).
    pub fn of(a: &Attrs) -> Option<GatherDims> {
        payload::Gather::of(a).map(GatherDims::from)
    }

    /// The op's attributes.
    pub fn attrs(self) -> Attrs {
        payload::Gather {
            offset_dims: &self.offset_dims,
            collapsed_slice_dims: &self.collapsed_slice_dims,
            operand_batching_dims: &self.operand_batching_dims,
            start_indices_batching_dims: &self.start_indices_batching_dims,
            start_index_map: &self.start_index_map,
            index_vector_dim: self.index_vector_dim,
            slice_sizes: &self.slice_sizes,
        }
        .attrs()
    }

    /// The five lists of `#stablehlo.gather<...>`, named and in its order.
    pub fn lists(&self) -> [(&'static str, &[i64]); 5] {
        [
            ("offset_dims", &self.offset_dims),
            ("collapsed_slice_dims", &self.collapsed_slice_dims),
            ("operand_batching_dims", &self.operand_batching_dims),
            ("start_indices_batching_dims", &self.start_indices_batching_dims),
            ("start_index_map", &self.start_index_map),
        ]
    }
}

impl ScatterDims {
    /// A scatter's bundle; `None` when an attribute is missing or of another kind.
    pub fn of(a: &Attrs) -> Option<ScatterDims> {
        payload::Scatter::of(a).map(ScatterDims::from)
    }

    /// Point updates: every operand dim is addressed by the index vector, which is the last
    /// dim of indices of rank `rank(updates) + 1`, and no window remains.
    pub fn points(operand_rank: usize) -> ScatterDims {
        let all: Vec<i64> = (0..operand_rank as i64).collect();
        ScatterDims {
            inserted_window_dims: all.clone(),
            scatter_dims_to_operand_dims: all,
            index_vector_dim: operand_rank as i64,
            ..ScatterDims::default()
        }
    }

    /// The op's attributes, with its kind.
    pub fn attrs(self, kind: ScatterKind) -> Attrs {
        payload::Scatter {
            update_window_dims: &self.update_window_dims,
            inserted_window_dims: &self.inserted_window_dims,
            input_batching_dims: &self.input_batching_dims,
            scatter_indices_batching_dims: &self.scatter_indices_batching_dims,
            scatter_dims_to_operand_dims: &self.scatter_dims_to_operand_dims,
            index_vector_dim: self.index_vector_dim,
            kind,
        }
        .attrs()
    }

    /// The five lists of `#stablehlo.scatter<...>`, named and in its order.
    pub fn lists(&self) -> [(&'static str, &[i64]); 5] {
        [
            ("update_window_dims", &self.update_window_dims),
            ("inserted_window_dims", &self.inserted_window_dims),
            ("input_batching_dims", &self.input_batching_dims),
            ("scatter_indices_batching_dims", &self.scatter_indices_batching_dims),
            ("scatter_dims_to_operand_dims", &self.scatter_dims_to_operand_dims),
        ]
    }
}

impl From<payload::Gather<'_>> for GatherDims {
    fn from(g: payload::Gather<'_>) -> GatherDims {
        GatherDims {
            offset_dims: g.offset_dims.to_vec(),
            collapsed_slice_dims: g.collapsed_slice_dims.to_vec(),
            operand_batching_dims: g.operand_batching_dims.to_vec(),
            start_indices_batching_dims: g.start_indices_batching_dims.to_vec(),
            start_index_map: g.start_index_map.to_vec(),
            index_vector_dim: g.index_vector_dim,
            slice_sizes: g.slice_sizes.to_vec(),
        }
    }
}

impl From<payload::Scatter<'_>> for ScatterDims {
    fn from(s: payload::Scatter<'_>) -> ScatterDims {
        ScatterDims {
            update_window_dims: s.update_window_dims.to_vec(),
            inserted_window_dims: s.inserted_window_dims.to_vec(),
            input_batching_dims: s.input_batching_dims.to_vec(),
            scatter_indices_batching_dims: s.scatter_indices_batching_dims.to_vec(),
            scatter_dims_to_operand_dims: s.scatter_dims_to_operand_dims.to_vec(),
            index_vector_dim: s.index_vector_dim,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_round_trip_through_attributes() {
        let g = GatherDims {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
            slice_sizes: vec![1, 4],
            ..GatherDims::default()
        };
        assert_eq!(GatherDims::of(&g.clone().attrs()), Some(g));
        let s = ScatterDims::points(3);
        let a = s.clone().attrs(ScatterKind::Add);
        assert_eq!(ScatterDims::of(&a), Some(s));
        assert_eq!(payload::Scatter::of(&a).map(|s| s.kind), Some(ScatterKind::Add));
    }

    #[test]
    fn a_missing_list_is_no_bundle() {
        let mut a = ScatterDims::points(2).attrs(ScatterKind::Replace);
        a.remove("input_batching_dims");
        assert_eq!(ScatterDims::of(&a), None);
    }
}
