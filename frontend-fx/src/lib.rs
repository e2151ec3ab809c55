//! tpuc-frontend-fx: imports PyTorch `torch.export` programs into tpuc IR.
//!
//! Input: a `.pt2` archive written by `torch.export.save` (memory-mapped; weights stay
//! zero-copy slices of the map) or a bare serialized program (`model.json`, then without
//! weight data). Output: an [`Imported`] with a verified [`tpuc_ir::Module`] whose function
//! `main` takes the signature's inputs in order (parameters, buffers and constants named by
//! their qualified names) and returns its tensor outputs, plus the weights by qualified name.
//!
//! ```no_run
//! let imported = tpuc_frontend_fx::import_file(std::path::Path::new("model.pt2"))?;
//! println!("{}", tpuc_ir::print_module(&imported.module));
//! # Ok::<(), tpuc_frontend_fx::ImportError>(())
//! ```
//!
//! Layout: [`archive`] reads the zip and the weights, [`schema`] the JSON, [`sympy`] symbolic
//! sizes, [`dtypes`] torch dtypes and type promotion, `import` walks the graph, and `ops/`
//! holds the ATen lowerings by family behind one registry ([`supported_targets`]). In-place
//! variants (`add_.Tensor`) of registered ops are lowered through their functional form when
//! the mutated tensor is not a view.
//!
//! Errors name the FX node, its target and source line. An import that meets nodes it cannot
//! import (unknown ops, arguments a lowering rejects) goes on past them and reports them all,
//! in graph order, in one error ([`ImportError::Nodes`] when there are several; see
//! [`ImportError::node_errors`]).
//!
//! Tests: `tests/import_fixtures.rs` (signatures, weights, errors), `tests/numerics.rs` (every
//! fixture and the op-coverage models in `tests/data` run through a reference interpreter and
//! match PyTorch eager), `tests/robustness.rs` (hostile input), `tests/snapshot.rs`.

pub mod archive;
pub mod dtypes;
mod error;
mod import;
mod meta;
mod ops;
pub mod schema;
pub mod sympy;

pub use error::{ImportError, NodeRef};
pub use ops::build::SEED_INPUT;

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tpuc_ir::{Module, SymExpr, TensorData};

/// A non-tensor value of the program's signature (a constant input or output).
#[derive(Clone, Debug, PartialEq)]
pub enum ConstValue {
    None,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// Where one input of the torch signature went.
#[derive(Clone, Debug, PartialEq)]
pub enum InputSlot {
    /// Function argument `i` of `main`.
    Arg(usize),
    /// A constant baked into the program (no argument).
    Const(ConstValue),
}

/// Where one output of the torch signature comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputSlot {
    /// Result `i` of `main`.
    Result(usize),
    /// A constant (including `None`, e.g. gradients of inputs that need none).
    Const(ConstValue),
    /// A symbolic size: computable from the input shapes.
    Sym(SymExpr),
}

/// A status the program returns for its caller to check after the run, where eager checks it
/// while running: the `info` of a linalg factorization, nonzero where eager raises
/// `torch.linalg.LinAlgError` (see `ops::effects`). A result of kind
/// [`tpuc_ir::ResultKind::Check`] of `main`; [`Imported::checks`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCheck {
    /// The result of `main` holding the status (an integer per matrix of the batch).
    pub result: usize,
    /// The API eager names in its error (`linalg.inv`).
    pub api: String,
    /// Whether one matrix was factorized (a 0-d status) rather than a batch.
    pub is_matrix: bool,
}

/// An imported program.
#[derive(Debug)]
pub struct Imported {
    pub module: Module,
    /// Parameters, buffers and lifted constants by qualified name (empty for a bare
    /// model.json).
    pub weights: BTreeMap<String, TensorData>,
    /// One entry per signature input, in order.
    pub inputs: Vec<InputSlot>,
    /// One entry per signature output, in order.
    pub outputs: Vec<OutputSlot>,
    /// Per SymInt input, its `main` argument and the size expression it carries.
    pub sym_inputs: Vec<(usize, SymExpr)>,
    /// `torch_version` of the exporting torch, when recorded.
    pub torch_version: Option<String>,
    /// False for a bare model.json: weights are then only arguments.
    pub has_weight_data: bool,
    /// The program JSON imported (a zero-copy slice for archives; empty when the module came
    /// from elsewhere): the source graph before any lowering choice, which the driver
    /// fingerprints to explain cache misses caused by lowering options.
    pub source: Bytes,
    /// Numbers the graph reads from a tensor (`.item()`) and then sizes a tensor with: no
    /// program can be compiled ahead of them, so the caller computes them first (with the
    /// program cut down to them) and compiles the whole at their values.
    pub host_reads: Vec<HostRead>,
}

/// A number read from a tensor on the host that sizes a tensor (`torch.arange(n.max())`).
#[derive(Clone, Debug)]
pub struct HostRead {
    /// The module symbol the number is.
    pub symbol: String,
    /// The i64 scalar `main` computes for it.
    pub value: tpuc_ir::ValueId,
    /// The FX node that reads it.
    pub node: String,
}

