//! Hostile input: truncated, bit-flipped and spliced archives and JSON must give errors, never
//! panics, and what does import must round-trip through the IR text.

mod common;

use proptest::prelude::*;
use std::sync::OnceLock;

fn archive() -> &'static [u8] {
    static A: OnceLock<Vec<u8>> = OnceLock::new();
    A.get_or_init(|| std::fs::read(common::fixtures_dir().join("mlp/core.pt2")).unwrap())
}

fn dynamic_json() -> &'static [u8] {
    static A: OnceLock<Vec<u8>> = OnceLock::new();
    A.get_or_init(|| {
        use std::io::Read;
        let f = std::fs::File::open(common::fixtures_dir().join("mlp/dynamic_core.pt2")).unwrap();
        let mut z = zip::ZipArchive::new(f).unwrap();
        let name = z.file_names().find(|n| n.ends_with("models/model.json")).unwrap().to_string();
        let mut out = Vec::new();
        z.by_name(&name).unwrap().read_to_end(&mut out).unwrap();
        out
    })
}

/// Imports and, on success, checks the module survives a text round trip (the import itself
/// refuses modules that do not verify, so verifying here again could not fail).
fn import(bytes: Vec<u8>) {
    if let Ok(imp) = tpuc_frontend_fx::import_bytes(bytes) {
        common::check_text_roundtrip(&imp.module);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn truncated_archives(len in 0usize..12_200) {
        let a = archive();
        import(a[..len.min(a.len())].to_vec());
    }

    #[test]
    fn flipped_archive_bytes(flips in proptest::collection::vec((0usize..12_200, 1u8..=255), 1..8)) {
        let mut a = archive().to_vec();
        let n = a.len();
        for (i, x) in flips {
            a[i % n] ^= x;
        }
        import(a);
    }

    #[test]
    fn flipped_json_bytes(flips in proptest::collection::vec((0usize..100_000, 1u8..=255), 1..4)) {
        let mut a = dynamic_json().to_vec();
        let n = a.len();
        for (i, x) in flips {
            a[i % n] ^= x;
        }
        import(a);
    }

    #[test]
    fn json_digit_edits(edits in proptest::collection::vec((0usize..100_000, prop::sample::select(vec!["-1", "0", "9223372036854775807", "-9223372036854775808", "1e308", "99999999999999999999", "\"x\"", "null", "[]", "{}"])), 1..4)) {
        // replace numbers in the JSON with hostile values
        let text = String::from_utf8(dynamic_json().to_vec()).unwrap();
        let mut out = text.clone();
        for (i, rep) in edits {
            let digits: Vec<usize> = out.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
            if digits.is_empty() { break; }
            let start = digits[i % digits.len()];
            let end = out[start..].find(|c: char| !c.is_ascii_digit()).map_or(out.len(), |e| start + e);
            out.replace_range(start..end, rep);
        }
        import(out.into_bytes());
    }
}

/// Programs that once crashed the importer (tests/data/regressions), each with what importing
/// it must give now: `Ok`, or an error whose text contains the given words. An error must name
/// the node, its op and the source line.
const REGRESSIONS: [(&str, Option<&str>); 9] = [
    // found by the `import_edits` fuzz target: glu indexed the empty shape of a rank-0 tensor
    ("glu_rank0", Some("glu does not take a rank-0 tensor")),
    ("conv2d_same_rank0_weight", Some("convolution weight must have rank >= 3")),
    ("select_backward_no_sizes", Some("dim 0 out of range")),
    ("select_scatter_rank0", Some("dim 0 out of range")),
    ("slice_backward_negative_size", Some("invalid size -3")),
    ("unflatten_rank0", Some("unflatten of a rank-0 tensor")),
    ("repeat_interleave_rank0_dim", Some("repeat_interleave along a dim of a rank-0 tensor")),
    ("movedim_rank0", None),
    ("unfold_rank0", None),
];

#[test]
fn regression_programs_import_or_name_the_node() {
    let dir = common::data_dir().join("regressions");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".json").to_string())
        .collect();
    files.sort();
    let mut listed: Vec<String> = REGRESSIONS.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every program in tests/data/regressions has an entry in REGRESSIONS");
    for (name, want) in REGRESSIONS {
        let bytes = std::fs::read(dir.join(format!("{name}.json"))).unwrap();
        let node: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let node = node["graph_module"]["graph"]["nodes"][0]["name"].as_str().unwrap().to_string();
        match (tpuc_frontend_fx::import_bytes(bytes), want) {
            (Ok(imp), None) => assert!(tpuc_ir::verify(&imp.module).is_ok(), "{name}"),
            (Err(e), Some(words)) => {
                let msg = e.to_string();
                assert!(msg.contains(words), "{name}: {msg}");
                assert!(msg.contains(&format!("at node `{node}` (model.py:3 in forward)")), "{name}: {msg}");
            }
            (Ok(_), Some(words)) => panic!("{name}: imported, expected an error with `{words}`"),
            (Err(e), None) => panic!("{name}: {e}"),
        }
    }
}

