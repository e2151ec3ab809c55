//! Structure-aware fuzzing of the ATen lowerings: takes a valid program (fuzz/seeds), then
//! lets the fuzz input retarget nodes to any supported op and replace their arguments and
//! recorded sizes with hostile values. Import must return an error or a module that
//! round-trips through the IR text and verifies.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run import_edits`
//!
//! A crash it finds is kept as the smallest program that shows it, in
//! frontend-fx/tests/data/regressions (listed in frontend-fx/tests/robustness.rs); the
//! schema-shaped sweep there calls every lowering with hostile arguments of the right kinds.
#![no_main]

mod common;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::OnceLock;

const SEEDS: [&[u8]; 4] = [
    include_bytes!("../seeds/mlp_dynamic_core.json"),
    include_bytes!("../seeds/cnn_core.json"),
    include_bytes!("../seeds/gpt2_block_train_fwd.json"),
    include_bytes!("../seeds/cnn_train_bwd.json"),
];

fn seeds() -> &'static Vec<Value> {
    static S: OnceLock<Vec<Value>> = OnceLock::new();
    S.get_or_init(|| SEEDS.iter().map(|s| serde_json::from_slice(s).expect("seed")).collect())
}

fn targets() -> &'static Vec<String> {
    static T: OnceLock<Vec<String>> = OnceLock::new();
    T.get_or_init(tpuc_frontend_fx::supported_targets)
}

fn int(u: &mut Unstructured) -> Result<i64> {
    const SPECIAL: [i64; 12] = [-1, 0, 1, 2, 3, -2, 8, -100, 1 << 20, 1 << 40, i64::MAX, i64::MIN];
    Ok(if u.ratio(3, 4)? { SPECIAL[u.choose_index(SPECIAL.len())?] } else { u.arbitrary()? })
}

fn value(u: &mut Unstructured, names: &[String]) -> Result<Value> {
    Ok(match u.int_in_range(0..=10)? {
        0 => json!({ "as_int": int(u)? }),
        1 => {
            let n = u.int_in_range(0..=5)?;
            let v: Vec<i64> = (0..n).map(|_| int(u)).collect::<Result<_>>()?;
            json!({ "as_ints": v })
        }
        2 => json!({ "as_float": u.arbitrary::<f64>()? }),
        3 => {
            let f = ["NaN", "Infinity", "-Infinity"][u.choose_index(3)?];
            json!({ "as_float": f })
        }
        4 => json!({ "as_bool": u.arbitrary::<bool>()? }),
        5 => json!({ "as_none": true }),
        6 => json!({ "as_tensor": { "name": names[u.choose_index(names.len())?] } }),
        7 => {
            let n = u.int_in_range(0..=3)?;
            let v: Vec<Value> = (0..n).map(|_| Ok(json!({ "name": names[u.choose_index(names.len())?] }))).collect::<Result<_>>()?;
            json!({ "as_tensors": v })
        }
        8 => json!({ "as_scalar_type": u.int_in_range(0..=36)? }),
        9 => {
            let s = ["tanh", "none", "floor", "trunc", "same", "valid", "reflect", "mean", "sum"][u.choose_index(9)?];
            json!({ "as_string": s })
        }
        _ => json!({ "as_sym_int": { "as_int": int(u)? } }),
    })
}

fn edit(u: &mut Unstructured, v: &mut Value) -> Result<()> {
    let names: Vec<String> = v["graph_module"]["graph"]["tensor_values"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    if names.is_empty() {
        return Ok(());
    }
    let edits = u.int_in_range(1..=4)?;
    for _ in 0..edits {
        match u.int_in_range(0..=3)? {
            0 | 1 => {
                let Some(nodes) = v["graph_module"]["graph"]["nodes"].as_array_mut() else { return Ok(()) };
                if nodes.is_empty() {
                    return Ok(());
                }
                let n = u.choose_index(nodes.len())?;
                if u.ratio(1, 2)? {
                    let t = &targets()[u.choose_index(targets().len())?];
                    nodes[n]["target"] = Value::String(t.clone());
                }
                if let Some(inputs) = nodes[n]["inputs"].as_array_mut() {
                    if !inputs.is_empty() {
                        let k = u.choose_index(inputs.len())?;
                        if u.ratio(1, 5)? {
                            inputs.remove(k);
                        } else {
                            inputs[k]["arg"] = value(u, &names)?;
                        }
                    }
                }
            }
            2 => {
                // change a recorded size
                let name = &names[u.choose_index(names.len())?];
                if let Some(sizes) = v["graph_module"]["graph"]["tensor_values"][name]["sizes"].as_array_mut() {
                    if !sizes.is_empty() {
                        let k = u.choose_index(sizes.len())?;
                        sizes[k] = json!({ "as_int": int(u)? });
                    }
                }
            }
            _ => {
                // change a dtype
                let name = &names[u.choose_index(names.len())?];
                v["graph_module"]["graph"]["tensor_values"][name]["dtype"] = json!(u.int_in_range(0..=36)?);
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(i) = u.choose_index(SEEDS.len()) else { return };
    let mut v = seeds()[i].clone();
    if edit(&mut u, &mut v).is_err() {
        return;
    }
    let Ok(bytes) = serde_json::to_vec(&v) else { return };
    if let Ok(imp) = tpuc_frontend_fx::import_bytes(bytes) {
        common::check_text_roundtrip(&imp.module);
    }
});
