#!/usr/bin/env bash
# Stress check for a clean exit under torchrun: N jobs of 2 ranks and N of 4 (default 20 each;
# DDP, FSDP2, DTensor TP and SimpleFSDP in turn, each rank training with tpuc and eagerly, as
# tests/python/test_distributed.py does), beside a CPU burner on every core, with the worker
# leaving through a plain interpreter exit. Prints one line per job and fails if any job
# exits non-zero, writes fewer results than ranks, or prints an abort ("terminate called").
# Usage: scripts/torchrun_exit_check.sh [N]   (about 10 s a job on 2 cores, more under the burner)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-20}"
work="$(mktemp -d "${TMPDIR:-/tmp}/tpuc-torchrun-exit.XXXXXX")"
burners=()
for _ in $(seq "$(nproc)"); do ( while :; do :; done ) & burners+=($!); done
trap 'kill "${burners[@]}" 2>/dev/null; rm -rf "$work"' EXIT
setups=(ddp fsdp2 tp simplefsdp)
bad=0
for i in $(seq "$N"); do
  for ranks in 2 4; do
    setup="${setups[$((i % 4))]}"
    out="$work/$i-$ranks"; mkdir -p "$out"
    OMP_NUM_THREADS=1 timeout 900 "$ROOT/.venv/bin/python" -m torch.distributed.run --standalone \
      --nproc_per_node="$ranks" "$ROOT/tests/python/dist_worker.py" --setup "$setup" --out "$out" \
      >"$out/log" 2>&1
    rc=$?
    results="$(find "$out" -name 'rank_*.json' | wc -l)"
    aborts="$(grep -c 'terminate called\|SIGABRT\|core dumped' "$out/log")"
    echo "job $i: $ranks ranks, $setup: exit $rc, $results results, $aborts aborts"
    if [ "$rc" -ne 0 ] || [ "$results" -ne "$ranks" ] || [ "$aborts" -ne 0 ]; then
      bad=$((bad + 1)); tail -n 20 "$out/log"
    fi
  done
done
echo "$((2 * N)) jobs, $bad bad"
[ "$bad" -eq 0 ]
