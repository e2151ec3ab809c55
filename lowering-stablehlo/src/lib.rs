//! tpuc IR → StableHLO MLIR text.
//!
//! [`emit_stablehlo`] verifies the module ([`tpuc_ir::verify()`]; an unverified module never
//! reaches code generation; [`emit`] takes the proof, [`tpuc_ir::Verified`], of a caller that
//! just verified it) and writes it in the pretty form `stablehlo-opt` prints:
//!
//! ```text
//! module @tpuc {
//!   func.func public @main(%arg0: tensor<4x16xf32> {tpuc.kind = "input", tpuc.name = "x"}) -> (tensor<4x16xf32> {tpuc.kind = "output", tpuc.name = "out"}) {
//!     %0 = stablehlo.negate %arg0 : tensor<4x16xf32> loc(#loc0)
//!     return %0 : tensor<4x16xf32>
//!   }
//! }
//! #loc0 = loc("neg"("model.py":3:0))
//! ```
//!
//! Needs: a module that verifies and whose types are all static (symbolic dims are reported as
//! [`EmitError::DynamicDim`] naming the op, its FX node and the dim; bucketing comes later).
//! Guarantees: byte-identical output for the same input; every op of the IR op table lowers to
//! plain StableHLO (plus `chlo.erf` only when [`ErfLowering::Chlo`] is asked for); float
//! constants are exact (decimal only where it reads back to the same bits, hex otherwise).
//!
//! Layout: `emitter.rs` writes typed ops and hands out SSA names, `literal.rs` spells
//! constants, `lower.rs` maps primitive ops one to one, `reduce.rs` writes the region-carrying
//! ops (reductions, windows, sort, scatter), `expand.rs` the high-level ops (softmax, gelu,
//! erf, layer_norm, attention) and `composite.rs` the `composite` op (a `stablehlo.composite`
//! whose region becomes a private decomposition function, shared between identical bodies).
//!
//! Tests (`tests/`) check every opcode with the real StableHLO verifier (jaxlib's bindings via
//! `tests/verify_stablehlo.py`), compile every case with XLA's CPU backend, and compare the
//! numerics of the tricky expansions with PyTorch (`tests/run_stablehlo.py`).

mod collective;
mod composite;
mod emitter;
mod expand;
mod literal;
mod lower;
mod reduce;

use std::fmt;
use tpuc_ir::{Module, Opcode, VerifyError};

/// How `erf` (the IR op, and GELU's exact form) is lowered.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum ErfLowering {
    /// Plain StableHLO: XLA's rational approximation for f32 (f16/bf16/f8 computed in f32),
    /// Cephes' erf/erfc pair for f64. Portable to every StableHLO consumer and VHLO.
    #[default]
    Polynomial,
    /// `chlo.erf`, which XLA legalizes itself (not serializable to a portable artifact without
    /// a CHLO legalization first).
    Chlo,
}

/// Options of [`emit_stablehlo`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmitOptions {
    /// The module's symbol name (`module @<name>`); empty for an anonymous `module`.
    pub module_name: String,
    /// Attach `loc("fx_node"("file.py":line:0))` locations (from the IR provenance) to every op,
    /// so a later compile error names the FX node it came from.
    pub debug_locations: bool,
    /// Lowering of `erf`.
    pub erf: ErfLowering,
    /// The ranks of a per-rank program (one replica each), for its collectives.
    pub ranks: Option<Ranks>,
    /// Mark every state update of `main` ([`tpuc_ir::Module::state_aliases`]) with
    /// `tf.aliasing_output`, so that a runtime can donate the old state to the new.
    pub donate_state: bool,
}

/// The ranks a per-rank program runs on and its process groups.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ranks {
    /// Ranks (replicas), numbered from 0.
    pub count: i64,
    /// By process-group name: the rank groups (every rank in one group; each group's
    /// collective runs among its members). Unnamed `"0"` is all ranks.
    pub groups: std::collections::BTreeMap<String, Vec<Vec<i64>>>,
}

impl Default for EmitOptions {
    fn default() -> Self {
        EmitOptions {
            module_name: "tpuc".to_string(),
            debug_locations: false,
            erf: ErfLowering::Polynomial,
            ranks: None,
            donate_state: false,
        }
    }
}

/// Why a module could not be emitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The module does not verify; every broken rule is listed.
    #[error("module does not verify ({} error(s)):\n{}", .0.len(), VerifyErrors(.0))]
    Invalid(Vec<VerifyError>),
    /// A symbolic dimension reached the emitter.
    #[error("dynamic dimension {dim} in {context}: StableHLO is emitted for static shapes; specialize to a bucket first (tpuc compile and run do; lower/opt take --bucket S=SIZE)")]
    DynamicDim {
        /// The dim as the IR prints it (`s0`, `(2*s0)`).
        dim: String,
        /// What carries it: "result of `add` (node `add_1` at model.py:3)" or
        /// "argument 0 (`x`) of @main".
        context: String,
    },
    /// An op (or an operand type of it) the StableHLO lowering does not handle.
    #[error("cannot lower `{opcode}`{context}: {reason}")]
    Unsupported {
        opcode: Opcode,
        /// " (node `x` at model.py:3)" or empty.
        context: String,
        reason: String,
    },
    /// The module has no function.
    #[error("module has no functions")]
    NoFunctions,
    /// A sharding that does not fit the program's arguments or the mesh.
    #[error("sharding: {0}")]
    Sharding(String),
}

struct VerifyErrors<'a>(&'a [VerifyError]);

impl fmt::Display for VerifyErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// Verifies `module` and writes it as StableHLO MLIR text.
pub fn emit_stablehlo(module: &Module, options: &EmitOptions) -> Result<String, EmitError> {
    emit(tpuc_ir::verify(module).map_err(EmitError::Invalid)?, options)
}

/// Writes a verified module as StableHLO MLIR text. Only a [`tpuc_ir::Verified`] module is
/// emitted: the proof comes from [`tpuc_ir::verify`], so a caller that has just verified (the
/// driver, once after its passes) does not verify twice, and none can skip it.
pub fn emit(module: tpuc_ir::Verified<'_>, options: &EmitOptions) -> Result<String, EmitError> {
    let module = module.module();
    if module.funcs.is_empty() {
        return Err(EmitError::NoFunctions);
    }
    emitter::check_static(module)?;
    let mut e = emitter::Emitter::new(module, options);
    e.module()?;
    Ok(e.finish())
}
