#!/usr/bin/env python3
"""PyTorch's OpInfo suite through `torch.compile(backend="tpuc")`, compared with eager.

Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` that supports the
dtype on CPU (float32; int64, bfloat16 or float16 with `--dtype`) runs its first samples as

    torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(*tensors)

where `f` calls the op on the sample with every tensor of the sample as a graph input (the
other arguments are constants of the graph). The results are compared with eager PyTorch on
the same inputs: atol 1e-3 / rtol 1e-5 with NaNs equal (16-bit floats: one rounding step of the
dtype, bfloat16 atol 1e-2 / rtol 1.6e-2, float16 atol 1e-3 / rtol 1e-3), dtypes and shapes exact;
random ops by shape and dtype only; sort-like ops by their values (index outputs may differ on ties; argsort's through the values
they pick, unless `stable=True`);
eigenvectors and singular vector pairs up to their sign. Where a
floating result differs, the sample is also run eagerly in float64: elements no further from that
than eager's own result pass (tpuc may be the more accurate one, as near a pole).

Each entry (`name` or `name.variant`) ends as one of:
  pass      every sample compiled and equals eager
  wrong     a sample compiled, ran and differs from eager
  refused   tpuc refused an ATen op (the `ops` list names them)
  error     anything else tpuc raised (compile, run or shape errors; `message`)
  crash     the worker process died or hung on it
  excluded  aot_eager cannot compile it either (Dynamo / AOTAutograd limits), or it has no
            samples: not counted

Usage:
  run.py [--dtype float32|int64|bfloat16|float16] [--jobs N] [--samples K] [--only a,b] [--out results.jsonl]
         [--update] [--check]

  --update  rewrites tests/opinfo/expected_<dtype>.json (entry -> status, why) from this run
            and the coverage table docs/opinfo.md from both dtypes' records.
  --check   fails (exit 1) when an entry that passes in expected_<dtype>.json does not pass
            now, or the pass rate is below the one recorded there; entries that newly pass
            are listed (run --update to record them), and so are the entries that do not
            pass: known (recorded so) or not recorded.

Workers are subprocesses (`--jobs`, default the CPU count) fed one entry at a time; an entry
that kills its worker or runs past --timeout seconds is recorded as `crash` and a new worker
takes the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "opinfo.md")

# Ops whose results are random: compared by shape and dtype only.
RANDOM = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "rand_like", "randint_like", "randn_like", "randint", "randn", "rand", "uniform",
    "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "torch.empty", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "empty_permuted",
}
# Ops returning (values, indices) or indices where ties make indices implementation-defined:
# only floating / value outputs are compared.
SORT_LIKE = {
    "sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "max.reduction_with_dim",
    "min.reduction_with_dim", "cummax", "cummin", "nn.functional.max_pool1d", "nn.functional.max_pool2d",
    "nn.functional.max_pool3d", "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d", "argmax", "argmin",
}
# Ops returning eigenvectors, defined only up to the sign of each (column) vector: that output
# is compared after aligning each column's sign with eager's.
SIGN_FREE = {"linalg.eigh": 1}
# SVDs: (U, S, Vh) for linalg.svd, (U, S, V) for svd; a singular vector pair is defined up to
# one sign, aligned with eager's through U before comparing.
SVD_LIKE = {"linalg.svd": "Vh", "svd": "V"}
# (atol, rtol) per dtype: for 16-bit floats one rounding step, the difference between eager's
# rule (compute in float32, round once) and any other order of the same float32 arithmetic.
TOLERANCE = {"bfloat16": (1e-2, 1.6e-2), "float16": (1e-3, 1e-3)}
DTYPES = ("float32", "int64", "bfloat16", "float16")
# The suite runs forward only (samples without gradients). Entries whose backward a test of
# its own checks against eager (training through torch.compile, loss and every gradient):
# entry -> that test, as docs/opinfo.md lists them.
BACKWARD_TESTED = {
    "masked_scatter": "tests/python/test_backward_ops.py",
    "nn.functional.adaptive_avg_pool2d": "tests/python/test_backward_ops.py",
    "nn.functional.adaptive_avg_pool3d": "tests/python/test_backward_ops.py",
    "nn.functional.conv_transpose1d": "tests/python/test_backward_ops.py",
    "nn.functional.conv_transpose2d": "tests/python/test_backward_ops.py",
    "nn.functional.conv_transpose3d": "tests/python/test_backward_ops.py",
    "nn.functional.embedding_bag": "tests/python/test_backward_ops.py",
}
# Floating dtypes whose results are also checked against float64 where they differ from eager.
WIDENED = ("float32", "bfloat16", "float16")
STATUSES = ("pass", "wrong", "refused", "error", "crash", "excluded")


def _widened(dtype) -> bool:
    return str(dtype).removeprefix("torch.") in WIDENED


def entry_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def eligible(dtype_name: str):
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    dtype = getattr(torch, dtype_name)
    return [op for op in op_db if dtype in op.supported_dtypes("cpu")]


# ---------------------------------------------------------------------------------------------
# One entry, in a worker.


def _graph_fn(op, sample):
    """(f, tensors): f(*tensors) calls the op on the sample with its tensors as inputs."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    idx = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in idx]

    def f(*ts):
        filled = list(leaves)
        for i, t in zip(idx, ts):
            filled[i] = t
        inp, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op.op(inp, *args, **kwargs)

    return f, tensors


