"""Mooncake's FAST'25 workload traces (conversation_trace.jsonl, toolagent_trace.jsonl) are the
Mooncake schema: the `mooncake` importer reads them, with their prefix sharing, and `auto` finds it."""

from __future__ import annotations

import json

import pytest

from capture.importers import import_mooncake
from capture.importers.sniff import sniff
from replay.trace import read_trace
from replay.traffic import trace_summary

BLOCK = 512


def _row(ms: int, n_in: int, n_out: int, ids: list[int]) -> dict:
    """One line, field by field as kvcache-ai/Mooncake FAST25-release/README.md lists them."""
    return {"timestamp": ms, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


# toolagent-like: requests that open with the same long tool prompt (ids 0-3, 2048 tokens), then
# their own context; two land in the same millisecond (the released traces have such ties)
ROWS = [
    _row(0, 2300, 40, [0, 1, 2, 3, 4]),
    _row(0, 2100, 12, [0, 1, 2, 3, 5]),
    _row(750, 3000, 7, [0, 1, 2, 3, 6, 7]),
    _row(1500, 600, 300, [8, 9]),
    _row(3000, 2560, 25, [0, 1, 2, 3, 6]),
]


def test_fast25_workload_rows(tmp_path):
    path = tmp_path / "toolagent_trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert sniff(path) == "mooncake"
    out = tmp_path / "t.parquet"
    import_mooncake(path, out)
    trace = read_trace(out)
    df = trace.df
    assert df.height == 5 and trace.meta.block_size_tokens == BLOCK
    assert df["arrival_us"].to_list() == [0, 0, 750_000, 1_500_000, 3_000_000]
    assert df["input_tokens"].to_list() == [2300, 2100, 3000, 600, 2560]
    assert df["max_tokens"].to_list() == [40, 12, 7, 300, 25]
    assert df["hash_ids"].to_list() == [r["hash_ids"] for r in ROWS]
    assert df["session_id"].is_null().all()  # the files have no sessions
    s = trace_summary(trace)
    assert s["mean_rate_rps"] == pytest.approx(4 / 3.0)
    # full 512-token blocks already seen: 4 (row 2) + 4 (row 3) + 5 (row 5, ids 0-3 and 6) of 10,560 tokens
    assert s["prefix_reuse_share"] == pytest.approx(13 * BLOCK / 10_560)
