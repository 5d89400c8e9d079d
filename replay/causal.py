"""Causal sessions: which earlier request each turn of a conversation waits for, and how long.

With ``sessions="causal"`` turn k of a session is sent at the later of two times: its scheduled
time, and the end of turn k-1 plus the think time. The think time is the recorded gap between the
two turns' arrivals minus the recorded duration of turn k-1 (``e2e_us``) where the trace has it,
else the whole recorded gap; it is scaled by the stage's compression (the span of the stage's
send offsets over the span of the trace arrivals they replace), and never negative. A session's
first turn in the stage, and every request without a ``session_id``, stays open-loop.

In a closed-loop stage (``concurrency``: every request due at once, nothing to compress) the think
time is the recorded one, and a user is held from a session's first turn to the end of its last:
it replays the whole session, think times included, before it takes the next
(``rust/core/src/users.rs``).

The Rust dispatcher applies the rule (``replay._engine.run(after=, think_ns=)``); this module
only says, per request of a plan, whom it follows (``-1``: nobody) and the think time in ns.
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["causal_gates"]


def causal_gates(rows: pl.DataFrame, offsets_ns: np.ndarray, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(after, think_ns)`` for the plan's rows (in send order) and their send offsets; the
    think times are scaled by ``scale``, default the stage's compression (1: as recorded)."""
    n = rows.height
    arrival = rows["arrival_us"].cast(pl.Int64)
    if scale is None:
        span_us = int(np.ptp(arrival.to_numpy())) if n > 1 else 0
        span_ns = int(offsets_ns[-1] - offsets_ns[0]) if n > 1 else 0
        scale = span_ns / (span_us * 1000) if span_us > 0 else 1.0
    frame = pl.DataFrame(
        {
            "i": np.arange(n, dtype=np.int64),
            "session": rows["session_id"],
            "arrival": arrival,
            "e2e": rows["e2e_us"].cast(pl.Int64),
        }
    )
    prev = frame.with_columns(
        parent=pl.when(pl.col("session").is_not_null()).then(pl.col("i").shift(1).over("session")),
        gap=pl.col("arrival") - pl.col("arrival").shift(1).over("session"),
        prev_e2e=pl.col("e2e").shift(1).over("session"),
    ).with_columns(
        think_us=(pl.col("gap") - pl.col("prev_e2e").fill_null(0)).clip(lower_bound=0),
    )
    after = prev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    think = (prev["think_us"].fill_null(0).to_numpy().astype(np.float64) * 1000 * scale).astype(np.int64)
    think[after < 0] = 0
    return after, think
