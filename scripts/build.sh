#!/usr/bin/env bash
# The one release build: the `tpuc` CLI and the Python extension (tpuc._C) from a single cargo
# invocation, so that every crate they share is compiled once; then the package goes into
# .venv (editable, `maturin develop`, which finds the build up to date) and `tpuc` onto the
# venv's PATH (.venv/bin/tpuc, a link to the release binary).
#
# maturin builds the extension with PyO3's build configuration in the environment
# (PYO3_PYTHON, ...); cargo gets the same values here, or maturin would recompile the PyO3
# crates. Needs scripts/setup.sh first. Env: CARGO_TARGET_DIR as cargo honours it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "build: $PY missing: run scripts/setup.sh first" >&2; exit 1; }

sig="$("$PY" -c 'import sys; print(f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}-{64 if sys.maxsize > 2**32 else 32}bit")')"
export PYO3_PYTHON="$PY" PYTHON_SYS_EXECUTABLE="$PY" PYO3_ENVIRONMENT_SIGNATURE="$sig" \
  PYO3_BUILD_EXTENSION_MODULE=1 VIRTUAL_ENV="$VENV"

cargo build --release -p tpuc-tools -p tpuc-python
# PIP_QUIET: maturin's pip prints a "Requirement already satisfied" line per dependency of
# torch; warnings and errors still show.
(cd "$ROOT/python" && PIP_QUIET=1 "$VENV/bin/maturin" develop --release --quiet)

target_dir="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
ln -sfn "$target_dir/release/tpuc" "$VENV/bin/tpuc"
