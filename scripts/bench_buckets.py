#!/usr/bin/env python3
"""Dynamic shapes as buckets: what they cost and what they save. Prints four tables.

1. Ahead-of-time: a GPT-2 block (d_model 64, lengths 1..2048, `auto`) exported with a dynamic
   sequence length and compiled bucket by bucket with `tpuc compile --json` (no cache): the
   number of compiles and their total time.
2. Host dispatch per call through torch.compile: a bucketed graph (pick the bucket, pad the
   input, cut the outputs) against the same graph compiled for exactly the bucket's shape,
   each fed 16 distinct inputs in turn; the host's part of a call is its time outside PJRT's
   execute, and the difference of the two host parts is what bucketing adds.
3. Hugging Face `generate()` (GPT-2, random weights, greedy) with `model.forward` compiled by
   tpuc: first run, second run, eager, compiles, buckets and weight uploads, for 32 and 256 new
   tokens, and a d_model-512 model.
4. libtpu's cost analysis of the block compiled for v5e:2x2 at length B: the bucketed program
   (with its masks) against the program exported for exactly B.

Usage: bench_buckets.py [--tpuc target/release/tpuc] [--quick] [--tables aot,dispatch,generate,cost]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))


def table(title, head, rows):
    print(f"\n{title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def export_block(path, d_model, dynamic, length=16):
    import torch
    from torch.export import Dim

    import make_fixtures as mf

    torch.manual_seed(0)
    model = mf.GPT2Block(d_model, 4, 4 * d_model).eval()
    x = torch.randn(1, length, d_model)
    shapes = ({1: Dim("s", min=2, max=2048)},) if dynamic else None
    with torch.no_grad():
        ep = torch.export.export(model, (x,), dynamic_shapes=shapes)
    torch.export.save(ep.run_decompositions(), path)


def aot_table(tpuc, tmp):
    pt2 = os.path.join(tmp, "block_dyn.pt2")
    export_block(pt2, 64, True)
    t = time.perf_counter()
    p = subprocess.run([tpuc, "compile", pt2, "--no-cache", "--json"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    entries = json.loads(p.stdout.strip().splitlines()[-1])["buckets"]
    sizes = [next(iter(e["sizes"].values())) for e in entries]
    rows = [[f"GPT-2 block d64, lengths 2..2048, auto", len(entries), sum(b >= 128 for b in sizes),
             f"{sum(e['compile_seconds'] for e in entries):.2f}", f"{wall:.2f}", " ".join(map(str, sizes))]]
    table("Ahead-of-time buckets (`tpuc compile`, no cache)",
          ["program", "compiles", "of them >= 128", "XLA compile s", "wall s", "buckets"], rows)


def dispatch_table():
    import torch

    import tpuc
    from tpuc.graph import compiled_graphs

    class Pool(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = torch.nn.Linear(d, d)

        def forward(self, x):
            h = torch.relu(self.fc(x))
            return h, h.mean(1)

    def timed(pairs, reps=400):
        """Per (function, graph, inputs): median wall µs per call, and median µs of a call
        outside PJRT's execute (the host's part: Dynamo's guards, the backend, padding,
        uploads, cutting). The functions take turns call by call, so both meet the same
        machine noise."""
        walls = [[] for _ in pairs]
        hosts = [[] for _ in pairs]
        for i in range(reps):
            for k, (f, graph, args) in enumerate(pairs):
                a = args[i % len(args)]
                before = graph.program.run_stats()[3]
                t = time.perf_counter_ns()
                f(a)
                wall = time.perf_counter_ns() - t
                walls[k].append(wall)
                hosts[k].append(wall - (graph.program.run_stats()[3] - before))
        med = lambda v: sorted(v)[len(v) // 2] / 1e3  # noqa: E731
        return [(med(w), med(h)) for w, h in zip(walls, hosts)]

    rows = []
    for d, n, bucket in ((8, 3, 4), (64, 100, 128), (64, 1000, 1024)):
        torch.manual_seed(0)
        known = set(map(id, compiled_graphs()))
        dyn = torch.compile(Pool(d).eval(), backend="tpuc")
        static = torch.compile(Pool(d).eval(), backend="tpuc", dynamic=False)
        # 16 distinct inputs each, as a model meets new data every call.
        xs = [torch.randn(4, n, d) for _ in range(16)]
        xbs = [torch.randn(4, bucket, d) for _ in range(16)]
        with torch.no_grad():
            dyn(torch.randn(4, 7, d))  # first shape: static graph; the next ones are symbolic
            for _ in range(3):
                dyn(xs[0])
                static(xbs[0])
            new = [g for g in compiled_graphs() if id(g) not in known]
            gb = next(g for g in new if g.bucket is not None)
            gs = next(g for g in new if g.bucket is None and g.calls > 1)
            (a, ah), (b, bh) = timed([(dyn, gb, xs), (static, gs, xbs)])
        mb = xs[0].numel() * 4 / 1e6
        rows.append([f"[4, {n}, {d}] -> bucket {bucket}", f"{mb:.3f}", f"{a:.1f}", f"{b:.1f}", f"{ah:.1f}", f"{bh:.1f}",
                     f"{ah - bh:.1f}"])
        torch._dynamo.reset()
    table("Host dispatch per call, torch.compile (median µs, 16 distinct inputs; `static` runs the bucket's shape itself; "
          "host = the call outside PJRT's execute)",
          ["input", "input MB", "bucketed", "static at bucket size", "bucketed host", "static host",
           "bucketing adds (host)"], rows)


def generate_table(quick):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import tpuc

    rows = []
    cases = [(2, 64, 32), (2, 64, 256), (2, 512, 64)] if not quick else [(2, 64, 32)]
    for layers, d, new in cases:
        torch._dynamo.reset()
        tpuc.reset_stats()
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=layers, n_embd=d, n_head=4, vocab_size=128, n_positions=1024)
        model = GPT2LMHeadModel(cfg).eval()
        ids = torch.randint(0, 128, (1, 5))
        kw = dict(max_new_tokens=new, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, **kw)
            t = time.perf_counter()
            want = model.generate(ids, **kw)
            eager = time.perf_counter() - t
            # Dynamo's own share of a first run: the same loop through the "eager" backend
            # (Dynamo traces the same graphs; no compiler behind it).
            forward = model.forward
            model.forward = torch.compile(forward, backend="eager")
            t = time.perf_counter()
            model.generate(ids, **kw)
            dynamo_only = time.perf_counter() - t
            torch._dynamo.reset()
            model.forward = torch.compile(forward, backend="tpuc")
            t = time.perf_counter()
            got = model.generate(ids, **kw)
            first = time.perf_counter() - t
            t = time.perf_counter()
            again = model.generate(ids, **kw)
            second = time.perf_counter() - t
        s = tpuc.stats()
        same = torch.equal(got, want) and torch.equal(again, want)
        rows.append([f"GPT-2 {layers}L d{d}", new, same, f"{first:.2f}", f"{dynamo_only:.2f}", f"{second:.3f}", f"{eager:.3f}",
                     f"{second / eager:.2f}", s.get("compiles", 0), s.get("buckets", 0), s.get("weight_uploads", 0)])
    table("Hugging Face generate() through torch.compile(model.forward, backend=\"tpuc\") (seconds; "
          "`Dynamo alone`: the first run through backend=\"eager\")",
          ["model", "new tokens", "same tokens", "first run", "Dynamo alone", "second run", "eager", "second / eager",
           "compiles", "buckets", "weight uploads"], rows)


def cost_table(tpuc, tmp):
    rows = []
    dyn = os.path.join(tmp, "block_dyn.pt2")
    if not os.path.exists(dyn):
        export_block(dyn, 64, True)
    for b in (128, 512):
        exact = os.path.join(tmp, f"block_{b}.pt2")
        export_block(exact, 64, False, b)
        figures = []
        for model, extra in ((dyn, ["--buckets", f"{b},2048", "--max-buckets", "2"]), (exact, [])):
            p = subprocess.run([tpuc, "compile", model, "--target", "tpu", "--topology", "v5e:2x2", "--no-cache", "--json", *extra],
                               capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                return
            v = json.loads(p.stdout.strip().splitlines()[-1])
            v = v["buckets"][0] if "buckets" in v else v
            figures.append(v.get("cost", {}))
        (fb, ab), (fe, ae) = [(c.get("flops", 0), c.get("bytes_accessed", 0)) for c in figures]
        rows.append([b, f"{fb:.4g}", f"{fe:.4g}", f"{100 * (fb / fe - 1):+.2f} %" if fe else "-",
                     f"{ab:.4g}", f"{ae:.4g}", f"{100 * (ab / ae - 1):+.2f} %" if ae else "-"])
    table("libtpu cost analysis, GPT-2 block d64 for v5e:2x2 at length B: bucketed (masks) vs exported for B",
          ["B", "flops bucketed", "flops exact", "diff", "bytes bucketed", "bytes exact", "diff"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--quick", action="store_true", help="only the small generate() case")
    ap.add_argument("--tables", default="aot,dispatch,generate,cost",
                    help="which tables, comma-separated (default: all: aot,dispatch,generate,cost)")
    a = ap.parse_args()
    tables = set(a.tables.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        if "aot" in tables:
            aot_table(a.tpuc, tmp)
        if "dispatch" in tables:
            dispatch_table()
        if "generate" in tables:
            generate_table(a.quick)
        if "cost" in tables:
            cost_table(a.tpuc, tmp)


if __name__ == "__main__":
    main()
