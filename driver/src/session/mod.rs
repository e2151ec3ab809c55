//! In-process compile-and-run for callers that hold programs and tensors in memory: the Python
//! extension behind `torch.compile(backend="tpuc")`.
//!
//! ```text
//! program JSON (bytes) ─► import_bytes ─► lower (passes, StableHLO) ─► compile_cached ─► Program
//! Program::set_weight(arg, bytes)   weights uploaded once, kept on the device
//! Program::run(&[&[u8]])            user inputs borrowed (no copy on our side) ─► output bytes
//! ```
//!
//! Needs: a torch.export-schema program whose inputs are parameters, buffers, constants and
//! user inputs (no weight data: the caller owns the tensors and supplies them with
//! [`Program::set_weight`]), static shapes.
//! Guarantees: every compile goes through the process's executable cache ([`cache`], set up from
//! the `TPUC_CACHE_*` variables on first use) with [`crate::exec::compile_cached`]; inputs are checked against the signature (byte
//! size per argument) before anything reaches PJRT; errors that concern FX nodes carry them
//! ([`error_node`], the first; [`error_nodes`], all of an import's failed nodes).

mod bucketed;
mod compile;
mod dtype;
mod errors;
mod run;
mod state;
mod upload;
mod weights;
#[cfg(test)]
mod tests;

use crate::exec::{CompileSummary, Target};
use crate::Timings;
use std::path::PathBuf;
use tpuc_frontend_fx::{InputSlot, OutputSlot};
use tpuc_ir::{ArgKind, TensorType};
use tpuc_runtime as rt;
pub use tpuc_runtime::{set_host_aliasing, transfers, Buffer as DeviceBuffer, HostArray, Transfers};

pub use compile::{cache, compile};
pub use dtype::torch_dtype_name;
pub use errors::{error_kind, error_node, error_nodes, NodeFailure};

/// How to compile one program.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub target: Target,
    /// TPU topology such as `v5e:2x2` (TPU only).
    pub topology: Option<String>,
    /// Explicit plugin file (default: discovered).
    pub plugin: Option<PathBuf>,
    /// Write the IR after every pass, the final IR, the StableHLO and the compile summary here,
    /// under the program's name.
    pub dump_dir: Option<PathBuf>,
    /// Verify the IR after every pass.
    pub verify_each: bool,
    /// Name of the program (file names of dumps, messages).
    pub name: String,
    /// For a program with symbolic dims: the bucket (padded size per symbol) to compile.
    pub bucket: Option<crate::dynamic::Sizes>,
    /// Matmul / convolution precision; `None`: the target's default.
    pub precision: Option<crate::Precision>,
    /// Convolution precision; `None`: `precision`, else the target's default for convolutions.
    pub conv_precision: Option<crate::Precision>,
    /// Matmuls and convolutions in bf16 with f32 accumulation.
    pub bf16: bool,
    /// Drop round trips through narrower float types.
    pub allow_excess_precision: bool,
    /// The default pipeline without `fuse`.
    pub no_fusion: bool,
    /// An SPMD program over a device mesh (CPU: one device per partition, in this process).
    pub sharding: Option<crate::MeshSharding>,
    /// Shardings chosen by a policy for the arguments `sharding` does not name.
    pub shard_policy: Option<crate::spmd::ShardPolicy>,
    /// A per-rank program (PyTorch's functional collectives): its ranks, one device each, and
    /// the rank groups of the process groups it names. Run with [`Program::run_ranks`].
    pub ranks: Option<crate::Ranks>,
    /// A program that updates its weights (a training step): each state update is aliased to
    /// the argument it updates, and [`Program::step`] donates the state to it.
    pub donate: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            target: Target::Cpu,
            topology: None,
            plugin: None,
            dump_dir: None,
            verify_each: false,
            name: "graph".to_string(),
            bucket: None,
            precision: None,
            conv_precision: None,
            bf16: false,
            allow_excess_precision: false,
            no_fusion: false,
            sharding: None,
            shard_policy: None,
            ranks: None,
            donate: false,
        }
    }
}

