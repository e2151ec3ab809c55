//! The CPU plugin end to end: load, client, compile, execute, serialize, errors.

mod common;

use std::sync::Arc;

use common::*;
use tpuc_runtime::{
    Availability, Client, CompileOptions, ElementType, Error, LoadedExecutable, Plugin, Program,
    Target, SUPPORTED_API,
};

fn client() -> Client {
    plugin(Target::Cpu)
        .create_client()
        .expect("create CPU client")
}

fn compile(client: &Client, module: &str) -> LoadedExecutable {
    client
        .compile(&Program::mlir(module), &CompileOptions::default())
        .expect("compile")
}

const A: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const B: [f32; 6] = [1.0, -1.0, 2.0, 0.5, -3.0, 4.0];
const C: [f32; 6] = [10.0, 20.0, 30.0, -1.0, -2.0, -3.0];

fn run_f32(client: &Client, exe: &LoadedExecutable) -> (Vec<f32>, Vec<f32>) {
    let a = client
        .buffer_from_host(&f32_bytes(&A), ElementType::F32, &[2, 3], None)
        .unwrap();
    let b = client
        .buffer_from_host(&f32_bytes(&B), ElementType::F32, &[3, 2], None)
        .unwrap();
    let c = client
        .buffer_from_host(&f32_bytes(&C), ElementType::F32, &[2, 3], None)
        .unwrap();
    let out = exe.execute(&[&a, &b, &c]).expect("execute");
    assert_eq!(out.len(), 2);
    let d_shape = out[0].shape().unwrap();
    assert_eq!(
        (d_shape.element_type, d_shape.dims.clone()),
        (Ok(ElementType::F32), vec![2, 2])
    );
    assert_eq!(out[1].shape().unwrap().dims, vec![2]);
    (
        f32s(&out[0].to_host().unwrap()),
        f32s(&out[1].to_host().unwrap()),
    )
}

#[test]
fn plugin_loads_once_with_version_and_attributes() {
    let p = plugin(Target::Cpu);
    assert!(p.api_version() >= SUPPORTED_API, "{:?}", p.api_version());
    let again = Plugin::load(p.path()).unwrap();
    assert_eq!(again.path(), p.path());
    eprintln!("CPU plugin {} API {}", p.path().display(), p.api_version());
    for a in p.attributes() {
        eprintln!("  attribute {a}");
    }
}

#[test]
fn client_reports_platform_and_devices() {
    let client = client();
    assert_eq!(client.platform_name().unwrap(), "cpu");
    let version = client.platform_version().unwrap();
    let devices = client.devices().unwrap();
    assert!(!devices.is_empty());
    for (i, d) in devices.iter().enumerate() {
        eprintln!(
            "device {i}: id {} kind {:?} hw {} {:?} ({version})",
            d.id(),
            d.kind(),
            d.local_hardware_id(),
            d.description().display
        );
        assert!(!d.kind().is_empty());
    }
    let ids: std::collections::BTreeSet<_> = devices.iter().map(|d| d.id()).collect();
    assert_eq!(ids.len(), devices.len(), "device ids are unique");
}

#[test]
fn f32_add_dot_reduce_is_exact() {
    let client = client();
    let exe = compile(&client, F32_MODULE);
    assert_eq!(exe.devices().len(), 1);
    let (d, r) = run_f32(&client, &exe);
    let (want_d, want_r) = f32_expected(&A, &B, &C);
    assert_eq!(d, want_d);
    assert_eq!(r, want_r);
}

#[test]
fn i64_and_bool_are_exact() {
    let client = client();
    let exe = compile(&client, I64_BOOL_MODULE);
    let x = [3_000_000_000i64, -7, 11, 1 << 40];
    let y = [3i64, 5, 10, 1 << 10];
    let b = [false, false, true, false];
    let xb = client
        .buffer_from_host(&i64_bytes(&x), ElementType::I64, &[4], None)
        .unwrap();
    let yb = client
        .buffer_from_host(&i64_bytes(&y), ElementType::I64, &[4], None)
        .unwrap();
    let bb = client
        .buffer_from_host(&bool_bytes(&b), ElementType::Bool, &[4], None)
        .unwrap();
    let out = exe.execute(&[&xb, &yb, &bb]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[1].shape().unwrap().element_type, Ok(ElementType::Bool));
    assert_eq!(out[2].shape().unwrap().dims, Vec::<i64>::new());

    let m: Vec<i64> = x.iter().zip(&y).map(|(a, b)| a.wrapping_mul(*b)).collect();
    let and: Vec<bool> = m.iter().zip(&b).map(|(v, b)| *v > 100 && !b).collect();
    let sel: Vec<i64> = (0..4).map(|i| if and[i] { m[i] } else { x[i] }).collect();
    let sum = sel.iter().fold(0i64, |acc, v| acc.wrapping_add(*v));
    assert_eq!(i64s(&out[0].to_host().unwrap()), sel);
    assert_eq!(out[1].to_host().unwrap(), bool_bytes(&and));
    assert_eq!(i64s(&out[2].to_host().unwrap()), vec![sum]);
}

