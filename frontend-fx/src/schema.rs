//! The serialized `ExportedProgram` (torch/_export/serde/schema.yaml), as far as the importer
//! reads it. Structs are deserialized with serde; the many-armed unions (`Argument`,
//! `InputSpec`, `OutputSpec`, `SymInt`) are kept as JSON values and decoded on use, so an
//! unknown union arm only fails the op that meets it, with a message naming the arm.

use crate::error::ImportError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Deserialize, Debug)]
pub struct ExportedProgram {
    pub graph_module: GraphModule,
    #[serde(default)]
    pub range_constraints: HashMap<String, Value>,
    #[serde(default)]
    pub schema_version: Option<Value>,
    #[serde(default)]
    pub torch_version: Option<Value>,
}

#[derive(Deserialize, Debug)]
pub struct GraphModule {
    pub graph: Graph,
    pub signature: Signature,
}

#[derive(Deserialize, Debug)]
pub struct Signature {
    #[serde(default)]
    pub input_specs: Vec<Value>,
    #[serde(default)]
    pub output_specs: Vec<Value>,
}

#[derive(Deserialize, Debug)]
pub struct Graph {
    #[serde(default)]
    pub inputs: Vec<Value>,
    #[serde(default)]
    pub outputs: Vec<Value>,
    #[serde(default)]
    pub nodes: Vec<Node>,
    #[serde(default)]
    pub tensor_values: HashMap<String, TensorMeta>,
    #[serde(default)]
    pub sym_int_values: HashMap<String, Value>,
}

#[derive(Deserialize, Debug)]
pub struct Node {
    pub target: String,
    #[serde(default)]
    pub inputs: Vec<NamedArgument>,
    #[serde(default)]
    pub outputs: Vec<Value>,
    #[serde(default)]
    pub metadata: NodeMetadata,
    #[serde(default)]
    pub name: Option<String>,
}

/// The node metadata the importer reads; the rest (nn_module_stack, from_node, ...) is
/// skipped without being materialized.
#[derive(Deserialize, Debug, Default)]
pub struct NodeMetadata {
    #[serde(default)]
    pub stack_trace: Option<Value>,
}

#[derive(Deserialize, Debug)]
pub struct NamedArgument {
    pub name: String,
    pub arg: Value,
    #[serde(default)]
    pub kind: Option<Value>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct TensorMeta {
    pub dtype: i64,
    pub sizes: Vec<SymIntJson>,
    #[serde(default)]
    pub strides: Vec<SymIntJson>,
    #[serde(default)]
    pub storage_offset: Option<SymIntJson>,
}

/// A serialized `SymInt` of tensor metadata: a constant or a sympy expression.
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub enum SymIntJson {
    #[serde(rename = "as_int")]
    Int(i64),
    #[serde(rename = "as_expr")]
    Expr(SymExprJson),
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct SymExprJson {
    pub expr_str: String,
}

impl SymIntJson {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymIntJson::Int(i) => Some(*i),
            SymIntJson::Expr(_) => None,
        }
    }
}

/// `PayloadConfig` of `model_weights_config.json` / `model_constants_config.json`.
#[derive(Deserialize, Debug)]
pub struct PayloadConfig {
    #[serde(default)]
    pub config: HashMap<String, PayloadMeta>,
}

#[derive(Deserialize, Debug)]
pub struct PayloadMeta {
    pub path_name: String,
    #[serde(default)]
    pub is_param: bool,
    #[serde(default)]
    pub use_pickle: bool,
    #[serde(default)]
    pub tensor_meta: Option<TensorMeta>,
}

/// A `SymIntArgument`: a reference to a sym-int value by name, or a constant.
#[derive(Clone, Debug, PartialEq)]
pub enum SymIntArg {
    Name(String),
    Int(i64),
}

/// A decoded `Argument`.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    None,
    Tensor(String),
    Tensors(Vec<String>),
    OptTensors(Vec<Option<String>>),
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Floats(Vec<f64>),
    Bool(bool),
    Bools(Vec<bool>),
    Str(String),
    Strs(Vec<String>),
    SymInt(SymIntArg),
    SymInts(Vec<SymIntArg>),
    SymFloat(Option<f64>),
    SymBool(Option<bool>),
    ScalarType(i64),
    MemoryFormat(i64),
    Layout(i64),
    Device(String),
    /// An arm the importer does not interpret (named for error messages).
    Other(String),
}

