//! A 12-layer GPT-2-small-shaped module (weights as arguments) and a 16 MiB constant emit to
//! verified StableHLO. Speed is measured by `cargo bench -p tpuc-lowering-stablehlo`, not here.

mod common;
#[path = "../benches/gpt2_ir.rs"]
mod gpt2_ir;

use tpuc_ir::{Attr, Attrs, Loc, Opcode, TensorData, TensorType};
use tpuc_lowering_stablehlo::{emit_stablehlo, EmitOptions};

#[test]
fn gpt2_small_emits_and_verifies() {
    let ir = gpt2_ir::gpt2_small_ir();
    let m = tpuc_ir::parse_module(&ir).unwrap_or_else(|e| panic!("{e}"));
    let opts = EmitOptions { debug_locations: true, ..EmitOptions::default() };
    let out = emit_stablehlo(&m, &opts).unwrap();
    let shlo_ops = out.lines().filter(|l| l.contains(" = stablehlo.") || l.contains(" = \"stablehlo.")).count();
    assert!(shlo_ops > 1000, "expected a GPT-2-sized module, got {shlo_ops} ops");
    common::verify_all(&[("gpt2_small".to_string(), out)], false);
}

/// A module returning one dense constant of `n` f32 elements.
fn constant_module(n: usize) -> tpuc_ir::Module {
    let bytes: Vec<u8> = (0..n as u32).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    let ty = TensorType::from_static(tpuc_ir::DType::F32, &[n as i64]);
    let mut m = tpuc_ir::Module::new();
    let (_, block) = m.add_func("main", vec![]);
    let data = TensorData::new(ty, bytes.into()).unwrap();
    let op = m.create_op(Opcode::Constant, &[], Attrs::new().with("value", Attr::Tensor(data)), None, &[]).unwrap();
    m.append_op(block, op);
    let loc = m.add_loc(Loc::new("w", "weight", None));
    m.set_loc(op, Some(loc));
    let c = m.ops[op].results()[0];
    let ret = m.create_op(Opcode::Return, &[c], Attrs::new(), Some(&[]), &[]).unwrap();
    m.append_op(block, ret);
    m
}

#[test]
fn large_constants_are_written_as_hex() {
    let n = 1 << 16;
    let out = emit_stablehlo(&constant_module(n), &EmitOptions::default()).unwrap();
    assert!(out.contains("dense<\"0x000000000000003F0000803F"), "{}", &out[..200.min(out.len())]);
    assert!(out.len() > 2 * 4 * n);
}
