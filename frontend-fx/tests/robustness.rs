//! Hostile input: truncated, bit-flipped and spliced archives and JSON must give errors, never
//! panics, and what does import must round-trip through the IR text.

mod common;

use proptest::prelude::*;
use std::sync::OnceLock;

fn archive() -> &'static [u8] {
    static A: OnceLock<Vec<u8>> = OnceLock::new();
    A.get_or_init(|| std::fs::read(common::fixtures_dir().join("mlp/core.pt2")).unwrap())
}

fn dynamic_json() -> &'static [u8] {
    static A: OnceLock<Vec<u8>> = OnceLock::new();
    A.get_or_init(|| {
        use std::io::Read;
        let f = std::fs::File::open(common::fixtures_dir().join("mlp/dynamic_core.pt2")).unwrap();
        let mut z = zip::ZipArchive::new(f).unwrap();
        let name = z.file_names().find(|n| n.ends_with("models/model.json")).unwrap().to_string();
        let mut out = Vec::new();
        z.by_name(&name).unwrap().read_to_end(&mut out).unwrap();
        out
    })
}

/// Imports and, on success, checks the module survives a text round trip (the import itself
/// refuses modules that do not verify, so verifying here again could not fail).
fn import(bytes: Vec<u8>) {
    if let Ok(imp) = tpuc_frontend_fx::import_bytes(bytes) {
        common::check_text_roundtrip(&imp.module);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn truncated_archives(len in 0usize..12_200) {
        let a = archive();
        import(a[..len.min(a.len())].to_vec());
    }

    #[test]
    fn flipped_archive_bytes(flips in proptest::collection::vec((0usize..12_200, 1u8..=255), 1..8)) {
        let mut a = archive().to_vec();
        let n = a.len();
        for (i, x) in flips {
            a[i % n] ^= x;
        }
        import(a);
    }

    #[test]
    fn flipped_json_bytes(flips in proptest::collection::vec((0usize..100_000, 1u8..=255), 1..4)) {
        let mut a = dynamic_json().to_vec();
        let n = a.len();
        for (i, x) in flips {
            a[i % n] ^= x;
        }
        import(a);
    }

    #[test]
    fn json_digit_edits(edits in proptest::collection::vec((0usize..100_000, prop::sample::select(vec!["-1", "0", "9223372036854775807", "-9223372036854775808", "1e308", "99999999999999999999", "\"x\"", "null", "[]", "{}"])), 1..4)) {
        // replace numbers in the JSON with hostile values
        let text = String::from_utf8(dynamic_json().to_vec()).unwrap();
        let mut out = text.clone();
        for (i, rep) in edits {
            let digits: Vec<usize> = out.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
            if digits.is_empty() { break; }
            let start = digits[i % digits.len()];
            let end = out[start..].find(|c: char| !c.is_ascii_digit()).map_or(out.len(), |e| start + e);
            out.replace_range(start..end, rep);
        }
        import(out.into_bytes());
    }
}

fn gpt2_json() -> &'static serde_json::Value {
    static A: OnceLock<serde_json::Value> = OnceLock::new();
    A.get_or_init(|| {
        use std::io::Read;
        let f = std::fs::File::open(common::fixtures_dir().join("gpt2_block/train_fwd.pt2")).unwrap();
        let mut z = zip::ZipArchive::new(f).unwrap();
        let name = z.file_names().find(|n| n.ends_with("models/model.json")).unwrap().to_string();
        let mut out = Vec::new();
        z.by_name(&name).unwrap().read_to_end(&mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    })
}

fn targets() -> &'static Vec<String> {
    static T: OnceLock<Vec<String>> = OnceLock::new();
    T.get_or_init(tpuc_frontend_fx::supported_targets)
}

/// A hostile argument value.
fn arg_strategy() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    let ints = prop::sample::select(vec![-1i64, 0, 1, 2, 3, -2, 7, 1 << 40, i64::MAX, i64::MIN, -100]);
    prop_oneof![
        ints.clone().prop_map(|i| json!({ "as_int": i })),
        proptest::collection::vec(ints.clone(), 0..5).prop_map(|v| json!({ "as_ints": v })),
        prop::sample::select(vec![0.0f64, -1.5, 1e300, 0.5]).prop_map(|f| json!({ "as_float": f })),
        prop::sample::select(vec!["NaN", "Infinity", "-Infinity"]).prop_map(|f| json!({ "as_float": f })),
        any::<bool>().prop_map(|b| json!({ "as_bool": b })),
        Just(json!({ "as_none": true })),
        prop::sample::select(vec!["primals_3", "view", "permute_1", "where", "full", "arange", "nope"]).prop_map(|n| json!({ "as_tensor": { "name": n } })),
        proptest::collection::vec(prop::sample::select(vec!["primals_3", "view", "le"]), 0..3)
            .prop_map(|v| json!({ "as_tensors": v.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>() })),
        prop::sample::select(vec![0i64, 5, 7, 12, 99]).prop_map(|d| json!({ "as_scalar_type": d })),
        prop::sample::select(vec!["tanh", "none", "floor", "same", "reflect"]).prop_map(|s| json!({ "as_string": s })),
        prop::sample::select(vec![-1i64, 0, 4]).prop_map(|i| json!({ "as_sym_int": { "as_int": i } })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any lowering, given another node's arguments (possibly edited), errors or succeeds.
    #[test]
    fn any_lowering_on_foreign_arguments(
        node in 0usize..200,
        target in 0usize..1000,
        edits in proptest::collection::vec((0usize..8, arg_strategy()), 0..4),
    ) {
        let mut v = gpt2_json().clone();
        let nodes = v["graph_module"]["graph"]["nodes"].as_array_mut().unwrap();
        let n = node % nodes.len();
        let t = &targets()[target % targets().len()];
        nodes[n]["target"] = serde_json::Value::String(t.clone());
        for (i, a) in edits {
            if let Some(inputs) = nodes[n]["inputs"].as_array_mut() {
                if !inputs.is_empty() {
                    let k = i % inputs.len();
                    inputs[k]["arg"] = a;
                }
            }
        }
        import(serde_json::to_vec(&v).unwrap());
    }
}
