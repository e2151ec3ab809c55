#!/usr/bin/env bash
# The main job on the embedded default: build tpuc, import the GPT-2 block fixture (a
# torch.export .pt2 archive), print its tpuc IR summary, lower it to StableHLO and check the
# result with the real StableHLO verifier.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
cargo build --release -p tpuc-tools --bin tpuc
tpuc=target/release/tpuc
model=tests/fixtures/gpt2_block/export.pt2
mkdir -p target/demo
echo "== tpuc import $model (first lines)"
"$tpuc" import "$model" | head -n 12
echo "== tpuc lower $model -o target/demo/gpt2_block.mlir --timing"
"$tpuc" lower "$model" -o target/demo/gpt2_block.mlir --timing
echo "   $(grep -c 'stablehlo\.' target/demo/gpt2_block.mlir) StableHLO ops, $(wc -c < target/demo/gpt2_block.mlir) bytes"
echo "== StableHLO verifier (jaxlib MLIR bindings)"
.venv/bin/python tests/verify_stablehlo.py target/demo/gpt2_block.mlir
