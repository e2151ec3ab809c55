//! The op table: every op's name, operand and result counts, attributes and traits.
//!
//! Ops are tensor-level and explicit: no implicit broadcasting and no implicit dtype promotion
//! (the importer inserts `broadcast_in_dim` and `convert`), so operand types of elementwise ops
//! match exactly. Primitive ops follow StableHLO's semantics and attribute names, which keeps
//! lowering one-to-one; a few high-level ops (`softmax`, `log_softmax`, `gelu`, `layer_norm`,
//! `attention`) keep what the model said so later passes can match them, and the StableHLO
//! emitter expands them. Shape rules live in [`crate::infer`].

use crate::attr::Attr;
use crate::enums::{
    ArgReduceKind, Direction, EnumSpec, GeluApproximation, Precision, ReduceKind, ScanKind, ScatterKind, WindowKind, FftType};
use std::fmt;
use std::str::FromStr;

/// How many operands or results an op takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
    Between(usize, usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Between(a, b) => (a..=b).contains(&n),
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Between(a, b) => write!(f, "{a} to {b}"),
        }
    }
}

/// The kind an attribute must have.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Bool,
    Int,
    Float,
    Str,
    Ints,
    DType,
    Tensor,
    /// A word from a closed set ([`crate::enums`]), stored as a string.
    Enum(EnumSpec),
}

impl AttrKind {
    pub fn matches(self, a: &Attr) -> bool {
        matches!(
            (self, a),
            (AttrKind::Bool, Attr::Bool(_))
                | (AttrKind::Int, Attr::Int(_))
                | (AttrKind::Float, Attr::Float(_))
                | (AttrKind::Str, Attr::Str(_))
                | (AttrKind::Ints, Attr::Ints(_))
                | (AttrKind::DType, Attr::DType(_))
                | (AttrKind::Tensor, Attr::Tensor(_))
        ) || matches!((self, a), (AttrKind::Enum(e), Attr::Str(s)) if e.names.contains(&s.as_str()))
    }
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Bool => "bool",
            AttrKind::Int => "int",
            AttrKind::Float => "float",
            AttrKind::Str => "string",
            AttrKind::Ints => "int list",
            AttrKind::DType => "dtype",
            AttrKind::Tensor => "tensor",
            AttrKind::Enum(e) => e.what,
        }
    }
}

/// One attribute an op accepts.
#[derive(Copy, Clone, Debug)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    pub required: bool,
}

const fn req(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec { name, kind, required: true }
}
const fn opt(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec { name, kind, required: false }
}

/// Trait flags of an op.
pub mod traits {
    /// Result has the operands' shape; applied element by element.
    pub const ELEMENTWISE: u32 = 1;
    /// Ends a block.
    pub const TERMINATOR: u32 = 2;
    /// No side effects: removable when unused, mergeable when identical.
    pub const PURE: u32 = 4;
    /// Operand order does not matter.
    pub const COMMUTATIVE: u32 = 8;
    /// High-level op expanded by the emitter (candidate for composites).
    pub const COMPOSITE: u32 = 16;
    /// Accepts attributes beyond those the op table lists (the `composite` op's attributes).
    pub const OPEN_ATTRS: u32 = 32;
}
use traits::*;

/// Static description of an op.
#[derive(Debug)]
pub struct OpInfo {
    pub name: &'static str,
    pub operands: Arity,
    pub results: Arity,
    pub attrs: &'static [AttrSpec],
    pub traits: u32,
    /// Number of regions the op carries.
    pub regions: usize,
    pub doc: &'static str,
}

macro_rules! ops {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal, $operands:expr, $results:expr,
        [$($field:ident: $presence:ident $kind:ident $(($enum:ident))?),*], $traits:expr, $regions:expr; )*) => {
        /// An op's kind. See [`Opcode::info`] for its description.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Opcode { $($variant),* }

        impl Opcode {
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant),*];

            pub fn info(self) -> &'static OpInfo {
                match self {
                    $(Opcode::$variant => {
                        const INFO: OpInfo = OpInfo {
                            name: $name,
                            operands: $operands,
                            results: $results,
                            attrs: &[$($presence(stringify!($field), attr_kind!($kind $(($enum))?))),*],
                            traits: $traits,
                            regions: $regions,
                            doc: concat!($($doc),*),
                        };
                        &INFO
                    })*
                }
            }
        }
    };
}

