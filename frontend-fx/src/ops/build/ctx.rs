//! The node context every lowering works through: the node's named arguments (an omitted one
//! reads as its schema default, from [`super::defaults`]), the importer's read-only state, and
//! the IR builder carrying the node's provenance; plus the value kinds a lowering passes around
//! ([`Val`], [`Operand`], [`Num`]), the error type and the size limits. ATen's `result_type`
//! and broadcasting are implemented here, since the IR has neither implicit broadcasting nor
//! implicit promotion.
pub use crate::dtypes::{self, Participant};
pub use crate::schema::{self, Arg, ArgValue, Node, SymIntArg};
use std::collections::HashMap;
pub use tpuc_ir::{infer, Attr, Attrs, Builder, DType, Dim, IrError, Opcode, Scalar, SymExpr, TensorData, TensorType, ValueId};
pub use tpuc_ir::{AttrEnum, Direction, GatherDims, ReduceKind, ScatterDims};

pub use crate::meta::MAX_SIZE;
/// Largest window parameter (kernel extent, stride, dilation, padding) accepted (2^20).
pub const MAX_WINDOW: i64 = 1 << 20;
/// Largest number of elements of a constant the importer computes (index tables, masks).
pub const MAX_TABLE: i64 = 1 << 24;

/// An error inside one lowering; the importer adds the node, target and source line.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpError {
    /// The node is outside what its lowering takes: an argument missing, of another kind or out
    /// of range, or a form of the op tpuc does not lower (the message says which).
    #[error("{0}")]
    Refused(String),
    /// An op the lowering built failed its shape rule.
    #[error(transparent)]
    Ir(#[from] IrError),
    /// A constant the lowering built does not fit its type.
    #[error(transparent)]
    Data(#[from] tpuc_ir::attr::TensorDataError),
    /// Reading a nested graph or a constant of the program failed.
    #[error("{0}")]
    Import(String),
}

impl From<String> for OpError {
    fn from(e: String) -> Self {
        OpError::Refused(e)
    }
}
impl From<&str> for OpError {
    fn from(e: &str) -> Self {
        OpError::Refused(e.to_string())
    }
}
impl From<crate::error::ImportError> for OpError {
    fn from(e: crate::error::ImportError) -> Self {
        OpError::Import(e.to_string())
    }
}

pub type R<T> = Result<T, OpError>;

pub fn err<T>(msg: impl Into<String>) -> R<T> {
    Err(OpError::Refused(msg.into()))
}

/// The value an FX name stands for.
#[derive(Clone, Debug)]
pub enum Val {
    Tensor(ValueId),
    /// A SymInt (or a plain int): tracked at compile time.
    Sym(SymExpr),
    Float(f64),
    /// A SymBool; `None` when only known at run time.
    Bool(Option<bool>),
    Str(#[allow(dead_code)] String),
    None,
    /// An output nobody reads, not built.
    Absent,
    /// An effect token (`with_effects`): orders effects in the graph, no value at run time.
    Token,
}

/// A Python number argument.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Num {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Num {
    /// The dtype of the number as a wrapped scalar (bool, i64, f64).
    pub fn dtype(self) -> DType {
        match self {
            Num::Bool(_) => DType::Bool,
            Num::Int(_) => DType::I64,
            Num::Float(_) => DType::F64,
        }
    }
    pub fn scalar(self) -> Scalar {
        match self {
            Num::Bool(b) => Scalar::Bool(b),
            Num::Int(i) => Scalar::Int(i),
            Num::Float(f) => Scalar::Float(f),
        }
    }
    pub fn as_f64(self) -> f64 {
        self.scalar().as_f64()
    }
    /// True if the number equals `v` exactly.
    pub fn is(self, v: f64) -> bool {
        self.as_f64() == v
    }
}

/// An operand of an elementwise op: a tensor, a Python number, or a number only known at run
/// time (a SymInt carried by an argument), which promotes like a Python number.
#[derive(Copy, Clone, Debug)]
pub enum Operand {
    T(ValueId),
    N(Num),
    W(ValueId),
}

/// Read-only importer state the lowerings see.
pub struct State<'p> {
    pub env: schema::FastMap<String, Val>,
    pub metas: &'p schema::FastMap<String, schema::TensorMeta>,
    /// The graph's `sym_int_values`: the expression torch recorded for each SymInt node output.
    pub sym_ints: &'p HashMap<String, serde_json::Value>,
    pub uses: schema::FastSet<String>,
    /// Size expression → the SymInt argument carrying its value at run time (a symbol, or an
    /// expression such as `48*s0` that aot_autograd hands a backward graph).
    pub sym_args: HashMap<SymExpr, ValueId>,
    /// torch symbol name → module symbol name.
    pub rename: HashMap<String, String>,
    /// The next stream number of the program's random ops (see `random`).
    pub streams: std::cell::Cell<i64>,
    /// Statuses the caller checks after the run, in graph order: the value and the API eager
    /// names in its error (see `ops::effects`).
    pub checks: std::cell::RefCell<Vec<(ValueId, String)>>,
    /// Data-dependent symbol (module name) → the count its `bind_size` bound to it (see
    /// `sizes::bind_dim`): its run-time value for later uses as data, and for an output that
    /// is the bare symbol (a forward graph saving `u0` for its backward).
    pub bound: std::cell::RefCell<HashMap<String, ValueId>>,
    /// Numbers read from a tensor (`.item()`) that size a tensor, in graph order: the caller
    /// reads them on the host first (see [`crate::HostRead`]).
    pub host_reads: std::cell::RefCell<Vec<crate::HostRead>>,
    /// The module symbols some recorded tensor's size names (see [`State::sizes_a_tensor`]).
    pub sizing: std::cell::OnceCell<std::collections::HashSet<String>>,
}

