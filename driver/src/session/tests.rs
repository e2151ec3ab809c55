//! Tests of compiling and running in process: resident and aliased weights, in-place cuts,
//! and the nodes errors name.

use super::bucketed::valid_part_is_prefix;
use super::*;

const PROGRAM: &str = r#"{"graph_module": {"graph": {
        "inputs": [{"as_tensor": {"name": "w"}}, {"as_tensor": {"name": "x"}}],
        "nodes": [{"target": "torch.ops.aten.add.Tensor", "name": "add",
                   "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "x"}}, "kind": 1},
                              {"name": "other", "arg": {"as_tensor": {"name": "w"}}, "kind": 1}],
                   "outputs": [{"as_tensor": {"name": "add"}}],
                   "metadata": {"stack_trace": "File \"model.py\", line 3, in forward\n    x + w"}}],
        "outputs": [{"as_tensor": {"name": "add"}}, {"as_none": true}],
        "tensor_values": {
            "w": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "x": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "add": {"dtype": 7, "sizes": [{"as_int": 2}]}}},
        "signature": {
            "input_specs": [{"parameter": {"arg": {"name": "w"}, "parameter_name": "w"}},
                            {"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
            "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "add"}}}},
                             {"user_output": {"arg": {"as_none": true}}}]}}}"#;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Fails the test, as the runtime's tests do, when the CPU plugin cannot be found.
fn require_cpu_plugin() {
    if let Err(e) = tpuc_runtime::discover().plugin(Target::Cpu) {
        panic!("{e}\nThe session tests need the CPU PJRT plugin in the project's .venv: run scripts/setup.sh");
    }
}

#[test]
fn compiles_and_runs_with_resident_weight() {
    require_cpu_plugin();
    let mut p = compile(PROGRAM.as_bytes().to_vec(), &SessionOptions::default()).unwrap();
    assert_eq!(p.inputs, vec![InputSlot::Arg(0), InputSlot::Arg(1)]);
    assert_eq!(p.outputs[0], OutputSlot::Result(0));
    assert_eq!(p.user_args(), &[1]);
    let x = f32s(&[1.0, 2.0]);
    let err = p.run(&[&x]).unwrap_err().to_string();
    assert!(err.contains("parameter `w` has no value"), "{err}");
    p.set_weight(0, &f32s(&[10.0, 20.0])).unwrap();
    let (out, _) = p.run(&[&x]).unwrap();
    assert!(out[0].in_place(), "CPU results are handed over, not copied");
    assert_eq!(&out[0][..], &f32s(&[11.0, 22.0])[..]);
    p.set_weight(0, &f32s(&[0.5, 0.5])).unwrap();
    assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[1.5, 2.5])[..]);
    // The earlier result is untouched by later runs.
    assert_eq!(&out[0][..], &f32s(&[11.0, 22.0])[..]);
    let err = p.run(&[&x[..4]]).unwrap_err().to_string();
    assert!(err.contains("needs 8 bytes, got 4"), "{err}");
    assert!(p.set_weight(1, &x).is_err());
}

#[test]
fn an_aliased_weight_is_read_in_place_at_every_run() {
    require_cpu_plugin();
    let mut p = compile(PROGRAM.as_bytes().to_vec(), &SessionOptions::default()).unwrap();
    // 64-byte aligned host memory, as torch's allocator gives.
    #[repr(align(64))]
    struct Aligned([u8; 64]);
    let mut w = Box::new(Aligned([0; 64]));
    let bytes: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(w.0.as_mut_ptr(), 8) };
    bytes.copy_from_slice(&f32s(&[10.0, 20.0]));
    let x = f32s(&[1.0, 2.0]);
    // SAFETY: `w` outlives `p`'s runs below and is not written during them.
    let aliased = unsafe { p.alias_weight(0, bytes) }.unwrap();
    assert!(aliased, "the CPU plugin reads aligned host memory in place");
    assert_eq!(p.weight_address(0), Some(bytes.as_ptr() as usize));
    assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[11.0, 22.0])[..]);
    // A write between runs, with no call on the program, is what the next run sees.
    bytes.copy_from_slice(&f32s(&[0.5, 0.5]));
    assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[1.5, 2.5])[..]);
    // A copy replaces the alias.
    p.set_weight(0, &f32s(&[1.0, 1.0])).unwrap();
    assert_eq!(p.weight_address(0), None);
    assert_eq!(&p.run(&[&x]).unwrap().0[0][..], &f32s(&[2.0, 3.0])[..]);
    // Memory the plugin would have to copy (here: unaligned) is refused, not snapshotted.
    let odd = unsafe { std::slice::from_raw_parts(w.0.as_ptr().add(1), 8) };
    assert!(!unsafe { p.alias_weight(0, odd) }.unwrap());
    assert_eq!(p.weight_address(0), None);
    drop(p);
}

