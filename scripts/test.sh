#!/usr/bin/env bash
# Run all tests: setup, cargo build, cargo tests, lit tests, verifier self-test, the Python
# package (scripts/build.sh: one release build of the CLI and the extension, into .venv), its pytest suite and the OpInfo suite.
# Exits non-zero on the first failure. Extra env:
#   TPUC_BIN          tpuc binary for lit (default: <target>/debug/tpuc)
#   CARGO_TARGET_DIR  honoured as cargo does
#   TPUC_SKIP_SETUP=1 skip scripts/setup.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==== %s ====\n' "$*"; }
started=$SECONDS
current=""
trap 'rc=$?; if [ $rc -ne 0 ]; then printf "\n==== FAILED: %s (exit %d) ====\n" "$current" "$rc" >&2; fi' EXIT

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

current="setup"
if [ -z "${TPUC_SKIP_SETUP:-}" ]; then
  step "setup (scripts/setup.sh)"
  "$ROOT/scripts/setup.sh"
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found" >&2; exit 1; }

# tpuc's persistent cache (on by default, under $XDG_CACHE_HOME/tpuc) goes to a directory of
# this run, not the caller's ~/.cache (set after setup: pip keeps its own cache there).
target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
export XDG_CACHE_HOME="$target_dir/test-cache-home"
rm -rf "$XDG_CACHE_HOME"
mkdir -p "$XDG_CACHE_HOME"

current="cargo build"
step "cargo build --workspace --all-targets"
cargo build --workspace --all-targets

if cargo nextest --version >/dev/null 2>&1; then
  current="cargo nextest"
  step "cargo nextest run --workspace"
  cargo nextest run --workspace --no-tests=pass
  # nextest does not run doctests.
  current="cargo test --doc"
  step "cargo test --workspace --doc"
  cargo test --workspace --doc
else
  current="cargo test"
  step "cargo test --workspace"
  cargo test --workspace
fi

current="lit"
export TPUC_BIN="${TPUC_BIN:-$target_dir/debug/tpuc}"
step "lit -v tests/lit (TPUC_BIN=$TPUC_BIN)"
"$ROOT/.venv/bin/lit" -v "$ROOT/tests/lit"

current="verifier self-test"
step "tests/verify_stablehlo.py --self-test"
"$ROOT/.venv/bin/python" "$ROOT/tests/verify_stablehlo.py" --self-test

current="python package"
step "scripts/build.sh (the release CLI and the Python extension, one build) and pytest tests/python"
"$ROOT/scripts/build.sh"
set +e
"$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "$ROOT/tests/python"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
[ "$rc" -ne 5 ] || { echo "pytest collected no tests in tests/python" >&2; exit 1; }
[ "$rc" -eq 0 ] || exit "$rc"

# The model corpus's CI sample (scripts/corpus/sample.txt): fails when a path recorded ok in
# scripts/corpus/expected_sample.json stops being ok.
current="model corpus sample"
step "scripts/corpus/run.py --sample"
"$ROOT/.venv/bin/python" "$ROOT/scripts/corpus/run.py" --sample --jobs 2

# PyTorch's OpInfo suite through torch.compile: fails when an entry recorded as passing in
# tests/opinfo/expected_<dtype>.json stops passing (docs/opinfo.md is the table).
for dtype in float32 int64 bfloat16 float16; do
  current="opinfo suite ($dtype)"
  step "tests/opinfo/run.py --dtype $dtype --check"
  "$ROOT/.venv/bin/python" "$ROOT/tests/opinfo/run.py" --dtype "$dtype" --check
done

current=""
step "all tests passed ($((SECONDS - started)) s)"
