#!/usr/bin/env python3
"""Run emitted StableHLO on XLA's CPU backend and compare with PyTorch.

With --compile-only, only compiles every module (XLA CPU) and reports each.

Reads cases from stdin as "=== NAME" lines each followed by one StableHLO module (what
tests/numerics.rs emits). For each NAME, INPUTS[NAME] builds the inputs and CHECKS[NAME]
compares the outputs with a reference (PyTorch eager, or math.erf in float64). Prints one line
per case ("ok NAME: details" or "FAIL NAME: details") and exits 1 if any failed.

Execution uses only jaxlib 0.10.2 (no jax): xla_client.make_cpu_client(), compile_and_load()
on the MLIR text, and a tiny stand-in for jax's SingleDeviceSharding to put arrays on the
device. These are jaxlib internals, pinned with the venv.
"""

import math
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
import ml_dtypes


# --------------------------------------------------------------------------- XLA runner


class Runner:
    def __init__(self):
        from jaxlib import xla_client as xc, _jax

        self.xc = xc
        self.jax = _jax
        self.client = xc.make_cpu_client()
        self.dev = self.client.devices()[0]
        dev = self.dev

        class Sharding(_jax.SingleDeviceSharding):
            def _to_xla_hlo_sharding(self, num_dimensions):
                return xc.HloSharding.replicate()

            @property
            def memory_kind(self):
                return None

            @property
            def _device_assignment(self):
                return (dev,)

            @property
            def _internal_device_list(self):
                return xc.DeviceList((dev,))

        self.sharding = Sharding(dev)

    def run(self, mlir, args):
        xc, jax = self.xc, self.jax
        exe = self.client.compile_and_load(mlir, xc.DeviceList((self.dev,)), xc.CompileOptions())
        arrays = []
        for a in args:
            a = np.ascontiguousarray(a)
            aval = types.SimpleNamespace(shape=a.shape, dtype=a.dtype, weak_type=False)
            arrays.append(jax.batched_device_put(aval, self.sharding, [a], [self.dev], enable_x64=True))
        res = exe.execute_sharded(arrays)
        outs = res.disassemble_into_single_device_arrays()
        return [np.asarray(o[0]._single_device_array_to_np_array_did_copy()[0]) for o in outs]


# --------------------------------------------------------------------------- helpers

RNG = np.random.default_rng(1234)


