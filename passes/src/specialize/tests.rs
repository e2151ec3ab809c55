//! Unit tests of the pass: reshape dim tracking, the error an op's rule rejects, and attention over
//! padded keys run by the reference interpreter.

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

#[test]
fn a_dim_that_shrinks_as_a_symbol_grows_is_an_error() {
    // `384 - s0` at the bucket 8 would be 376 wide, shorter than the 382 of a real size 2.
    let text = "module {\n  symbol @s0 : [1, 64]\n  func @main(%0: tensor<4x(384 - s0)xf32> {kind = \"input\", name = \"x\"}, \
                %1: tensor<4xs0xf32> {kind = \"input\", name = \"y\"}) -> (tensor<4x384xf32> {kind = \"output\", name = \"z\"}) {\n    \
                %2 = concatenate %0, %1 {dimension = 1} : tensor<4x384xf32>\n    return %2\n  }\n}\n";
    let msg = bucket(text, 8).expect_err("a shrinking dim cannot be padded").to_string();
    assert!(msg.contains("dim `-s0 + 384` shrinks as a symbol grows"), "{msg}");
}

fn data(dt: tpuc_ir::DType, dims: &[i64], vals: &[f64]) -> tpuc_ir::TensorData {
    let bytes: Vec<u8> = match dt {
        tpuc_ir::DType::F32 => vals.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
        tpuc_ir::DType::Bool => vals.iter().map(|&v| u8::from(v != 0.0)).collect(),
        tpuc_ir::DType::I64 => vals.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
        other => panic!("no test data of {other}"),
    };
    tpuc_ir::TensorData::new(TensorType::from_static(dt, dims), bytes.into()).unwrap()
}

/// `vals` ([rows.., n, inner] row-major at real size n along `dim`) padded to `b` along `dim`
/// with `fill`.
fn pad(dims: &[i64], dim: usize, b: i64, vals: &[f64], fill: f64) -> (Vec<i64>, Vec<f64>) {
    let outer: i64 = dims[..dim].iter().product();
    let inner: i64 = dims[dim + 1..].iter().product();
    let n = dims[dim];
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..b {
            for k in 0..inner {
                out.push(if i < n { vals[((o * n + i) * inner + k) as usize] } else { fill });
            }
        }
    }
    let mut pd = dims.to_vec();
    pd[dim] = b;
    (pd, out)
}

/// Attention without is_causal over padded keys, run by the reference interpreter: whatever
/// the padding holds (NaN in q, k, v and an additive mask; `true`, attend, in a boolean one),
/// the valid part of every result of the bucketed program equals the program at the real size.
#[test]
fn attention_over_padded_keys_is_exact_whatever_the_padding_holds() {
    use crate::eval::{run_reference, to_f64s};
    use tpuc_ir::DType::{Bool, F32, I64};
    let attn = |ops: &str, causal: bool, ty: &str| {
        format!("attention {ops} {{is_causal = {causal}, scale = 0.5}} : tensor<{ty}xf32>")
    };
    let text = format!(
        "module {{\n  symbol @s0 : [1, 64]\n  func @main(%0: tensor<2xs0x4xf32> {{kind = \"input\", name = \"q\"}}, \
         %1: tensor<2xs0x4xf32> {{kind = \"input\", name = \"k\"}}, %2: tensor<2xs0x4xf32> {{kind = \"input\", name = \"v\"}}, \
         %3: tensor<s0xs0xf32> {{kind = \"input\", name = \"bias\"}}, %4: tensor<s0xs0xbool> {{kind = \"input\", name = \"keep\"}}, \
         %5: tensor<2x3x4xf32> {{kind = \"input\", name = \"latent\"}}) -> (tensor<2xs0x4xf32>, tensor<2xs0x4xf32>, \
         tensor<2xs0x4xf32>, tensor<2x3x4xf32>, tensor<2xs0x4xf32>) {{\n    %6 = {}\n    %7 = {}\n    %8 = {}\n    %9 = {}\n    \
         %10 = {}\n    return %6, %7, %8, %9, %10\n  }}\n}}\n",
        attn("%0, %1, %2", false, "2xs0x4"),
        attn("%0, %1, %2, %3", false, "2xs0x4"),
        attn("%0, %1, %2, %4", false, "2xs0x4"),
        attn("%5, %1, %2", false, "2x3x4"),
        attn("%0, %1, %2", true, "2xs0x4"),
    );
    let m = tpuc_ir::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (n, b) = (5i64, 8i64);
    let mut seed = 7u64;
    let mut rand = |count: i64| -> Vec<f64> {
        (0..count)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
            })
            .collect()
    };
    let (q, k, v, bias, latent) = (rand(2 * n * 4), rand(2 * n * 4), rand(2 * n * 4), rand(n * n), rand(2 * 3 * 4));
    // Every row keeps its first key.
    let keep: Vec<f64> = (0..n * n).map(|x| f64::from(x % n == 0 || x % 3 != 1)).collect();
    let real = [
        data(F32, &[2, n, 4], &q),
        data(F32, &[2, n, 4], &k),
        data(F32, &[2, n, 4], &v),
        data(F32, &[n, n], &bias),
        data(Bool, &[n, n], &keep),
        data(F32, &[2, 3, 4], &latent),
    ];
    let want = run_reference(&m, &real).unwrap();
    let sp = specialize(&m, &BTreeMap::from([("s0".to_string(), b)])).unwrap();
    let padded3 = |x: &[f64]| {
        let (d, p) = pad(&[2, n, 4], 1, b, x, f64::NAN);
        data(F32, &d, &p)
    };
    let square = |dt, x: &[f64], fill: f64| {
        let (d, p) = pad(&[n, n], 0, b, x, fill);
        let (d, p) = pad(&d, 1, b, &p, fill);
        data(dt, &d, &p)
    };
    let args = [
        padded3(&q),
        padded3(&k),
        padded3(&v),
        square(F32, &bias, f64::NAN),
        square(Bool, &keep, 1.0),
        data(F32, &[2, 3, 4], &latent),
        data(I64, &[], &[n as f64]),
    ];
    let got = run_reference(&sp, &args).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let (g, w) = (to_f64s(g), to_f64s(w));
        // Per batch, the valid part comes first: the first n rows of [2, s0, 4], all of [2, 3, 4].
        let (valid, per) = (w.len() / 2, g.len() / 2);
        for bi in 0..2 {
            for j in 0..valid {
                let (x, y) = (g[bi * per + j], w[bi * valid + j]);
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "result {i} [{bi}, {j}]: {x} vs {y}");
            }
        }
    }
}
