#!/usr/bin/env bash
# The main job on the embedded default: build tpuc, import the GPT-2 block fixture (a
# torch.export .pt2 archive), print its tpuc IR, lower it to StableHLO and check that with the
# real StableHLO verifier, run it on the XLA CPU plugin against PyTorch eager's outputs, and
# compile it for a TPU v5e topology (no TPU needed); then run a model through
# torch.compile(backend="tpuc"). One release build makes both the CLI and the Python extension
# (scripts/build.sh), installs the package into .venv and puts `tpuc` on the venv's PATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build.sh
tpuc=target/release/tpuc
echo "== the binary: $root/$tpuc, linked as .venv/bin/tpuc (on PATH after: source .venv/bin/activate)"
model=tests/fixtures/gpt2_block/export.pt2
mkdir -p target/demo
echo "== tpuc import $model (first lines)"
"$tpuc" import "$model" | head -n 12
echo "== tpuc lower $model -o target/demo/gpt2_block.mlir --timing"
"$tpuc" lower "$model" -o target/demo/gpt2_block.mlir --timing
echo "   $(grep -c 'stablehlo\.' target/demo/gpt2_block.mlir) StableHLO ops, $(wc -c < target/demo/gpt2_block.mlir) bytes"
echo "== StableHLO verifier (jaxlib MLIR bindings)"
.venv/bin/python tests/verify_stablehlo.py target/demo/gpt2_block.mlir
echo "== tpuc run $model on the XLA CPU plugin, compared with PyTorch eager"
"$tpuc" run "$model" --inputs tests/fixtures/gpt2_block/input_0.npy \
  --expect tests/fixtures/gpt2_block/expected_0.npy --rtol 1e-4 --atol 1e-5
echo "== tpuc compile $model --target tpu --topology v5e:2x2 (no TPU needed)"
"$tpuc" compile "$model" --target tpu --topology v5e:2x2 -o target/demo/gpt2_block.v5e.xla
echo "== torch.compile(backend=\"tpuc\") with the package scripts/build.sh installed"
.venv/bin/python - <<'PY'
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
x = torch.randn(8, 16)
got = torch.compile(model, backend="tpuc")(x)
torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
print("   torch.compile(model, backend=\"tpuc\") equals eager; activate with: source .venv/bin/activate")
PY
