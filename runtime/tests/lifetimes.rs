//! Every PJRT object the runtime creates is destroyed when its handle drops, in any drop
//! order, on success and error paths. (Its own test binary: the count is process-wide.)

mod common;

use common::*;
use tpuc_runtime::{
    live_pjrt_objects, tpu_topology_options, CompileOptions, ElementType, Program, Target,
};

#[test]
fn all_pjrt_objects_are_freed() {
    let cpu = plugin(Target::Cpu);
    assert_eq!(live_pjrt_objects(), 0);
    {
        let client = cpu.create_client().unwrap();
        let exe = client
            .compile(&Program::mlir(F32_MODULE), &CompileOptions::default())
            .unwrap();
        let a = client
            .buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3], None)
            .unwrap();
        let b = client
            .buffer_from_host(&f32_bytes(&[2.0; 6]), ElementType::F32, &[3, 2], None)
            .unwrap();
        let outputs = exe.execute(&[&a, &b, &a]).unwrap();
        // Read back before anything is freed: the results are there and right.
        let (want_d, _) = f32_expected(&[1.0; 6], &[2.0; 6], &[1.0; 6]);
        assert_eq!(f32s(&outputs[0].to_host().unwrap()), want_d);
        // Borrowed arguments and results handed over in place free their objects too.
        let data = f32_bytes(&[3.0; 6]);
        let borrowed = client
            .buffer_borrowing_host(&data, ElementType::F32, &[3, 2], None)
            .unwrap();
        let moved = tpuc_runtime::Buffer::into_host_all(exe.execute(&[&a, &borrowed, &a]).unwrap())
            .unwrap();
        drop(borrowed);
        assert_eq!(moved[1].len(), 8);
        drop(moved);
        let bytes = exe.executable().serialize().unwrap();
        let executable = exe.executable().clone();
        // Drop the client and the loaded executable first: the handles still alive keep what
        // they need alive.
        drop(client);
        drop(exe);
        assert!(live_pjrt_objects() > 0);
        let again = outputs[1].to_host().unwrap();
        assert_eq!(again.len(), 8);
        assert_eq!(executable.num_outputs().unwrap(), 2);
        drop(executable);
        // Error paths own nothing afterwards.
        let client = cpu.create_client().unwrap();
        let before = live_pjrt_objects();
        assert!(client
            .compile(&Program::mlir("not mlir"), &CompileOptions::default())
            .is_err());
        assert!(client.deserialize(b"not an executable").is_err());
        let loaded = client.deserialize(&bytes).unwrap();
        assert!(loaded.execute(&[&a]).is_err());
        drop(loaded);
        assert_eq!(live_pjrt_objects(), before);
    }
    assert_eq!(live_pjrt_objects(), 0, "PJRT objects left alive");

    std::env::set_var(
        "TPUC_TPU_LOG_DIR",
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("libtpu-logs"),
    );
    let tpu = plugin(Target::Tpu);
    {
        let topo = tpu
            .create_topology("v5e:2x2", &tpu_topology_options())
            .unwrap();
        let exe = topo
            .compile(&Program::mlir(F32_MODULE), &CompileOptions::default())
            .unwrap();
        drop(topo);
        assert!(!exe.serialize().unwrap().is_empty());
        assert!(tpu.create_client().is_err());
    }
    assert_eq!(live_pjrt_objects(), 0, "PJRT objects left alive");
}
