//! IR → IR passes and the pass manager that runs them.
//!
//! A pass is a value implementing [`Pass`]: it has a name, mutates a [`Module`] and says
//! whether it changed anything. [`PassManager`] runs an explicit, ordered list of passes and,
//! when asked (always in tests and debug builds), runs the verifier after each one, so a pass
//! that breaks an invariant is named at once. It can also print or dump the IR after each pass
//! and time them.
//!
//! Every pass has a [`PassId`] in one registry: its name (what `tpuc opt --passes a,b,c`
//! accepts; unknown names are an error listing the valid ones), its summary and its
//! constructor. The default pipeline per target is [`default_pipeline`], one commented list of
//! `PassId`s. Every pass lives in its own file whose `//!`
//! header says what it needs and what it guarantees.

pub mod bf16;
pub mod canonicalize;
pub mod collapse_shapes;
pub mod cse;
pub mod dce;
pub mod eval;
pub mod excess_precision;
pub mod fold_constants;
pub mod fold_trivial;
pub mod fuse;
pub mod inline_weights;
mod manager;
pub mod narrow_64bit;
pub mod precision;
pub mod rewrite;
pub mod sdpa_guard;
pub mod specialize;
pub mod transpose_dot;
pub mod util;
pub mod weights_lhs;

pub use inline_weights::InlineWeights;
pub use manager::{format_timings, Pass, PassError, PassManager, PassTiming};

use std::collections::BTreeMap;
pub use tpuc_ir::Precision;
use tpuc_ir::TensorData;

/// What the program is compiled for; the default pipeline and some passes depend on it.
pub use tpuc_platform::Target;

/// The precision policy when the user gives none: TPU `default` (as TorchTPU and JAX do), CPU
/// `highest` (what PyTorch computes on a CPU).
pub fn default_precision(target: Target) -> Precision {
    match target {
        Target::Tpu => Precision::Default,
        Target::Cpu | Target::Gpu => Precision::Highest,
    }
}

/// The convolution precision of `target` when nothing is asked: the matmul default, but on GPU
/// `default` (TF32 on NVIDIA GPUs since Ampere), as torch convolves by default
/// (`torch.backends.cudnn.allow_tf32` is true) while its matmuls are `highest`.
pub fn default_conv_precision(target: Target) -> Precision {
    match target {
        Target::Gpu => Precision::Default,
        t => default_precision(t),
    }
}

/// Options that select and configure passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineOptions {
    pub target: Target,
    /// Matmul / convolution precision; `None` = the target's default.
    pub precision: Option<Precision>,
    /// Convolution precision; `None` = `precision` if set, else the target's default for
    /// convolutions ([`default_conv_precision`]).
    pub conv_precision: Option<Precision>,
    /// Matmuls and convolutions in bf16 with f32 accumulation.
    pub bf16: bool,
    /// Drop round trips through narrower float types (`f32 → bf16 → f32`).
    pub allow_excess_precision: bool,
    /// Leave out `fuse` (no composites).
    pub no_fusion: bool,
    /// The bucket `specialize` pads the symbolic dims to: a size per symbol.
    pub bucket: Option<BTreeMap<String, i64>>,
}

impl PipelineOptions {
    /// The precision policy in effect.
    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or_else(|| default_precision(self.target))
    }

    /// The convolution precision in effect.
    pub fn conv_precision(&self) -> Precision {
        self.conv_precision.or(self.precision).unwrap_or_else(|| default_conv_precision(self.target))
    }
}

macro_rules! registry {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $summary:literal; )*) => {
        /// Every pass, by name: the one registry the pipelines, `--passes` and the docs use.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum PassId { $( $(#[$doc])* $variant ),* }

        impl PassId {
            /// Every pass in registry order.
            pub const ALL: &'static [PassId] = &[$(PassId::$variant),*];

            /// The name used on the command line, in dumps and in timings.
            pub fn name(self) -> &'static str {
                match self { $(PassId::$variant => $name),* }
            }

            /// One line on what the pass does.
            pub fn summary(self) -> &'static str {
                match self { $(PassId::$variant => $summary),* }
            }
        }
    };
}