#[test]
fn a_cut_is_in_place_only_when_the_valid_part_leads_the_buffer() {
    assert!(valid_part_is_prefix(&[(1, 1), (8, 5), (64, 64)])); // [1, n, d]: batch-1 decoding
    assert!(valid_part_is_prefix(&[(8, 3), (4, 4)])); // padded leading dim
    assert!(!valid_part_is_prefix(&[(4, 4), (8, 5), (64, 64)])); // [4, n, d]: rows interleave
    assert!(!valid_part_is_prefix(&[(8, 5), (4, 2)])); // two cut factors
    assert!(valid_part_is_prefix(&[(4, 4)]));
}

#[test]
fn unsupported_op_names_node_and_line() {
    let bad = PROGRAM.replace("torch.ops.aten.add.Tensor", "torch.ops.aten.frobnicate.default");
    let err = match compile(bad.into_bytes(), &SessionOptions::default()) {
        Err(e) => e,
        Ok(_) => panic!("compiled an unknown op"),
    };
    assert_eq!(error_kind(&err), "unsupported_op");
    let at = error_node(&err).unwrap();
    assert_eq!(at.node, "add");
    assert_eq!(at.source.as_deref(), Some("model.py:3 in forward"));
    let all = error_nodes(&err);
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].kind, all[0].at.node.as_str()), ("unsupported_op", "add"));
}

#[test]
fn every_failed_node_comes_back_from_one_compile() {
    // add as an unknown op, then a second node using add's (stood-in) result with
    // arguments its lowering rejects
    let second = r#"{"target": "torch.ops.aten.glu.default", "name": "glu",
                   "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "add"}}, "kind": 1},
                              {"name": "dim", "arg": {"as_int": 5}, "kind": 1}],
                   "outputs": [{"as_tensor": {"name": "glu"}}],
                   "metadata": {"stack_trace": "File \"model.py\", line 4, in forward\n    glu(y)"}}],"#;
    let bad = PROGRAM
        .replace("torch.ops.aten.add.Tensor", "torch.ops.aten.frobnicate.default")
        .replacen("}}],\n        \"outputs\"", &format!("}}}},\n{second}\n        \"outputs\""), 1)
        .replace(r#""add": {"dtype": 7, "sizes": [{"as_int": 2}]}}},"#, r#""add": {"dtype": 7, "sizes": [{"as_int": 2}]},
            "glu": {"dtype": 7, "sizes": [{"as_int": 1}]}}},"#)
        .replace(r#"{"user_output": {"arg": {"as_none": true}}}"#, r#"{"user_output": {"arg": {"as_tensor": {"name": "glu"}}}}"#);
    let err = match compile(bad.into_bytes(), &SessionOptions::default()) {
        Err(e) => e,
        Ok(_) => panic!("compiled an unknown op"),
    };
    assert_eq!(error_kind(&err), "unsupported_op");
    assert_eq!(error_node(&err).unwrap().node, "add");
    let all: Vec<(&str, String)> = error_nodes(&err).iter().map(|f| (f.kind, f.at.node.clone())).collect();
    assert_eq!(all, [("unsupported_op", "add".to_string()), ("op", "glu".to_string())], "{err}");
    let msg = err.to_string();
    assert!(msg.contains("\n  also: op `torch.ops.aten.glu.default` at node `glu` (model.py:4 in forward)"), "{msg}");
}
