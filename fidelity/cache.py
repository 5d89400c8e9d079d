"""Prefix reuse from the block hashes alone: an offline prefix-cache simulation and reuse times.

The simulation (``replay_core::prefix_cache``, in Rust) replays the requests' chained block
hashes in the order they arrived: each request hits the leading blocks the cache holds, up to its
first miss, then touches all of its blocks. An unbounded cache gives the reuse the workload
offers; an LRU cache of C blocks, what a cache of that size could catch. Run on the live trace in
arrival order and on the replay in the order it sent, it says whether the replay offered the
engine the same reuse; the engine's own ``cached_tokens`` then say whether the engine took it.
A request's reuse time is the time since its longest cached prefix (its deepest cached block)
was last used, from the unbounded pass.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

__all__ = ["CAPACITY_SHARES", "flat_hashes", "simulate", "hit_share", "capacities_for"]

# LRU capacities, as shares of the live side's distinct blocks (plus unbounded, capacity 0)
CAPACITY_SHARES = (0.01, 0.1, 0.5)


def flat_hashes(hashes: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of every request end to end, and each request's offsets into them (n + 1),
    from the column's Arrow buffers (no per-row Python)."""
    arr = hashes.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        arr = pa.compute.fill_null(arr, pa.scalar([], type=arr.type))
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]].astype(np.uint64, copy=False)
    return np.ascontiguousarray(values), (offsets - offsets[0]).astype(np.uint64)


def simulate(hashes: pl.Series, capacity: int = 0, times_s: np.ndarray | None = None):
    """Per request, the leading blocks a prefix cache of ``capacity`` blocks (0: unbounded) held;
    with ``times_s`` (per request, nondecreasing) also their reuse times: ``(hits, reuse_s)``."""
    from replay import _engine

    flat, offsets = flat_hashes(hashes)
    if times_s is None:
        return _engine.prefix_cache_hits(flat, offsets, int(capacity))
    return _engine.prefix_cache_hits(flat, offsets, int(capacity), np.ascontiguousarray(times_s, dtype=np.float64))


def hit_share(hashes: pl.Series, input_tokens: pl.Series | np.ndarray, block_size: int, capacity: int = 0) -> float | None:
    """Share of the prompt tokens a prefix cache of ``capacity`` blocks (0: unbounded) would have
    served, the requests taken in the order given. None when there are no prompt tokens."""
    total = float(np.nansum(np.asarray(input_tokens, dtype=np.float64)))
    if total <= 0:
        return None
    return float(simulate(hashes, capacity).sum(dtype=np.int64)) * block_size / total


def capacities_for(hashes: pl.Series, shares=CAPACITY_SHARES) -> dict[str, int]:
    """Named LRU capacities (in blocks) from the distinct blocks of ``hashes``: ``unbounded`` (0)
    and one per share, at least 1 block each."""
    flat, _ = flat_hashes(hashes)
    distinct = int(pl.Series(flat).n_unique()) if len(flat) else 0
    out = {"unbounded": 0}
    for share in shares:
        out[f"lru_{share:g}"] = max(1, int(round(distinct * share)))
    return out
