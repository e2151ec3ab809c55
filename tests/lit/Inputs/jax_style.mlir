module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.layout_mode = "default"}, %arg1: tensor<8xf32> {mhlo.layout_mode = "default"}) -> (tensor<4xf32> {jax.result_info = "", mhlo.layout_mode = "default"}) {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4x8xf32>
    %2 = stablehlo.tanh %1 : tensor<4x8xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
    return %3 : tensor<4xf32>
  }
}