def _argsort_values(sample, idx):
    """argsort's indices as the values they pick. Without `stable=True` the order among equal
    values is the implementation's (eager's CPU kernel is not stable then), so indices are
    compared through the values they select; a stable argsort is compared as it is."""
    import torch

    if sample.kwargs.get("stable", False) or not isinstance(idx, torch.Tensor) or sample.input.dim() == 0:
        return idx
    dim = sample.args[0] if sample.args else sample.kwargs.get("dim", -1)
    return torch.take_along_dim(sample.input, idx, dim)


def _closer_to_exact(want, got, exact, atol: float = 1e-3, rtol: float = 1e-5) -> bool:
    """True if `got` is, element by element, within the tolerance of the float64 result or no
    further from it than eager's own result is (eager's NaN is no nearer than any number)."""
    import torch

    if exact is None or not isinstance(exact, torch.Tensor) or exact.shape != got.shape:
        return False
    e = exact.detach().double()
    g, w = got.detach().double(), want.detach().double()
    err_g, err_w = (g - e).abs(), (w - e).abs()
    # Eager's NaN where float64 is a number (an overflow in the input dtype, say) is as far from
    # it as can be.
    err_w = torch.where(w.isnan() & ~e.isnan(), torch.inf, err_w)
    ok = (err_g <= atol + rtol * e.abs()) | (err_g <= err_w) | (g.isnan() & e.isnan()) | (g == e)
    return bool(ok.all())


def _compare(name: str, want, got, exact=None, tol: tuple[float, float] = (1e-3, 1e-5)) -> str | None:
    """None when `got` matches eager's `want` under the suite's rules (`tol`: atol, rtol of
    floating results), else why not. Where they differ, `exact` (eager in float64, when the
    sample is floating) may show that tpuc's result is the more accurate one: that passes too."""
    import torch
    from torch.utils import _pytree as pytree

    wl, ws = pytree.tree_flatten(want)
    gl, gs = pytree.tree_flatten(got)
    if ws != gs:
        return f"result structure {gs} != eager's {ws}"
    if name in SVD_LIKE and len(gl) == 3 and gl[0].dim() >= 2 and gl[0].numel() and gl[0].shape == wl[0].shape:
        k = gl[1].shape[-1]
        flip = torch.where((gl[0][..., :k] * wl[0][..., :k]).sum(-2, keepdim=True) < 0, -1.0, 1.0).to(gl[0].dtype)
        u = gl[0].clone()
        u[..., :k] = u[..., :k] * flip
        v = gl[2].clone()
        if SVD_LIKE[name] == "Vh":
            v[..., :k, :] = v[..., :k, :] * flip.transpose(-2, -1)
        else:
            v[..., :k] = v[..., :k] * flip
        gl = [u, gl[1], v]
    for k, (w, g) in enumerate(zip(wl, gl)):
        where = f"output {k}" if len(wl) > 1 else "output"
        if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"{where}: {type(g).__name__} != eager's {type(w).__name__}"
        if not isinstance(w, torch.Tensor):
            if w != g and not (isinstance(w, float) and isinstance(g, float) and abs(w - g) <= tol[0] + tol[1] * abs(w)):
                return f"{where}: {g!r} != eager's {w!r}"
            continue
        if g.dtype != w.dtype:
            return f"{where}: dtype {g.dtype} != eager's {w.dtype}"
        if g.shape != w.shape:
            return f"{where}: shape {list(g.shape)} != eager's {list(w.shape)}"
        if name in RANDOM:
            continue
        if name in SORT_LIKE and not (w.dtype.is_floating_point or w.dtype.is_complex) and len(wl) > 1:
            continue
        if SIGN_FREE.get(name) == k and g.dim() >= 2:
            flip = torch.where((g * w).sum(-2, keepdim=True) < 0, -1.0, 1.0).to(g.dtype)
            g = g * flip
        try:
            atol, rtol = tol if w.dtype.is_floating_point or w.dtype.is_complex else (1e-3, 1e-5)
            torch.testing.assert_close(g.detach().cpu(), w.detach().cpu(), atol=atol, rtol=rtol, equal_nan=True,
                                       check_stride=False, check_device=False)
        except AssertionError as e:
            ex = pytree.tree_flatten(exact)[0] if exact is not None else []
            if _widened(w.dtype) and k < len(ex) and _closer_to_exact(w, g, ex[k], atol, rtol):
                continue
            return f"{where}: " + " ".join(str(e).split())[:300]
    return None


