#!/usr/bin/env python3
"""tpuc vs torch_xla 2.9: StableHLO op count and XLA-CPU execution time, side by side.

Models (GPT2Block from tests/fixtures/make_fixtures.py, seed 0, batch 1, seq 128, float32):
  gpt2_block  one block, d_model 256, 4 heads, MLP 1024
  gpt2_12l    12 blocks of GPT-2-small's shape (d_model 768, 12 heads, MLP 3072)

Two phases, two interpreters:
  1. export (torch 2.9 + torch-xla 2.9 venv, PJRT_DEVICE=CPU): torch.export.export the model,
     torch.export.save it (the archive tpuc lowers), lower the same ExportedProgram with
     torch_xla.stablehlo.exported_program_to_stablehlo(ep).get_stablehlo_text(), and save the
     argument list of torch_xla's @main (from its bundle's input_locations: parameters,
     the user input, lifted constants), the named weights, the input and eager's output.
  2. bench (this interpreter: the main venv, jaxlib 0.10.2): `tpuc lower` (default pipeline
     and --no-fusion), count ops, compile every module once on the XLA CPU client (the approach
     of lowering-stablehlo/tests/run_stablehlo.py), put the arguments on the device once
     (weights resident), check every output against eager, then time execute + block for
     all programs of a model round-robin (so background load hits them alike): warm-up, then
     min / median / max of N runs.

Op count: lines with `= stablehlo.` or `= "stablehlo.` (composites count once where they are
called; their decomposition functions count in "all"), in the whole module / in @main.

Usage (from the repository root, main venv):
  .venv/bin/python scripts/bench_torch_xla.py [--runs 200] [--runs-12l 30] [--skip-12l]
      [--xla-python target/venv-xla/bin/python] [--tpuc target/release/tpuc]
      [--out target/bench-torch-xla] [--reexport]
Set up the torch_xla venv (about 7 GB; target/ is ignored by git):
  python3.11 -m venv target/venv-xla && target/venv-xla/bin/pip install torch==2.9.0 torch-xla==2.9.0
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    # name: (layers, d_model, heads, mlp_hidden)
    "gpt2_block": (1, 256, 4, 1024),
    "gpt2_12l": (12, 768, 12, 3072),
}
SEQ = 128
BATCH = 1


# --------------------------------------------------------------------------- phase 1: export


def export_phase(out_dir, names):
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    import torch
    import torch.nn as nn
    from make_fixtures import GPT2Block, set_determinism
    from torch_xla.stablehlo import exported_program_to_stablehlo

    class Stack(nn.Module):
        def __init__(self, layers, d_model, n_head, hidden):
            super().__init__()
            self.blocks = nn.Sequential(*[GPT2Block(d_model, n_head, hidden) for _ in range(layers)])

        def forward(self, x):
            return self.blocks(x)

    def np_of(v):
        if isinstance(v, torch.Tensor):
            return v.detach().cpu().contiguous().numpy()
        return np.asarray(v)

    for name in names:
        layers, d, h, hidden = MODELS[name]
        set_determinism()
        model = Stack(layers, d, h, hidden).eval()
        x = torch.randn(BATCH, SEQ, d)
        with torch.no_grad():
            expected = model(x)
            t0 = time.perf_counter()
            ep = torch.export.export(model, (x,))
            t1 = time.perf_counter()
            shlo = exported_program_to_stablehlo(ep)
            text = shlo.get_stablehlo_text()
            t2 = time.perf_counter()
        torch.export.save(ep, os.path.join(out_dir, f"{name}.pt2"))
        with open(os.path.join(out_dir, f"{name}.torch_xla.mlir"), "w") as f:
            f.write(text)

        bundle = shlo._bundle
        meta = bundle.stablehlo_funcs[0].meta
        args = []
        for loc in meta.input_locations:
            kind = loc.type_.value
            if kind == "parameter":
                args.append(np_of(bundle.state_dict[loc.name]))
            elif kind == "input_arg":
                args.append(x.numpy() if loc.position == 0 else None)
            elif kind == "constant":
                args.append(np_of(bundle.additional_constants[loc.position]))
            else:
                raise SystemExit(f"{name}: unknown torch_xla input location {loc}")
        np.savez(os.path.join(out_dir, f"{name}.torch_xla.args.npz"), *args)

        weights = {k: np_of(v) for k, v in ep.state_dict.items()}
        weights.update({k: np_of(v) for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
        np.savez(os.path.join(out_dir, f"{name}.weights.npz"), **weights)
        np.save(os.path.join(out_dir, f"{name}.x.npy"), x.numpy())
        np.save(os.path.join(out_dir, f"{name}.expected.npy"), expected.numpy())
        info = {"torch": torch.__version__, "export_ms": (t1 - t0) * 1e3, "torch_xla_lower_ms": (t2 - t1) * 1e3}
        with open(os.path.join(out_dir, f"{name}.export.json"), "w") as f:
            json.dump(info, f)
        print(f"exported {name}: torch.export {info['export_ms']:.0f} ms, torch_xla lower {info['torch_xla_lower_ms']:.0f} ms", flush=True)


# --------------------------------------------------------------------------- phase 2: bench


def op_counts(mlir):
    total = main = 0
    in_main = False
    for line in mlir.splitlines():
        if "func.func" in line:
            in_main = re.search(r"@main\b", line) is not None
            continue
        if "= stablehlo." in line or '= "stablehlo.' in line:
            total += 1
            main += in_main
    return total, main


def main_signature(mlir):
    for line in mlir.splitlines():
        if "func.func" in line and re.search(r"@main\b", line):
            return line
    raise SystemExit("no @main in module")


def tpuc_args(mlir, weights, inputs):
    """tpuc's @main: each argument carries {tpuc.kind, tpuc.name}; weights first, then inputs."""
    sig = main_signature(mlir).split("->")[0]
    args, next_input = [], 0
    for m in re.finditer(r"%arg\d+: [^{]*\{([^}]*)\}", sig):
        attrs = dict(re.findall(r'(tpuc\.\w+) = "([^"]*)"', m.group(1)))
        kind, name = attrs.get("tpuc.kind"), attrs.get("tpuc.name")
        if kind == "input":
            args.append(inputs[next_input])
            next_input += 1
        elif name in weights:
            args.append(weights[name])
        else:
            raise SystemExit(f"tpuc argument {kind} {name!r} not found among the saved weights")
    return args


