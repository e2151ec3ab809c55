//! Shared helpers for the runtime's integration tests (real plugins, no mocks).
#![allow(dead_code)]

use tpuc_runtime::{discover, Plugin, Target};

/// Loads the plugin for `target` the way the CLI will (discovery, no flags). Fails the test,
/// pointing at scripts/setup.sh, when the venv or the plugin is missing.
pub fn plugin(target: Target) -> Plugin {
    let found = discover();
    let path = found.plugin(target).unwrap_or_else(|e| {
        panic!("{e}\nThe runtime tests need the PJRT plugins in the project's .venv: run scripts/setup.sh")
    });
    Plugin::load(path)
        .unwrap_or_else(|e| panic!("{e}\n(run scripts/setup.sh to reinstall the plugins)"))
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn bool_bytes(values: &[bool]) -> Vec<u8> {
    values.iter().map(|&b| b as u8).collect()
}

/// add + dot_general + reduce on f32: returns (s @ b, row sums of s @ b) with s = a + c.
pub const F32_MODULE: &str = r#"
module @f32_mix {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>, %c: tensor<2x3xf32>)
      -> (tensor<2x2xf32>, tensor<2xf32>) {
    %s = stablehlo.add %a, %c : tensor<2x3xf32>
    %d = stablehlo.dot_general %s, %b, contracting_dims = [1] x [0]
        : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %r = stablehlo.reduce(%d init: %z) applies stablehlo.add across dimensions = [1]
        : (tensor<2x2xf32>, tensor<f32>) -> tensor<2xf32>
    return %d, %r : tensor<2x2xf32>, tensor<2xf32>
  }
}
"#;

/// The F32_MODULE's results, computed here in f64 (all values are small integers, so exact).
pub fn f32_expected(a: &[f32], b: &[f32], c: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let s: Vec<f64> = a
        .iter()
        .zip(c)
        .map(|(x, y)| f64::from(*x) + f64::from(*y))
        .collect();
    let mut d = [0f64; 4];
    for i in 0..2 {
        for j in 0..2 {
            d[i * 2 + j] = (0..3).map(|k| s[i * 3 + k] * f64::from(b[k * 2 + j])).sum();
        }
    }
    let r = [d[0] + d[1], d[2] + d[3]];
    (
        d.iter().map(|&v| v as f32).collect(),
        r.iter().map(|&v| v as f32).collect(),
    )
}

/// multiply / compare / not / and / select / reduce on i64 and i1.
pub const I64_BOOL_MODULE: &str = r#"
module @int_bool {
  func.func public @main(%x: tensor<4xi64>, %y: tensor<4xi64>, %b: tensor<4xi1>)
      -> (tensor<4xi64>, tensor<4xi1>, tensor<i64>) {
    %m = stablehlo.multiply %x, %y : tensor<4xi64>
    %k = stablehlo.constant dense<100> : tensor<4xi64>
    %gt = stablehlo.compare GT, %m, %k, SIGNED : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
    %nb = stablehlo.not %b : tensor<4xi1>
    %and = stablehlo.and %gt, %nb : tensor<4xi1>
    %sel = stablehlo.select %and, %m, %x : (tensor<4xi1>, tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
    %z = stablehlo.constant dense<0> : tensor<i64>
    %sum = stablehlo.reduce(%sel init: %z) applies stablehlo.add across dimensions = [0]
        : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
    return %sel, %and, %sum : tensor<4xi64>, tensor<4xi1>, tensor<i64>
  }
}
"#;

/// SPMD: rows of `x` split over 4 partitions, `w` replicated.
pub const SPMD_MODULE: &str = r#"
module @spmd attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]0,1,2,3}"},
                         %w: tensor<16x4xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]0,1,2,3}"}) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.tanh %0 : tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}
"#;
