"""Backend behaviour: registration, options, fallback and strict mode, errors, dtypes and
strides, shape specialization, dumps, the host cache across processes."""

import gc
import glob
import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import tpuc
import unknown_ops
from tpuc import _C
from tpuc.options import Options

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_python(code, env=None, timeout=300):
    full_env = {k: v for k, v in os.environ.items() if not (k.startswith("TPUC_") and not k.startswith("TPUC_PJRT"))}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.path.join(ROOT, "tests", "fixtures")
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout)


# ----------------------------------------------------------------- registration and options


def test_backend_is_found_through_the_entry_point_without_import():
    code = (
        "import sys, torch\n"
        "import make_fixtures as mf\n"
        "m, (x,), _, _ = mf.build_mlp(); m.eval()\n"
        "assert 'tpuc' not in sys.modules\n"
        "assert 'tpuc' in torch._dynamo.list_backends()\n"
        "with torch.no_grad():\n"
        "    y = torch.compile(m, backend='tpuc')(x)\n"
        "    assert torch.allclose(y, m(x), rtol=1e-5, atol=1e-6)\n"
        "assert 'tpuc._C' in sys.modules\n"
        "print('ok')\n"
    )
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_options_resolve_from_options_env_and_defaults():
    o = Options.resolve({}, env={})
    assert (o.target, o.strict, o.dump_dir, o.debug) == ("cpu", False, None, False)
    o = Options.resolve({}, env={"TPUC_STRICT": "1", "TPUC_DUMP_DIR": "/tmp/d", "TPUC_TARGET": "tpu", "TPUC_TOPOLOGY": "v5e:2x2"})
    assert (o.strict, o.dump_dir, o.target, o.topology) == (True, "/tmp/d", "tpu", "v5e:2x2")
    # options win over the environment
    o = Options.resolve({"strict": False, "cache_tier2": "job"}, env={"TPUC_STRICT": "1"})
    assert o.strict is False and o.cache == (("TPUC_CACHE_TIER2", "job"),)
    with pytest.raises(ValueError, match="unknown option 'stirct'"):
        Options.resolve({"stirct": True}, env={})
    with pytest.raises(ValueError, match="needs a topology"):
        Options.resolve({"target": "tpu"}, env={})
    with pytest.raises(ValueError, match="expected a boolean"):
        Options.resolve({}, env={"TPUC_STRICT": "maybe"})


