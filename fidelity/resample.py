"""The A/A splits: how much two samples of the same traffic differ, for a metric's bound.

A distribution metric passes within ``AA_FACTOR`` times the A/A noise of its distance
(:mod:`fidelity.bounds`): the largest of the same distances between the two halves of
``AA_SPLITS`` splits of the live side. How the halves are drawn decides what that noise means.
Two schemes, both keeping every session whole (a session shares its prompts and its history, so
its requests are not independent):

* ``sessions``: each session to a half at random (a seeded hash of its id). Each half is a
  thinning of the whole trace over its whole span.
* ``blocks``: the live span cut into ``AA_BLOCKS`` (20) equal blocks of time, each session
  belonging to the block of its first request; half of the blocks, drawn at random, to each half,
  and each half closed up (its blocks moved, whole, to follow one another: a session keeps its
  own times), the turns that fall past the half's last block cut as a slice of the trace cuts
  them. A half keeps what happens within a block together, bursts and the sessions that
  make them, as an interleaved (switchback) split does; the rate's rise and fall from block to
  block is part of the noise, as between two stretches of the same traffic.

A half holds about half of live's requests, and a distance between two samples shrinks about as
sqrt(1/n + 1/m) with their sizes: each split's distance is scaled by sqrt((1/n_live + 1/n_other) /
(1/n_half1 + 1/n_half2)) to the sizes actually compared (1/sqrt(2) for a replay of live's own
size; 1 for drift's halves of both traces together). Which scheme, and ``AA_FACTOR``, were chosen
by simulation (``benchmarks/fidelity_calibration.py``, docs/fidelity.md): on stationary synthetic
traffic the verdict's false "unfaithful" rate, and the power on injected changes, per scheme and
factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from fidelity.sides import Side

__all__ = ["SCHEMES", "AA_SCHEME", "AA_BLOCKS", "Split", "session_halves", "block_halves", "halves", "scaled"]

SCHEMES = ("sessions", "blocks")
AA_SCHEME = "blocks"
AA_BLOCKS = 20


@dataclass(frozen=True)
class Split:
    """Two halves of a side; ``scale`` turns a distance between them into one between sides of
    the sizes compared."""

    a: Side
    b: Side
    scale: float


def session_halves(side: Side, seed: int = 0) -> tuple[Side, Side]:
    """Two halves of ``side`` drawn at random, whole sessions to each (seeded)."""
    codes = pl.Series(side.sessions).hash(seed).to_numpy()
    first = (codes % 2) == 0
    return side.take(first), side.take(~first)


def block_halves(side: Side, seed: int = 0, blocks: int = AA_BLOCKS) -> tuple[Side, Side]:
    """Two halves of ``side``: its span in ``blocks`` equal blocks of time, each session in the
    block of its first request, half of the blocks (drawn at random, seeded) to each half, and
    each half's blocks moved to follow one another in their order (whole sessions moved by one
    amount). Session halves where the side spans no time."""
    t = side.times_s
    span = float(t.max() - t.min()) if side.n else 0.0
    if span <= 0 or blocks < 2:
        return session_halves(side, seed)
    width = span / blocks
    _, codes = np.unique(side.sessions, return_inverse=True)
    first = np.full(codes.max() + 1, np.inf)
    np.minimum.at(first, codes, t)
    block = np.minimum(((first - t.min()) / width).astype(np.int64), blocks - 1)[codes]
    rng = np.random.default_rng(seed)
    in_a = np.zeros(blocks, bool)
    in_a[rng.permutation(blocks)[: blocks // 2]] = True
    # each half's blocks in order: the k-th of them moved to the k-th block's place
    place = np.empty(blocks, np.int64)
    for mine in (in_a, ~in_a):
        place[mine] = np.arange(int(mine.sum()))
    shift = (place - np.arange(blocks)) * width
    moved = t + shift[block]
    mask = in_a[block]
    # a half ends where its last block does: the later turns of the sessions of its last block
    # that fall past it are cut, as a slice of the trace cuts them (else they trail on alone,
    # with none of the sessions that would have arrived beside them, and stretch the gaps)
    end = t.min() + np.where(mask, in_a.sum(), (~in_a).sum()) * width
    keep = moved <= end + 1e-9
    return side.take(mask & keep, shift[block]), side.take(~mask & keep, shift[block])


def halves(side: Side, seed: int, scheme: str = AA_SCHEME) -> tuple[Side, Side]:
    """One split of ``side`` by ``scheme`` (:data:`SCHEMES`)."""
    if scheme == "sessions":
        return session_halves(side, seed)
    if scheme == "blocks":
        return block_halves(side, seed)
    raise ValueError(f"A/A scheme {scheme!r}: one of {', '.join(SCHEMES)}")


def scaled(a: Side, b: Side, compared: tuple[int, int] | None) -> Split:
    """The split ``(a, b)`` with the scale to ``compared`` (the sizes of the two sides judged;
    None: the halves' own)."""
    if compared is None or min(compared) <= 0 or min(a.n, b.n) <= 0:
        return Split(a, b, 1.0)
    scale = math.sqrt((1 / compared[0] + 1 / compared[1]) / (1 / a.n + 1 / b.n))
    return Split(a, b, scale)