fn gpt2_json() -> &'static serde_json::Value {
    static A: OnceLock<serde_json::Value> = OnceLock::new();
    A.get_or_init(|| {
        use std::io::Read;
        let f = std::fs::File::open(common::fixtures_dir().join("gpt2_block/train_fwd.pt2")).unwrap();
        let mut z = zip::ZipArchive::new(f).unwrap();
        let name = z.file_names().find(|n| n.ends_with("models/model.json")).unwrap().to_string();
        let mut out = Vec::new();
        z.by_name(&name).unwrap().read_to_end(&mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    })
}

fn targets() -> &'static Vec<String> {
    static T: OnceLock<Vec<String>> = OnceLock::new();
    T.get_or_init(tpuc_frontend_fx::supported_targets)
}

/// A hostile argument value.
fn arg_strategy() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    let ints = prop::sample::select(vec![-1i64, 0, 1, 2, 3, -2, 7, 1 << 40, i64::MAX, i64::MIN, -100]);
    prop_oneof![
        ints.clone().prop_map(|i| json!({ "as_int": i })),
        proptest::collection::vec(ints.clone(), 0..5).prop_map(|v| json!({ "as_ints": v })),
        prop::sample::select(vec![0.0f64, -1.5, 1e300, 0.5]).prop_map(|f| json!({ "as_float": f })),
        prop::sample::select(vec!["NaN", "Infinity", "-Infinity"]).prop_map(|f| json!({ "as_float": f })),
        any::<bool>().prop_map(|b| json!({ "as_bool": b })),
        Just(json!({ "as_none": true })),
        prop::sample::select(vec!["primals_3", "view", "permute_1", "where", "full", "arange", "nope"]).prop_map(|n| json!({ "as_tensor": { "name": n } })),
        proptest::collection::vec(prop::sample::select(vec!["primals_3", "view", "le"]), 0..3)
            .prop_map(|v| json!({ "as_tensors": v.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>() })),
        prop::sample::select(vec![0i64, 5, 7, 12, 99]).prop_map(|d| json!({ "as_scalar_type": d })),
        prop::sample::select(vec!["tanh", "none", "floor", "same", "reflect"]).prop_map(|s| json!({ "as_string": s })),
        prop::sample::select(vec![-1i64, 0, 4]).prop_map(|i| json!({ "as_sym_int": { "as_int": i } })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any lowering, given another node's arguments (possibly edited), errors or succeeds.
    #[test]
    fn any_lowering_on_foreign_arguments(
        node in 0usize..200,
        target in 0usize..1000,
        edits in proptest::collection::vec((0usize..8, arg_strategy()), 0..4),
    ) {
        let mut v = gpt2_json().clone();
        let nodes = v["graph_module"]["graph"]["nodes"].as_array_mut().unwrap();
        let n = node % nodes.len();
        let t = &targets()[target % targets().len()];
        nodes[n]["target"] = serde_json::Value::String(t.clone());
        for (i, a) in edits {
            if let Some(inputs) = nodes[n]["inputs"].as_array_mut() {
                if !inputs.is_empty() {
                    let k = i % inputs.len();
                    inputs[k]["arg"] = a;
                }
            }
        }
        import(serde_json::to_vec(&v).unwrap());
    }
}

// ---------------------------------------------------------------- schema-shaped arguments

/// One registered ATen target with its argument schema (tests/data/op_schemas.tsv).
struct OpSchema {
    target: String,
    /// (name, type, has a default)
    args: Vec<(String, String, bool)>,
    returns: Vec<String>,
}

/// Python-level targets and higher-order ops (no ATen schema), in the table's format.
const PYTHON_SCHEMAS: &str = "\
torch.ops.higher_order.with_effects\ttoken:Tensor op:str info:Tensor api_name:str is_matrix:bool\tTensor
_operator.add\ta:number b:number\tint
_operator.sub\ta:number b:number\tint
_operator.mul\ta:number b:number\tint
_operator.floordiv\ta:number b:number\tint
_operator.mod\ta:number b:number\tint
_operator.truediv\ta:number b:number\tint
_operator.pow\ta:number b:number\tint
_operator.neg\ta:number\tint
_operator.eq\ta:number b:number\tint
_operator.lt\ta:number b:number\tint
_operator.ne\ta:number b:number\tint
_operator.le\ta:number b:number\tint
_operator.gt\ta:number b:number\tint
_operator.ge\ta:number b:number\tint
_operator.and_\ta:number b:number\tint
_operator.or_\ta:number b:number\tint
_operator.not_\ta:number\tint
_operator.pos\ta:number\tint
torch.sym_max\ta:number b:number\tint
torch.sym_min\ta:number b:number\tint
torch.sym_float\ta:number\tint
torch.sym_int\ta:number\tint
torch.sym_not\ta:number\tint
torch.sym_ite\tb:number t:number f:number\tint
math.ceil\ta:number\tint
math.floor\ta:number\tint
math.trunc\ta:number\tint
";

fn schemas() -> &'static Vec<OpSchema> {
    static S: OnceLock<Vec<OpSchema>> = OnceLock::new();
    S.get_or_init(|| {
        let text = std::fs::read_to_string(common::data_dir().join("op_schemas.tsv")).unwrap();
        text.lines()
            .chain(PYTHON_SCHEMAS.lines())
            .filter(|l| !l.is_empty())
            .map(|l| {
                let mut cols = l.split('\t');
                let name = cols.next().unwrap();
                let target = if name.starts_with("_operator.") || name.starts_with("torch.") || name.starts_with("math.") {
                    name.to_string()
                } else {
                    format!("torch.ops.aten.{name}")
                };
                let args = cols
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .map(|a| {
                        let (name, ty) = a.split_once(':').unwrap();
                        let default = ty.ends_with('=');
                        (name.to_string(), ty.trim_end_matches('=').to_string(), default)
                    })
                    .collect();
                let returns = cols.next().unwrap_or("").split_whitespace().map(str::to_string).collect();
                OpSchema { target, args, returns }
            })
            .collect()
    })
}

