#!/usr/bin/env python3
"""A training step with dropout on: a BERT-base-size encoder (12 layers, d_model 768, 12 heads,
seq 128, batch 8; Hugging Face BertModel from a config, random weights), eager vs inductor vs
tpuc on this CPU, with dropout 0.1 and with dropout off; then libtpu's cost analysis (v5e:2x2,
no TPU needed) of tpuc's forward and backward programs with and without dropout.

    scripts/bench_dropout.py [--layers 12] [--d 768] [--seq 128] [--batch 8] [--steps 5]
                             [--backends eager,inductor,tpuc] [--no-tpu-cost]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time

import torch


def encoder(args, dropout: float):
    import transformers as T

    cfg = T.BertConfig(hidden_size=args.d, num_hidden_layers=args.layers, num_attention_heads=args.d // 64,
                       intermediate_size=4 * args.d, vocab_size=30522, max_position_embeddings=512,
                       hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(0)
    return T.BertModel(cfg, add_pooling_layer=False).train()


def step_time(model, backend, ids, steps, options=None):
    torch._dynamo.reset()
    run = model if backend == "eager" else torch.compile(
        model, backend=backend, **({"options": options} if options else {}))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        out = run(input_ids=ids).last_hidden_state
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, first


def tpu_cost(args, dropout: float, ids):
    """Flops and bytes of tpuc's forward and backward programs compiled for v5e."""
    import tpuc

    with tempfile.TemporaryDirectory() as d:
        model = encoder(args, dropout)
        torch._dynamo.reset()
        run = torch.compile(model, backend="tpuc", options={"target": "tpu", "topology": "v5e:2x2", "dump_dir": d})
        run(input_ids=ids).last_hidden_state.square().mean().backward()
        out = {}
        for path in sorted(glob.glob(os.path.join(d, "*", "compile.json"))):
            kind = "backward" if "backward" in path else "forward"
            cost = json.load(open(path)).get("cost", {})
            out[kind] = (cost.get("flops", float("nan")), cost.get("bytes_accessed", float("nan")))
        tpuc.reset_stats()
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--backends", default="eager,inductor,tpuc")
    ap.add_argument("--no-tpu-cost", action="store_true")
    args = ap.parse_args()
    ids = torch.randint(0, 30522, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
    print(f"\nTraining step (AdamW), BERT encoder {args.layers} layers, d {args.d}, seq {args.seq}, "
          f"batch {args.batch}; median of {args.steps} steps, this machine\n")
    print("| dropout | backend | step ms | vs eager | first step s |")
    print("|---|---|---|---|---|")
    for dropout in (0.1, 0.0):
        eager = None
        for backend in args.backends.split(","):
            ms, first = step_time(encoder(args, dropout), backend, ids, args.steps,
                                  {"strict": True} if backend == "tpuc" else None)
            eager = ms if backend == "eager" else eager
            ratio = f"{eager / ms:.2f}x" if eager else "-"
            print(f"| {dropout} | {backend} | {ms:.0f} | {ratio} | {first:.1f} |", flush=True)
    if not args.no_tpu_cost:
        print("\nlibtpu cost analysis, v5e:2x2 (per device), tpuc's programs\n")
        print("| program | flops, dropout 0.1 | flops, off | bytes, dropout 0.1 | bytes, off |")
        print("|---|---|---|---|---|")
        on, off = tpu_cost(args, 0.1, ids), tpu_cost(args, 0.0, ids)
        for kind in ("forward", "backward"):
            a, b = on.get(kind, (float("nan"),) * 2), off.get(kind, (float("nan"),) * 2)
            print(f"| {kind} | {a[0]:.3e} | {b[0]:.3e} | {a[1]:.3e} | {b[1]:.3e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
