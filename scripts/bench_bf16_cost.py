#!/usr/bin/env python3
"""libtpu's cost analysis for v5e of a GPT-2 block in bfloat16 and float32 (Hugging Face's GPT-2, one layer,
weights and activations in the dtype, its eager (matmul-softmax) attention; random weights; exported in core ATen form), lowered by one or more tpuc
binaries side by side (to compare two builds: before and after a change).

    scripts/bench_bf16_cost.py [--tpuc target/release/tpuc ...] [--batch 8] [--seq 128]

Prints one row per dtype and binary: what the IR holds (composites, converts, f32
dot_generals), libtpu's flops and bytes accessed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import tempfile

import torch


def export(path: str, batch: int, seq: int, dtype: torch.dtype) -> None:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, attn_implementation="eager")
    model = GPT2Model(cfg).to(dtype).eval()

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    with torch.no_grad():
        # (HF's mask code leaves `aten.diff` in the raw export; the core form is what tpuc takes.)
        ep = torch.export.export(Block(), (ids,)).run_decompositions()
    torch.export.save(ep, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", nargs="+", default=["target/release/tpuc"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    a = ap.parse_args()
    print(f"\nGPT-2 block (1 layer, d768, 12 heads), batch {a.batch}, seq {a.seq}: libtpu cost analysis, v5e:2x2\n")
    print("| model | tpuc | composites | converts | f32 dot_generals | flops | bytes accessed |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for dtype in (torch.bfloat16, torch.float32):
            name = str(dtype).removeprefix("torch.")
            path = os.path.join(d, f"gpt2_block_{name}.pt2")
            export(path, a.batch, a.seq, dtype)
            for binary in a.tpuc:
                ir = subprocess.run([binary, "lower", path, "--target", "tpu", "--emit", "ir"], capture_output=True, text=True,
                                    check=True).stdout
                out = subprocess.run([binary, "compile", path, "--target", "tpu", "--topology", "v5e:2x2", "--json", "--no-cache"],
                                     capture_output=True, text=True, check=True).stdout
                cost = json.loads(out)["cost"]
                fused = ",".join(f"{n} {k.removeprefix('tpuc.')}" for k, n in
                                 sorted(collections.Counter(re.findall(r'name = "(tpuc\.\w+)"', ir)).items()))
                converts = len(re.findall(r"= convert ", ir))
                dots32 = len(re.findall(r"= dot_general .*: tensor<[0-9x]*xf32>", ir))
                print(f"| {name} | {binary} | {fused} | {converts} | {dots32} | {cost['flops']:.4e} | "
                      f"{cost['bytes_accessed']:.4e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