impl Arg {
    pub fn kind(&self) -> &'static str {
        match self {
            Arg::None => "None",
            Arg::Tensor(_) => "tensor",
            Arg::Tensors(_) => "tensor list",
            Arg::OptTensors(_) => "optional tensor list",
            Arg::Int(_) => "int",
            Arg::Ints(_) => "int list",
            Arg::Float(_) => "float",
            Arg::Floats(_) => "float list",
            Arg::Bool(_) => "bool",
            Arg::Bools(_) => "bool list",
            Arg::Str(_) => "string",
            Arg::Strs(_) => "string list",
            Arg::SymInt(_) => "SymInt",
            Arg::SymInts(_) => "SymInt list",
            Arg::SymFloat(_) => "SymFloat",
            Arg::SymBool(_) => "SymBool",
            Arg::ScalarType(_) => "dtype",
            Arg::MemoryFormat(_) => "memory format",
            Arg::Layout(_) => "layout",
            Arg::Device(_) => "device",
            Arg::Other(_) => "unsupported argument",
        }
    }
}

fn bad(what: &str, v: &Value) -> ImportError {
    let mut s = v.to_string();
    if s.len() > 80 {
        let mut cut = 80;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    ImportError::schema(format!("expected {what}, got {s}"))
}

/// The single `key: value` of a union object.
pub fn union_arm(v: &Value) -> Result<(&str, &Value), ImportError> {
    match v.as_object() {
        Some(m) => {
            // torch writes exactly one arm; tolerate `null` companions.
            let mut it = m.iter().filter(|(_, v)| !v.is_null());
            match (it.next(), it.next()) {
                (Some((k, v)), None) => Ok((k.as_str(), v)),
                (None, _) if m.len() == 1 => m.iter().next().map(|(k, v)| (k.as_str(), v)).ok_or_else(|| bad("a union", v)),
                _ => Err(bad("a union with one arm", v)),
            }
        }
        None => Err(bad("a union object", v)),
    }
}

pub fn as_i64(v: &Value) -> Result<i64, ImportError> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    // A float with an integral value (old serializers) is accepted.
    if let Some(f) = v.as_f64() {
        if f.fract() == 0.0 && f.abs() < 9.0e15 {
            return Ok(f as i64);
        }
    }
    Err(bad("an integer", v))
}

pub fn as_f64(v: &Value) -> Result<f64, ImportError> {
    if let Some(f) = v.as_f64() {
        return Ok(f);
    }
    match v.as_str() {
        Some("Infinity" | "inf") => Ok(f64::INFINITY),
        Some("-Infinity" | "-inf") => Ok(f64::NEG_INFINITY),
        Some("NaN" | "nan") => Ok(f64::NAN),
        _ => Err(bad("a number", v)),
    }
}

pub fn as_bool(v: &Value) -> Result<bool, ImportError> {
    v.as_bool().ok_or_else(|| bad("a bool", v))
}

pub fn as_str(v: &Value) -> Result<&str, ImportError> {
    v.as_str().ok_or_else(|| bad("a string", v))
}

pub fn as_array(v: &Value) -> Result<&Vec<Value>, ImportError> {
    v.as_array().ok_or_else(|| bad("a list", v))
}

pub fn field<'v>(v: &'v Value, name: &str) -> Result<&'v Value, ImportError> {
    v.get(name).ok_or_else(|| bad(&format!("an object with `{name}`"), v))
}

/// `TensorArgument {name}`.
pub fn tensor_name(v: &Value) -> Result<String, ImportError> {
    Ok(as_str(field(v, "name")?)?.to_string())
}

pub fn sym_int_arg(v: &Value) -> Result<SymIntArg, ImportError> {
    let (k, x) = union_arm(v)?;
    match k {
        "as_name" => Ok(SymIntArg::Name(as_str(x)?.to_string())),
        "as_int" => Ok(SymIntArg::Int(as_i64(x)?)),
        _ => Err(bad("a SymIntArgument", v)),
    }
}

