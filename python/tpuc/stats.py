"""Process-wide counters: how often Dynamo called the backend, how many programs were compiled
and where their executables came from, weight uploads, fallbacks."""

from __future__ import annotations

import collections

STATS: collections.Counter = collections.Counter()


def stats() -> dict[str, int]:
    """A copy of the counters: `dynamo_graphs`, `aot_graphs`, `compiles`, `cache_<source>`,
    `weight_uploads`, `fallback_graphs`, `eager_ops`, `specializations`."""
    return dict(STATS)


def reset_stats() -> None:
    STATS.clear()
