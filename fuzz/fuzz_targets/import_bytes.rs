//! Feeds arbitrary bytes to the .pt2 / model.json importer: it must return an error or a
//! module that round-trips through the IR text and verifies, never panic.
//!
//! From `fuzz/`: `mkdir -p corpus/import_bytes && cp ../tests/fixtures/mlp/*.pt2 seeds/*.json
//! corpus/import_bytes/ && RUSTC_BOOTSTRAP=1 cargo fuzz run import_bytes corpus/import_bytes
//! -- -max_len=65536` (seeds: small archives and programs).
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(imp) = tpuc_frontend_fx::import_bytes(data.to_vec()) {
        common::check_text_roundtrip(&imp.module);
    }
});
