//! The serialized `ExportedProgram` (torch/_export/serde/schema.yaml), as far as the importer
//! reads it. Structs are deserialized with serde; the many-armed unions (`InputSpec`,
//! `OutputSpec`, `SymInt`) are kept as JSON values and decoded on use, so an unknown union arm
//! only fails the op that meets it, with a message naming the arm. Node arguments
//! ([`ArgValue`]) are decoded while parsing when they have one of the shapes torch writes, and
//! otherwise kept as JSON and decoded on use in the same way.

use crate::error::ImportError;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map for the program's names (and the importer's own keys), with a hash much cheaper
/// than the default's, which guards against keys chosen to collide (a hostile program can at
/// worst slow its own import down).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// Word-at-a-time multiply-rotate hashing (the scheme of rustc's `FxHasher`).
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Deserialize, Debug)]
pub struct ExportedProgram<'a> {
    #[serde(borrow)]
    pub graph_module: GraphModule<'a>,
    #[serde(default)]
    pub range_constraints: HashMap<String, Value>,
    #[serde(default)]
    pub schema_version: Option<Value>,
    #[serde(default)]
    pub torch_version: Option<Value>,
}

#[derive(Deserialize, Debug)]
pub struct GraphModule<'a> {
    #[serde(borrow)]
    pub graph: Graph<'a>,
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
pub struct Graph<'a> {
    #[serde(default)]
    pub inputs: Vec<Value>,
    #[serde(default)]
    pub outputs: Vec<Value>,
    #[serde(default, borrow)]
    pub nodes: Vec<Node<'a>>,
    #[serde(default)]
    pub tensor_values: FastMap<String, TensorMeta>,
    #[serde(default)]
    pub sym_int_values: HashMap<String, Value>,
}

#[derive(Deserialize, Debug)]
pub struct Node<'a> {
    pub target: String,
    #[serde(default, borrow)]
    pub inputs: Vec<NamedArgument<'a>>,
    #[serde(default)]
    pub outputs: Vec<ArgValue>,
    #[serde(default, borrow)]
    pub metadata: NodeMetadata<'a>,
    #[serde(default)]
    pub name: Option<String>,
}

/// The node metadata the importer reads; the rest (nn_module_stack, from_node, ...) is
/// skipped without being materialized.
#[derive(Deserialize, Debug, Default)]
pub struct NodeMetadata<'a> {
    /// The trace when it is a string (anything else is read, then dropped).
    #[serde(default, borrow, deserialize_with = "string_or_none")]
    pub stack_trace: Option<StackTrace<'a>>,
    /// User annotations (`torch.fx.traceback.annotate`) as torch writes them: a JSON object
    /// inside a JSON string, read only where needed.
    #[serde(default, borrow, deserialize_with = "string_or_none")]
    pub custom: Option<StackTrace<'a>>,
}

/// A JSON string literal borrowed from the input (a Python stack trace, or the custom
/// metadata): most nodes' traces are never needed as text, and nodes of one source line share
/// one.
#[derive(Clone, Copy, Debug)]
pub struct StackTrace<'a>(&'a RawValue);

impl<'a> StackTrace<'a> {
    /// The string literal, quotes and escapes included (equal traces have equal literals, as
    /// torch writes them).
    pub fn literal(&self) -> &'a str {
        self.0.get()
    }

    /// The trace.
    pub fn text(&self) -> String {
        // A string literal as the parser checked it, so this cannot fail.
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

#[derive(Deserialize, Debug)]
pub struct NamedArgument<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    pub arg: ArgValue,
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
    /// An operator passed as a value (`with_effects`' wrapped op), by its full target name.
    Operator(String),
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
            Arg::Operator(_) => "operator",
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
        "as_operator" => Arg::Operator(as_str(x)?.to_string()),
        other => Arg::Other(other.to_string()),
    })
}

/// The node's Python stack trace, when recorded.
pub fn stack_trace<'a>(node: &Node<'a>) -> Option<StackTrace<'a>> {
    node.metadata.stack_trace
}