registry! {
    Specialize = "specialize", "one bucket of a symbolic program: static shapes, padding masked, real sizes as arguments (--bucket)";
    InlineWeights = "inline-weights", "weight arguments of main → constants";
    Canonicalize = "canonicalize", "fold-constants + fold-trivial + collapse-shapes to a fixed point, then dce";
    FoldConstants = "fold-constants", "ops on constants → constants";
    FoldTrivial = "fold-trivial", "x+0, x*1, same-type converts, identity reshapes/transposes/broadcasts → x";
    CollapseShapes = "collapse-shapes", "reshape/transpose/broadcast chains → one op";
    Cse = "cse", "merge identical pure ops";
    Dce = "dce", "remove unused pure ops";
    SdpaGuard = "sdpa-guard", "drop the fully-masked-row guard of decomposed attention when the mask keeps a key in every row";
    TransposeIntoDot = "transpose-into-dot", "transposes feeding dot_general → its dimension numbers";
    WeightsLhs = "weights-lhs", "x · wᵀ with the larger w → (w · xᵀ)ᵀ (XLA CPU repacks a matmul's rhs on every call)";
    Fuse = "fuse", "attention, rope, gelu, layer/rms norm, softmax, log-softmax, silu, swiglu → stablehlo.composite";
    Narrow64 = "narrow-64bit", "TPU legalization: f64 as f32, i64 that fits as i32, converts at the boundary";
    Precision = "precision", "dot/convolution precision config from the policy (--precision, else per target)";
    Bf16 = "bf16", "matmuls and convolutions in bf16 with f32 accumulation";
    ExcessPrecision = "excess-precision", "drop f32 -> bf16 -> f32 style round trips";
}

impl std::fmt::Display for PassId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PassId {
    type Err = PassError;
    /// A registered name; anything else is [`PassError::UnknownPass`] listing the valid ones.
    fn from_str(name: &str) -> Result<PassId, PassError> {
        PassId::ALL
            .iter()
            .copied()
            .find(|p| p.name() == name)
            .ok_or_else(|| PassError::UnknownPass { name: name.to_string(), valid: pass_names() })
    }
}

impl PassId {
    /// Creates the pass. `weights` is what `inline-weights` embeds.
    pub fn create<'w>(self, options: &PipelineOptions, weights: &'w BTreeMap<String, TensorData>) -> Box<dyn Pass + 'w> {
        match self {
            PassId::Specialize => Box::new(specialize::Specialize { sizes: options.bucket.clone() }),
            PassId::InlineWeights => Box::new(InlineWeights { weights }),
            PassId::Canonicalize => Box::new(canonicalize::Canonicalize),
            PassId::FoldConstants => Box::new(fold_constants::FoldConstants),
            PassId::FoldTrivial => Box::new(fold_trivial::FoldTrivial),
            PassId::CollapseShapes => Box::new(collapse_shapes::CollapseShapes),
            PassId::Cse => Box::new(cse::Cse),
            PassId::Dce => Box::new(dce::Dce),
            PassId::SdpaGuard => Box::new(sdpa_guard::SdpaGuard),
            PassId::TransposeIntoDot => Box::new(transpose_dot::TransposeIntoDot),
            PassId::WeightsLhs => Box::new(weights_lhs::WeightsLhs),
            PassId::Fuse => Box::new(fuse::Fuse),
            PassId::Narrow64 => Box::new(narrow_64bit::Narrow64::default()),
            PassId::Precision => Box::new(precision::SetPrecision { precision: options.precision(), conv: options.conv_precision() }),
            PassId::Bf16 => Box::new(bf16::Bf16Matmuls),
            PassId::ExcessPrecision => Box::new(excess_precision::ExcessPrecision),
        }
    }
}

/// The names of every registered pass, comma-separated (for error messages).
pub fn pass_names() -> String {
    PassId::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
}

