//! tpuc's tensor IR.
//!
//! An MLIR-style SSA IR for tensor programs: typed values ([`TensorType`]: a [`DType`] and
//! dims that are static or symbolic [`SymExpr`]s with ranges), ops from one table
//! ([`Opcode::info`]) with attributes and regions, functions with signature metadata,
//! provenance per op ([`Loc`]), a verifier that reports every broken rule, and a text form that
//! prints and parses back exactly.
//!
//! The crate knows nothing of PyTorch, StableHLO or PJRT.

pub mod attr;
pub mod dims;
pub mod dtype;
pub mod entity;
pub mod enums;
pub mod infer;
pub mod module;
pub mod opcode;
pub mod parse;
pub mod payload;
pub mod print;
pub mod layout;
pub mod sharding;
pub mod sym;
pub mod types;
pub mod verify;

pub use attr::{Attr, Attrs, Scalar, TensorData};
pub use dims::{GatherDims, ScatterDims};
pub use dtype::DType;
pub use entity::{EntityId, PrimaryMap, SecondaryMap};
pub use enums::{
    ArgReduceKind, AttrEnum, Direction, FftType, GeluApproximation, Precision, ReduceKind, ScanKind, ScatterKind, WindowKind,
};
pub use module::{
    ArgInfo, ArgKind, BlockId, Builder, Func, IrError, Loc, LocId, Module, OpData, OpId, RegionId, ResultInfo,
    ResultKind, ValueDef, ValueId,
};
pub use opcode::Opcode;
pub use parse::{parse_module, ParseError};
pub use payload::Payload;
pub use print::print_module;
pub use layout::{DimLayout, Factor, Layout};
pub use sharding::{DimAxes, Mesh};
pub use sym::{is_symbol_name, Atom, SymExpr, Symbol, SymbolTable};
pub use types::{Dim, TensorType};
pub use verify::{verify, Verified, VerifyError};
