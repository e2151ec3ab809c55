//! Unit tests of the pass: reshape dim tracking and the error an op's rule rejects.

use super::layouts::kept_reshape_dim;
use super::*;
use tpuc_ir::Opcode;

#[test]
fn reshapes_keep_a_dim_when_its_size_and_the_product_before_it_agree() {
    // [1, s, 64] -> [1, s, 4, 16]: s is kept; the split dim is not.
    assert_eq!(kept_reshape_dim(&[1, 128, 64], &[1, 128, 4, 16], 1), Some(1));
    assert_eq!(kept_reshape_dim(&[1, 128, 64], &[1, 128, 4, 16], 2), None);
    // [1, 4, s, 16] -> [4, s, 16], and size-1 dims before it.
    assert_eq!(kept_reshape_dim(&[1, 4, 128, 16], &[4, 128, 16], 1), Some(2));
    assert_eq!(kept_reshape_dim(&[128, 192], &[1, 128, 192], 1), Some(0));
    // [2, s] -> [2*s]: the merged dim walks two input dims.
    assert_eq!(kept_reshape_dim(&[2, 8], &[16], 0), None);
}

fn bucket(text: &str, s0: i64) -> Result<Module, PassError> {
    let m = tpuc_ir::parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    specialize(&m, &BTreeMap::from([("s0".to_string(), s0)]))
}

#[test]
fn an_op_its_rule_rejects_is_an_error_stating_the_rule() {
    // layer_norm is exact only when its normalized dims are not padded.
    let ln = |x: &str, stat: &str| {
        format!(
            "module {{\n  symbol @s0 : [1, 64]\n  func @main(%0: tensor<{x}xf32> {{kind = \"input\", name = \"x\"}}) -> (tensor<{x}xf32> {{kind = \"output\", name = \"y\"}}) {{\n    \
             %1, %2, %3 = layer_norm %0 {{epsilon = 1e-5, normalized_rank = 1}} : tensor<{x}xf32>, tensor<{stat}xf32>, tensor<{stat}xf32>\n    return %1\n  }}\n}}\n"
        )
    };
    let (kind, rule) = handling(Opcode::LayerNorm);
    assert_eq!(kind, Handling::Conditional);
    let sp = bucket(&ln("s0x16", "s0x1"), 8).unwrap();
    assert_eq!(size_args(&sp), [("s0".to_string(), 1)]);
    let err = bucket(&ln("4xs0", "4x1"), 8).expect_err("layer_norm over a padded dim is rejected");
    let msg = err.to_string();
    assert!(msg.contains("cannot bucket `layer_norm`") && msg.contains("normalizes over dim 1"), "{msg}");
    assert!(msg.contains(&format!("(bucketing rule: {rule})")), "{msg}");
}
