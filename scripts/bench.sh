#!/usr/bin/env bash
# Benchmarks, each printing a table:
#  1. import → StableHLO (criterion) on a GPT-2 block and a 12-layer GPT-2-small-shaped model,
#     exported into target/bench-models/ on first use (~700 MB, never committed);
#  2. StableHLO emission alone (criterion);
#  3. per fixture: import+lower, PJRT compile (CPU, TPU v5e:2x2), CPU-plugin execution vs eager;
#  4. the compilation cache: cold compile vs tier-2 / tier-3 hits in later processes
#     (tier hit latencies by size: cargo bench -p tpuc-cache).
# Arguments are passed to criterion (e.g. a filter such as gpt2_12l).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
.venv/bin/python scripts/make_bench_models.py target/bench-models
cargo bench -p tpuc-driver --bench pipeline -- "$@"
cargo bench -p tpuc-lowering-stablehlo --bench emit -- "$@"
cargo build --release -p tpuc-tools --bin tpuc
.venv/bin/python scripts/bench_runtime.py --tpuc target/release/tpuc
.venv/bin/python scripts/bench_cache.py --tpuc target/release/tpuc