/// The innermost user frame of a Python stack trace, as `file.py:LINE in func`: the last frame
/// that is not inside torch itself (falling back to the last frame). Frames are read from the
/// end, so only the tail of a long trace is looked at.
pub fn user_frame(stack_trace: &str) -> Option<String> {
    let mut last = None;
    let mut pick = None;
    for line in stack_trace.lines().rev() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("File \"") else { continue };
        let Some(end) = rest.find('"') else { continue };
        let (path, tail) = rest.split_at(end);
        let frame = (path, tail.get(1..).unwrap_or(""));
        last.get_or_insert(frame);
        // Paths may be absolute or relative to site-packages (`torch/nn/modules/linear.py`).
        let in_torch = ["/site-packages/torch/", "/dist-packages/torch/", "/torch/nn/", "/torch/_"]
            .iter()
            .any(|p| path.contains(p) || path.starts_with(&p[1..]));
        if !in_torch {
            pick = Some(frame);
            break;
        }
    }
    let (path, tail) = pick.or(last)?;
    let lineno = tail.split("line ").nth(1).map(|s| &s[..s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len())]).unwrap_or("");
    let func = tail.split(", in ").nth(1).unwrap_or("").trim();
    let file = path.rsplit('/').next().unwrap_or(path);
    let mut s = format!("{file}:{lineno}");
    if !func.is_empty() {
        s.push_str(" in ");
        s.push_str(func);
    }
    Some(s)
}

/// A node argument (an `Argument` union) as read from the JSON: decoded while parsing when it
/// has one of the shapes torch writes (one arm, the fields that arm has), else kept as JSON for
/// [`decode_arg`] to decode on use, so that malformed and unknown arguments fail only the op
/// that reads them, with the same messages either way.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    Decoded(Arg),
    Json(Box<Value>),
}

impl ArgValue {
    /// The decoded argument (see [`decode_arg`]).
    pub fn decode(&self) -> Result<Arg, ImportError> {
        match self {
            ArgValue::Decoded(a) => Ok(a.clone()),
            ArgValue::Json(v) => decode_arg(v),
        }
    }

    /// The JSON form; `None` for an argument decoded while parsing.
    pub fn json(&self) -> Option<&Value> {
        match self {
            ArgValue::Decoded(_) => None,
            ArgValue::Json(v) => Some(v),
        }
    }
}

impl<'de> Deserialize<'de> for ArgValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The argument's text is borrowed from the input and decoded on the fast path; if that
        // declines, it is parsed as JSON like any other value (a JSON error there, e.g. a
        // number out of range, fails the whole parse, as it would have without the fast path).
        let raw = <&'de RawValue>::deserialize(d)?;
        if let Ok(FastArg(a)) = serde_json::from_str::<FastArg>(raw.get()) {
            return Ok(ArgValue::Decoded(a));
        }
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(v) => Ok(ArgValue::Json(Box::new(v))),
            Err(e) => Err(json_error(&e)),
        }
    }
}

/// A string's literal, or `None` for any other JSON value (which is still parsed in full, so
/// that it is checked as strictly as any other value).
fn string_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StackTrace<'de>>, D::Error> {
    let raw = <&'de RawValue>::deserialize(d)?;
    if raw.get().starts_with('"') {
        return Ok(Some(StackTrace(raw)));
    }
    serde_json::from_str::<Value>(raw.get()).map_err(|e| json_error(&e))?;
    Ok(None)
}

/// A JSON error met re-reading part of the input, without the position (which is relative to
/// that part; the parser adds where it is in the input).
fn json_error<E: de::Error>(e: &serde_json::Error) -> E {
    let msg = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    E::custom(msg.strip_suffix(&at).unwrap_or(&msg))
}

/// The fast path of [`ArgValue`]: the arms torch writes, in exactly the shapes it writes them.
/// Anything else is an error here (and the argument is then kept as JSON), so what this
/// accepts decodes exactly as [`decode_arg`] would decode it.
struct FastArg(Arg);
/// `TensorArgument {name}` with no other field.
struct FastTensor(String);
/// `OptionalTensorArgument`.
struct FastOptTensor(Option<String>);
/// `SymIntArgument`.
struct FastSymInt(SymIntArg);
/// `Device {type, index}`.
struct FastDevice(String);
/// `as_none`'s payload: `true` (or `null`/`false`).
type NonePayload = Option<bool>;

