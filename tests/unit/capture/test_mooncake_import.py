"""Mooncake JSON Lines import (and AIPerf's mooncake_trace): no stored text, block texts keyed
by hash id, prefix reuse kept, real text kept, bad rows."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from capture.importers import import_mooncake
from replay.blocks import block_hashes
from replay.errors import TraceError
from replay.traffic import trace_summary
from replay.prompts import block_text
from replay.trace import read_trace

BLOCK = 512


def _bodies(trace) -> list[dict]:
    return [json.loads(b) for batch in trace.body_batches(len(trace), 256, synthesize=True) for b in batch]


@pytest.fixture(scope="module")
def mooncake(shared_traces, tmp_path_factory):
    path = shared_traces / "mooncake_synthetic.jsonl"
    out = tmp_path_factory.mktemp("mooncake") / "m.parquet"
    import_mooncake(path, out)
    return read_trace(out, bodies=False), pl.read_ndjson(path), out


def _reuse_from_hash_ids(raw: pl.DataFrame) -> float:
    """Infinite-cache reuse straight from the file: tokens of full blocks whose id was seen."""
    seen: set[int] = set()
    reused = 0
    for n, ids in zip(raw["input_length"].to_list(), raw["hash_ids"].to_list()):
        for k, h in enumerate(ids):
            if h in seen and n - k * BLOCK >= BLOCK:
                reused += BLOCK
            seen.add(h)
    return reused / int(raw["input_length"].sum())


@pytest.mark.data
@pytest.mark.slow
def test_full_shared_file(mooncake, gpt2):
    trace, raw, out = mooncake
    df = trace.df
    assert df.height == raw.height
    assert trace.meta.block_size_tokens == BLOCK
    assert trace.meta.source_format == "mooncake-jsonl"
    assert df["input_tokens"].to_list() == raw["input_length"].to_list()
    assert df["max_tokens"].to_list() == raw["output_length"].to_list()
    assert df["hash_ids"].to_list() == raw["hash_ids"].to_list()
    assert (df["block_hashes"].list.len() == df["input_tokens"] // BLOCK).all()
    assert (df["api"] == "completions").all()
    assert pl.read_parquet(out, columns=["body"])["body"].is_null().all()
    # no synthesized text stored: a few hundred bytes a row (the old importer wrote 69 KB a row)
    assert out.stat().st_size / df.height < 1024
    expected = _reuse_from_hash_ids(raw)
    assert 0.6 < expected < 0.7
    assert trace_summary(trace)["prefix_reuse_share"] == pytest.approx(expected, abs=1e-9)
    ids = raw["hash_ids"].to_list()
    rows = np.linspace(0, df.height - 1, 4).astype(int).tolist()
    for r, batch in enumerate(trace.body_batches(df.height, 1, synthesize=True)):
        if r not in rows:
            continue
        n = raw["input_length"][r]
        prompt = json.loads(batch[0])["prompt"]
        assert prompt == "".join(block_text(h, BLOCK, min(BLOCK, n - k * BLOCK)) for k, h in enumerate(ids[r]))
        token_ids = gpt2.encode(prompt, add_special_tokens=False).ids
        assert len(token_ids) == n
        assert block_hashes(token_ids, BLOCK) == df["block_hashes"][r].to_list()


def _jsonl(tmp_path, rows: list[object], name: str = "m.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _row(ts: float, n: int, out: int, ids: list[int]) -> dict[str, object]:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


def _import(tmp_path, path, **kwargs):
    out = tmp_path / "out.parquet"
    import_mooncake(path, out, **kwargs)
    return read_trace(out)


def test_small_file_hashes_and_shared_blocks(tmp_path, gpt2):
    path = _jsonl(
        tmp_path,
        [
            _row(5, 1100, 7, [1, 2, 3]),
            _row(0, 600, 3, [1, 9]),
            _row(5, 1024, 2, [1, 2]),
        ],
    )
    trace = _import(tmp_path, path)
    df = trace.df
    assert df["request_id"].to_list() == ["mooncake-000001", "mooncake-000000", "mooncake-000002"]
    assert df["arrival_us"].to_list() == [0, 5000, 5000]
    hashes = df["block_hashes"].to_list()
    assert [len(h) for h in hashes] == [1, 2, 2]
    assert hashes[0][0] == hashes[1][0] == hashes[2][0]
    assert hashes[1] == hashes[2]  # same ids 1, 2 over full blocks
    prompts = [b["prompt"] for b in _bodies(trace)]
    assert prompts[2] == block_text(1, BLOCK) + block_text(2, BLOCK)
    assert prompts[1].startswith(prompts[2])
    for p, n, h in zip(prompts, df["input_tokens"], hashes):
        ids = gpt2.encode(p, add_special_tokens=False).ids
        assert len(ids) == n and block_hashes(ids, BLOCK) == h
    assert _import(tmp_path, path, limit=1).df["input_tokens"].to_list() == [1100]
    assert _bodies(_import(tmp_path, path, model="m"))[0]["model"] == "m"
    # another block size hashes the same text in smaller blocks
    small = _import(tmp_path, path, block_size=16)
    assert small.meta.block_size_tokens == 16
    assert small.df["block_hashes"][0].to_list() == block_hashes(gpt2.encode(prompts[0], add_special_tokens=False).ids, 16)


def test_aiperf_variant_text_messages_sessions_and_delay(tmp_path, gpt2):
    # the forms of AIPerf's mooncake_trace documentation: hash ids, text_input, messages,
    # session_id with delay
    path = _jsonl(
        tmp_path,
        [
            {"timestamp": 0, "input_length": 700, "output_length": 4, "hash_ids": [10, 11]},
            {"timestamp": 1000, "text_input": "Tell me a story about a cat.", "output_length": 20},
            {
                "session_id": "s1",
                "timestamp": 2000,
                "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
                "output_length": 3,
            },
            {
                "session_id": "s1",
                "delay": 500,
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another."},
                ],
                "output_length": 3,
            },
            {"timestamp": 3000, "input_length": 40, "output_length": 5},
        ],
    )
    trace = _import(tmp_path, path)
    df = trace.df
    assert df["arrival_us"].to_list() == [0, 1_000_000, 2_000_000, 2_500_000, 3_000_000]
    assert df["api"].to_list() == ["completions", "chat", "chat", "chat", "completions"]
    assert df["body"].is_null().to_list() == [True, False, False, False, True]
    assert trace.meta.redaction_policy == "none"  # real text from the file
    story = json.loads(df["body"][1])
    assert story == {"messages": [{"role": "user", "content": "Tell me a story about a cat."}], "max_tokens": 20}
    assert df["input_tokens"][1] == len(gpt2.encode("Tell me a story about a cat.", add_special_tokens=False).ids)
    assert df["session_id"].to_list() == [None, None, "s1", "s1", None]
    assert df["turn"].to_list()[2:4] == [0, 1]
    assert df["parent_request_id"][3] == df["request_id"][2]
    assert df["hash_ids"].to_list() == [[10, 11], None, None, None, None]
    report = json.loads(trace.meta.import_report)
    assert report["real_text_rows"] == 3 and report["synthesized_rows"] == 2
    bodies = _bodies(trace)
    assert len(gpt2.encode(bodies[4]["prompt"], add_special_tokens=False).ids) == 40


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [_row(0, 10, 1, [1]), {"timestamp": 1, "input_length": 10, "hash_ids": [2]}],
            "m.jsonl: line 2: is missing (field 'output_length')",
        ),
        (
            [_row(0, 10, 1, [1]), _row(1, 1100, 1, [1, 2])],
            "m.jsonl: line 2: has 2 ids, expected ceil(input_length / 512) = 3 (a file written at another "
            "block size needs --hash-block) (field 'hash_ids')",
        ),
        ([_row(0, 10, 1, [1]), _row(1, -5, 1, [])], "m.jsonl: line 2: -5 is not a count >= 0 (field 'input_length')"),
        ([_row(0, 10, 1, [1]), '{"timestamp": 1, "input_length": 10,'], "m.jsonl: line 2: not valid JSON"),
        ([_row(0, 10, 1, [1]), _row(1, "ten", 1, [1])], "m.jsonl: line 2: 'ten' is not a count >= 0 (field 'input_length')"),
        ([_row(0, 10, 1, [-1])], "m.jsonl: line 1: is not a list of integers >= 0 (field 'hash_ids')"),
        (
            [{"delay": 5, "input_length": 3, "output_length": 1}],
            "m.jsonl: line 1: is missing (a 'delay' needs an earlier turn of its session) (field 'timestamp')",
        ),
        ([_row(0, 10, 1, [1]), [1, 2]], "m.jsonl: line 2: not a JSON object"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, rows, expected):
    with pytest.raises(TraceError) as info:
        _import(tmp_path, _jsonl(tmp_path, rows))
    assert str(info.value) == expected


def test_skip_bad_and_empty_and_missing_files(tmp_path):
    path = _jsonl(tmp_path, [_row(0, 10, 1, [1]), "{", _row(1, 1100, 1, [1]), _row(2, 5, 1, [7])])
    trace = _import(tmp_path, path, skip_bad=True)
    assert trace.df["hash_ids"].to_list() == [[1], [7]]
    report = json.loads(trace.meta.import_report)
    assert report["skipped_lines"] == 2 and [s["line"] for s in report["first_skipped"]] == [2, 3]
    with pytest.raises(TraceError, match=r"^nope.jsonl: no such file$"):
        _import(tmp_path, tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match=r"^m.jsonl: no requests imported"):
        _import(tmp_path, _jsonl(tmp_path, []))


@pytest.mark.data
@pytest.mark.slow
def test_shared_file_exports_back_to_its_own_ids(mooncake, tmp_path):
    from capture.exporters import export_trace

    _, raw, out = mooncake
    back = tmp_path / "back.jsonl"
    export_trace("mooncake", out, back)
    lines = [json.loads(x) for x in back.read_text().splitlines()]
    seen: dict[int, int] = {}
    canonical = [[seen.setdefault(h, len(seen)) for h in ids] for ids in raw["hash_ids"].to_list()]
    assert [x["hash_ids"] for x in lines] == canonical
    assert [x["input_length"] for x in lines] == raw["input_length"].to_list()
    assert [x["output_length"] for x in lines] == raw["output_length"].to_list()
    assert [x["timestamp"] for x in lines] == [t - raw["timestamp"][0] for t in raw["timestamp"].to_list()]
