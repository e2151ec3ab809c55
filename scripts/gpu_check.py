"""The device check: tpuc's exported training step and inference against torch on one machine,
with only the `tpuc` binary and a PJRT plugin (no tpuc Python package, any torch version).

    python3 scripts/gpu_check.py --tpuc BIN --step DIR [--target gpu] [--steps 30] [--infer]

1. Writes the state files of the exported step DIR (scripts/export_train_step.py --no-state)
   from the same model torch builds here from seed 0, with the optimizer state torch starts
   from (zeros, step 0).
2. Replays it: `tpuc run DIR --steps N --target T`, the state resident and donated.
3. Trains the same model eagerly in torch on the same device, same batch, same AdamW and
   clipping, and compares the losses and the ms per step.
4. With --infer: GPT-2 (1x1024) and ResNet-50 (8x224) forward, torch.export'ed here, run by
   `tpuc run --repeat` against torch eager (CUDA events).

Prints a table and writes OUT/gpu_check.json ($OUT, else the current folder).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import transformers


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def gpt2_tiny():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {"gpt2": gpt2, "gpt2-tiny": gpt2_tiny}


def write_state(step_dir: str, model: torch.nn.Module) -> int:
    """Writes every state file the manifest names and the folder lacks; returns how many."""
    manifest = json.load(open(os.path.join(step_dir, "step.json")))
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    written = 0
    for e in manifest["state"]:
        path = os.path.join(step_dir, e["file"])
        if os.path.exists(path):
            continue
        kind, _, rest = e["name"].partition("/")
        dtype = getattr(np, e["dtype"])
        if kind == "param":
            v = params[rest].detach().cpu().numpy()
        elif kind == "buffer":
            v = buffers[rest].detach().cpu().numpy()
        elif kind == "optim":
            key, _, _fqn = rest.partition("/")
            v = np.zeros(e["shape"], dtype=dtype)  # torch's initial AdamW state: step 0, zero moments
            assert key in ("step", "exp_avg", "exp_avg_sq"), e["name"]
        else:
            raise SystemExit(f"{e['name']}: no value to write")
        assert list(v.shape) == e["shape"] and v.dtype == dtype, (e, v.shape, v.dtype)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, v)
        written += 1
    return written


def tpuc_json(cmd: list[str], env: dict) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return report


def eager_train(make, ids: torch.Tensor, steps: int, device: str, compiled: bool = False) -> tuple[list[float], float]:
    """torch's own loop; `compiled`: the model through torch.compile (inductor), the optimizer
    eager."""
    model = make().to(device).train()
    if compiled:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = ids.to(device)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # waits for the step, as tpuc's loss read does
        times.append((time.perf_counter() - t0) * 1e3)
    return losses, float(np.median(times[1:]))


def eager_infer_ms(model, args, device: str, runs: int = 20) -> float:
    model = model.to(device).eval()
    args = tuple(a.to(device) for a in args)
    with torch.no_grad():
        for _ in range(3):
            model(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model(*args)
            if device == "cuda":
                torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpuc", required=True)
    ap.add_argument("--step", required=True, help="an export of scripts/export_train_step.py")
    ap.add_argument("--model", default="gpt2", choices=sorted(MODELS))
    ap.add_argument("--target", default="gpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--infer", action="store_true")
    ap.add_argument("--inductor", action="store_true", help="also time torch.compile (inductor) training")
    a = ap.parse_args()
    device = "cuda" if a.target == "gpu" else "cpu"
    out_dir = os.environ.get("OUT", ".")
    env = dict(os.environ)
    if a.target == "gpu" and "TPUC_PJRT_GPU_PLUGIN" not in env:
        import site

        for d in site.getsitepackages():
            found = sorted(glob.glob(os.path.join(d, "jax_plugins", "xla_cuda1*", "xla_cuda_plugin.so")), reverse=True)
            if found:
                env["TPUC_PJRT_GPU_PLUGIN"] = found[0]
                break
    report: dict = {"torch": torch.__version__, "target": a.target, "model": a.model}
    if device == "cuda":
        report["device"] = torch.cuda.get_device_name()

    t0 = time.perf_counter()
    report["state_files_written"] = write_state(a.step, MODELS[a.model]())
    report["state_write_s"] = round(time.perf_counter() - t0, 1)
    ids_file = os.path.join(a.step, "ids.npy")
    step = tpuc_json([a.tpuc, "run", a.step, "--steps", str(a.steps), "--target", a.target, "--inputs", ids_file, ids_file,
                      "--json", "--no-cache"], env)
    report["tpuc_step"] = step
    ids = torch.from_numpy(np.load(ids_file))
    losses, ms = eager_train(MODELS[a.model], ids, a.steps, device)
    report["eager_step"] = {"losses": losses, "ms_per_step": ms}
    rel = [abs(x - y) / abs(y) for x, y in zip(step["losses"], losses)]
    report["max_loss_rel_diff"] = max(rel)
    if a.inductor:
        try:
            t0 = time.perf_counter()
            ind_losses, ind_ms = eager_train(MODELS[a.model], ids, a.steps, device, compiled=True)
            report["inductor_step"] = {"ms_per_step": ind_ms, "wall_s": round(time.perf_counter() - t0, 1),
                                       "losses": ind_losses}
        except Exception as e:
            report["inductor_error"] = f"{type(e).__name__}: {e}"

    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    try:
        if a.infer:
            report["inference"] = infer_report(a, env, out_dir, device)
    except Exception as e:  # the training figures above stand
        report["inference_error"] = f"{type(e).__name__}: {e}"
        print(report["inference_error"], file=sys.stderr)
    print_table(a, report, step, losses, ms)
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)


def infer_report(a, env: dict, out_dir: str, device: str) -> dict:
    if True:
        import torchvision

        infer = {}
        with torch.no_grad():
            torch.manual_seed(0)
            cases = {
                "gpt2_1x1024": (transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)), (torch.randint(0, 50257, (1, 1024)),)),
                "resnet50_8x224": (torchvision.models.resnet50(), (torch.randn(8, 3, 224, 224),)),
            }
            for name, (model, args) in cases.items():
                model.eval()
                path = os.path.join(out_dir, f"{name}.pt2")
                torch.export.save(torch.export.export(model, args).run_decompositions(), path)
                npys = []
                for i, t in enumerate(args):
                    p = os.path.join(out_dir, f"{name}_in{i}.npy")
                    np.save(p, t.numpy())
                    npys.append(p)
                r = tpuc_json([a.tpuc, "run", path, "--target", a.target, "--repeat", "20", "--json", "--no-cache", "--inputs", *npys], env)
                infer[name] = {"tpuc_ms": r["median_us"]["total"] / 1e3, "tpuc_execute_ms": r["median_us"]["execute"] / 1e3,
                               "eager_ms": eager_infer_ms(model, args, device), "wall_s": r["wall_s"]}
                os.remove(path)
        return infer


def print_table(a, report: dict, step: dict, losses: list, ms: float) -> None:
    print(f"{'':28} {'tpuc':>10} {'torch eager':>12}")
    print(f"{a.model + ' train step ms':28} {step['ms_per_step']:10.2f} {ms:12.2f}")
    if "inductor_step" in report:
        print(f"{'  torch inductor ms':28} {'':10} {report['inductor_step']['ms_per_step']:12.2f}")
    print(f"{'  of which XLA execute ms':28} {step['execute_ms']:10.2f}")
    print(f"{'  bytes up / down per step':28} {step['h2d_bytes_per_step']:10.0f} / {step['d2h_bytes_per_step']:.0f}")
    print(f"{'  loss step 1 / last':28} {step['losses'][0]:10.4f} {losses[0]:12.4f}")
    print(f"{'':28} {step['losses'][-1]:10.4f} {losses[-1]:12.4f}   max rel diff {report['max_loss_rel_diff']:.2e}")
    for name, r in report.get("inference", {}).items():
        print(f"{name + ' forward ms':28} {r['tpuc_ms']:10.2f} {r['eager_ms']:12.2f}   (tpuc execute {r['tpuc_execute_ms']:.2f})")


if __name__ == "__main__":
    main()