def test_options_are_the_drivers_declared_options():
    """One declaration (driver/src/options.rs): the dataclass has exactly its options, each
    boolean's default is the declared one, each variable sets its option, and each declared
    `tpuc` flag is one the CLI has."""
    import dataclasses

    from tpuc.options import SPECS

    fields = {f.name: f.default for f in dataclasses.fields(Options)}
    fields.pop("cache")
    assert set(fields) == set(SPECS), set(fields) ^ set(SPECS)
    defaults = Options.resolve({}, env={})
    for name, spec in SPECS.items():
        if spec.boolean:
            assert getattr(defaults, name) == (spec.default == "on"), name
            env = {spec.env: "0" if spec.default == "on" else "1"}
            assert getattr(Options.resolve({}, env=env), name) == (spec.default != "on"), name
    tpuc_bin = os.environ.get("TPUC_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "tpuc")
    helps = "".join(subprocess.run([tpuc_bin, cmd, "--help"], capture_output=True, text=True, check=True).stdout
                    for cmd in ("compile", "lower", "opt", "run"))
    for spec in SPECS.values():
        if spec.flag:
            assert spec.flag in helps, spec.flag
    assert "| `precision` | `TPUC_PRECISION` | `--precision` |" in tpuc.options.__doc__


def test_torch_version_is_checked():
    tpuc.check_torch_version(torch.__version__)
    tpuc.check_torch_version("2.15.3+cpu")
    with pytest.raises(RuntimeError, match=r"tpuc supports torch 2\.15\.x, but torch 2\.14\.1 is installed"):
        tpuc.check_torch_version("2.14.1")
    with pytest.raises(RuntimeError, match="2.16.0"):
        tpuc.check_torch_version("2.16.0")


def test_rust_panic_becomes_a_python_exception():
    with pytest.raises(tpuc.TpucError, match="internal error.*deliberate panic") as e:
        _C._panic_for_test()
    assert e.value.kind == "internal"


# ----------------------------------------------------------------- fallback and strict


class WithUnknownOp(nn.Module):
    """unknown_a has no tpuc lowering (and never will): the graph must be split around it."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 0.5
        h = unknown_ops.unknown_a(h.reshape(2, 8, 8)).reshape(4, 32)  # UNSUPPORTED_LINE
        return self.fc2(torch.relu(h))


UNSUPPORTED_LINE = next(
    i + 1 for i, line in enumerate(open(__file__)) if "# UNSUPPORTED_LINE" in line and "unknown_ops.unknown_a" in line)


def _unsupported_model():
    torch.manual_seed(0)
    return WithUnknownOp(), torch.randn(4, 16)


def test_fallback_runs_unsupported_ops_eagerly_with_one_warning():
    model, x = _unsupported_model()
    compiled = torch.compile(model, backend="tpuc")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = compiled(x)
            compiled(x)
    ours = [w for w in caught if issubclass(w.category, tpuc.TpucFallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    msg = str(ours[0].message)
    assert "tpuc_test.unknown_a.default" in msg and f"test_backend.py:{UNSUPPORTED_LINE} in forward" in msg, msg
    with torch.no_grad():
        assert torch.allclose(got, model(x), rtol=1e-5, atol=1e-6)
    s = tpuc.stats()
    assert s["fallback_graphs"] == 1 and s["programs"] == 2, s  # fc1+tanh and relu+fc2


def test_fallback_in_training_matches_eager():
    import copy

    model, x = _unsupported_model()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tpuc")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in (compiled, eager):
            m(x).pow(2).mean().backward()
    ours = [w for w in caught if issubclass(w.category, tpuc.TpucFallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]  # forward and backward: one warning
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), n


@pytest.mark.parametrize("how", ["option", "env"])
def test_strict_raises_naming_op_node_and_line(how, monkeypatch):
    model, x = _unsupported_model()
    if how == "env":
        monkeypatch.setenv("TPUC_STRICT", "1")
        compiled = torch.compile(model, backend="tpuc")
    else:
        compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    with pytest.raises(Exception) as info:
        with torch.no_grad():
            compiled(x)
    err = info.value
    # Dynamo wraps backend errors in BackendCompilerFailed, keeping ours as inner_exception.
    while not isinstance(err, tpuc.TpucUnsupportedError):
        inner = getattr(err, "inner_exception", None) or err.__cause__
        if inner is None:
            break
        err = inner
    assert isinstance(err, tpuc.TpucUnsupportedError), repr(info.value)
    assert err.node == "unknown_a" and err.target == "tpuc_test.unknown_a.default"
    assert err.source == f"test_backend.py:{UNSUPPORTED_LINE} in forward"
    assert f"node `unknown_a` at test_backend.py:{UNSUPPORTED_LINE} in forward" in str(err)


# ----------------------------------------------------------------- dtypes, strides, shapes


class Mixed(nn.Module):
    def forward(self, x, idx):
        y = x * 2.0
        return (
            y.t(),                         # non-contiguous float output
            (y > 0),                       # bool
            idx + 1,                       # int64
            y.to(torch.bfloat16),          # bf16
            y.sum(),                       # 0-d
        )


def test_output_dtypes_shapes_and_strides_match_eager():
    x = torch.randn(3, 5)
    idx = torch.arange(6).reshape(2, 3)
    model = Mixed()
    with torch.no_grad():
        got = torch.compile(model, backend="tpuc")(x, idx)
        want = model(x, idx)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g.dtype, g.shape, g.stride()) == (w.dtype, w.shape, w.stride()), i
        assert torch.allclose(g, w, rtol=1e-6, atol=1e-6) if g.is_floating_point() else torch.equal(g, w), i


class Expanded(nn.Module):
    def forward(self, x, y):
        a = x.expand(4, 3, 5)                      # stride 0 on dim 0
        b = y.expand_as(a)                         # strides 0 on dims 0 and 1
        c = torch.broadcast_to(x * 2.0, (2, 3, 5))
        d, e = torch.broadcast_tensors(x, y)
        return a, b, c, d, e


def test_expanded_outputs_keep_eager_strides():
    # Outputs that are expanded views have zero strides; the result must be a view of one
    # stored slice, as in eager (not a copy into overlapping memory, which torch refuses).
    x = torch.randn(3, 5)
    y = torch.randn(5)
    model = Expanded()
    with torch.no_grad():
        got = torch.compile(model, backend="tpuc", options={"strict": True})(x, y)
        want = model(x, y)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g.shape, g.stride()) == (w.shape, w.stride()), i
        assert torch.equal(g, w), i


def test_expanded_output_in_training():
    # The backward of an expanded output (as in a BERT's position ids or attention bias).
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(1, 6))

        def forward(self, x):
            return self.w.expand(x.shape[0], 6), (x * self.w).sum()

    x = torch.randn(4, 6)
    model = M()
    eager = M()
    eager.load_state_dict(model.state_dict())
    got = torch.compile(model, backend="tpuc", options={"strict": True})(x)
    want = eager(x)
    assert got[0].stride() == want[0].stride()
    (got[0].sum() + got[1]).backward()
    (want[0].sum() + want[1]).backward()
    assert torch.allclose(model.w.grad, eager.w.grad, rtol=1e-6, atol=1e-6)


def test_non_contiguous_inputs():
    base = torch.randn(5, 3)
    model = Mixed()
    idx = torch.arange(12).reshape(3, 4)[:, ::2]
    with torch.no_grad():
        got = torch.compile(model, backend="tpuc")(base.t(), idx)
        want = model(base.t(), idx)
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.allclose(g, w, rtol=1e-6, atol=1e-6) if g.is_floating_point() else torch.equal(g, w), i


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.lin(x)) * 2.0


def test_results_are_independent_of_later_calls_and_of_the_inputs():
    # Inputs are read in place and results handed over without a copy: a result must not change
    # when the caller mutates it, mutates the input, or calls again.
    model = Affine()
    with torch.no_grad():
        f = torch.compile(model, backend="tpuc")
        x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
        r1 = f(x1)
        want1 = model(x1).clone()
        x1.fill_(100.0)
        r2 = f(x2)
        assert torch.allclose(r1, want1, rtol=1e-6, atol=1e-6)
        r2.add_(1.0)  # results are writable tensors the caller owns
        r3 = f(x2)
        assert torch.allclose(r3, model(x2), rtol=1e-6, atol=1e-6)
        assert torch.allclose(r2, r3 + 1.0, rtol=1e-6, atol=1e-6)
        assert r1.data_ptr() != r3.data_ptr()


def test_unaligned_contiguous_inputs():
    # A contiguous view at an odd byte offset: the plugin cannot use it in place and copies.
    model = Affine()
    storage = torch.randn(4 * 8 + 1)
    x = storage[1:].view(4, 8)
    assert x.is_contiguous() and x.data_ptr() % 16 != 0
    with torch.no_grad():
        got = torch.compile(model, backend="tpuc")(x)
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_inputs_dropped_right_after_the_call():
    # The call's argument is the input's only reference: the extension must hold the memory it
    # reads (with the GIL released) itself, and the result must not depend on it afterwards.
    model = Affine()
    with torch.no_grad():
        f = torch.compile(model, backend="tpuc")
        xs = [torch.randn(4, 8) for _ in range(3)]
        wants = [model(x) for x in xs]
        got = [f(x.clone()) for x in xs]
        got.append(f(xs[0].t().contiguous().t()))  # non-contiguous: a contiguous copy crosses
    gc.collect()
    torch.randn(1 << 16)  # reuse freed memory
    for g, w in zip(got, wants + wants[:1]):
        assert torch.allclose(g, w, rtol=1e-6, atol=1e-6)


def test_negated_and_conjugated_views_are_resolved():
    # DLPack describes the stored elements only: lazy negation and conjugation must be applied
    # before the tensor crosses.
    x = torch._neg_view(torch.randn(4, 8))
    z = torch.randn(4, dtype=torch.complex64).conj()
    assert x.is_neg() and x.is_contiguous() and z.is_conj() and z.is_contiguous()
    with torch.no_grad():
        got = torch.compile(lambda a: a * 2.0 + 1.0, backend="tpuc")(x)
        gotz = torch.compile(lambda a: a * 2.0, backend="tpuc")(z)
    assert torch.allclose(got, x * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    assert torch.allclose(gotz, z * 2.0, rtol=1e-6, atol=1e-6)


def _affine_program():
    """A compiled Affine model's `_C.Program` (weights resident), the model, and a sample."""
    from tpuc.graph import compiled_graphs

    model = Affine()
    before = set(compiled_graphs())
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.compile(model, backend="tpuc")(x)
    [graph] = [g for g in compiled_graphs() if g not in before]
    return graph.program, model, x


def test_program_run_takes_dlpack_capsules_and_owns_them():
    from torch.utils.dlpack import to_dlpack

    program, model, x = _affine_program()
    with torch.no_grad():
        want = model(x)
    cap = to_dlpack(x.clone())  # the capsule is the clone's only owner
    gc.collect()
    [buf] = program.run([cap])
    assert torch.allclose(torch.frombuffer(buf, dtype=torch.float32).view(4, 8), want, rtol=1e-6, atol=1e-6)
    # Consumed: a second consumer (another run, torch.from_dlpack) cannot take it too.
    with pytest.raises(tpuc.TpucError, match="already consumed"):
        program.run([cap])
    with pytest.raises(Exception):
        torch.utils.dlpack.from_dlpack(cap)
    # Raw addresses are not accepted any more; wrong layouts are refused with what they are.
    with pytest.raises(tpuc.TpucError, match="expected a DLPack capsule"):
        program.run([x.data_ptr()])
    with pytest.raises(tpuc.TpucError, match=r"is tensor<4x8xf32>, got a f64 tensor of shape \[4, 8\]"):
        program.run([to_dlpack(x.double())])
    with pytest.raises(tpuc.TpucError, match=r"shape \[8, 4\]"):
        program.run([to_dlpack(x.reshape(8, 4))])
    with pytest.raises(tpuc.TpucError, match="not contiguous"):
        program.run([to_dlpack(x.t().contiguous().t())])
    with pytest.raises(tpuc.TpucError, match="takes 1 input"):
        program.run([to_dlpack(x), to_dlpack(x)])


def test_results_are_zero_copy_and_keep_their_owner_alive():
    from torch.utils.dlpack import to_dlpack

    program, model, x = _affine_program()
    with torch.no_grad():
        want = model(x)
    [buf] = program.run([to_dlpack(x)])
    refs = sys.getrefcount(buf)
    a = torch.frombuffer(buf, dtype=torch.float32)
    b = torch.frombuffer(buf, dtype=torch.float32)
    assert a.data_ptr() == b.data_ptr(), "torch.frombuffer copied the result"
    assert sys.getrefcount(buf) == refs + 2, "the tensors do not hold the HostBuffer"
    del buf, b
    gc.collect()
    program.run([to_dlpack(torch.randn(4, 8))])
    torch.randn(1 << 16)
    assert torch.allclose(a.view(4, 8), want, rtol=1e-6, atol=1e-6)


def test_concurrent_runs_with_inputs_dropped_meanwhile():
    # Runs release the GIL during the execution; other threads keep allocating and freeing
    # tensors meanwhile. Every result must still be its own input's.
    import threading

    from torch.utils.dlpack import to_dlpack

    program, model, _ = _affine_program()
    xs = [torch.randn(4, 8) for _ in range(8)]
    with torch.no_grad():
        wants = [model(x) for x in xs]
    errors = []

    def worker(k):
        try:
            for i in range(50):
                j = (k + i) % len(xs)
                [buf] = program.run([to_dlpack(xs[j].clone())])
                torch.randn(4096)
                got = torch.frombuffer(buf, dtype=torch.float32).view(4, 8)
                if not torch.allclose(got, wants[j], rtol=1e-6, atol=1e-6):
                    errors.append((k, i))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_new_shapes_compile_once_per_bucket():
    import make_fixtures as mf

    model, _, _, _ = mf.build_mlp()
    model.eval()
    compiled = torch.compile(model, backend="tpuc")
    batches = (4, 8, 3, 8, 4, 3)
    with torch.no_grad():
        for batch in batches:
            x = torch.randn(batch, 16)
            assert torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-6), batch
        first = tpuc.stats()
        for batch in batches:
            compiled(torch.randn(batch, 16))
    s = tpuc.stats()
    # batch 4 first gets a static graph; batch 8 makes Dynamo trace a dynamic graph, which
    # tpuc compiles once per bucket of the sizes it meets (8, then 3 and 4 in bucket 4:
    # Dynamo tries the newest graph first). Seen buckets never compile again.
    assert s["dynamo_graphs"] == 2 and s["buckets"] == 2, s
    assert first["programs"] == s["programs"] == 3, s


