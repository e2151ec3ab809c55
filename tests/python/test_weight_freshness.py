"""A compiled call never reads a weight older than its tensor's current contents, for every way
torch lets a tensor change: some leave the version counter alone (copies under
`_unsafe_preserve_version_counter`, as FSDP2 refills its unsharded parameters; writes through
DLPack or NumPy views), some move the data (`set_`, `.data =`, a storage resized away and back).
And compiled results are new tensors where eager's are, not views of tpuc's buffers."""

import numpy as np
import pytest
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack

import tpuc


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _preserving_copy(p, new):
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(p):
        p.copy_(new)


def _dlpack_write(p, new):
    from_dlpack(to_dlpack(p.detach())).copy_(new)


def _numpy_write(p, new):
    p.detach().numpy()[...] = new.numpy()


def _in_place(p, new):
    with torch.no_grad():
        p.mul_(0).add_(new)


def _set(p, new):
    with torch.no_grad():
        p.set_(new.clone())


def _data(p, new):
    p.data = new.clone()


def _storage_resize(p, new):
    """FSDP2's pattern: free the storage, allocate it again, fill it without a version bump."""
    storage = p.untyped_storage()
    nbytes = storage.nbytes()
    storage.resize_(0)
    storage.resize_(nbytes)
    _preserving_copy(p, new)


WAYS = {f.__name__.lstrip("_"): f for f in
        (_preserving_copy, _dlpack_write, _numpy_write, _in_place, _set, _data, _storage_resize)}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_changed_weight_is_read_fresh(way):
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="tpuc", options={"strict": True})
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
        versions = model.fc1.weight._version
        for step in range(3):
            WAYS[way](model.fc1.weight, torch.randn(32, 16))
            WAYS[way](model.fc2.bias, torch.randn(8))
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6, msg=f"{way}, change {step}")
    if way in ("preserving_copy", "dlpack_write", "numpy_write", "storage_resize"):
        assert model.fc1.weight._version == versions, "the change was meant to leave the version counter"
    assert tpuc.stats()["programs"] == 1


def test_weights_read_in_place_are_not_uploaded_again():
    """On the CPU plugin a weight is read from its tensor's memory: an in-place change costs
    nothing, new storage costs one new alias (no copy)."""
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="tpuc")
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        assert tpuc.stats()["weight_uploads"] == 4
        model.fc1.weight.mul_(0.5)
        compiled(x)
        assert tpuc.stats()["weight_uploads"] == 4
        model.fc2.bias.data = torch.randn(8)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
        s = tpuc.stats()
        assert s["weight_uploads"] == 5 and s.get("weight_copies", 0) == 0, s


def test_an_unaligned_weight_is_copied_every_call():
    """A weight the plugin cannot read in place (here: a view at an odd offset) is copied for
    each call, never kept as a snapshot."""
    torch.manual_seed(0)
    model = MLP()
    storage = torch.empty(32 * 16 + 1)
    w = storage[1:].view(32, 16)
    w.copy_(model.fc1.weight.detach())
    model.fc1.weight = torch.nn.Parameter(w)
    compiled = torch.compile(model, backend="tpuc")
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)
        _preserving_copy(model.fc1.weight, torch.randn(32, 16))
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    assert tpuc.stats().get("weight_copies", 0) >= 2


def test_results_are_new_tensors_not_views():
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="tpuc")
    with torch.no_grad():
        out = compiled(torch.randn(4, 16))
    assert out._base is None and not out._is_view()
    # A result is the program's own memory: writing it changes no weight and no later result.
    before = compiled(torch.ones(4, 16)).clone()
    out.fill_(7.0)
    torch.testing.assert_close(compiled(torch.ones(4, 16)), before)


def test_a_result_equal_to_a_weight_is_not_the_weight():
    """A program that returns a weight as it is must not hand back the weight's own memory."""

    class Ret(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return self.w * 1, x + self.w

    m = Ret()
    compiled = torch.compile(m, backend="tpuc")
    with torch.no_grad():
        a, _ = compiled(torch.randn(8))
        assert a.data_ptr() != m.w.data_ptr()
        a.fill_(0)
        assert np.all(m.w.detach().numpy() != 0)


def test_on_a_device_weights_are_copied_once_and_again_when_their_version_changes():
    """With host aliasing off (the CPU plugin moving data as an accelerator does), a weight is
    copied to the device once, again after an in-place change (its version counter), and a
    write that keeps the version counter is picked up after tpuc.invalidate_weights()."""
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="tpuc", options={"host_aliasing": False})
    x = torch.randn(4, 16)
    try:
        with torch.no_grad():
            compiled(x)
            before = tpuc.stats()
            for _ in range(3):
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
            after = tpuc.stats()
            # Only the input goes up, and the output comes down, each call.
            assert after["h2d_bytes"] - before["h2d_bytes"] == 3 * x.numel() * 4, (before, after)
            assert after["d2h_bytes"] - before["d2h_bytes"] == 3 * 4 * 8 * 4
            assert after["weight_copies"] == before["weight_copies"] == 4
            model.fc1.weight.mul_(0.5)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
            assert tpuc.stats()["weight_copies"] == 5
            _preserving_copy(model.fc2.weight, torch.randn(8, 32))
            tpuc.invalidate_weights()
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    finally:
        from tpuc import _C

        _C.set_host_aliasing(True)
