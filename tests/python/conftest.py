"""pytest setup for the tpuc Python package: real torch, the real CPU PJRT plugin, and the model
classes of tests/fixtures/make_fixtures.py."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts with a clean Dynamo cache, zeroed tpuc counters and no TPUC_* settings
    from the caller's environment."""
    import torch

    import tpuc
    import tpuc.backend

    for key in list(os.environ):
        if key.startswith("TPUC_") and not key.startswith("TPUC_PJRT"):
            monkeypatch.delenv(key)
    torch._dynamo.reset()
    tpuc.reset_stats()
    tpuc.backend._warned.clear()
    yield
    torch._dynamo.reset()