/// Reads the one key of a union object; a second key is an error.
fn union_map<'de, A: MapAccess<'de>, T>(
    mut m: A,
    arm: impl FnOnce(&'de str, &mut A) -> Result<Option<T>, A::Error>,
) -> Result<T, A::Error> {
    let Some(k) = m.next_key::<&'de str>()? else { return Err(de::Error::custom("empty union")) };
    let Some(v) = arm(k, &mut m)? else { return Err(de::Error::custom("arm not on the fast path")) };
    if m.next_key::<IgnoredAny>()?.is_some() {
        return Err(de::Error::custom("more than one arm"));
    }
    Ok(v)
}

macro_rules! map_visitor {
    ($ty:ident, $what:literal, |$m:ident| $body:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, $m: A) -> Result<$ty, A::Error> {
                        $body
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

map_visitor!(FastTensor, "a TensorArgument", |m| union_map(m, |k, m| {
    Ok(if k == "name" { Some(FastTensor(m.next_value()?)) } else { None })
}));

map_visitor!(FastOptTensor, "an OptionalTensorArgument", |m| union_map(m, |k, m| {
    Ok(match k {
        "as_tensor" => Some(FastOptTensor(Some(m.next_value::<FastTensor>()?.0))),
        "as_none" => {
            m.next_value::<NonePayload>()?;
            Some(FastOptTensor(None))
        }
        _ => None,
    })
}));

map_visitor!(FastSymInt, "a SymIntArgument", |m| union_map(m, |k, m| {
    Ok(match k {
        "as_name" => Some(FastSymInt(SymIntArg::Name(m.next_value()?))),
        "as_int" => Some(FastSymInt(SymIntArg::Int(m.next_value()?))),
        _ => None,
    })
}));

map_visitor!(FastDevice, "a Device", |m| {
    let mut m = m;
    let (mut ty, mut index) = (None::<String>, None::<Option<i64>>);
    while let Some(k) = m.next_key::<&'de str>()? {
        match k {
            "type" if ty.is_none() => ty = Some(m.next_value()?),
            "index" if index.is_none() => index = Some(m.next_value()?),
            _ => return Err(de::Error::custom("not a plain Device")),
        }
    }
    Ok(FastDevice(ty.unwrap_or_else(|| "cpu".to_string())))
});

map_visitor!(FastArg, "an Argument", |m| union_map(m, |k, m| {
    Ok(Some(FastArg(match k {
        "as_none" => {
            m.next_value::<NonePayload>()?;
            Arg::None
        }
        "as_tensor" => Arg::Tensor(m.next_value::<FastTensor>()?.0),
        "as_tensors" => Arg::Tensors(m.next_value::<Vec<FastTensor>>()?.into_iter().map(|t| t.0).collect()),
        "as_optional_tensors" => {
            Arg::OptTensors(m.next_value::<Vec<FastOptTensor>>()?.into_iter().map(|t| t.0).collect())
        }
        "as_optional_tensor" => match m.next_value::<FastOptTensor>()?.0 {
            Some(n) => Arg::Tensor(n),
            None => Arg::None,
        },
        "as_int" => Arg::Int(m.next_value()?),
        "as_ints" => Arg::Ints(m.next_value()?),
        "as_float" => Arg::Float(m.next_value()?),
        "as_floats" => Arg::Floats(m.next_value()?),
        "as_bool" => Arg::Bool(m.next_value()?),
        "as_bools" => Arg::Bools(m.next_value()?),
        "as_string" => Arg::Str(m.next_value()?),
        "as_strings" => Arg::Strs(m.next_value()?),
        "as_sym_int" => Arg::SymInt(m.next_value::<FastSymInt>()?.0),
        "as_sym_ints" => Arg::SymInts(m.next_value::<Vec<FastSymInt>>()?.into_iter().map(|s| s.0).collect()),
        "as_scalar_type" => Arg::ScalarType(m.next_value()?),
        "as_memory_format" => Arg::MemoryFormat(m.next_value()?),
        "as_layout" => Arg::Layout(m.next_value()?),
        "as_device" => Arg::Device(m.next_value::<FastDevice>()?.0),
        "as_operator" => Arg::Operator(m.next_value()?),
        _ => return Ok(None),
    })))
}));

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
        // Only torch frames: the innermost one.
        let torch = "File \"torch/nn/modules/module.py\", line 9, in _call_impl\n  File \"torch/nn/modules/linear.py\", line 134, in forward\n    x";
        assert_eq!(user_frame(torch).as_deref(), Some("linear.py:134 in forward"));
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

    /// Arguments decoded while parsing decode as their JSON would; the rest stay JSON.
    #[test]
    fn parsed_args_decode_like_json() {
        let fast = [
            r#"{"as_none": true}"#,
            r#"{"as_tensor": {"name": "x"}}"#,
            r#"{"as_tensors": [{"name": "a"}, {"name": "b"}]}"#,
            r#"{"as_optional_tensors": [{"as_tensor": {"name": "a"}}, {"as_none": true}]}"#,
            r#"{"as_optional_tensor": {"as_none": true}}"#,
            r#"{"as_int": -3}"#,
            r#"{"as_ints": [1, 2]}"#,
            r#"{"as_float": 2}"#,
            r#"{"as_floats": [0.5, 1e300]}"#,
            r#"{"as_bool": false}"#,
            r#"{"as_bools": [true]}"#,
            r#"{"as_string": "mean"}"#,
            r#"{"as_strings": ["a"]}"#,
            r#"{"as_sym_int": {"as_name": "s0"}}"#,
            r#"{"as_sym_ints": [{"as_int": 3}, {"as_name": "s1"}]}"#,
            r#"{"as_scalar_type": 7}"#,
            r#"{"as_memory_format": 1}"#,
            r#"{"as_layout": 7}"#,
            r#"{"as_device": {"type": "cuda", "index": 0}}"#,
        ];
        let slow = [
            r#"{"as_float": "-Infinity"}"#,
            r#"{"as_int": 3.0}"#,
            r#"{"as_int": 18446744073709551615}"#,
            r#"{"as_int": "3"}"#,
            r#"{"as_none": null, "as_int": 4}"#,
            r#"{"as_int": 1, "as_int": 2}"#,
            r#"{"as_tensor": {"name": "a", "name": "b"}}"#,
            r#"{"as_tensor": {"name": "a", "extra": 1}}"#,
            r#"{"as_tensor": {}}"#,
            r#"{"as_tensor": null}"#,
            r#"{"as_graph": {"name": "g"}}"#,
            r#"{"as_sym_float": {"as_float": 1.5}}"#,
            r#"{"as_sym_int": {"as_expr": "s0"}}"#,
            r#"{"as_device": {"type": null}}"#,
            r#"{"as_\u0069nt": 1}"#,
            r#"{}"#,
            r#"[1]"#,
            r#"5"#,
        ];
        for text in fast.iter().chain(&slow) {
            let parsed: ArgValue = serde_json::from_str(text).unwrap();
            assert_eq!(parsed.json().is_none(), fast.contains(text), "{text}");
            let want = decode_arg(&serde_json::from_str::<Value>(text).unwrap()).map_err(|e| e.to_string());
            assert_eq!(parsed.decode().map_err(|e| e.to_string()), want, "{text}");
        }
        // A JSON error inside an argument fails the parse, as it would without the fast path.
        let e = serde_json::from_str::<ArgValue>(r#"{"as_float": 1e999}"#).unwrap_err();
        assert!(e.to_string().starts_with("number out of range"), "{e}");
    }

    #[test]
    fn stack_traces_are_strings_or_none() {
        let m: NodeMetadata = serde_json::from_str(r#"{"stack_trace": "File \"a.py\", line 1, in f"}"#).unwrap();
        assert_eq!(m.stack_trace.map(|t| t.text()).as_deref(), Some("File \"a.py\", line 1, in f"));
        for other in ["null", "3", "[1, {}]", r#"{"a": [true]}"#] {
            let text = format!(r#"{{"stack_trace": {other}}}"#);
            let m: NodeMetadata = serde_json::from_str(&text).unwrap();
            assert!(m.stack_trace.is_none(), "{other}");
        }
        assert!(serde_json::from_str::<NodeMetadata>(r#"{"stack_trace": [1e999]}"#).is_err());
    }
}
