//! Emission speed: a 12-layer GPT-2-small-shaped module (verify included) and the hex
//! throughput of a 16 MiB constant (what `--inline-weights` produces).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use tpuc_ir::{Attr, Attrs, Opcode, TensorData, TensorType};
use tpuc_lowering_stablehlo::{emit_stablehlo, EmitOptions};

mod gpt2_ir;

fn bench(c: &mut Criterion) {
    let m = tpuc_ir::parse_module(&gpt2_ir::gpt2_small_ir()).expect("GPT-2 IR parses");
    let opts = EmitOptions::default();
    c.bench_function("emit/gpt2_small_12l", |b| b.iter(|| black_box(emit_stablehlo(black_box(&m), &opts).unwrap().len())));
    c.bench_function("verify/gpt2_small_12l", |b| b.iter(|| tpuc_ir::verify(black_box(&m)).unwrap()));

    let n = 4 << 20;
    let bytes: Vec<u8> = (0..n as u32).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    let data = TensorData::new(TensorType::from_static(tpuc_ir::DType::F32, &[n as i64]), bytes.into()).unwrap();
    let mut cm = tpuc_ir::Module::new();
    let (_, block) = cm.add_func("main", vec![]);
    let op = cm.create_op(Opcode::Constant, &[], Attrs::new().with("value", Attr::Tensor(data)), None, &[]).unwrap();
    cm.append_op(block, op);
    let v = cm.ops[op].results()[0];
    let ret = cm.create_op(Opcode::Return, &[v], Attrs::new(), Some(&[]), &[]).unwrap();
    cm.append_op(block, ret);
    let mut g = c.benchmark_group("emit/constant_16MiB");
    g.throughput(Throughput::Bytes(4 * n as u64));
    g.sample_size(10);
    g.bench_function("hex", |b| b.iter(|| black_box(emit_stablehlo(black_box(&cm), &opts).unwrap().len())));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
