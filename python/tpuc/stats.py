"""Process-wide counters: how often Dynamo called the backend, how many programs were compiled
and where their executables came from, weight uploads, fallbacks."""

from __future__ import annotations

import collections

STATS: collections.Counter = collections.Counter()


def stats() -> dict[str, int]:
    """A copy of the counters: `dynamo_graphs` (graphs Dynamo handed the backend), `aot_graphs`
    (the forward, backward or inference graphs aot_autograd made of them), `programs` (programs
    made ready, one per graph and bucket, compiled or read from the cache), `compiles` (XLA
    compiles: cache misses only), `cache_<source>` (where each program came from: `miss`,
    `memory`, `disk` for the persistent tier 2, `shm` for a `/dev/shm` one, `remote`),
    `buckets` (bucketed programs compiled for graphs with symbolic sizes), `specializations`
    (per-shape compiles of symbolic graphs that could not be bucketed), `weight_uploads` (weights
    made resident: on the CPU plugin read in place from their tensors),
    `weight_shares` (weights another program had resident), `weight_copies` (weights a plugin
    could not read in place, copied for one call), `fallback_graphs`, `eager_ops`, `host_reads`
    (numbers read on the host with `.item()`, where a graph is split); in a
    torch.distributed job `job_regions` (programs compiled between collectives) and
    `collective_blocked_ns` (host time spent issuing and waiting for collectives); `train_steps`
    (`tpuc.train_step` calls); and the process's host <-> device traffic: `h2d_bytes`,
    `d2h_bytes`, `h2d_arrays`, `d2h_arrays` (every array copied across; arrays the CPU plugin
    reads or hands over in place are not traffic, unless the `host_aliasing` option is off).
    The traffic counts are never reset: take differences."""
    from . import _C

    out = dict(STATS)
    out["h2d_bytes"], out["d2h_bytes"], out["h2d_arrays"], out["d2h_arrays"] = _C.transfer_stats()
    return out


def reset_stats() -> None:
    STATS.clear()
    WARMED[0] = False


def cache_stats() -> dict:
    """The executable cache's figures, as `tpuc cache stats` shows them: `process` (this
    process's hits, misses, corrupt entries, errors, bytes and compile time saved per tier
    (`memory`, `tier2`, `remote`), and
    its compiles), `host` (the totals of every process sharing this tier-2 cache, or None
    without tier 2) and `tiers` (state, location, entries, bytes and budget of each tier)."""
    import json

    from . import _C

    return json.loads(_C.cache_stats())


# Set by `warmup`: with the `no_recompile` option, a compile after it is an error.
WARMED = [False]


def warmup(fn, *examples) -> int:
    """Runs `fn` (a torch.compile'd model or function) on each example, a tuple of arguments
    or one tensor, so that every graph and bucket they reach is ready now; returns how many
    programs it made ready (compiled, or read from the cache: `stats()`'s `compiles` and
    `cache_*` say which). After it, with the `no_recompile` option (`TPUC_NO_RECOMPILE=1`),
    any further compile raises a TpucError naming the graph and the bucket or shape."""
    import torch

    before = STATS["programs"]
    with torch.no_grad():
        # Twice: a size first met as a static graph (before Dynamo made the graph dynamic)
        # runs in the dynamic graph later, so its bucket is compiled on the second pass.
        for _ in range(2):
            for ex in examples:
                fn(*ex) if isinstance(ex, tuple) else fn(ex)
    WARMED[0] = True
    return STATS["programs"] - before


def check_no_recompile(opts, name: str, what: str) -> None:
    """Raises when a compile would happen after `warmup` under `no_recompile`."""
    if opts.no_recompile and WARMED[0]:
        from .errors import TpucError

        raise TpucError(f"tpuc: {name}: compiling {what} after warm-up (no_recompile is set); "
                        "add an example of this size to tpuc.warmup", kind="recompile", graph=name)
