use tpuc_driver::exec::{self, CompileRequest, Target};
#[test]
fn f64_tpu() {
    let m = r#"module @m {
  func.func public @main(%arg0: tensor<4x8xf64>, %arg1: tensor<4xi64>) -> (tensor<4x8xf64>, tensor<4xi64>) {
    %0 = stablehlo.convert %arg0 : (tensor<4x8xf64>) -> tensor<4x8xf32>
    %1 = stablehlo.exponential %0 : tensor<4x8xf32>
    %2 = stablehlo.convert %1 : (tensor<4x8xf32>) -> tensor<4x8xf64>
    %3 = stablehlo.add %arg1, %arg1 : tensor<4xi64>
    return %2, %3 : tensor<4x8xf64>, tensor<4xi64>
  }
}
"#;
    let req = CompileRequest { target: Target::Tpu, topology: Some("v5e:2x2".into()), ..Default::default() };
    match exec::compile_stablehlo(m, &req) { Ok(c) => println!("tpu ok {:?}", c.summary.cost), Err(e) => println!("tpu err {e}") }
    let m2 = m.replace("stablehlo.exponential %0", "stablehlo.exponential %arg0").replace("-> tensor<4x8xf32>\n    %1", "-> tensor<4x8xf32>\n    %1").replace("%1 = stablehlo.exponential %arg0 : tensor<4x8xf32>", "%1 = stablehlo.exponential %arg0 : tensor<4x8xf64>").replace("%2 = stablehlo.convert %1 : (tensor<4x8xf32>) -> tensor<4x8xf64>", "%2 = stablehlo.add %1, %1 : tensor<4x8xf64>");
    match exec::compile_stablehlo(&m2, &req) { Ok(c) => println!("tpu f64 exp ok {:?}", c.summary.cost), Err(e) => println!("tpu f64 exp err {e}") }
}
