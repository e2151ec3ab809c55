#!/usr/bin/env python3
"""Measured effect of tpuc's pass pipeline: for the GPT-2 block fixture and the 12-layer
GPT-2-small-shaped model (scripts/make_bench_models.py writes it into target/bench-models/),
each as exported and in core ATen, without passes (`--passes=`), with the default pipeline
without fusion (`--no-fusion`) and with the default pipeline, prints a table of:

  - StableHLO ops: op lines in the whole module / in @main (composites count once in @main,
    their shared decomposition functions once each in the total);
  - pass time of `tpuc lower` (ms);
  - XLA CPU plugin execution time, median of `tpuc run --repeat N` (weights resident), taken
    in `--rounds` rounds that run the three variants of a model in turn (the order reversed
    every other round) and reported as the median over rounds, so that a burst of background
    load does not land on one variant only;
  - libtpu's cost analysis for a v5e:2x2 topology (`tpuc compile --target tpu --json`, which
    runs the TPU pipeline): flops, bytes accessed, optimal_seconds where libtpu gives one.

For reference (DESIGN.md / issue 6): torch_xla 2.9 emits 115 ops for a GPT-2 block (d_model 256,
4 heads, seq 128) and 1,088 for the 12-layer model.

Usage: bench_passes.py [--tpuc target/release/tpuc] [--runs 200] [--runs-12l 10] [--rounds 3]
                       [--skip-12l]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
BENCH = os.path.join(ROOT, "target", "bench-models")

CONFIGS = [
    ("no passes", ["--passes="]),
    ("pipeline --no-fusion", ["--no-fusion"]),
    ("pipeline", []),
]


def tpuc(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tpuc {' '.join(args)} failed:\n{r.stderr[-4000:]}")
    return r


def op_counts(mlir):
    total = main = 0
    in_main = False
    for line in mlir.splitlines():
        if "func.func" in line:
            in_main = "@main" in line
            continue
        if re.search(r"\bstablehlo\.[a-z_]+", line) or re.search(r"\bchlo\.[a-z_]+", line):
            total += 1
            main += in_main
    return total, main


def execute_us(binary, model, inputs, extra, runs):
    out = tpuc(binary, "run", model, "--no-cache", "--inputs", *inputs, "--repeat", str(runs), "--json", *extra).stdout
    return json.loads(out.splitlines()[-1])["median_us"]["execute"]


def measure(binary, model, extra):
    lowered = tpuc(binary, "lower", model, "--pass-timing", *extra)
    total, main = op_counts(lowered.stdout)
    m = re.search(r"pass timing: \d+ passes, ([0-9.]+) ms", lowered.stderr)
    pass_ms = float(m.group(1)) if m else 0.0
    tpu = json.loads(tpuc(binary, "compile", model, "--no-cache", "--target", "tpu", "--topology", "v5e:2x2", "--json", *extra).stdout)
    cost = tpu.get("cost", {})
    return {
        "ops": total,
        "main_ops": main,
        "pass_ms": pass_ms,
        "flops": cost.get("flops"),
        "bytes": cost.get("bytes_accessed"),
        "optimal_s": cost.get("optimal_seconds"),
    }


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--runs-12l", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-12l", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tpuc-bench-passes-")
    x12 = os.path.join(tmp, "x_1x128x768.npy")
    np.save(x12, np.random.default_rng(0).standard_normal((1, 128, 768), dtype=np.float32))
    block_in = [os.path.join(FIX, "gpt2_block", "input_0.npy")]
    models = [
        ("GPT-2 block (fixture, d32)", "export", os.path.join(FIX, "gpt2_block", "export.pt2"), block_in, a.runs),
        ("GPT-2 block (fixture, d32)", "core", os.path.join(FIX, "gpt2_block", "core.pt2"), block_in, a.runs),
    ]
    if not a.skip_12l:
        for form, f in (("export", "gpt2_12l.pt2"), ("core", "gpt2_12l.core.pt2")):
            p = os.path.join(BENCH, f)
            if not os.path.exists(p):
                sys.exit(f"{p} is missing: run scripts/make_bench_models.py {BENCH}")
            models.append(("GPT-2 12 layers (d768, seq 128)", form, p, [x12], a.runs_12l))
    hdr = "| model | form | passes | StableHLO ops (all / @main) | pass ms | XLA CPU execute µs (median) | v5e flops | v5e bytes accessed | v5e optimal_seconds |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for name, form, path, inputs, runs in models:
        results = [measure(a.tpuc, path, extra) for _, extra in CONFIGS]
        times = [[] for _ in CONFIGS]
        for k in range(a.rounds):
            order = list(range(len(CONFIGS)))
            for i in order if k % 2 == 0 else order[::-1]:
                times[i].append(execute_us(a.tpuc, path, inputs, CONFIGS[i][1], runs))
        for (label, _), r, t in zip(CONFIGS, results, times):
            r["cpu_us"] = statistics.median(t)
            print(
                f"| {name} | {form} | {label} | {r['ops']} / {r['main_ops']} | {r['pass_ms']:.2f} | {r['cpu_us']:.1f} | "
                f"{fmt(r['flops'], '.4g')} | {fmt(r['bytes'], '.4g')} | {fmt(r['optimal_s'], '.3g')} |",
                flush=True,
            )
    print("\nReference: torch_xla 2.9 emits 115 StableHLO ops for a GPT-2 block (d_model 256) and 1,088 for the 12-layer model.")


if __name__ == "__main__":
    main()
