"""Process-wide counters: how often Dynamo called the backend, how many programs were compiled
and where their executables came from, weight uploads, fallbacks."""

from __future__ import annotations

import collections

STATS: collections.Counter = collections.Counter()


def stats() -> dict[str, int]:
    """A copy of the counters: `dynamo_graphs`, `aot_graphs`, `compiles`, `cache_<source>`,
    `buckets` (bucketed programs compiled for graphs with symbolic sizes), `specializations`
    (per-shape compiles of symbolic graphs that could not be bucketed), `weight_uploads`,
    `weight_shares` (weights another program had resident), `fallback_graphs`, `eager_ops`."""
    return dict(STATS)


def reset_stats() -> None:
    STATS.clear()


def cache_stats() -> dict:
    """The executable cache's figures, as `tpuc cache stats` shows them: `process` (this
    process's hits, misses, corrupt entries, errors, bytes and compile time saved per tier, and
    its compiles), `host` (the totals of every process sharing this tier-2 cache, or None
    without tier 2) and `tiers` (state, location, entries, bytes and budget of each tier)."""
    import json

    from . import _C

    return json.loads(_C.cache_stats())
