//! ATen → IR lowerings, by family, behind one registry.
//!
//! Each lowering is a plain function `fn(&mut Ctx) -> R<Vec<Val>>`: it reads the node's named
//! arguments through [`Ctx`] (filling in schema defaults for omitted ones), builds IR through
//! the context's [`Builder`] (which carries the node's provenance), and returns one [`Val`]
//! per output of the node, flattened (a `Tensor[]` output contributes one entry per element).
//! Outputs nobody reads may be returned as [`Val::Absent`] to avoid building them.
//!
//! This module is the registry only. The node context and the builders that more than one family
//! uses are the floor, [`build`]; each family (one module, or a folder whose `mod.rs` holds its
//! table) imports the floor and never another family, and keeps its backward rules beside its
//! forward ones. `tests/module_dag.rs` keeps the modules free of cycles.

pub mod collective;
pub mod complex;
pub mod spectral;
pub mod creation;
pub mod data_dependent;
pub mod distance;
pub mod effects;
pub mod histogram;
pub mod elementwise;
pub mod index;
pub mod linalg;
pub mod lu;
pub mod matfn;
pub mod nn;
pub mod order;
pub mod reduce;
pub mod shape;
pub mod solve;
pub mod random;
pub mod sym;

pub mod build;

pub use build::{Ctx, OpFn, OutSlot, State, Val};
use build::defaults::full_target;
use std::collections::HashMap;
use std::sync::OnceLock;

fn registry() -> &'static HashMap<String, OpFn> {
    static REG: OnceLock<HashMap<String, OpFn>> = OnceLock::new();
    REG.get_or_init(|| {
        let tables: &[&[(&str, OpFn)]] = &[
            elementwise::OPS,
            shape::OPS,
            reduce::OPS,
            histogram::OPS,
            order::OPS,
            complex::OPS,
            spectral::OPS,
            solve::OPS,
            lu::OPS,
            matfn::OPS,
            distance::OPS,
            nn::OPS,
            index::OPS,
            data_dependent::OPS,
            creation::OPS,
            linalg::OPS,
            collective::OPS,
            sym::OPS,
            random::OPS,
            effects::OPS,
        ];
        let mut m = HashMap::new();
        for &t in tables {
            for (name, f) in t {
                m.insert(full_target(name), *f);
            }
        }
        m
    })
}

pub fn lookup(target: &str) -> Option<OpFn> {
    registry().get(target).copied()
}

/// Every target the importer lowers, sorted.
pub fn supported_targets() -> Vec<String> {
    let mut v: Vec<String> = registry().keys().cloned().collect();
    v.sort();
    v
}