impl State<'_> {
    /// Whether module symbol `s` is a dim of some tensor torch recorded (the metas read once,
    /// at the first question).
    pub fn sizes_a_tensor(&self, s: &str) -> bool {
        self.sizing
            .get_or_init(|| {
                let sizes = self.metas.values().flat_map(|m| &m.sizes);
                sizes
                    .filter_map(|d| match d {
                        schema::SymIntJson::Expr(x) => crate::meta::parse_expr(&x.expr_str, &self.rename).ok(),
                        schema::SymIntJson::Int(_) => None,
                    })
                    .flat_map(|e| e.symbols().into_iter().map(|t| t.to_string()))
                    .collect()
            })
            .contains(s)
    }
}

/// One flattened output slot of a node.
#[derive(Clone, Debug)]
pub enum OutSlot {
    Tensor(String),
    Sym(String),
    Other(String),
    None,
}

impl OutSlot {
    pub fn name(&self) -> Option<&str> {
        match self {
            OutSlot::Tensor(n) | OutSlot::Sym(n) | OutSlot::Other(n) => Some(n),
            OutSlot::None => None,
        }
    }
}

/// The context of one node's lowering.
pub struct Ctx<'a, 'm> {
    pub b: Builder<'m>,
    pub node: &'a Node<'a>,
    pub st: &'a State<'a>,
    pub outs: &'a [OutSlot],
}

pub type OpFn = fn(&mut Ctx) -> R<Vec<Val>>;

pub fn one(v: ValueId) -> R<Vec<Val>> {
    Ok(vec![Val::Tensor(v)])
}

/// Normalizes a possibly negative dim against `rank` (rank 0 accepts -1 and 0).
pub fn norm_dim(d: i64, rank: usize) -> R<usize> {
    let r = rank.max(1) as i64;
    let n = if d < 0 { d + r } else { d };
    if n < 0 || n >= r {
        return err(format!("dim {d} out of range for rank {rank}"));
    }
    Ok(n as usize)
}

/// Checks a static size or window parameter is within sane bounds.
pub fn check_size(v: i64, what: &str) -> R<i64> {
    if !(-MAX_SIZE..=MAX_SIZE).contains(&v) {
        return err(format!("{what} {v} is out of range"));
    }
    Ok(v)
}

