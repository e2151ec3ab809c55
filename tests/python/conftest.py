"""pytest setup for the tpuc Python package: real torch, the real CPU PJRT plugin, and the model
classes of tests/fixtures/make_fixtures.py."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

# The persistent cache tier stays on (it is the default users get) but lives in a directory of
# this run, shared by its processes (the CLI tests' too), not in the caller's ~/.cache.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tpuc-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)


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
    # Host aliasing is process-wide (the `host_aliasing` option switches it): back to the default.
    tpuc._C.set_host_aliasing(True)
