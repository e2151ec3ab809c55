#!/usr/bin/env bash
# Runs both importer fuzz targets (fuzz/fuzz_targets) for SECONDS each (default 60): the smoke
# test CI runs, or a long run with a larger SECONDS. Each starts from the seed programs
# (fuzz/seeds) and the regression programs of crashes found so far
# (frontend-fx/tests/data/regressions, plus fuzz/regressions/<target> for raw crash inputs),
# so a regression fails at once. Fails on the first crash; libFuzzer leaves the input in
# fuzz/artifacts/<target>/.
#
# Needs cargo-fuzz (installed with `cargo install cargo-fuzz --locked` when missing) and uses
# RUSTC_BOOTSTRAP=1 so the stable toolchain accepts the sanitizer flags.
# Env: TPUC_FUZZ_TARGETS="import_bytes import_edits" picks the targets.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-60}"
targets="${TPUC_FUZZ_TARGETS:-import_bytes import_edits}"

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  printf 'fuzz: installing cargo-fuzz\n'
  cargo install cargo-fuzz --locked --quiet
fi

export RUSTC_BOOTSTRAP=1
cd "$ROOT/fuzz"
log="$(mktemp "${TMPDIR:-/tmp}/tpuc-fuzz.XXXXXX")"
trap 'rm -f "$log"' EXIT
for t in $targets; do
  corpus="$ROOT/fuzz/corpus/$t"
  mkdir -p "$corpus"
  dirs=("$corpus")
  # import_bytes reads programs: the seeds and the minimised crash programs are its inputs.
  # import_edits reads edit scripts over built-in seeds: only its own crash inputs apply.
  [ "$t" = import_bytes ] && dirs+=("$ROOT/fuzz/seeds" "$ROOT/frontend-fx/tests/data/regressions")
  [ -d "$ROOT/fuzz/regressions/$t" ] && dirs+=("$ROOT/fuzz/regressions/$t")
  printf '\n==== fuzz %s for %ss ====\n' "$t" "$secs"
  set +e
  # -O: an optimised build, as the long runs use; the first corpus dir receives new inputs.
  cargo fuzz run -O "$t" "${dirs[@]}" -- -max_total_time="$secs" -max_len=65536 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^stat::(number_of_executed_runs|peak_rss_mb)|INFO: seed corpus|Done [0-9]+ runs' "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log" >&2
    printf 'fuzz: %s failed (exit %d); a crash input is in fuzz/artifacts/%s/\n' "$t" "$rc" "$t" >&2
    exit 1
  fi
done
