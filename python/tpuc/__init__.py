"""tpuc: PyTorch graphs to StableHLO and XLA executables through PJRT plugins.

    model = torch.compile(model, backend="tpuc")            # no `import tpuc` needed
    step = tpuc.train_step(model, optimizer)                 # forward+backward+update: one program
    loss = step(x, labels=y); step.sync()                    # state on the device; sync writes it back
    model = torch.compile(model, backend="tpuc", options={"strict": True, "dump_dir": "dump"})
    with tpuc.precision("highest"): ...                      # one region's matmul precision
    outs = tpuc.run_ranks(compiled, [args_rank0, args_rank1])  # functional collectives, N devices
    tpuc.save(torch.export.export(model, args, dynamic_shapes=...), "m.pt2")  # for the CLI, Dim names kept

See `tpuc.options` for the options and their `TPUC_*` environment variables.
"""

from ._torch_version import SUPPORTED_TORCH, check_torch_version
from .errors import TpucError, TpucFallbackWarning, TpucUnsupportedError
from .options import Options
from .precision import precision
from .ranks import rank_parameters, run_ranks
from .stats import cache_stats, reset_stats, stats, warmup

__version__ = "0.1.0"


def __getattr__(name):
    # The backend pulls in torch's compile machinery: import it on first use.
    if name == "tpuc_backend":
        from .backend import tpuc_backend

        return tpuc_backend
    if name in ("train_step", "TrainStep", "DeviceLoss"):
        from . import train

        return getattr(train, name)
    if name == "invalidate_weights":
        from .graph import invalidate_weights

        return invalidate_weights
    if name == "save":
        from .export import save

        return save
    if name == "supported_targets":
        from .backend import supported_targets

        return supported_targets
    raise AttributeError(f"module 'tpuc' has no attribute {name!r}")


__all__ = [
    "SUPPORTED_TORCH",
    "Options",
    "TpucError",
    "TpucFallbackWarning",
    "TpucUnsupportedError",
    "check_torch_version",
    "precision",
    "rank_parameters",
    "run_ranks",
    "cache_stats",
    "reset_stats",
    "stats",
    "warmup",
    "tpuc_backend",
    "supported_targets",
    "save",
    "train_step",
    "TrainStep",
    "invalidate_weights",
    "DeviceLoss",
]