def _exact(f, tensors):
    """The sample computed in float64 (floating tensors widened), or None if the op refuses."""
    import torch

    try:
        return f(*[t.double() if _widened(t.dtype) else t.clone() for t in tensors])
    except Exception:
        return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _aot_eager_ok(f, tensors) -> bool:
    import torch

    torch._dynamo.reset()
    try:
        torch.compile(f, backend="aot_eager", fullgraph=True)(*[t.clone() for t in tensors])
        return True
    except Exception:
        return False


def run_entry(op, dtype_name: str, samples: int) -> dict:
    import torch

    import tpuc

    name = entry_name(op)
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    try:
        got_samples = []
        for s in op.sample_inputs("cpu", dtype, requires_grad=False):
            got_samples.append(s)
            if len(got_samples) == samples:
                break
    except Exception as e:
        return {"entry": name, "status": "excluded", "message": f"sample inputs: {_first_line(e)}"}
    if not got_samples:
        return {"entry": name, "status": "excluded", "message": "no samples"}
    for si, sample in enumerate(got_samples):
        f, tensors = _graph_fn(op, sample)
        try:
            torch.manual_seed(si)
            want = f(*[t.clone() for t in tensors])
        except Exception as e:
            return {"entry": name, "status": "excluded", "message": f"eager: {_first_line(e)}"}
        torch._dynamo.reset()
        try:
            torch.manual_seed(si)
            got = torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(*[t.clone() for t in tensors])
        except Exception as e:
            if not _aot_eager_ok(f, tensors):
                return {"entry": name, "status": "excluded", "message": f"aot_eager fails too: {_first_line(e)}"}
            cause = e
            while not isinstance(cause, tpuc.TpucError):
                inner = getattr(cause, "inner_exception", None) or cause.__cause__
                if inner is None:
                    break
                cause = inner
            if isinstance(cause, tpuc.TpucUnsupportedError):
                ops = sorted({n.get("target") or "?" for n in cause.nodes}) or ["?"]
                return {"entry": name, "status": "refused", "ops": ops, "sample": si}
            return {"entry": name, "status": "error", "message": _first_line(cause), "sample": si}
        if name == "argsort":
            want, got = _argsort_values(sample, want), _argsort_values(sample, got)
        tol = TOLERANCE.get(dtype_name, (1e-3, 1e-5))
        why = _compare(name, want, got, tol=tol)
        if why is not None and dtype_name in WIDENED:
            why = _compare(name, want, got, _exact(f, tensors), tol=tol)
        if why is not None:
            return {"entry": name, "status": "wrong", "message": why, "sample": si}
    return {"entry": name, "status": "pass"}


