#!/usr/bin/env python3
"""The ATen ops that `ep.run_decompositions()` (torch.export's default decompositions) breaks
into other ops, one `torch.ops.aten.NAME.OVERLOAD` a line, for the importer's hint on an
unsupported op of a raw export (src/decomposable.txt, read with include_str!).

Usage: .venv/bin/python make_decomposable.py > ../../src/decomposable.txt   (needs torch 2.15;
tests/python/test_complex_models.py checks the file is current)."""
import torch


def names() -> list[str]:
    table = torch.export.default_decompositions()
    return sorted({f"torch.ops.{k}" for k in map(str, table.keys()) if k.startswith("aten.")})


if __name__ == "__main__":
    print("\n".join(names()))