def test_new_shapes_compile_once_per_shape_without_buckets():
    import make_fixtures as mf

    model, _, _, _ = mf.build_mlp()
    model.eval()
    compiled = torch.compile(model, backend="tpuc", options={"buckets": "off"})
    with torch.no_grad():
        for batch in (4, 8, 3, 8, 4, 3):
            x = torch.randn(batch, 16)
            assert torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-6), batch
    s = tpuc.stats()
    assert s["dynamo_graphs"] == 2 and s["specializations"] == 3 and s["programs"] == 4, s


def test_dump_dir_has_every_stage(tmp_path):
    import make_fixtures as mf

    model, (x,), _, _ = mf.build_mlp()
    model.eval()
    with torch.no_grad():
        torch.compile(model, backend="tpuc", options={"dump_dir": str(tmp_path)})(x)
    [graph_dir] = glob.glob(str(tmp_path / "g*_inference"))
    names = set(os.listdir(graph_dir))
    assert {"graph.json", "fx_graph.py", "module.tpuc", "module.stablehlo.mlir", "compile.json"} <= names, names
    assert "stablehlo.dot_general" in open(os.path.join(graph_dir, "module.stablehlo.mlir")).read()


def test_tpu_target_compiles_for_a_topology_and_runs_eagerly_here(tmp_path):
    from tpuc.options import _installed_plugin

    assert _installed_plugin("tpu") is not None, "libtpu is not installed: run scripts/setup.sh"
    import make_fixtures as mf

    model, (x,), _, _ = mf.build_mlp()
    model.eval()
    opts = {"target": "tpu", "topology": "v5e:2x2", "dump_dir": str(tmp_path)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(model, backend="tpuc", options=opts)(x)
    assert torch.allclose(got, model(x), rtol=1e-5, atol=1e-6)
    msgs = [str(w.message) for w in caught if "cannot run it" in str(w.message)]
    assert len(msgs) == 1 and "compiled for tpu (v5e:2x2)" in msgs[0], [str(w.message) for w in caught]
    [exe] = glob.glob(str(tmp_path / "*" / "executable.bin"))
    assert os.path.getsize(exe) > 1000


# ----------------------------------------------------------------- the host cache


CACHE_CHILD = """
import torch, tpuc
import make_fixtures as mf
m, (x,), _, _ = mf.build_gpt2_block(); m.eval()
with torch.no_grad():
    y = torch.compile(m, backend="tpuc")(x)
    assert torch.allclose(y, m(x), rtol=1e-4, atol=1e-5)
print("stats", tpuc.stats())
import json
print("cache_stats", json.dumps(tpuc.cache_stats()))
"""


def test_second_process_hits_the_host_cache(tmp_path):
    env = {"TPUC_CACHE_TIER2": "pytest", "TPUC_CACHE_TIER2_ROOT": str(tmp_path), "TPUC_DEBUG": "1"}
    first = run_python(CACHE_CHILD, env)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_python(CACHE_CHILD, env)
    assert second.returncode == 0, second.stderr[-3000:]
    sources = lambda r: re.findall(r"compiled \S+ .*; cache=(\S+)", r.stderr)  # noqa: E731
    assert sources(first) == ["miss"], first.stderr[-3000:]
    assert sources(second) == ["shm"], (
        "the second process did not hit the host (tier 2) cache:\n" + second.stderr[-3000:]
    )
    # The same figures from Python: the second process's hit, and the host's totals.
    line = next(l for l in second.stdout.splitlines() if l.startswith("cache_stats "))
    cs = json.loads(line[len("cache_stats "):])
    assert cs["process"]["tier2"]["hits"] == 1 and cs["process"]["compiles"] == 0, cs
    assert cs["host"]["compiles"] == 1 and cs["host"]["tier2"]["hits"] == 1, cs
    assert cs["host"]["tier2"]["saved_ms"] > 0, cs
    assert [t["enabled"] for t in cs["tiers"]] == [True, True, False], cs


def test_second_process_hits_the_persistent_tier_reported_as_disk(tmp_path):
    """With no settings, tier 2 is the on-disk directory: a second process reads the program
    from it, and every report calls that a `disk` hit, not `shm`."""
    env = {"XDG_CACHE_HOME": str(tmp_path), "TPUC_DEBUG": "1"}
    first = run_python(CACHE_CHILD, env)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_python(CACHE_CHILD, env)
    assert second.returncode == 0, second.stderr[-3000:]
    sources = lambda r: re.findall(r"compiled \S+ .*; cache=(\S+)", r.stderr)  # noqa: E731
    assert (sources(first), sources(second)) == (["miss"], ["disk"]), second.stderr[-3000:]
    assert "'cache_disk': 1" in second.stdout and "cache_shm" not in second.stdout, second.stdout
    line = next(l for l in second.stdout.splitlines() if l.startswith("cache_stats "))
    cs = json.loads(line[len("cache_stats "):])
    assert cs["process"]["tier2"]["hits"] == 1 and cs["host"]["compiles"] == 1, cs
    assert os.path.isdir(tmp_path / "tpuc" / "executables"), os.listdir(tmp_path)


# ----------------------------------------------------------------- errors from the compiler


def _unsupported_program(stack_trace):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tpuc.serialize import graph_to_json

    gm = make_fx(lambda x: unknown_ops.unknown_a(x) + 1)(torch.randn(3))
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta["stack_trace"] = stack_trace
    return graph_to_json(gm, ["user_input"])


def test_compiler_errors_name_node_op_and_source_line():
    trace = 'File "/home/u/model.py", line 12, in forward\n    y = unknown_a(x)\n'
    with pytest.raises(tpuc.TpucError) as e:
        _C.Program.compile(_unsupported_program(trace), name="g_test")
    err = e.value
    assert (err.kind, err.node, err.target, err.source, err.graph) == (
        "unsupported_op", "unknown_a", "torch.ops.tpuc_test.unknown_a.default", "model.py:12 in forward", "g_test")
    assert "node `unknown_a` (model.py:12 in forward)" in str(err)


def test_an_op_the_compiler_rejects_falls_back_too(monkeypatch):
    """An op on the supported list whose lowering still fails (here: faked by listing unknown_a
    as supported) is moved to the eager side by the node the error names."""
    import tpuc.backend

    monkeypatch.setattr(tpuc.backend, "_supported", tpuc.supported_targets() | {unknown_ops.target("unknown_a")})
    model, x = _unsupported_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(model, backend="tpuc")(x)
            want = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    ours = [str(w.message) for w in caught if issubclass(w.category, tpuc.TpucFallbackWarning)]
    assert len(ours) == 1 and "tpuc_test.unknown_a.default" in ours[0], ours


class ThreeUnknown(nn.Module):
    """Three ops without a tpuc lowering, apart from each other."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 8)

    def forward(self, x):
        h = unknown_ops.unknown_a(self.fc1(x))
        k = unknown_ops.unknown_b(self.fc2(h))
        return self.fc3(unknown_ops.unknown_c(h + k))


THREE_UNKNOWN = unknown_ops.NAMES


def _fake_three_supported(monkeypatch):
    """Lists the three ops as supported, so that only tpuc's importer finds them."""
    import tpuc.backend

    fake = {unknown_ops.target(n) for n in THREE_UNKNOWN}
    monkeypatch.setattr(tpuc.backend, "_supported", tpuc.supported_targets() | fake)
    torch.manual_seed(0)
    return ThreeUnknown(), torch.randn(4, 16)


def test_every_op_the_compiler_rejects_is_found_in_one_import(monkeypatch):
    """The importer names every node it cannot import in one error, so a graph with three such
    ops fails to compile once, not once per op, before it is split."""
    import tpuc.graph

    model, x = _fake_three_supported(monkeypatch)
    failed = []

    class Counting(tpuc.graph.CompiledGraph):
        def __init__(self, gm, name, *args, **kwargs):
            try:
                super().__init__(gm, name, *args, **kwargs)
            except tpuc.TpucError as e:
                failed.append((name, [n["node"] for n in e.nodes]))
                raise

    monkeypatch.setattr(tpuc.graph, "CompiledGraph", Counting)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(model, backend="tpuc")(x)
            want = model(x)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(failed) == 1 and failed[0][1] == list(THREE_UNKNOWN), failed
    ours = [str(w.message) for w in caught if issubclass(w.category, tpuc.TpucFallbackWarning)]
    assert len(ours) == 1 and all(f"tpuc_test.{n}.default" in ours[0] for n in THREE_UNKNOWN), ours


def test_strict_error_lists_every_op_the_compiler_rejects(monkeypatch):
    model, x = _fake_three_supported(monkeypatch)
    with pytest.raises(Exception) as info:
        with torch.no_grad():
            torch.compile(model, backend="tpuc", options={"strict": True})(x)
    err = info.value
    while not isinstance(err, tpuc.TpucError):
        inner = getattr(err, "inner_exception", None) or err.__cause__
        if inner is None:
            break
        err = inner
    assert isinstance(err, tpuc.TpucError), repr(info.value)
    assert (err.kind, err.node) == ("unsupported_op", "unknown_a")
    assert [n["node"] for n in err.nodes] == list(THREE_UNKNOWN)
    assert all(n["kind"] == "unsupported_op" and n["source"].startswith("test_backend.py:") for n in err.nodes), err.nodes
    lines = str(err).splitlines()
    assert len(lines) == 3 and "node `unknown_a`" in lines[0], lines
    assert lines[1].startswith("  also: unsupported op `torch.ops.tpuc_test.unknown_b.default` at node `unknown_b`"), lines


# ----------------------------------------------------------------- attention


def test_flash_attention_logsumexp_has_its_eager_shape_and_values():
    """The CPU flash-attention op called directly: its logsumexp is [B, H, L] (torch's core
    decomposition of the op would put the [B, H, L, S] attention weights there)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

    def f(q, k, v, m):
        return flash(q, k, v) + flash(q, k, v, attn_mask=m, scale=0.3)

    torch.manual_seed(0)
    args = (torch.randn(4, 4, 3, 6), torch.randn(4, 4, 6, 6), torch.randn(4, 4, 6, 6), torch.randn(3, 6))
    got = torch.compile(f, backend="tpuc", options={"strict": True})(*args)
    want = f(*args)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want] == [(4, 4, 3, 6), (4, 4, 3)] * 2
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal"])
def test_transformer_encoder_layer_fast_path_compiles_whole(norm_first, activation, masks):
    """nn.TransformerEncoderLayer in inference takes torch's fused fast path
    (`aten._transformer_encoder_layer_fwd`); strict mode proves it compiles with no eager op,
    including the padding mask, whose fully masked rows must not become NaN."""
    import tpuc

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first,
                                             activation=activation).eval()
    x = torch.randn(2, 5, 32)
    kw = {}
    if masks == "padding":
        kw["src_key_padding_mask"] = torch.tensor([[False] * 5, [False, False, False, True, True]])
    elif masks == "causal":
        kw["src_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(5)
    seen = []

    def spy(gm, ex):
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return tpuc.tpuc_backend(gm, ex, options={"strict": True})

    with torch.no_grad():
        want = layer(x, **kw)
        got = torch.compile(layer, backend=spy)(x, **kw)
    if masks != "padding":  # a padding mask makes eager take nested tensors instead of the fused op
        assert any("_transformer_encoder_layer_fwd" in t for t in seen), seen
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_multihead_attention_fast_path_compiles_whole():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        want = mha(x, x, x)
        got = torch.compile(mha, backend="tpuc", options={"strict": True})(x, x, x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_flash_attention_called_directly_trains_like_eager():
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

    def loss(q, k, v):
        out, lse = flash(q, k, v, is_causal=True)
        return out.pow(2).sum() + lse.sum()

    torch.manual_seed(0)
    base = (torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))
    grads = []
    for fn in (torch.compile(loss, backend="tpuc", options={"strict": True}), loss):
        args = [t.clone().requires_grad_() for t in base]
        fn(*args).backward()
        grads.append([a.grad for a in args])
    for g, w in zip(*grads):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-5)


def _stablehlo_of(tmp_path, model, x, **options):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tpuc", options=dict(options, dump_dir=str(tmp_path)))
    with torch.no_grad():
        compiled(x)
    import glob
    import os

    path = max(glob.glob(os.path.join(str(tmp_path), "*", "module.stablehlo.mlir")), key=os.path.getmtime)
    with open(path) as f:
        return f.read()


def test_precision_follows_torch_unless_an_option_says_otherwise(tmp_path):
    model, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    saved = torch.get_float32_matmul_precision()
    try:
        assert "precision = [HIGHEST, HIGHEST]" in _stablehlo_of(tmp_path / "a", model, x)
        torch.set_float32_matmul_precision("medium")
        text = _stablehlo_of(tmp_path / "b", model, x)
        assert "HIGHEST" not in text and "precision = [DEFAULT, DEFAULT]" in text
        torch.set_float32_matmul_precision("high")
        assert "precision = [HIGH, HIGH]" in _stablehlo_of(tmp_path / "c", model, x)
        assert "precision = [HIGHEST, HIGHEST]" in _stablehlo_of(tmp_path / "d", model, x, precision="highest")
    finally:
        torch.set_float32_matmul_precision(saved)


class _ScopedHead(torch.nn.Module):
    """Two matmuls, the second under a tpuc.precision region."""

    def __init__(self, scope):
        super().__init__()
        self.body, self.head, self.scope = torch.nn.Linear(16, 16), torch.nn.Linear(16, 8), scope

    def forward(self, x):
        h = self.body(x).relu()
        with tpuc.precision(self.scope):
            return self.head(h)


def _dot_precisions(text):
    return re.findall(r"stablehlo.dot_general.*precision = \[(\w+), \w+\]", text)


def test_precision_scope_sets_one_regions_matmuls_without_a_graph_break(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(4, 16)
    # The graph's policy (here torch's highest, or the option) everywhere but in the region,
    # which keeps its own under the bf16 option too; one graph with the rest (fullgraph).
    for i, (options, want) in enumerate([
        ({}, ["HIGHEST", "DEFAULT"]),
        ({"precision": "default"}, ["DEFAULT", "HIGHEST"]),
        ({"precision": "high", "bf16": True}, ["HIGH", "HIGHEST"]),
    ]):
        scope = "default" if not options else "highest"
        model = _ScopedHead(scope)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="tpuc", fullgraph=True, options=dict(options, dump_dir=str(tmp_path / str(i))))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=3e-2, atol=3e-2)
        (path,) = glob.glob(str(tmp_path / str(i) / "*" / "module.stablehlo.mlir"))
        text = open(path).read()
        assert _dot_precisions(text) == want, text
        if options.get("bf16"):
            # bf16 operands for the policy's matmul, f32 for the region's.
            assert text.count("tensor<16x16xbf16>") and "tensor<8x16xbf16>" not in text
    # Training: the region's backward matmuls carry it too.
    model = _ScopedHead("default")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tpuc", fullgraph=True, options={"dump_dir": str(tmp_path / "train")})
    compiled(x).sum().backward()
    texts = [open(p).read() for p in glob.glob(str(tmp_path / "train" / "*" / "module.stablehlo.mlir"))]
    assert len(texts) == 2 and all("DEFAULT" in t and "HIGHEST" in t for t in texts)
    with pytest.raises(ValueError, match="expected one of default, high, highest"):
        with tpuc.precision("fast"):
            pass


def test_tpu_target_reads_torchs_untouched_highest_as_tpu_default():
    from tpuc.options import Options

    saved = torch.get_float32_matmul_precision()
    try:
        tpu = Options.resolve({"target": "tpu", "topology": "v5e:2x2"})
        torch.set_float32_matmul_precision("highest")
        assert tpu.matmul_precision() is None  # the TPU pipeline's default: one bf16 pass
        torch.set_float32_matmul_precision("high")
        assert tpu.matmul_precision() == "high"
        assert Options.resolve({"target": "tpu", "topology": "v5e:2x2", "precision": "highest"}).matmul_precision() == "highest"
        assert Options.resolve({}, env={"TPUC_PRECISION": "default"}).matmul_precision() == "default"
    finally:
        torch.set_float32_matmul_precision(saved)
    with pytest.raises(ValueError, match="precision"):
        Options.resolve({"precision": "bf17"})


def test_fusion_bf16_and_excess_precision_options(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(approximate="tanh"))
    x = torch.randn(4, 16)
    assert "stablehlo.composite" in _stablehlo_of(tmp_path / "a", model, x)
    assert "stablehlo.composite" not in _stablehlo_of(tmp_path / "b", model, x, fusion=False)
    text = _stablehlo_of(tmp_path / "c", model, x, bf16=True)
    assert "bf16" in text
    compiled = torch.compile(model, backend="tpuc", options={"bf16": True, "allow_excess_precision": True})
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=3e-2, rtol=3e-2)


def test_max_reductions_and_pooling_propagate_nan_as_eager():
    """XLA CPU's default min/max drop NaN; PyTorch's propagate it (and max pooling's index
    points at the NaN). Also adaptive max pooling with windows of uneven length."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 5)
    x[0, 0, 2, 2] = float("nan")
    x[1, 2, 6, 4] = float("nan")

    def f(x):
        return (x.amax(-1), x.max(-1), x.amin(1), torch.nn.functional.max_pool2d(x, 2, return_indices=True),
                torch.nn.functional.adaptive_max_pool2d(x, (3, 4), return_indices=True),
                torch.maximum(x, x.flip(0)), x.clamp(-0.5, 0.5))

    got = torch.compile(f, backend="tpuc", options={"strict": True})(x)
    want = f(x)
    flat_g, _ = torch.utils._pytree.tree_flatten(got)
    flat_w, _ = torch.utils._pytree.tree_flatten(want)
    assert len(flat_g) == len(flat_w)
    for g, w in zip(flat_g, flat_w):
        if w.is_floating_point():
            assert torch.equal(g.isnan(), w.isnan())
            torch.testing.assert_close(g, w, equal_nan=True)
        else:
            assert torch.equal(g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_incomplete_gamma_and_frexp_match_eager(dtype):
    """igamma / igammac (unrolled series, continued fraction and asymptotic expansion, with
    ATen's values at 0, negative, infinite and NaN operands) and frexp (exponent from log2,
    corrected by one; zeros keep their sign, inf and NaN give (x, 0)) equal eager's."""
    a = torch.tensor([1e-3, 0.5, 1.0, 3.0, 9.0, 30.0, 250.0, 0.0, -1.0, float("inf"), float("nan")])
    x = torch.tensor([0.0, 1e-3, 0.7, 1.05, 2.0, 8.0, 25.0, 100.0, 260.0, -1.0, float("inf")])
    a, x = (t.reshape(-1).to(dtype) for t in torch.meshgrid(a, x, indexing="ij"))
    v = torch.tensor([0.0, -0.0, 1.0, 0.5, 0.75, -3.0, 8.0, 0.1, 1e-3, 1e30, -2.0**-126, 2.0**127,
                      float("inf"), -float("inf"), float("nan")]).to(dtype)

    def f(a, x, v):
        return torch.igamma(a, x), torch.igammac(a, x), *torch.frexp(v)

    got = torch.compile(f, backend="tpuc", options={"strict": True})(a, x, v)
    want = f(a, x, v)
    # float32: eager's own error reaches 1e-4 relative at small a and x.
    tol = {"rtol": 1e-4, "atol": 1e-6} if dtype == torch.float32 else {}
    for g, w in zip(got[:2], want[:2]):
        torch.testing.assert_close(g, w, equal_nan=True, **tol)
    mantissa, exponent = got[2:]
    torch.testing.assert_close(mantissa, want[2], rtol=0, atol=0, equal_nan=True)
    real = ~v.isnan()  # (a NaN's sign bit is not specified)
    assert torch.equal(mantissa.signbit()[real], want[2].signbit()[real])
    assert exponent.dtype == torch.int32 and torch.equal(exponent, want[3])


def test_linear_algebra_matches_eager_and_raises_where_eager_raises():
    """LU-based solves, inverses and determinants, Cholesky and triangular solves; a singular or
    non positive-definite input raises torch's LinAlgError from the compiled call too (the
    kernels' error checks run on the host)."""
    torch.manual_seed(0)
    a = torch.randn(3, 5, 5)
    spd = a @ a.mT + 5 * torch.eye(5)
    b = torch.randn(3, 5, 2)

    def f(a, spd, b):
        l = torch.linalg.cholesky(spd)
        return (torch.linalg.solve(a, b), torch.linalg.inv(a), torch.linalg.det(a), *torch.linalg.slogdet(a),
                l, torch.cholesky_solve(b, l), torch.linalg.solve_triangular(l, b, upper=False),
                *torch.linalg.lu(a), *torch.linalg.lu_factor(a))

    got = torch.compile(f, backend="tpuc", options={"strict": True})(a, spd, b)
    want = f(a, spd, b)
    for g, w in zip(got, want):
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        else:
            assert torch.equal(g, w)
    # cholesky_ex's `info` is LAPACK's: the order of the first leading minor that is not
    # positive-definite, per matrix of a batch.
    c = torch.randn(6, 7, 7)
    c = c @ c.mT + torch.eye(7)
    c[1, 3, 3], c[2, 0, 0], c[4, 6, 6] = -100.0, float("nan"), -50.0
    info = torch.compile(lambda c: torch.linalg.cholesky_ex(c).info, backend="tpuc", options={"strict": True})(c)
    assert info.tolist() == torch.linalg.cholesky_ex(c).info.tolist() == [0, 4, 1, 0, 7, 0]
    # The program returns each factorization's status and torch checks it after the run, so
    # the error is eager's own, word for word: one matrix, and the second of a batch.
    singular = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 1.0, 1.0]])
    batch = torch.stack([torch.eye(3) * 2, singular])
    for op in (torch.linalg.inv, torch.linalg.cholesky):
        for x in (singular, batch):
            torch._dynamo.reset()
            with pytest.raises(torch.linalg.LinAlgError) as eager:
                op(x)
            with pytest.raises(torch.linalg.LinAlgError) as compiled:
                torch.compile(op, backend="tpuc", options={"strict": True})(x)
            assert str(compiled.value) == str(eager.value)


