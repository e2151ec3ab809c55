"""One family of the corpus through tpuc's three paths, each compared with eager; run by
run.py in a process of its own (a crash or a hang costs one family, not the run).

  cli    torch.export (core ATen, after run_decompositions; the raw export where torch's own
         decompositions fail), then `tpuc run` on the archive
  infer  torch.compile(model, backend="tpuc", options={"strict": True}), eval mode, no grad
  train  three AdamW steps through torch.compile (strict), losses and parameters against an
         eager copy trained on the same batch

Prints one line per path: `CORPUS {"path", "status", "detail", "error", "compile_s", "run_s"}`.
Statuses: ok; mismatch (error: the largest difference relative to the output's scale); refused
(tpuc refused an op; detail names it); error (tpuc failed otherwise); torch (eager, export or
the harness failed before tpuc: listed, not counted). run.py adds crash and timeout.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TPUC = os.environ.get("TPUC_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                  "release", "tpuc")
TOL = {"cli": (1e-4, 1e-4), "infer": (1e-4, 1e-4), "train": (1e-4, 1e-3)}  # (atol, rtol)


class TorchFailure(Exception):
    """Eager, export or the harness failed: not tpuc's doing."""


def first_line(e: BaseException) -> str:
    """`Type: first line of the message`."""
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {msg}"


def compiled_with_tpuc(model):
    """A fresh Dynamo state and the model under torch.compile(backend="tpuc"), strict."""
    torch._dynamo.reset()
    return torch.compile(model, backend="tpuc", options={"strict": True})


def say(path: str, status: str, detail: str = "", error: float | None = None, compile_s=None, run_s=None):
    print("CORPUS " + json.dumps(dict(path=path, status=status, detail=detail[:500], error=error,
                                      compile_s=compile_s, run_s=run_s)), flush=True)


def rel_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest |got - want| over the outputs, each relative to max(1, max |want|); inf when
    shapes differ or a finite value became NaN."""
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        g, w = torch.as_tensor(g), torch.as_tensor(w)
        if g.shape != w.shape:
            return float("inf")
        if not w.is_floating_point() and not w.is_complex():
            worst = max(worst, float((g.to(w.dtype) != w).any()))
            continue
        g, w = g.double(), w.double()
        both_nan = torch.isnan(g) & torch.isnan(w)
        d = torch.where(both_nan, torch.zeros_like(g), (g - w).abs())
        if torch.isnan(d).any():
            return float("inf")
        scale = max(1.0, float(w[torch.isfinite(w)].abs().max()) if torch.isfinite(w).any() else 1.0)
        worst = max(worst, float(d.max()) / scale if d.numel() else 0.0)
    return worst


def classify(e: BaseException) -> tuple[str, str]:
    """(status, detail) of a failure inside tpuc's path."""
    cause = e
    while cause.__cause__ is not None or cause.__context__ is not None:
        if type(cause).__name__.startswith("Tpuc"):
            break
        cause = cause.__cause__ or cause.__context__
    if type(cause).__name__.startswith("Tpuc"):
        kind = getattr(cause, "kind", "")
        if kind in ("unsupported_op",) or type(cause).__name__ == "TpucUnsupportedError":
            ops = sorted({n.get("target") or "?" for n in getattr(cause, "nodes", [])}) or [getattr(cause, "target", "?")]
            return "refused", ", ".join(str(o) for o in ops)
        return "error", f"{kind}: {str(cause).splitlines()[0] if str(cause) else ''}"
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return "error", f"{type(e).__name__}: {msg}"


def double_inputs(kwargs):
    """The inputs with floating tensors in float64, for the float64 run of the model (the
    reference that tells eager's own rounding noise from a real difference)."""
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in kwargs.items()}


