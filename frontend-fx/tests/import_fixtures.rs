//! Importing the reference fixtures (tests/fixtures): every program imports and verifies,
//! its arguments and results match the signature and the .npy files, weights are the
//! archive's bytes (zero-copy), errors name the node and source line, and a bare model.json
//! imports without weight data.

mod common;

use std::io::Read;
use tpuc_frontend_fx::{import_bytes, import_file, ConstValue, ImportError, InputSlot, OutputSlot};
use tpuc_ir::{ArgKind, DType, Dim, ResultKind};

fn read_zip_entry(path: &std::path::Path, suffix: &str) -> (String, Vec<u8>) {
    let f = std::fs::File::open(path).unwrap();
    let mut z = zip::ZipArchive::new(f).unwrap();
    let name = z.file_names().find(|n| n.ends_with(suffix)).unwrap_or_else(|| panic!("{suffix} in {}", path.display())).to_string();
    let mut out = Vec::new();
    z.by_name(&name).unwrap().read_to_end(&mut out).unwrap();
    (name, out)
}

#[test]
fn every_fixture_imports_with_matching_signature() {
    let dir = common::fixtures_dir();
    let entries = common::manifest(&dir);
    assert!(entries.len() >= 14, "manifest has {} entries", entries.len());
    for e in entries {
        let imp = import_file(&e.file).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        common::check_text_roundtrip(&imp.module);
        let f = imp.module.main_func().unwrap();
        assert_eq!(f.name, "main");
        let block = imp.module.entry_block(f);
        let args = &imp.module.blocks[block].args();

        // user inputs, in order, against the .npy inputs
        let user: Vec<usize> = (0..f.args.len()).filter(|&i| f.args[i].kind == ArgKind::UserInput).collect();
        assert_eq!(user.len(), e.inputs.len(), "{}: user inputs", e.name);
        for (&i, p) in user.iter().zip(&e.inputs) {
            let npy = common::read_npy(p.as_ref().unwrap());
            let ty = imp.module.value_type(args[i]);
            assert_eq!(ty.dtype, npy.ty.dtype, "{}: input {i} dtype", e.name);
            assert_eq!(ty.rank(), npy.ty.rank(), "{}: input {i} rank", e.name);
            for (d, &n) in ty.dims.iter().zip(&common::dims(&npy)) {
                if let Dim::Static(s) = d {
                    assert_eq!(*s, n, "{}: input {i} dims {ty}", e.name);
                }
            }
        }
        // weights: every weight argument has data of its type (archives)
        for (i, info) in f.args.iter().enumerate() {
            if info.kind.is_weight() {
                let w = imp.weights.get(&info.name).unwrap_or_else(|| panic!("{}: weight {}", e.name, info.name));
                assert_eq!(&w.ty, imp.module.value_type(args[i]), "{}: weight {}", e.name, info.name);
            }
        }
        // outputs against the expected .npy files (None outputs of backward graphs included)
        assert_eq!(imp.outputs.len(), e.expected.len(), "{}: outputs", e.name);
        let ret = imp.module.terminator(block).unwrap();
        let results = imp.module.op(ret).operands().to_vec();
        assert_eq!(results.len(), f.results().len());
        for (k, (slot, want)) in imp.outputs.iter().zip(&e.expected).enumerate() {
            match (slot, want) {
                (OutputSlot::Result(r), Some(p)) => {
                    let npy = common::read_npy(p);
                    let ty = imp.module.value_type(results[*r]);
                    assert_eq!(ty.dtype, npy.ty.dtype, "{}: output {k} dtype", e.name);
                    assert_eq!(ty.rank(), npy.ty.rank(), "{}: output {k} rank", e.name);
                    assert_eq!(f.results()[*r].kind, ResultKind::UserOutput);
                }
                (OutputSlot::Const(ConstValue::None), None) => {}
                other => panic!("{}: output {k}: {other:?}", e.name),
            }
        }
        // every op carries provenance
        for op in imp.module.ops_in(block) {
            if imp.module.op(op).opcode() != tpuc_ir::Opcode::Return {
                let loc = imp.module.loc(op).unwrap_or_else(|| panic!("{}: op without loc", e.name));
                assert!(loc.target.starts_with("torch.ops.") || loc.target.starts_with("_operator."), "{loc:?}");
            }
        }
    }
}