/// The [`AttrKind`] of a kind token of the op table (`Ints`, `Enum(ReduceKind)`).
macro_rules! attr_kind {
    (Enum($enum:ident)) => {
        AttrKind::Enum(EnumSpec::of::<$enum>())
    };
    ($kind:ident) => {
        AttrKind::$kind
    };
}

use Arity::{AtLeast, Between, Exactly};

const EW1: u32 = ELEMENTWISE | PURE;
const EW2C: u32 = ELEMENTWISE | PURE | COMMUTATIVE;

/// The op table, handed to the macro `$then`: `ops` here builds [`Opcode`] and its [`OpInfo`],
/// and [`crate::payload`] builds each op's typed view of its attributes from the same lines. An
/// entry is `Variant = "name", operands, results, [attributes], traits, regions;` where an
/// attribute is `field: req Kind` or `field: opt Kind`, the field's name being the attribute's and
/// the kind an [`AttrKind`] (`Ints`, `Enum(ReduceKind)`, ...).
macro_rules! op_table {
    ($then:ident) => { $then! {
    // ---- constants and index generators
    /// A dense constant; the result type is the value's type.
    Constant = "constant", Exactly(0), Exactly(1), [value: req Tensor], PURE, 0;
    /// Indices 0, 1, ... along `dimension`, broadcast over the (given) result type.
    Iota = "iota", Exactly(0), Exactly(1), [dimension: req Int], PURE, 0;

    // ---- elementwise unary (result type = operand type)
    /// |x|
    Abs = "abs", Exactly(1), Exactly(1), [], EW1, 0;
    /// -x
    Neg = "neg", Exactly(1), Exactly(1), [], EW1, 0;
    /// e^x
    Exp = "exp", Exactly(1), Exactly(1), [], EW1, 0;
    /// e^x - 1
    Expm1 = "expm1", Exactly(1), Exactly(1), [], EW1, 0;
    /// natural log
    Log = "log", Exactly(1), Exactly(1), [], EW1, 0;
    /// log(1 + x)
    Log1p = "log1p", Exactly(1), Exactly(1), [], EW1, 0;
    /// square root
    Sqrt = "sqrt", Exactly(1), Exactly(1), [], EW1, 0;
    /// 1 / sqrt(x)
    Rsqrt = "rsqrt", Exactly(1), Exactly(1), [], EW1, 0;
    /// hyperbolic tangent
    Tanh = "tanh", Exactly(1), Exactly(1), [], EW1, 0;
    /// 1 / (1 + e^-x)
    Logistic = "logistic", Exactly(1), Exactly(1), [], EW1, 0;
    /// sine
    Sin = "sin", Exactly(1), Exactly(1), [], EW1, 0;
    /// cosine
    Cos = "cos", Exactly(1), Exactly(1), [], EW1, 0;
    /// tangent
    Tan = "tan", Exactly(1), Exactly(1), [], EW1, 0;
    /// error function
    Erf = "erf", Exactly(1), Exactly(1), [], EW1, 0;
    /// complementary error function, 1 - erf(x) without cancellation (CHLO's `erfc`)
    Erfc = "erfc", Exactly(1), Exactly(1), [], EW1, 0;
    /// inverse error function on (-1, 1) (CHLO's `erf_inv`)
    ErfInv = "erf_inv", Exactly(1), Exactly(1), [], EW1, 0;
    /// log |Γ(x)| (CHLO's `lgamma`)
    Lgamma = "lgamma", Exactly(1), Exactly(1), [], EW1, 0;
    /// ψ(x) = d/dx log Γ(x) (CHLO's `digamma`)
    Digamma = "digamma", Exactly(1), Exactly(1), [], EW1, 0;
    /// inverse hyperbolic cosine (CHLO's `acosh`)
    Acosh = "acosh", Exactly(1), Exactly(1), [], EW1, 0;
    /// inverse hyperbolic sine (CHLO's `asinh`)
    Asinh = "asinh", Exactly(1), Exactly(1), [], EW1, 0;
    /// inverse hyperbolic tangent (CHLO's `atanh`)
    Atanh = "atanh", Exactly(1), Exactly(1), [], EW1, 0;
    /// exponentially scaled modified Bessel function of order 1, e^-|x|·I1(x) (CHLO's `bessel_i1e`)
    BesselI1e = "bessel_i1e", Exactly(1), Exactly(1), [], EW1, 0;
    /// round toward -inf
    Floor = "floor", Exactly(1), Exactly(1), [], EW1, 0;
    /// round toward +inf
    Ceil = "ceil", Exactly(1), Exactly(1), [], EW1, 0;
    /// round half to even
    RoundEven = "round_even", Exactly(1), Exactly(1), [], EW1, 0;
    /// -1, 0 or 1
    Sign = "sign", Exactly(1), Exactly(1), [], EW1, 0;
    /// logical not (bool) / bitwise not (integers)
    Not = "not", Exactly(1), Exactly(1), [], EW1, 0;
    /// true where x is neither infinite nor NaN; result is bool
    IsFinite = "is_finite", Exactly(1), Exactly(1), [], EW1, 0;
    /// element type conversion; the result type has the operand's shape
    Convert = "convert", Exactly(1), Exactly(1), [], EW1, 0;
    /// real part of a complex value (result: the part's float type)
    Real = "real", Exactly(1), Exactly(1), [], EW1, 0;
    /// imaginary part of a complex value (result: the part's float type)
    Imag = "imag", Exactly(1), Exactly(1), [], EW1, 0;
    /// complex value from real and imaginary parts of one float type
    Complex = "complex", Exactly(2), Exactly(1), [], EW1, 0;

    // ---- elementwise binary (operands and result of one type)
    Add = "add", Exactly(2), Exactly(1), [], EW2C, 0;
    Sub = "sub", Exactly(2), Exactly(1), [], EW1, 0;
    Mul = "mul", Exactly(2), Exactly(1), [], EW2C, 0;
    /// division; integer division truncates toward zero
    Div = "div", Exactly(2), Exactly(1), [], EW1, 0;
    /// remainder with the sign of the dividend
    Rem = "rem", Exactly(2), Exactly(1), [], EW1, 0;
    Pow = "pow", Exactly(2), Exactly(1), [], EW1, 0;
    Max = "max", Exactly(2), Exactly(1), [], EW2C, 0;
    Min = "min", Exactly(2), Exactly(1), [], EW2C, 0;
    /// logical (bool) or bitwise (integers) and
    And = "and", Exactly(2), Exactly(1), [], EW2C, 0;
    Or = "or", Exactly(2), Exactly(1), [], EW2C, 0;
    Xor = "xor", Exactly(2), Exactly(1), [], EW2C, 0;
    /// lhs shifted left by rhs bits (integers); an amount read as unsigned that is at least
    /// the bit width gives 0, as XLA computes it (lit test lower/shifts.tpuc)
    ShiftLeft = "shift_left", Exactly(2), Exactly(1), [], EW1, 0;
    /// lhs shifted right by rhs bits, filling with its top bit (integers); an amount read as
    /// unsigned that is at least the bit width gives the fill (0 or -1), as XLA does
    ShiftRightArithmetic = "shift_right_arithmetic", Exactly(2), Exactly(1), [], EW1, 0;
    /// lhs shifted right by rhs bits, filling with zeros (integers); an amount read as unsigned
    /// that is at least the bit width gives 0, as XLA does
    ShiftRightLogical = "shift_right_logical", Exactly(2), Exactly(1), [], EW1, 0;
    Atan2 = "atan2", Exactly(2), Exactly(1), [], EW1, 0;
    /// polygamma(n, x): the n-th derivative of ψ at x, n a non-negative integer held in a float
    /// (CHLO's `polygamma`)
    Polygamma = "polygamma", Exactly(2), Exactly(1), [], EW1, 0;
    /// Hurwitz zeta ζ(s, q) = Σₖ (k + q)^-s (CHLO's `zeta`)
    Zeta = "zeta", Exactly(2), Exactly(1), [], EW1, 0;
    /// the next float after x toward y (CHLO's `next_after`)
    NextAfter = "next_after", Exactly(2), Exactly(1), [], EW1, 0;
    /// comparison by `direction` (eq, ne, lt, le, gt, ge); result is bool
    Compare = "compare", Exactly(2), Exactly(1), [direction: req Enum(Direction)], EW1, 0;
    /// pred ? on_true : on_false, element by element (pred is bool of the same shape)
    Select = "select", Exactly(3), Exactly(1), [], EW1, 0;

    // ---- shape ops
    /// operand dim i goes to result dim `broadcast_dimensions[i]` (size equal or 1)
    BroadcastInDim = "broadcast_in_dim", Exactly(1), Exactly(1), [broadcast_dimensions: req Ints], PURE, 0;
    /// same elements, row-major, new shape (given by the result type)
    Reshape = "reshape", Exactly(1), Exactly(1), [], PURE, 0;
    /// result dim i = operand dim permutation[i]
    Transpose = "transpose", Exactly(1), Exactly(1), [permutation: req Ints], PURE, 0;
    /// static strided slice
    Slice = "slice", Exactly(1), Exactly(1), [start_indices: req Ints, limit_indices: req Ints, strides: req Ints], PURE, 0;
    /// joins operands along `dimension`
    Concatenate = "concatenate", AtLeast(1), Exactly(1), [dimension: req Int], PURE, 0;
    /// pads with the scalar second operand (negative padding crops)
    Pad = "pad", Exactly(2), Exactly(1), [edge_padding_low: req Ints, edge_padding_high: req Ints, interior_padding: req Ints], PURE, 0;
    /// reverses the order of elements along `dimensions`
    Reverse = "reverse", Exactly(1), Exactly(1), [dimensions: req Ints], PURE, 0;
    /// A data-dependent size (`nonzero`, `masked_select`): the first `n` (the second operand,
    /// an i64 scalar computed by the program) positions along `dimension` of the operand,
    /// whose size there is an upper bound of `n`. The result's dim is a symbol whose value is
    /// `n`; everything else is the operand's. `specialize` pads the symbol to the operand's
    /// size and returns `n` so that the caller can cut the results.
    BindSize = "bind_size", Exactly(2), Exactly(1), [dimension: req Int], 0, 0;

    // ---- compute
    /// generalized matrix product: result dims are batch, lhs free, rhs free; `precision` is
    /// `default`, `high` or `highest`; `precision_scope` is a precision the source asked for
    /// this op (a `tpuc.precision` region), which the precision policy does not override
    DotGeneral = "dot_general", Exactly(2), Exactly(1), [lhs_batching_dimensions: req Ints, rhs_batching_dimensions: req Ints, lhs_contracting_dimensions: req Ints, rhs_contracting_dimensions: req Ints, precision: opt Enum(Precision), precision_scope: opt Enum(Precision)], PURE, 0;
    /// N-d convolution in layout lhs [N, C, spatial...], rhs [O, I, spatial...], result
    /// [N, O, spatial...]; `padding` is [low0, high0, low1, high1, ...]; `precision` and
    /// `precision_scope` as for `dot_general`
    Convolution = "convolution", Exactly(2), Exactly(1), [window_strides: req Ints, padding: req Ints, lhs_dilation: req Ints, rhs_dilation: req Ints, feature_group_count: req Int, batch_group_count: req Int, precision: opt Enum(Precision), precision_scope: opt Enum(Precision)], PURE, 0;
    /// reduction of `dimensions` by `kind` (sum, prod, max, min, and, or); reduced dims removed
    Reduce = "reduce", Exactly(1), Exactly(1), [dimensions: req Ints, kind: req Enum(ReduceKind)], PURE, 0;
    /// index of the max (`kind` = argmax) or min (argmin) along `dimension` (removed), first on
    /// ties; the result type gives the index dtype
    ArgReduce = "arg_reduce", Exactly(1), Exactly(1), [dimension: req Int, kind: req Enum(ArgReduceKind)], PURE, 0;
    /// sliding-window reduction by `kind` (sum, max, min); `padding` is [low0, high0, ...] and pads
    /// with the kind's identity
    ReduceWindow = "reduce_window", Exactly(1), Exactly(1), [kind: req Enum(WindowKind), window_dimensions: req Ints, window_strides: req Ints, base_dilations: req Ints, window_dilations: req Ints, padding: req Ints], PURE, 0;
    /// StableHLO gather (operand, start_indices)
    Gather = "gather", Exactly(2), Exactly(1), [offset_dims: req Ints, collapsed_slice_dims: req Ints, operand_batching_dims: req Ints, start_indices_batching_dims: req Ints, start_index_map: req Ints, index_vector_dim: req Int, slice_sizes: req Ints], PURE, 0;
    /// StableHLO scatter (operand, scatter_indices, updates) combining by `kind` (replace, add,
    /// mul, max, min)
    Scatter = "scatter", Exactly(3), Exactly(1), [update_window_dims: req Ints, inserted_window_dims: req Ints, input_batching_dims: req Ints, scatter_indices_batching_dims: req Ints, scatter_dims_to_operand_dims: req Ints, index_vector_dim: req Int, kind: req Enum(ScatterKind)], PURE, 0;
    /// For max-pool gradients: scatters `source` (second operand) to the position of each
    /// window's max in `operand`, adding where windows overlap. Window attributes as in
    /// reduce_window.
    SelectAndScatterAdd = "select_and_scatter_add", Exactly(2), Exactly(1), [window_dimensions: req Ints, window_strides: req Ints, padding: req Ints], PURE, 0;
    /// sorts along `dimension` (stable); results are the values and the i64 indices
    Sort = "sort", Exactly(1), Exactly(2), [dimension: req Int, descending: req Bool], PURE, 0;
    /// inclusive prefix reduction along `dimension` by `kind` (sum, prod, max, min)
    Scan = "scan", Exactly(1), Exactly(1), [dimension: req Int, kind: req Enum(ScanKind)], PURE, 0;
    /// Cholesky factor of the (batched) positive definite matrices of the trailing two dims,
    /// read from and written to their `lower` (or upper) triangle; the other triangle of the
    /// result is unspecified
    Cholesky = "cholesky", Exactly(1), Exactly(1), [lower: req Bool], PURE, 0;
    /// solves op(a)·x = b (`left_side`) or x·op(a) = b for x, a triangular (`lower`, with an
    /// implicit unit diagonal when `unit_diagonal`), op the transpose when `transpose_a`; a is
    /// [..., n, n] and b [..., n, m] (left) or [..., m, n], batch dims equal
    TriangularSolve = "triangular_solve", Exactly(2), Exactly(1), [left_side: req Bool, lower: req Bool, unit_diagonal: req Bool, transpose_a: req Bool], PURE, 0;
    /// Householder QR of [..., m, n]: R on and above the diagonal, the reflectors' vectors below
    /// it (unit leading entry implied), and their scales τ [..., min(m, n)] (LAPACK's geqrf);
    /// XLA expands it (custom call `Qr`)
    Qr = "qr", Exactly(1), Exactly(2), [], PURE, 0;
    /// the product of the elementary reflectors (a [..., m, n], τ [..., k]) as [..., m, n]
    /// (LAPACK's orgqr; XLA's custom call `ProductOfElementaryHouseholderReflectors`)
    HouseholderProduct = "householder_product", Exactly(2), Exactly(1), [], PURE, 0;
    /// eigenvectors [..., n, n] (columns) and ascending eigenvalues [..., n] of symmetric
    /// matrices, read from the `lower` (or upper) triangle; XLA's Jacobi expansion (custom
    /// call `Eigh`)
    Eigh = "eigh", Exactly(1), Exactly(2), [lower: req Bool], PURE, 0;
    /// discrete Fourier transform over the trailing `len(fft_length)` (1 to 3) dims: `fft` /
    /// `ifft` complex to complex (`ifft` divides by the size), `rfft` real to complex (last dim
    /// n/2+1), `irfft` complex to real (last dim `fft_length[-1]`, divided by the size)
    Fft = "fft", Exactly(1), Exactly(1), [fft_type: req Enum(FftType), fft_length: req Ints], PURE, 0;

    // ---- collectives: a per-rank program, every rank (replica) running it on its own values;
    // `group` names the ranks taking part (resolved to replica groups when emitted)
    /// the elementwise `kind` reduction of the operand over the ranks of `group`
    /// (`average`: then divided by the group's size)
    AllReduce = "all_reduce", Exactly(1), Exactly(1), [kind: req Enum(ReduceKind), group: req Str, average: opt Bool], 0, 0;
    /// the operands of the `group_size` ranks of `group` concatenated along `dimension`, in
    /// rank order
    AllGather = "all_gather", Exactly(1), Exactly(1), [dimension: req Int, group_size: req Int, group: req Str], 0, 0;
    /// the `kind` reduction over `group`, of which rank i keeps the i-th of `group_size` equal
    /// blocks along `dimension` (`average`: divided by `group_size`)
    ReduceScatter = "reduce_scatter", Exactly(1), Exactly(1), [dimension: req Int, kind: req Enum(ReduceKind), group_size: req Int, group: req Str, average: opt Bool], 0, 0;
    /// the operand of the group's rank `source` (its index within the group), on every rank
    CollectiveBroadcast = "collective_broadcast", Exactly(1), Exactly(1), [source: req Int, group: req Str], 0, 0;
    /// `dimension` cut into `group_size` equal blocks, block j sent to rank j; the blocks
    /// received concatenated along `dimension` in rank order
    AllToAll = "all_to_all", Exactly(1), Exactly(1), [dimension: req Int, group_size: req Int, group: req Str], 0, 0;

    // ---- high-level ops (expanded by the emitter; composites later)
    /// softmax along `dimension`
    Softmax = "softmax", Exactly(1), Exactly(1), [dimension: req Int], PURE | COMPOSITE, 0;
    /// log(softmax) along `dimension`
    LogSoftmax = "log_softmax", Exactly(1), Exactly(1), [dimension: req Int], PURE | COMPOSITE, 0;
    /// GELU, `approximate` = none (erf) or tanh
    Gelu = "gelu", Exactly(1), Exactly(1), [approximate: req Enum(GeluApproximation)], ELEMENTWISE | PURE | COMPOSITE, 0;
    /// normalizes over the trailing `normalized_rank` dims: results (x - mean) * rstd, mean and
    /// rstd = 1/sqrt(var + epsilon), the latter two with the normalized dims kept as size 1
    LayerNorm = "layer_norm", Exactly(1), Exactly(3), [normalized_rank: req Int, epsilon: req Float], PURE | COMPOSITE, 0;
    /// scaled dot-product attention: q [..., L, E], k [..., S, E], v [..., S, Ev] and an
    /// optional mask broadcastable to [..., L, S] (bool: keep where true; float: added);
    /// `precision` and `precision_scope` as for `dot_general`, for both of its matmuls
    Attention = "attention", Between(3, 4), Exactly(1), [scale: req Float, is_causal: req Bool, precision: opt Enum(Precision), precision_scope: opt Enum(Precision)], PURE | COMPOSITE, 0;

    // ---- composites
    /// A named group of ops (`name`, e.g. `tpuc.attention`) that a backend may implement as one
    /// kernel. Its one region is the decomposition: a block whose arguments take the operands'
    /// types and whose `yield` gives the results; the region is isolated from above (it uses only
    /// its own arguments). Every other attribute is a composite attribute (scale, causal, ...).
    /// Lowers to `stablehlo.composite` with the region as the decomposition function.
    Composite = "composite", AtLeast(0), AtLeast(1), [name: req Str], PURE | OPEN_ATTRS, 1;

    // ---- terminators
    /// returns the function's results
    Return = "return", AtLeast(0), Exactly(0), [], TERMINATOR, 0;
    /// ends a region of an op, giving its values
    Yield = "yield", AtLeast(0), Exactly(0), [], TERMINATOR, 0;
} };
}
pub(crate) use op_table;

op_table!(ops);

impl Opcode {
    pub fn name(self) -> &'static str {
        self.info().name
    }
    /// Ops whose matmuls follow the precision policy (`precision`, `precision_scope`).
    pub fn has_matmul_precision(self) -> bool {
        matches!(self, Opcode::DotGeneral | Opcode::Convolution | Opcode::Attention)
    }
    pub fn has_trait(self, t: u32) -> bool {
        self.info().traits & t != 0
    }
    pub fn is_elementwise(self) -> bool {
        self.has_trait(ELEMENTWISE)
    }
    pub fn is_terminator(self) -> bool {
        self.has_trait(TERMINATOR)
    }
    pub fn is_pure(self) -> bool {
        self.has_trait(PURE)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown op `{0}`")]
pub struct UnknownOp(pub String);

impl FromStr for Opcode {
    type Err = UnknownOp;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Opcode::ALL.iter().copied().find(|o| o.name() == s).ok_or_else(|| UnknownOp(s.to_string()))
    }
}
