//! The default pass pipelines on every reference fixture (tests/fixtures/manifest.json and the
//! pass fixtures in tests/fixtures/passes/): results still equal PyTorch eager on the CPU
//! plugin with and without fusion and with the TPU pipeline (f64 computed as f32 within f32
//! tolerances), fused and unfused programs agree, bf16 matmuls stay within bf16 error, f64 and
//! i64 fixtures compile for a TPU topology, and the IR after the pipeline is snapshotted.

use tpuc_driver::exec::{self, CompileRequest, Runner, Target};
use tpuc_driver::tensor::{compare, HostTensor};
use tpuc_driver::{Emit, LowerOptions};

mod common;
use common::{fixtures_dir, read_manifest, Fixture};

fn all_fixtures() -> Vec<Fixture> {
    let mut v = read_manifest(fixtures_dir());
    v.extend(read_manifest(fixtures_dir().join("passes")));
    v
}

fn run(f: &Fixture, options: &LowerOptions) -> (tpuc_driver::Lowered, Vec<HostTensor>) {
    let lowered = tpuc_driver::compile_file(&f.file, options, Emit::StableHlo).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let compiled = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &CompileRequest::default())
        .unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let inputs: Vec<(String, HostTensor)> = f.inputs.iter().map(|p| (p.display().to_string(), HostTensor::read_npy(p).unwrap())).collect();
    let outputs = Runner::new(&compiled, &lowered.module, &lowered.weights).unwrap().run(&inputs).unwrap_or_else(|e| panic!("{}: {e}", f.name)).0;
    (lowered, outputs)
}

fn check(label: &str, got: &[HostTensor], want: &[HostTensor], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{label}: number of outputs");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let c = compare(g, w, rtol, atol).unwrap_or_else(|e| panic!("{label} output {i}: {e}"));
        assert_eq!(
            c.mismatches, 0,
            "{label} output {i}: {} elements differ (max abs {:e}, max rel {:e}, first {:?})",
            c.mismatches, c.max_abs_err, c.max_rel_err, c.first_mismatch
        );
    }
}

fn eager(f: &Fixture) -> Vec<HostTensor> {
    f.expected.iter().map(|p| HostTensor::read_npy(p).unwrap()).collect()
}

#[test]
fn every_fixture_equals_eager_after_the_default_pipelines() {
    let all = all_fixtures();
    assert!(all.len() >= 20, "{} fixtures", all.len());
    for f in &all {
        let want = eager(f);
        let (fused_ir, fused) = run(f, &LowerOptions::default());
        check(&format!("{} (cpu pipeline)", f.name), &fused, &want, f.rtol, f.atol);
        let (_, unfused) = run(f, &LowerOptions { no_fusion: true, ..Default::default() });
        check(&format!("{} (--no-fusion)", f.name), &unfused, &want, f.rtol, f.atol);
        // Fusion only moves ops into composite bodies: same results up to XLA's fusion choices.
        check(&format!("{} (fused vs unfused)", f.name), &fused, &unfused, 1e-5, 1e-6);
        // The TPU pipeline run on the CPU plugin: 64-bit types narrowed, precision `default`
        // (which XLA's CPU backend computes in f32 anyway).
        let (tpu_ir, tpu) = run(f, &LowerOptions { target: Target::Tpu, ..Default::default() });
        let (rtol, atol) = if f.name.starts_with("f64") { (1e-5, 1e-6) } else { (f.rtol, f.atol) };
        check(&format!("{} (tpu pipeline)", f.name), &tpu, &want, rtol, atol);
        exec::check_target_support(&tpu_ir.module, Target::Tpu).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let _ = fused_ir;
    }
}

#[test]
fn bf16_matmuls_stay_within_bf16_error_and_weights_inline() {
    for f in all_fixtures().iter().filter(|f| f.name.ends_with(".core") && !f.name.starts_with("f64") && !f.name.starts_with("tokens")) {
        let want = eager(f);
        let (lowered, got) = run(f, &LowerOptions { bf16: true, ..Default::default() });
        assert!(lowered.stablehlo.as_deref().unwrap().contains("bf16"), "{}: no bf16 in the program", f.name);
        check(&format!("{} (--bf16)", f.name), &got, &want, 5e-2, 5e-2);
        let (_, inl) = run(f, &LowerOptions { inline_weights: true, ..Default::default() });
        check(&format!("{} (inlined weights)", f.name), &inl, &want, f.rtol, f.atol);
    }
}