def test_qr_eigh_svd_and_pinv_match_eager():
    """QR (LAPACK's signs), eigenvalues, singular values and pseudo-inverses equal eager's;
    eigenvectors and singular vectors (defined up to sign) reconstruct the input."""
    torch.manual_seed(0)
    a = torch.randn(2, 6, 4)
    s = torch.randn(2, 5, 5)
    s = s + s.mT

    def f(a, s):
        q, r = torch.linalg.qr(a)
        w, v = torch.linalg.eigh(s)
        u, sv, vh = torch.linalg.svd(a, full_matrices=False)
        return q, r, w, v, u, sv, vh, torch.linalg.pinv(a), torch.linalg.matrix_rank(a)

    got = torch.compile(f, backend="tpuc", options={"strict": True})(a, s)
    want = f(a, s)
    for i in (0, 1, 2, 5, 7):
        torch.testing.assert_close(got[i], want[i], rtol=1e-4, atol=1e-4)
    assert torch.equal(got[8], want[8])
    _, _, w, v, u, sv, vh, _, _ = got
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, s, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(u @ torch.diag_embed(sv) @ vh, a, rtol=1e-4, atol=1e-4)


def test_training_forward_saves_dense_activations_and_grads_match_eager():
    """A compiled training forward hands its backward the activations it saves as dense
    tensors (no re-striding copy out and back in), whatever layout aot traced them with
    (here transposed), and the gradients are eager's."""
    import copy

    class Transposing(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 24)

        def forward(self, x):
            h = self.fc(x).transpose(0, 1)  # [24, 8], strides (1, 24)
            return (torch.sin(h) * h).transpose(0, 1).sum(0)

    torch.manual_seed(0)
    model, x = Transposing(), torch.randn(8, 16)
    eager = copy.deepcopy(model)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = torch.compile(model, backend="tpuc", options={"strict": True})(x)
    out.pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    big = [t for t in saved if t.dim() > 1 and t.numel() > 16]
    assert big and all(t.is_contiguous() for t in big), [(tuple(t.shape), t.stride()) for t in big]
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_a_backward_run_eagerly_gets_saved_activations_in_their_traced_layout():
    from tpuc.backend import SavedLayout

    got = []
    wrapped = SavedLayout(lambda args: got.extend(args) or args, [(0, (2, 3), (1, 2))])
    dense = torch.arange(6.0).reshape(2, 3)
    wrapped([dense, torch.ones(3)])
    assert got[0].stride() == (1, 2) and torch.equal(got[0], dense)
    assert got[1].stride() == (1,)


def test_stats_count_a_graph_once_and_only_misses_as_compiles():
    """One Dynamo graph is one `dynamo_graphs`; a program read from the cache is a program
    and a cache hit, not a compile; warmup counts the programs it made ready."""

    def f(x):
        return torch.cos(x) * 3.25 - x  # a graph no other test compiles

    x = torch.randn(7, 3, 5)
    torch.compile(f, backend="tpuc")(x)
    s = tpuc.stats()
    assert (s["dynamo_graphs"], s["aot_graphs"], s["programs"], s["compiles"], s["cache_miss"]) == (1, 1, 1, 1, 1), s
    torch._dynamo.reset()
    tpuc.reset_stats()
    assert tpuc.warmup(torch.compile(f, backend="tpuc"), x) == 1
    s = tpuc.stats()
    assert s["programs"] == 1 and s.get("compiles", 0) == 0 and s["cache_memory"] == 1, s