class Bench:
    def __init__(self):
        sys.path.insert(0, os.path.join(ROOT, "lowering-stablehlo", "tests"))
        from run_stablehlo import Runner  # the jaxlib 0.10.2 XLA-CPU runner of the tests

        self.r = Runner()

    def prepare(self, mlir, args):
        import types

        r = self.r
        xc, jax = r.xc, r.jax
        t0 = time.perf_counter()
        exe = r.client.compile_and_load(mlir, xc.DeviceList((r.dev,)), xc.CompileOptions())
        compile_ms = (time.perf_counter() - t0) * 1e3
        arrays = []
        for a in args:
            a = np.ascontiguousarray(a)
            aval = types.SimpleNamespace(shape=a.shape, dtype=a.dtype, weak_type=False)
            arrays.append(jax.batched_device_put(aval, r.sharding, [a], [r.dev], enable_x64=True))
        return exe, arrays, compile_ms

    @staticmethod
    def execute(exe, arrays):
        outs = exe.execute_sharded(arrays).disassemble_into_single_device_arrays()
        for o in outs:
            o[0].block_until_ready()
        return outs

    def outputs(self, exe, arrays):
        return [np.asarray(o[0]._single_device_array_to_np_array_did_copy()[0]) for o in self.execute(exe, arrays)]


