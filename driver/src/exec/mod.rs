//! Compiling StableHLO to executables through PJRT plugins and running them: what
//! `tpuc compile`, `tpuc run` and `tpuc plugins` do.

mod cache;
mod clients;
mod compile;
mod plugins;
mod runner;
mod support;

use crate::tensor::NpyError;
use std::path::PathBuf;
pub use tpuc_cache::Cache;
use tpuc_runtime as rt;

pub use rt::Target;

pub use cache::{compile_cached, key_components, Provenance};
pub use compile::{clean_cost, compile_stablehlo, tpu_chips_here};
pub use plugins::{describe_plugins, plugin_package, plugin_report};
pub(crate) use runner::{arg_specs, argument_list, check_inputs, execute_step, loaded_of, result_types, weight_of, ArgSpec};
pub use runner::{element_type, run, RunTimes, Runner};
pub use support::check_target_support;

/// How to compile.
#[derive(Clone, Debug)]
pub struct CompileRequest {
    pub target: Target,
    /// TPU topology name such as `v5e:2x2` (TPU only).
    pub topology: Option<String>,
    /// SPMD partitions (1 = no partitioning): the devices of the mesh of a program with
    /// Shardy annotations, else a replicated program.
    pub partitions: i64,
    /// Replicas, one per rank of a per-rank program (collectives across replicas); 1 = none.
    pub replicas: i64,
    /// Explicit plugin path (default: discovered).
    pub plugin: Option<PathBuf>,
}

impl CompileRequest {
    /// The devices the program runs on: partitions times replicas.
    pub fn devices(&self) -> i64 {
        self.partitions.max(1) * self.replicas.max(1)
    }
}

impl Default for CompileRequest {
    fn default() -> Self {
        CompileRequest { target: Target::Cpu, topology: None, partitions: 1, replicas: 1, plugin: None }
    }
}

/// What a compile produced, for the summary line and `--json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CompileSummary {
    pub target: String,
    pub topology: Option<String>,
    pub plugin: String,
    pub pjrt_api_version: String,
    pub platform: String,
    pub partitions: i64,
    /// Ranks of a per-rank program (XLA replicas).
    pub replicas: i64,
    pub compile_seconds: f64,
    pub executable_bytes: usize,
    /// Cost analysis figures where the plugin offers them, under tpuc's names ([`clean_cost`]):
    /// `flops`, `transcendentals`, `bytes_accessed`, `optimal_seconds`.
    pub cost: std::collections::BTreeMap<String, f64>,
    /// Compiled memory stats in bytes where the plugin offers them.
    pub memory: Option<MemoryStats>,
    /// Where the executable came from: "miss" (compiled), "memory", "disk", "shm" or "remote".
    pub cache: &'static str,
    /// The cache key (hex), when the cache was used.
    pub cache_key: Option<String>,
    /// Why the cache missed, or how much compile time a hit saved.
    pub cache_note: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MemoryStats {
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub generated_code_bytes: i64,
}

impl CompileSummary {
    /// One line for humans.
    pub fn line(&self) -> String {
        let mut s = format!("compiled for {}", self.target);
        if let Some(t) = &self.topology {
            s += &format!(" ({t})");
        }
        if self.partitions > 1 {
            s += &format!(", {} partitions", self.partitions);
        }
        if self.replicas > 1 {
            s += &format!(", {} ranks", self.replicas);
        }
        s += &format!(
            " in {:.3} s: executable {} bytes, cache {}",
            self.compile_seconds, self.executable_bytes, self.cache
        );
        for key in ["flops", "bytes_accessed", "optimal_seconds"] {
            if let Some(v) = self.cost.get(key) {
                s += &format!(", {key} {v:.4e}");
            }
        }
        if let Some(m) = &self.memory {
            s += &format!(
                ", memory: arguments {} B, outputs {} B, temp {} B, code {} B",
                m.argument_bytes, m.output_bytes, m.temp_bytes, m.generated_code_bytes
            );
        }
        if let Some(note) = &self.cache_note {
            s += &format!(" ({note})");
        }
        s += &format!(" [{} {}, PJRT API {}]", self.platform, self.plugin, self.pjrt_api_version);
        s
    }
}

/// A compiled program: the serialized executable and, on a host that can run it, a loaded one.
pub struct Compiled {
    pub summary: CompileSummary,
    pub serialized: Vec<u8>,
    pub loaded: Option<rt::LoadedExecutable>,
}

/// Errors of compiling and running (wrapped in [`crate::DriverError::Exec`]).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Plugin(#[from] rt::Error),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    BadInput(String),
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}
