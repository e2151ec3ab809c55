//! Compile and run every reference fixture on the XLA CPU plugin and compare with the
//! PyTorch eager outputs recorded by tests/fixtures/make_fixtures.py; compile every fixture for
//! three TPU topologies with libtpu (no TPU needed). Real plugins: scripts/setup.sh installs
//! them into the project's venv, and these tests fail (not skip) when they are missing.
//!
//! Tolerances come from the manifest: f32 programs, rtol 1e-5 / atol 1e-6 for the MLP and
//! rtol 1e-4 / atol 1e-5 for the GPT-2 block and CNN, whose softmax, layer norm, convolution
//! and backward reductions sum hundreds of terms in a different order than PyTorch's kernels.

use tpuc_driver::exec::{self, CompileRequest, Runner, Target};
use tpuc_driver::tensor::{compare, HostTensor};
use tpuc_driver::{Emit, LowerOptions};

mod common;
use common::{fixtures_dir, read_manifest, Fixture};

fn fixtures() -> Vec<Fixture> {
    read_manifest(fixtures_dir())
}

fn lower(f: &Fixture) -> tpuc_driver::Lowered {
    let options = LowerOptions { debug_locations: true, ..Default::default() };
    tpuc_driver::compile_file(&f.file, &options, Emit::StableHlo).unwrap_or_else(|e| panic!("{}: {e}", f.name))
}

fn read_inputs(f: &Fixture) -> Vec<(String, HostTensor)> {
    f.inputs.iter().map(|p| (p.display().to_string(), HostTensor::read_npy(p).unwrap())).collect()
}

fn check_outputs(name: &str, got: &[HostTensor], f: &Fixture) {
    assert_eq!(got.len(), f.expected.len(), "{name}: number of outputs");
    for (i, (g, p)) in got.iter().zip(&f.expected).enumerate() {
        let want = HostTensor::read_npy(p).unwrap();
        let c = compare(g, &want, f.rtol, f.atol).unwrap_or_else(|e| panic!("{name} output {i}: {e}"));
        assert_eq!(
            c.mismatches, 0,
            "{name} output {i}: {} elements differ from eager (max abs {:e}, max rel {:e}, first {:?})",
            c.mismatches, c.max_abs_err, c.max_rel_err, c.first_mismatch
        );
    }
}

#[test]
fn every_fixture_matches_eager_on_the_cpu_plugin() {
    let all = fixtures();
    assert!(all.len() >= 12);
    for f in &all {
        let lowered = lower(f);
        let compiled = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &CompileRequest::default())
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert!(compiled.serialized.len() > 1000);
        let runner = Runner::new(&compiled, &lowered.module, &lowered.weights).unwrap();
        let (outputs, _) = runner.run(&read_inputs(f)).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        check_outputs(&f.name, &outputs, f);
        // Resident weights: a second run gives the same results.
        let (again, _) = runner.run(&read_inputs(f)).unwrap();
        assert_eq!(outputs, again, "{}: second run differs", f.name);
    }
}

#[test]
fn inlined_weights_give_the_same_results() {
    for f in fixtures().iter().filter(|f| f.name.ends_with(".export") || f.name.ends_with(".core")) {
        let options = LowerOptions { inline_weights: true, ..Default::default() };
        let lowered = tpuc_driver::compile_file(&f.file, &options, Emit::StableHlo).unwrap();
        let compiled = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &CompileRequest::default()).unwrap();
        let outputs = exec::run(&compiled, &lowered.module, &lowered.weights, &read_inputs(f)).unwrap();
        check_outputs(&f.name, &outputs, f);
    }
}

#[test]
fn every_fixture_compiles_for_tpu_topologies() {
    for f in fixtures() {
        let lowered = lower(&f);
        exec::check_target_support(&lowered.module, Target::Tpu).unwrap();
        for topology in ["v5e:2x2", "v6e:2x2", "v5p:2x2x1"] {
            let req = CompileRequest { target: Target::Tpu, topology: Some(topology.into()), ..Default::default() };
            let c = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &req)
                .unwrap_or_else(|e| panic!("{} on {topology}: {e}", f.name));
            let s = &c.summary;
            assert!(c.loaded.is_none(), "no TPU here: compile only");
            assert!(s.executable_bytes > 10_000, "{} on {topology}: {} bytes", f.name, s.executable_bytes);
            assert_eq!(s.platform, "tpu");
            let flops = s.cost.get("flops").copied().unwrap_or_else(|| panic!("{}: no flops figure", f.name));
            assert!(flops > 0.0 && flops.is_finite(), "{}: flops {flops}", f.name);
            if let Some(t) = s.cost.get("optimal_seconds") {
                assert!(*t > 0.0 && *t < 1.0, "{} on {topology}: optimal_seconds {t}", f.name);
            }
            let m = s.memory.as_ref().expect("libtpu reports memory stats");
            assert!(m.argument_bytes > 0 && m.output_bytes > 0, "{}: {m:?}", f.name);
        }
    }
}

