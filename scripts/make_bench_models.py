#!/usr/bin/env python3
"""Export the models the import/lower benchmark reads (never committed: GPT-2-small weights are
~340 MB).

  gpt2_block.pt2 / gpt2_block.core.pt2   the fixture GPT-2 block (d_model 32)
  gpt2_12l.pt2 / gpt2_12l.core.pt2       12 GPT-2 blocks of GPT-2-small's shape
                                          (d_model 768, 12 heads, MLP 3072), batch 1, seq 128

Usage: make_bench_models.py OUT_DIR   (skips files that already exist)
"""

import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
from make_fixtures import GPT2Block, set_determinism  # noqa: E402


class Stack(nn.Module):
    def __init__(self, layers: int, d_model: int, n_head: int, hidden: int):
        super().__init__()
        self.blocks = nn.Sequential(*[GPT2Block(d_model, n_head, hidden) for _ in range(layers)])

    def forward(self, x):
        return self.blocks(x)


def export(model: nn.Module, args, out_dir: str, name: str) -> None:
    plain = os.path.join(out_dir, f"{name}.pt2")
    core = os.path.join(out_dir, f"{name}.core.pt2")
    if os.path.exists(plain) and os.path.exists(core):
        print(f"exists: {plain}, {core}")
        return
    with torch.no_grad():
        ep = torch.export.export(model.eval(), args)
        torch.export.save(ep, plain)
        torch.export.save(ep.run_decompositions(), core)
    print(f"wrote {plain}, {core}")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    set_determinism()
    export(Stack(1, 32, 4, 64), (torch.randn(2, 8, 32),), out_dir, "gpt2_block")
    export(Stack(12, 768, 12, 3072), (torch.randn(1, 128, 768),), out_dir, "gpt2_12l")


if __name__ == "__main__":
    main()
