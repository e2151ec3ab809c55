"""Gradients of a compiled model against eager's, parameter by parameter."""

import torch


def assert_grads_match(model, eager_loss, compiled_loss, label, rtol=1e-4, atol=1e-5):
    """Backpropagates `eager_loss()` and then `compiled_loss()` (each a zero-argument function
    returning a scalar loss of `model`) and compares every parameter's gradient."""
    model.zero_grad()
    eager_loss().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled_loss().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=rtol, atol=atol, msg=lambda m: f"{label}: {n}: {m}")
