"""Mooncake JSON Lines import: block texts keyed by hash id, prefix reuse kept, bad inputs."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from capture.importers import import_mooncake
from replay.errors import TraceError
from replay.inspect import summarize
from replay.prompts import block_text

BLOCK = 512


@pytest.fixture(scope="module")
def mooncake(shared_traces):
    path = shared_traces / "mooncake_synthetic.jsonl"
    return import_mooncake(path), pl.read_ndjson(path)


def _reuse_from_hash_ids(raw: pl.DataFrame) -> float:
    """Infinite-cache reuse straight from the file: tokens of blocks whose id was seen before."""
    seen: set[int] = set()
    reused = 0
    for n, ids in zip(raw["input_length"].to_list(), raw["hash_ids"].to_list()):
        for k, h in enumerate(ids):
            if h in seen:
                reused += min(BLOCK, n - k * BLOCK)
            seen.add(h)
    return reused / int(raw["input_length"].sum())


@pytest.mark.data
@pytest.mark.slow
def test_full_shared_file(mooncake, gpt2):
    trace, raw = mooncake
    df = trace.df
    assert df.height == raw.height
    assert trace.meta.block_size_tokens == BLOCK
    assert trace.meta.source_format == "mooncake-jsonl"
    assert df["input_tokens"].to_list() == raw["input_length"].to_list()
    assert df["max_tokens"].to_list() == raw["output_length"].to_list()
    assert (df["block_hashes"].list.len() == df["input_tokens"] // BLOCK).all()
    assert (df["api"] == "completions").all()
    expected = _reuse_from_hash_ids(raw)
    assert 0.6 < expected < 0.7
    assert summarize(trace)["prefix_reuse_share"] == pytest.approx(expected, abs=0.01)
    # two rows with the same leading hash id share the identical block text in their bodies
    ids = raw["hash_ids"].to_list()
    first_rows: dict[int, list[int]] = {}
    for r, row_ids in enumerate(ids):
        if row_ids:
            first_rows.setdefault(row_ids[0], []).append(r)
    shared = [rows for rows in first_rows.values() if len(rows) > 1]
    assert shared
    for rows in shared[:20]:
        head = block_text(ids[rows[0]][0], BLOCK, min(BLOCK, raw["input_length"][rows[0]]))
        for r in rows:
            assert json.loads(df["body"][r])["prompt"].startswith(head)
    # prompts are the blocks laid end to end, exact in tokens
    for r in np.linspace(0, df.height - 1, 4).astype(int).tolist():
        n = raw["input_length"][r]
        want = "".join(block_text(h, BLOCK, min(BLOCK, n - k * BLOCK))
                       for k, h in enumerate(ids[r]))
        prompt = json.loads(df["body"][r])["prompt"]
        assert prompt == want
        assert len(gpt2.encode(prompt, add_special_tokens=False).ids) == n


def _jsonl(tmp_path, rows: list[object], name: str = "m.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _row(ts: float, n: int, out: int, ids: list[int]) -> dict[str, object]:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


def test_small_file_hashes_and_shared_blocks(tmp_path):
    path = _jsonl(tmp_path, [
        _row(5, 1100, 7, [1, 2, 3]),
        _row(0, 600, 3, [1, 9]),
        _row(5, 1024, 2, [1, 2]),
    ])
    trace = import_mooncake(path)
    df = trace.df
    assert df["request_id"].to_list() == ["mooncake-000001", "mooncake-000000", "mooncake-000002"]
    assert df["arrival_us"].to_list() == [0, 5000, 5000]
    hashes = df["block_hashes"].to_list()
    assert [len(h) for h in hashes] == [1, 2, 2]
    assert hashes[0][0] == hashes[1][0] == hashes[2][0]
    assert hashes[1] == hashes[2]  # same ids 1, 2 over full blocks
    prompts = [json.loads(b)["prompt"] for b in df["body"]]
    assert prompts[2] == block_text(1, BLOCK) + block_text(2, BLOCK)
    assert prompts[1].startswith(prompts[2])
    assert import_mooncake(path, limit=1).df["input_tokens"].to_list() == [1100]
    assert json.loads(import_mooncake(path, model="m").df["body"][0])["model"] == "m"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([_row(0, 10, 1, [1]), {"timestamp": 1, "input_length": 10, "hash_ids": [2]}],
         "m.jsonl: line 2: column 'output_length' has None, expected a number >= 0"),
        ([{"timestamp": 1, "input_length": 10, "output_length": 1}],
         "m.jsonl: column 'hash_ids' missing (Mooncake JSON Lines trace)"),
        ([_row(0, 10, 1, [1]), _row(1, 1100, 1, [1, 2])],
         "m.jsonl: line 2: column 'hash_ids' has 2 ids, expected "
         "ceil(input_length / 512) = 3"),
        ([_row(0, 10, 1, [1]), _row(1, -5, 1, [])],
         "m.jsonl: line 2: column 'input_length' has -5, expected a number >= 0"),
        ([_row(0, 10, 1, [1]), '{"timestamp": 1, "input_length": 10,'],
         "m.jsonl: line 2: not valid JSON"),
        ([_row(0, 10, 1, [1]), _row(1, "ten", 1, [1])],
         "m.jsonl: line 2: column 'input_length' has 'ten'"),
        ([_row(0, 10, 1, [-1])], "m.jsonl: line 1: column 'hash_ids' has a negative id"),
    ],
)
def test_bad_input_names_file_line_and_column(tmp_path, rows, expected):
    with pytest.raises(TraceError) as info:
        import_mooncake(_jsonl(tmp_path, rows))
    assert str(info.value) == expected


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(TraceError, match=r"^nope.jsonl: no such file$"):
        import_mooncake(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match=r"^m.jsonl: trace is empty$"):
        import_mooncake(_jsonl(tmp_path, []))
