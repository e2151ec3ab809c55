//! Numerics of the tricky lowerings, run on XLA's CPU backend through jaxlib and compared with
//! PyTorch / math.erf by `tests/run_stablehlo.py` (which holds each case's inputs and
//! reference). Prints the measured errors (`cargo test -- --nocapture`).

mod common;

use common::{emit_text, ir_module, run_numerics};
use tpuc_lowering_stablehlo::{EmitOptions, ErfLowering};

fn hex_f32(v: &[f32]) -> String {
    v.iter()
        .flat_map(|x| x.to_le_bytes())
        .map(|b| format!("{b:02X}"))
        .collect()
}

fn hex_f64(v: &[f64]) -> String {
    v.iter()
        .flat_map(|x| x.to_le_bytes())
        .map(|b| format!("{b:02X}"))
        .collect()
}

fn cases() -> Vec<(String, String, EmitOptions)> {
    let d = EmitOptions::default();
    let chlo = EmitOptions {
        erf: ErfLowering::Chlo,
        ..EmitOptions::default()
    };
    let mut v = Vec::new();
    let mut add = |name: &str, args: &str, body: &str, o: &EmitOptions| {
        v.push((name.to_string(), ir_module(args, body), o.clone()));
    };
    add(
        "erf_f32",
        "%0: tensor<200000xf32>",
        "%1 = erf %0 : tensor<200000xf32>\nreturn %1",
        &d,
    );
    add(
        "erf_chlo_f32",
        "%0: tensor<200000xf32>",
        "%1 = erf %0 : tensor<200000xf32>\nreturn %1",
        &chlo,
    );
    add(
        "erf_f64",
        "%0: tensor<200000xf64>",
        "%1 = erf %0 : tensor<200000xf64>\nreturn %1",
        &d,
    );
    add(
        "erf_bf16",
        "%0: tensor<20000xbf16>",
        "%1 = erf %0 : tensor<20000xbf16>\nreturn %1",
        &d,
    );
    add(
        "erf_f16",
        "%0: tensor<20000xf16>",
        "%1 = erf %0 : tensor<20000xf16>\nreturn %1",
        &d,
    );
    add(
        "gelu_none_f32",
        "%0: tensor<64x257xf32>",
        "%1 = gelu %0 {approximate = \"none\"} : tensor<64x257xf32>\nreturn %1",
        &d,
    );
    add(
        "gelu_tanh_f32",
        "%0: tensor<64x257xf32>",
        "%1 = gelu %0 {approximate = \"tanh\"} : tensor<64x257xf32>\nreturn %1",
        &d,
    );
    add(
        "gelu_none_bf16",
        "%0: tensor<64x257xbf16>",
        "%1 = gelu %0 {approximate = \"none\"} : tensor<64x257xbf16>\nreturn %1",
        &d,
    );
    add(
        "softmax_f32",
        "%0: tensor<4x6x33xf32>",
        "%1 = softmax %0 {dimension = 2} : tensor<4x6x33xf32>\n%2 = log_softmax %0 {dimension = 1} : tensor<4x6x33xf32>\nreturn %1, %2",
        &d,
    );
    add(
        "arg_reduce_f32",
        "%0: tensor<10x8xf32>",
        "%1 = arg_reduce %0 {dimension = 1, kind = \"argmax\"} : tensor<10xi64>\n%2 = arg_reduce %0 {dimension = 1, kind = \"argmin\"} : tensor<10xi64>\nreturn %1, %2",
        &d,
    );
    add(
        "arg_reduce_i32",
        "%0: tensor<3x5xi32>",
        "%1 = arg_reduce %0 {dimension = 1, kind = \"argmax\"} : tensor<3xi32>\n%2 = arg_reduce %0 {dimension = 1, kind = \"argmin\"} : tensor<3xi32>\nreturn %1, %2",
        &d,
    );
    add(
        "scan",
        "%0: tensor<5x40xf32>, %1: tensor<7x3xi64>",
        "%2 = scan %0 {dimension = 1, kind = \"sum\"} : tensor<5x40xf32>\n%3 = scan %0 {dimension = 1, kind = \"prod\"} : tensor<5x40xf32>\n\
         %4 = scan %0 {dimension = 1, kind = \"max\"} : tensor<5x40xf32>\n%5 = scan %0 {dimension = 1, kind = \"min\"} : tensor<5x40xf32>\n\
         %6 = scan %1 {dimension = 0, kind = \"sum\"} : tensor<7x3xi64>\nreturn %2, %3, %4, %5, %6",
        &d,
    );
    add(
        "sort_f32",
        "%0: tensor<3x12xf32>",
        "%1, %2 = sort %0 {descending = false, dimension = 1} : tensor<3x12xf32>, tensor<3x12xi64>\n\
         %3, %4 = sort %0 {descending = true, dimension = 1} : tensor<3x12xf32>, tensor<3x12xi64>\nreturn %1, %2, %3, %4",
        &d,
    );
    add(
        "layer_norm_f32",
        "%0: tensor<2x3x8xf32>",
        "%1, %2, %3 = layer_norm %0 {epsilon = 1e-5, normalized_rank = 1} : tensor<2x3x8xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>\nreturn %1, %2, %3",
        &d,
    );
    add(
        "attention",
        "%0: tensor<2x3x5x8xf32>, %1: tensor<2x3x7x8xf32>, %2: tensor<2x3x7x4xf32>, %3: tensor<5x7xbool>, %4: tensor<2x1x5x7xf32>",
        "%5 = attention %0, %1, %2 {is_causal = true, scale = 0.35355339059327373} : tensor<2x3x5x4xf32>\n\
         %6 = attention %0, %1, %2, %3 {is_causal = false, scale = 0.5} : tensor<2x3x5x4xf32>\n\
         %7 = attention %0, %1, %2, %4 {is_causal = false, scale = 0.5} : tensor<2x3x5x4xf32>\nreturn %5, %6, %7",
        &d,
    );
    add(
        "pooling",
        "%0: tensor<1x2x6x6xf32>, %1: tensor<1x2x3x3xf32>",
        "%2 = reduce_window %0 {base_dilations = [1, 1, 1, 1], kind = \"max\", padding = [0, 0, 0, 0, 1, 1, 1, 1], window_dilations = [1, 1, 1, 1], window_dimensions = [1, 1, 3, 3], window_strides = [1, 1, 2, 2]} : tensor<1x2x3x3xf32>\n\
         %3 = select_and_scatter_add %0, %1 {padding = [0, 0, 0, 0, 1, 1, 1, 1], window_dimensions = [1, 1, 3, 3], window_strides = [1, 1, 2, 2]} : tensor<1x2x6x6xf32>\n\
         %4 = reduce_window %0 {base_dilations = [1, 1, 1, 1], kind = \"sum\", padding = [0, 0, 0, 0, 0, 0, 0, 0], window_dilations = [1, 1, 1, 1], window_dimensions = [1, 1, 2, 2], window_strides = [1, 1, 2, 2]} : tensor<1x2x3x3xf32>\n\
         return %2, %3, %4",
        &d,
    );
    add(
        "conv2d",
        "%0: tensor<2x4x9x9xf32>, %1: tensor<6x2x3x3xf32>",
        "%2 = convolution %0, %1 {batch_group_count = 1, feature_group_count = 2, lhs_dilation = [1, 1], padding = [1, 1, 1, 1], precision = \"highest\", rhs_dilation = [2, 2], window_strides = [2, 2]} : tensor<2x6x4x4xf32>\nreturn %2",
        &d,
    );
    add(
        "gather_scatter",
        "%0: tensor<10x4xf32>, %1: tensor<5xi64>, %2: tensor<5x4xf32>",
        "%3 = gather %0, %1 {collapsed_slice_dims = [0], index_vector_dim = 1, offset_dims = [1], operand_batching_dims = [], slice_sizes = [1, 4], start_index_map = [0], start_indices_batching_dims = []} : tensor<5x4xf32>\n\
         %4 = scatter %0, %1, %2 {index_vector_dim = 1, input_batching_dims = [], inserted_window_dims = [0], kind = \"add\", scatter_dims_to_operand_dims = [0], scatter_indices_batching_dims = [], update_window_dims = [1]} : tensor<10x4xf32>\n\
         return %3, %4",
        &d,
    );
    let consts = format!(
        "%0 = constant {{value = dense<0.1> : tensor<3xf32>}} : tensor<3xf32>\n\
         %1 = constant {{value = dense<\"0x{}\"> : tensor<3xf32>}} : tensor<3xf32>\n\
         %2 = constant {{value = dense<\"0x0100C07F\"> : tensor<1xf32>}} : tensor<1xf32>\n\
         %3 = constant {{value = dense<\"0x{}\"> : tensor<2xf64>}} : tensor<2xf64>\n\
         %4 = constant {{value = dense<\"0x662EFF7B\"> : tensor<2xf16>}} : tensor<2xf16>\n\
         %5 = constant {{value = dense<0.3333333333333333> : tensor<1xbf16>}} : tensor<1xbf16>\n\
         %6 = constant {{value = dense<\"0x7E88\"> : tensor<2xf8e4m3fn>}} : tensor<2xf8e4m3fn>\n\
         %7 = constant {{value = dense<\"0x0000000000000080FFFFFFFFFFFFFF7F\"> : tensor<2xi64>}} : tensor<2xi64>\n\
         %8 = constant {{value = dense<18446744073709551615> : tensor<1xu64>}} : tensor<1xu64>\n\
         %9 = constant {{value = dense<\"0x0100010100\"> : tensor<5xbool>}} : tensor<5xbool>\n\
         %10 = constant {{value = dense<\"0x807F00FF\"> : tensor<4xi8>}} : tensor<4xi8>\n\
         return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10",
        hex_f32(&[1e-40, -0.0, f32::MAX]),
        hex_f64(&[0.1, 1.0 / 3.0]),
    );
    add("constants_exact", "", &consts, &d);
    add(
        "integer_semantics",
        "%0: tensor<4xu8>, %1: tensor<4xu8>, %2: tensor<5xi32>, %3: tensor<5xi32>",
        "%4 = compare %0, %1 {direction = \"gt\"} : tensor<4xbool>\n%5 = div %2, %3 : tensor<5xi32>\n%6 = rem %2, %3 : tensor<5xi32>\n\
         %7 = sign %0 : tensor<4xu8>\n%8 = reduce %0 {dimensions = [0], kind = \"max\"} : tensor<u8>\nreturn %4, %5, %6, %7, %8",
        &d,
    );
    add(
        "reductions",
        "%0: tensor<3x5xf32>, %1: tensor<3x3xbool>",
        "%2 = reduce %0 {dimensions = [1], kind = \"max\"} : tensor<3xf32>\n%3 = reduce %0 {dimensions = [1], kind = \"min\"} : tensor<3xf32>\n\
         %4 = reduce %0 {dimensions = [1], kind = \"sum\"} : tensor<3xf32>\n%5 = reduce %0 {dimensions = [1], kind = \"prod\"} : tensor<3xf32>\n\
         %6 = reduce %1 {dimensions = [1], kind = \"and\"} : tensor<3xbool>\n%7 = reduce %1 {dimensions = [1], kind = \"or\"} : tensor<3xbool>\n\
         return %2, %3, %4, %5, %6, %7",
        &d,
    );
    v
}

#[test]
fn emitted_stablehlo_matches_pytorch_on_xla_cpu() {
    let emitted: Vec<(String, String)> = cases()
        .into_iter()
        .map(|(n, ir, o)| (n, emit_text(&ir, &o)))
        .collect();
    let report = run_numerics(&emitted);
    println!("{report}");
}
