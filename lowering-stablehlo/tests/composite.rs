//! `composite` → `stablehlo.composite` plus a private decomposition function: the exact text,
//! sharing of identical decompositions, multi-result composites and composites holding a
//! high-level op; every case passes the real StableHLO verifier (portable artifact included) and
//! compiles with XLA's CPU backend.

mod common;

use common::{compile_all, emit_text, verify_all};
use tpuc_lowering_stablehlo::EmitOptions;

const GELU: &str = r#"module {
  func @main(%0: tensor<2x8xf32> {kind = "input", name = "x"}) -> (tensor<2x8xf32>) {
    %1 = composite %0 {approximate = "tanh", name = "tpuc.gelu"} ({
    ^bb0(%2: tensor<2x8xf32>):
      %3 = gelu %2 {approximate = "tanh"} : tensor<2x8xf32>
      yield %3
    }) : tensor<2x8xf32>
    %4 = composite %1 {approximate = "tanh", name = "tpuc.gelu"} ({
    ^bb0(%5: tensor<2x8xf32>):
      %6 = gelu %5 {approximate = "tanh"} : tensor<2x8xf32>
      yield %6
    }) : tensor<2x8xf32>
    return %4
  }
}
"#;

const ATTRS_AND_RESULTS: &str = r#"module {
  func @main(%0: tensor<2x8xf32>, %1: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>) {
    %2, %3 = composite %0, %1 {axes = [1], causal = true, epsilon = 1e-5, name = "tpuc.test", scale = 2.0, steps = 3} ({
    ^bb0(%4: tensor<2x8xf32>, %5: tensor<8xf32>):
      %6, %7, %8 = layer_norm %4 {epsilon = 1e-5, normalized_rank = 1} : tensor<2x8xf32>, tensor<2x1xf32>, tensor<2x1xf32>
      %9 = broadcast_in_dim %5 {broadcast_dimensions = [1]} : tensor<2x8xf32>
      %10 = mul %6, %9 : tensor<2x8xf32>
      yield %10, %7
    }) : tensor<2x8xf32>, tensor<2x1xf32>
    %11 = exp %2 : tensor<2x8xf32>
    return %11, %3
  }
}
"#;

#[test]
fn composite_text_and_shared_decomposition() {
    let t = emit_text(GELU, &EmitOptions::default());
    assert!(
        t.contains(r#"%0 = stablehlo.composite "tpuc.gelu" %arg0 {composite_attributes = {approximate = "tanh"}, decomposition = @tpuc.gelu.impl0} : (tensor<2x8xf32>) -> tensor<2x8xf32>"#),
        "{t}"
    );
    assert!(t.contains(r#"%1 = stablehlo.composite "tpuc.gelu" %0 {"#), "{t}");
    // One function for both identical bodies, private, after @main.
    assert_eq!(t.matches("func.func private @tpuc.gelu.impl").count(), 1, "{t}");
    let main_at = t.find("func.func public @main").unwrap();
    let decomp_at = t.find("func.func private @tpuc.gelu.impl0(%arg0: tensor<2x8xf32>) -> (tensor<2x8xf32>) {").unwrap();
    assert!(main_at < decomp_at, "{t}");
    assert!(t.contains("stablehlo.tanh"), "{t}");
}

#[test]
fn composite_attributes_and_multiple_results() {
    let t = emit_text(ATTRS_AND_RESULTS, &EmitOptions::default());
    assert!(
        t.contains(r#"%0:2 = stablehlo.composite "tpuc.test" %arg0, %arg1 {composite_attributes = {axes = array<i64: 1>, causal = true, epsilon = 1.0e-5 : f64, scale = 2.0 : f64, steps = 3 : i64}, decomposition = @tpuc.test.impl0} : (tensor<2x8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>)"#),
        "{t}"
    );
    assert!(t.contains("stablehlo.exponential %0#0"), "{t}");
    assert!(t.contains("return %1, %0#1"), "{t}");
}

#[test]
fn composites_verify_and_compile() {
    let mut cases = Vec::new();
    for (n, ir) in [("gelu", GELU), ("attrs", ATTRS_AND_RESULTS)] {
        cases.push((n.to_string(), emit_text(ir, &EmitOptions::default())));
        let located = EmitOptions { debug_locations: true, ..EmitOptions::default() };
        cases.push((format!("{n} (locations)"), emit_text(ir, &located)));
    }
    verify_all(&cases, true);
    compile_all(&cases);
}

#[test]
fn a_composite_region_must_be_isolated_and_typed() {
    let bad = r#"module {
  func @main(%0: tensor<4xf32>) -> (tensor<4xf32>) {
    %1 = composite %0 {name = "tpuc.x"} ({
    ^bb0(%2: tensor<4xf32>):
      %3 = add %2, %0 : tensor<4xf32>
      yield %3
    }) : tensor<4xf32>
    return %1
  }
}
"#;
    let m = tpuc_ir::parse_module(bad).unwrap();
    let errs: Vec<String> = tpuc_ir::verify(&m).unwrap_err().iter().map(|e| e.to_string()).collect();
    assert!(errs.iter().any(|e| e.contains("operand 1") && e.contains("not defined before this use")), "{errs:?}");
}
