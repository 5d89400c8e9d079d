"""How long do the fidelity metrics take on a production-sized trace? (issue [6]: <= 20 s at 1M)

Builds, with numpy (no per-row Python), a synthetic live Trace of N requests (default 1,000,000)
shaped like production chat traffic: sessions starting in bursts (gamma gaps, CV 3), of
geometric length (mean 3 turns, lognormal think times of ~8 s) whose turns extend the previous
turn's prompt, 8 shared system prompts of 8-36 blocks, lognormal user-turn and output lengths,
recorded TTFT, E2E and cached tokens; and the
results frame of a replay of every row 10x faster (sent on schedule with 0-50 µs of lag, the
engine adding 9 template tokens to each prompt). Then times ``fidelity.compare_stage`` on them:
every metric with its A/A thresholds, no plots. Peak RSS (``ru_maxrss``) is printed beside it.

Peers, run side by side on the same data: scipy.stats' ``ks_2samp`` and ``wasserstein_distance``
(if scipy is installed) against ``fidelity.stats`` on the input lengths, and a pure-Python LRU
(``collections.OrderedDict``) against the Rust prefix-cache simulation on the first
``--lru-peer-requests`` requests (a Python loop over every block of 1M requests takes minutes).

    python benchmarks/fidelity_scale.py [--requests 1000000]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fidelity import compare_stage, stats  # noqa: E402
from replay.trace import Trace, TraceMeta  # noqa: E402

BLOCK = 16


def synthetic_live(n: int, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    sessions = n  # more than enough; the first n turns by time are kept
    turns = rng.geometric(1 / 3, sessions)
    starts = np.cumsum(rng.gamma(1 / 9, 9 * 0.03, sessions))  # bursty session starts (CV 3)
    session_of = np.repeat(np.arange(sessions), turns)
    first = np.repeat(np.cumsum(turns) - turns, turns)
    turn = (np.arange(len(session_of)) - first).astype(np.int32)
    think = rng.lognormal(np.log(8.0), 1.0, len(session_of))  # seconds between a session's turns
    think[turn == 0] = 0
    cum = np.cumsum(think)
    t = starts[session_of] + cum - cum[first]  # a session's start plus its think times so far
    order = np.argsort(t, kind="stable")[:n]
    session_of, turn, t = session_of[order], turn[order], t[order]
    system = rng.integers(0, 8, sessions)[session_of]
    system_blocks = 8 + system * 4
    user_blocks = np.maximum(1, rng.lognormal(np.log(6), 1.0, n).astype(np.int64))
    lengths = np.minimum(system_blocks + (turn + 1) * user_blocks, 400)  # each turn adds about a user turn
    input_tokens = (lengths * BLOCK + rng.integers(0, BLOCK, n)).astype(np.int32)
    output_tokens = np.maximum(1, rng.lognormal(np.log(130), 1.0, n)).astype(np.int32)
    # hashes: the system prompt's chain, then the session's own blocks (a later turn extends them)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
    row = np.repeat(np.arange(n), lengths)
    in_system = pos < system_blocks[row]
    hashes = np.where(
        in_system,
        system[row].astype(np.uint64) * 1_000_003 + pos.astype(np.uint64),
        (session_of[row].astype(np.uint64) << np.uint64(20)) + pos.astype(np.uint64) + 7_777_777,
    )
    lists = pl.DataFrame({"row": row, "h": hashes.astype(np.uint64)}).group_by("row", maintain_order=True).agg("h")["h"]
    arrival_us = ((t - t[0]) * 1e6).astype(np.int64)
    df = pl.DataFrame(
        {
            "request_id": pl.int_range(0, n, eager=True).cast(pl.Utf8).alias("request_id"),
            "session_id": pl.Series(session_of).cast(pl.Utf8),
            "parent_request_id": pl.Series([None] * n, dtype=pl.Utf8),
            "turn": turn,
            "api": ["chat"] * n,
            "model": ["m"] * n,
            "arrival_us": arrival_us,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "max_tokens": output_tokens,
            "block_hashes": lists,
            "cached_tokens": (np.minimum(system_blocks + turn * user_blocks, lengths) * BLOCK).astype(np.int32),
            "status": np.full(n, 200, dtype=np.int32),
            "ttft_us": (rng.lognormal(np.log(0.3), 0.5, n) * 1e6).astype(np.int64),
            "e2e_us": (output_tokens * 0.03 * 1e6).astype(np.int64),
        }
    )
    return Trace(df=df, meta=TraceMeta(source_format="synthetic-benchmark", tokenizer="none", block_size_tokens=BLOCK))


def replay_of(live: Trace, speedup: float = 10.0, seed: int = 1) -> pl.DataFrame:
    df = live.df
    n = df.height
    rng = np.random.default_rng(seed)
    intended = (df["arrival_us"].to_numpy() * 1000 / speedup).astype(np.int64)
    sent = intended + rng.integers(0, 50_000, n)  # 0-50 µs late, as the runner measures
    e2e = (df["e2e_us"].to_numpy() * 1000 / speedup).astype(np.int64)
    out = df["output_tokens"].to_numpy()
    return pl.DataFrame(
        {
            "request_id": df["request_id"],
            "session_id": df["session_id"],
            "api": df["api"],
            "input_tokens": df["input_tokens"],
            "expected_output_tokens": df["max_tokens"],
            "intended_ns": intended,
            "release_ns": intended,
            "conn_ns": np.zeros(n, dtype=np.int64),
            "sent_ns": sent,
            "first_byte_ns": sent + 5_000_000,
            "first_token_ns": sent + 10_000_000,
            "end_ns": sent + e2e,
            "status": np.full(n, 200, dtype=np.int32),
            "error": pl.Series(["none"] * n),
            "prompt_tokens": df["input_tokens"].to_numpy().astype(np.int64) + 9,
            "completion_tokens": out,
            "cached_tokens": df["cached_tokens"],
            "output_chunks": out,
        }
    )


def python_lru_hits(hash_lists: list[list[int]], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    total = 0
    for hashes in hash_lists:
        for h in hashes:
            if h not in cache:
                break
            total += 1
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return total


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--lru-peer-requests", type=int, default=100_000)
    args = ap.parse_args()

    t = time.perf_counter()
    live = synthetic_live(args.requests)
    stage = replay_of(live)
    print(
        f"built {args.requests:,} live rows + their replay in {time.perf_counter() - t:.1f} s "
        f"({live.df['block_hashes'].list.len().sum():,} blocks); peak RSS {rss_mb():.0f} MB",
        file=sys.stderr,
    )

    t, cpu = time.perf_counter(), time.process_time()
    result = compare_stage(live, stage, file="synthetic")
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    judged = sum(m.passed is not None for m in result.verdict.metrics)
    load = os.getloadavg()[0]
    print(
        f"\nfidelity.compare_stage on {args.requests:,} requests: {took:.1f} s wall, {cpu:.1f} s CPU "
        f"(target <= 20 s; load average {load:.1f} on {os.cpu_count()} CPUs), {judged} metrics judged, "
        f"verdict: {result.verdict.reason[:120]}"
    )
    print(f"peak RSS {rss_mb():.0f} MB")

    a = live.df["input_tokens"].to_numpy()
    b = result.replay_side.input_tokens
    t = time.perf_counter()
    ours = (stats.ks_distance(a, b), stats.wasserstein_over_median(a, b))
    ours_s = time.perf_counter() - t
    try:
        import scipy.stats as ss

        t = time.perf_counter()
        peer = (ss.ks_2samp(a, b).statistic, ss.wasserstein_distance(a, b) / np.median(a))
        peer_s = time.perf_counter() - t
        print(
            f"KS + Wasserstein on {len(a):,} lengths: ours {ours_s:.3f} s, scipy {peer_s:.3f} s "
            f"(ours / scipy = {ours_s / peer_s:.2f}); same values: "
            f"{np.allclose(ours, peer)} ({ours[0]:.5f}, {ours[1]:.5f} vs {peer[0]:.5f}, {peer[1]:.5f})"
        )
    except ImportError:
        print("scipy not installed: no peer for the distances")

    from fidelity.cache import hit_share

    k = min(args.lru_peer_requests, live.df.height)
    head = live.df.head(k)
    capacity = max(1, int(head["block_hashes"].explode().n_unique() * 0.1))
    t = time.perf_counter()
    share = hit_share(head["block_hashes"], head["input_tokens"], BLOCK, capacity)
    rust_s = time.perf_counter() - t
    lists = head["block_hashes"].to_list()
    t = time.perf_counter()
    hits = python_lru_hits(lists, capacity)
    py_s = time.perf_counter() - t
    agree = abs(hits * BLOCK / float(head["input_tokens"].sum()) - share) < 1e-12
    print(
        f"LRU prefix-cache simulation on {k:,} requests ({capacity:,} blocks): ours (Rust) {rust_s:.3f} s, "
        f"Python OrderedDict {py_s:.2f} s (python / ours = {py_s / rust_s:.1f}x); same hits: {agree}"
    )


if __name__ == "__main__":
    main()