#[test]
fn serialize_deserialize_runs_the_same() {
    let client = client();
    let exe = compile(&client, F32_MODULE);
    let first = run_f32(&client, &exe);
    let bytes = exe.executable().serialize().unwrap();
    assert!(!bytes.is_empty());
    drop(exe);
    let loaded = client.deserialize(&bytes).expect("deserialize and load");
    assert_eq!(loaded.executable().num_outputs().unwrap(), 2);
    assert_eq!(run_f32(&client, &loaded), first);
}

#[test]
fn executable_metadata() {
    let client = client();
    let exe = compile(&client, F32_MODULE);
    let e = exe.executable();
    eprintln!("name {:?}", e.name().unwrap());
    assert_eq!(e.num_outputs().unwrap(), 2);
    assert_eq!(e.num_replicas().unwrap(), 1);
    assert_eq!(e.num_partitions().unwrap(), 1);
    match e.output_shapes() {
        Availability::Available(shapes) => {
            let printed: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
            assert_eq!(printed, ["tensor<2x2xf32>", "tensor<2xf32>"]);
        }
        Availability::NotAvailable(why) => eprintln!("output shapes: not available: {why}"),
    }
    // Optional queries never fail; print what this plugin offers.
    match e.cost_analysis() {
        Availability::Available(props) => eprintln!("cost analysis: {props:?}"),
        Availability::NotAvailable(why) => eprintln!("cost analysis: not available: {why}"),
    }
    eprintln!("memory stats: {:?}", e.memory_stats());
    eprintln!("fingerprint: {:?}", e.fingerprint());
}

#[test]
fn bad_module_reports_the_plugins_message() {
    let client = client();
    let bad =
        "func.func @main(%x: tensor<2xf32>) -> tensor<3xf32> {\n  return %x : tensor<2xf32>\n}";
    let err = client
        .compile(&Program::mlir(bad), &CompileOptions::default())
        .unwrap_err();
    eprintln!("{err}");
    match &err {
        Error::Plugin {
            function,
            message,
            plugin,
            ..
        } => {
            assert_eq!(*function, "PJRT_Client_Compile");
            assert!(!message.is_empty());
            assert_eq!(
                plugin.as_path(),
                client.plugin().path(),
                "the error names the plugin file"
            );
        }
        other => panic!("expected a plugin error, got {other:?}"),
    }
    let garbage = client
        .compile(
            &Program::mlir("this is not MLIR"),
            &CompileOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(garbage, Error::Plugin { .. }), "{garbage:?}");
}

#[test]
fn wrong_arguments_are_errors_not_crashes() {
    let client = client();
    let exe = compile(&client, F32_MODULE);
    let a = client
        .buffer_from_host(&f32_bytes(&A), ElementType::F32, &[2, 3], None)
        .unwrap();
    let err = exe.execute(&[&a]).unwrap_err();
    eprintln!("{err}");
    assert!(
        matches!(
            err,
            Error::Plugin {
                function: "PJRT_LoadedExecutable_Execute",
                ..
            }
        ),
        "{err:?}"
    );

    let short = client
        .buffer_from_host(&[0u8; 7], ElementType::F32, &[2], None)
        .unwrap_err();
    assert!(matches!(short, Error::InvalidArgument(_)), "{short:?}");
    let negative = client
        .buffer_from_host(&[], ElementType::F32, &[-1], None)
        .unwrap_err();
    assert!(
        matches!(negative, Error::InvalidArgument(_)),
        "{negative:?}"
    );
}

