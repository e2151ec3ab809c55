//! The classification table: how [`specialize`](super::specialize) treats each opcode whose
//! operands are padded, with the rule in words (the end of every error message).

use tpuc_ir::Opcode;

/// How [`specialize`](super::specialize) treats an op whose operands are padded (the
/// classification table).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Handling {
    /// Position by position: padding stays padding, nothing to mask.
    Propagates,
    /// Masks padded dims it mixes with a neutral value first.
    Masks,
    /// Rewritten into ops that keep the valid part a prefix.
    Rewrites,
    /// Exact in the listed cases, an error naming the op otherwise.
    Conditional,
    /// Inlined, then its body is specialized.
    Inlines,
}

/// The classification of every opcode, with the rule in words.
pub fn handling(op: Opcode) -> (Handling, &'static str) {
    use Handling::*;
    use Opcode::*;
    match op {
        Constant => (Propagates, "static"),
        Iota => (Propagates, "valid prefix along its dimension, uniform along padded others"),
        Abs | Neg | Exp | Expm1 | Log | Log1p | Sqrt | Rsqrt | Tanh | Logistic | Sin | Cos | Tan | Erf | Floor | Ceil
        | RoundEven | Sign | Not | IsFinite | Convert | Add | Sub | Mul | Div | Rem | Pow | Max | Min | And | Or
        | Xor | Atan2 | Compare | Select | Gelu | Erfc | ErfInv | Lgamma | Digamma | Acosh | Asinh | Atanh
        | BesselI1e | Polygamma | Zeta | NextAfter | Real | Imag | Complex | ShiftLeft | ShiftRightArithmetic
        | ShiftRightLogical => {
            (Propagates, "elementwise; operands' padded dims must agree")
        }
        Fft => (Conditional, "transformed (trailing) dims not padded"),
        AllReduce | CollectiveBroadcast => (Propagates, "elementwise across ranks; every rank pads alike"),
        AllGather | ReduceScatter | AllToAll => (Conditional, "the gathered / scattered dim not padded"),
        Cholesky | TriangularSolve | Qr | HouseholderProduct | Eigh => {
            (Conditional, "matrix (trailing two) dims not padded")
        }
        BroadcastInDim => (Propagates, "broadcast dims become uniform"),
        Transpose => (Propagates, "permutes the layouts"),
        Reshape => (Conditional, "regroups factors; a padded factor cannot be split"),
        Slice => (Conditional, "a padded dim: whole, or a static slice inside the smallest size"),
        Concatenate => (Rewrites, "along a padded dim: joined, then each element gathered to its real place"),
        Pad => (Masks, "padding replaced by the pad value first; no interior or negative high padding"),
        Reverse => (Rewrites, "gather from n - 1 - i"),
        BindSize => (Conditional, "the operand whole along the dim, whose size is the bucket of the data-dependent size"),
        DotGeneral => (Masks, "contracting dims masked with 0 in both operands"),
        Convolution => (Masks, "input feature and spatial dims masked with 0; kernel not padded"),
        Reduce => (Masks, "reduced dims masked with the reduction's identity"),
        ArgReduce => (Masks, "masked with the lowest (argmax) or highest (argmin) value"),
        ReduceWindow => (Masks, "window dims masked with the window reduction's identity"),
        Scan => (Conditional, "prefix scans never read padding; a multi-factor dim is rejected"),
        Softmax | LogSoftmax => (Masks, "masked with -inf along the dimension"),
        LayerNorm => (Conditional, "normalized dims not padded"),
        Attention => (Masks, "padded keys set to 0 (values too) and masked out with -inf (false in a boolean mask); the head dim not padded"),
        Gather => (Conditional, "padded dims indexed, taken whole, batch dims of the indices, or batch dims laid out alike in operand and indices"),
        Scatter => (Masks, "padded index positions point out of bounds (skipped); update windows whole"),
        SelectAndScatterAdd => (Conditional, "no padded dims"),
        Sort => (Masks, "padding filled to sort last (NaN ascending, lowest descending; the sort is stable)"),
        Composite => (Inlines, "inlined when an operand is padded"),
        Return | Yield => (Propagates, "results keep their layouts"),
    }
}
