#!/usr/bin/env python3
"""Training-step time of a transformer block under a real torchrun job (gloo, CPU), eager vs
inductor vs tpuc, for DTensor tensor parallelism and SimpleFSDP, and the share of collective
time tpuc hides behind compute.

    scripts/bench_distributed.py [--ranks 2] [--d 512] [--seq 128] [--batch 4] [--steps 10]

It launches itself under torchrun; rank 0 prints the table. "hidden" is
1 - (host time blocked in collectives with overlap) / (the same with each collective waited at
once, `overlap=False`): the part of the collectives' time that ran behind compute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from dist_worker import Block, build_parallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    init = Block(args.d, args.heads).state_dict()
    x = torch.randn(args.batch, args.seq, args.d, generator=torch.Generator().manual_seed(1))
    rows = []
    runs = [("eager", None, {}), ("inductor", "inductor", {}), ("tpuc", "tpuc", {"strict": True}),
            ("tpuc (no overlap)", "tpuc", {"strict": True, "overlap": False})]
    for setup in ("tp", "simplefsdp"):
        for label, backend, options in runs:
            import tpuc

            torch._dynamo.reset()
            tpuc.reset_stats()
            block = Block(args.d, args.heads)
            block.load_state_dict(init)
            model = build_parallel(setup, block, mesh)
            if backend:
                model = torch.compile(model, backend=backend, options=options) if backend == "tpuc" else \
                    torch.compile(model, backend=backend)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)

            def step():
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()

            t0 = time.perf_counter()
            step()
            first = time.perf_counter() - t0
            for _ in range(2):
                step()
            dist.barrier()
            tpuc.reset_stats()
            times = []
            for _ in range(args.steps):
                dist.barrier()
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            s = tpuc.stats()
            rows.append(dict(setup=setup, run=label, ms=statistics.median(times) * 1e3, first_s=first,
                             blocked_ms=s.get("collective_blocked_ns", 0) / 1e6 / args.steps,
                             programs=s.get("compiles", 0)))
    if rank == 0:
        print(json.dumps(rows))
    dist.destroy_process_group()


def table(rows, args) -> None:
    print(f"\nTraining step, one block d_model {args.d}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
          f"{args.ranks} ranks (torchrun, gloo, CPU); median of {args.steps} steps\n")
    print("| setup | run | step ms | vs eager | first step s | collectives blocking, ms/step | hidden |")
    print("|---|---|---|---|---|---|---|")
    for setup in ("tp", "simplefsdp"):
        rs = {r["run"]: r for r in rows if r["setup"] == setup}
        eager = rs["eager"]["ms"]
        serial = rs["tpuc (no overlap)"]["blocked_ms"]
        for name, r in rs.items():
            hidden = ""
            if name == "tpuc" and serial > 0:
                hidden = f"{max(0.0, 1 - r['blocked_ms'] / serial) * 100:.0f} %"
            blocked = f"{r['blocked_ms']:.2f}" if name.startswith("tpuc") else "-"
            print(f"| {setup} | {name} | {r['ms']:.1f} | {eager / r['ms']:.2f}x | {r['first_s']:.1f} | {blocked} | {hidden} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        # torchrun's own parser would take the flags: they come in the environment.
        worker(argparse.Namespace(**json.loads(os.environ["TPUC_BENCH_ARGS"])))
        return 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
           os.path.abspath(__file__), "--worker"]
    env = dict(os.environ, TPUC_BENCH_ARGS=json.dumps(vars(args)))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[{")]
    if p.returncode != 0 or not lines:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
        return 1
    table(json.loads(lines[-1]), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
