#!/usr/bin/env python3
"""Runtime benchmark table for every fixture: import+lower time, PJRT compile time (CPU plugin
and a v5e:2x2 TPU topology), and execution latency on the CPU plugin (median of many runs,
split into input checks, uploads, execute and downloads) next to PyTorch eager on the same
inputs in the same run.

Usage: bench_runtime.py [--tpuc target/release/tpuc] [--runs 300]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")


def tpuc(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tpuc {' '.join(args)} failed:\n{r.stderr}")
    return r


def eager_median_us(pt2, inputs, runs):
    module = torch.export.load(pt2).module()
    args = [torch.from_numpy(np.load(p)) for p in inputs]
    torch.set_num_threads(1)
    with torch.no_grad():
        for _ in range(10):
            module(*args)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            module(*args)
            times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(FIX, "manifest.json")))
    rows = []
    for f in manifest:
        if "dynamic" in f["name"]:
            continue
        pt2 = os.path.join(FIX, f["file"])
        inputs = [os.path.join(FIX, p) for p in f["inputs"]]
        # import + lower, best of 5 (the CLI's own timing, without process start-up)
        lower_ms = []
        for _ in range(5):
            err = tpuc(a.tpuc, "lower", pt2, "-o", os.devnull, "--timing").stderr
            ms = [float(x) for x in re.findall(r"(?:import|emit|pass [^:]+): ([0-9.]+) ms", err)]
            lower_ms.append(sum(ms))
        cpu = json.loads(tpuc(a.tpuc, "compile", pt2, "--json").stdout)
        tpu = json.loads(tpuc(a.tpuc, "compile", pt2, "--target", "tpu", "--topology", "v5e:2x2", "--json").stdout)
        out = tpuc(a.tpuc, "run", pt2, "--inputs", *inputs, "--repeat", str(a.runs), "--json").stdout
        run = json.loads(out.splitlines()[-1])["median_us"]
        eager = eager_median_us(pt2, inputs, a.runs)
        rows.append((f["name"], min(lower_ms), cpu["compile_seconds"] * 1e3, tpu["compile_seconds"] * 1e3, run, eager))
    hdr = "| fixture | import+lower ms | compile CPU ms | compile TPU v5e ms | run total µs | execute µs | checks µs | uploads µs | downloads µs | eager µs | tpuc/eager |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for name, low, ccpu, ctpu, run, eager in rows:
        print(
            f"| {name} | {low:.2f} | {ccpu:.0f} | {ctpu:.0f} | {run['total']:.1f} | {run['execute']:.1f} | "
            f"{run['check']:.1f} | {run['upload']:.1f} | {run['download']:.1f} | {eager:.1f} | {run['total'] / eager:.2f} |"
        )


if __name__ == "__main__":
    main()