/// Checks a window parameter is within `lo..=MAX_WINDOW`.
pub fn check_window(v: i64, lo: i64, what: &str) -> R<i64> {
    if !(lo..=MAX_WINDOW).contains(&v) {
        return err(format!("{what} {v} is out of range"));
    }
    Ok(v)
}

/// Product of sizes of a constant table, checked against [`MAX_TABLE`].
pub fn table_size(sizes: &[i64], what: &str) -> R<i64> {
    let mut n: i64 = 1;
    for &s in sizes {
        n = n.checked_mul(s.max(0)).filter(|&v| v <= MAX_TABLE).ok_or_else(|| OpError::Refused(format!("{what} is too large to tabulate")))?;
    }
    Ok(n)
}

pub fn static_of(d: &Dim, what: &str) -> R<i64> {
    d.as_static().ok_or_else(|| OpError::Refused(format!("{what} must be static, got {d}")))
}

impl<'a, 'm> Ctx<'a, 'm> {
    // ---------------------------------------------------------------- arguments

    fn raw(&self, name: &str) -> Option<&'a ArgValue> {
        self.node.inputs.iter().find(|a| a.name == name).map(|a| &a.arg)
    }

    /// The schema default of argument `name` of this node's target (see [`super::defaults`]).
    fn schema_default(&self, name: &str) -> Option<Arg> {
        super::defaults::schema_default(&self.node.target, name).cloned()
    }

    /// The decoded argument; when omitted, its schema default, else `None`.
    pub fn get(&self, name: &str) -> R<Option<Arg>> {
        match self.raw(name) {
            None => Ok(self.schema_default(name)),
            Some(v) => Ok(Some(v.decode()?)),
        }
    }

    /// The argument, treating an explicit `None` like an omitted one (the schema default
    /// applies to both).
    pub fn opt(&self, name: &str) -> R<Option<Arg>> {
        match self.get(name)? {
            Some(Arg::None) => Ok(self.schema_default(name)),
            a => Ok(a),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        matches!(self.opt(name), Ok(Some(_)))
    }

    fn lookup_name(&self, n: &str) -> R<&'a Val> {
        self.st.env.get(n).ok_or_else(|| OpError::Refused(format!("value `{n}` is not defined before its use")))
    }

    pub fn tensor_by_name(&self, n: &str) -> R<ValueId> {
        match self.lookup_name(n)? {
            Val::Tensor(v) => Ok(*v),
            Val::Absent => err(format!("value `{n}` was not built")),
            other => err(format!("`{n}` is not a tensor ({other:?})")),
        }
    }

    pub fn t(&self, name: &str) -> R<ValueId> {
        match self.get(name)? {
            Some(Arg::Tensor(n)) => self.tensor_by_name(&n),
            Some(a) => err(format!("argument `{name}` must be a tensor, got a {}", a.kind())),
            None => err(format!("missing tensor argument `{name}`")),
        }
    }

    pub fn opt_t(&self, name: &str) -> R<Option<ValueId>> {
        match self.opt(name)? {
            Some(Arg::Tensor(n)) => Ok(Some(self.tensor_by_name(&n)?)),
            Some(a) => err(format!("argument `{name}` must be a tensor or None, got a {}", a.kind())),
            None => Ok(None),
        }
    }

    pub fn tensors(&self, name: &str) -> R<Vec<ValueId>> {
        match self.get(name)? {
            Some(Arg::Tensors(ns)) => ns.iter().map(|n| self.tensor_by_name(n)).collect(),
            Some(Arg::OptTensors(ns)) => ns
                .iter()
                .map(|n| match n {
                    Some(n) => self.tensor_by_name(n),
                    None => err(format!("argument `{name}` has a None entry")),
                })
                .collect(),
            Some(a) => err(format!("argument `{name}` must be a tensor list, got a {}", a.kind())),
            None => err(format!("missing tensor list argument `{name}`")),
        }
    }

    pub fn opt_tensors(&self, name: &str) -> R<Vec<Option<ValueId>>> {
        match self.get(name)? {
            Some(Arg::OptTensors(ns)) => {
                ns.iter().map(|n| n.as_ref().map(|n| self.tensor_by_name(n)).transpose()).collect()
            }
            Some(Arg::Tensors(ns)) => ns.iter().map(|n| self.tensor_by_name(n).map(Some)).collect(),
            Some(a) => err(format!("argument `{name}` must be a list of optional tensors, got a {}", a.kind())),
            None => err(format!("missing argument `{name}`")),
        }
    }

    pub fn sym_of(&self, a: &SymIntArg) -> R<SymExpr> {
        match a {
            SymIntArg::Int(i) => Ok(SymExpr::constant(*i)),
            SymIntArg::Name(n) => match self.lookup_name(n)? {
                Val::Sym(e) => Ok(e.clone()),
                other => err(format!("`{n}` is not a SymInt ({other:?})")),
            },
        }
    }

    /// An int or SymInt argument as an expression.
    pub fn sym(&self, name: &str) -> R<SymExpr> {
        self.opt_sym(name)?.ok_or_else(|| OpError::Refused(format!("missing int argument `{name}`")))
    }

    pub fn opt_sym(&self, name: &str) -> R<Option<SymExpr>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::Int(i)) => Ok(Some(SymExpr::constant(i))),
            Some(Arg::Bool(b)) => Ok(Some(SymExpr::constant(i64::from(b)))),
            Some(Arg::SymInt(s)) => Ok(Some(self.sym_of(&s)?)),
            Some(Arg::Tensor(n)) => match self.lookup_name(&n)? {
                Val::Sym(e) => Ok(Some(e.clone())),
                _ => err(format!("argument `{name}` must be an int, got a tensor")),
            },
            Some(a) => err(format!("argument `{name}` must be an int, got a {}", a.kind())),
        }
    }

    pub fn syms(&self, name: &str) -> R<Vec<SymExpr>> {
        match self.opt(name)? {
            Some(Arg::Ints(v)) => Ok(v.into_iter().map(SymExpr::constant).collect()),
            Some(Arg::SymInts(v)) => v.iter().map(|a| self.sym_of(a)).collect(),
            Some(Arg::Int(i)) => Ok(vec![SymExpr::constant(i)]),
            Some(Arg::SymInt(s)) => Ok(vec![self.sym_of(&s)?]),
            Some(a) => err(format!("argument `{name}` must be an int list, got a {}", a.kind())),
            None => err(format!("missing int list argument `{name}`")),
        }
    }

    /// A size argument (`SymInt[] size`) as dims: each static entry must be in `0..=MAX_SIZE`.
    pub fn size_dims(&self, name: &str) -> R<Vec<Dim>> {
        self.syms(name)?
            .into_iter()
            .map(|e| match e.as_const() {
                Some(c) if !(0..=MAX_SIZE).contains(&c) => err(format!("invalid size {c}")),
                _ => Ok(Dim::from_expr(e)),
            })
            .collect()
    }

    pub fn int(&self, name: &str) -> R<i64> {
        self.opt_int(name)?.ok_or_else(|| OpError::Refused(format!("missing int argument `{name}`")))
    }

    pub fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.opt_sym(name)? {
            None => Ok(None),
            Some(e) => match e.as_const() {
                Some(c) => Ok(Some(c)),
                None => err(format!("argument `{name}` is symbolic ({e}); a static value is needed")),
            },
        }
    }

    pub fn opt_ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        if !self.has(name) {
            return Ok(None);
        }
        let v = self.syms(name)?;
        v.iter()
            .map(|e| e.as_const().ok_or_else(|| OpError::Refused(format!("argument `{name}` has a symbolic entry {e}"))))
            .collect::<R<Vec<_>>>()
            .map(Some)
    }

    pub fn ints(&self, name: &str) -> R<Vec<i64>> {
        self.opt_ints(name)?.ok_or_else(|| OpError::Refused(format!("missing int list argument `{name}`")))
    }

    pub fn opt_float(&self, name: &str) -> R<Option<f64>> {
        Ok(self.opt_num(name)?.map(Num::as_f64))
    }

    pub fn float(&self, name: &str) -> R<f64> {
        self.opt_float(name)?.ok_or_else(|| OpError::Refused(format!("missing float argument `{name}`")))
    }

    pub fn opt_bool(&self, name: &str) -> R<Option<bool>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::Bool(b)) => Ok(Some(b)),
            Some(Arg::Int(i)) => Ok(Some(i != 0)),
            Some(Arg::SymBool(Some(b))) => Ok(Some(b)),
            Some(a) => err(format!("argument `{name}` must be a bool, got a {}", a.kind())),
        }
    }

    pub fn bool(&self, name: &str) -> R<bool> {
        self.opt_bool(name)?.ok_or_else(|| OpError::Refused(format!("missing bool argument `{name}`")))
    }

    pub fn bools(&self, name: &str) -> R<Option<Vec<bool>>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::Bools(b)) => Ok(Some(b)),
            Some(a) => err(format!("argument `{name}` must be a bool list, got a {}", a.kind())),
        }
    }

    pub fn opt_str(&self, name: &str) -> R<Option<String>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::Str(s)) => Ok(Some(s)),
            Some(a) => err(format!("argument `{name}` must be a string, got a {}", a.kind())),
        }
    }

    pub fn str(&self, name: &str) -> R<String> {
        self.opt_str(name)?.ok_or_else(|| OpError::Refused(format!("missing string argument `{name}`")))
    }

    pub fn opt_dtype(&self, name: &str) -> R<Option<DType>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::ScalarType(n)) | Some(Arg::Int(n)) => Ok(Some(dtypes::from_torch(n)?)),
            Some(a) => err(format!("argument `{name}` must be a dtype, got a {}", a.kind())),
        }
    }

    /// A Python-number argument (`Scalar`).
    pub fn opt_num(&self, name: &str) -> R<Option<Num>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(Arg::Int(i)) => Ok(Some(Num::Int(i))),
            Some(Arg::Float(f)) => Ok(Some(Num::Float(f))),
            Some(Arg::Bool(b)) => Ok(Some(Num::Bool(b))),
            Some(Arg::SymFloat(Some(f))) => Ok(Some(Num::Float(f))),
            Some(Arg::SymBool(Some(b))) => Ok(Some(Num::Bool(b))),
            Some(Arg::SymInt(s)) => match self.sym_of(&s)?.as_const() {
                Some(c) => Ok(Some(Num::Int(c))),
                None => err(format!("argument `{name}` is a symbolic value; a constant is needed")),
            },
            Some(Arg::Tensor(n)) => match self.lookup_name(&n)? {
                Val::Sym(e) => match e.as_const() {
                    Some(c) => Ok(Some(Num::Int(c))),
                    None => err(format!("argument `{name}` is a symbolic value; a constant is needed")),
                },
                Val::Float(f) => Ok(Some(Num::Float(*f))),
                Val::Bool(Some(b)) => Ok(Some(Num::Bool(*b))),
                _ => err(format!("argument `{name}` must be a number, got a tensor")),
            },
            Some(a) => err(format!("argument `{name}` must be a number, got a {}", a.kind())),
        }
    }

    pub fn num(&self, name: &str) -> R<Num> {
        self.opt_num(name)?.ok_or_else(|| OpError::Refused(format!("missing number argument `{name}`")))
    }

    /// A tensor-or-number argument.
    pub fn operand(&mut self, name: &str) -> R<Operand> {
        match self.get(name)? {
            Some(Arg::Tensor(n)) => match self.lookup_name(&n)? {
                Val::Tensor(v) => Ok(Operand::T(*v)),
                Val::Sym(e) => {
                    let e = e.clone();
                    self.sym_operand(&e)
                }
                Val::Float(f) => Ok(Operand::N(Num::Float(*f))),
                Val::Bool(Some(b)) => Ok(Operand::N(Num::Bool(*b))),
                other => err(format!("argument `{name}` is {other:?}")),
            },
            Some(Arg::SymInt(s)) => {
                let e = self.sym_of(&s)?;
                self.sym_operand(&e)
            }
            Some(_) => Ok(Operand::N(self.num(name)?)),
            None => err(format!("missing argument `{name}`")),
        }
    }

    /// A SymInt as an operand: a constant, the SymInt argument carrying it, or its value
    /// computed from the arguments carrying its symbols.
    pub fn sym_operand(&mut self, e: &SymExpr) -> R<Operand> {
        if let Some(c) = e.as_const() {
            return Ok(Operand::N(Num::Int(c)));
        }
        match self.sym_value(e)? {
            Some(v) => Ok(Operand::W(v)),
            None => err(format!(
                "the symbolic size `{e}` is used as data; tpuc has no run-time value for it (pass it as a SymInt input)"
            )),
        }
    }

    /// The run-time value of a size expression as an i64 scalar: the SymInt argument carrying
    /// it, or built from the arguments carrying its symbols (None when one has none).
    fn sym_value(&mut self, e: &SymExpr) -> R<Option<ValueId>> {
        if let Some(&v) = self.st.sym_args.get(e) {
            return Ok(Some(v));
        }
        let args = &self.st.sym_args;
        let bound = self.st.bound.borrow();
        Ok(self.b.sym_value(e, &mut |s| args.get(&SymExpr::symbol(s)).copied().or_else(|| bound.get(s).copied()))?)
    }

    // ---------------------------------------------------------------- outputs

    /// Whether output `i` (flattened) is read by a later node or the graph output.
    pub fn used(&self, i: usize) -> bool {
        self.outs.get(i).and_then(OutSlot::name).is_some_and(|n| self.st.uses.contains(n))
    }

    /// The type torch recorded for output `i`, when it is fully parseable.
    pub fn out_type(&self, i: usize) -> Option<TensorType> {
        let name = self.outs.get(i)?.name()?;
        let meta = self.st.metas.get(name)?;
        crate::meta::meta_type(meta, &self.st.rename).ok()
    }

    // ---------------------------------------------------------------- types

    pub fn ty(&self, v: ValueId) -> TensorType {
        self.b.ty(v).clone()
    }
    pub fn dtype(&self, v: ValueId) -> DType {
        self.b.ty(v).dtype
    }
    pub fn rank(&self, v: ValueId) -> usize {
        self.b.ty(v).rank()
    }
    pub fn dims(&self, v: ValueId) -> Vec<Dim> {
        self.b.ty(v).dims.to_vec()
    }
    /// Size of dim `d` of `v`; an error when `v` has no such dim (a rank-0 tensor has none,
    /// although [`norm_dim`] accepts dim 0 and -1 for it).
    pub fn dim_size(&self, v: ValueId, d: usize) -> R<Dim> {
        let t = self.b.ty(v);
        t.dims.get(d).cloned().ok_or_else(|| OpError::Refused(format!("dim {d} out of range for {t}")))
    }
    pub fn static_dims(&self, v: ValueId, what: &str) -> R<Vec<i64>> {
        self.b.ty(v).static_dims().ok_or_else(|| OpError::Refused(format!("{what} needs static shapes, got {}", self.b.ty(v))))
    }

    // ---------------------------------------------------------------- promotion and broadcasting

    pub fn participant(&self, o: &Operand) -> Participant {
        match *o {
            Operand::T(v) => {
                let t = self.b.ty(v);
                if t.rank() == 0 {
                    Participant::ZeroDim(t.dtype)
                } else {
                    Participant::Dimensioned(t.dtype)
                }
            }
            Operand::N(n) => Participant::Wrapped(n.dtype()),
            Operand::W(v) => Participant::Wrapped(self.b.ty(v).dtype),
        }
    }

    /// ATen's `result_type` of the operands.
    pub fn result_type(&self, ops: &[Operand]) -> R<DType> {
        let parts: Vec<Participant> = ops.iter().map(|o| self.participant(o)).collect();
        dtypes::result_type(&parts).map_err(OpError::Refused)
    }

    /// The broadcast shape of the tensor operands.
    pub fn broadcast_shape(&self, ops: &[Operand]) -> R<Vec<Dim>> {
        let mut shape: Vec<Dim> = Vec::new();
        for o in ops {
            if let Operand::T(v) = o {
                shape = infer::broadcast_shapes(&shape, &self.b.ty(*v).dims)?;
            }
        }
        Ok(shape)
    }

    /// The operand converted to `dtype` and broadcast to `shape`.
    pub fn mat(&mut self, o: &Operand, dtype: DType, shape: &[Dim]) -> R<ValueId> {
        let v = match *o {
            Operand::T(v) | Operand::W(v) => self.b.convert(v, dtype)?,
            Operand::N(n) => self.b.scalar(n.scalar(), dtype)?,
        };
        self.broadcast_to(v, shape)
    }

    /// NumPy broadcast of `v` to `shape`.
    pub fn broadcast_to(&mut self, v: ValueId, shape: &[Dim]) -> R<ValueId> {
        let have = self.dims(v);
        if have.len() > shape.len() {
            return err(format!("cannot broadcast {} to {}", self.ty(v), fmt_dims(shape)));
        }
        let off = shape.len() - have.len();
        for (i, d) in have.iter().enumerate() {
            if d != &shape[i + off] && !d.is_one() {
                return err(format!("cannot broadcast {} to {}", self.ty(v), fmt_dims(shape)));
            }
        }
        Ok(self.b.broadcast_to(v, shape)?)
    }

    /// Converts both operands to `dtype`, broadcasts them to their common shape.
    pub fn pair(&mut self, a: &Operand, b: &Operand, dtype: DType) -> R<(ValueId, ValueId)> {
        let shape = self.broadcast_shape(&[*a, *b])?;
        Ok((self.mat(a, dtype, &shape)?, self.mat(b, dtype, &shape)?))
    }

    /// A rank-0 constant.
    pub fn scalar(&mut self, v: impl Into<Scalar>, dtype: DType) -> R<ValueId> {
        Ok(self.b.scalar(v.into(), dtype)?)
    }

    /// `value` broadcast to `shape` (works for symbolic shapes).
    pub fn full(&mut self, value: Scalar, dtype: DType, shape: &[Dim]) -> R<ValueId> {
        let s = self.b.scalar(value, dtype)?;
        Ok(self.b.broadcast_in_dim(s, &[], shape.to_vec())?)
    }

    /// `value` with `v`'s dtype and shape.
    pub fn full_like(&mut self, value: Scalar, v: ValueId) -> R<ValueId> {
        let t = self.ty(v);
        self.full(value, t.dtype, &t.dims)
    }

    /// An elementwise binary op on values of one type.
    pub fn bin(&mut self, op: Opcode, a: ValueId, b: ValueId) -> R<ValueId> {
        Ok(self.b.binary(op, a, b)?)
    }

    /// `op(v, c)` with a constant of v's dtype broadcast to v's shape.
    pub fn bin_c(&mut self, op: Opcode, v: ValueId, c: f64) -> R<ValueId> {
        let k = self.full_like(Scalar::Float(c), v)?;
        self.bin(op, v, k)
    }

    pub fn un(&mut self, op: Opcode, a: ValueId) -> R<ValueId> {
        Ok(self.b.unary(op, a)?)
    }

    pub fn cmp(&mut self, dir: Direction, a: ValueId, b: ValueId) -> R<ValueId> {
        Ok(self.b.compare(dir, a, b)?)
    }

    pub fn select(&mut self, p: ValueId, t: ValueId, f: ValueId) -> R<ValueId> {
        Ok(self.b.select(p, t, f)?)
    }

    pub fn convert(&mut self, v: ValueId, dtype: DType) -> R<ValueId> {
        Ok(self.b.convert(v, dtype)?)
    }

    pub fn reshape(&mut self, v: ValueId, dims: Vec<Dim>) -> R<ValueId> {
        Ok(self.b.reshape(v, dims)?)
    }

    pub fn transpose(&mut self, v: ValueId, perm: &[i64]) -> R<ValueId> {
        Ok(self.b.transpose(v, perm)?)
    }

    /// `x != 0` as bool (bool stays).
    pub fn truthy(&mut self, v: ValueId) -> R<ValueId> {
        if self.dtype(v) == DType::Bool {
            return Ok(v);
        }
        let z = self.full_like(Scalar::Int(0), v)?;
        self.cmp(Direction::Ne, v, z)
    }

    /// Floating-point computation type: integers and bool become the default float dtype.
    pub fn float_of(&mut self, v: ValueId) -> R<ValueId> {
        let d = self.dtype(v);
        if d.is_float() || d.is_complex() {
            Ok(v)
        } else {
            self.convert(v, dtypes::DEFAULT_FLOAT)
        }
    }

    /// The number of elements in `dims` of `v` as a rank-0 value of `dtype` (a constant when
    /// static, else counted at run time by summing ones).
    pub fn count(&mut self, v: ValueId, dims: &[usize], dtype: DType) -> R<ValueId> {
        let t = self.ty(v);
        let mut n: i64 = 1;
        let mut symbolic = false;
        for &d in dims {
            match t.dims.get(d) {
                Some(Dim::Static(s)) => n = n.saturating_mul(*s),
                Some(Dim::Sym(_)) => symbolic = true,
                None => return err(format!("dim {d} out of range")),
            }
        }
        if !symbolic {
            return self.scalar(Scalar::Int(n), dtype);
        }
        let sub: Vec<Dim> = dims.iter().filter_map(|&d| t.dims.get(d).cloned()).collect();
        let ones = self.full(Scalar::Int(1), dtype, &sub)?;
        let ds: Vec<i64> = (0..sub.len() as i64).collect();
        Ok(self.b.reduce(ones, ReduceKind::Sum, &ds)?)
    }

    /// Reduction by `kind` over `dims`, keeping them as size 1 when `keep`.
    pub fn reduce(&mut self, v: ValueId, kind: ReduceKind, dims: &[usize], keep: bool) -> R<ValueId> {
        let ds: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let r = self.b.reduce(v, kind, &ds)?;
        if keep {
            let kept = keep_dims(&self.dims(v), dims);
            return self.reshape(r, kept);
        }
        Ok(r)
    }

    /// A dense constant.
    pub fn constant(&mut self, ty: TensorType, bytes: Vec<u8>) -> R<ValueId> {
        let data = TensorData::new(ty, bytes::Bytes::from(bytes))?;
        Ok(self.b.constant(data)?)
    }

    /// A dense i64 constant of the given shape.
    pub fn const_i64(&mut self, dims: &[i64], values: &[i64]) -> R<ValueId> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(TensorType::from_static(DType::I64, dims), bytes)
    }

    /// A dense constant of `dtype` from f64 values (rounded to the dtype).
    pub fn const_f(&mut self, dims: &[i64], values: &[f64], dtype: DType) -> R<ValueId> {
        let bytes = values.iter().flat_map(|&v| Scalar::Float(v).to_bytes(dtype)).collect();
        self.constant(TensorType::from_static(dtype, dims), bytes)
    }

    pub fn iota(&mut self, dtype: DType, dims: &[Dim], d: usize) -> R<ValueId> {
        Ok(self.b.iota(TensorType::new(dtype, dims.iter().cloned()), d as i64)?)
    }
}

/// `dims` with the entries in `reduced` replaced by 1.
pub fn keep_dims(dims: &[Dim], reduced: &[usize]) -> Vec<Dim> {
    dims.iter().enumerate().map(|(i, d)| if reduced.contains(&i) { Dim::Static(1) } else { d.clone() }).collect()
}

pub fn fmt_dims(d: &[Dim]) -> String {
    format!("[{}]", d.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))
}

impl From<Num> for Scalar {
    fn from(n: Num) -> Scalar {
        n.scalar()
    }
}

pub fn out_used(cx: &Ctx, mask: &[bool], i: usize) -> bool {
    mask.get(i).copied().unwrap_or(true) && cx.used(i)
}
