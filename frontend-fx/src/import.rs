//! The graph walk: signature → function arguments, nodes → IR through the op registry,
//! output specs → results.
//!
//! Needs: a deserialized [`ExportedProgram`] and, for archives, the weight payloads.
//! Guarantees: the returned module has one function `main` whose arguments follow the
//! signature's input order and whose results follow its output order (None and constant
//! outputs are described in [`Imported::outputs`] instead), every op carries the FX node's
//! provenance, every tensor result's dtype and rank agree with the type torch recorded for
//! it, and the module passes [`tpuc_ir::verify`].

use crate::archive::Payloads;
use crate::error::{ImportError, NodeRef};
use crate::meta::{meta_type, parse_expr, parse_symint};
use crate::ops::{self, Ctx, OutSlot, State, Val};
use crate::schema::{self, Arg, ArgValue, ExportedProgram, FastMap, FastSet, TensorMeta};
use crate::{ConstValue, Imported, InputSlot, OutputSlot};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use tpuc_ir::{ArgInfo, ArgKind, Builder, DType, Loc, Module, ResultInfo, ResultKind, SymExpr, TensorData, TensorType, ValueId};

fn range_bound(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Number(n)) => n.as_i64().filter(|&x| x.unsigned_abs() < (1u64 << 62)),
        _ => None, // null, "int_oo", "oo", huge values: unbounded
    }
}

/// Collects every name an argument value refers to (`name` / `as_name` strings).
fn collect_names<S: std::hash::BuildHasher>(v: &Value, out: &mut HashSet<String, S>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if (k == "name" || k == "as_name") && x.is_string() {
                    if let Some(s) = x.as_str() {
                        out.insert(s.to_string());
                    }
                } else {
                    collect_names(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_names(x, out)),
        _ => {}
    }
}

/// Collects every name an argument refers to, as [`collect_names`] does for its JSON form.
fn names_in<S: std::hash::BuildHasher>(a: &ArgValue, out: &mut HashSet<String, S>) {
    let sym = |s: &schema::SymIntArg, out: &mut HashSet<String, S>| {
        if let schema::SymIntArg::Name(n) = s {
            out.insert(n.clone());
        }
    };
    match a {
        ArgValue::Json(v) => collect_names(v, out),
        ArgValue::Decoded(a) => match a {
            Arg::Tensor(n) => {
                out.insert(n.clone());
            }
            Arg::Tensors(ns) => out.extend(ns.iter().cloned()),
            Arg::OptTensors(ns) => out.extend(ns.iter().flatten().cloned()),
            Arg::SymInt(s) => sym(s, out),
            Arg::SymInts(ss) => ss.iter().for_each(|s| sym(s, out)),
            _ => {}
        },
    }
}

/// Every symbol name in the program's size expressions.
fn collect_symbols(prog: &ExportedProgram<'_>) -> Vec<String> {
    let ident = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut add = |text: &str| {
        if let Ok(e) = parse_expr(text, &ident) {
            for s in e.symbols() {
                if seen.insert(s.to_string()) {
                    names.push(s.to_string());
                }
            }
        }
    };
    let mut keys: Vec<&String> = prog.range_constraints.keys().collect();
    keys.sort();
    for k in keys {
        add(k);
    }
    let g = &prog.graph_module.graph;
    // By tensor name, of the tensors with symbolic sizes.
    let mut metas: Vec<(&String, &TensorMeta)> =
        g.tensor_values.iter().filter(|(_, m)| m.sizes.iter().any(|s| matches!(s, schema::SymIntJson::Expr(_)))).collect();
    metas.sort_by(|a, b| a.0.cmp(b.0));
    for (_, m) in metas {
        for s in &m.sizes {
            if let schema::SymIntJson::Expr(e) = s {
                add(&e.expr_str);
            }
        }
    }
    let mut syms: Vec<(&String, &Value)> = g.sym_int_values.iter().collect();
    syms.sort_by(|a, b| a.0.cmp(b.0));
    for (_, v) in syms {
        if let Some(t) = v.get("as_expr").and_then(|e| e.get("expr_str")).and_then(Value::as_str) {
            add(t);
        }
    }
    names
}

fn const_value(a: &Arg) -> Option<ConstValue> {
    Some(match a {
        Arg::None => ConstValue::None,
        Arg::Int(i) => ConstValue::Int(*i),
        Arg::Float(f) => ConstValue::Float(*f),
        Arg::Bool(b) => ConstValue::Bool(*b),
        Arg::Str(s) => ConstValue::Str(s.clone()),
        _ => return None,
    })
}

fn const_val(c: &ConstValue) -> Val {
    match c {
        ConstValue::None => Val::None,
        ConstValue::Int(i) => Val::Sym(SymExpr::constant(*i)),
        ConstValue::Float(f) => Val::Float(*f),
        ConstValue::Bool(b) => Val::Bool(Some(*b)),
        ConstValue::Str(s) => Val::Str(s.clone()),
    }
}