def tpuc_lower(binary, model, extra):
    t0 = time.perf_counter()
    r = subprocess.run([binary, "lower", model, *extra], capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise SystemExit(f"tpuc lower {model} {' '.join(extra)} failed:\n{r.stderr[-4000:]}")
    return r.stdout, ms


def bench_model(bench, name, out_dir, binary, runs, warmup):
    p = lambda suffix: os.path.join(out_dir, f"{name}{suffix}")  # noqa: E731
    x = np.load(p(".x.npy"))
    expected = np.load(p(".expected.npy"))
    with np.load(p(".weights.npz")) as z:
        weights = {k: z[k] for k in z.files}
    with np.load(p(".torch_xla.args.npz")) as z:
        xla_args = [z[f"arr_{i}"] for i in range(len(z.files))]
    with open(p(".torch_xla.mlir")) as f:
        xla_mlir = f.read()
    with open(p(".export.json")) as f:
        info = json.load(f)

    programs = []  # (exporter label, mlir, args, lower ms)
    for label, extra in (("tpuc", []), ("tpuc --no-fusion", ["--no-fusion"])):
        mlir, ms = tpuc_lower(binary, p(".pt2"), extra)
        with open(p(f".{label.replace(' --', '.').replace('-', '_')}.mlir"), "w") as f:
            f.write(mlir)
        programs.append((label, mlir, tpuc_args(mlir, weights, [x]), ms))
    programs.append((f"torch_xla {info.get('torch', '')}".strip(), xla_mlir, xla_args, info["torch_xla_lower_ms"]))

    rows = []
    prepared = []
    tol = 2e-4 if name == "gpt2_block" else 2e-3
    for label, mlir, args, lower_ms in programs:
        exe, arrays, compile_ms = bench.prepare(mlir, args)
        got = bench.outputs(exe, arrays)
        err = float(np.max(np.abs(got[0].astype(np.float64) - expected.astype(np.float64))))
        if len(got) != 1 or got[0].shape != expected.shape or not err <= tol * max(1.0, float(np.max(np.abs(expected)))):
            print(f"WARNING {name} / {label}: output differs from eager (max abs err {err:.3g})", flush=True)
        total, main = op_counts(mlir)
        rows.append({"label": label, "ops": total, "main_ops": main, "lower_ms": lower_ms, "compile_ms": compile_ms, "err": err, "times": []})
        prepared.append((exe, arrays))

    for _ in range(warmup):
        for exe, arrays in prepared:
            bench.execute(exe, arrays)
    for _ in range(runs):
        for row, (exe, arrays) in zip(rows, prepared):
            t0 = time.perf_counter()
            bench.execute(exe, arrays)
            row["times"].append((time.perf_counter() - t0) * 1e3)
    for row in rows:
        row["median"] = statistics.median(row["times"])
        row["min"] = min(row["times"])
        row["max"] = max(row["times"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", nargs="?", default="bench", choices=["bench", "export"])
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench-torch-xla"))
    ap.add_argument("--xla-python", default=os.path.join(ROOT, "target", "venv-xla", "bin", "python"))
    ap.add_argument("--tpuc", default=os.path.join(ROOT, "target", "release", "tpuc"))
    ap.add_argument("--runs", type=int, default=200, help="timed runs per program, GPT-2 block")
    ap.add_argument("--runs-12l", type=int, default=30, help="timed runs per program, 12-layer model")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip-12l", action="store_true")
    ap.add_argument("--only", help=argparse.SUPPRESS)  # export phase: comma-separated model names
    ap.add_argument("--reexport", action="store_true", help="export again even if the files exist")
    a = ap.parse_args()
    names = ["gpt2_block"] + ([] if a.skip_12l else ["gpt2_12l"])
    os.makedirs(a.out, exist_ok=True)

    if a.phase == "export":
        export_phase(a.out, a.only.split(",") if a.only else names)
        return

    todo = [n for n in names if a.reexport or not os.path.exists(os.path.join(a.out, f"{n}.export.json"))]
    if todo:
        env = dict(os.environ, PJRT_DEVICE="CPU")
        cmd = [a.xla_python, os.path.abspath(__file__), "export", "--out", a.out, "--only", ",".join(todo)]
        subprocess.run(cmd, check=True, env=env)

    bench = Bench()
    results = {}
    for n in names:
        runs = a.runs if n == "gpt2_block" else a.runs_12l
        results[n] = bench_model(bench, n, a.out, a.tpuc, runs, a.warmup)

    print()
    print(f"XLA CPU (jaxlib 0.10.2), {os.cpu_count()} CPUs; times are execute + block_until_ready, weights resident, programs interleaved")
    print()
    print("| model | exporter | StableHLO ops (all / main) | XLA-CPU median ms | min / max ms | ratio tpuc/torch_xla (median) |")
    print("|---|---|---|---|---|---|")
    for n, rows in results.items():
        ref = rows[-1]["median"]
        layers, d, h, hidden = MODELS[n]
        desc = f"{n} ({layers}×, d {d}, {h} heads, MLP {hidden}, seq {SEQ})"
        for row in rows:
            ratio = "—" if row is rows[-1] else f"{row['median'] / ref:.2f}"
            print(f"| {desc} | {row['label']} | {row['ops']} / {row['main_ops']} | {row['median']:.3f} | {row['min']:.3f} / {row['max']:.3f} | {ratio} |")
    print()
    for n, rows in results.items():
        runs = len(rows[0]["times"])
        details = "; ".join(f"{r['label']}: lower {r['lower_ms']:.0f} ms, XLA compile {r['compile_ms']:.0f} ms, max |err| vs eager {r['err']:.2g}" for r in rows)
        print(f"{n} ({runs} runs each): {details}")


if __name__ == "__main__":
    main()
