"""The torch versions tpuc supports.

The backend relies on private torch APIs whose shape changes between minor releases:
aot_autograd's metadata (static input indices, mutated inputs), the torch.export graph
serializer it reuses for aot graphs, and the SDPA decomposition behaviour it works around.
Each supported minor version is tested (tests/python); others fail with a clear message.
"""

from __future__ import annotations

import os
import re

SUPPORTED_TORCH = ("2.15",)
ENV_ALLOW = "TPUC_ALLOW_ANY_TORCH"


def torch_minor(version: str) -> str:
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


def check_torch_version(version: str | None = None) -> None:
    """Raises RuntimeError unless `version` (default: the installed torch) is supported."""
    if version is None:
        import torch

        version = torch.__version__
    if torch_minor(version) in SUPPORTED_TORCH:
        return
    if os.environ.get(ENV_ALLOW, "") in ("1", "true", "yes"):
        import warnings

        warnings.warn(
            f"tpuc: torch {version} is not a supported version ({supported()}); "
            f"continuing because {ENV_ALLOW} is set",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    raise RuntimeError(
        f"tpuc supports torch {supported()}, but torch {version} is installed. tpuc reads "
        "aot_autograd graphs through private torch APIs that change between releases; install "
        f"torch=={SUPPORTED_TORCH[-1]}.* (or set {ENV_ALLOW}=1 to try anyway)"
    )


def supported() -> str:
    return ", ".join(f"{v}.x" for v in SUPPORTED_TORCH)
