#!/usr/bin/env python3
"""libtpu's cost analysis for v5e of a ViT-B/16-shaped encoder (timm's attention: one qkv
projection, reshape -> permute -> unbind, SDPA; random weights) exported raw and in core ATen
form, and whether each lowers with the attention composite.

    scripts/bench_vit_cost.py [--tpuc target/debug/tpuc] [--layers 12] [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    def __init__(self, layers: int, d: int = 768, heads: int = 12, patch: int = 16, image: int = 224):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", default="target/debug/tpuc")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = ViT(a.layers).eval()
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(a.batch, 3, 224, 224),))
    print(f"\nViT-B/16-shaped, {a.layers} layers, batch {a.batch}: libtpu cost analysis, v5e:2x2\n")
    print("| export | attention composites | flops | bytes accessed | optimal s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for form, e in (("raw", ep), ("core", ep.run_decompositions())):
            path = os.path.join(d, f"{form}.pt2")
            torch.export.save(e, path)
            ir = subprocess.run([a.tpuc, "lower", path, "--emit", "ir"], capture_output=True, text=True, check=True).stdout
            out = subprocess.run([a.tpuc, "compile", path, "--target", "tpu", "--topology", "v5e:2x2", "--json", "--no-cache"],
                                 capture_output=True, text=True, check=True).stdout
            cost = json.loads(out)["cost"]
            fused = ir.count('name = "tpuc.attention"')
            print(f"| {form} | {fused} | {cost['flops']:.4e} | {cost['bytes_accessed']:.4e} | "
                  f"{cost.get('optimal_seconds', float('nan')):.3e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
