//! The `composite` op: text round trip, its region rules in the verifier (argument and yield
//! types, isolation from above) and its open attribute set.

use tpuc_ir::*;

const OK: &str = r#"module {
  func @main(%0: tensor<2x8xf32> {kind = "input", name = "x"}) -> (tensor<2x8xf32> {kind = "output", name = "y"}) {
    %1 = composite %0 {approximate = "tanh", name = "tpuc.gelu"} ({
    ^bb0(%2: tensor<2x8xf32>):
      %3 = gelu %2 {approximate = "tanh"} : tensor<2x8xf32>
      yield %3
    }) : tensor<2x8xf32>
    return %1
  }
}
"#;

fn errors_of(text: &str) -> Vec<String> {
    let m = parse_module(text).unwrap_or_else(|e| panic!("does not parse: {e}\n{text}"));
    match verify(&m) {
        Ok(_) => Vec::new(),
        Err(es) => es.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn composite_round_trips_and_verifies() {
    let m = parse_module(OK).unwrap();
    verify(&m).unwrap();
    assert_eq!(print_module(&m), OK);
}

#[test]
fn composite_region_rules() {
    let wrong_arg = OK.replace("^bb0(%2: tensor<2x8xf32>)", "^bb0(%2: tensor<2x8xf64>)").replace(
        "%3 = gelu %2 {approximate = \"tanh\"} : tensor<2x8xf32>",
        "%3 = convert %2 : tensor<2x8xf32>",
    );
    let errs = errors_of(&wrong_arg);
    assert!(
        errs.iter().any(|e| e.contains("composite region arguments (tensor<2x8xf64>) differ from its operands (tensor<2x8xf32>)")),
        "{errs:?}"
    );

    let wrong_yield = OK.replace("yield %3", "yield %2, %3");
    let errs = errors_of(&wrong_yield);
    assert!(
        errs.iter().any(|e| e.contains("composite region yields (tensor<2x8xf32>, tensor<2x8xf32>) but the op returns (tensor<2x8xf32>)")),
        "{errs:?}"
    );

    let captures = OK.replace("%3 = gelu %2 {approximate = \"tanh\"}", "%3 = add %2, %0");
    let errs = errors_of(&captures);
    assert!(errs.iter().any(|e| e.contains("op `add`: operand 1") && e.contains("not defined before this use")), "{errs:?}");

    let no_name = OK.replace("approximate = \"tanh\", name = \"tpuc.gelu\"", "approximate = \"tanh\"");
    let errs = errors_of(&no_name);
    assert!(errs.iter().any(|e| e.contains("op `composite`: missing required attribute `name`")), "{errs:?}");
}

#[test]
fn other_ops_keep_a_closed_attribute_set() {
    let text = OK.replace("%3 = gelu %2 {approximate = \"tanh\"}", "%3 = gelu %2 {approximate = \"tanh\", fast = true}");
    let errs = errors_of(&text);
    assert!(errs.iter().any(|e| e.contains("op `gelu`: unknown attribute `fast`")), "{errs:?}");
}