#[test]
fn spmd_compile_over_four_tpu_devices() {
    let f = &fixtures()[0];
    let lowered = lower(f);
    let req = CompileRequest { target: Target::Tpu, topology: Some("v5e:2x2".into()), partitions: 4, replicas: 1, plugin: None };
    let c = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &req).unwrap();
    assert_eq!(c.summary.partitions, 4);
    assert!(c.summary.executable_bytes > 10_000);
}

#[test]
fn cpu_executables_round_trip_through_serialization() {
    let f = fixtures().into_iter().find(|f| f.name == "gpt2_block.core").unwrap();
    let lowered = lower(&f);
    let compiled = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &CompileRequest::default()).unwrap();
    let client = compiled.loaded.as_ref().unwrap().client().clone();
    let reloaded = client.deserialize(&compiled.serialized).unwrap();
    let again = exec::Compiled { summary: compiled.summary.clone(), serialized: compiled.serialized.clone(), loaded: Some(reloaded) };
    let outputs = exec::run(&again, &lowered.module, &lowered.weights, &read_inputs(&f)).unwrap();
    check_outputs(&f.name, &outputs, &f);
}

#[test]
fn wrong_inputs_name_the_argument_and_both_shapes() {
    let f = fixtures().into_iter().find(|f| f.name == "mlp.core").unwrap();
    let lowered = lower(&f);
    let compiled = exec::compile_stablehlo(lowered.stablehlo.as_deref().unwrap(), &CompileRequest::default()).unwrap();
    let runner = Runner::new(&compiled, &lowered.module, &lowered.weights).unwrap();
    let x = HostTensor::read_npy(&f.inputs[0]).unwrap();

    let err = runner.run(&[]).unwrap_err().to_string();
    assert!(err.contains("takes 1 input(s) (x: tensor<4x16xf32>), got 0"), "{err}");

    let mut wrong_shape = x.clone();
    wrong_shape.dims = vec![16, 4];
    let err = runner.run(&[("y.npy".into(), wrong_shape)]).unwrap_err().to_string();
    assert!(err.contains("input 0 (`x`) expects tensor<4x16xf32>, got tensor<16x4xf32> from y.npy"), "{err}");

    let wrong_dtype = HostTensor { dtype: tpuc_ir::DType::F64, dims: x.dims.clone(), bytes: vec![0; 4 * 16 * 8] };
    let err = runner.run(&[("z.npy".into(), wrong_dtype)]).unwrap_err().to_string();
    assert!(err.contains("expects tensor<4x16xf32>, got tensor<4x16xf64> from z.npy"), "{err}");
}

#[test]
fn f64_on_tpu_is_a_clear_error_naming_the_op() {
    let ir = r#"module {
  func @main(%0: tensor<4xf32> {kind = "input", name = "x"}) -> (tensor<4xf64> {kind = "output", name = "y"}) {
    %1 = convert %0 : tensor<4xf64> loc(#0)
    return %1
  }
}
#0 = loc("to_double", "torch.ops.aten._to_copy.default", "model.py:7 in forward")
"#;
    let m = tpuc_ir::parse_module(ir).unwrap();
    let err = exec::check_target_support(&m, Target::Tpu).unwrap_err().to_string();
    assert!(err.contains("f64 is not supported on TPU"), "{err}");
    assert!(err.contains("`convert` from node `to_double`"), "{err}");
    assert!(err.contains("model.py:7"), "{err}");
    exec::check_target_support(&m, Target::Cpu).unwrap();
}

#[test]
fn a_plugin_compile_error_carries_the_plugins_message() {
    let bad = "module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<8xf32>) {\n    return %arg0 : tensor<4xf32>\n  }\n}\n";
    let err = match exec::compile_stablehlo(bad, &CompileRequest::default()) {
        Ok(_) => panic!("should not compile"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("PJRT_Client_Compile"), "{err}");
    assert!(err.contains("0.115") || err.contains("API"), "{err}");
}
