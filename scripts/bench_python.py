#!/usr/bin/env python3
"""Eager PyTorch vs torch.compile(backend="tpuc") (XLA CPU plugin) vs torch.compile(backend=
"inductor"), inference, for the MLP and GPT-2 block of tests/fixtures (plus a GPT-2 block at
d_model 256, seq 128, the size DESIGN.md's peer measurements use).

Per model and backend: first-call latency (Dynamo + compile + first run, from a reset Dynamo
cache) and the steady-state median per call. For tpuc, the per-call time is split into:
  execute   PJRT execute (measured in Rust around PJRT_LoadedExecutable_Execute + wait)
  xfer      PJRT host->device copies of the inputs and device->host copies of the outputs
  glue      tpuc's own Python + Rust code around those calls (weights check, pointers, output
            tensors): the compiled graph's __call__ minus execute and xfer
  torch     Dynamo guards and aot_autograd's runtime wrappers (torch's code, not ours)
"overhead" = glue + xfer: everything tpuc's call path adds beyond the PJRT execute itself.

Usage: scripts/bench_python.py [--models mlp,gpt2_block,gpt2_256] [--backends eager,tpuc,inductor]
                               [--seconds 2] [--json FILE]
Build the extension in release mode first (scripts/build.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

import torch  # noqa: E402

import make_fixtures as mf  # noqa: E402


def build(name):
    if name == "mlp":
        model, args, _, _ = mf.build_mlp()
    elif name == "gpt2_block":
        model, args, _, _ = mf.build_gpt2_block()
    elif name == "gpt2_256":
        mf.set_determinism()
        model = mf.GPT2Block(d_model=256, n_head=4, mlp_hidden=1024)
        args = (torch.randn(1, 128, 256),)
    else:
        raise SystemExit(f"unknown model {name}")
    # The fixture builders pin one thread and deterministic algorithms; benchmark with torch's
    # defaults instead.
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(os.cpu_count() or 1)
    return model.eval(), args


def timed_calls(fn, args, seconds, min_calls=20, max_calls=20000):
    for _ in range(10):
        fn(*args)
    times = []
    end = time.perf_counter() + seconds
    while (time.perf_counter() < end or len(times) < min_calls) and len(times) < max_calls:
        t = time.perf_counter_ns()
        fn(*args)
        times.append(time.perf_counter_ns() - t)
    return times


def bench(model_name, backend, seconds):
    model, args = build(model_name)
    torch._dynamo.reset()
    row = {"model": model_name, "backend": backend}
    with torch.no_grad():
        want = model(*args)
        if backend == "eager":
            fn = model
            t = time.perf_counter()
            fn(*args)
            row["first_ms"] = (time.perf_counter() - t) * 1e3
        else:
            fn = torch.compile(model, backend=backend)
            t = time.perf_counter()
            got = fn(*args)
            row["first_ms"] = (time.perf_counter() - t) * 1e3
            row["max_abs_err"] = (got - want).abs().max().item()
        graphs = []
        if backend == "tpuc":
            from tpuc.graph import compiled_graphs

            graphs = compiled_graphs()
            before = [(g.calls, g.call_ns, g.program.run_stats()) for g in graphs]
        times = timed_calls(fn, args, seconds)
        row["calls"] = len(times)
        row["median_us"] = statistics.median(times) / 1e3
        row["mean_us"] = sum(times) / len(times) / 1e3
        if graphs:
            calls = graph_ns = run_ns = up_ns = ex_ns = down_ns = 0
            for g, (c0, ns0, r0) in zip(graphs, before):
                r1 = g.program.run_stats()
                calls = max(calls, g.calls - c0)
                graph_ns += g.call_ns - ns0
                run_ns += r1[1] - r0[1]
                up_ns += r1[2] - r0[2]
                ex_ns += r1[3] - r0[3]
                down_ns += r1[4] - r0[4]
            n = max(calls, 1)
            row["execute_us"] = ex_ns / n / 1e3
            row["xfer_us"] = (up_ns + down_ns) / n / 1e3
            row["glue_us"] = (graph_ns - ex_ns - up_ns - down_ns) / n / 1e3
            row["glue_rust_us"] = (run_ns - ex_ns - up_ns - down_ns) / n / 1e3
            row["torch_us"] = row["mean_us"] - graph_ns / n / 1e3
            row["overhead_us"] = row["glue_us"] + row["xfer_us"]
    torch._dynamo.reset()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,gpt2_block,gpt2_256")
    ap.add_argument("--backends", default="eager,tpuc,inductor")
    ap.add_argument("--seconds", type=float, default=2.0, help="steady-state time per row")
    ap.add_argument("--json", help="also write the rows here")
    ns = ap.parse_args()
    import tpuc  # noqa: F401  (only to report its version; the backend is found by name)

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, tpuc {tpuc.__version__}")
    rows = []
    for m in ns.models.split(","):
        for b in ns.backends.split(","):
            try:
                rows.append(bench(m, b, ns.seconds))
            except Exception as e:  # one failing backend should not hide the others
                rows.append({"model": m, "backend": b, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"})
            print(_line(rows[-1]), flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=1)
    print()
    print("| model | backend | first call ms | median µs/call | tpuc: execute | xfer | glue (rust) | torch wrappers | overhead |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['backend']} | error: {r['error']} |||||||")
            continue
        extra = "| | | | |"
        if "execute_us" in r:
            extra = (f"| {r['execute_us']:.1f} | {r['xfer_us']:.1f} | {r['glue_us']:.1f} ({r['glue_rust_us']:.1f}) "
                     f"| {r['torch_us']:.1f} | {r['overhead_us']:.1f} |")
        print(f"| {r['model']} | {r['backend']} | {r['first_ms']:.1f} | {r['median_us']:.1f} {extra}")


def _line(r):
    if "error" in r:
        return f"{r['model']:<11} {r['backend']:<9} error: {r['error']}"
    s = f"{r['model']:<11} {r['backend']:<9} first {r['first_ms']:9.1f} ms  median {r['median_us']:9.1f} µs"
    if "max_abs_err" in r:
        s += f"  err {r['max_abs_err']:.1e}"
    if "execute_us" in r:
        s += (f"  [execute {r['execute_us']:.1f}, xfer {r['xfer_us']:.1f}, glue {r['glue_us']:.1f} "
              f"(rust {r['glue_rust_us']:.1f}), torch {r['torch_us']:.1f} µs]")
    return s


if __name__ == "__main__":
    main()
