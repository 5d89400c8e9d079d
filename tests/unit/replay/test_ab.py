"""`replay compare` (replay.ab): known answers on results folders built from known latencies."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from replay.ab import BETTER, CANNOT_TELL, NOT_WORSE, SAME, WORSE, compare_folders, markdown
from replay.errors import ConfigError

MS = 1_000_000


def stage_frame(
    n: int, rate: float, *, seed: int, ttft_ms: float = 50.0, tpot_ms: float = 10.0, tokens: int = 40, failed: int = 0
) -> pl.DataFrame:
    """A stage's results: n requests at ``rate`` req/s, lognormal TTFT and TPOT around the given
    medians (sigma 0.3), ``failed`` of them failed."""
    rng = np.random.default_rng(seed)
    intended = (np.arange(n) / rate * 1e9).astype(np.int64)
    ttft = (ttft_ms * MS * rng.lognormal(0, 0.3, n)).astype(np.int64)
    tpot = (tpot_ms * MS * rng.lognormal(0, 0.3, n)).astype(np.int64)
    first = intended + ttft
    error = np.full(n, "none", dtype=object)
    error[rng.choice(n, failed, replace=False)] = "http_5xx"
    return pl.DataFrame(
        {
            "intended_ns": intended,
            "sent_ns": intended,
            "first_token_ns": first,
            "end_ns": first + tpot * (tokens - 1),
            "completion_tokens": np.full(n, tokens),
            "output_chunks": np.full(n, tokens),
            "error": error.tolist(),
        }
    )


def write_folder(path, stages: list[tuple[float, pl.DataFrame]], *, valid: bool = True, slo: dict | None = None):
    """A results folder as run / sweep write it: a Parquet file per stage and summary.json."""
    path.mkdir(parents=True)
    files, summaries = [], []
    for i, (rate, df) in enumerate(stages):
        name = f"stage{i:02d}_{rate:g}rps.parquet"
        df.write_parquet(path / name)
        ok = df.filter(pl.col("error") == "none")
        files.append(name)
        summaries.append(
            {
                "requested_rate": rate,
                "concurrency": None,
                "valid": valid,
                "cancelled": False,
                "invalid_reason": None if valid else "send lag p99 4.1 ms above the 1 ms bound",
                "duration_s": (ok["end_ns"].max() - df["intended_ns"].min()) / 1e9,
                "slo": slo,
            }
        )
    (path / "summary.json").write_text(json.dumps({"files": files, "stages": summaries}))
    return path


def verdicts(c) -> dict[str, str]:
    return {ch.metric: ch.verdict for p in c.pairs for ch in p.changes}


def test_a_slower_engine_is_worse_and_a_faster_one_better(tmp_path):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(500, 10.0, seed=1))])
    slow = write_folder(tmp_path / "slow", [(10.0, stage_frame(500, 10.0, seed=2, ttft_ms=65, tpot_ms=13))])
    fast = write_folder(tmp_path / "fast", [(10.0, stage_frame(500, 10.0, seed=3, ttft_ms=35))])
    worse = compare_folders(a, slow)
    v = verdicts(worse)
    assert all(v[m] == WORSE for m in ("ttft_p50", "tpot_p50", "e2e_p50")), v
    assert v["throughput"] == SAME  # every request completed at the same offered rate on both
    assert worse.state == WORSE and worse.exit_code == 1
    better = compare_folders(a, fast)
    assert verdicts(better)["ttft_p50"] == BETTER and verdicts(better)["tpot_p50"] == SAME
    assert better.state == NOT_WORSE and better.exit_code == 0
    assert "worse by more than the bar" in next(ch.reason for ch in worse.pairs[0].changes if ch.metric == "ttft_p50")


@pytest.mark.parametrize("seed", range(5))
def test_two_samples_of_the_same_engine_are_never_worse(tmp_path, seed):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(500, 10.0, seed=100 + seed))])
    b = write_folder(tmp_path / "b", [(10.0, stage_frame(500, 10.0, seed=200 + seed))])
    c = compare_folders(a, b, seed=seed)
    assert set(verdicts(c).values()) == {SAME}, verdicts(c)
    assert c.pairs[0].method == "bootstrap over requests"


def test_failed_requests_lower_throughput_and_goodput(tmp_path):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(500, 10.0, seed=1))])
    b = write_folder(tmp_path / "b", [(10.0, stage_frame(500, 10.0, seed=1, failed=60))])
    v = verdicts(compare_folders(a, b))
    assert v["throughput"] == WORSE and v["goodput"] == WORSE


def test_goodput_counts_the_slo_and_cannot_compare_different_slos(tmp_path):
    slo = {"ttft_s": 0.06, "tpot_s": None, "e2e_s": None}
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(500, 10.0, seed=1))], slo=slo)
    b = write_folder(tmp_path / "b", [(10.0, stage_frame(500, 10.0, seed=2, ttft_ms=60))], slo=slo)
    v = verdicts(compare_folders(a, b))
    assert v["goodput"] == WORSE and v["throughput"] == SAME  # half of B's TTFTs are over 60 ms
    other = write_folder(tmp_path / "c", [(10.0, stage_frame(500, 10.0, seed=2))], slo={**slo, "ttft_s": 1.0})
    c = compare_folders(a, other)
    goodput = next(ch for ch in c.pairs[0].changes if ch.metric == "goodput")
    assert goodput.verdict == CANNOT_TELL and "different SLOs" in goodput.reason


def test_an_invalid_stage_or_a_small_one_cannot_tell(tmp_path):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(500, 10.0, seed=1))])
    invalid = write_folder(tmp_path / "inv", [(10.0, stage_frame(500, 10.0, seed=2, ttft_ms=200))], valid=False)
    c = compare_folders(a, invalid)
    assert set(verdicts(c).values()) == {CANNOT_TELL} and c.exit_code == 3
    assert "send lag p99 4.1 ms" in c.pairs[0].changes[0].reason
    small = write_folder(tmp_path / "small", [(10.0, stage_frame(60, 10.0, seed=3))])
    v = verdicts(compare_folders(a, small))
    assert v["ttft_p99"] == CANNOT_TELL and v["ttft_p50"] == SAME
    assert compare_folders(a, small, metrics=("ttft_p50", "tpot_p50")).exit_code == 0


def test_repeats_are_used_when_both_sides_have_them(tmp_path):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(300, 10.0, seed=s)) for s in range(3)])
    b = write_folder(tmp_path / "b", [(10.0, stage_frame(300, 10.0, seed=10 + s, ttft_ms=80)) for s in range(3)])
    c = compare_folders(a, b)
    assert c.pairs[0].method == "repeats (3 A x 3 B)"
    assert verdicts(c)["ttft_p50"] == WORSE
    assert not any("bootstrap" in n for n in c.notes)


def test_stages_pair_by_load_and_the_rest_is_listed(tmp_path):
    a = write_folder(tmp_path / "a", [(5.0, stage_frame(200, 5.0, seed=1)), (10.0, stage_frame(200, 10.0, seed=2))])
    b = write_folder(tmp_path / "b", [(10.0, stage_frame(200, 10.0, seed=3)), (20.0, stage_frame(200, 20.0, seed=4))])
    c = compare_folders(a, b, metrics=("ttft_p50",))
    assert [p.load for p in c.pairs] == ["10 req/s"] and c.only_a == ("5 req/s",) and c.only_b == ("20 req/s",)
    assert "| ttft_p50 (ms) |" in markdown(c)


def test_bad_input_is_one_clear_error(tmp_path):
    a = write_folder(tmp_path / "a", [(10.0, stage_frame(50, 10.0, seed=1))])
    with pytest.raises(ConfigError, match="no summary.json"):
        compare_folders(a, tmp_path)
    with pytest.raises(ConfigError, match="--metrics: unknown ttft_p95"):
        compare_folders(a, a, metrics=("ttft_p95",))


def test_two_replays_of_the_same_requests_are_compared_in_pairs(tmp_path):
    """B answered each of A's requests 4% slower: resampled in pairs (the same requests, by id),
    the noise of B - A is small and the change is worse; the same frames with B's ids renamed
    (other requests) are resampled side by side, and 4% is within that noise."""
    a_frame = stage_frame(500, 10.0, seed=1).with_columns(request_id=pl.format("r{}", pl.int_range(pl.len())))
    slower = (a_frame["first_token_ns"] - a_frame["intended_ns"]) * 0.04
    b_frame = a_frame.with_columns(
        first_token_ns=(pl.col("first_token_ns") + slower).cast(pl.Int64), end_ns=(pl.col("end_ns") + slower).cast(pl.Int64)
    )
    a = write_folder(tmp_path / "a", [(10.0, a_frame)])
    paired = compare_folders(a, write_folder(tmp_path / "b", [(10.0, b_frame)]), metrics=("ttft_p50",))
    assert paired.pairs[0].method == "paired bootstrap over the 500 requests both sent"
    assert verdicts(paired)["ttft_p50"] == WORSE, paired.pairs[0].changes
    other = b_frame.with_columns(request_id=pl.lit("x") + pl.col("request_id"))
    alone = compare_folders(a, write_folder(tmp_path / "other", [(10.0, other)]), metrics=("ttft_p50",))
    assert alone.pairs[0].method == "bootstrap over requests"
    assert verdicts(alone)["ttft_p50"] == SAME, alone.pairs[0].changes
