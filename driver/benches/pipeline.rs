//! Import → StableHLO text, end to end, on the GPT-2 block fixture and on a 12-layer model of
//! GPT-2-small's shape (d_model 768, 12 heads). The models are generated, never committed:
//! `scripts/bench.sh` exports them into `target/bench-models/` first (or set
//! `TPUC_BENCH_MODELS` to a folder holding `gpt2_block{,.core}.pt2` and `gpt2_12l{,.core}.pt2`).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::PathBuf;
use tpuc_driver::{Emit, LowerOptions};

fn models_dir() -> PathBuf {
    std::env::var_os("TPUC_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-models"))
}

fn bench_pipeline(c: &mut Criterion) {
    let dir = models_dir();
    let mut group = c.benchmark_group("import+lower");
    for name in ["gpt2_block", "gpt2_block.core", "gpt2_12l", "gpt2_12l.core"] {
        let path = dir.join(format!("{name}.pt2"));
        assert!(
            path.exists(),
            "{} is missing: run scripts/bench.sh (it exports the benchmark models first)",
            path.display()
        );
        // Import → StableHLO with no passes, and with the default CPU pipeline.
        for (variant, options) in [
            ("no-passes", LowerOptions { passes: Some(Vec::new()), ..Default::default() }),
            ("default-pipeline", LowerOptions::default()),
        ] {
            // One run outside the timer so failures show up as errors, not as a bench number.
            let lowered = tpuc_driver::compile_file(&path, &options, Emit::StableHlo).expect("pipeline failed");
            let ops = lowered.module.num_live_ops();
            let bytes = lowered.stablehlo.as_ref().map_or(0, |s| s.len());
            eprintln!("{name} ({variant}): {ops} IR ops, {bytes} bytes of StableHLO");
            group.bench_function(format!("{name}/{variant}"), |b| {
                b.iter(|| {
                    let l = tpuc_driver::compile_file(black_box(&path), &options, Emit::StableHlo).unwrap();
                    black_box(l.stablehlo.map(|s| s.len()))
                })
            });
        }
        group.bench_function(format!("{name}/import-only"), |b| {
            b.iter(|| black_box(tpuc_driver::import(black_box(&path)).unwrap().module.num_live_ops()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pipeline);
criterion_main!(benches);
