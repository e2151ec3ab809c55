"""`tpuc.train_step`: the whole training step (forward, backward, clipping, optimizer update) as one
program, its state resident on the device and donated from step to step, against the same loop
run eagerly, on the CPU plugin with host aliasing off (so it moves data as an accelerator does).

Each model trains 20 steps on fresh random batches. Losses at every step and every final
parameter and optimizer state must be within 1e-4 relative of eager; each model compiles one
program; from step 2 on, a step uploads its batch plus at most 1 KiB (the learning rates, the
seed) and downloads its loss plus at most 1 KiB.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import tpuc
import unknown_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 20
OPTS = {"host_aliasing": False}


@pytest.fixture(autouse=True)
def _host_aliasing_back_on():
    yield
    from tpuc import _C

    _C.set_host_aliasing(True)


def _close(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 1e-4) -> None:
    got, want = got.detach().double(), want.detach().double()
    scale = max(want.abs().max().item(), 1e-30)
    err = (got - want).abs().max().item() if want.numel() else 0.0
    assert err <= rel * scale, f"{what}: max abs error {err:.3e} vs scale {scale:.3e} (> {rel:g} relative)"


def _compare_states(model_a, model_b, opt_a, opt_b, zero_grad=None) -> None:
    """`zero_grad`: name suffix -> (slice, atol) for parameter parts whose gradient is zero in
    exact arithmetic, so that Adam turns rounding noise into steps in both runs: those are held
    to a bound on that noise instead."""
    def split(name, a, b, atol):
        for suffix, (part, bound) in (zero_grad or {}).items():
            if name.endswith(suffix) and a.dim() > 0:
                assert (b[part] - a[part]).abs().max().item() <= (atol or bound), f"{name}[{part}]"
                a, b = a.clone(), b.clone()
                a[part] = 0
                b[part] = 0
        return a, b

    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        a, b = split(name, a, b, None)
        _close(b, a, f"model {name}")
    names = {id(p): n for n, p in model_a.named_parameters()}
    order = [names[id(p)] for g in opt_a.param_groups for p in g["params"]]
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        assert sa["state"][k].keys() == sb["state"][k].keys(), k
        for key, v in sa["state"][k].items():
            w = sb["state"][k][key]
            assert w.dtype == v.dtype and w.shape == v.shape, (k, key, w.dtype, v.dtype)
            # Moments of a gradient that is rounding noise are noise too.
            v, w = split(order[k], v, w, 1e-6)
            _close(w, v, f"optimizer state {order[k]}.{key}")


def _train_both(make_model, make_opt, batches, loss_fn=None, clip=None, make_sched=None, accumulate=1):
    """The same loop eagerly and through tpuc.train_step; returns both models and optimizers."""
    eager_model = make_model()
    tpuc_model = copy.deepcopy(eager_model)
    eager_opt, tpuc_opt = make_opt(eager_model), make_opt(tpuc_model)
    scheds = (make_sched(eager_opt), make_sched(tpuc_opt)) if make_sched else (None, None)
    step = tpuc.train_step(tpuc_model, tpuc_opt, loss_fn, clip_grad_norm=clip, accumulate=accumulate, options=OPTS)
    traffic = []
    for i, (args, kwargs) in enumerate(batches):
        eager_opt.zero_grad()
        if accumulate == 1:
            loss = loss_fn(eager_model, *args, **kwargs) if loss_fn else eager_model(*args, **kwargs).loss
            loss.backward()
            want = loss.item()
        else:
            want = 0.0
            chunks = [tuple(a.chunk(accumulate)[j] for a in args) for j in range(accumulate)]
            for c in chunks:
                loss = loss_fn(eager_model, *c) / accumulate
                loss.backward()
                want += loss.item()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(eager_model.parameters(), clip)
        eager_opt.step()
        before = tpuc.stats()
        got = step(*args, **kwargs).item()
        after = tpuc.stats()
        traffic.append((after["h2d_bytes"] - before["h2d_bytes"], after["d2h_bytes"] - before["d2h_bytes"]))
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-6), f"step {i + 1}: loss {got} vs eager {want}"
        for s in scheds:
            if s is not None:
                s.step()
    step.sync()
    assert tpuc.stats()["programs"] == 1, tpuc.stats()
    batch_bytes = sum(t.numel() * t.element_size() for t in list(batches[1][0]) + list(batches[1][1].values()))
    for i, (up, down) in enumerate(traffic[1:], start=2):
        assert batch_bytes <= up <= batch_bytes + 1024, f"step {i}: {up} bytes up for a {batch_bytes}-byte batch"
        assert 4 <= down <= 4 + 1024, f"step {i}: {down} bytes down"
    return (eager_model, eager_opt), (tpuc_model, tpuc_opt), step


def _lm_batches(vocab, n=STEPS, b=2, s=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (b, s), generator=g)
        out.append(((), {"input_ids": ids, "labels": ids}))
    return out


def _cosine(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / STEPS)))


def _adamw(model):
    return torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def test_gpt2_adamw_clipping_cosine_schedule():
    def make():
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg).train()

    (em, eo), (tm, to), _ = _train_both(make, _adamw, _lm_batches(128), clip=1.0, make_sched=_cosine)
    # The key bias: attention's softmax ignores what a key adds to every score of a query's row.
    _compare_states(em, tm, eo, to, zero_grad={"attn.c_attn.bias": (slice(32, 64), 3e-5)})


def test_llama_adamw_clipping_cosine_schedule():
    def make():
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        return transformers.LlamaForCausalLM(cfg).train()

    (em, eo), (tm, to), _ = _train_both(make, _adamw, _lm_batches(128), clip=1.0, make_sched=_cosine)
    _compare_states(em, tm, eo, to)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        )

    def forward(self, x):
        return self.body(x)


def _xent(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def _image_batches(n=STEPS, b=4, size=16, classes=10, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [((torch.randn(b, 3, size, size, generator=g), torch.randint(0, classes, (b,), generator=g)), {}) for _ in range(n)]


def test_cnn_with_batchnorm_sgd_nesterov():
    def make():
        torch.manual_seed(0)
        return _CNN().train()

    def sgd(model):
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)

    (em, eo), (tm, to), _ = _train_both(make, sgd, _image_batches(), loss_fn=_xent)
    _compare_states(em, tm, eo, to)
    # Batch-norm statistics were updated on the device and written back.
    assert int(tm.body[1].num_batches_tracked) == STEPS


def test_vit_two_param_groups():
    def make():
        torch.manual_seed(0)
        cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, num_labels=10,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.ViTForImageClassification(cfg).train()

    def groups(model):
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in model.named_parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0, "lr": 1e-3}],
                                 lr=2e-3)

    batches = [((), {"pixel_values": x, "labels": y}) for (x, y), _ in _image_batches()]
    (em, eo), (tm, to), _ = _train_both(make, groups, batches)
    # The key bias: attention's softmax ignores what a key adds to every score of a query's row.
    _compare_states(em, tm, eo, to, zero_grad={"k_proj.bias": (slice(None), 1e-4)})


def test_accumulate_averages_micro_batch_gradients():
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    g = torch.Generator().manual_seed(3)
    batches = [((torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)), {}) for _ in range(6)]
    (em, eo), (tm, to), _ = _train_both(make, lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True),
                                        batches, loss_fn=_xent, accumulate=2)
    _compare_states(em, tm, eo, to)


def test_dropout_draws_from_torchs_generator():
    def run(seed):
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                      resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
        model = transformers.GPT2LMHeadModel(cfg).train()
        step = tpuc.train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), options=OPTS)
        torch.manual_seed(seed)
        return [step(**kw).item() for _, kw in _lm_batches(64, n=5, s=8)]

    a, b, c = run(7), run(7), run(8)
    assert a == b, (a, b)
    assert a != c, (a, c)


def test_state_changed_on_the_host_is_uploaded_again():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = tpuc.train_step(model, opt, _xent, options=OPTS)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    step(x, y)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    # A zero model gives equal logits: the loss is log(2) whatever the input.
    assert math.isclose(step(x, y).item(), math.log(2), rel_tol=1e-6)
    step.sync()
    assert model.weight.abs().sum() > 0


def test_errors_name_what_is_wrong():
    model = torch.nn.Linear(4, 2)
    with pytest.raises(tpuc.TpucError, match="not supported"):
        tpuc.train_step(model, torch.optim.RMSprop(model.parameters()))
    step = tpuc.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), options=OPTS)
    with pytest.raises(tpuc.TpucError, match="floating scalar"):
        step(torch.randn(3, 4))  # the output is not a scalar and has no .loss


_CHECKPOINT_SCRIPT = r"""
import json, sys, torch, transformers, tpuc
sys.path.insert(0, {tests!r})
from test_train_step import _gpt2_small, _lm_batches
model = _gpt2_small()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
ck = torch.load({path!r})
model.load_state_dict(ck["model"])
opt.load_state_dict(ck["optim"])
step = tpuc.train_step(model, opt, options={{"host_aliasing": False}})
losses = [step(**kw).item() for _, kw in _lm_batches(128)[10:]]
print(json.dumps(losses))
"""


def _gpt2_small():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg).train()


def test_checkpoint_and_resume_in_a_new_process(tmp_path):
    batches = _lm_batches(128)
    model = _gpt2_small()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    step = tpuc.train_step(model, opt, options=OPTS)
    whole = [step(**kw).item() for _, kw in batches]
    model = _gpt2_small()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    step = tpuc.train_step(model, opt, options=OPTS)
    first = [step(**kw).item() for _, kw in batches[:10]]
    assert first == whole[:10]
    step.sync()
    path = str(tmp_path / "ck.pt")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
    script = _CHECKPOINT_SCRIPT.format(tests=os.path.dirname(__file__), path=path)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    resumed = json.loads(out.stdout.strip().splitlines()[-1])
    for i, (a, b) in enumerate(zip(resumed, whole[10:]), start=11):
        assert math.isclose(a, b, rel_tol=1e-6), f"step {i}: resumed {a} vs uninterrupted {b}"


def test_exported_step_replays_in_the_cli(tmp_path):
    tpuc_bin = os.environ.get("TPUC_BIN") or os.path.join(ROOT, "target", "debug", "tpuc")
    model = _gpt2_small()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    step = tpuc.train_step(model, opt, options=OPTS)
    batches = _lm_batches(128, n=3)
    for _, kw in batches:
        step(**kw)
    ids = batches[0][1]["input_ids"]
    export = tmp_path / "step"
    step.export(str(export), input_ids=ids, labels=ids)
    manifest = json.loads((export / "step.json").read_text())
    assert manifest["steps_done"] == 3 and len(manifest["state"]) > 0
    np.save(tmp_path / "ids.npy", ids.numpy())
    want = [step(input_ids=ids, labels=ids).item() for _ in range(STEPS)]
    out = subprocess.run([tpuc_bin, "run", str(export), "--steps", str(STEPS), "--inputs", str(tmp_path / "ids.npy"),
                          str(tmp_path / "ids.npy"), "--json", "--no-host-aliasing"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(report["losses"]) == STEPS
    for i, (a, b) in enumerate(zip(report["losses"], want), start=1):
        assert math.isclose(a, b, rel_tol=1e-5), f"replayed step {i}: {a} vs the Python loop's {b}"
    ids_bytes = 2 * ids.numel() * 8
    assert ids_bytes <= report["h2d_bytes_per_step"] <= ids_bytes + 1024, report
    assert report["d2h_bytes_per_step"] <= 4 + 1024, report


class _UnknownOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.1)

    def forward(self, x):
        return (x @ unknown_ops.unknown_a(self.w)).sum()


class _Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        y = (x @ self.w).sum()
        if y > 0:
            return y
        return -y


def test_an_op_tpuc_cannot_compile_is_named_with_the_models_source_line():
    model = _UnknownOp()
    step = tpuc.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), options=OPTS)
    with pytest.raises(tpuc.TpucError) as e:
        step(torch.randn(3, 4))
    assert e.value.target == unknown_ops.target("unknown_a")
    assert e.value.source.startswith("test_train_step.py:") and e.value.source.endswith("in forward"), e.value.source
    assert "unknown_a" in str(e.value) and e.value.source in str(e.value)


def test_data_dependent_control_flow_is_refused_with_its_source_line():
    model = _Branchy()
    step = tpuc.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), options=OPTS)
    with pytest.raises(tpuc.TpucError, match="torch.where") as e:
        step(torch.randn(3, 4))
    assert e.value.source.startswith("test_train_step.py:") and "forward" in e.value.source, e.value.source


def test_bf16_autocast_inside_the_step():
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))

    # SGD: parameters then differ as the bf16 gradients do (Adam would turn the rounding
    # differences of near-zero gradients into whole steps).
    eager, mine = make(), make()
    eo = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    step = tpuc.train_step(mine, torch.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9), _xent, options=OPTS)
    g = torch.Generator().manual_seed(4)
    for i in range(5):
        x, y = torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            eo.zero_grad()
            loss = _xent(eager, x, y)
            loss.backward()
            eo.step()
            got = step(x, y)
        assert got.tensor().dtype == torch.float32
        assert math.isclose(got.item(), loss.item(), rel_tol=2e-2), (i, got.item(), loss.item())
    step.sync()
    for (name, a), b in zip(eager.state_dict().items(), mine.state_dict().values()):
        _close(b, a, name, rel=2e-2)
    assert tpuc.stats()["programs"] == 1


def _gpt2_mesh_model():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg).train()


@pytest.mark.parametrize("policy", ["fsdp", "tp", "dp"])
def test_the_step_over_a_mesh_equals_the_single_device_step(policy):
    """One SPMD program over 4 CPU devices: fsdp shards parameters and optimizer state (each
    device holds a quarter, the gathers and reductions inside the program), tp splits the
    matmul weights and their optimizer state in Megatron pairs, dp replicates the state."""
    batches = _lm_batches(128, n=8, b=4)
    losses = {}
    models = {}
    for mesh in (None, "x=4"):
        model = _gpt2_mesh_model()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        step = tpuc.train_step(model, opt, clip_grad_norm=1.0, mesh=mesh, policy=policy if mesh else None, options=OPTS)
        losses[mesh] = [step(**kw).item() for _, kw in batches]
        step.sync()
        models[mesh] = model
    for i, (a, b) in enumerate(zip(losses["x=4"], losses[None]), start=1):
        assert math.isclose(a, b, rel_tol=1e-5), f"{policy} step {i}: {a} on the mesh vs {b} on one device"
    for (name, a), b in zip(models[None].state_dict().items(), models["x=4"].state_dict().values()):
        if name.endswith("attn.c_attn.bias"):
            # The key bias: attention's softmax ignores what a key adds to every score of a
            # query's row, so its gradient is rounding noise that Adam turns into steps.
            assert (b[32:64] - a[32:64]).abs().max() <= 3e-5, name
            a, b = torch.cat([a[:32], a[64:]]), torch.cat([b[:32], b[64:]])
        _close(b, a, f"{policy}: {name}", rel=1e-4)


def test_fsdp_step_for_a_tpu_topology_holds_a_fraction_of_the_state_per_device():
    """Compiled through libtpu for v5e:2x2 without chips: with fsdp each device's arguments
    (parameters, optimizer state, its quarter of the batch) are at most 0.3 of the replicated
    step's. (Widths of 512: TPUs pad a shard's minor dim to 128 lanes, so narrower models
    keep more than a quarter per device.)"""
    def summary(**kw):
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=512, n_layer=1, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = tpuc.train_step(model, opt, options={"target": "tpu", "topology": "v5e:2x2"}, **kw)
        ids = torch.randint(0, 256, (8, 32))
        return step.compile(input_ids=ids, labels=ids)

    whole, sharded = summary(), summary(mesh="x=4", policy="fsdp")
    assert whole["target"] == sharded["target"] == "tpu"
    assert sharded["partitions"] == 4
    a, b = whole["memory"]["argument_bytes"], sharded["memory"]["argument_bytes"]
    assert b <= 0.3 * a, f"fsdp arguments {b} bytes per device vs {a} replicated"


def test_bert_masked_lm_with_a_tied_bias_read_under_one_name():
    """BERT ties its decoder's weight and bias to other parameters; the forward reads the bias
    under one of its two names, so aot sees a parameter name without a gradient."""
    def make():
        torch.manual_seed(0)
        cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg).train()

    (em, eo), (tm, to), _ = _train_both(make, _adamw, _lm_batches(128, n=10))
    # The key bias: attention's softmax ignores what a key adds to every score of a query's row.
    _compare_states(em, tm, eo, to, zero_grad={"attention.self.key.bias": (slice(None), 3e-5)})