#[test]
fn mlp_signature_and_weight_bytes() {
    let path = common::fixtures_dir().join("mlp/core.pt2");
    let data = bytes::Bytes::from(std::fs::read(&path).unwrap());
    let imp = import_bytes(data.clone()).unwrap();
    let f = imp.module.main_func().unwrap();
    let kinds: Vec<(ArgKind, &str)> = f.args.iter().map(|a| (a.kind, a.name.as_str())).collect();
    assert_eq!(
        kinds,
        vec![
            (ArgKind::Parameter, "fc1.weight"),
            (ArgKind::Parameter, "fc1.bias"),
            (ArgKind::Parameter, "fc2.weight"),
            (ArgKind::Parameter, "fc2.bias"),
            (ArgKind::UserInput, "x"),
        ]
    );
    assert_eq!(imp.inputs, (0..5).map(InputSlot::Arg).collect::<Vec<_>>());
    assert_eq!(imp.outputs, vec![OutputSlot::Result(0)]);
    assert_eq!(f.results()[0].kind, ResultKind::UserOutput);
    assert!(imp.torch_version.as_deref().unwrap_or("").starts_with("2."));

    // fc1.weight is weight_0 per the weights config; same bytes, and a slice of the input
    let (_, cfg) = read_zip_entry(&path, "data/weights/model_weights_config.json");
    let cfg: serde_json::Value = serde_json::from_slice(&cfg).unwrap();
    let file = cfg["config"]["fc1.weight"]["path_name"].as_str().unwrap();
    let (_, raw) = read_zip_entry(&path, &format!("data/weights/{file}"));
    let w = imp.weight("fc1.weight").unwrap();
    assert_eq!(w.ty, tpuc_ir::TensorType::from_static(DType::F32, &[32, 16]));
    assert_eq!(&w.raw_bytes()[..], &raw[..]);
    let (lo, hi) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
    let p = w.raw_bytes().as_ptr() as usize;
    assert!(lo <= p && p < hi, "weight bytes are copied, not a slice of the archive");
}

