use tpuc_ir::*;

const SAMPLE: &str = r#"module {
  symbol @s0 : [2, 64]
  func @main(%0: tensor<s0x16xf32> {kind = "input", name = "x"}, %1: tensor<8x16xf32> {kind = "parameter", name = "fc.weight"}) -> (tensor<s0x8xf32> {kind = "output", name = "out"}, tensor<(2*s0)x16xf32> {kind = "output", name = "cat"}) {
    %2 = transpose %1 {permutation = [1, 0]} : tensor<16x8xf32> loc(#0)
    %3 = dot_general %0, %2 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]} : tensor<s0x8xf32> loc(#0)
    %4 = constant {value = dense<0.5> : tensor<f32>} : tensor<f32>
    %5 = broadcast_in_dim %4 {broadcast_dimensions = []} : tensor<s0x8xf32> loc(#1)
    %6 = add %3, %5 : tensor<s0x8xf32> loc(#1)
    %7 = concatenate %0, %0 {dimension = 0} : tensor<(2*s0)x16xf32>
    %8 = constant {value = dense<"0x0000803F00000040"> : tensor<2xf32>} : tensor<2xf32>
    %9, %10, %11 = layer_norm %0 {epsilon = 1e-5, normalized_rank = 1} : tensor<s0x16xf32>, tensor<s0x1xf32>, tensor<s0x1xf32>
    return %6, %7
  }
}
#0 = loc("linear", "torch.ops.aten.linear.default", "model.py:12 in forward")
#1 = loc("add", "torch.ops.aten.add.Tensor")
"#;

#[test]
fn sample_parses_verifies_and_prints_back_identically() {
    let m = parse_module(SAMPLE).unwrap_or_else(|e| panic!("{e}"));
    if let Err(errs) = verify(&m) {
        panic!("{}", errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"));
    }
    let printed = print_module(&m);
    assert_eq!(printed, SAMPLE);
}

#[test]
fn verifier_reports_every_error_with_provenance() {
    let bad = SAMPLE
        .replace("%6 = add %3, %5 : tensor<s0x8xf32>", "%6 = add %3, %0 : tensor<s0x8xf32>")
        .replace("{permutation = [1, 0]}", "{permutation = [1, 1]}");
    let m = parse_module(&bad).unwrap();
    let errs = verify(&m).unwrap_err();
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert!(text.iter().any(|e| e.contains("op `add` from node `add`") && e.contains("operand types differ")), "{text:?}");
    assert!(text.iter().any(|e| e.contains("op `transpose` from node `linear`") && e.contains("repeated")), "{text:?}");
}

#[test]
fn parse_errors_have_positions() {
    let e = parse_module("module {\n  func @main() -> () {\n    %0 = frobnicate : tensor<f32>\n  }\n}\n").unwrap_err();
    assert_eq!((e.line, e.col), (3, 10), "{e}");
    assert!(e.message.contains("unknown op `frobnicate`"));
}
