"""Ops whose result size depends on the values (nonzero, argwhere, masked_select, unique,
unique_consecutive): compiled into a buffer of their largest size plus a count, bound to
torch's data-dependent symbol, and cut to the count the program returns. Later ops mask the
padding as in any bucket. Each case is compared with eager on real inputs."""

import subprocess

import numpy as np
import pytest
import torch
from cli_check import TPUC

import tpuc  # noqa: F401 - registers the backend


def check(f, *args):
    torch._dynamo.reset()
    want = f(*args)
    got = torch.compile(f, backend="tpuc", fullgraph=True, options={"strict": True})(*args)
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w)


X = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])


@pytest.mark.parametrize("x", [X, torch.zeros(2, 3), torch.ones(4), torch.tensor(0.0), torch.tensor(5.0), torch.zeros(0, 3)],
                         ids=["mixed", "none", "all", "scalar0", "scalar1", "empty"])
def test_nonzero_and_argwhere(x):
    check(lambda x: torch.nonzero(x), x)
    check(lambda x: torch.argwhere(x), x)


def test_masked_select_then_elementwise_and_reductions():
    """The padding past the count never reaches a sum, a mean or a max."""
    x = torch.randn(4, 5)
    m = x > 0.3
    check(lambda x, m: torch.masked_select(x, m) * 2 + 1, x, m)
    check(lambda x, m: torch.masked_select(x, m).sum(), x, m)
    check(lambda x, m: torch.masked_select(x, m).max(), x, m)
    check(lambda x, m: torch.masked_select(x, m[0]), x, m)  # broadcast mask


def test_unique_and_unique_consecutive():
    x = torch.tensor([3, 1, 2, 3, 1, 5, 5, 2])
    check(lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True), x)
    check(lambda x: torch.unique(x.reshape(2, 4), return_inverse=True), x)
    check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True), x)
    check(lambda x: torch.unique(x.float() * 0.5).sum(), x)


def test_nonzero_rows_feed_a_gather():
    x = torch.randn(6, 4)
    check(lambda x: x[torch.nonzero(x[:, 0] > 0).squeeze(1)] * 3, x)


def test_boolean_mask_indexing():
    """`x[mask]`: the mask's dims become one data-dependent dim, at the mask's place."""
    x = torch.randn(4, 5, 3)
    check(lambda x: x[x[:, :, 0] > 0] * 2, x)  # a 2-d mask: [u0, 3]
    check(lambda x: x[x[:, 0, 0] > 0].sum(0), x)  # rows, then a reduction over them
    check(lambda x: x[:, x[0, :, 0] > 0], x)  # after a full slice: [4, u0, 3]
    check(lambda x: x[x > 0.5].max(), x)  # the whole shape: masked_select
    check(lambda x: x[x > 100.0], x)  # nothing selected
    check(lambda x: x[torch.ones(4, dtype=torch.bool)], x)  # everything selected


def test_boolean_mask_with_integer_indices_is_refused_by_name():
    x = torch.randn(4, 5)
    f = torch.compile(lambda x: x[x[:, 0] > 0, torch.tensor([0, 1, 0, 1])[: 1]], backend="tpuc",
                      fullgraph=True, options={"strict": True})
    with pytest.raises(Exception, match="boolean mask together with other index tensors"):
        f(x)


class Selects(torch.nn.Module):
    def forward(self, x):
        return x[x[:, 0] > 0] * 2, torch.nonzero(x > 0.5), torch.unique(x.round()).sum()


@pytest.mark.parametrize("buckets", ["auto", "off"])
def test_cli_runs_data_dependent_sizes(tmp_path, buckets):
    """`tpuc run` on an export with data-dependent sizes: the counts come back from the program
    and cut the results, equal to eager for inputs that select none, some and all."""
    ep = torch.export.export(Selects(), (torch.randn(8, 3),))
    pt2 = str(tmp_path / "selects.pt2")
    torch.export.save(ep, pt2)
    torch.manual_seed(0)
    for x in (torch.randn(8, 3), torch.full((8, 3), -1.0), torch.full((8, 3), 2.0)):
        np.save(tmp_path / "x.npy", x.numpy())
        want = []
        for k, w in enumerate(Selects()(x)):
            want.append(str(tmp_path / f"want{k}.npy"))
            np.save(want[-1], np.array(w.numpy(), order="C"))  # nonzero's is Fortran-ordered
        p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), "--expect", *want, "--buckets", buckets,
                            "--no-cache"], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.count(": ok") == 3, p.stdout


def test_data_dependent_sizes_of_a_symbolic_input_are_refused_by_node(tmp_path):
    """Not supported yet: a data-dependent op over an input of symbolic shape. The error names
    each node."""
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(Selects(), (torch.randn(8, 3),), dynamic_shapes=({0: batch},))
    pt2 = str(tmp_path / "selects.pt2")
    torch.export.save(ep, pt2)
    np.save(tmp_path / "x.npy", np.ones((5, 3), np.float32))
    p = subprocess.run([TPUC, "run", pt2, "--inputs", str(tmp_path / "x.npy"), "--no-cache"], capture_output=True, text=True)
    assert p.returncode != 0
    assert "at node `nonzero`" in p.stderr and "nonzero needs static shapes" in p.stderr, p.stderr