def perturbed(model, seed: int):
    """A copy of `model` with every floating parameter and buffer moved by one ulp, up or down at
    random: the same model as far as float32 can tell. How far eager's result moves under such a
    change is the noise any float32 implementation of the model has, its rounding order included."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(m.parameters()) + list(m.buffers()):
            if t.is_floating_point() and t.numel():
                up = torch.rand(t.shape, generator=g) < 0.5
                t.copy_(torch.where(up, torch.nextafter(t, torch.full_like(t, float("inf"))),
                                    torch.nextafter(t, torch.full_like(t, float("-inf")))))
    return m


PERTURBATIONS = 8


def judge(path: str, got, want, noise_of=None) -> tuple[str, float, str]:
    """(status, error, detail): ok within the path's tolerance; else ok when tpuc is within
    eager's own noise, as `noise_of()` measures it: (eager's distance from the reference, tpuc's
    distance from it, what the reference was)."""
    err = rel_error(got, want)
    atol, rtol = TOL[path]
    if err <= atol + rtol:
        return "ok", err, ""
    if noise_of is not None:
        try:
            eager_err, tpuc_err, detail = noise_of()
        except Exception as e:  # noqa: BLE001 - eager cannot run the reference
            return "mismatch", err, f"no reference for eager's noise ({first_line(e)[:80]})"
        if tpuc_err <= 2 * eager_err + atol:
            return "ok", err, "within eager's own noise: " + detail
        return "mismatch", err, detail
    return "mismatch", err, ""


def eager_noise(run, start, want, got) -> tuple[float, float, str]:
    """`judge`'s noise: where `start` runs in float64, eager float32's distance from that run
    (the largest of eager as it is and under PERTURBATIONS one-ulp perturbations of its weights)
    against tpuc's. Where it does not, how far those perturbations move eager against how far
    tpuc is from eager. `run(model, double)` returns the result's tensors."""
    moved = [run(perturbed(start, seed), False) for seed in range(PERTURBATIONS)]
    try:
        ref = run(copy.deepcopy(start).double(), True)
    except Exception:  # noqa: BLE001 - the model does not run in float64
        spread = max(rel_error(m, want) for m in moved)
        err = rel_error(got, want)
        return spread, err, f"no float64 run; one-ulp perturbations move eager {spread:.2g}, tpuc is {err:.2g} from eager"
    eager = max(rel_error(r, ref) for r in [want, *moved])
    tpuc = rel_error(got, ref)
    return eager, tpuc, f"vs float64: eager {eager:.2g} (one-ulp perturbations of its weights included), tpuc {tpuc:.2g}"


def forward_noise(model, kwargs, got, want) -> tuple[float, float, str]:
    """`eager_noise` of the model's forward."""
    def run(m, double):
        kw = double_inputs(kwargs) if double else kwargs
        with torch.no_grad():
            return leaves(m(**kw))
    return eager_noise(run, model, want, got)


def traced_differs(path: str, got, want, traced_run) -> str | None:
    """Where tpuc differs from eager: whether torch's own run of the traced program
    (`traced_run()`: the export run by torch, or aot_eager) differs from eager too and tpuc
    equals it. Then the model traces another path than it runs eagerly (transformers' masks
    under tracing, say): torch's doing, not tpuc's. Returns the detail, else None."""
    try:
        traced = traced_run()
    except Exception:  # noqa: BLE001 - no traced reference: the mismatch stands
        return None
    atol, rtol = TOL[path]
    off, near = rel_error(traced, want), rel_error(got, traced)
    if off > atol + rtol and near <= atol + rtol:
        return (f"the traced model differs from eager by {off:.2g} (torch's own run of the traced program); "
                f"tpuc is {near:.2g} from that")
    return None


