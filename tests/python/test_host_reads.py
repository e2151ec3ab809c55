"""Numbers read on the host inside a compiled graph (`.item()`, `.tolist()`, `int(t)`; with
Dynamo's `capture_scalar_outputs`, or inside an ATen decomposition such as `narrow` with a
tensor start): the graph is split at the read, the parts after it take the number as an input
(a value, or a size, whose parts are compiled per bucket or shape), and strict mode allows it.
Results and gradients against eager, on real inputs."""

import pytest
import torch

import tpuc


@pytest.fixture(autouse=True)
def capture_scalars():
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        yield
    torch._dynamo.reset()


def strict(f):
    return torch.compile(f, backend="tpuc", options={"strict": True})


def test_a_number_read_as_a_value():
    def f(x, n):
        return x * n.sum().item() + 1, x[:, :2] * n.max().item()

    x = torch.randn(3, 4)
    before = tpuc.stats().get("host_reads", 0)
    g = strict(f)
    for n in (torch.tensor([1, 2]), torch.tensor([5, -3])):
        for got, want in zip(g(x, n), f(x, n)):
            torch.testing.assert_close(got, want)
    assert tpuc.stats()["host_reads"] > before


def test_a_number_read_as_a_size():
    def f(x, n):
        m = n.max().item()
        torch._check(m >= 0)
        torch._check(m <= x.shape[0])
        return x[:m] * 2, torch.arange(m), x[m:]

    x = torch.arange(20.0).reshape(5, 4)
    g = strict(f)
    for n in (torch.tensor([1, 3]), torch.tensor([4, 2]), torch.tensor([0, 0])):
        for got, want in zip(g(x, n), f(x, n)):
            assert torch.equal(got, want)


def test_views_of_an_input_at_offsets_read_on_the_host():
    """`tensor_split` at tensor indices and `narrow` at a tensor start: the parts are views of
    the input at offsets known only at run time, returned as views as eager returns them."""
    x = torch.arange(125.0).reshape(5, 5, 5)
    idx = torch.tensor([1, 2, 4])
    got = torch.compile(lambda x, i: torch.tensor_split(x, i, dim=0), backend="tpuc", fullgraph=True,
                        options={"strict": True})(x, idx)
    want = torch.tensor_split(x, idx, dim=0)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    start = torch.tensor(2)
    got = torch.compile(lambda x, s: torch.narrow(x, 1, s, 2), backend="tpuc", fullgraph=True,
                        options={"strict": True})(x, start)
    assert torch.equal(got, torch.narrow(x, 1, 2, 2))


def test_training_through_numbers_read_on_the_host():
    """A scale read with `.item()` and group sizes read with `.tolist()` (the pattern of a
    mixture-of-experts dispatch), forward and backward, against eager's loss and gradients."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x, idx):
            y = self.proj(x) * idx.sum().item()
            counts = torch.bincount(idx, minlength=3).tolist()
            return sum((p * (k + 1)).sum() for k, p in enumerate(torch.split(y, counts))), y

    torch.manual_seed(0)
    m = M()
    x = torch.randn(5, 4)
    g = strict(M.forward)
    for idx in (torch.tensor([0, 1, 1, 2, 2]), torch.tensor([0, 0, 2, 2, 2])):
        m.zero_grad()
        got = g(m, x, idx)
        got[0].backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        want = m(x, idx)
        want[0].backward()
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        for a, p in zip(grads, m.parameters()):
            torch.testing.assert_close(a, p.grad)
