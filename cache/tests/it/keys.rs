//! Key properties: every component changes the key; display fields do not.

use proptest::prelude::*;
use tpuc_cache::{Digest, KeyComponents};

use crate::support::kc;

fn arb_components() -> impl Strategy<Value = KeyComponents> {
    (
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec(any::<u8>(), 0..32),
        "[a-z]{0,6}",
        "[a-z0-9:x]{0,8}",
        (
            "[a-z]{0,5}",
            "[a-z0-9.]{0,8}",
            "[0-9.]{0,6}",
            "[0-9a-f]{0,16}",
        ),
        "[a-z0-9. ]{0,10}",
    )
        .prop_map(|(prog, opts, target, topo, (pn, pv, api, fh), tool)| {
            let mut k = kc("p");
            k.program = Digest::of(&prog);
            k.compile_options.canonical = opts;
            k.target = target;
            k.topology = topo;
            k.plugin.platform_name = pn;
            k.plugin.platform_version = pv;
            k.plugin.pjrt_api_version = api;
            k.plugin.file_hash = fh;
            k.tool_version = tool;
            k
        })
}

/// Mutates component `which` by appending `extra` (non-empty).
fn mutate(k: &mut KeyComponents, which: usize, extra: &str) {
    match which {
        0 => {
            let mut v = k.program.0.to_vec();
            v.extend_from_slice(extra.as_bytes());
            k.program = Digest::of(&v);
        }
        1 => k
            .compile_options
            .canonical
            .extend_from_slice(extra.as_bytes()),
        2 => k.target.push_str(extra),
        3 => k.topology.push_str(extra),
        4 => k.plugin.platform_name.push_str(extra),
        5 => k.plugin.platform_version.push_str(extra),
        6 => k.plugin.pjrt_api_version.push_str(extra),
        7 => k.plugin.file_hash.push_str(extra),
        8 => k.tool_version.push_str(extra),
        _ => unreachable!(),
    }
}

proptest! {
    #[test]
    fn key_changes_with_every_component(k in arb_components(), which in 0usize..9, extra in "[a-z0-9:.]{1,4}") {
        let mut m = k.clone();
        mutate(&mut m, which, &extra);
        prop_assert_ne!(k.key(), m.key());
        // The graph fingerprint moves only with the program.
        prop_assert_eq!(k.graph() == m.graph(), which != 0);
    }

    #[test]
    fn key_ignores_display_fields(k in arb_components(), label in ".{0,20}", summary in ".{0,20}") {
        let mut m = k.clone();
        m.label = label;
        m.compile_options.summary = summary;
        prop_assert_eq!(k.key(), m.key());
    }

    #[test]
    fn key_is_deterministic(k in arb_components()) {
        prop_assert_eq!(k.key(), k.clone().key());
        prop_assert_eq!(k.key().to_hex().len(), 64);
    }
}

#[test]
fn moving_bytes_between_fields_changes_the_key() {
    let mut a = kc("p");
    let mut b = kc("p");
    a.plugin.platform_name = "tpu".into();
    a.plugin.platform_version = "1".into();
    b.plugin.platform_name = "tpu1".into();
    b.plugin.platform_version = String::new();
    assert_ne!(a.key(), b.key());
}