def t(a):
    """numpy → torch (bf16 via float32)."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def n(x):
    """torch → numpy (bf16 as ml_dtypes.bfloat16)."""
    if x.dtype == torch.bfloat16:
        return x.float().numpy().astype(ml_dtypes.bfloat16)
    return x.detach().numpy()


def close(got, want, atol, rtol=0.0):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, "shape %s vs %s" % (got.shape, want.shape)
    nan_ok = np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    err = np.abs(got[fin] - want[fin])
    with np.errstate(invalid="ignore"):
        err = np.where(np.isinf(want[fin]) & (got[fin] == want[fin]), 0.0, err)
    tol = atol + rtol * np.abs(want[fin])
    worst = float(err.max()) if err.size else 0.0
    ok = nan_ok and bool(np.all(err <= tol))
    return ok, "max abs err %.3g%s" % (worst, "" if nan_ok else ", NaN positions differ")


def ulps_f32(got, want64):
    """Error in units of the last place of float32 at the reference value."""
    want = np.asarray(want64, np.float64)
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(np.asarray(got, np.float64) - want) / spacing


def narrow_ulp(values, name):
    """One unit in the last place of f16 / bf16 at each value."""
    a = np.abs(np.asarray(values, np.float32))
    if name == "f16":
        return np.spacing(a.astype(np.float16)).astype(np.float64)
    return np.spacing(a).astype(np.float64) * 65536.0  # bf16 keeps 7 of f32's 23 mantissa bits


def same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


# --------------------------------------------------------------------------- cases

INPUTS = {}
CHECKS = {}


def case(name, inputs):
    def deco(check):
        INPUTS[name] = inputs
        CHECKS[name] = check
        return check

    return deco


ERF_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-8, 3.74, 3.75, 4.0, -4.0, 10.0, 30.0, -30.0, 0.5, 1.0, -1.0], np.float64)


def erf_grid(dtype, lo, hi, count):
    g = np.concatenate([np.linspace(lo, hi, count - len(ERF_SPECIAL)), ERF_SPECIAL])
    return g.astype(dtype)


ERF_N = 200_000


def erf_f32_check(outs, x, tol_abs, max_ulps):
    (y,) = outs
    ref = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x.astype(np.float64)])
    ok, msg = close(y, ref, atol=tol_abs)
    fin = np.isfinite(ref) & (np.abs(ref) > 0)
    u = ulps_f32(y[fin], ref[fin])
    specials = (
        np.isnan(y[x != x]).all()
        and (y[x == np.inf] == 1).all()
        and (y[x == -np.inf] == -1).all()
        and np.signbit(y[(x == 0) & np.signbit(x)]).all()
    )
    ok = ok and specials and u.max() <= max_ulps
    return ok, "%s, max %.2f ulp over %d points in [-6, 6] + specials%s" % (
        msg, u.max(), len(x), "" if specials else ", special values wrong")


X_ERF32 = erf_grid(np.float32, -6.0, 6.0, ERF_N)


@case("erf_f32", lambda: [X_ERF32])
def _(outs):
    return erf_f32_check(outs, X_ERF32, 1e-6, 8)


@case("erf_chlo_f32", lambda: [X_ERF32])
def _(outs):
    return erf_f32_check(outs, X_ERF32, 1e-6, 8)


X_ERF64 = erf_grid(np.float64, -10.0, 10.0, ERF_N)


@case("erf_f64", lambda: [X_ERF64])
def _(outs):
    (y,) = outs
    ref = np.array([math.erf(v) if not math.isnan(v) else math.nan for v in X_ERF64])
    ok, msg = close(y, ref, atol=2e-16, rtol=4e-16)
    fin = np.isfinite(ref) & (ref != 0)
    u = np.abs(y[fin] - ref[fin]) / np.spacing(np.abs(ref[fin]))
    return ok and u.max() <= 4, "%s, max %.2f ulp (f64) over %d points in [-10, 10]" % (msg, u.max(), len(y))


for _dt, _name in [(ml_dtypes.bfloat16, "bf16"), (np.float16, "f16")]:

    def _mk(dt, name):
        x = erf_grid(np.float32, -5.0, 5.0, 20_000).astype(dt)

        @case("erf_" + name, lambda: [x])
        def _(outs):
            (y,) = outs
            want = n(torch.erf(t(x).float()).to(torch.bfloat16 if name == "bf16" else torch.float16))
            diff = np.abs(y.astype(np.float64) - want.astype(np.float64))
            # At most one unit in the last place of the narrow type (rounding of the f32 result).
            bad = (diff > narrow_ulp(want, name) * 1.0001) & np.isfinite(want.astype(np.float64))
            return not bad.any(), "max abs diff vs torch %.3g (%d points)" % (np.nanmax(diff), len(x))

    _mk(_dt, _name)


X_GELU = (RNG.standard_normal((64, 257)) * 4).astype(np.float32)


@case("gelu_none_f32", lambda: [X_GELU])
def _(outs):
    return close(outs[0], n(F.gelu(t(X_GELU).double())), atol=2e-6, rtol=1e-6)


@case("gelu_tanh_f32", lambda: [X_GELU])
def _(outs):
    return close(outs[0], n(F.gelu(t(X_GELU).double(), approximate="tanh")), atol=2e-6, rtol=1e-6)


X_GELU_BF16 = X_GELU.astype(ml_dtypes.bfloat16)


@case("gelu_none_bf16", lambda: [X_GELU_BF16])
def _(outs):
    want = n(F.gelu(t(X_GELU_BF16)))
    return close(outs[0].astype(np.float32), want.astype(np.float32), atol=1e-2, rtol=8e-3)


X_SM = (RNG.standard_normal((4, 6, 33)) * 30 + 1000).astype(np.float32)
X_SM[0, 0, :5] = -np.inf


@case("softmax_f32", lambda: [X_SM])
def _(outs):
    ok1, m1 = close(outs[0], n(torch.softmax(t(X_SM).double(), dim=2)), atol=1e-6, rtol=1e-5)
    ok2, m2 = close(outs[1], n(torch.log_softmax(t(X_SM).double(), dim=1)), atol=1e-4, rtol=1e-5)
    return ok1 and ok2, "softmax %s; log_softmax %s" % (m1, m2)


nan = np.nan
inf = np.inf
X_ARG = np.array(
    [
        [1, 3, 3, 2, 0, 3, -1, 2],
        [1, nan, 5, nan, 9, 0, 0, 1],
        [nan, 1, 2, 3, nan, 4, 5, 6],
        [7, 7, 7, 7, 7, 7, 7, 7],
        [-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf],
        [inf, 1, inf, -inf, 2, inf, 0, 0],
        [-0.0, 0.0, -0.0, 0.0, -1, -1, -2, -2],
        [2, 1, 0, -1, -1, 0, 1, 2],
        [-5, -4, -3, -9, -9, -3, -4, -5],
        [0, 0, 0, 0, 0, 0, 0, nan],
    ],
    np.float32,
)


@case("arg_reduce_f32", lambda: [X_ARG])
def _(outs):
    amax, amin = outs
    want_max = torch.argmax(t(X_ARG), dim=1).numpy()
    want_min = torch.argmin(t(X_ARG), dim=1).numpy()
    ok = np.array_equal(amax, want_max) and np.array_equal(amin, want_min)
    return ok, "argmax %s (torch %s), argmin %s (torch %s)" % (amax.tolist(), want_max.tolist(), amin.tolist(), want_min.tolist())


X_ARG_I = np.array([[3, 1, 3, 0, 1], [-2, -2, -7, 5, 5], [0, 0, 0, 0, 0]], np.int32)


@case("arg_reduce_i32", lambda: [X_ARG_I])
def _(outs):
    amax, amin = outs
    want_max = torch.argmax(t(X_ARG_I), dim=1).numpy().astype(np.int32)
    want_min = torch.argmin(t(X_ARG_I), dim=1).numpy().astype(np.int32)
    ok = np.array_equal(amax, want_max) and np.array_equal(amin, want_min) and amax.dtype == np.int32
    return ok, "argmax %s, argmin %s" % (amax.tolist(), amin.tolist())


X_SCAN = (RNG.standard_normal((5, 40)) * 1.1).astype(np.float32)
X_SCAN_I = RNG.integers(-1000, 1000, (7, 3)).astype(np.int64)


@case("scan", lambda: [X_SCAN, X_SCAN_I])
def _(outs):
    cs, cp, cmax, cmin, ci = outs
    x = t(X_SCAN).double()
    r = [
        close(cs, n(torch.cumsum(x, 1)), atol=1e-5, rtol=1e-5),
        close(cp, n(torch.cumprod(x, 1)), atol=1e-6, rtol=1e-4),
        close(cmax, n(torch.cummax(x, 1).values), atol=0),
        close(cmin, n(torch.cummin(x, 1).values), atol=0),
        (np.array_equal(ci, torch.cumsum(t(X_SCAN_I), 0).numpy()), "i64 cumsum exact"),
    ]
    return all(ok for ok, _ in r), "; ".join(m for _, m in r)


X_SORT = np.array(
    [
        [3, nan, 1, 3, -0.0, 0.0, nan, -inf, 2, 1, inf, -0.0],
        [5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6],
        [1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2],
    ],
    np.float32,
)


@case("sort_f32", lambda: [X_SORT])
def _(outs):
    av, ai, dv, di = outs
    wa = torch.sort(t(X_SORT), dim=1, stable=True)
    wd = torch.sort(t(X_SORT), dim=1, descending=True, stable=True)
    ok = (
        same_bits(av, wa.values.numpy())
        and np.array_equal(ai, wa.indices.numpy())
        and same_bits(dv, wd.values.numpy())
        and np.array_equal(di, wd.indices.numpy())
    )
    return ok, "ascending idx %s vs torch %s; descending idx %s vs torch %s" % (
        ai[0].tolist(), wa.indices[0].tolist(), di[0].tolist(), wd.indices[0].tolist())


X_LN = (RNG.standard_normal((2, 3, 8)) * 3 + 5).astype(np.float32)


@case("layer_norm_f32", lambda: [X_LN])
def _(outs):
    y, mean, rstd = outs
    wy, wm, wr = torch.native_layer_norm(t(X_LN).double(), [8], None, None, 1e-5)
    r = [close(y, n(wy), atol=1e-5, rtol=1e-5), close(mean, n(wm), atol=1e-5, rtol=1e-6), close(rstd, n(wr), atol=1e-5, rtol=1e-5)]
    return all(ok for ok, _ in r), "; ".join(m for _, m in r)


Q = RNG.standard_normal((2, 3, 5, 8)).astype(np.float32)
K = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
Vv = RNG.standard_normal((2, 3, 7, 4)).astype(np.float32)
BMASK = RNG.random((5, 7)) > 0.4
BMASK[:, 0] = True  # no fully masked rows
FMASK = RNG.standard_normal((2, 1, 5, 7)).astype(np.float32)


@case("attention", lambda: [Q, K, Vv, BMASK, FMASK])
def _(outs):
    c, b, f = outs
    q, k, v = t(Q).double(), t(K).double(), t(Vv).double()
    sc = 1 / math.sqrt(8)
    r = [
        close(c, n(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=sc)), atol=1e-5, rtol=1e-5),
        close(b, n(F.scaled_dot_product_attention(q, k, v, attn_mask=t(BMASK), scale=0.5)), atol=1e-5, rtol=1e-5),
        close(f, n(F.scaled_dot_product_attention(q, k, v, attn_mask=t(FMASK).double(), scale=0.5)), atol=1e-5, rtol=1e-5),
    ]
    return all(ok for ok, _ in r), "causal %s; bool mask %s; float mask %s" % tuple(m for _, m in r)


X_POOL = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
G_POOL = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)


@case("pooling", lambda: [X_POOL, G_POOL])
def _(outs):
    mp, grad, avg = outs
    x = t(X_POOL).double().requires_grad_(True)
    y = F.max_pool2d(x, 3, stride=2, padding=1)
    y.backward(t(G_POOL).double())
    s = F.avg_pool2d(t(X_POOL).double(), 2, stride=2, divisor_override=1)
    r = [close(mp, n(y), atol=0), close(grad, n(x.grad), atol=1e-6), close(avg, n(s), atol=1e-5)]
    return all(ok for ok, _ in r), "max_pool %s; max_pool grad %s; sum_pool %s" % tuple(m for _, m in r)


X_CONV = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32)
W_CONV = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)


@case("conv2d", lambda: [X_CONV, W_CONV])
def _(outs):
    want = F.conv2d(t(X_CONV).double(), t(W_CONV).double(), stride=2, padding=1, dilation=2, groups=2)
    return close(outs[0], n(want), atol=1e-4, rtol=1e-5)


TABLE = RNG.standard_normal((10, 4)).astype(np.float32)
IDS = np.array([3, 0, 9, 3, 7], np.int64)
UPD = RNG.standard_normal((5, 4)).astype(np.float32)


@case("gather_scatter", lambda: [TABLE, IDS, UPD])
def _(outs):
    g, s = outs
    want_g = F.embedding(t(IDS), t(TABLE))
    want_s = t(TABLE).double().index_add(0, t(IDS), t(UPD).double())
    r = [close(g, n(want_g), atol=0), close(s, n(want_s), atol=1e-6)]
    return all(ok for ok, _ in r), "gather %s; scatter-add %s" % tuple(m for _, m in r)


@case("constants_exact", lambda: [])
def _(outs):
    want = [
        np.array([0.1] * 3, np.float32),
        np.array([np.float32(1e-40), -0.0, np.float32(3.4028235e38)], np.float32),
        np.frombuffer(bytes.fromhex("0100C07F"), np.float32),  # a NaN payload
        np.array([0.1, 1.0 / 3.0], np.float64),
        np.array([0.099975586, 65504.0], np.float16),
        np.array([1.0 / 3.0], np.float32).astype(ml_dtypes.bfloat16),
        np.array([448.0, -0.015625], ml_dtypes.float8_e4m3fn),
        np.array([-(2 ** 63), 2 ** 63 - 1], np.int64),
        np.array([2 ** 64 - 1], np.uint64),
        np.array([True, False, True, True, False]),
        np.array([-128, 127, 0, -1], np.int8),
    ]
    bad = [i for i, (g, w) in enumerate(zip(outs, want)) if not same_bits(g, w)]
    return not bad and len(outs) == len(want), "%d constants bit-exact%s" % (
        len(want), "" if not bad else "; wrong: %s" % [(i, outs[i], want[i]) for i in bad])


U_A = np.array([200, 100, 0, 255], np.uint8)
U_B = np.array([100, 200, 255, 0], np.uint8)
I_A = np.array([-7, 7, -7, 7, -8], np.int32)
I_B = np.array([2, -2, -2, 2, 3], np.int32)


@case("integer_semantics", lambda: [U_A, U_B, I_A, I_B])
def _(outs):
    gt_u, div, rem, sign_u, max_u = outs
    r = [
        (np.array_equal(gt_u, U_A > U_B), "unsigned compare"),
        (np.array_equal(div, torch.div(t(I_A), t(I_B), rounding_mode="trunc").numpy()), "int div truncates"),
        (np.array_equal(rem, torch.fmod(t(I_A), t(I_B)).numpy()), "int rem has the dividend's sign"),
        (np.array_equal(sign_u, (U_A != 0).astype(np.uint8)), "unsigned sign"),
        (np.array_equal(max_u, np.array(255, np.uint8)), "unsigned max reduce"),
    ]
    bad = [m for ok, m in r if not ok]
    return not bad, "ok: " + ", ".join(m for _, m in r) if not bad else "wrong: %s; got %s" % (bad, outs)


X_RED = RNG.standard_normal((3, 5)).astype(np.float32)
X_RED[1, 2] = np.nan
B_RED = np.array([[True, True, False], [True, True, True], [False, False, False]])


@case("reductions", lambda: [X_RED, B_RED])
def _(outs):
    mx, mn, sm, pr, all_, any_ = outs
    x = t(X_RED).double()
    r = [
        close(mx, n(torch.amax(x, 1)), atol=0),
        close(mn, n(torch.amin(x, 1)), atol=0),
        close(sm, n(torch.sum(x, 1)), atol=1e-6),
        close(pr, n(torch.prod(x, 1)), atol=1e-6),
        (np.array_equal(all_, B_RED.all(1)), "all"),
        (np.array_equal(any_, B_RED.any(1)), "any"),
    ]
    return all(ok for ok, _ in r), "; ".join(m for _, m in r)


# --------------------------------------------------------------------------- main


def read_cases(text):
    cases, name, buf = [], None, []
    for line in text.splitlines(keepends=True):
        if line.startswith("=== "):
            if name is not None:
                cases.append((name, "".join(buf)))
            name, buf = line[4:].strip(), []
        else:
            buf.append(line)
    if name is not None:
        cases.append((name, "".join(buf)))
    return cases


def compile_only(cases, runner):
    """Compile every module with XLA's CPU backend (no execution, no reference)."""
    failed = 0
    for name, mlir in cases:
        try:
            runner.client.compile_and_load(mlir, runner.xc.DeviceList((runner.dev,)), runner.xc.CompileOptions())
            print("ok %s" % name)
        except Exception as e:
            print("FAIL %s: %s: %s" % (name, type(e).__name__, str(e).strip()[:2000]))
            failed += 1
    return 1 if failed else 0


def main():
    cases = read_cases(sys.stdin.read())
    runner = Runner()
    if "--compile-only" in sys.argv[1:]:
        return compile_only(cases, runner)
    failed = 0
    for name, mlir in cases:
        if name not in CHECKS:
            print("FAIL %s: no reference in run_stablehlo.py" % name)
            failed += 1
            continue
        try:
            outs = runner.run(mlir, INPUTS[name]())
            ok, msg = CHECKS[name](outs)
        except Exception as e:  # report, keep going
            ok, msg = False, "%s: %s" % (type(e).__name__, e)
        print("%s %s: %s" % ("ok" if ok else "FAIL", name, msg))
        failed += 0 if ok else 1
    missing = sorted(set(CHECKS) - {n for n, _ in cases})
    if missing:
        print("FAIL: cases with a reference but no module: %s" % missing)
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
