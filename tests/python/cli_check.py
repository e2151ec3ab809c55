"""The CLI half of the model tests: torch.export a model, run the archive with `tpuc run` and
compare with eager through `--expect`."""

import os
import subprocess

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TPUC = os.environ.get("TPUC_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                  "debug", "tpuc")


def assert_cli_matches_eager(model: torch.nn.Module, x, tmp_path, tol: float = 1e-4) -> None:
    """Exports `model` (eval mode, core ATen after run_decompositions), runs it on `x` (a tensor,
    or a tuple of them for several inputs) with `tpuc run --no-cache` and asserts the result
    equals eager within `tol`."""
    args = x if isinstance(x, tuple) else (x,)
    model.eval()
    with torch.no_grad():
        want = model(*args)
        ep = torch.export.export(model, args)
    pt2 = str(tmp_path / "model.pt2")
    torch.export.save(ep.run_decompositions(), pt2)
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"x{i}.npy", a.numpy())
        inputs.append(str(tmp_path / f"x{i}.npy"))
    np.save(tmp_path / "want.npy", want.numpy())
    p = subprocess.run([TPUC, "run", pt2, "--inputs", *inputs, "--expect", str(tmp_path / "want.npy"),
                        "--rtol", str(tol), "--atol", str(tol), "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