def worker(args) -> int:
    """Runs the entries named on stdin, one per line, appending each result to --out."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    by_name = {entry_name(op): op for op in eligible(args.dtype)}
    with open(args.out, "a") as out:
        out.write(json.dumps({"ready": True}) + "\n")
        out.flush()
        for line in sys.stdin:
            n = line.strip()
            if not n:
                continue
            t0 = time.perf_counter()
            try:
                r = run_entry(by_name[n], args.dtype, args.samples)
            except Exception as e:
                r = {"entry": n, "status": "error", "message": "harness: " + _first_line(e),
                     "trace": traceback.format_exc()[-2000:]}
            r["seconds"] = round(time.perf_counter() - t0, 2)
            out.write(json.dumps(r) + "\n")
            out.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# The coordinator.


class Worker:
    """A worker process fed one entry at a time; its results arrive in a JSON-lines file."""

    def __init__(self, dtype: str, samples: int, path: str, env: dict):
        self.path = path
        open(path, "w").close()
        self.err = open(path + ".err", "w")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--out", path,
                                   "--dtype", dtype, "--samples", str(samples)],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.err,
                                  text=True)
        self.pos = 0
        self.current: str | None = None
        self.since = time.monotonic()

    def give(self, name: str) -> None:
        self.current, self.since = name, time.monotonic()
        self.p.stdin.write(name + "\n")
        self.p.stdin.flush()

    def results(self) -> list[dict]:
        with open(self.path) as fh:
            fh.seek(self.pos)
            text = fh.read()
        done = text[: text.rfind("\n") + 1]
        self.pos += len(done.encode())
        out = [json.loads(line) for line in done.splitlines() if line.strip()]
        return [r for r in out if "entry" in r]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.err.close()

    def last_error(self) -> str:
        lines = open(self.path + ".err").read().strip().splitlines()
        return lines[-1][:200] if lines else ""


def run_all(dtype: str, names: list[str], jobs: int, samples: int, timeout: float) -> dict[str, dict]:
    """Runs `names` over `jobs` worker processes; an entry that kills or hangs its worker is
    recorded as `crash` and the worker is replaced."""
    todo = list(reversed(names))
    results: dict[str, dict] = {}
    tmp = tempfile.mkdtemp(prefix="tpuc-opinfo-")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("TPUC_") and not k.startswith("TPUC_PJRT"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    serial = 0

    def spawn() -> Worker:
        nonlocal serial
        serial += 1
        return Worker(dtype, samples, os.path.join(tmp, f"w{serial}.jsonl"), env)

    workers = [spawn() for _ in range(min(jobs, len(names)))]
    shown = -1
    while len(results) < len(names):
        for k, w in enumerate(workers):
            for r in w.results():
                results[r["entry"]] = r
                if r["entry"] == w.current:
                    w.current = None
            dead = w.p.poll() is not None
            hung = w.current is not None and time.monotonic() - w.since > timeout
            if dead or hung:
                if w.current is not None and w.current not in results:
                    why = f"no result after {timeout:.0f} s" if hung else f"worker exited with {w.p.returncode}: {w.last_error()}"
                    results[w.current] = {"entry": w.current, "status": "crash", "message": why}
                w.stop()
                workers[k] = w = spawn()
            if w.current is None and todo:
                w.give(todo.pop())
        if len(results) != shown and sys.stderr.isatty():
            shown = len(results)
            print(f"\r  {shown}/{len(names)} entries", end="", file=sys.stderr, flush=True)
        time.sleep(0.05)
    for w in workers:
        w.p.stdin.close()
        w.stop()
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return results


def summary(results: dict[str, dict]) -> dict:
    counts = {s: 0 for s in STATUSES}
    for r in results.values():
        counts[r["status"]] += 1
    counted = sum(counts.values()) - counts["excluded"]
    counts["eligible"] = counted
    counts["rate"] = round(100.0 * counts["pass"] / counted, 1) if counted else 0.0
    return counts


def print_table(dtype: str, results: dict[str, dict], elapsed: float) -> None:
    c = summary(results)
    print(f"\nOpInfo suite, {dtype} ({len(results)} entries, {elapsed:.0f} s)\n")
    print("| pass | wrong | refused | error | crash | excluded | pass rate (of counted) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {c['pass']} | {c['wrong']} | {c['refused']} | {c['error']} | {c['crash']} | {c['excluded']} | "
          f"{c['rate']} % of {c['eligible']} |")
    ops: dict[str, int] = {}
    for r in results.values():
        for o in r.get("ops", []):
            ops[o] = ops.get(o, 0) + 1
    if ops:
        print("\nRefused ATen ops (entries):", ", ".join(f"{o} ({n})" for o, n in sorted(ops.items(), key=lambda x: (-x[1], x[0]))))


def expected_path(dtype: str) -> str:
    return os.path.join(HERE, f"expected_{dtype}.json")


def why(r: dict) -> str:
    if r.get("ops"):
        return "refuses " + ", ".join(o.removeprefix("aten.") for o in r["ops"])
    return " ".join((r.get("message") or "").split())[:160]


def write_expected(dtype: str, results: dict[str, dict]) -> None:
    data = {"summary": summary(results),
            "entries": {n: [results[n]["status"], why(results[n])] for n in sorted(results)}}
    with open(expected_path(dtype), "w") as fh:
        json.dump(data, fh, indent=0, sort_keys=False)
        fh.write("\n")


# Statuses of entries that are counted and do not pass.
FAILING = ("wrong", "refused", "error", "crash")


def known_failures(recorded: dict) -> dict[str, list[str]]:
    """The entries of an expected_<dtype>.json record that do not pass, by status: each is
    known (recorded so), and `--check` passes while it stays so."""
    out: dict[str, list[str]] = {s: [] for s in FAILING}
    for n, (st, _) in sorted(recorded["entries"].items()):
        if st in out:
            out[st].append(n)
    return out


def write_doc() -> None:
    """docs/opinfo.md from the recorded results of every dtype."""
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w") as fh:
        fh.write(render_doc())


def render_doc() -> str:
    """The text of docs/opinfo.md, from the recorded results of every dtype."""
    rec = {}
    for d in DTYPES:
        if os.path.exists(expected_path(d)):
            rec[d] = json.load(open(expected_path(d)))
    lines = [
        "# OpInfo coverage",
        "",
        "Generated by `tests/opinfo/run.py --update` (do not edit): PyTorch's OpInfo database run through",
        "`torch.compile(f, backend=\"tpuc\", fullgraph=True, options={\"strict\": True})`, first two samples of",
        "each entry, compared with eager (atol 1e-3, rtol 1e-5; bfloat16 atol 1e-2, rtol 1.6e-2 and float16",
        "atol 1e-3, rtol 1e-3, one rounding step; random ops by shape and dtype; sort-like ops by values;",
        "eigenvectors up to the sign of each vector; a floating element that differs from eager passes when",
        "it is no further from eager's float64 result than eager's own one). `excluded` entries are not",
        "counted: `aot_eager` cannot compile them either, or they have no samples on CPU. `scripts/test.sh` runs the suite and fails when an entry recorded as",
        "passing stops passing.",
        "",
        "The suite runs each entry's forward only (its samples carry no gradients): `pass` says nothing of",
        "the op's backward. The backwards of the entries in the last section are checked against eager by",
        "tests of their own (training through `torch.compile`, the loss and every gradient).",
        "",
        "| dtype | pass | wrong | refused | error | crash | excluded | pass rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d, r in rec.items():
        c = r["summary"]
        lines.append(f"| {d} | {c['pass']} | {c['wrong']} | {c['refused']} | {c['error']} | {c['crash']} | "
                     f"{c['excluded']} | {c['rate']} % of {c['eligible']} |")
    lines += [
        "",
        "Every entry counted as wrong, refused, error or crash above is known: it is recorded with that",
        "status in `tests/opinfo/expected_<dtype>.json`, so the check passes while it stays so (refused",
        "entries are listed by op below). The others:",
        "",
        "| dtype | wrong | error | crash |",
        "|---|---|---|---|",
    ]
    for d, r in rec.items():
        k = known_failures(r)
        lines.append(f"| {d} | " + " | ".join(", ".join(k[s]) or "-" for s in ("wrong", "error", "crash")) + " |")
    refused: dict[str, list[str]] = {}
    for d, r in rec.items():
        for n, (st, w) in r["entries"].items():
            if st == "refused":
                for o in w.removeprefix("refuses ").split(", "):
                    refused.setdefault(o, [])
                    if n not in refused[o]:
                        refused[o].append(n)
    lines += ["", "## ATen ops still refused", "", "| op | entries |", "|---|---|"]
    for o in sorted(refused, key=lambda o: (-len(refused[o]), o)):
        lines.append(f"| `{o}` | {', '.join(sorted(refused[o]))} |")
    lines += ["", "## Every entry", "", "| entry | " + " | ".join(rec) + " | why not |",
              "|---|" + "---|" * len(rec) + "---|"]
    names = sorted(set().union(*(r["entries"] for r in rec.values())))
    for n in names:
        cells, whys = [], []
        for d, r in rec.items():
            st, w = r["entries"].get(n, ["-", ""])
            cells.append(st)
            if w and w not in whys:
                whys.append(w)
        lines.append(f"| {n} | " + " | ".join(cells) + " | " + "; ".join(whys).replace("|", "\\|") + " |")
    lines += ["", "## Backwards tested outside this suite", "", "| entry | test |", "|---|---|"]
    for n in sorted(BACKWARD_TESTED):
        lines.append(f"| {n} | `{BACKWARD_TESTED[n]}` |")
    return "\n".join(lines) + "\n"


def check(dtype: str, results: dict[str, dict]) -> int:
    exp = json.load(open(expected_path(dtype)))
    was = {n: v[0] for n, v in exp["entries"].items()}
    lost = [n for n, s in was.items() if s == "pass" and n in results and results[n]["status"] != "pass"]
    gained = [n for n, r in results.items() if r["status"] == "pass" and was.get(n) != "pass"]
    rate, floor = summary(results)["rate"], exp["summary"]["rate"]
    for n in lost:
        r = results[n]
        print(f"REGRESSION {n}: {r['status']}: {r.get('message') or ', '.join(r.get('ops', []))}")
    if gained:
        print(f"newly passing ({len(gained)}; record with --update): {', '.join(sorted(gained))}")
    failing = {n: r["status"] for n, r in results.items() if r["status"] in FAILING}
    known = {n: s for n, s in failing.items() if was.get(n) in FAILING}
    new = {n: s for n, s in failing.items() if n not in known and n not in lost}
    if known:
        counts = ", ".join(f"{sum(1 for s in known.values() if s == st)} {st}" for st in FAILING
                           if st in known.values())
        print(f"known: {counts}, recorded as not passing in {os.path.basename(expected_path(dtype))}")
    if new:
        print(f"not passing and not recorded ({len(new)}; record with --update): "
              + ", ".join(f"{n} ({s})" for n, s in sorted(new.items())))
    if lost or rate < floor:
        print(f"FAILED: {len(lost)} regression(s); pass rate {rate} % (recorded {floor} %)")
        return 1
    print(f"ok: pass rate {rate} % (recorded {floor} %), no regressions")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--only", help="comma-separated entries")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds one entry may take")
    ap.add_argument("--out", help="write every result here (JSON lines)")
    ap.add_argument("--results", help="take the results from this --out file instead of running")
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every entry that does not pass")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    names = [entry_name(op) for op in eligible(args.dtype)]
    if args.only:
        want = set(args.only.split(","))
        names = [n for n in names if n in want]
    t0 = time.perf_counter()
    if args.results:
        results = {r["entry"]: r for r in map(json.loads, open(args.results)) if r["entry"] in names}
    else:
        results = run_all(args.dtype, names, max(1, args.jobs), args.samples, args.timeout)
    elapsed = time.perf_counter() - t0
    if args.out:
        with open(args.out, "w") as fh:
            for n in sorted(results):
                fh.write(json.dumps(results[n], sort_keys=True) + "\n")
    if args.verbose:
        for n in sorted(results):
            r = results[n]
            if r["status"] != "pass":
                print(f"{r['status']:8} {n}: {r.get('message') or ', '.join(r.get('ops', []))}")
    print_table(args.dtype, results, elapsed)
    rc = 0
    if args.update:
        write_expected(args.dtype, results)
        write_doc()
    if args.check:
        rc = check(args.dtype, results)
    return rc


if __name__ == "__main__":
    sys.exit(main())
