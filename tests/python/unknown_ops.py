"""Three operators that tpuc can never know: custom ops of a test library, with real eager
kernels, fake kernels and gradients. The fallback, strict-mode and error-reporting tests use
them, so that those tests do not break each time the compiler learns another aten op.

`unknown_a(x) = x * sin(x)`, `unknown_b(x) = x + tanh(x)`, `unknown_c(x) = x * sigmoid(x)`."""

import torch

NAMES = ("unknown_a", "unknown_b", "unknown_c")


def target(name):
    return f"torch.ops.tpuc_test.{name}.default"


def _define(name, value, derivative):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        return value(x)

    op = torch.library.custom_op(f"tpuc_test::{name}", kernel, mutates_args=())
    op.register_fake(lambda x: torch.empty_like(x))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * derivative(x)

    op.register_autograd(backward, setup_context=setup_context)
    return op


unknown_a = _define("unknown_a", lambda x: x * torch.sin(x), lambda x: torch.sin(x) + x * torch.cos(x))
unknown_b = _define("unknown_b", lambda x: x + torch.tanh(x), lambda x: 2 - torch.tanh(x) ** 2)
unknown_c = _define(
    "unknown_c", lambda x: x * torch.sigmoid(x), lambda x: torch.sigmoid(x) * (1 + x * (1 - torch.sigmoid(x))))