/// `ConstantValue` union of `InputToConstantInputSpec`.
fn decode_constant(v: &Value) -> Result<ConstValue, ImportError> {
    let a = schema::decode_arg(v)?;
    const_value(&a).ok_or_else(|| ImportError::Signature(format!("unsupported constant input {v}")))
}

fn flatten_outputs(outputs: &[ArgValue]) -> Result<Vec<OutSlot>, ImportError> {
    let mut out = Vec::new();
    for o in outputs {
        match o.decode()? {
            Arg::Tensor(n) => out.push(OutSlot::Tensor(n)),
            Arg::Tensors(ns) => out.extend(ns.into_iter().map(OutSlot::Tensor)),
            Arg::OptTensors(ns) => out.extend(ns.into_iter().map(|n| n.map_or(OutSlot::None, OutSlot::Tensor))),
            Arg::SymInt(schema::SymIntArg::Name(n)) => out.push(OutSlot::Sym(n)),
            Arg::SymInts(ns) => {
                for n in ns {
                    out.push(match n {
                        schema::SymIntArg::Name(n) => OutSlot::Sym(n),
                        schema::SymIntArg::Int(_) => OutSlot::None,
                    })
                }
            }
            Arg::None => out.push(OutSlot::None),
            // Decoded while parsing, the other arms carry no name.
            _ if o.json().is_none() => out.push(OutSlot::None),
            _ => {
                let (k, x) = schema::union_arm(o.json().unwrap_or(&Value::Null))?;
                let name = x.get("as_name").or_else(|| x.get("name")).and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    out.push(OutSlot::None);
                } else {
                    let _ = k;
                    out.push(OutSlot::Other(name.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// Imports `prog`. `dim_names` maps torch's symbol names to the user's (`s27` → `seq`, from
/// `torch.export.Dim("seq")`); a user name is taken where it is a valid symbol name and no other
/// symbol has it, so IR, errors and bucket plans speak of `seq`.
pub(crate) fn import_program(
    prog: &ExportedProgram<'_>,
    payloads: Option<Payloads>,
    dim_names: &HashMap<String, String>,
) -> Result<Imported, ImportError> {
    let g = &prog.graph_module.graph;
    let mut module = Module::new();
    let rename = declare_symbols(prog, dim_names, &mut module)?;
    let sig = read_inputs(prog, &rename)?;
    let weights = match &payloads {
        Some(p) => check_weights(p, &sig.weight_args)?,
        None => BTreeMap::new(),
    };
    let (fi, block) = module.add_func("main", sig.args);
    let (env, sym_args) = bind_arguments(&module, block, sig.env, &sig.arg_names, &sig.sym_inputs);
    let uses = used_names(prog);
    let mut st = State { env, metas: &g.tensor_values, sym_ints: &g.sym_int_values, uses, sym_args, rename: rename.clone(), streams: Default::default(), checks: Default::default(), bound: Default::default(), host_reads: Default::default(), sizing: Default::default() };
    lower_nodes(&mut module, block, g, &rename, &mut st)?;
    let (mut results, mut result_infos, outputs) = read_outputs(prog, &st)?;
    append_checks(&st, &mut results, &mut result_infos);
    {
        let mut b = Builder::new(&mut module, block);
        b.ret(&results).map_err(|e| ImportError::Verify(e.to_string()))?;
    }
    if let Some(f) = module.funcs.get_mut(fi) {
        f.results = result_infos;
    }
    drop_unused_symbols(&mut module, &sig.sym_inputs, &outputs);
    if let Err(errs) = tpuc_ir::verify(&module) {
        return Err(ImportError::Verify(errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")));
    }
    let torch_version = prog.torch_version.as_ref().and_then(Value::as_str).map(str::to_string);
    let has_weight_data = payloads.is_some();
    let (inputs, sym_inputs) = (sig.inputs, sig.sym_inputs);
    let host_reads = st.host_reads.into_inner();
    Ok(Imported { module, weights, inputs, outputs, sym_inputs, torch_version, has_weight_data, source: bytes::Bytes::new(), host_reads })
}

/// Step 9: the symbols no type, SymInt input or output speaks of leave the module: torch
/// records a range for every symbol, also for a number read from a tensor that only feeds
/// run-time assertions (`torch._check_tensor_all`), which no input gives a size.
fn drop_unused_symbols(module: &mut Module, sym_inputs: &[(usize, SymExpr)], outputs: &[OutputSlot]) {
    let mut used: HashSet<String> = HashSet::new();
    for (_, v) in module.values.iter() {
        for d in &v.ty.dims {
            if let tpuc_ir::Dim::Sym(e) = d {
                used.extend(e.symbols().into_iter().map(|s| s.to_string()));
            }
        }
    }
    for (_, e) in sym_inputs {
        used.extend(e.symbols().into_iter().map(|s| s.to_string()));
    }
    for o in outputs {
        if let OutputSlot::Sym(e) = o {
            used.extend(e.symbols().into_iter().map(|s| s.to_string()));
        }
    }
    module.symbols.retain(|s| used.contains(&*s.name));
}

/// Step 1: the program's symbols, renamed to the user's dim names where given (else kept when
/// they are valid module symbols, else `sym<k>`), declared in `module` with their ranges.
/// Returns torch symbol name → module symbol name.
fn declare_symbols(
    prog: &ExportedProgram<'_>,
    dim_names: &HashMap<String, String>,
    module: &mut Module,
) -> Result<HashMap<String, String>, ImportError> {
    let mut rename: HashMap<String, String> = HashMap::new();
    let symbols = collect_symbols(prog);
    let mut taken: HashSet<String> = symbols.iter().filter(|s| tpuc_ir::is_symbol_name(s)).cloned().collect();
    for s in &symbols {
        if let Some(user) = dim_names.get(s) {
            if user == s || (tpuc_ir::is_symbol_name(user) && taken.insert(user.clone())) {
                rename.insert(s.clone(), user.clone());
            }
        }
    }
    let mut k = 0;
    for s in &symbols {
        if rename.contains_key(s) {
            continue;
        }
        if tpuc_ir::is_symbol_name(s) {
            rename.insert(s.clone(), s.clone());
        } else {
            let fresh = loop {
                let c = format!("sym{k}");
                k += 1;
                if !taken.contains(&c) {
                    break c;
                }
            };
            taken.insert(fresh.clone());
            rename.insert(s.clone(), fresh);
        }
    }
    for (later, first) in asserted_equal(prog) {
        if let Some(n) = rename.get(&first).cloned() {
            rename.insert(later, n);
        }
    }
    let mut ranged: Vec<(&String, &Value)> = prog.range_constraints.iter().collect();
    ranged.sort_by(|a, b| a.0.cmp(b.0));
    for (key, rc) in ranged {
        let Ok(e) = parse_expr(key, &rename) else { continue };
        let Some(name) = e.as_symbol() else { continue };
        let min = range_bound(rc.get("min_val")).unwrap_or(0).max(0);
        let max = range_bound(rc.get("max_val"));
        if max.is_some_and(|m| m < min) {
            return Err(ImportError::schema(format!("symbol `{key}` has an empty range [{min}, {max:?}]")));
        }
        module.symbols.declare(name, min, max);
    }
    for s in &symbols {
        if let Some(n) = rename.get(s) {
            if module.symbols.get(n).is_none() {
                module.symbols.declare(n, 0, None);
            }
        }
    }

    Ok(rename)
}

/// Data-dependent sizes torch compared for equality (`u3 == u2`): in an exported graph a
/// comparison of sizes only feeds a run-time assertion, made where an op met both (Higgs
/// Audio adds the rows of two selections by the same mask, each counted on its own). Each pair
/// as (the later symbol, the first of its class), so that both name one module symbol, bound by
/// the first count (see `sizes::bind_dim`). Like the other assertions, it is not evaluated.
fn asserted_equal(prog: &ExportedProgram<'_>) -> Vec<(String, String)> {
    let g = &prog.graph_module.graph;
    let ident = HashMap::new();
    let symbol_of = |a: &schema::NamedArgument<'_>| -> Option<String> {
        let Ok(Arg::SymInt(schema::SymIntArg::Name(n))) = a.arg.decode() else { return None };
        let e = parse_symint(g.sym_int_values.get(&n)?, &ident).ok()?;
        let s = e.as_symbol()?;
        // torch names data-dependent sizes u0, u1, ...
        (s.starts_with('u') && s[1..].chars().all(|c| c.is_ascii_digit()) && s.len() > 1).then(|| s.to_string())
    };
    let index = |s: &str| s[1..].parse::<u64>().unwrap_or(u64::MAX);
    // A union of the compared symbols: each symbol's parent, toward its class's first
    // (lowest-numbered) symbol, which has none.
    let mut parent: BTreeMap<String, String> = BTreeMap::new();
    let root = |parent: &BTreeMap<String, String>, mut s: String| {
        while let Some(p) = parent.get(&s) {
            s = p.clone();
        }
        s
    };
    for n in g.nodes.iter().filter(|n| n.target == "_operator.eq" && n.inputs.len() == 2) {
        let (Some(a), Some(b)) = (symbol_of(&n.inputs[0]), symbol_of(&n.inputs[1])) else { continue };
        let (ra, rb) = (root(&parent, a), root(&parent, b));
        if ra != rb {
            let (lo, hi) = if index(&ra) <= index(&rb) { (ra, rb) } else { (rb, ra) };
            parent.insert(hi, lo);
        }
    }
    parent.keys().map(|s| (s.clone(), root(&parent, s.clone()))).collect()
}

/// What the signature's input specs give: the function's arguments and how to fill them.
struct Inputs {
    /// Constant inputs and SymInt inputs, by FX name.
    env: FastMap<String, Val>,
    args: Vec<(TensorType, ArgInfo)>,
    /// The FX placeholder name of each argument.
    arg_names: Vec<String>,
    inputs: Vec<InputSlot>,
    weight_args: Vec<(String, TensorType)>,
    sym_inputs: Vec<(usize, SymExpr)>,
}

/// Step 2: the input specs in signature order (user inputs, parameters, buffers, constants),
/// plus the seed input of a program with random ops.
fn read_inputs(prog: &ExportedProgram<'_>, rename: &HashMap<String, String>) -> Result<Inputs, ImportError> {
    let g = &prog.graph_module.graph;
    let meta_of = |name: &str| -> Result<TensorType, ImportError> {
        let m = g
            .tensor_values
            .get(name)
            .ok_or_else(|| ImportError::schema(format!("no tensor_values entry for `{name}`")))?;
        meta_type(m, rename)
    };

    let mut env: FastMap<String, Val> = FastMap::default();
    let mut args: Vec<(TensorType, ArgInfo)> = Vec::new();
    let mut arg_names: Vec<String> = Vec::new(); // FX placeholder name per argument
    let mut inputs: Vec<InputSlot> = Vec::new();
    let mut weight_args: Vec<(String, TensorType)> = Vec::new();
    let mut sym_inputs: Vec<(usize, SymExpr)> = Vec::new();

    let specs: Cow<[Value]> = if prog.graph_module.signature.input_specs.is_empty() {
        g.inputs.iter().map(|a| serde_json::json!({ "user_input": { "arg": a } })).collect()
    } else {
        Cow::Borrowed(&prog.graph_module.signature.input_specs)
    };
    for spec in specs.iter() {
        let (kind, body) = schema::union_arm(spec)?;
        let weight = |field: &str, kind: ArgKind| -> Result<(String, String, ArgKind), ImportError> {
            let arg = schema::tensor_name(schema::field(body, "arg")?)?;
            let q = schema::as_str(schema::field(body, field)?)?.to_string();
            Ok((arg, q, kind))
        };
        let (placeholder, info_name, akind) = match kind {
            "user_input" => {
                let a = schema::decode_arg(schema::field(body, "arg")?)?;
                match a {
                    Arg::Tensor(n) => (n.clone(), n, ArgKind::UserInput),
                    Arg::SymInt(schema::SymIntArg::Name(n)) => {
                        let e = match g.sym_int_values.get(&n) {
                            Some(v) => parse_symint(v, rename)?,
                            None => return Err(ImportError::Signature(format!("SymInt input `{n}` has no sym_int_values entry"))),
                        };
                        sym_inputs.push((args.len(), e.clone()));
                        env.insert(n.clone(), Val::Sym(e));
                        inputs.push(InputSlot::Arg(args.len()));
                        args.push((TensorType::scalar(DType::I64), ArgInfo::new(ArgKind::SymInt, n.clone())));
                        arg_names.push(n);
                        continue;
                    }
                    Arg::SymInt(schema::SymIntArg::Int(i)) => {
                        inputs.push(InputSlot::Const(ConstValue::Int(i)));
                        continue;
                    }
                    other => match const_value(&other) {
                        Some(c) => {
                            inputs.push(InputSlot::Const(c));
                            continue;
                        }
                        None => {
                            return Err(ImportError::Signature(format!("unsupported user input of kind {}", other.kind())))
                        }
                    },
                }
            }
            "parameter" => weight("parameter_name", ArgKind::Parameter)?,
            "buffer" => weight("buffer_name", ArgKind::Buffer)?,
            "tensor_constant" => weight("tensor_constant_name", ArgKind::Constant)?,
            "token" => {
                // An effect token (see `ops::effects`): no argument, no value at run time.
                let name = schema::tensor_name(schema::field(body, "arg")?)?;
                env.insert(name, Val::Token);
                inputs.push(InputSlot::Const(ConstValue::None));
                continue;
            }
            "constant_input" => {
                let name = schema::as_str(schema::field(body, "name")?)?.to_string();
                let c = decode_constant(schema::field(body, "value")?)?;
                env.insert(name, const_val(&c));
                inputs.push(InputSlot::Const(c));
                continue;
            }
            other => return Err(ImportError::Signature(format!("unsupported input kind `{other}`"))),
        };
        let ty = meta_of(&placeholder)?;
        if akind.is_weight() {
            weight_args.push((info_name.clone(), ty.clone()));
        }
        inputs.push(InputSlot::Arg(args.len()));
        args.push((ty, ArgInfo::new(akind, info_name)));
        arg_names.push(placeholder);
    }

    // Random ops draw from a counter-based generator keyed by one more user input, the seed
    // (see `ops::random`): the program holds no random state.
    if g.nodes.iter().any(crate::ops::random::draws) {
        let name = crate::ops::build::SEED_INPUT.to_string();
        inputs.push(InputSlot::Arg(args.len()));
        args.push((TensorType::from_static(DType::I64, &[2]), ArgInfo::new(ArgKind::UserInput, name.clone())));
        arg_names.push(name);
    }

    Ok(Inputs { env, args, arg_names, inputs, weight_args, sym_inputs })
}

/// Step 3: each weight argument's data from the archive, checked against the program's type.
fn check_weights(p: &Payloads, weight_args: &[(String, TensorType)]) -> Result<BTreeMap<String, TensorData>, ImportError> {
    let mut weights = BTreeMap::new();
    for (name, ty) in weight_args {
        if let Some(why) = p.unavailable.get(name) {
            return Err(ImportError::Weight { name: name.clone(), message: why.clone() });
        }
        let data: &TensorData = p.tensors.get(name).ok_or_else(|| ImportError::Weight {
            name: name.clone(),
            message: "not found in the archive's weights or constants".into(),
        })?;
        if &data.ty != ty {
            return Err(ImportError::Weight {
                name: name.clone(),
                message: format!("stored as {}, the program uses {ty}", data.ty),
            });
        }
        weights.insert(name.clone(), data.clone());
    }
    Ok(weights)
}

/// Step 4: the entry block's arguments bound to their FX names, and each SymInt input's
/// expression to the argument carrying it.
fn bind_arguments(
    module: &Module,
    block: tpuc_ir::BlockId,
    mut env: FastMap<String, Val>,
    arg_names: &[String],
    sym_inputs: &[(usize, SymExpr)],
) -> (FastMap<String, Val>, HashMap<SymExpr, ValueId>) {
    let block_args = module.blocks[block].args();
    let mut sym_args = HashMap::new();
    for (i, n) in arg_names.iter().enumerate() {
        let Some(&v) = block_args.get(i) else { continue };
        if !env.contains_key(n) {
            env.insert(n.clone(), Val::Tensor(v));
        }
    }
    for (i, e) in sym_inputs {
        if let Some(&v) = block_args.get(*i) {
            sym_args.entry(e.clone()).or_insert(v);
        }
    }
    (env, sym_args)
}

/// Step 5: every name a node, the graph's outputs or the output specs read.
fn used_names(prog: &ExportedProgram<'_>) -> FastSet<String> {
    let g = &prog.graph_module.graph;
    let mut uses = FastSet::default();
    for n in &g.nodes {
        for a in &n.inputs {
            names_in(&a.arg, &mut uses);
        }
    }
    for o in &g.outputs {
        collect_names(o, &mut uses);
    }
    for s in &prog.graph_module.signature.output_specs {
        collect_names(s, &mut uses);
    }

    uses
}

/// Step 6: the nodes, in graph order, through the op registry.
///
/// A node that fails (an unsupported op, arguments its lowering rejects, a result of the
/// wrong type) does not end the walk: the failure is recorded and its outputs are stood in
/// for by values of the types torch recorded for them, so later nodes are lowered and
/// checked as they would be if it had worked. Outputs without a recorded tensor type
/// (SymInts, missing metadata) cannot be stood in for; a node that reads one is skipped
/// without being reported, unless its op is unsupported, which is reported regardless.
/// The import then fails with every failure, in graph order (see `ImportError::Nodes`).
fn lower_nodes(
    module: &mut Module,
    block: tpuc_ir::BlockId,
    g: &schema::Graph<'_>,
    rename: &HashMap<String, String>,
    st: &mut State<'_>,
) -> Result<(), ImportError> {
    let mut walk = Walk { module, block, g, rename, views: HashSet::new() };
    let mut failures: Vec<ImportError> = Vec::new();
    let mut unknown: HashSet<String> = HashSet::new();
    let mut frames: FastMap<&str, Option<String>> = FastMap::default();
    for (i, node) in g.nodes.iter().enumerate() {
        let outs = flatten_outputs(&node.outputs)?;
        let name = node
            .name
            .clone()
            .or_else(|| outs.iter().find_map(|o| o.name().map(str::to_string)))
            .unwrap_or_else(|| format!("node{i}"));
        // Nodes of one source line share their trace: each distinct trace is read once.
        let source = match schema::stack_trace(node) {
            Some(t) => frames.entry(t.literal()).or_insert_with(|| schema::user_frame(&t.text())).clone(),
            None => None,
        };
        let at = NodeRef { node: name, target: node.target.clone(), source };
        let reads_unknown = !unknown.is_empty() && {
            let mut names = HashSet::new();
            node.inputs.iter().for_each(|a| names_in(&a.arg, &mut names));
            names.iter().any(|n| unknown.contains(n))
        };
        if reads_unknown {
            if let Err(e @ ImportError::UnsupportedOp { .. }) = resolve(node, &at, &walk.views) {
                failures.push(e);
            }
            unknown.extend(outs.iter().filter_map(|o| o.name().map(str::to_string)));
            continue;
        }
        match walk.node(node, &outs, &at, st) {
            Ok(()) => {}
            Err(e) if e.is_node_error() => {
                failures.push(e);
                for slot in &outs {
                    let Some(n) = slot.name() else { continue };
                    match walk.stand_in(slot, &at) {
                        Some(v) => {
                            st.env.insert(n.to_string(), Val::Tensor(v));
                        }
                        None => {
                            unknown.insert(n.to_string());
                        }
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    match failures.len() {
        0 => {}
        1 => return Err(failures.remove(0)),
        _ => return Err(ImportError::Nodes(failures)),
    }

    Ok(())
}

/// Step 7: the output specs: the function's results (user outputs, the loss, mutations and
/// gradients) and the outputs that are SymInts or constants.
fn read_outputs(prog: &ExportedProgram<'_>, st: &State<'_>) -> Result<(Vec<ValueId>, Vec<ResultInfo>, Vec<OutputSlot>), ImportError> {
    let g = &prog.graph_module.graph;
    let out_specs: Cow<[Value]> = if prog.graph_module.signature.output_specs.is_empty() {
        g.outputs.iter().map(|a| serde_json::json!({ "user_output": { "arg": a } })).collect()
    } else {
        Cow::Borrowed(&prog.graph_module.signature.output_specs)
    };
    let mut results: Vec<ValueId> = Vec::new();
    let mut result_infos: Vec<ResultInfo> = Vec::new();
    let mut outputs: Vec<OutputSlot> = Vec::new();
    for spec in out_specs.iter() {
        let (kind, body) = schema::union_arm(spec)?;
        let arg_v = schema::field(body, "arg")?;
        if kind == "token" {
            // The effect token torch returns (see `ops::effects`): nothing at run time.
            outputs.push(OutputSlot::Const(ConstValue::None));
            continue;
        }
        let named = |field: &str| -> Result<String, ImportError> { Ok(schema::as_str(schema::field(body, field)?)?.to_string()) };
        let (rkind, rname_field) = match kind {
            "user_output" => (ResultKind::UserOutput, None),
            "loss_output" => (ResultKind::Loss, None),
            "buffer_mutation" => (ResultKind::BufferMutation, Some("buffer_name")),
            "parameter_mutation" => (ResultKind::BufferMutation, Some("parameter_name")),
            "gradient_to_parameter" => (ResultKind::Gradient, Some("parameter_name")),
            "gradient_to_user_input" => (ResultKind::Gradient, Some("user_input_name")),
            "user_input_mutation" => (ResultKind::UserInputMutation, Some("user_input_name")),
            other => return Err(ImportError::Signature(format!("unsupported output kind `{other}`"))),
        };
        // `arg` is an Argument for user outputs and a bare TensorArgument otherwise.
        let arg = if arg_v.get("name").is_some() && arg_v.as_object().is_some_and(|m| m.len() == 1) {
            Arg::Tensor(schema::tensor_name(arg_v)?)
        } else {
            schema::decode_arg(arg_v)?
        };
        match arg {
            Arg::Tensor(n) => {
                let v = match st.env.get(&n) {
                    Some(Val::Tensor(v)) => *v,
                    Some(Val::Sym(e)) => {
                        outputs.push(sym_output(st, e, &n, &mut results, &mut result_infos));
                        continue;
                    }
                    _ => return Err(ImportError::Signature(format!("output `{n}` is not a computed tensor"))),
                };
                let rname = match rname_field {
                    Some(f) => named(f)?,
                    None => n.clone(),
                };
                outputs.push(OutputSlot::Result(results.len()));
                results.push(v);
                result_infos.push(ResultInfo::new(rkind, rname));
            }
            Arg::SymInt(s) => {
                let e = match s {
                    schema::SymIntArg::Int(i) => SymExpr::constant(i),
                    schema::SymIntArg::Name(n) => match st.env.get(&n) {
                        Some(Val::Sym(e)) => e.clone(),
                        _ => return Err(ImportError::Signature(format!("output `{n}` is not a SymInt"))),
                    },
                };
                outputs.push(match e.as_const() {
                    Some(c) => OutputSlot::Const(ConstValue::Int(c)),
                    None => sym_output(st, &e, &e.to_string(), &mut results, &mut result_infos),
                });
            }
            other => match const_value(&other) {
                Some(c) => outputs.push(OutputSlot::Const(c)),
                None => return Err(ImportError::Signature(format!("unsupported output of kind {}", other.kind()))),
            },
        }
    }
    Ok((results, result_infos, outputs))
}

/// A SymInt output: a data-dependent symbol is the count the program computed for it (a 0-d
/// i64 result), anything else a size expression of the inputs the caller evaluates.
fn sym_output(st: &State<'_>, e: &SymExpr, name: &str, results: &mut Vec<ValueId>, infos: &mut Vec<ResultInfo>) -> OutputSlot {
    match e.as_symbol().and_then(|s| st.bound.borrow().get(s).copied()) {
        Some(count) => {
            let slot = OutputSlot::Result(results.len());
            results.push(count);
            infos.push(ResultInfo::new(ResultKind::UserOutput, name.to_string()));
            slot
        }
        None => OutputSlot::Sym(e.clone()),
    }
}

/// Step 8: the statuses the caller checks after the run (see `ops::effects`), as results of
/// kind `check` after the signature's outputs.
fn append_checks(st: &State<'_>, results: &mut Vec<ValueId>, infos: &mut Vec<ResultInfo>) {
    for (v, api) in st.checks.take() {
        results.push(v);
        infos.push(ResultInfo::new(ResultKind::Check, api));
    }
}

/// How a node is lowered: its op's lowering and, for an in-place op lowered through its
/// functional form, the name of the tensor it mutates.
fn resolve(node: &schema::Node<'_>, at: &NodeRef, views: &HashSet<String>) -> Result<(ops::OpFn, Option<String>), ImportError> {
    if let Some(f) = ops::lookup(&node.target) {
        return Ok((f, None));
    }
    // An in-place op (`add_.Tensor`) in a non-functional graph: lower its functional form
    // and rebind the mutated input, unless that input is a view of another tensor.
    let Some(f) = functional_form(&node.target).and_then(|t| ops::lookup(&t)) else {
        return Err(ImportError::UnsupportedOp { target: node.target.clone(), node: at.node.clone(), location: at.source.clone() });
    };
    let self_name = node.inputs.first().and_then(|a| match a.arg.decode() {
        Ok(Arg::Tensor(n)) => Some(n),
        _ => None,
    });
    let Some(self_name) = self_name else {
        return Err(ImportError::Op { at: Box::new(at.clone()), message: "in-place op without a tensor `self`".into() });
    };
    if views.contains(&self_name) {
        return Err(ImportError::Op {
            at: Box::new(at.clone()),
            message: format!("in-place update of `{self_name}`, a view of another tensor, is not supported"),
        });
    }
    Ok((f, Some(self_name)))
}

/// The graph walk's state besides the value environment.
struct Walk<'a, 'p> {
    module: &'a mut Module,
    block: tpuc_ir::BlockId,
    g: &'p schema::Graph<'p>,
    rename: &'a HashMap<String, String>,
    /// Names of view-op results (in-place updates of them are not supported).
    views: HashSet<String>,
}

impl Walk<'_, '_> {
    /// Lowers one node and binds its outputs in `st.env`.
    fn node(&mut self, node: &schema::Node<'_>, outs: &[OutSlot], at: &NodeRef, st: &mut State) -> Result<(), ImportError> {
        let boxed = || Box::new(at.clone());
        let (f, inplace_self) = resolve(node, at, &self.views)?;
        if is_view_op(&node.target) {
            self.views.extend(outs.iter().filter_map(|o| o.name().map(str::to_string)));
        }
        let scope = precision_scope(node).map_err(|message| ImportError::Op { at: boxed(), message })?;
        let first_op = self.module.ops.len();
        let loc = self.module.add_loc(Loc::new(at.node.clone(), node.target.clone(), at.source.clone()));
        let mut b = Builder::new(self.module, self.block);
        b.loc = Some(loc);
        let mut vals = {
            let mut cx = Ctx { b, node, st, outs };
            f(&mut cx).map_err(|e| ImportError::Op { at: boxed(), message: e.to_string() })?
        };
        if let Some(p) = scope {
            // Ops are allocated in order: those from first_op on are this node's.
            for d in self.module.ops.values_mut().skip(first_op) {
                if d.opcode().has_matmul_precision() {
                    d.attrs.set("precision_scope", tpuc_ir::AttrEnum::attr(p));
                }
            }
        }
        if let Some(self_name) = &inplace_self {
            if let (Some(Val::Tensor(v)), Some(Val::Tensor(orig))) = (vals.first().cloned(), st.env.get(self_name).cloned()) {
                // in-place results keep the mutated tensor's dtype and shape
                let dt = self.module.value_type(orig).dtype;
                let mut b = Builder::new(self.module, self.block);
                b.loc = Some(loc);
                let v = b.convert(v, dt).map_err(|e| ImportError::Op { at: boxed(), message: e.to_string() })?;
                if let Some(first) = vals.first_mut() {
                    *first = Val::Tensor(v);
                }
                st.env.insert(self_name.clone(), Val::Tensor(v));
            }
        }
        if vals.len() != outs.len() {
            return Err(ImportError::Op {
                at: boxed(),
                message: format!("lowering produced {} values for {} outputs", vals.len(), outs.len()),
            });
        }
        for (slot, val) in outs.iter().zip(&vals) {
            let Some(n) = slot.name() else { continue };
            if let (OutSlot::Tensor(_), Val::Tensor(v)) = (slot, val) {
                if let Some(meta) = self.g.tensor_values.get(n) {
                    let want = meta_type(meta, self.rename)?;
                    let got = self.module.value_type(*v);
                    let dims_ok = got.rank() == want.rank()
                        && got.dims.iter().zip(&want.dims).all(|(a, b)| a == b || !(a.is_static() && b.is_static()));
                    if got.dtype != want.dtype || !dims_ok {
                        return Err(ImportError::TypeMismatch {
                            at: boxed(),
                            value: n.to_string(),
                            got: got.to_string(),
                            expected: want.to_string(),
                        });
                    }
                }
            }
        }
        for (slot, val) in outs.iter().zip(vals) {
            if let Some(n) = slot.name() {
                st.env.insert(n.to_string(), val);
            }
        }
        Ok(())
    }

    /// A value of the type torch recorded for a failed node's tensor output (zeros), so that
    /// later nodes can still be lowered; `None` when the output has no usable recorded type.
    fn stand_in(&mut self, slot: &OutSlot, at: &NodeRef) -> Option<ValueId> {
        let OutSlot::Tensor(n) = slot else { return None };
        let ty = meta_type(self.g.tensor_values.get(n)?, self.rename).ok()?;
        let loc = self.module.add_loc(Loc::new(at.node.clone(), at.target.clone(), at.source.clone()));
        let mut b = Builder::new(self.module, self.block);
        b.loc = Some(loc);
        let zero = b.scalar(tpuc_ir::Scalar::Int(0), ty.dtype).ok()?;
        b.broadcast_in_dim(zero, &[], ty.dims.to_vec()).ok()
    }
}

/// The matmul precision a node's source scoped with `tpuc.precision(...)`, which torch carries
/// as the custom metadata `{"tpuc.precision": "high"}` (`torch.fx.traceback.annotate`).
fn precision_scope(node: &schema::Node<'_>) -> Result<Option<tpuc_ir::Precision>, String> {
    use tpuc_ir::AttrEnum;
    let Some(custom) = node.metadata.custom else { return Ok(None) };
    let text = custom.text();
    if !text.contains("tpuc.precision") {
        return Ok(None);
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("custom metadata is not JSON: {e}"))?;
    match v.get("tpuc.precision") {
        None => Ok(None),
        Some(Value::String(w)) => tpuc_ir::Precision::parse(w)
            .map(Some)
            .ok_or_else(|| format!("tpuc.precision {w:?}: expected one of {}", tpuc_ir::Precision::NAMES.join(", "))),
        Some(other) => Err(format!("tpuc.precision {other}: expected a string")),
    }
}

/// `torch.ops.aten.add_.Tensor` -> `torch.ops.aten.add.Tensor`.
fn functional_form(target: &str) -> Option<String> {
    let rest = target.strip_prefix("torch.ops.aten.")?;
    let (name, overload) = rest.split_once('.')?;
    let base = name.strip_suffix('_')?;
    if base.is_empty() || base.ends_with('_') {
        return None;
    }
    Some(format!("torch.ops.aten.{base}.{overload}"))
}

/// Ops whose result may share storage with their input in eager torch.
fn is_view_op(target: &str) -> bool {
    let Some(rest) = target.strip_prefix("torch.ops.aten.") else { return false };
    let name = rest.split('.').next().unwrap_or("");
    matches!(
        name,
        "view" | "_unsafe_view" | "reshape" | "alias" | "slice" | "select" | "narrow" | "transpose" | "permute" | "t"
            | "expand" | "unsqueeze" | "squeeze" | "flatten" | "unflatten" | "split" | "split_with_sizes" | "chunk"
            | "unbind" | "as_strided" | "diagonal" | "movedim" | "swapaxes" | "swapdims" | "mT" | "numpy_T"
            | "detach" | "unfold" | "view_as" | "expand_as" | "_reshape_alias"
    )
}