/// The program inputs the schema-shaped cases draw tensors from: ranks 0 to 5, an empty
/// tensor, integer, bool and bf16 tensors, and one with a symbolic dim (s0, also passed as
/// the SymInt input `n`).
const SWEEP_INPUTS: [(&str, i64, &[i64]); 12] = [
    ("s", 7, &[]),
    ("v", 7, &[3]),
    ("m", 7, &[2, 3]),
    ("t3", 7, &[2, 3, 4]),
    ("t4", 7, &[2, 3, 4, 5]),
    ("t5", 7, &[1, 2, 3, 2, 2]),
    ("e", 7, &[0, 3]),
    ("i", 4, &[3]),
    ("i0", 4, &[]),
    ("b", 12, &[2, 3]),
    ("h", 13, &[2, 3]),
    ("d", 7, &[-1, 3]), // -1: the symbol s0
];

fn sizes_json(sizes: &[i64]) -> serde_json::Value {
    use serde_json::json;
    sizes.iter().map(|&s| if s < 0 { json!({ "as_expr": { "expr_str": "s0" } }) } else { json!({ "as_int": s }) }).collect()
}

/// A small deterministic generator (xorshift), so one seed names one case.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn sweep_int(g: &mut Gen) -> i64 {
    const INTS: [i64; 16] = [-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 8, -100, 1 << 20, 1 << 40, i64::MAX, i64::MIN];
    if g.one_in(3) {
        *g.pick(&INTS[..11])
    } else {
        *g.pick(&INTS[3..9])
    }
}

fn sweep_tensor(g: &mut Gen) -> serde_json::Value {
    // rank-0 tensors half again as often: the commonest gap in the lowerings' checks
    let name = if g.one_in(5) { *g.pick(&["s", "i0"]) } else { g.pick(&SWEEP_INPUTS).0 };
    serde_json::json!({ "name": name })
}

