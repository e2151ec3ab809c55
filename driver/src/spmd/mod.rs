//! Programs over several devices.
//!
//! - SPMD over a device mesh: the mesh and argument shardings given on the command line
//!   (`--mesh x=2,y=2`, `--shard fc1.weight=y,_`) or chosen by a policy ([`ShardPolicy`]),
//!   checked against the program, recorded in the IR ([`MeshSharding::to_ir`]) and emitted
//!   from there as Shardy. On the host each device gets its block of every argument (device p
//!   holds the block at p's row-major position in the mesh); a result comes back whole from
//!   the first device when replicated, or joined from every device's block when split
//!   ([`ShardedRunner`]).
//! - Per-rank programs (PyTorch's functional collectives): one XLA replica per rank, process
//!   groups resolved by [`Ranks`]; inputs and results carry all ranks' values stacked along a
//!   new leading dim ([`RankRunner`]).

mod blocks;
mod plan;
mod policy;
mod runners;
mod validate;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use tpuc_ir::Module;

pub use blocks::{assemble, shard_for_device};
pub use plan::{format_shard, parse_group, parse_mesh, parse_shard, ShardPlan};
pub use policy::{apply_policy, ShardPolicy};
pub(crate) use runners::{device_argument_lists, outputs_to_host};
pub use runners::{join_results, RankRunner, ShardedRunner};
pub use validate::check;

/// A device mesh and the shardings of `main`'s arguments (by name, as the user gives them) and
/// results, for a program partitioned over the mesh's devices (device p holds the shard at p's
/// row-major position in the mesh). [`MeshSharding::to_ir`] makes it the module's
/// [`tpuc_ir::Sharding`] (by argument index), which the emitter writes as Shardy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MeshSharding {
    /// Axis names and sizes, major to minor.
    pub axes: Vec<(String, i64)>,
    /// By argument name (`tpuc.name`): for each dim, the mesh axes it is split over, major
    /// first (none: that dim is whole on every device).
    pub args: std::collections::BTreeMap<String, Vec<Vec<String>>>,
    /// By result index, the same.
    pub results: std::collections::BTreeMap<usize, Vec<Vec<String>>>,
}


impl MeshSharding {
    /// The IR's sharding of `module`'s `main`: arguments by index (an argument the sharding
    /// names but `main` lacks is an error; [`check`] has said so first).
    pub fn to_ir(&self, module: &Module) -> Result<tpuc_ir::Sharding, String> {
        let f = module.main_func().ok_or("the module has no `main`")?;
        let mut args = BTreeMap::new();
        for (name, dims) in &self.args {
            let i = f.args.iter().position(|a| &a.name == name).ok_or_else(|| format!("no argument `{name}`"))?;
            args.insert(i, dims.clone());
        }
        Ok(tpuc_ir::Sharding { mesh: self.axes.clone(), args, results: self.results.clone() })
    }

    /// The sharding a module carries (IR text with a `mesh`), by argument name.
    pub fn of_ir(sh: &tpuc_ir::Sharding, module: &Module) -> MeshSharding {
        let names: Vec<String> = module.main_func().map(|f| f.args.iter().map(|a| a.name.clone()).collect()).unwrap_or_default();
        let args = sh.args.iter().filter_map(|(&i, d)| Some((names.get(i)?.clone(), d.clone()))).collect();
        MeshSharding { axes: sh.mesh.clone(), args, results: sh.results.clone() }
    }
}

/// Devices in the mesh.
pub fn device_count(sh: &MeshSharding) -> i64 {
    sh.axes.iter().map(|(_, s)| s).product()
}

/// The size of mesh axis `name`, if the mesh has it.
fn axis_size(axes: &[(String, i64)], name: &str) -> Option<i64> {
    axes.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
}