#[test]
fn buffers_round_trip_every_byte_sized_type() {
    let client = client();
    for t in ElementType::all() {
        let n = 6 * t.size_in_bytes();
        // Bytes valid for every type (0/1 for bool).
        let data: Vec<u8> = (0..n)
            .map(|i| {
                if t == ElementType::Bool {
                    (i % 2) as u8
                } else {
                    (i * 7 % 13) as u8
                }
            })
            .collect();
        match client.buffer_from_host(&data, t, &[2, 3], None) {
            Ok(buf) => {
                assert_eq!(buf.shape().unwrap().element_type, Ok(t));
                assert_eq!(buf.to_host().unwrap(), data, "{t}");
            }
            // A plugin may not support every exotic type; it must say so, not crash.
            Err(e) => eprintln!("{t}: {e}"),
        }
    }
}

#[test]
fn handles_are_shared_across_threads() {
    let client = client();
    let exe = Arc::new(compile(&client, F32_MODULE));
    let expected = f32_expected(&A, &B, &C);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (client, exe) = (client.clone(), Arc::clone(&exe));
            std::thread::spawn(move || (0..5).map(|_| run_f32(&client, &exe)).collect::<Vec<_>>())
        })
        .collect();
    for t in threads {
        for got in t.join().unwrap() {
            assert_eq!(got, expected);
        }
    }
}

#[test]
fn borrowed_inputs_and_in_place_outputs_match_the_copying_path() {
    let client = client();
    let exe = compile(&client, F32_MODULE);
    let (a, b, c) = (f32_bytes(&A), f32_bytes(&B), f32_bytes(&C));
    // Unaligned on purpose as well: the plugin must copy instead of aliasing then.
    let mut shifted = vec![0u8; b.len() + 1];
    shifted[1..].copy_from_slice(&b);
    let expected = f32_expected(&A, &B, &C);
    for b_bytes in [&b[..], &shifted[1..]] {
        let ab = client
            .buffer_borrowing_host(&a, ElementType::F32, &[2, 3], None)
            .unwrap();
        let bb = client
            .buffer_borrowing_host(b_bytes, ElementType::F32, &[3, 2], None)
            .unwrap();
        let cb = client
            .buffer_borrowing_host(&c, ElementType::F32, &[2, 3], None)
            .unwrap();
        let out = exe.execute(&[&ab, &bb, &cb]).unwrap();
        drop((ab, bb, cb));
        let mut host = tpuc_runtime::Buffer::into_host_all(out).unwrap();
        // The CPU plugin keeps results in host memory: they are handed over, not copied.
        assert!(host.iter().all(|h| h.in_place()), "{host:?}");
        assert_eq!((f32s(&host[0]), f32s(&host[1])), expected);
        // The memory is ours: writable, and still there after more executions.
        host[0].as_mut_slice()[..4].copy_from_slice(&7.0f32.to_le_bytes());
        let again = run_f32(&client, &exe);
        assert_eq!(again, expected);
        assert_eq!(f32s(&host[0])[0], 7.0);
        assert_eq!(f32s(&host[1]), expected.1);
    }
}

/// One program on every device at once: 4 replicas of an all-reduce, each device with its own
/// argument, each getting the sum; a wrong number of argument lists is an error.
#[test]
fn execute_partitioned_runs_every_device() {
    const SUM: &str = r#"module @sum attributes {mhlo.num_replicas = 4 : i32} {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}"#;
    let client = plugin(Target::Cpu)
        .create_client_with_options(&[tpuc_runtime::NamedValue::int("cpu_device_count", 4)])
        .expect("client with 4 devices");
    let options = CompileOptions { num_replicas: 4, ..CompileOptions::default() };
    let exe = client.compile(&Program::mlir(SUM), &options).expect("compile 4 replicas");
    assert_eq!(exe.devices().len(), 4);
    let args: Vec<_> = exe
        .devices()
        .iter()
        .enumerate()
        .map(|(d, dev)| {
            let v = [d as f32, 10.0 * d as f32];
            client.buffer_from_host(&f32_bytes(&v), ElementType::F32, &[2], Some(dev)).unwrap()
        })
        .collect();
    let lists: Vec<Vec<_>> = args.iter().map(|b| vec![b]).collect();
    let outs = exe.execute_partitioned(&lists).expect("execute on 4 devices");
    assert_eq!(outs.len(), 4);
    for o in &outs {
        assert_eq!(f32s(&o[0].to_host().unwrap()), vec![6.0, 60.0]);
    }
    let err = exe.execute_partitioned(&lists[..2]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}
