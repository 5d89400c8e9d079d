"""One-screen summaries of a trace (the library side of ``replay inspect``).

Owns :func:`summarize`, :func:`prefix_reuse_share` and the bucketed-timestamp rule. Numbers are
plain Python floats and ints, so the dict prints as JSON as it is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from replay.trace import Trace

__all__ = ["BUCKETED_ZERO_SHARE", "summarize", "prefix_reuse_share"]

# A trace whose share of zero interarrival gaps exceeds this is flagged as having bucketed
# timestamps (many requests stamped with one time); replaying it verbatim makes bursts that
# live traffic never had.
BUCKETED_ZERO_SHARE = 0.2
_QUANTILES = (0.5, 0.9, 0.99)


def prefix_reuse_share(trace: Trace) -> float:
    """Share of prompt tokens in blocks whose hash was already seen (an infinite cache).

    Rows are taken in arrival order; each block hash seen before counts ``block_size_tokens``
    tokens as reusable. Partial blocks have no hash and never count.
    """
    df = trace.df
    total = int(df["input_tokens"].sum())
    if total == 0:
        return 0.0
    hashes = df.select(pl.col("block_hashes").explode()).drop_nulls()
    seen = int((~hashes["block_hashes"].is_first_distinct()).sum())
    return seen * trace.meta.block_size_tokens / total


def _quantiles(s: pl.Series, prefix: str) -> dict[str, float | None]:
    s = s.drop_nulls()
    return {f"{prefix}_p{round(q * 100)}": (float(s.quantile(q, "linear")) if len(s) else None)
            for q in _QUANTILES}


def summarize(trace: Trace) -> dict[str, object]:
    """Rows, duration, rate, burstiness, token-length percentiles, sessions, timestamp
    bucketing and prefix reuse of ``trace``."""
    df = trace.df
    arrival = df["arrival_us"].to_numpy().astype(np.float64) / 1e6
    rows = len(arrival)
    duration = float(arrival[-1] - arrival[0]) if rows else 0.0
    gaps = np.diff(arrival)
    gap_mean = float(gaps.mean()) if len(gaps) else 0.0
    distinct = int(df["arrival_us"].n_unique())
    zero_share = float((gaps == 0).mean()) if len(gaps) else 0.0
    sessions = int(df["session_id"].drop_nulls().n_unique())
    out: dict[str, object] = {
        "rows": rows,
        "duration_s": duration,
        "mean_rate_rps": (rows - 1) / duration if duration > 0 else None,
        "interarrival_cv": float(gaps.std() / gap_mean) if gap_mean > 0 else None,
        "sessions": sessions,
        "turns_per_session": rows / sessions if sessions else None,
        "zero_interarrival_share": zero_share,
        "distinct_timestamps": distinct,
        "distinct_timestamp_share": distinct / rows if rows else 0.0,
        "bucketed_timestamps": zero_share > BUCKETED_ZERO_SHARE,
    }
    out.update(_quantiles(df["input_tokens"], "input_tokens"))
    out.update(_quantiles(df["output_tokens"], "output_tokens"))
    out["prefix_reuse_share"] = prefix_reuse_share(trace)
    out["block_size_tokens"] = trace.meta.block_size_tokens
    out["source_format"] = trace.meta.source_format
    out["tokenizer"] = trace.meta.tokenizer
    return out
