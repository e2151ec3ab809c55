"""The update rules of torch.optim's SGD, Adam and AdamW as pure functions of tensors, for
`tpuc.train_step`, which traces them into the step program.

Each rule follows torch's single-tensor implementation (`torch/optim/sgd.py`, `adam.py`) op for
op, so a compiled step matches eager training to float rounding. The differences are ones of
form: no in-place ops, the learning rate a 0-d float64 tensor (a program input, so a scheduler
never recompiles), and Adam's bias corrections computed on the device from the step count, in
float64 as torch's Python floats are (torch reads the count back to Python first; TPU programs
narrow float64 to float32). Every other hyperparameter is a constant of the program: a
change to one compiles a new program.

A rule's state is torch's own (`optimizer.state[p]`, the same keys, dtypes and shapes), so
`TrainStep.sync()` writes back what eager training would hold.
"""

from __future__ import annotations

import torch

from .errors import TpucError


class Rule:
    """One optimizer family: its per-parameter state and its update."""

    #: The torch.optim class names this rule serves.
    names: tuple[str, ...] = ()

    def check(self, group: dict) -> None:
        """Raises TpucError for settings the rule does not implement."""

    def state_keys(self, group: dict) -> list[str]:
        """The keys of `optimizer.state[p]` the rule reads and writes."""
        raise NotImplementedError

    def initial(self, p: torch.Tensor, key: str, group: dict) -> torch.Tensor:
        """The value of `state[key]` before the first step (torch creates it lazily)."""
        raise NotImplementedError

    def hyper(self, group: dict) -> tuple:
        """The group's settings that the program bakes in (the learning rate excluded)."""
        raise NotImplementedError

    def update(self, p, g, state: dict, lr, group: dict):
        """Returns (new parameter, new state) for one parameter with gradient `g`."""
        raise NotImplementedError


def _flag(group: dict, key: str) -> bool:
    return bool(group.get(key, False))


class SGD(Rule):
    names = ("SGD",)

    def check(self, group):
        if group.get("nesterov") and (group["momentum"] <= 0 or group.get("dampening", 0) != 0):
            raise TpucError("tpuc.train_step: SGD with nesterov needs a momentum and zero dampening", kind="optimizer")

    def state_keys(self, group):
        return ["momentum_buffer"] if group["momentum"] != 0 else []

    def initial(self, p, key, group):
        return torch.zeros_like(p, memory_format=torch.preserve_format)

    def hyper(self, group):
        return ("sgd", float(group["momentum"]), float(group.get("dampening", 0)), float(group["weight_decay"]),
                _flag(group, "nesterov"), _flag(group, "maximize"))

    def update(self, p, g, state, lr, group, first=None):
        momentum, dampening = group["momentum"], group.get("dampening", 0)
        wd = group["weight_decay"]
        if _flag(group, "maximize"):
            g = -g
        if wd != 0:
            g = g.add(p, alpha=wd)
        new = {}
        if momentum != 0:
            buf = state["momentum_buffer"]
            # torch's first step takes the gradient as the buffer; with no dampening a zero
            # buffer gives the same, else `first` (1 before the first step) selects it.
            steady = buf * momentum + g * (1 - dampening) if dampening != 0 else buf * momentum + g
            buf = steady if first is None else torch.where(first > 0, g, steady)
            new["momentum_buffer"] = buf
            g = g.add(buf, alpha=momentum) if _flag(group, "nesterov") else buf
        return p - lr.to(p.dtype) * g, new


class Adam(Rule):
    names = ("Adam", "AdamW")

    def check(self, group):
        if group.get("differentiable"):
            raise TpucError("tpuc.train_step: differentiable=True optimizers are not supported", kind="optimizer")
        if isinstance(group.get("betas", (0, 0))[0], torch.Tensor):
            raise TpucError("tpuc.train_step: tensor betas are not supported; give floats", kind="optimizer")

    def state_keys(self, group):
        keys = ["step", "exp_avg", "exp_avg_sq"]
        return keys + ["max_exp_avg_sq"] if _flag(group, "amsgrad") else keys

    def initial(self, p, key, group):
        if key == "step":
            # torch's non-capturable, non-fused Adam keeps the count as a 0-d float32 CPU tensor.
            return torch.tensor(0.0, dtype=torch.float32)
        return torch.zeros_like(p, memory_format=torch.preserve_format)

    def hyper(self, group, decoupled=None):
        b1, b2 = group["betas"]
        return ("adam", float(b1), float(b2), float(group["eps"]), float(group["weight_decay"]),
                _flag(group, "amsgrad"), _flag(group, "maximize"), _decoupled(group))

    def update(self, p, g, state, lr, group, first=None):
        beta1, beta2 = group["betas"]
        eps, wd = group["eps"], group["weight_decay"]
        if _flag(group, "maximize"):
            g = -g
        step = state["step"] + 1
        if wd != 0:
            if _decoupled(group):
                p = p * (1 - lr * wd).to(p.dtype)
            else:
                g = g.add(p, alpha=wd)
        exp_avg = state["exp_avg"].lerp(g, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g.conj() * (1 - beta2)
        # torch computes these scalars in Python floats (double) and applies them as scalars.
        t = step.to(torch.float64)
        bias_correction1 = 1 - torch.pow(beta1, t)
        bias_correction2 = 1 - torch.pow(beta2, t)
        step_size = (lr / bias_correction1).to(p.dtype)
        bias_correction2_sqrt = bias_correction2.sqrt().to(p.dtype)
        new = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        if _flag(group, "amsgrad"):
            max_sq = torch.maximum(state["max_exp_avg_sq"], exp_avg_sq)
            new["max_exp_avg_sq"] = max_sq
            denom = max_sq.sqrt() / bias_correction2_sqrt + eps
        else:
            denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps
        return p - step_size * (exp_avg / denom), new


def _decoupled(group: dict) -> bool:
    return bool(group.get("decoupled_weight_decay", False))


_RULES = {name: rule for rule in (SGD(), Adam()) for name in rule.names}


def rule_for(optimizer: torch.optim.Optimizer) -> Rule:
    """The rule of `optimizer`'s class, after checking each param group's settings."""
    name = type(optimizer).__name__
    rule = _RULES.get(name)
    if rule is None or type(optimizer).step is not getattr(torch.optim, name).step:
        raise TpucError(
            f"tpuc.train_step: optimizer {type(optimizer).__module__}.{type(optimizer).__qualname__} is not supported; "
            "supported: torch.optim.SGD, Adam and AdamW", kind="optimizer")
    for group in optimizer.param_groups:
        rule.check(group)
        if type(optimizer).__name__ == "AdamW":
            group.setdefault("decoupled_weight_decay", True)
    return rule


def clip_by_global_norm(grads: list, max_norm: float) -> list:
    """`torch.nn.utils.clip_grad_norm_(params, max_norm)` (norm 2) on a list of gradients."""
    if not grads:
        return grads
    norms = [torch.linalg.vector_norm(g, 2) for g in grads]
    total = torch.linalg.vector_norm(torch.stack(norms), 2)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return [g * coef for g in grads]
