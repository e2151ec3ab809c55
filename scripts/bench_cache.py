#!/usr/bin/env python3
"""Compilation-cache benchmark for the GPT-2 block fixture on the CPU plugin and a v5e:2x2 TPU
topology: a cold compile, a tier-2 hit in a second process, a tier-3 hit (shared directory) in a
third, each as the executable's time-to-ready inside the process and as the whole process's wall
time (which includes loading the plugin and import + lowering). Median of 5.

Usage: bench_cache.py [--tpuc target/release/tpuc]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "tests", "fixtures", "gpt2_block", "core.pt2")


def compile_once(tpuc, env, extra):
    t = time.perf_counter()
    r = subprocess.run([tpuc, "compile", MODEL, "--json", *extra], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    v = json.loads(r.stdout)
    return v["cache"], v["compile_seconds"] * 1e3, wall * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    a = ap.parse_args()
    print("| target | path | cache | time to executable ms | process wall ms |")
    print("|---|---|---|---|---|")
    for target in (["--target", "cpu"], ["--target", "tpu", "--topology", "v5e:2x2"]):
        rows = {}
        for _ in range(5):
            shm = tempfile.mkdtemp(prefix="tpuc-bench-", dir="/dev/shm")
            remote = tempfile.mkdtemp(prefix="tpuc-bench-remote-")
            env = dict(os.environ, TPUC_CACHE_TIER2_ROOT=shm)
            env.pop("TPUC_CACHE_TIER2", None)
            try:
                runs = [
                    ("cold", compile_once(a.tpuc, env, [*target, "--no-cache"])),
                    ("first (publishes)", compile_once(a.tpuc, env, [*target, "--cache-tier2", "b", "--cache-tier3", remote])),
                    ("second process, tier 2", compile_once(a.tpuc, env, [*target, "--cache-tier2", "b"])),
                    ("other host, tier 3", compile_once(a.tpuc, env, [*target, "--cache-tier2", "c", "--cache-tier3", remote])),
                ]
            finally:
                shutil.rmtree(shm, ignore_errors=True)
                shutil.rmtree(remote, ignore_errors=True)
            for name, (src, ready, wall) in runs:
                rows.setdefault(name, []).append((src, ready, wall))
        for name, vals in rows.items():
            src = vals[0][0]
            ready = statistics.median(v[1] for v in vals)
            wall = statistics.median(v[2] for v in vals)
            print(f"| {target[1]} | {name} | {src} | {ready:.1f} | {wall:.0f} |")


if __name__ == "__main__":
    main()