impl Imported {
    /// The error for a caller that cannot read numbers on the host ahead of the program (see
    /// [`Imported::host_reads`]): it names the first read's FX node and source line.
    pub fn host_read_error(&self) -> Option<ImportError> {
        let r = self.host_reads.first()?;
        let loc = self.module.defining_op(r.value).and_then(|op| self.module.loc(op));
        let at = NodeRef {
            node: r.node.clone(),
            target: loc.map_or_else(|| "torch.ops.aten._local_scalar_dense.default".into(), |l| l.target.clone()),
            source: loc.and_then(|l| l.source.clone()),
        };
        Some(ImportError::Op {
            at: Box::new(at),
            message: format!(
                "the number read here (`.item()`, the symbol `{}`) sizes a tensor: this path compiles the graph ahead \
                 of that number (`tpuc run` reads it first; under torch.compile the graph splits at the read)",
                r.symbol
            ),
        })
    }

    /// The statuses to check after each run, in result order.
    pub fn checks(&self) -> Vec<HostCheck> {
        let Some(f) = self.module.main_func() else { return Vec::new() };
        let entry = self.module.entry_block(f);
        let returned = self.module.terminator(entry).map(|o| self.module.ops[o].operands().to_vec()).unwrap_or_default();
        f.results()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind == tpuc_ir::ResultKind::Check)
            .map(|(i, r)| HostCheck {
                result: i,
                api: r.name.clone(),
                is_matrix: returned.get(i).is_some_and(|&v| self.module.value_type(v).rank() == 0),
            })
            .collect()
    }

    /// The data of a weight, or an error saying why it is unavailable.
    pub fn weight(&self, name: &str) -> Result<&TensorData, ImportError> {
        match self.weights.get(name) {
            Some(w) => Ok(w),
            None if !self.has_weight_data => Err(ImportError::MissingWeight(name.to_string())),
            None => Err(ImportError::Weight { name: name.to_string(), message: "not a weight of this program".into() }),
        }
    }
}

/// Imports a `.pt2` archive or a serialized program JSON file (detected by content).
/// Archives are memory-mapped.
pub fn import_file(path: &Path) -> Result<Imported, ImportError> {
    let io = |source| ImportError::Io { path: path.display().to_string(), source };
    let shown = path.display().to_string();
    if path.is_dir() {
        return Err(ImportError::Input(format!("`{shown}` is a directory; give the .pt2 archive torch.export.save wrote, or a model.json")));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Err(ImportError::Input(format!("`{shown}` is empty")));
    }
    let data = if len == 0 {
        Bytes::new()
    } else {
        // SAFETY: the map is read-only; the archive must not be modified while imported
        // weights are alive (the same contract as any mmap-based model loader).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Bytes::from_owner(map)
    };
    import_named(data, &path.display().to_string())
}

/// Imports from memory: a `.pt2` zip (starts with `PK`) or program JSON.
pub fn import_bytes(data: impl Into<Bytes>) -> Result<Imported, ImportError> {
    import_named(data.into(), "model.json")
}

/// As [`import_bytes`]; `name` is what JSON errors call the input.
fn import_named(data: Bytes, name: &str) -> Result<Imported, ImportError> {
    let head = data.iter().position(|c| !c.is_ascii_whitespace()).and_then(|i| data.get(i));
    match head {
        _ if data.starts_with(b"PK") => import_archive(data),
        Some(b'{') => import_json(data.clone(), name, None, &HashMap::new()),
        _ => {
            let shown: String = data.iter().take(8).map(|&c| if c.is_ascii_graphic() { c as char } else { '.' }).collect();
            Err(ImportError::UnknownFormat(shown))
        }
    }
}

fn import_archive(data: Bytes) -> Result<Imported, ImportError> {
    let mut ar = archive::Archive::open(data)?;
    ar.check_byteorder()?;
    let rel = format!("models/{}.json", ar.model);
    let json = ar.read(&rel)?;
    let payloads = ar.payloads()?;
    let dim_names = ar.dim_names()?;
    import_json(json, &format!("{}{rel}", ar.prefix), Some(payloads), &dim_names)
}

fn import_json(
    json: Bytes,
    file: &str,
    payloads: Option<archive::Payloads>,
    dim_names: &HashMap<String, String>,
) -> Result<Imported, ImportError> {
    // Valid UTF-8 (as it should be) is checked once, not string by string; anything else is
    // parsed as bytes, to fail where the parser meets the bad byte.
    let parsed = match std::str::from_utf8(&json) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(&json),
    };
    let prog: schema::ExportedProgram =
        parsed.map_err(|e| ImportError::Json { file: file.to_string(), message: e.to_string() })?;
    let mut imported = import::import_program(&prog, payloads, dim_names)?;
    drop(prog);
    imported.source = json;
    Ok(imported)
}

/// Every FX target the importer lowers (`torch.ops.aten.add.Tensor`, `_operator.mul`, ...),
/// sorted.
pub fn supported_targets() -> Vec<String> {
    ops::supported_targets()
}