/// Creates the pass called `name`. `weights` is what `inline-weights` embeds.
pub fn create_pass<'w>(
    name: &str,
    options: &PipelineOptions,
    weights: &'w BTreeMap<String, TensorData>,
) -> Result<Box<dyn Pass + 'w>, PassError> {
    Ok(name.parse::<PassId>()?.create(options, weights))
}

/// Whether `transpose-into-dot` runs on the XLA CPU plugin. Measured (XLA CPU plugin
/// 0.115, f32, execute-time medians of 5 x 300 runs, interleaved): x[M,K] · w[N,K]ᵀ as
/// `transpose + [1]x[0]` vs `[1]x[1]`: 4x16x32 35.4 vs 36.1 µs, 16x32x96 39.3 vs 39.4 µs
/// (equal within noise), 128x768x768 1781 vs 1675 µs and 128x768x3072 6680 vs 6609 µs (the
/// folded dot slightly faster). It never measured slower, so CPU folds too.
pub const TRANSPOSE_INTO_DOT_ON_CPU: bool = true;

/// The default pipeline for `options` (without `inline-weights`, which the driver puts first
/// when asked). Every ordering constraint is commented.
pub fn default_pipeline(options: &PipelineOptions) -> Vec<PassId> {
    let tpu = options.target == Target::Tpu;
    let mut p = Vec::new();
    // 1. Merge duplicates first, so patterns see one value where the program computed the
    //    same thing twice (a layer norm's `x - mean`), and shared masks and constants.
    p.push(PassId::Cse);
    // 2. The SDPA guard goes before fusion so attention bodies do not carry it; it
    //    evaluates the mask itself and needs no folding.
    p.push(PassId::SdpaGuard);
    p.push(PassId::Dce);
    // 3. TPU legality before fusion: it leaves op regions alone, so composite bodies must be
    //    made from already narrowed ops.
    if tpu {
        p.push(PassId::Narrow64);
    }
    // 4. Fusion before `canonicalize`, which would merge the head transposes that delimit
    //    attention's q, k and v. The patterns look through broadcast scalars themselves.
    if !options.no_fusion {
        p.push(PassId::Fuse);
    }
    // 5. Cleanup (of composite bodies too): splat constants instead of broadcast scalars, one
    //    reshape/transpose/broadcast instead of chains, identities gone.
    p.push(PassId::Canonicalize);
    // 6. After canonicalize: constants folded to the same value are now equal ops.
    p.push(PassId::Cse);
    // 7. Layout: transposes into dot dimension numbers (after canonicalize merged transpose
    //    chains). On TPU XLA assigns layouts itself; on CPU see TRANSPOSE_INTO_DOT_ON_CPU.
    if tpu || TRANSPOSE_INTO_DOT_ON_CPU {
        p.push(PassId::TransposeIntoDot);
    }
    // 7b. CPU only: the larger matmul operand (the weight) as the lhs, after
    //     `transpose-into-dot` has turned transposed weights into `[1]x[1]` dots. On TPU XLA
    //     chooses operand layouts itself.
    if !tpu {
        p.push(PassId::WeightsLhs);
    }
    // 8. Precision once the structure is final, composite bodies included; `bf16` first so
    //    `precision` sees the final operand types.
    if options.bf16 {
        p.push(PassId::Bf16);
    }
    p.push(PassId::Precision);
    if options.allow_excess_precision {
        p.push(PassId::ExcessPrecision);
    }
    // 9. Whatever the passes above left: converts of constant weights, dead transposes.
    p.push(PassId::Canonicalize);
    p
}

fn failed(pass: &str, e: impl std::fmt::Display) -> PassError {
    PassError::Failed { pass: pass.to_string(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_pass_is_created_under_its_own_name() {
        let weights = BTreeMap::new();
        for &id in PassId::ALL {
            assert_eq!(id.create(&PipelineOptions::default(), &weights).name(), id.name());
            assert_eq!(id.name().parse::<PassId>().unwrap(), id);
        }
        let err = "no-such-pass".parse::<PassId>().unwrap_err().to_string();
        assert!(err.contains("unknown pass `no-such-pass`") && err.contains("canonicalize"), "{err}");
    }
}