/// A value of schema type `ty` (torch's Python type names: `int`, `List[int]`,
/// `Optional[Tensor]`, ...), hostile but of the right kind (now and then of the wrong one).
fn sweep_value(g: &mut Gen, ty: &str) -> serde_json::Value {
    use serde_json::json;
    if let Some(inner) = ty.strip_prefix("Optional[").and_then(|t| t.strip_suffix(']')) {
        return if g.one_in(3) { json!({ "as_none": true }) } else { sweep_value(g, inner) };
    }
    if g.one_in(40) {
        // the wrong kind altogether
        let other = *g.pick(&["Tensor", "int", "List[int]", "float", "bool", "str"]);
        return sweep_value(g, other);
    }
    match ty {
        "Tensor" => json!({ "as_tensor": sweep_tensor(g) }),
        "List[Tensor]" => {
            let n = g.below(4);
            json!({ "as_tensors": (0..n).map(|_| sweep_tensor(g)).collect::<Vec<_>>() })
        }
        "List[Optional[Tensor]]" => {
            let n = g.below(4);
            let v: Vec<_> =
                (0..n).map(|_| if g.one_in(3) { json!({ "as_none": true }) } else { json!({ "as_tensor": sweep_tensor(g) }) }).collect();
            json!({ "as_optional_tensors": v })
        }
        "int" => {
            if g.one_in(8) {
                json!({ "as_sym_int": { "as_name": "n" } })
            } else {
                json!({ "as_int": sweep_int(g) })
            }
        }
        "List[int]" => {
            let n = g.below(6);
            if g.one_in(8) {
                let v: Vec<_> = (0..n).map(|_| if g.one_in(2) { json!({ "as_name": "n" }) } else { json!({ "as_int": sweep_int(g) }) }).collect();
                json!({ "as_sym_ints": v })
            } else {
                json!({ "as_ints": (0..n).map(|_| sweep_int(g)).collect::<Vec<_>>() })
            }
        }
        "float" => json!({ "as_float": *g.pick(&[0.0, 0.5, -1.5, 2.0, 1e300, -1e-30]) }),
        "List[float]" => {
            let n = g.below(4);
            json!({ "as_floats": (0..n).map(|_| *g.pick(&[0.0, 0.5, 2.0, -1.0])).collect::<Vec<f64>>() })
        }
        "number" => match g.below(6) {
            0 => json!({ "as_int": sweep_int(g) }),
            5 => json!({ "as_sym_int": { "as_name": "n" } }),
            1 => json!({ "as_bool": g.one_in(2) }),
            2 => json!({ "as_float": *g.pick(&["NaN", "Infinity", "-Infinity"]) }),
            _ => json!({ "as_float": *g.pick(&[0.0, 0.5, -1.5, 3.0]) }),
        },
        "bool" => json!({ "as_bool": g.one_in(2) }),
        "List[bool]" => {
            let n = g.below(5);
            json!({ "as_bools": (0..n).map(|_| g.one_in(2)).collect::<Vec<_>>() })
        }
        "str" => {
            let s = *g.pick(&[
                "tanh", "none", "floor", "trunc", "same", "valid", "reflect", "replicate", "circular", "constant", "mean",
                "sum", "prod", "amax", "amin", "bogus", "", "ij,jk->ik", "i,i->", "...ij->ji", "bij,bjk->bik", "ii->i",
                "ij", "->", "i...,...i", "a,b,c->abc",
            ]);
            json!({ "as_string": s })
        }
        "ScalarType" => json!({ "as_scalar_type": *g.pick(&[0i64, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 15, 36, 99]) }),
        "Layout" => json!({ "as_layout": 7 }),
        "MemoryFormat" => json!({ "as_memory_format": *g.pick(&[0i64, 1, 2]) }),
        "Device" => json!({ "as_device": { "type": "cpu", "index": null } }),
        _ => json!({ "as_none": true }),
    }
}

/// A program of one node calling `s.target` on schema-shaped arguments drawn by `seed`.
fn schema_case(s: &OpSchema, seed: u64) -> serde_json::Value {
    schema_case_with(s, seed, None)
}

