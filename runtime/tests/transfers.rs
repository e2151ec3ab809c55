//! Transfer counts and host aliasing on the CPU plugin. One test per process state: host
//! aliasing is process-wide, so this file holds a single test.

mod common;

use common::*;
use tpuc_runtime::{set_host_aliasing, transfers, Buffer, CompileOptions, ElementType, Program, Target};

const ADD: &str = r#"
func.func public @main(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {
  %0 = stablehlo.add %a, %b : tensor<64xf32>
  return %0 : tensor<64xf32>
}
"#;

#[test]
fn transfers_are_counted_and_host_aliasing_off_copies_every_array() {
    let client = plugin(Target::Cpu).create_client().unwrap();
    let exe = client.compile(&Program::mlir(ADD), &CompileOptions::default()).unwrap();
    // Host data aligned as the CPU plugin needs to read it in place.
    let mut storage = vec![Line([0; 64]); 4];
    let data: &mut [u8] = as_bytes(&mut storage);
    data.copy_from_slice(&f32_bytes(&[1.5; 64]));
    let data: &[u8] = data;

    // Host aliasing on (the default): a borrowed argument and a result handed over in place
    // move nothing.
    let t0 = transfers();
    let a = client.buffer_borrowing_host(data, ElementType::F32, &[64], None).unwrap();
    let out = exe.execute(&[&a, &a]).unwrap();
    let host = Buffer::into_host_all(out).unwrap();
    assert!(host[0].in_place());
    assert_eq!(f32s(&host[0])[0], 3.0);
    drop(a);
    let moved = transfers().since(&t0);
    assert_eq!((moved.h2d_bytes, moved.d2h_bytes), (0, 0), "{moved:?}");

    // Off: the CPU plugin behaves as an accelerator: every array crosses, and is counted.
    set_host_aliasing(false);
    let t1 = transfers();
    let a = client.buffer_borrowing_host(data, ElementType::F32, &[64], None).unwrap();
    let b = client.buffer_from_host(data, ElementType::F32, &[64], None).unwrap();
    let out = exe.execute(&[&a, &b]).unwrap();
    let host = Buffer::into_host_all(out).unwrap();
    assert!(!host[0].in_place());
    assert_eq!(f32s(&host[0])[0], 3.0);
    let again = b.to_host().unwrap();
    assert_eq!(again.len(), 256);
    let moved = transfers().since(&t1);
    assert_eq!((moved.h2d_bytes, moved.h2d_arrays), (512, 2), "{moved:?}");
    assert_eq!((moved.d2h_bytes, moved.d2h_arrays), (512, 2), "{moved:?}");
    set_host_aliasing(true);
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

fn as_bytes(v: &mut [Line]) -> &mut [u8] {
    let len = v.len() * 64;
    // SAFETY: Line is 64 plain bytes without padding; the length is exact.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
}
