//! The API's contract: verification first, clear errors for what cannot be lowered, debug
//! locations, determinism, and whole-output snapshots (which also pass the real verifier).

mod common;

use common::{emit_text, ir_module, verify_all};
use tpuc_ir::{parse_module, Attrs, Opcode};
use tpuc_lowering_stablehlo::{emit_stablehlo, EmitError, EmitOptions};

const MLP: &str = r#"module {
  func @main(%0: tensor<4x16xf32> {kind = "input", name = "x"}, %1: tensor<8x16xf32> {kind = "parameter", name = "fc1.weight"}, %2: tensor<8xf32> {kind = "parameter", name = "fc1.bias"}) -> (tensor<4x8xf32> {kind = "output", name = "probs"}, tensor<4xi64> {kind = "output", name = "label"}) {
    %3 = dot_general %0, %1 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_batching_dimensions = [], rhs_contracting_dimensions = [1]} : tensor<4x8xf32> loc(#0)
    %4 = broadcast_in_dim %2 {broadcast_dimensions = [1]} : tensor<4x8xf32> loc(#0)
    %5 = add %3, %4 : tensor<4x8xf32> loc(#0)
    %6 = gelu %5 {approximate = "tanh"} : tensor<4x8xf32> loc(#1)
    %7 = softmax %6 {dimension = 1} : tensor<4x8xf32> loc(#2)
    %8 = arg_reduce %7 {dimension = 1, kind = "argmax"} : tensor<4xi64>
    return %7, %8
  }
}
#0 = loc("linear", "torch.ops.aten.linear.default", "model.py:12 in forward")
#1 = loc("gelu", "torch.ops.aten.gelu.default", "model.py:13 in forward")
#2 = loc("softmax \"q\"", "torch.ops.aten._softmax.default")
"#;

fn opts(debug_locations: bool) -> EmitOptions {
    EmitOptions {
        module_name: "mlp".into(),
        debug_locations,
        ..EmitOptions::default()
    }
}

#[test]
fn arguments_carry_kind_and_name_and_locations_name_the_fx_node() {
    let out = emit_text(MLP, &opts(true));
    assert!(out.starts_with("module @mlp {\n  func.func public @main(%arg0: tensor<4x16xf32> {tpuc.kind = \"input\", tpuc.name = \"x\"}, %arg1: tensor<8x16xf32> {tpuc.kind = \"parameter\", tpuc.name = \"fc1.weight\"}"), "{out}");
    assert!(out.contains("-> (tensor<4x8xf32> {tpuc.kind = \"output\", tpuc.name = \"probs\"}, tensor<4xi64> {tpuc.kind = \"output\", tpuc.name = \"label\"})"), "{out}");
    assert!(
        out.contains("#loc0 = loc(\"linear\"(\"model.py\":12:0))\n"),
        "{out}"
    );
    assert!(
        out.contains("#loc2 = loc(\"softmax \\\"q\\\"\")\n"),
        "{out}"
    );
    // Every op of the gelu expansion points at the gelu node.
    assert!(
        out.contains("stablehlo.tanh %")
            && out
                .lines()
                .filter(|l| l.contains("stablehlo.tanh"))
                .all(|l| l.ends_with("loc(#loc1)"))
    );
    // Ops without provenance get no location.
    assert!(
        out.lines()
            .any(|l| l.contains("stablehlo.reduce(") && l.contains(", (") && !l.contains("loc(")),
        "{out}"
    );
    let plain = emit_text(MLP, &opts(false));
    assert!(!plain.contains("loc("), "{plain}");
    verify_all(&[("mlp_locs".into(), out), ("mlp".into(), plain)], true);
}

#[test]
fn unverified_modules_never_reach_codegen() {
    let bad = MLP.replace(
        "%5 = add %3, %4 : tensor<4x8xf32>",
        "%5 = add %3, %0 : tensor<4x8xf32>",
    );
    let m = parse_module(&bad).unwrap();
    match emit_stablehlo(&m, &opts(false)) {
        Err(EmitError::Invalid(errs)) => {
            let text = EmitError::Invalid(errs.clone()).to_string();
            assert!(
                text.contains("op `add` from node `linear`")
                    && text.contains("operand types differ"),
                "{text}"
            );
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn symbolic_dims_are_reported_with_op_node_and_source_line() {
    let ir = r#"module {
  symbol @s0 : [2, 64]
  func @main(%0: tensor<4xf32> {kind = "input", name = "x"}) -> () {
    %1 = broadcast_in_dim %0 {broadcast_dimensions = [1]} : tensor<s0x4xf32> loc(#0)
    %2 = add %1, %1 : tensor<s0x4xf32> loc(#0)
    return %2
  }
}
#0 = loc("add_1", "torch.ops.aten.add.Tensor", "model.py:3 in forward")
"#;
    let m = parse_module(ir).unwrap();
    let e = emit_stablehlo(&m, &opts(false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dynamic dimension s0 in result of `broadcast_in_dim` (node `add_1` at model.py:3 in forward): StableHLO is emitted for static shapes; specialize to a bucket first (tpuc compile and run do; lower/opt take --bucket S=SIZE)"
    );
    let ir = r#"module {
  symbol @s0 : [2, 64]
  func @main(%0: tensor<s0x4xf32> {kind = "input", name = "x"}) -> () {
    %1 = neg %0 : tensor<s0x4xf32>
    return %1
  }
}
"#;
    let e = emit_stablehlo(&parse_module(ir).unwrap(), &opts(false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dynamic dimension s0 in argument 0 (`x`) of @main: StableHLO is emitted for static shapes; specialize to a bucket first (tpuc compile and run do; lower/opt take --bucket S=SIZE)"
    );
    assert!(matches!(e, EmitError::DynamicDim { ref dim, .. } if dim == "s0"));
}

#[test]
fn unsupported_cases_name_the_op() {
    let ir = ir_module(
        "%0: tensor<4xbool>, %1: tensor<4xbool>",
        "%2 = sub %0, %1 : tensor<4xbool> loc(#0)\nreturn %2",
    ) + "#0 = loc(\"sub\", \"torch.ops.aten.sub.Tensor\", \"m.py:7\")\n";
    let e = emit_stablehlo(&parse_module(&ir).unwrap(), &opts(false)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot lower `sub` (node `sub` at m.py:7): arithmetic on bool"),
        "{e}"
    );
}

#[test]
fn output_is_deterministic_and_independent_of_arena_contents() {
    let a = emit_text(MLP, &opts(true));
    let b = emit_text(MLP, &opts(true));
    assert_eq!(a, b);
    // Dead ops left in the arenas (detached by a pass) and a clone change nothing.
    let mut m = parse_module(MLP).unwrap();
    let x = m.blocks[m.entry_block(&m.funcs[0])].args()[0];
    let dead = m
        .create_op(Opcode::Neg, &[x], Attrs::new(), None, &[])
        .unwrap();
    let _ = dead;
    let c = emit_stablehlo(&m.clone(), &opts(true)).unwrap();
    assert_eq!(a, c);
    for _ in 0..3 {
        assert_eq!(emit_stablehlo(&m, &opts(true)).unwrap(), a);
    }
}

#[test]
fn snapshots() {
    let layer_norm = ir_module(
        "%0: tensor<2x8xbf16> {kind = \"input\", name = \"x\"}",
        "%1, %2, %3 = layer_norm %0 {epsilon = 1e-5, normalized_rank = 1} : tensor<2x8xbf16>, tensor<2x1xbf16>, tensor<2x1xbf16>\nreturn %1, %2, %3",
    );
    let attention = ir_module(
        "%0: tensor<2x4x8xf32>, %1: tensor<2x6x8xf32>, %2: tensor<2x6x8xf32>, %3: tensor<4x6xbool>",
        "%4 = attention %0, %1, %2, %3 {is_causal = true, scale = 0.125} : tensor<2x4x8xf32>\nreturn %4",
    );
    let sort_scan = ir_module(
        "%0: tensor<3x5xf32>",
        "%1, %2 = sort %0 {descending = true, dimension = 1} : tensor<3x5xf32>, tensor<3x5xi64>\n%3 = scan %0 {dimension = 1, kind = \"sum\"} : tensor<3x5xf32>\nreturn %1, %2, %3",
    );
    let erf = ir_module(
        "%0: tensor<4xf32>",
        "%1 = erf %0 : tensor<4xf32>\nreturn %1",
    );
    let mut all = Vec::new();
    for (name, ir, locs) in [
        ("mlp", MLP.to_string(), true),
        ("layer_norm_bf16", layer_norm, false),
        ("attention", attention, false),
        ("sort_scan", sort_scan, false),
        ("erf_f32", erf, false),
    ] {
        let o = EmitOptions {
            module_name: name.into(),
            ..opts(locs)
        };
        let out = emit_text(&ir, &o);
        insta::assert_snapshot!(name, out);
        all.push((name.to_string(), out));
    }
    verify_all(&all, true);
}
