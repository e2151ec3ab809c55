#!/usr/bin/env python3
"""SPMD bench: what each sharding policy costs per device, and CPU step time over devices.

1. libtpu's per-device cost analysis (flops, bytes accessed, optimal seconds) of a 12-layer
   GPT-2-small-shaped stack (d_model 768, 12 heads, MLP 3072; batch 8, seq 128; core ATen)
   compiled for v5e:2x2 (4 chips, no TPU needed): the replicated program (`--partitions 4`)
   against `--mesh x=2,y=2 --shard-policy dp|fsdp|tp` and `--mesh x=4 --shard-policy tp`.
   Goal (issue): tp or fsdp <= 0.35x the replicated per-device flops.
2. The step time of the GPT-2 block fixture-sized stack on the CPU plugin over 1 device and
   over 4 devices (`tpuc run --repeat`, median of whole calls).

The model is exported into target/bench-models/spmd/ on first use (~340 MB, never committed).
Usage: bench_spmd.py [--tpuc target/release/tpuc] [--skip-cpu]
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "target", "bench-models", "spmd")


def export(path: str, layers: int, d: int, heads: int, hidden: int, batch: int, seq: int) -> str:
    if os.path.exists(path):
        return path
    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    from make_bench_models import Stack
    from make_fixtures import set_determinism

    set_determinism()
    model = Stack(layers, d, heads, hidden).eval()
    x = torch.randn(batch, seq, d)
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.export.save(ep.run_decompositions(), path)
    np.save(path + ".x.npy", x.numpy())
    return path


def compile_json(tpuc: str, model: str, flags: list[str]) -> dict:
    cmd = [tpuc, "compile", model, "--target", "tpu", "--topology", "v5e:2x2", "--no-cache", "--json", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_us(tpuc: str, model: str, x: str, flags: list[str], repeat: int) -> float:
    cmd = [tpuc, "run", model, "--inputs", x, "--no-cache", "--repeat", str(repeat), "--json", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    for line in p.stdout.splitlines():
        if line.startswith("{") and '"median_us"' in line:
            return json.loads(line)["median_us"]["total"]
    sys.exit(f"no timing line from: {' '.join(cmd)}\n{p.stdout}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--skip-cpu", action="store_true")
    args = ap.parse_args()

    model = export(os.path.join(MODELS, "gpt2_12l_b8.core.pt2"), 12, 768, 12, 3072, 8, 128)
    rows = [("replicated (--partitions 4)", ["--partitions", "4"])]
    for mesh, policy in [("x=2,y=2", "dp"), ("x=2,y=2", "fsdp"), ("x=2,y=2", "tp"), ("x=4", "tp")]:
        rows.append((f"--mesh {mesh} --shard-policy {policy}", ["--mesh", mesh, "--shard-policy", policy]))
    print("12-layer GPT-2-small (batch 8, seq 128) for v5e:2x2, libtpu's per-device cost analysis\n")
    print("| program | flops / device | vs replicated | bytes accessed / device | optimal s | compile s |")
    print("|---|---|---|---|---|---|")
    base = None
    for name, flags in rows:
        r = compile_json(args.tpuc, model, flags)
        cost = r.get("cost", {})
        flops = cost.get("flops", float("nan"))
        base = base or flops
        opt = cost.get("optimal_seconds")  # libtpu gives none for some programs
        print(f"| {name} | {flops:.3e} | {flops / base:.2f}x | {cost.get('bytes_accessed', float('nan')):.3e} | "
              f"{'-' if opt is None else f'{opt:.2e}'} | {r['compile_seconds']:.1f} |")

    if args.skip_cpu:
        return
    small = export(os.path.join(MODELS, "gpt2_4l_d256_b8.core.pt2"), 4, 256, 4, 1024, 8, 128)
    x = small + ".x.npy"
    print("\n4 GPT-2 blocks (d_model 256, batch 8, seq 128) on the CPU plugin, median of whole calls\n")
    print("| devices | program | µs per call |")
    print("|---|---|---|")
    print(f"| 1 | single device | {run_us(args.tpuc, small, x, [], 20):.0f} |")
    for mesh, policy in [("x=4", "dp"), ("x=2,y=2", "tp")]:
        print(f"| 4 | --mesh {mesh} --shard-policy {policy} | {run_us(args.tpuc, small, x, ['--mesh', mesh, '--shard-policy', policy], 20):.0f} |")


if __name__ == "__main__":
    main()
