//! Donation on the CPU plugin: a program that updates its state in place (an argument aliased
//! to a result with `tf.aliasing_output`) reuses the donated buffer's memory, and leaves a
//! borrowed one untouched.

mod common;

use common::*;
use tpuc_runtime::{Arg, CompileOptions, ElementType, Program, Target};

const STEP: &str = r#"
module @step {
  func.func public @main(%w: tensor<256xf32> {tf.aliasing_output = 1 : i32}, %x: tensor<256xf32>)
      -> (tensor<f32>, tensor<256xf32>) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%w init: %zero) applies stablehlo.add across dimensions = [0]
        : (tensor<256xf32>, tensor<f32>) -> tensor<f32>
    %n = stablehlo.add %w, %x : tensor<256xf32>
    return %s, %n : tensor<f32>, tensor<256xf32>
  }
}
"#;

fn values(start: f32) -> Vec<f32> {
    (0..256).map(|i| start + i as f32).collect()
}

#[test]
fn a_donated_state_argument_becomes_its_result_in_place() {
    let client = plugin(Target::Cpu).create_client().unwrap();
    let exe = client.compile(&Program::mlir(STEP), &CompileOptions::default()).unwrap();
    let x = client.buffer_from_host(&f32_bytes(&values(1.0)), ElementType::F32, &[256], None).unwrap();
    let mut w = client.buffer_from_host(&f32_bytes(&values(0.0)), ElementType::F32, &[256], None).unwrap();
    let mut want: Vec<f32> = values(0.0);
    for step in 0..3 {
        let before = w.host_address().unwrap().expect("the CPU plugin keeps arrays in host memory");
        let mut out = exe.execute_with(vec![Arg::Donated(w), Arg::Borrowed(&x)]).unwrap();
        let sum = f32s(&out[0].to_host().unwrap())[0];
        assert_eq!(sum, want.iter().sum::<f32>(), "step {step}");
        w = out.pop().unwrap();
        assert_eq!(w.host_address().unwrap(), Some(before), "step {step}: the update reused the donated memory");
        want = want.iter().zip(values(1.0)).map(|(a, b)| a + b).collect();
        assert_eq!(f32s(&w.to_host().unwrap()), want);
    }
}

#[test]
fn a_borrowed_argument_of_an_aliasing_program_is_copied_not_taken() {
    let client = plugin(Target::Cpu).create_client().unwrap();
    let exe = client.compile(&Program::mlir(STEP), &CompileOptions::default()).unwrap();
    let x = client.buffer_from_host(&f32_bytes(&values(1.0)), ElementType::F32, &[256], None).unwrap();
    let w = client.buffer_from_host(&f32_bytes(&values(0.0)), ElementType::F32, &[256], None).unwrap();
    let address = w.host_address().unwrap();
    for _ in 0..2 {
        let out = exe.execute(&[&w, &x]).unwrap();
        assert_ne!(out[1].host_address().unwrap(), address);
        assert_eq!(f32s(&out[1].to_host().unwrap()), values(0.0).iter().zip(values(1.0)).map(|(a, b)| a + b).collect::<Vec<_>>());
        // The caller's buffer is intact.
        assert_eq!(f32s(&w.to_host().unwrap()), values(0.0));
    }
}
