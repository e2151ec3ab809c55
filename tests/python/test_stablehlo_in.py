"""StableHLO written by JAX (`jax.jit(f).lower(...).as_text()`), compiled and run by the tpuc
CLI as given, equal to JAX's own results; and compiled for a TPU topology without a TPU."""

import json
import os
import subprocess

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # libtpu is installed for tpuc; JAX must not load it

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)  # for the sharded module below
import jax.numpy as jnp  # noqa: E402
from cli_check import TPUC  # noqa: E402


def mlp_softmax(x, w, b):
    h = jnp.tanh(x @ w + b)
    return jax.nn.softmax(h, axis=-1), h.sum(axis=0)


def int_and_bool(a, b):
    return (a * 3 + b) // 2, jnp.where(a > b, a, b).max(axis=1), (a & 5) == 1


def bf16_mixed(x, w):
    return (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32), jnp.cumsum(x, axis=1)


rng = np.random.default_rng(0)
# name: (function, arguments[, tolerance]). JAX's CPU client lets XLA keep the bf16 product in
# f32 (excess precision); tpuc's compile options round it to bf16 as written, hence 1e-2 there.
CASES = {
    "mlp_softmax": (mlp_softmax, [rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 16), np.float32),
                                  rng.standard_normal(16, np.float32)]),
    "int_and_bool": (int_and_bool, [rng.integers(-50, 50, (3, 5), dtype=np.int32),
                                    rng.integers(-50, 50, (3, 5), dtype=np.int32)]),
    "bf16_mixed": (bf16_mixed, [rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 4), np.float32)], 1e-2),
}


def write_case(name, tmp_path):
    f, args = CASES[name][:2]
    mlir = tmp_path / f"{name}.mlir"
    mlir.write_text(jax.jit(f).lower(*args).as_text())
    ins = []
    for i, a in enumerate(args):
        ins.append(str(tmp_path / f"in_{i}.npy"))
        np.save(ins[-1], a)
    want = []
    for i, o in enumerate(jax.jit(f)(*args)):
        want.append(str(tmp_path / f"want_{i}.npy"))
        np.save(want[-1], np.asarray(o))
    return str(mlir), ins, want


@pytest.mark.parametrize("name", sorted(CASES))
def test_tpuc_run_equals_jax(name, tmp_path):
    mlir, ins, want = write_case(name, tmp_path)
    tol = str(CASES[name][2] if len(CASES[name]) > 2 else 1e-5)
    p = subprocess.run([TPUC, "run", mlir, "--inputs", *ins, "--expect", *want, "--rtol", tol, "--atol", tol,
                        "--no-cache", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    assert summary["ok"] and len(summary["outputs"]) == len(want)


def test_jax_module_compiles_for_a_tpu_topology(tmp_path):
    mlir, _, _ = write_case("mlp_softmax", tmp_path)
    p = subprocess.run([TPUC, "compile", mlir, "--target", "tpu", "--topology", "v5e:2x2", "--no-cache", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)
    assert summary["target"] == "tpu" and summary["topology"] == "v5e:2x2"
    assert summary["cost"]["flops"] > 0


def _sharded_module(tmp_path, out_shardings):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    r = np.random.default_rng(3)
    xv, wv = r.standard_normal((8, 16)).astype(np.float32), r.standard_normal((16, 32)).astype(np.float32)
    x = jax.device_put(xv, NamedSharding(mesh, P("x", None)))
    w = jax.device_put(wv, NamedSharding(mesh, P(None, "y")))
    outs = None if out_shardings is None else tuple(NamedSharding(mesh, p) for p in out_shardings)
    f = jax.jit(lambda x, w: (jnp.tanh(x @ w), (x @ w).sum(0)), out_shardings=outs)
    mlir = tmp_path / "sharded.mlir"
    mlir.write_text(f.lower(x, w).as_text())
    ins = [str(tmp_path / "x.npy"), str(tmp_path / "w.npy")]
    np.save(ins[0], xv)
    np.save(ins[1], wv)
    want = []
    for i, o in enumerate(f(x, w)):
        want.append(str(tmp_path / f"want_{i}.npy"))
        np.save(want[-1], np.asarray(o))
    return str(mlir), ins, want


@pytest.mark.parametrize("out_shardings", [None, (("x", "y"), ("y",))], ids=["results-unannotated", "results-sharded"])
def test_a_sharded_jax_module_compiles_and_runs_over_its_mesh(tmp_path, out_shardings):
    """A module JAX shards over a 2x2 mesh declares mhlo.num_partitions = 4 and carries Shardy
    shardings: compile uses its partition count (libtpu fails inside otherwise), and run feeds
    each device its block and returns JAX's results (unannotated results whole, sharded ones
    joined)."""
    from jax.sharding import PartitionSpec as P

    outs = None if out_shardings is None else tuple(P(*s) for s in out_shardings)
    mlir, ins, want = _sharded_module(tmp_path, outs)
    for target in (["--target", "cpu"], ["--target", "tpu", "--topology", "v5e:2x2"]):
        p = subprocess.run([TPUC, "compile", mlir, *target, "--no-cache", "--json"], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["partitions"] == 4
    p = subprocess.run([TPUC, "compile", mlir, "--partitions", "2", "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 1 and "contradicts the module's mhlo.num_partitions = 4" in p.stderr
    p = subprocess.run([TPUC, "run", mlir, "--inputs", *ins, "--expect", *want, "--rtol", "1e-5", "--atol", "1e-5",
                        "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(": ok") == 2
