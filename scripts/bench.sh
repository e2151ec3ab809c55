#!/usr/bin/env bash
# Benchmarks of the import → StableHLO path. Exports the benchmark models (a GPT-2 block and
# a 12-layer GPT-2-small-shaped stack; ~700 MB, never committed) into target/bench-models/
# on first use, then runs the criterion benchmark and prints its table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
.venv/bin/python scripts/make_bench_models.py target/bench-models
cargo bench -p tpuc-driver --bench pipeline -- "$@"
