"""Prefix reuse from the block hashes alone: an offline prefix-cache simulation and reuse times.

The simulation (``replay_core::prefix_cache``, in Rust) replays the requests' chained block
hashes in the order they arrived: each request hits the leading blocks the cache holds, up to its
first miss, then touches all of its blocks. An unbounded cache gives the reuse the workload
offers; an LRU cache of C blocks, what a cache of that size could catch. Run on the live trace in
arrival order and on the replay in the order it sent, it says whether the replay offered the
engine the same reuse; the engine's own ``cached_tokens`` then say whether the engine took it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["CAPACITY_SHARES", "hit_share", "capacities_for", "reuse_times_s"]

# LRU capacities, as shares of the live side's distinct blocks (plus unbounded, capacity 0)
CAPACITY_SHARES = (0.01, 0.1, 0.5)


def _flat(hashes: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    lengths = hashes.list.len().fill_null(0).to_numpy().astype(np.uint64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    flat = hashes.explode().drop_nulls().to_numpy().astype(np.uint64)
    return flat, offsets


def hit_share(hashes: pl.Series, input_tokens: pl.Series, block_size: int, capacity: int = 0) -> float | None:
    """Share of the prompt tokens a prefix cache of ``capacity`` blocks (0: unbounded) would have
    served, the requests taken in the order given. None when there are no prompt tokens."""
    from replay import _engine

    total = float(input_tokens.fill_null(0).sum())
    if total <= 0:
        return None
    flat, offsets = _flat(hashes)
    hits = _engine.prefix_cache_hits(flat, offsets, int(capacity))
    return float(hits.sum(dtype=np.int64)) * block_size / total


def capacities_for(hashes: pl.Series, shares=CAPACITY_SHARES) -> dict[str, int]:
    """Named LRU capacities (in blocks) from the distinct blocks of ``hashes``: ``unbounded`` (0)
    and one per share, at least 1 block each."""
    distinct = int(hashes.explode().drop_nulls().n_unique())
    out = {"unbounded": 0}
    for share in shares:
        out[f"lru_{share:g}"] = max(1, int(round(distinct * share)))
    return out


def reuse_times_s(times_s: np.ndarray, hashes: pl.Series) -> np.ndarray:
    """For every block that was used before, the seconds since its previous use (one value per
    reuse; requests stamped ``times_s``)."""
    df = pl.DataFrame({"t": np.asarray(times_s, dtype=np.float64), "h": hashes}).explode("h").drop_nulls("h")
    if df.height == 0:
        return np.zeros(0)
    gaps = df.sort(["h", "t"]).select(pl.col("t").diff().over("h").alias("gap"))["gap"]
    return gaps.drop_nulls().to_numpy()
