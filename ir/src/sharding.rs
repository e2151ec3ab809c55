//! SPMD sharding as part of the program: the module's device mesh (axis names and sizes, major
//! to minor) and, in the metadata of each sharded argument or result of `main`, the mesh axes
//! each of its dims is split over. Device `p` holds the shard at `p`'s row-major position in
//! the mesh; values without a sharding are whole on every device. Because the split sits on the
//! argument itself, a pass that drops or adds arguments (`inline-weights`, `specialize`) keeps
//! every other argument's split in place. The emitter writes it as Shardy (`sdy.mesh`,
//! `sdy.sharding`); the verifier checks it against the types.
//!
//! Text form: a module-level `mesh ["x" = 2, "y" = 2]`, and `sharding = [{"x"}, {}]` in the
//! metadata of an argument or result of `main`.

use crate::print::quote;
use std::fmt::Write;

/// Per dim, the mesh axes it is split over, major first (empty: not split).
pub type DimAxes = Vec<Vec<String>>;

/// A device mesh: axis names and sizes, major to minor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mesh {
    pub axes: Vec<(String, i64)>,
}

impl Mesh {
    /// The number of devices the mesh spans.
    pub fn devices(&self) -> i64 {
        self.axes.iter().map(|(_, n)| n).product()
    }

    /// The size of axis `name`.
    pub fn axis_size(&self, name: &str) -> Option<i64> {
        self.axes.iter().find(|(a, _)| a == name).map(|(_, n)| *n)
    }
}

/// `["x" = 2, "y" = 2]`.
pub fn mesh_text(mesh: &[(String, i64)]) -> String {
    let mut out = String::from("[");
    for (i, (name, size)) in mesh.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&quote(name));
        let _ = write!(out, " = {size}");
    }
    out.push(']');
    out
}

/// `[{"x"}, {}]`.
pub fn dim_axes_text(dims: &DimAxes) -> String {
    let mut out = String::from("[");
    for (i, axes) in dims.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('{');
        for (j, a) in axes.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            out.push_str(&quote(a));
        }
        out.push('}');
    }
    out.push(']');
    out
}

/// Why `dims` cannot shard a value of type `ty` over `mesh`: one entry per dim, axes
/// of the mesh, each axis at most once, static dims divisible by the devices they are split over.
pub fn dim_axes_error(mesh: &Mesh, dims: &DimAxes, ty: &crate::TensorType) -> Option<String> {
    if dims.len() != ty.rank() {
        return Some(format!("names {} dims for a value of rank {}", dims.len(), ty.rank()));
    }
    let mut seen = std::collections::HashSet::new();
    for (d, axes) in dims.iter().enumerate() {
        let mut ways = 1i64;
        for a in axes {
            let Some(n) = mesh.axis_size(a) else { return Some(format!("dim {d}: axis `{a}` is not in the mesh")) };
            if !seen.insert(a.as_str()) {
                return Some(format!("axis `{a}` splits two dims"));
            }
            ways = ways.saturating_mul(n);
        }
        if let Some(size) = ty.dims[d].as_static() {
            if size % ways != 0 {
                return Some(format!("dim {d} of size {size} does not split {ways} ways"));
            }
        }
    }
    None
}