#[test]
fn buffers_and_symbolic_batch() {
    let cnn = import_file(&common::fixtures_dir().join("cnn/core.pt2")).unwrap();
    let f = cnn.module.main_func().unwrap();
    let buffers: Vec<&str> = f.args.iter().filter(|a| a.kind == ArgKind::Buffer).map(|a| a.name.as_str()).collect();
    assert_eq!(buffers, ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"]);
    assert_eq!(cnn.weight("bn1.num_batches_tracked").unwrap().ty.dtype, DType::I64);

    let dynm = import_file(&common::fixtures_dir().join("mlp/dynamic.pt2")).unwrap();
    let syms: Vec<_> = dynm.module.symbols.iter().cloned().collect();
    assert_eq!(syms.len(), 1);
    assert_eq!((syms[0].min, syms[0].max), (2, Some(64)));
    let f = dynm.module.main_func().unwrap();
    let x = dynm.module.blocks[dynm.module.entry_block(f)].args()[4];
    assert_eq!(dynm.module.value_type(x).dims[0], Dim::symbol(&syms[0].name));
    let text = tpuc_ir::print_module(&dynm.module);
    let back = tpuc_ir::parse_module(&text).unwrap();
    assert_eq!(tpuc_ir::print_module(&back), text);
}

#[test]
fn bare_model_json_has_no_weight_data() {
    let path = common::fixtures_dir().join("gpt2_block/core.pt2");
    let (_, json) = read_zip_entry(&path, "models/model.json");
    let imp = import_bytes(json).unwrap();
    assert!(!imp.has_weight_data);
    assert!(imp.weights.is_empty());
    let f = imp.module.main_func().unwrap();
    assert_eq!(f.args.iter().filter(|a| a.kind == ArgKind::Parameter).count(), 12);
    match imp.weight("ln_1.weight") {
        Err(e @ ImportError::MissingWeight(_)) => assert!(e.to_string().contains("ln_1.weight"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Replaces one node's target in an archive's model.json and imports the JSON.
fn import_with_target(fixture: &str, node: &str, target: &str) -> Result<tpuc_frontend_fx::Imported, ImportError> {
    import_with_targets(fixture, &[(node, target)])
}

/// Replaces the targets of nodes in an archive's model.json and imports the JSON.
fn import_with_targets(fixture: &str, edits: &[(&str, &str)]) -> Result<tpuc_frontend_fx::Imported, ImportError> {
    let path = common::fixtures_dir().join(fixture);
    let (_, json) = read_zip_entry(&path, "models/model.json");
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let nodes = v["graph_module"]["graph"]["nodes"].as_array_mut().unwrap();
    for (node, target) in edits {
        let n = nodes.iter_mut().find(|n| n["name"] == *node).unwrap_or_else(|| panic!("node {node}"));
        n["target"] = serde_json::Value::String(target.to_string());
    }
    import_bytes(serde_json::to_vec(&v).unwrap())
}

#[test]
fn unsupported_op_names_target_node_and_line() {
    let e = import_with_target("mlp/core.pt2", "relu", "torch.ops.aten.frobnicate.default").unwrap_err();
    assert!(matches!(e, ImportError::UnsupportedOp { .. }));
    assert_eq!(e.to_string(), "unsupported op `torch.ops.aten.frobnicate.default` at node `relu` (make_fixtures.py:80 in forward)");
}

#[test]
fn every_failed_node_is_reported_in_one_import() {
    // two unsupported ops: both named, the first as it would be alone
    let e = import_with_targets(
        "mlp/core.pt2",
        &[("relu", "torch.ops.aten.frobnicate.default"), ("addmm_1", "torch.ops.aten.twiddle.default")],
    )
    .unwrap_err();
    let nodes: Vec<String> = e.node_errors().iter().map(|n| n.node().unwrap().node).collect();
    assert_eq!(nodes, ["relu", "addmm_1"], "{e}");
    assert!(e.node_errors().iter().all(|n| matches!(n, ImportError::UnsupportedOp { .. })));
    assert_eq!(
        e.to_string(),
        "unsupported op `torch.ops.aten.frobnicate.default` at node `relu` (make_fixtures.py:80 in forward)\n  \
         also: unsupported op `torch.ops.aten.twiddle.default` at node `addmm_1` (make_fixtures.py:80 in forward)"
    );
    assert_eq!(e.node().unwrap().node, "relu");
    assert!(matches!(e.first(), ImportError::UnsupportedOp { .. }));

    // a node after an unsupported one still gets lowered and checked: relu's output stands in
    // with its recorded type, so permute_1's bad use of addmm's lowering is found too
    let e = import_with_targets(
        "mlp/core.pt2",
        &[("relu", "torch.ops.aten.frobnicate.default"), ("permute_1", "torch.ops.aten.addmm.default")],
    )
    .unwrap_err();
    let kinds: Vec<(String, bool)> =
        e.node_errors().iter().map(|n| (n.node().unwrap().node, matches!(n, ImportError::UnsupportedOp { .. }))).collect();
    assert_eq!(kinds, [("relu".to_string(), true), ("permute_1".to_string(), false)], "{e}");

    // one failure is reported as before, not as a list
    let e = import_with_target("mlp/core.pt2", "relu", "torch.ops.aten.frobnicate.default").unwrap_err();
    assert_eq!(e.node_errors().len(), 1);
    assert!(!matches!(e, ImportError::Nodes(_)));
}

#[test]
fn bad_arguments_name_the_node() {
    // relu's lowering given to a node whose arguments do not fit: addmm as permute
    let e = import_with_target("mlp/core.pt2", "addmm", "torch.ops.aten.permute.default").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("node `addmm`") && msg.contains("make_fixtures.py:80"), "{msg}");
    // a result whose type disagrees with torch's record: relu as neg keeps the type, but
    // sum changes it
    let e = import_with_target("mlp/core.pt2", "relu", "torch.ops.aten.sum.default").unwrap_err();
    assert!(matches!(e, ImportError::TypeMismatch { .. }), "{e}");
}

#[test]
fn garbage_inputs_are_errors() {
    assert!(matches!(import_bytes(&b""[..]), Err(ImportError::UnknownFormat(_))));
    assert!(matches!(import_bytes(&b"\x00\x01garbage"[..]), Err(ImportError::UnknownFormat(_))));
    assert!(matches!(import_bytes(&b"PK\x03\x04trunc"[..]), Err(ImportError::Archive(_))));
    assert!(matches!(import_bytes(&b"{\"graph_module\": 3}"[..]), Err(ImportError::Json { .. })));
    assert!(matches!(import_bytes(&b"{ not json"[..]), Err(ImportError::Json { .. })));
    let e = import_file(std::path::Path::new("/nonexistent/model.pt2")).unwrap_err();
    assert!(matches!(e, ImportError::Io { .. }), "{e}");
    // a zip without a program
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        z.start_file("m/other.txt", zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut z, b"hi").unwrap();
        z.finish().unwrap();
    }
    match import_bytes(buf.into_inner()) {
        Err(ImportError::MissingFile(f)) => assert!(f.contains("model.json")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_dtype_number_is_an_error() {
    let path = common::fixtures_dir().join("mlp/core.pt2");
    let (_, json) = read_zip_entry(&path, "models/model.json");
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v["graph_module"]["graph"]["tensor_values"]["x"]["dtype"] = 99.into();
    let e = import_bytes(serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(matches!(e, ImportError::UnknownDType(99)), "{e}");
}

#[test]
fn every_fixture_target_is_supported() {
    let ops = std::fs::read_to_string(common::fixtures_dir().join("OPS.md")).unwrap();
    let supported = tpuc_frontend_fx::supported_targets();
    let mut sorted = supported.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, supported, "sorted, without duplicates");
    let listed: Vec<&str> = ops.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
    assert!(listed.len() >= 50, "{} targets in OPS.md", listed.len());
    for t in listed {
        assert!(supported.iter().any(|s| s == t), "{t} is not supported");
    }
}
