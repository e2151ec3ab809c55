#!/usr/bin/env python3
"""One training step of GPT-2 124M (causal LM) and BERT-base (masked LM), batch 4, sequence 128,
AdamW (lr 1e-4, weight decay 0.01), gradient clipping at 1.0, dropout off, random weights, on
this machine's CPU, five ways:

  eager            torch's own loop
  inductor         torch.compile(model), AdamW eager
  inductor+opt     torch.compile(model) and the optimizer step under torch.compile too
  tpuc compile     torch.compile(model, backend="tpuc"): forward and backward programs, AdamW eager
  tpuc train_step  tpuc.train_step: the whole step as one program, state resident

Per way: the first step (tracing and compiling included) and the median of the timed steps.
For train_step also the time per step outside XLA's execution (Python, argument handling,
transfers): `overhead`. Prints a table; `--json FILE` writes the figures.

Usage: scripts/bench_train_step.py [--models gpt2,bert] [--ways ...] [--steps 5]
Build the extension in release mode first (scripts/build.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import transformers

WAYS = ["eager", "inductor", "inductor+opt", "tpuc compile", "tpuc train_step"]


def build(name: str):
    torch.manual_seed(0)
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    elif name == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    else:
        raise SystemExit(f"unknown model {name}")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (4, 128), generator=g)
    return model.train(), {"input_ids": ids, "labels": ids}


def torch_loop(model, batch, steps: int, compile_model: bool, compile_opt: bool, backend: str = "inductor"):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    fwd = torch.compile(model, backend=backend) if compile_model else model

    def opt_step():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    opt_fn = torch.compile(opt_step) if compile_opt else opt_step
    times, losses = [], []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = fwd(**batch).loss
        loss.backward()
        opt_fn()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return times, losses, {}


def tpuc_train_step(model, batch, steps: int):
    import tpuc

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    step = tpuc.train_step(model, opt, clip_grad_norm=1.0)
    times, losses = [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        losses.append(step(**batch).item())
        times.append(time.perf_counter() - t0)
        if i == 0:
            step.call_ns = step.run_ns = 0
            prog = next(iter(step._programs.values())).program
            calls0, _run0, _up0, exec0, _down0 = prog.run_stats()
    calls, _run, _up, exec_ns, _down = prog.run_stats()
    timed = sum(times[1:])
    execute = (exec_ns - exec0) / 1e9
    return times, losses, {"execute_s": execute / max(calls - calls0, 1), "overhead": (timed - execute) / timed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2,bert")
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--steps", type=int, default=5, help="timed steps after the first")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    results = {}
    for name in a.models.split(","):
        for way in a.ways.split(","):
            torch._dynamo.reset()
            model, batch = build(name)
            if way == "eager":
                r = torch_loop(model, batch, a.steps, False, False)
            elif way == "inductor":
                r = torch_loop(model, batch, a.steps, True, False)
            elif way == "inductor+opt":
                r = torch_loop(model, batch, a.steps, True, True)
            elif way == "tpuc compile":
                r = torch_loop(model, batch, a.steps, True, False, backend="tpuc")
            elif way == "tpuc train_step":
                r = tpuc_train_step(model, batch, a.steps)
            else:
                raise SystemExit(f"unknown way {way}")
            times, losses, extra = r
            results[(name, way)] = {"first_s": times[0], "step_s": statistics.median(times[1:]),
                                    "loss_first": losses[0], "loss_last": losses[-1], **extra}
            print(f"{name:5} {way:16} first {times[0]:7.2f} s   step {statistics.median(times[1:]):6.3f} s", flush=True)
    print()
    print(f"{'model':6} {'way':16} {'first step s':>12} {'step s':>8} {'vs inductor':>11} {'overhead':>9}")
    for (name, way), r in results.items():
        ind = results.get((name, "inductor"))
        speed = f"{ind['step_s'] / r['step_s']:10.2f}x" if ind else ""
        over = f"{100 * r['overhead']:8.1f}%" if "overhead" in r else ""
        print(f"{name:6} {way:16} {r['first_s']:12.2f} {r['step_s']:8.3f} {speed:>11} {over:>9}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
