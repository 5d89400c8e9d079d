"""One-screen summaries of a trace (the library side of ``replay inspect``).

Owns :func:`trace_summary`, :func:`prefix_reuse_share`, :func:`counting_stats`, :func:`rate_series`,
:func:`sparkline` and the bucketed-timestamp rule. Numbers are plain Python floats and ints, so the
dict prints as JSON as it is.

Counting-process statistics (marginal interarrival tests miss burstiness): the trace's time from
its first arrival is cut into windows of w seconds, only whole windows counted (a trace shorter than
two windows has none: null; a partial last window would count as a lull: on the Azure 2023
conversation trace it moves the 60 s index from 16.1 to 20.6). ``idc_<w>s`` is the index of dispersion (variance / mean) of the
requests per window, about 1 for a Poisson process and larger for bursty traffic, at 1, 10 and 60
s; ``count_lag1_autocorr_1s`` is the lag-1 autocorrelation of the per-second counts (about 0 for
Poisson); ``peak_to_mean_1s`` the busiest second's count over the mean second's. ``rate_series``
is the request rate over time in at most :data:`SERIES_BINS` equal bins (req/s, the last bin
partial), drawn on the terminal as a sparkline.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import polars as pl

from replay.dag import shape
from replay.trace import Trace

__all__ = [
    "BUCKETED_ZERO_SHARE",
    "SERIES_BINS",
    "IDC_WINDOWS_S",
    "trace_summary",
    "prefix_reuse_share",
    "counting_stats",
    "window_counts",
    "index_of_dispersion",
    "lag1_autocorrelation",
    "peak_to_mean",
    "rate_series",
    "sparkline",
]

# A trace whose share of zero interarrival gaps exceeds this is flagged as having bucketed
# timestamps (many requests stamped with one time); replaying it verbatim makes bursts that
# live traffic never had.
BUCKETED_ZERO_SHARE = 0.2
_QUANTILES = (0.5, 0.9, 0.99)
IDC_WINDOWS_S = (1, 10, 60)
SERIES_BINS = 60
_SPARKS = "▁▂▃▄▅▆▇█"


def window_counts(arrival_s: np.ndarray, window_s: float) -> np.ndarray:
    """Requests in each whole window of ``window_s`` from the first arrival (times in order;
    a partial last window is left out: its count would read as a lull)."""
    if len(arrival_s) == 0:
        return np.zeros(0, np.int64)
    t = arrival_s - arrival_s[0]
    n_whole = int(t[-1] // window_s)
    counts = np.bincount((t // window_s).astype(np.int64), minlength=n_whole + 1)
    return counts[:n_whole]


def index_of_dispersion(counts: np.ndarray) -> float | None:
    """Variance / mean of per-window counts: 1 for a Poisson stream, above 1 for bursts. None
    with fewer than 2 windows."""
    if len(counts) < 2 or counts.mean() == 0:
        return None
    return float(counts.var() / counts.mean())


def lag1_autocorrelation(counts: np.ndarray) -> float | None:
    """Correlation of each window's count with the next one's (do busy seconds follow busy
    seconds?). None with fewer than 3 windows or constant counts."""
    c = np.asarray(counts, dtype=np.float64)
    if len(c) < 3 or c[:-1].std() == 0 or c[1:].std() == 0:
        return None
    return float(np.corrcoef(c[:-1], c[1:])[0, 1])


def peak_to_mean(counts: np.ndarray) -> float | None:
    """The busiest window's count over the mean count."""
    if not len(counts) or counts.mean() == 0:
        return None
    return float(counts.max() / counts.mean())


def counting_stats(arrival_s: np.ndarray) -> dict[str, float | None]:
    """Index of dispersion at 1, 10 and 60 s, lag-1 autocorrelation and peak-to-mean of the
    per-second counts (see the module docstring); None where the trace is too short."""
    out: dict[str, float | None] = {}
    for w in IDC_WINDOWS_S:
        out[f"idc_{w}s"] = index_of_dispersion(window_counts(arrival_s, float(w)))
    c = window_counts(arrival_s, 1.0)
    out["count_lag1_autocorr_1s"] = lag1_autocorrelation(c)
    out["peak_to_mean_1s"] = peak_to_mean(c)
    return out


class RateSeries(TypedDict):
    bin_s: float
    rps: list[float]


def rate_series(arrival_s: np.ndarray, bins: int = SERIES_BINS) -> RateSeries:
    """The request rate over time: ``{"bin_s": width, "rps": [rate of each bin]}``, at most
    ``bins`` bins of a whole number of seconds (at least 1) from the first arrival."""
    if len(arrival_s) == 0:
        return {"bin_s": 1.0, "rps": []}
    t = arrival_s - arrival_s[0]
    width = float(max(1, int(np.ceil(t[-1] / bins)) if t[-1] > 0 else 1))
    counts = np.bincount((t // width).astype(np.int64))
    return {"bin_s": width, "rps": [float(x) for x in counts / width]}


def sparkline(values: list[float]) -> str:
    """One character per value, from ▁ (0) to █ (the largest)."""
    top = max(values, default=0.0)
    if top <= 0:
        return _SPARKS[0] * len(values)
    return "".join(_SPARKS[min(len(_SPARKS) - 1, int(v / top * (len(_SPARKS) - 1) + 0.5))] for v in values)


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
    out: dict[str, float | None] = {}
    for q in _QUANTILES:
        value = s.quantile(q, "linear") if len(s) else None
        out[f"{prefix}_p{round(q * 100)}"] = None if value is None else float(value)
    return out


def trace_summary(trace: Trace) -> dict[str, object]:
    """Rows, duration, rate, burstiness (interarrival CV and the counting-process statistics),
    token-length percentiles, sessions, timestamp bucketing, prefix reuse, the rate over time and
    the dependency graph's shape (:func:`replay.dag.shape`) of ``trace``."""
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
        **counting_stats(arrival),
    }
    out.update(_quantiles(df["input_tokens"], "input_tokens"))
    out.update(_quantiles(df["output_tokens"], "output_tokens"))
    out["prefix_reuse_share"] = prefix_reuse_share(trace)
    out["block_size_tokens"] = trace.meta.block_size_tokens
    out["source_format"] = trace.meta.source_format
    out["tokenizer"] = trace.meta.tokenizer
    out["rate_series"] = rate_series(arrival)
    # schema 3: the dependency graph's shape (None without dependencies)
    out["dag"] = shape(df)
    return out
