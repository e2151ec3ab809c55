//! The verifier on hand-written broken modules: one broken rule per module, each checked for the
//! exact text of its error, and one module with three independent errors that gets all three.

use tpuc_ir::*;

/// A module with one function `@main(%0: tensor<4xf32>)` around `body`.
fn module(body: &str) -> String {
    format!(
        "module {{\n  func @main(%0: tensor<4xf32> {{kind = \"input\", name = \"x\"}}) -> (tensor<4xf32>) {{\n{body}\n  }}\n}}\n"
    )
}

fn errors_of(text: &str) -> Vec<String> {
    let m = parse_module(text).unwrap_or_else(|e| panic!("does not parse: {e}\n{text}"));
    match verify(&m) {
        Ok(_) => Vec::new(),
        Err(es) => es.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn the_reference_module_verifies() {
    let text = module("    %1 = neg %0 : tensor<4xf32>\n    return %1");
    assert_eq!(errors_of(&text), Vec::<String>::new());
}

#[test]
fn each_broken_rule_is_reported() {
    let two_funcs = "module {\n  func @main() -> () {\n    return\n  }\n  func @main() -> () {\n    return\n  }\n}\n";
    let cases: &[(&str, String, &str)] = &[
        (
            "wrong operand count",
            module("    %1 = add %0 : tensor<4xf32>\n    return %1"),
            "op `add`: expects 2 operands, got 1",
        ),
        (
            "missing attribute",
            module("    %1 = transpose %0 : tensor<4xf32>\n    return %1"),
            "op `transpose`: missing required attribute `permutation`",
        ),
        (
            "missing enum attribute",
            module("    %1 = reduce %0 {dimensions = []} : tensor<4xf32>\n    return %1"),
            "op `reduce`: missing required attribute `kind`",
        ),
        (
            "enum attribute outside its words",
            module("    %1 = reduce %0 {dimensions = [], kind = \"median\"} : tensor<4xf32>\n    return %1"),
            "op `reduce`: reduction `median` is not one of sum, prod, max, min, and, or",
        ),
        (
            "wrong attribute kind",
            module("    %1 = transpose %0 {permutation = 0} : tensor<4xf32>\n    return %1"),
            "op `transpose`: attribute `permutation` must be of kind int list, got int",
        ),
        (
            "unknown attribute",
            module("    %1 = neg %0 {fast = true} : tensor<4xf32>\n    return %1"),
            "op `neg`: unknown attribute `fast`",
        ),
        (
            "bad result type",
            module("    %1 = neg %0 : tensor<5xf32>\n    return %1"),
            "op `neg`: result type should be tensor<4xf32>, op says tensor<5xf32>",
        ),
        (
            "missing return",
            module("    %1 = neg %0 : tensor<4xf32>"),
            "func @main: body does not end with `return`",
        ),
        (
            "terminator in the middle",
            module("    return %0\n    %1 = neg %0 : tensor<4xf32>\n    return %1"),
            "op `return`: terminator in the middle of a block",
        ),
        (
            "undeclared symbol",
            module("    %1 = iota {dimension = 0} : tensor<s0xf32>\n    return %0"),
            "op `iota`: type tensor<s0xf32> uses undeclared symbol `s0`",
        ),
        (
            "symbol named as an expression keyword",
            module("    return %0").replace("module {\n", "module {\n  symbol @mod : [1, 8]\n"),
            "symbol name `mod` is not printable (letters, digits and `_`, not starting with a digit, not `mod` or `floordiv`)",
        ),
        (
            "yield in a function body",
            module("    yield %0"),
            "op `yield`: `yield` in a function body (use `return`)",
        ),
        ("duplicate func name", two_funcs.to_string(), "func @main: defined twice"),
        (
            "result metadata count",
            module("    return %0, %0").replace("-> (tensor<4xf32>)", "-> (tensor<4xf32> {kind = \"output\", name = \"y\"})"),
            "func @main: returns 2 values but has metadata for 1",
        ),
        (
            "empty symbol range",
            module("    return %0").replace("module {\n", "module {\n  symbol @s0 : [8, 2]\n"),
            "symbol `s0` has an empty range [8, Some(2)]",
        ),
        (
            "provenance in the message",
            module("    %1 = neg %0 : tensor<5xf32> loc(#0)\n    return %1") + "#0 = loc(\"neg_1\", \"torch.ops.aten.neg.default\", \"m.py:3 in forward\")\n",
            "op `neg` from node `neg_1` (torch.ops.aten.neg.default) at m.py:3 in forward: result type should be",
        ),
    ];
    for (rule, text, want) in cases {
        let errs = errors_of(text);
        assert!(errs.iter().any(|e| e.contains(want)), "{rule}: want `{want}`, got {errs:#?}\n{text}");
    }
}

/// A use before its definition cannot be written in the text form (the parser resolves names
/// as it reads), so this one is built through the API and then reordered.
#[test]
fn use_before_definition() {
    let mut m = Module::new();
    let (_, block) = m.add_func("main", vec![(TensorType::from_static(DType::F32, &[4]), ArgInfo::new(ArgKind::UserInput, "x"))]);
    let x = m.blocks[block].args()[0];
    let mut b = Builder::new(&mut m, block);
    let y = b.unary(Opcode::Neg, x).unwrap();
    let z = b.unary(Opcode::Exp, y).unwrap();
    b.ret(&[z]).unwrap();
    verify(&m).unwrap();
    // Move `neg` after `exp`.
    let neg = m.defining_op(y).unwrap();
    let exp = m.defining_op(z).unwrap();
    m.detach_op(neg);
    m.insert_op_after(exp, neg);
    let errs: Vec<String> = verify(&m).unwrap_err().iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].starts_with("op `exp`: operand 0 (v"), "{errs:#?}");
    assert!(errs[0].ends_with(") is not defined before this use"), "{errs:#?}");
    // The parser reports the same mistake in text.
    let e = parse_module(&module("    %2 = exp %1 : tensor<4xf32>\n    %1 = neg %0 : tensor<4xf32>\n    return %2")).unwrap_err();
    assert_eq!((e.line, e.col, e.message.as_str()), (3, 14, "use of undefined value %1"));
}