/// [`schema_case`], with argument `fixed.0` given as `fixed.1` (left out when `None`) instead of
/// drawn; the other arguments are drawn as without it.
fn schema_case_with(s: &OpSchema, seed: u64, fixed: Option<(&str, Option<&serde_json::Value>)>) -> serde_json::Value {
    use serde_json::json;
    let mut g = Gen(seed | 1);
    let mut tensor_values = serde_json::Map::new();
    let mut input_specs = Vec::new();
    for (name, dtype, sizes) in SWEEP_INPUTS {
        tensor_values.insert(name.into(), json!({ "dtype": dtype, "sizes": sizes_json(sizes) }));
        input_specs.push(json!({ "user_input": { "arg": { "as_tensor": { "name": name } } } }));
    }
    input_specs.push(json!({ "user_input": { "arg": { "as_sym_int": { "as_name": "n" } } } }));
    let mut inputs = Vec::new();
    for (name, ty, default) in &s.args {
        if let Some((fixed, value)) = fixed.filter(|(f, _)| f == name) {
            if let Some(v) = value {
                inputs.push(json!({ "name": fixed, "arg": v, "kind": 1 }));
            }
            continue;
        }
        if *default && g.one_in(3) {
            continue;
        }
        inputs.push(json!({ "name": name, "arg": sweep_value(&mut g, ty), "kind": 1 }));
    }
    // outputs out0, out1, ...; a tensor output now and then gets a recorded type, usually
    // wrong (exercises the type checks and `out_type`)
    let mut outputs = Vec::new();
    let mut output_specs = Vec::new();
    let mut names = (0..).map(|k| format!("out{k}"));
    let mut out_tensor = |g: &mut Gen, tensor_values: &mut serde_json::Map<String, serde_json::Value>, name: String| {
        if g.one_in(2) {
            let rank = g.below(4);
            let sizes: Vec<i64> = (0..rank).map(|_| *g.pick(&[1i64, 2, 3])).collect();
            let dtype = *g.pick(&[7i64, 7, 4, 12, 13, 8]);
            tensor_values.insert(name.clone(), json!({ "dtype": dtype, "sizes": sizes_json(&sizes) }));
        }
        output_specs.push(json!({ "user_output": { "arg": { "as_tensor": { "name": name } } } }));
        json!({ "name": name })
    };
    for r in &s.returns {
        match r.as_str() {
            "Tensor" => {
                let t = out_tensor(&mut g, &mut tensor_values, names.next().unwrap());
                outputs.push(json!({ "as_tensor": t }));
            }
            "List[Tensor]" => {
                let n = 1 + g.below(4);
                let v: Vec<_> = (0..n).map(|_| out_tensor(&mut g, &mut tensor_values, names.next().unwrap())).collect();
                outputs.push(json!({ "as_tensors": v }));
            }
            "int" => outputs.push(json!({ "as_sym_int": { "as_name": names.next().unwrap() } })),
            _ => {}
        }
    }
    json!({
        "graph_module": {
            "graph": {
                "inputs": [],
                "outputs": [],
                "nodes": [{ "target": s.target, "inputs": inputs, "outputs": outputs, "name": "node" }],
                "tensor_values": tensor_values,
                "sym_int_values": { "n": { "as_expr": { "expr_str": "s0" } } },
            },
            "signature": { "input_specs": input_specs, "output_specs": output_specs },
        },
        "range_constraints": { "s0": { "min_val": 2, "max_val": 64 } },
    })
}

/// Imports a schema-shaped case; a panic comes back as a message naming the node.
fn import_schema_case(s: &OpSchema, seed: u64) -> Result<(), String> {
    let v = schema_case(s, seed);
    let bytes = serde_json::to_vec(&v).unwrap();
    std::panic::catch_unwind(|| import(bytes)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let node = &v["graph_module"]["graph"]["nodes"][0];
        format!("{} (seed {seed}) panicked: {msg}\n  node: {node}", s.target)
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("TPUC_SWEEP_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2048),
        ..ProptestConfig::default()
    })]

    /// Every registered ATen lowering, called with arguments of the kinds its schema names but
    /// hostile values (rank-0 and empty tensors, out-of-range dims, short or empty lists),
    /// errors or succeeds; it never panics.
    #[test]
    fn any_lowering_on_schema_shaped_arguments(target in 0usize..100_000, seed in any::<u64>()) {
        let s = &schemas()[target % schemas().len()];
        if let Err(e) = import_schema_case(s, seed) {
            panic!("{e}");
        }
    }
}