#[test]
fn f64_and_i64_fixtures_compile_for_tpu_with_a_note() {
    for f in all_fixtures().iter().filter(|f| f.name.starts_with("f64") || f.name.starts_with("tokens")) {
        let options = LowerOptions { target: Target::Tpu, ..Default::default() };
        let lowered = tpuc_driver::compile_file(&f.file, &options, Emit::StableHlo).unwrap();
        assert_eq!(lowered.notes.len(), 1, "{}: {:?}", f.name, lowered.notes);
        assert!(lowered.notes[0].starts_with("TPU legalization narrowed "), "{}", lowered.notes[0]);
        let want = if f.name.starts_with("f64") { "f64 values computed as f32" } else { "i64 values that fit computed as i32" };
        assert!(lowered.notes[0].contains(want), "{}", lowered.notes[0]);
        // The signature keeps PyTorch's dtypes.
        let main = lowered.module.main_func().unwrap();
        let entry = lowered.module.entry_block(main);
        let arg0 = lowered.module.values[lowered.module.blocks[entry].args().last().copied().unwrap()].ty.dtype;
        assert!(matches!(arg0, tpuc_ir::DType::F64 | tpuc_ir::DType::I64), "{}: {arg0}", f.name);
        exec::check_target_support(&lowered.module, Target::Tpu).unwrap();
        let req = CompileRequest { target: Target::Tpu, topology: Some("v5e:2x2".into()), ..Default::default() };
        let c = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &req).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert!(c.summary.executable_bytes > 10_000);
        // Without the TPU pipeline the same program is refused, naming f64.
        if f.name.starts_with("f64") {
            let cpu = tpuc_driver::compile_file(&f.file, &LowerOptions::default(), Emit::Ir).unwrap();
            let err = exec::check_target_support(&cpu.module, Target::Tpu).unwrap_err().to_string();
            assert!(err.contains("f64 is not supported on TPU"), "{err}");
        }
    }
}

#[test]
fn fused_programs_compile_for_tpu() {
    for f in all_fixtures().iter().filter(|f| f.name.starts_with("llama") || f.name.starts_with("gpt2_block") || f.name.starts_with("manual")) {
        let options = LowerOptions { target: Target::Tpu, ..Default::default() };
        let lowered = tpuc_driver::compile_file(&f.file, &options, Emit::StableHlo).unwrap();
        let text = lowered.stablehlo.as_deref().unwrap();
        if f.name.contains("train") {
            continue;
        }
        assert!(text.contains("stablehlo.composite \"tpuc."), "{}: no composite", f.name);
        let req = CompileRequest { target: Target::Tpu, topology: Some("v5e:2x2".into()), ..Default::default() };
        exec::compile_stablehlo(text, &req).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    }
}

#[test]
fn snapshots_after_the_default_pipelines() {
    let dir = fixtures_dir();
    for (file, target) in [
        ("mlp/core.pt2", Target::Cpu),
        ("mlp/export.pt2", Target::Cpu),
        ("gpt2_block/core.pt2", Target::Cpu),
        ("gpt2_block/export.pt2", Target::Cpu),
        ("gpt2_block/core.pt2", Target::Tpu),
        ("cnn/core.pt2", Target::Cpu),
        ("passes/llama_block.core.pt2", Target::Cpu),
        ("passes/manual_ops.core.pt2", Target::Cpu),
        ("passes/f64_mlp.core.pt2", Target::Tpu),
        ("passes/tokens.core.pt2", Target::Tpu),
    ] {
        let options = LowerOptions { target, ..Default::default() };
        let lowered = tpuc_driver::compile_file(&dir.join(file), &options, Emit::Ir).unwrap();
        let name = format!("{}_{}", file.replace(['/', '.'], "_"), target.name());
        insta::assert_snapshot!(name, tpuc_ir::print_module(&lowered.module));
    }
}

#[test]
fn the_cache_key_hashes_the_emitted_text_without_emitting_again() {
    let file = fixtures_dir().join("mlp/core.pt2");
    let lowered = tpuc_driver::compile_file(&file, &LowerOptions::default(), Emit::StableHlo).unwrap();
    let key = lowered.key_program().unwrap();
    assert!(matches!(key, std::borrow::Cow::Borrowed(_)), "emitted a second time for the key");
    assert_eq!(key.as_ref(), lowered.stablehlo.as_deref().unwrap());

    // With locations the text differs from the key's, which is then emitted apart, without them.
    let options = LowerOptions { debug_locations: true, ..Default::default() };
    let located = tpuc_driver::compile_file(&file, &options, Emit::StableHlo).unwrap();
    let text = located.stablehlo.as_deref().unwrap();
    let key2 = located.key_program().unwrap();
    assert!(text.contains("loc(") && !key2.contains("loc("), "{key2}");
    assert_eq!(key2, key, "locations change the key");
}
