#!/usr/bin/env python3
"""How lowering scales with model depth: import, passes and emit of GPT-2-style stacks.

Exports stacks of 12, 48, 96 and 192 GPT-2 blocks (d_model 128, 4 heads, MLP 512, batch 1,
seq 32) in core-ATen form into target/bench-models/depth/ (on first use), runs
`tpuc lower --timing` on each (release binary, default pass pipeline, CPU target) several
times and prints the median of each stage, with the ratio to the 12-block stack. Then the same
for the 12-layer GPT-2-small-shaped model of scripts/make_bench_models.py (d_model 768), in
both export forms.

Goals (README): every stage linear in depth, t(96)/t(12) <= 10; a 192-block stack lowered in
under 200 ms; GPT-2-small 12 layers under 10 ms for both forms.

Usage: bench_depth.py [--tpuc target/release/tpuc] [--runs 5] [--depths 12,48,96,192]
                      [--no-gpt2-small]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "target", "bench-models")


def export_stack(layers: int, path: str) -> None:
    import torch

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_bench_models import Stack
    from make_fixtures import set_determinism

    set_determinism()
    model = Stack(layers, 128, 4, 512).eval()
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(1, 32, 128),))
        torch.export.save(ep.run_decompositions(), path)


def lower_times(tpuc: str, model: str, runs: int) -> dict:
    """Median milliseconds of import, passes (sum), emit and total over `runs` lowerings."""
    samples: dict[str, list[float]] = {"import": [], "passes": [], "emit": [], "total": []}
    for _ in range(runs):
        p = subprocess.run([tpuc, "lower", model, "--timing", "-o", os.devnull], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"tpuc lower {model} failed:\n{p.stderr}")
        t = {"import": 0.0, "passes": 0.0, "emit": 0.0}
        for line in p.stderr.splitlines():
            m = re.match(r"(import|emit): ([0-9.]+) ms", line)
            if m:
                t[m.group(1)] = float(m.group(2))
            m = re.match(r"pass \S+: ([0-9.]+) ms", line)
            if m:
                t["passes"] += float(m.group(1))
        for k, v in t.items():
            samples[k].append(v)
        samples["total"].append(sum(t.values()))
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--depths", default="12,48,96,192")
    ap.add_argument("--no-gpt2-small", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.tpuc):
        sys.exit(f"{args.tpuc} not found: cargo build --release -p tpuc-tools --bin tpuc")
    out = os.path.join(MODELS, "depth")
    os.makedirs(out, exist_ok=True)
    depths = [int(d) for d in args.depths.split(",")]
    rows = []
    for n in depths:
        path = os.path.join(out, f"gpt2_d128_{n}l.core.pt2")
        if not os.path.exists(path):
            print(f"exporting {n} blocks -> {path}", file=sys.stderr)
            export_stack(n, path)
        rows.append((n, lower_times(args.tpuc, path, args.runs)))
    base = rows[0][1]
    print(f"\nGPT-2-style stacks, d_model 128, core ATen, default pipeline (median of {args.runs} runs, ms)\n")
    print("| blocks | import | passes | emit | total | import / 12 | passes / 12 | emit / 12 | ms per block |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, t in rows:
        ratio = lambda k: t[k] / base[k] if base[k] > 0 else float("nan")  # noqa: E731
        print(
            f"| {n} | {t['import']:.1f} | {t['passes']:.1f} | {t['emit']:.1f} | {t['total']:.1f} "
            f"| {ratio('import'):.1f} | {ratio('passes'):.1f} | {ratio('emit'):.1f} | {t['total'] / n:.2f} |"
        )
    if not args.no_gpt2_small:
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "scripts", "make_bench_models.py"), MODELS],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"\nGPT-2-small shape, 12 layers (d_model 768, seq 128), default pipeline (median of {args.runs} runs, ms)\n")
        print("| form | import | passes | emit | total |")
        print("|---|---|---|---|---|")
        for form, name in [("torch.export", "gpt2_12l.pt2"), ("core ATen", "gpt2_12l.core.pt2")]:
            t = lower_times(args.tpuc, os.path.join(MODELS, name), args.runs)
            print(f"| {form} | {t['import']:.1f} | {t['passes']:.1f} | {t['emit']:.1f} | {t['total']:.1f} |")


if __name__ == "__main__":
    main()