#[test]
fn three_independent_errors_are_all_reported() {
    let text = module(
        "    %1 = add %0 : tensor<4xf32>\n    %2 = transpose %0 {permutation = [0], tpuc.note = 1, bad = 2} : tensor<4xf32>\n    %3 = exp %0 : tensor<4xi32>\n    return %3",
    );
    let errs = errors_of(&text);
    assert_eq!(
        errs,
        vec![
            "op `add`: expects 2 operands, got 1".to_string(),
            "op `transpose`: unknown attribute `bad`".to_string(),
            "op `exp`: result type should be tensor<4xf32>, op says tensor<4xi32>".to_string(),
        ]
    );
}

#[test]
fn errors_name_their_op() {
    let m = parse_module(&module("    %1 = neg %0 : tensor<5xf32>\n    return %1")).unwrap();
    let errs = verify(&m).unwrap_err();
    let op = errs[0].op.expect("the error names its op");
    assert_eq!(m.op(op).opcode(), Opcode::Neg);
}

/// Every op's typed attribute view is present on a verified module: for each op with required
/// attributes, dropping any one of them makes the verifier refuse the op, naming the attribute.
#[test]
fn a_missing_required_attribute_is_a_verifier_error_and_no_view() {
    let text = module(
        "    %1 = reduce %0 {dimensions = [0], kind = \"max\"} : tensor<f32>\n    %2 = broadcast_in_dim %1 {broadcast_dimensions = []} : tensor<4xf32>\n    %3 = compare %0, %2 {direction = \"lt\"} : tensor<4xbool>\n    %4 = select %3, %0, %2 : tensor<4xf32>\n    return %4",
    );
    let m = parse_module(&text).unwrap();
    assert!(verify(&m).is_ok());
    let ops: Vec<OpId> = m.ops.keys().collect();
    let red = m.op(ops[0]);
    let r = red.payload::<payload::Reduce>();
    assert_eq!((r.dimensions, r.kind), (&[0][..], ReduceKind::Max));
    assert_eq!(m.op(ops[2]).payload::<payload::Compare>().direction, Direction::Lt);
    for (i, &op) in ops.iter().enumerate() {
        for spec in m.op(op).opcode().info().attrs.iter().filter(|s| s.required) {
            let mut broken = m.clone();
            broken.ops[op].attrs.remove(spec.name);
            let errs: Vec<String> = verify(&broken).unwrap_err().iter().map(|e| e.to_string()).collect();
            let want = format!("missing required attribute `{}`", spec.name);
            assert!(errs.iter().any(|e| e.contains(&want)), "op {i}: want `{want}`, got {errs:?}");
        }
    }
    let mut broken = m.clone();
    broken.ops[ops[0]].attrs.remove("kind");
    assert_eq!(payload::Reduce::of(&broken.op(ops[0]).attrs), None);
    let panic = std::panic::catch_unwind(|| broken.op(ops[0]).payload::<payload::Reduce>()).unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("`reduce`") && msg.contains("`kind`"), "{msg}");
}
