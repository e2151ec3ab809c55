//! Every IR opcode (with its dtype and attribute variants) is emitted and the output checked by
//! the real StableHLO verifier, including serialization to a portable (VHLO) artifact.

mod common;

use common::{compile_all, emit_text, ir_module, verify_all};
use std::collections::BTreeSet;
use tpuc_ir::Opcode;
use tpuc_lowering_stablehlo::{EmitOptions, ErfLowering, Ranks};

/// Emitter options for the cases: one rank, so the collectives' groups are `[[0]]`.
fn options(debug_locations: bool) -> EmitOptions {
    EmitOptions { debug_locations, ranks: Some(Ranks { count: 1, ..Default::default() }), ..EmitOptions::default() }
}

/// (name, IR text) for every op and its interesting variants.
fn cases() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    let mut add =
        |name: &str, args: &str, body: &str| v.push((name.to_string(), ir_module(args, body)));

    // ---- collectives of a per-rank program (emitted with one rank: groups of size 1)
    add(
        "collectives",
        "%0: tensor<4x3xf32>, %1: tensor<4xi32>",
        "%2 = all_reduce %0 {group = \"0\", kind = \"sum\", average = true} : tensor<4x3xf32>
         %3 = all_reduce %1 {group = \"0\", kind = \"max\"} : tensor<4xi32>
         %4 = all_gather %0 {dimension = 1, group = \"0\", group_size = 1} : tensor<4x3xf32>
         %5 = reduce_scatter %0 {dimension = 0, group = \"0\", group_size = 1, kind = \"prod\"} : tensor<4x3xf32>
         %6 = all_to_all %0 {dimension = 0, group = \"0\", group_size = 1} : tensor<4x3xf32>
         %7 = collective_broadcast %1 {group = \"0\", source = 0} : tensor<4xi32>
         return %2, %3, %4, %5, %6, %7",
    );

    // ---- elementwise unary
    for op in [
        "abs",
        "neg",
        "exp",
        "expm1",
        "log",
        "log1p",
        "sqrt",
        "rsqrt",
        "tanh",
        "logistic",
        "sin",
        "cos",
        "tan",
        "erf",
        "floor",
        "ceil",
        "round_even",
        "sign",
    ] {
        add(
            op,
            "%0: tensor<2x3xf32>",
            &format!("%1 = {op} %0 : tensor<2x3xf32>\nreturn %1"),
        );
    }
    for dt in ["f16", "bf16", "f64", "f8e4m3fn"] {
        add(
            &format!("erf_{dt}"),
            &format!("%0: tensor<5x{dt}>"),
            &format!("%1 = erf %0 : tensor<5x{dt}>\nreturn %1"),
        );
    }
    // Special functions, written as CHLO ops (f8 computes in f32).
    for dt in ["f32", "f64", "bf16", "f8e5m2"] {
        let mut body = String::new();
        let mut outs = Vec::new();
        for (i, op) in ["erfc", "erf_inv", "lgamma", "digamma", "acosh", "asinh", "atanh", "bessel_i1e"]
            .iter()
            .enumerate()
        {
            body.push_str(&format!("%{} = {op} %0 : tensor<5x{dt}>\n", i + 2));
            outs.push(format!("%{}", i + 2));
        }
        for (i, op) in ["polygamma", "zeta", "next_after"].iter().enumerate() {
            body.push_str(&format!("%{} = {op} %1, %0 : tensor<5x{dt}>\n", i + 10));
            outs.push(format!("%{}", i + 10));
        }
        body.push_str(&format!("return {}", outs.join(", ")));
        add(&format!("special_{dt}"), &format!("%0: tensor<5x{dt}>, %1: tensor<5x{dt}>"), &body);
    }
    // Complex numbers and the FFT.
    add(
        "complex_parts_fft",
        "%0: tensor<3x8xf32>, %1: tensor<3x8xf32>",
        "%2 = complex %0, %1 : tensor<3x8xc64>\n\
         %3 = fft %2 {fft_type = \"fft\", fft_length = [3, 8]} : tensor<3x8xc64>\n\
         %4 = fft %3 {fft_type = \"ifft\", fft_length = [8]} : tensor<3x8xc64>\n\
         %5 = fft %0 {fft_type = \"rfft\", fft_length = [8]} : tensor<3x5xc64>\n\
         %6 = fft %5 {fft_type = \"irfft\", fft_length = [8]} : tensor<3x8xf32>\n\
         %7 = real %4 : tensor<3x8xf32>\n\
         %8 = imag %4 : tensor<3x8xf32>\n\
         %9 = mul %2, %3 : tensor<3x8xc64>\n\
         return %6, %7, %8, %9",
    );
    add(
        "cholesky_triangular_solve",
        "%0: tensor<2x4x4xf32>, %1: tensor<2x4x3xf32>, %2: tensor<2x3x4xf32>",
        "%3 = cholesky %0 {lower = true} : tensor<2x4x4xf32>\n\
         %4 = triangular_solve %3, %1 {left_side = true, lower = true, unit_diagonal = false, transpose_a = true} : tensor<2x4x3xf32>\n\
         %5 = triangular_solve %3, %2 {left_side = false, lower = false, unit_diagonal = true, transpose_a = false} : tensor<2x3x4xf32>\n\
         return %4, %5",
    );
    add(
        "qr_householder_eigh",
        "%0: tensor<2x5x3xf32>, %1: tensor<4x4xf64>",
        "%2, %3 = qr %0 : tensor<2x5x3xf32>, tensor<2x3xf32>\n\
         %4 = householder_product %2, %3 : tensor<2x5x3xf32>\n\
         %5, %6 = eigh %1 {lower = true} : tensor<4x4xf64>, tensor<4xf64>\n\
         return %4, %5, %6",
    );
    add("abs_sign_neg_int", "%0: tensor<4xi32>", "%1 = abs %0 : tensor<4xi32>\n%2 = sign %1 : tensor<4xi32>\n%3 = neg %2 : tensor<4xi32>\nreturn %3");
    add(
        "abs_sign_unsigned",
        "%0: tensor<4xu8>",
        "%1 = abs %0 : tensor<4xu8>\n%2 = sign %1 : tensor<4xu8>\nreturn %1, %2",
    );
    add(
        "not_bool_int",
        "%0: tensor<4xbool>, %1: tensor<4xi64>",
        "%2 = not %0 : tensor<4xbool>\n%3 = not %1 : tensor<4xi64>\nreturn %2, %3",
    );
    add(
        "is_finite",
        "%0: tensor<2x3xbf16>",
        "%1 = is_finite %0 : tensor<2x3xbool>\nreturn %1",
    );
    add(
        "convert",
        "%0: tensor<2x3xf32>, %1: tensor<2x3xbool>, %2: tensor<2x3xi64>",
        "%3 = convert %0 : tensor<2x3xbf16>\n%4 = convert %0 : tensor<2x3xi32>\n%5 = convert %1 : tensor<2x3xf32>\n\
         %6 = convert %0 : tensor<2x3xbool>\n%7 = convert %2 : tensor<2x3xu8>\n%8 = convert %0 : tensor<2x3xf32>\n\
         %9 = convert %0 : tensor<2x3xf8e5m2>\nreturn %3, %4, %5, %6, %7, %8, %9",
    );

    // ---- elementwise binary, compare, select
    for op in [
        "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2",
    ] {
        add(
            op,
            "%0: tensor<2x3xf32>, %1: tensor<2x3xf32>",
            &format!("%2 = {op} %0, %1 : tensor<2x3xf32>\nreturn %2"),
        );
    }
    for op in [
        "add", "sub", "mul", "div", "rem", "pow", "max", "min", "and", "or", "xor",
    ] {
        add(
            &format!("{op}_i32"),
            "%0: tensor<4xi32>, %1: tensor<4xi32>",
            &format!("%2 = {op} %0, %1 : tensor<4xi32>\nreturn %2"),
        );
    }
    for (op, dt) in [
        ("shift_left", "i64"),
        ("shift_right_arithmetic", "i8"),
        ("shift_right_logical", "u8"),
        ("shift_left", "u32"),
    ] {
        add(
            &format!("{op}_{dt}"),
            &format!("%0: tensor<4x{dt}>, %1: tensor<4x{dt}>"),
            &format!("%2 = {op} %0, %1 : tensor<4x{dt}>\nreturn %2"),
        );
    }
    for op in ["and", "or", "xor", "add", "mul", "max", "min"] {
        add(
            &format!("{op}_bool"),
            "%0: tensor<4xbool>, %1: tensor<4xbool>",
            &format!("%2 = {op} %0, %1 : tensor<4xbool>\nreturn %2"),
        );
    }
    for (dt, dir) in [
        ("f32", "lt"),
        ("i64", "ge"),
        ("u8", "gt"),
        ("bool", "eq"),
        ("bf16", "ne"),
        ("i32", "le"),
    ] {
        add(
            &format!("compare_{dt}_{dir}"),
            &format!("%0: tensor<4x{dt}>, %1: tensor<4x{dt}>"),
            &format!("%2 = compare %0, %1 {{direction = \"{dir}\"}} : tensor<4xbool>\nreturn %2"),
        );
    }
    add(
        "select",
        "%0: tensor<2x3xbool>, %1: tensor<2x3xf32>, %2: tensor<2x3xf32>",
        "%3 = select %0, %1, %2 : tensor<2x3xf32>\nreturn %3",
    );

    // ---- constants and iota
    add(
        "constants",
        "",
        "%0 = constant {value = dense<0.1> : tensor<2x3xf32>} : tensor<2x3xf32>\n\
         %1 = constant {value = dense<\"0x0000803F000000C0\"> : tensor<2xf32>} : tensor<2xf32>\n\
         %2 = constant {value = dense<\"0x0100010000\"> : tensor<5xbool>} : tensor<5xbool>\n\
         %3 = constant {value = dense<-9223372036854775808> : tensor<i64>} : tensor<i64>\n\
         %4 = constant {value = dense<255> : tensor<3xu8>} : tensor<3xu8>\n\
         %5 = constant {value = dense<\"0x007E\"> : tensor<bf16>} : tensor<bf16>\n\
         %6 = constant {value = dense<nan> : tensor<2xf16>} : tensor<2xf16>\n\
         %7 = constant {value = dense<-inf> : tensor<f64>} : tensor<f64>\n\
         %8 = constant {value = dense<448.0> : tensor<f8e4m3fn>} : tensor<f8e4m3fn>\n\
         %9 = constant {value = dense<true> : tensor<2x2xbool>} : tensor<2x2xbool>\n\
         %10 = constant {value = dense<\"0x\"> : tensor<0x3xf32>} : tensor<0x3xf32>\n\
         %11 = constant {value = dense<18446744073709551615> : tensor<u64>} : tensor<u64>\n\
         %12 = constant {value = dense<-0.0> : tensor<f32>} : tensor<f32>\n\
         %13 = constant {value = dense<1.5> : tensor<2xc64>} : tensor<2xc64>\n\
         %14 = constant {value = dense<\"0x01020304\"> : tensor<4xi8>} : tensor<4xi8>\n\
         %15 = constant {value = dense<1e-40> : tensor<f32>} : tensor<f32>\n\
         return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15",
    );
    add(
        "iota",
        "",
        "%0 = iota {dimension = 1} : tensor<2x5xi64>\n%1 = iota {dimension = 0} : tensor<3xf32>\nreturn %0, %1",
    );

    // ---- shape ops
    add(
        "shape_ops",
        "%0: tensor<2x3xf32>, %1: tensor<3xf32>, %2: tensor<f32>",
        "%3 = broadcast_in_dim %1 {broadcast_dimensions = [1]} : tensor<2x3xf32>\n\
         %4 = broadcast_in_dim %2 {broadcast_dimensions = []} : tensor<4x2x3xf32>\n\
         %5 = reshape %0 : tensor<3x2xf32>\n\
         %6 = reshape %2 : tensor<1x1xf32>\n\
         %7 = transpose %0 {permutation = [1, 0]} : tensor<3x2xf32>\n\
         %8 = slice %0 {limit_indices = [2, 3], start_indices = [1, 0], strides = [1, 2]} : tensor<1x2xf32>\n\
         %9 = concatenate %0, %3, %0 {dimension = 0} : tensor<6x3xf32>\n\
         %10 = pad %0, %2 {edge_padding_high = [-1, 2], edge_padding_low = [1, 0], interior_padding = [0, 1]} : tensor<2x7xf32>\n\
         %11 = reverse %0 {dimensions = [0, 1]} : tensor<2x3xf32>\n\
         %12 = broadcast_in_dim %0 {broadcast_dimensions = [0, 1]} : tensor<2x3xf32>\n\
         return %3, %4, %5, %6, %7, %8, %9, %10, %11, %12",
    );

    // ---- dot_general and convolution
    add(
        "dot_general",
        "%0: tensor<8x2x3xf32>, %1: tensor<8x3x4xf32>, %2: tensor<2x3xbf16>, %3: tensor<3x4xbf16>, %4: tensor<5xf32>",
        "%5 = dot_general %0, %1 {lhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], precision = \"highest\", rhs_batching_dimensions = [0], rhs_contracting_dimensions = [1]} : tensor<8x2x4xf32>\n\
         %6 = dot_general %2, %3 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]} : tensor<2x4xf32>\n\
         %7 = dot_general %2, %3 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [1], precision = \"default\", rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]} : tensor<2x4xbf16>\n\
         %8 = dot_general %4, %4 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [], precision = \"high\", rhs_batching_dimensions = [], rhs_contracting_dimensions = []} : tensor<5x5xf32>\n\
         return %5, %6, %7, %8",
    );
    add(
        "convolution",
        "%0: tensor<2x4x8x8xf32>, %1: tensor<6x4x3x3xf32>, %2: tensor<6x2x3x3xf32>, %3: tensor<1x3x10xf32>, %4: tensor<5x3x3xf32>",
        "%5 = convolution %0, %1 {batch_group_count = 1, feature_group_count = 1, lhs_dilation = [1, 1], padding = [1, 1, 1, 1], precision = \"high\", rhs_dilation = [1, 1], window_strides = [1, 1]} : tensor<2x6x8x8xf32>\n\
         %6 = convolution %0, %2 {batch_group_count = 1, feature_group_count = 2, lhs_dilation = [1, 1], padding = [0, 1, 2, 0], rhs_dilation = [2, 1], window_strides = [2, 2]} : tensor<2x6x3x4xf32>\n\
         %7 = convolution %3, %4 {batch_group_count = 1, feature_group_count = 1, lhs_dilation = [2], padding = [1, 1], rhs_dilation = [1], window_strides = [1]} : tensor<1x5x19xf32>\n\
         %8 = convolution %0, %1 {batch_group_count = 2, feature_group_count = 1, lhs_dilation = [1, 1], padding = [0, 0, 0, 0], rhs_dilation = [1, 1], window_strides = [1, 1]} : tensor<1x6x6x6xf32>\n\
         return %5, %6, %7, %8",
    );

    // ---- reductions
    for (dt, kinds) in [
        ("f32", &["sum", "prod", "max", "min"][..]),
        ("bf16", &["sum", "max"][..]),
        ("i32", &["sum", "prod", "max", "min", "and", "or"][..]),
        ("u8", &["max", "min"][..]),
        ("bool", &["and", "or", "sum", "max", "min", "prod"][..]),
        ("f8e4m3fn", &["max", "min"][..]),
    ] {
        for kind in kinds {
            add(
                &format!("reduce_{kind}_{dt}"),
                &format!("%0: tensor<2x3x4x{dt}>"),
                &format!("%1 = reduce %0 {{dimensions = [0, 2], kind = \"{kind}\"}} : tensor<3x{dt}>\nreturn %1"),
            );
        }
    }
    add(
        "reduce_all_dims",
        "%0: tensor<2x3xf32>",
        "%1 = reduce %0 {dimensions = [0, 1], kind = \"sum\"} : tensor<f32>\nreturn %1",
    );
    for (dt, it) in [
        ("f32", "i64"),
        ("bf16", "i32"),
        ("i32", "i64"),
        ("u8", "i64"),
        ("bool", "i64"),
    ] {
        for kind in ["argmax", "argmin"] {
            add(
                &format!("{kind}_{dt}"),
                &format!("%0: tensor<3x5x{dt}>"),
                &format!("%1 = arg_reduce %0 {{dimension = 1, kind = \"{kind}\"}} : tensor<3x{it}>\nreturn %1"),
            );
        }
    }
    add(
        "reduce_window",
        "%0: tensor<1x3x8x8xf32>, %1: tensor<2x7xi32>",
        "%2 = reduce_window %0 {base_dilations = [1, 1, 1, 1], kind = \"max\", padding = [0, 0, 0, 0, 1, 1, 1, 1], window_dilations = [1, 1, 1, 1], window_dimensions = [1, 1, 3, 3], window_strides = [1, 1, 2, 2]} : tensor<1x3x4x4xf32>\n\
         %3 = reduce_window %0 {base_dilations = [1, 1, 2, 1], kind = \"sum\", padding = [0, 0, 0, 0, 0, 0, 0, 0], window_dilations = [1, 1, 1, 2], window_dimensions = [1, 1, 2, 2], window_strides = [1, 1, 1, 1]} : tensor<1x3x14x6xf32>\n\
         %4 = reduce_window %1 {base_dilations = [1, 1], kind = \"min\", padding = [0, 0, 2, 0], window_dilations = [1, 1], window_dimensions = [1, 3], window_strides = [1, 1]} : tensor<2x7xi32>\n\
         return %2, %3, %4",
    );
    for kind in ["sum", "prod", "max", "min"] {
        add(
            &format!("scan_{kind}"),
            "%0: tensor<3x6xf32>, %1: tensor<4x2xi64>",
            &format!(
                "%2 = scan %0 {{dimension = 1, kind = \"{kind}\"}} : tensor<3x6xf32>\n%3 = scan %1 {{dimension = 0, kind = \"{kind}\"}} : tensor<4x2xi64>\nreturn %2, %3"
            ),
        );
    }
    add(
        "scan_len1",
        "%0: tensor<3x1xf32>",
        "%1 = scan %0 {dimension = 1, kind = \"sum\"} : tensor<3x1xf32>\nreturn %1",
    );

    // ---- gather / scatter / select_and_scatter / sort
    add(
        "gather",
        "%0: tensor<100x16xf32>, %1: tensor<5xi64>, %2: tensor<2x3x4xf32>, %3: tensor<2x5x1xi32>",
        "%4 = gather %0, %1 {collapsed_slice_dims = [0], index_vector_dim = 1, offset_dims = [1], operand_batching_dims = [], slice_sizes = [1, 16], start_index_map = [0], start_indices_batching_dims = []} : tensor<5x16xf32>\n\
         %5 = gather %2, %3 {collapsed_slice_dims = [1], index_vector_dim = 2, offset_dims = [2], operand_batching_dims = [0], slice_sizes = [1, 1, 4], start_index_map = [1], start_indices_batching_dims = [0]} : tensor<2x5x4xf32>\n\
         return %4, %5",
    );
    for kind in ["replace", "add", "mul", "max", "min"] {
        add(
            &format!("scatter_{kind}"),
            "%0: tensor<10x4xf32>, %1: tensor<3x1xi64>, %2: tensor<3x4xf32>",
            &format!(
                "%3 = scatter %0, %1, %2 {{index_vector_dim = 1, input_batching_dims = [], inserted_window_dims = [0], kind = \"{kind}\", scatter_dims_to_operand_dims = [0], scatter_indices_batching_dims = [], update_window_dims = [1]}} : tensor<10x4xf32>\nreturn %3"
            ),
        );
    }
    add(
        "scatter_batched_bool",
        "%0: tensor<2x3x4xbool>, %1: tensor<2x5x1xi32>, %2: tensor<2x5x4xbool>",
        "%3 = scatter %0, %1, %2 {index_vector_dim = 2, input_batching_dims = [0], inserted_window_dims = [1], kind = \"add\", scatter_dims_to_operand_dims = [1], scatter_indices_batching_dims = [0], update_window_dims = [2]} : tensor<2x3x4xbool>\nreturn %3",
    );
    add(
        "select_and_scatter_add",
        "%0: tensor<1x2x6x6xf32>, %1: tensor<1x2x3x3xf32>",
        "%2 = select_and_scatter_add %0, %1 {padding = [0, 0, 0, 0, 1, 1, 1, 1], window_dimensions = [1, 1, 3, 3], window_strides = [1, 1, 2, 2]} : tensor<1x2x6x6xf32>\nreturn %2",
    );
    for (dt, desc) in [
        ("f32", false),
        ("f32", true),
        ("i32", false),
        ("u8", true),
        ("bf16", false),
    ] {
        add(
            &format!("sort_{dt}_{}", if desc { "desc" } else { "asc" }),
            &format!("%0: tensor<3x7x{dt}>"),
            &format!("%1, %2 = sort %0 {{descending = {desc}, dimension = 1}} : tensor<3x7x{dt}>, tensor<3x7xi64>\nreturn %1, %2"),
        );
    }

    // ---- complex numbers (what StableHLO defines on them)
    add(
        "complex",
        "%0: tensor<3xc64>, %1: tensor<3xc64>, %2: tensor<3x2xc64>",
        "%3 = add %0, %1 : tensor<3xc64>\n%4 = mul %3, %1 : tensor<3xc64>\n%5 = div %4, %1 : tensor<3xc64>\n%6 = sub %5, %0 : tensor<3xc64>\n\
         %7 = exp %6 : tensor<3xc64>\n%8 = log %7 : tensor<3xc64>\n%9 = neg %8 : tensor<3xc64>\n%10 = sqrt %9 : tensor<3xc64>\n\
         %11 = tanh %10 : tensor<3xc64>\n%12 = sign %11 : tensor<3xc64>\n%13 = compare %12, %0 {direction = \"eq\"} : tensor<3xbool>\n\
         %14 = select %13, %12, %0 : tensor<3xc64>\n%15 = reduce %14 {dimensions = [0], kind = \"sum\"} : tensor<c64>\n\
         %16 = dot_general %0, %2 {lhs_batching_dimensions = [], lhs_contracting_dimensions = [0], rhs_batching_dimensions = [], rhs_contracting_dimensions = [0]} : tensor<2xc64>\n\
         %17 = convert %0 : tensor<3xc128>\n%18 = pow %0, %1 : tensor<3xc64>\n%19 = rsqrt %0 : tensor<3xc64>\n%20 = sin %0 : tensor<3xc64>\n%21 = logistic %0 : tensor<3xc64>\n\
         %22 = expm1 %0 : tensor<3xc64>\n%23 = log1p %0 : tensor<3xc64>\n%24 = cos %0 : tensor<3xc64>\n%25 = tan %0 : tensor<3xc64>\n%26 = reduce %0 {dimensions = [0], kind = \"prod\"} : tensor<c64>\n\
         return %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26",
    );

    // ---- high-level ops
    for dt in ["f32", "bf16", "f16", "f64"] {
        add(
            &format!("softmax_{dt}"),
            &format!("%0: tensor<2x3x5x{dt}>"),
            &format!(
                "%1 = softmax %0 {{dimension = 2}} : tensor<2x3x5x{dt}>\n%2 = log_softmax %0 {{dimension = 0}} : tensor<2x3x5x{dt}>\nreturn %1, %2"
            ),
        );
        for approx in ["none", "tanh"] {
            add(
                &format!("gelu_{approx}_{dt}"),
                &format!("%0: tensor<4x8x{dt}>"),
                &format!(
                    "%1 = gelu %0 {{approximate = \"{approx}\"}} : tensor<4x8x{dt}>\nreturn %1"
                ),
            );
        }
        add(
            &format!("layer_norm_{dt}"),
            &format!("%0: tensor<2x3x8x{dt}>"),
            &format!(
                "%1, %2, %3 = layer_norm %0 {{epsilon = 1e-5, normalized_rank = 1}} : tensor<2x3x8x{dt}>, tensor<2x3x1x{dt}>, tensor<2x3x1x{dt}>\n\
                 %4, %5, %6 = layer_norm %0 {{epsilon = 1e-6, normalized_rank = 2}} : tensor<2x3x8x{dt}>, tensor<2x1x1x{dt}>, tensor<2x1x1x{dt}>\n\
                 return %1, %2, %3, %4, %5, %6"
            ),
        );
    }
    add(
        "attention",
        "%0: tensor<2x4x6x8xf32>, %1: tensor<2x4x7x8xf32>, %2: tensor<2x4x7x5xf32>, %3: tensor<6x7xbool>, %4: tensor<2x1x6x7xf32>, %5: tensor<6x8xbf16>, %6: tensor<7x8xbf16>",
        "%7 = attention %0, %1, %2 {is_causal = true, scale = 0.35355339059327373} : tensor<2x4x6x5xf32>\n\
         %8 = attention %0, %1, %2, %3 {is_causal = false, scale = 0.5} : tensor<2x4x6x5xf32>\n\
         %9 = attention %0, %1, %2, %4 {is_causal = false, scale = 0.5} : tensor<2x4x6x5xf32>\n\
         %10 = attention %5, %6, %6 {is_causal = true, scale = 0.125} : tensor<6x8xbf16>\n\
         return %7, %8, %9, %10",
    );
    v
}

#[test]
fn every_opcode_is_covered() {
    let mut seen = BTreeSet::new();
    for (name, ir) in cases() {
        let m = tpuc_ir::parse_module(&ir).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (_, op) in m.ops.iter() {
            seen.insert(op.opcode());
        }
    }
    let missing: Vec<_> = Opcode::ALL
        .iter()
        // `composite` (a region-carrying op) has its own tests in tests/composite.rs;
        // `bind_size` never reaches lowering (`specialize` removes it: tests/lit/passes).
        .filter(|o| **o != Opcode::Yield && **o != Opcode::Composite && **o != Opcode::BindSize && !seen.contains(o))
        .collect();
    assert!(
        missing.is_empty(),
        "opcodes without a test case: {missing:?}"
    );
}

/// The same module with every op attributed to one FX node.
fn with_locs(ir: &str) -> String {
    let mut out = String::new();
    for line in ir.lines() {
        out.push_str(line);
        if line.contains(" = ") && !line.trim_start().starts_with("func") {
            out.push_str(" loc(#0)");
        }
        out.push('\n');
    }
    out.push_str(
        "#0 = loc(\"node_1\", \"torch.ops.aten.foo.default\", \"/src/model.py:42 in forward\")\n",
    );
    out
}

#[test]
fn every_case_passes_the_stablehlo_verifier() {
    let plain = options(false);
    let located = options(true);
    let mut emitted = Vec::new();
    for (n, ir) in cases() {
        emitted.push((n.clone(), emit_text(&ir, &plain)));
        let t = emit_text(&with_locs(&ir), &located);
        assert!(
            t.contains("#loc0 = loc(\"node_1\"(\"/src/model.py\":42:0))"),
            "{n}: {t}"
        );
        emitted.push((format!("{n} (with locations)"), t));
    }
    verify_all(&emitted, true);
}

#[test]
fn chlo_erf_option_passes_the_verifier() {
    let opts = EmitOptions {
        erf: ErfLowering::Chlo,
        ..EmitOptions::default()
    };
    let cases: Vec<(String, String)> = cases()
        .into_iter()
        .filter(|(n, _)| n.starts_with("erf") || n.starts_with("gelu_none"))
        .map(|(n, ir)| {
            let t = emit_text(&ir, &opts);
            assert!(t.contains("chlo.erf"), "{n}: {t}");
            (n, t)
        })
        .collect();
    verify_all(&cases, true);
}

#[test]
fn every_case_compiles_on_xla_cpu() {
    let opts = options(true);
    let emitted: Vec<(String, String)> = cases()
        .into_iter()
        .map(|(n, ir)| (n, emit_text(&with_locs(&ir), &opts)))
        .collect();
    compile_all(&emitted);
}