/// The schema-shaped cases, every target with a fixed set of seeds (a deterministic sweep;
/// `TPUC_SWEEP_SEEDS=N` runs more).
#[test]
fn every_lowering_on_schema_shaped_arguments() {
    let seeds: u64 = std::env::var("TPUC_SWEEP_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(16);
    let known: std::collections::HashSet<String> = targets().iter().cloned().collect();
    let mut failures = Vec::new();
    for s in schemas() {
        assert!(known.contains(&s.target), "{} is in op_schemas.tsv but not registered", s.target);
        for seed in 0..seeds {
            if let Err(e) = import_schema_case(s, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5DEE_CE66) {
                failures.push(e);
                break; // one case per target is enough to report
            }
        }
    }
    assert!(failures.is_empty(), "{} targets panicked:\n{}", failures.len(), failures.join("\n"));
}

/// Every registered lowering is in the sweep: a target missing from op_schemas.tsv (the
/// table is regenerated by tests/data/make_op_schemas.py) would never be called with hostile
/// arguments.
#[test]
fn the_sweep_covers_every_registered_target() {
    let swept: std::collections::HashSet<&str> = schemas().iter().map(|s| s.target.as_str()).collect();
    let missing: Vec<&String> = targets().iter().filter(|t| !swept.contains(t.as_str())).collect();
    assert!(missing.is_empty(), "not in tests/data/op_schemas.tsv (rerun make_op_schemas.py): {missing:?}");
}

/// One flipped bit in any stored entry (each weight, the program JSON) is refused with an
/// error naming that entry, never imported with the damaged bytes.
#[test]
fn a_flipped_bit_in_a_stored_entry_is_refused_naming_it() {
    let a = archive();
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(a)).unwrap();
    let mut entries = Vec::new();
    for i in 0..z.len() {
        let f = z.by_index_raw(i).unwrap();
        let wanted = f.name().contains("/data/weights/weight_") || f.name().ends_with("models/model.json");
        if wanted && f.compression() == zip::CompressionMethod::Stored && f.size() > 0 {
            entries.push((f.name().to_string(), f.data_start(), f.size()));
        }
    }
    assert!(entries.len() >= 3, "{entries:?}");
    for (name, start, size) in entries {
        for at in [start, start + size / 2, start + size - 1] {
            let mut bad = a.to_vec();
            bad[at as usize] ^= 0x10;
            let err = match tpuc_frontend_fx::import_bytes(bad) {
                Ok(_) => panic!("{name}: a flipped bit at {at} imported"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(&name) && err.contains("CRC-32 mismatch"), "{name}: {err}");
        }
    }
}

/// An omitted argument lowers exactly as its schema default written out. For each entry of
/// `src/ops/build/defaults.tsv`, schema-shaped cases with the argument left out and with the
/// table's value given import to the same IR text, or fail with the same message.
#[test]
fn an_omitted_argument_lowers_as_its_schema_default() {
    use serde_json::json;
    let table = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/ops/build/defaults.tsv")).unwrap();
    let import_text = |v: serde_json::Value| {
        tpuc_frontend_fx::import_bytes(serde_json::to_vec(&v).unwrap())
            .map(|imp| tpuc_ir::print_module(&imp.module))
            .map_err(|e| e.to_string())
    };
    let (mut entries, mut compared) = (0, 0);
    for line in table.lines().filter(|l| !l.is_empty()) {
        let [target, name, kind, value] = line.split('\t').collect::<Vec<_>>()[..] else { panic!("bad line {line:?}") };
        let s = schemas().iter().find(|s| s.target.strip_prefix("torch.ops.aten.").unwrap_or(&s.target) == target).unwrap_or_else(|| panic!("{target} is not in op_schemas.tsv"));
        let given = match kind {
            "bool" => json!({ "as_bool": value == "true" }),
            "int" => json!({ "as_int": value.parse::<i64>().unwrap() }),
            "float" => json!({ "as_float": value.parse::<f64>().unwrap() }),
            "ints" => json!({ "as_ints": value.split(',').filter(|v| !v.is_empty()).map(|v| v.parse::<i64>().unwrap()).collect::<Vec<_>>() }),
            "str" => json!({ "as_string": value }),
            "dtype" => json!({ "as_scalar_type": value.parse::<i64>().unwrap() }),
            other => panic!("unknown kind {other}"),
        };
        entries += 1;
        // Seeds until two cases import (or 64 were tried).
        let mut imported = 0;
        for seed in 1..=64 {
            let omitted = import_text(schema_case_with(s, seed, Some((name, None))));
            let written = import_text(schema_case_with(s, seed, Some((name, Some(&given)))));
            assert_eq!(omitted, written, "{target} `{name}` (seed {seed}): omitted and written out differ");
            imported += usize::from(omitted.is_ok());
            if imported == 2 {
                break;
            }
        }
        compared += usize::from(imported > 0);
    }
    // Hostile arguments refuse many cases; enough must import for the comparison to mean much.
    assert!(compared * 2 > entries, "only {compared} of {entries} defaults were compared on an imported case");
    eprintln!("{compared} of {entries} defaults compared on an imported case");
}
