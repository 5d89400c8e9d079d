"""Chained hashes over full blocks of token ids (the Trace's ``block_hashes`` column).

Owns :data:`HASH_ALGO` and :func:`block_hashes`. Like vLLM's prefix cache, each full block of
``block_size`` token ids is hashed together with its parent block's hash, so two prompts share
their leading hashes exactly as long as they share whole leading blocks; a partial last block
gets no hash (it can never be a cache hit). The hashing itself is the compiled core's
(``replay_core::blocks``, through ``replay._engine``): the one definition of the rule below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from replay.errors import ConfigError

__all__ = ["BLOCK_SIZE", "HASH_ALGO", "block_hashes", "chain_hash", "prefix_hits"]

HASH_ALGO = "blake2b64-chain"
# tokens per hashed block of a trace's block_hashes, unless a trace or flag says otherwise (vLLM's
# KV block size on GPUs): the one default of every importer, capture, generate and --block-size
BLOCK_SIZE = 16


def block_hashes(token_ids: Sequence[int] | np.ndarray, block_size: int) -> list[int]:
    """Return one uint64 per full block of ``token_ids``.

    Hash ``i`` is blake2b (8-byte digest, read little-endian) of hash ``i-1``'s 8 digest bytes
    followed by block ``i``'s token ids as little-endian u32 (the first block's parent is 8 zero
    bytes).
    """
    if block_size <= 0:
        raise ConfigError(f"block_size must be positive, got {block_size}")
    ids = np.asarray(token_ids)
    if ids.ndim != 1:
        raise ConfigError("token_ids must be one-dimensional")
    n_full = len(ids) // block_size
    if n_full == 0:
        return []
    ids = ids[: n_full * block_size]
    if ids.dtype != np.dtype("<u4"):
        if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() > 0xFFFFFFFF):
            raise ConfigError("token ids must be integers in [0, 2**32)")
        ids = ids.astype("<u4")
    from replay import _engine

    return _engine.block_hashes(np.ascontiguousarray(ids), block_size).tolist()


def chain_hash(parent: int | None, block_ids: np.ndarray) -> int:
    """The hash of one full block given its parent block's hash (None: the first block); the
    same value :func:`block_hashes` gives that block."""
    from replay import _engine

    ids = np.ascontiguousarray(np.asarray(block_ids).astype("<u4"))
    return _engine.chain_hash(None if parent is None else int(parent), ids)


def prefix_hits(hash_lists: Iterable[Sequence[int]], seen: set[int] | None = None) -> list[int]:
    """For each request in order, how many of its leading blocks an infinite prefix cache holds
    (the blocks of every earlier request): its longest run of leading hashes seen before.

    Hashes are chained, so a block's hash stands for the whole prefix up to it. ``seen`` carries
    the cache across calls (a trace read in batches); it is updated in place.
    """
    cache: set[int] = set() if seen is None else seen
    out: list[int] = []
    for hashes in hash_lists:
        hit = 0
        for h in hashes:
            if h not in cache:
                break
            hit += 1
        out.append(hit)
        cache.update(hashes)
    return out