/// Decodes an `Argument` union.
pub fn decode_arg(v: &Value) -> Result<Arg, ImportError> {
    let (k, x) = union_arm(v)?;
    Ok(match k {
        "as_none" => Arg::None,
        "as_tensor" => Arg::Tensor(tensor_name(x)?),
        "as_tensors" => Arg::Tensors(as_array(x)?.iter().map(tensor_name).collect::<Result<_, _>>()?),
        "as_optional_tensors" => Arg::OptTensors(
            as_array(x)?
                .iter()
                .map(|t| {
                    let (k2, y) = union_arm(t)?;
                    match k2 {
                        "as_tensor" => Ok(Some(tensor_name(y)?)),
                        "as_none" => Ok(None),
                        _ => Err(bad("an optional tensor", t)),
                    }
                })
                .collect::<Result<_, _>>()?,
        ),
        "as_optional_tensor" => {
            let (k2, y) = union_arm(x)?;
            match k2 {
                "as_tensor" => Arg::Tensor(tensor_name(y)?),
                "as_none" => Arg::None,
                _ => return Err(bad("an optional tensor", x)),
            }
        }
        "as_int" => Arg::Int(as_i64(x)?),
        "as_ints" => Arg::Ints(as_array(x)?.iter().map(as_i64).collect::<Result<_, _>>()?),
        "as_float" => Arg::Float(as_f64(x)?),
        "as_floats" => Arg::Floats(as_array(x)?.iter().map(as_f64).collect::<Result<_, _>>()?),
        "as_bool" => Arg::Bool(as_bool(x)?),
        "as_bools" => Arg::Bools(as_array(x)?.iter().map(as_bool).collect::<Result<_, _>>()?),
        "as_string" => Arg::Str(as_str(x)?.to_string()),
        "as_strings" => Arg::Strs(as_array(x)?.iter().map(|s| as_str(s).map(str::to_string)).collect::<Result<_, _>>()?),
        "as_sym_int" => Arg::SymInt(sym_int_arg(x)?),
        "as_sym_ints" => Arg::SymInts(as_array(x)?.iter().map(sym_int_arg).collect::<Result<_, _>>()?),
        "as_sym_float" => {
            let (k2, y) = union_arm(x)?;
            Arg::SymFloat(if k2 == "as_float" { Some(as_f64(y)?) } else { None })
        }
        "as_sym_bool" => {
            let (k2, y) = union_arm(x)?;
            Arg::SymBool(if k2 == "as_bool" { Some(as_bool(y)?) } else { None })
        }
        "as_scalar_type" => Arg::ScalarType(as_i64(x)?),
        "as_memory_format" => Arg::MemoryFormat(as_i64(x)?),
        "as_layout" => Arg::Layout(as_i64(x)?),
        "as_device" => Arg::Device(x.get("type").and_then(Value::as_str).unwrap_or("cpu").to_string()),
        other => Arg::Other(other.to_string()),
    })
}

/// The node's Python stack trace, when recorded.
pub fn stack_trace(node: &Node) -> Option<&str> {
    node.metadata.stack_trace.as_ref().and_then(Value::as_str)
}

/// The innermost user frame of a Python stack trace, as `file.py:LINE in func`: the last frame
/// that is not inside torch itself (falling back to the last frame).
pub fn user_frame(stack_trace: &str) -> Option<String> {
    let mut frames = Vec::new();
    for line in stack_trace.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("File \"") else { continue };
        let Some(end) = rest.find('"') else { continue };
        let (path, tail) = rest.split_at(end);
        let tail = tail.get(1..).unwrap_or("");
        let lineno = tail
            .split("line ")
            .nth(1)
            .map(|s| s.chars().take_while(char::is_ascii_digit).collect::<String>())
            .unwrap_or_default();
        let func = tail.split(", in ").nth(1).unwrap_or("").trim();
        // Paths may be absolute or relative to site-packages (`torch/nn/modules/linear.py`).
        let rooted = format!("/{path}");
        let in_torch = rooted.contains("/site-packages/torch/")
            || rooted.contains("/dist-packages/torch/")
            || rooted.contains("/torch/nn/")
            || rooted.contains("/torch/_");
        frames.push((path, lineno, func, in_torch));
    }
    let pick = frames.iter().rev().find(|f| !f.3).or_else(|| frames.last())?;
    let file = pick.0.rsplit('/').next().unwrap_or(pick.0);
    let mut s = format!("{file}:{}", pick.1);
    if !pick.2.is_empty() {
        s.push_str(" in ");
        s.push_str(pick.2);
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let st = "File \"/home/user/proj/make_fixtures.py\", line 72, in forward\n    return self.fc2(x)\n  File \"/x/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 134, in forward\n    return F.linear(input, self.weight, self.bias)";
        assert_eq!(user_frame(st).as_deref(), Some("make_fixtures.py:72 in forward"));
        // Relative paths, as the fixtures record them.
        let rel = "File \"tests/fixtures/make_fixtures.py\", line 72, in forward\n  File \"torch/nn/modules/linear.py\", line 134, in forward";
        assert_eq!(user_frame(rel).as_deref(), Some("make_fixtures.py:72 in forward"));
        assert_eq!(user_frame("garbage"), None);
    }

    #[test]
    fn args() {
        let v: Value = serde_json::from_str(r#"{"as_float": "-Infinity"}"#).unwrap();
        assert_eq!(decode_arg(&v).unwrap(), Arg::Float(f64::NEG_INFINITY));
        let v: Value = serde_json::from_str(r#"{"as_sym_ints": [{"as_name": "s"}, {"as_int": 3}]}"#).unwrap();
        assert_eq!(decode_arg(&v).unwrap(), Arg::SymInts(vec![SymIntArg::Name("s".into()), SymIntArg::Int(3)]));
        let v: Value = serde_json::from_str(r#"{"as_graph": {}}"#).unwrap();
        assert_eq!(decode_arg(&v).unwrap(), Arg::Other("as_graph".into()));
        assert!(decode_arg(&serde_json::from_str::<Value>("[1]").unwrap()).is_err());
    }
}