def leaves(out) -> list[torch.Tensor]:
    return [t.detach() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def path_cli(model, kwargs, tmp: str):
    model.eval()
    note = ""
    try:
        with torch.no_grad():
            want = leaves(model(**kwargs))
            ep = torch.export.export(model, (), kwargs=kwargs, strict=False)
            try:
                ep = ep.run_decompositions()
            except Exception as e:  # noqa: BLE001 - tpuc imports the raw export as it comes
                note = f"raw export (run_decompositions failed in torch: {type(e).__name__})"
        pt2 = os.path.join(tmp, "model.pt2")
        torch.export.save(ep, pt2)
    except Exception as e:  # noqa: BLE001
        raise TorchFailure(f"export: {first_line(e)}") from e
    flat = [a for a in torch.utils._pytree.tree_leaves(((), kwargs)) if isinstance(a, torch.Tensor)]
    import numpy as np

    inputs = []
    for i, a in enumerate(flat):
        p = os.path.join(tmp, f"in_{i}.npy")
        np.save(p, a.numpy())
        inputs.append(p)
    out_dir = os.path.join(tmp, "out")
    t0 = time.perf_counter()
    p = subprocess.run([TPUC, "run", pt2, "--inputs", *inputs, "--out-dir", out_dir, "--no-cache"],
                       capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        err = (p.stderr or p.stdout).strip().splitlines()
        line = next((x for x in err if x.startswith("error")), err[0] if err else f"exit {p.returncode}")
        if "unsupported" in line or "not supported" in line or "refus" in line:
            return say("cli", "refused", line, compile_s=took)
        return say("cli", "crash" if p.returncode >= 2 else "error", line, compile_s=took)
    # The CLI writes every output of the program, buffer mutations included: keep the user's.
    user = [i for i, o in enumerate(ep.graph_signature.output_specs)
            if o.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT]
    got = [torch.from_numpy(np.load(os.path.join(out_dir, f"output_{i}.npy"))) for i in user
           if os.path.exists(os.path.join(out_dir, f"output_{i}.npy"))]
    status, err, detail = judge("cli", got, want, lambda: forward_noise(model, kwargs, got, want))
    if status == "mismatch":
        def exported():
            with torch.no_grad():
                out = leaves(ep.module()(**kwargs))
            return [out[i] for i in range(len(out))][:len(want)]
        traced = traced_differs("cli", got, want, exported)
        if traced:
            raise TorchFailure(traced)
    say("cli", status, "; ".join(x for x in (note, detail) if x), err, compile_s=took)


def path_infer(model, kwargs):
    model.eval()
    try:
        with torch.no_grad():
            want = leaves(model(**kwargs))
    except Exception as e:  # noqa: BLE001
        raise TorchFailure(f"eager: {first_line(e)}") from e
    compiled = compiled_with_tpuc(model)
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            got = leaves(compiled(**kwargs))
    except Exception as e:  # noqa: BLE001
        status, detail = classify(e)
        return say("infer", status, detail, compile_s=time.perf_counter() - t0)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        compiled(**kwargs)
    run_s = time.perf_counter() - t0

    status, err, detail = judge("infer", got, want, lambda: forward_noise(model, kwargs, got, want))
    if status == "mismatch":
        def aot_eager():
            with torch.no_grad():
                return leaves(torch.compile(copy.deepcopy(model), backend="aot_eager")(**kwargs))
        traced = traced_differs("infer", got, want, aot_eager)
        if traced:
            raise TorchFailure(traced)
    say("infer", status, detail, err, compile_s=first, run_s=run_s)


def _loss(out, has_loss: bool) -> torch.Tensor:
    if has_loss and getattr(out, "loss", None) is not None:
        return out.loss
    t = models.first_float(out)
    if t is None:
        raise TorchFailure("no floating output to train on")
    return t.float().pow(2).mean()


def _train(model, call, kwargs, has_loss: bool, steps: int = 3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = _loss(call(**kwargs), has_loss)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def path_train(model, kwargs, has_loss: bool):
    model.train()
    reference, start = copy.deepcopy(model), copy.deepcopy(model)
    try:
        want_losses = _train(reference, reference, kwargs, has_loss)
    except TorchFailure:
        raise
    except Exception as e:  # noqa: BLE001
        raise TorchFailure(f"eager training: {first_line(e)}") from e
    compiled = compiled_with_tpuc(model)
    t0 = time.perf_counter()
    try:
        got_losses = _train(model, compiled, kwargs, has_loss)
    except Exception as e:  # noqa: BLE001
        status, detail = classify(e)
        return say("train", status, detail, compile_s=time.perf_counter() - t0)
    took = time.perf_counter() - t0
    want = [torch.tensor(want_losses)] + [p.detach() for p in reference.parameters()]
    got = [torch.tensor(got_losses)] + [p.detach() for p in model.parameters()]
    def run(m, double):
        kw = double_inputs(kwargs) if double else kwargs
        losses = _train(m, m, kw, has_loss)
        return [torch.tensor(losses, dtype=torch.float64 if double else torch.float32)] + [p.detach() for p in m.parameters()]

    status, err, detail = judge("train", got, want, lambda: eager_noise(run, start, want, got))
    if status == "mismatch":
        def aot_eager():
            m = copy.deepcopy(start)
            losses = _train(m, torch.compile(m, backend="aot_eager"), kwargs, has_loss)
            return [torch.tensor(losses)] + [p.detach() for p in m.parameters()]
        traced = traced_differs("train", got, want, aot_eager)
        if traced:
            raise TorchFailure(traced)
    say("train", status, detail, err, compile_s=took)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("family")
    ap.add_argument("--paths", default="cli,infer,train")
    a = ap.parse_args()
    torch.set_num_threads(1)
    import tpuc  # noqa: F401  (registers the backend and its errors)

    for path in a.paths.split(","):
        try:
            model, kwargs, has_loss = models.build(a.family, head=(path == "train"))
        except Exception as e:  # noqa: BLE001
            say(path, "torch", f"build: {first_line(e)}")
            continue
        try:
            with tempfile.TemporaryDirectory(prefix="tpuc-corpus-") as tmp:
                if path == "cli":
                    path_cli(model, kwargs, tmp)
                elif path == "infer":
                    path_infer(model, kwargs)
                elif path == "train":
                    path_train(model, kwargs, has_loss)
        except TorchFailure as e:
            say(path, "torch", str(e))
        except Exception as e:  # noqa: BLE001
            status, detail = classify(e)
            say(path, status, detail + " | " + traceback.format_exc().strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