/// One argument of `main`.
#[derive(Clone, Debug)]
pub struct ArgInfo {
    pub name: String,
    pub kind: ArgKind,
    pub ty: TensorType,
    /// Dense byte size (static shapes only).
    pub bytes: usize,
}

/// A compiled program with its weights resident on the device.
pub struct Program {
    pub name: String,
    /// One entry per signature input, in order.
    pub inputs: Vec<InputSlot>,
    /// One entry per signature output, in order.
    pub outputs: Vec<OutputSlot>,
    /// The results that are statuses to check after each run (see [`crate::checks`]).
    pub checks: Vec<crate::checks::HostCheck>,
    /// `main`'s arguments.
    pub args: Vec<ArgInfo>,
    /// `main`'s results, without the data-dependent sizes a bucketed program returns after
    /// them ([`Program::size_results`]).
    pub results: Vec<TensorType>,
    pub stablehlo: String,
    pub summary: CompileSummary,
    pub timings: Timings,
    /// The serialized executable (what a TPU compile without a device produces).
    pub serialized: Vec<u8>,
    loaded: Option<rt::LoadedExecutable>,
    device: Option<rt::Device>,
    /// One slot per argument: the resident buffer of a weight once set (shared with the
    /// other buckets of the same graph by [`Program::adopt_weight`]).
    resident: Vec<Option<std::sync::Arc<rt::Buffer>>>,
    /// Per argument: the host address a resident buffer reads in place at every run (see
    /// [`Program::alias_weight`]); `None` for a copy or no value.
    aliases: Vec<Option<usize>>,
    /// Per symbol, the argument that takes its real size (bucketed programs).
    pub size_args: Vec<(String, usize)>,
    /// The data-dependent sizes (`nonzero`, `masked_select`) whose real values the raw
    /// results return past [`Program::results`], in that order (bucketed programs).
    pub size_results: Vec<String>,
    /// Per result, where its valid part is (bucketed programs; empty otherwise).
    pub result_layouts: Vec<tpuc_passes::specialize::Layout>,
    /// Positions of the user-input arguments.
    user_args: Vec<usize>,
    /// Bucketed programs: the user arguments given as tensors (those that are not symbol
    /// sizes), in order.
    pub tensor_inputs: Vec<usize>,
    /// An SPMD program's mesh and argument shardings (policy choices included).
    pub sharding: Option<crate::MeshSharding>,
    /// SPMD programs: per argument, a weight's shard on every device.
    resident_shards: Vec<Option<std::sync::Arc<Vec<rt::Buffer>>>>,
    /// Per-rank programs: the number of ranks (every argument is given per rank, per call).
    pub ranks: Option<i64>,
    /// Bucketed programs: host buffers the padded inputs are staged in, reused across calls.
    staging: std::sync::Mutex<Vec<Vec<Line>>>,
    /// Device buffers of scalar i64 inputs (sizes), by value (see [`Program::input`]).
    scalars: std::sync::Mutex<std::collections::HashMap<i64, std::sync::Arc<rt::Buffer>>>,
    /// `(argument, result)` per state update (programs compiled with `donate`): the result is
    /// the argument's next value (see [`Program::step`]).
    pub state_updates: Vec<(usize, usize)>,
}

/// 64 bytes aligned as the CPU plugin needs to read a host buffer in place: the unit of the
/// staging buffers padded inputs are written to.
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Line([u8; 64]);

/// One result of a bucketed run cut to its real shape: `bytes` begins with the result's dense
/// row-major values (it may run on past them, when the valid part is a prefix of the padded
/// result and so is handed over in place).
pub struct CutResult {
    pub bytes: HostArray,
    pub dims: Vec<i64>,
}
