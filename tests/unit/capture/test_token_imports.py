"""BurstGPT and vidur / splitwise CSV imports (files written from each format's public
description), and the streaming writer's time-order rule."""

from __future__ import annotations

import json

import pytest

from capture.importers import import_burstgpt, import_vidur, tokens
from replay.errors import TraceError
from replay.trace import read_trace

# BurstGPT's release columns; the first release lacks Session ID and Elapsed time
BURST_FULL = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID,Elapsed time\n"
    "5,ChatGPT,472,18,490,Conversation log,1001,2.5\n"
    "45,GPT-4,1087,0,1087,API log,,0.1\n"
    "60,ChatGPT,530,41,571,Conversation log,1001,3.75\n"
    "61,ChatGPT,20,5,25,Conversation log,2002,1\n"
)
BURST_SHORT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "0,ChatGPT,100,20,120,Conversation log\n"
    "1.5,GPT-4,50,7,57,API log\n"
)


def _import(fn, tmp_path, text, name="in.csv", **kwargs):
    src = tmp_path / name
    src.write_text(text)
    fn(src, tmp_path / "out.parquet", **kwargs)
    return read_trace(tmp_path / "out.parquet")


def _texts(trace):
    return [
        json.loads(b)["messages"][0]["content"] for batch in trace.body_batches(len(trace), 64, synthesize=True) for b in batch
    ]


def test_burstgpt_with_sessions_and_elapsed(tmp_path, gpt2):
    trace = _import(import_burstgpt, tmp_path, BURST_FULL)
    df = trace.df
    assert trace.meta.source_format == "burstgpt-csv" and trace.meta.t0_unix_us == 5_000_000
    assert df["arrival_us"].to_list() == [0, 40_000_000, 55_000_000, 56_000_000]
    assert df["input_tokens"].to_list() == [472, 1087, 530, 20]
    assert df["output_tokens"].to_list() == [18, 0, 41, 5]
    assert df["max_tokens"].to_list() == [18, 1, 41, 5]  # a failed request still asks for one token
    assert df["status"].to_list() == [200, 500, 200, 200]
    assert df["model"].to_list() == ["ChatGPT", "GPT-4", "ChatGPT", "ChatGPT"]
    assert df["session_id"].to_list() == ["1001", None, "1001", "2002"]
    assert df["turn"].to_list() == [0, 0, 1, 0]
    assert df["parent_request_id"].to_list() == [None, None, df["request_id"][0], None]
    assert df["e2e_us"].to_list() == [2_500_000, 100_000, 3_750_000, 1_000_000]
    assert df["body"].is_null().all()
    report = json.loads(trace.meta.import_report)
    assert report["failed_requests"] == 1 and report["log_type:API log"] == 1
    for text, n in zip(_texts(trace), df["input_tokens"]):
        assert len(gpt2.encode(text, add_special_tokens=False).ids) == n


def test_burstgpt_without_sessions_and_elapsed(tmp_path):
    trace = _import(import_burstgpt, tmp_path, BURST_SHORT, model="served")
    assert trace.df["session_id"].to_list() == [None, None]
    assert trace.df["e2e_us"].to_list() == [None, None]
    assert trace.df["model"].to_list() == ["served", "served"]  # --model wins


def test_burstgpt_bad_rows(tmp_path):
    bad = BURST_SHORT + "2,ChatGPT,ten,7,57,API log\n"
    with pytest.raises(TraceError) as info:
        _import(import_burstgpt, tmp_path, bad, name="b.csv")
    assert str(info.value) == "b.csv: line 4: 'ten' is not an integer >= 0 (field 'Request tokens')"
    trace = _import(import_burstgpt, tmp_path, bad + "-3,ChatGPT,1,1,2,API log\n", skip_bad=True)
    report = json.loads(trace.meta.import_report)
    assert len(trace) == 2 and report["skipped_lines"] == 2
    assert report["first_skipped"][1] == {"line": 5, "reason": "'-3' is not a number of seconds >= 0 (field 'Timestamp')"}
    with pytest.raises(TraceError, match=r"^b.csv: column 'Response tokens' missing \(BurstGPT CSV\)$"):
        _import(import_burstgpt, tmp_path, "Timestamp,Request tokens\n1,2\n", name="b.csv")


VIDUR = (
    "arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens\n"
    "0.0,1024,128,1152\n0.731,35,300,335\n0.731,4000,12,4012\n2.5,1,1,2\n"
)


def test_vidur(tmp_path, gpt2):
    trace = _import(import_vidur, tmp_path, VIDUR, seed=4)
    df = trace.df
    assert trace.meta.source_format == "vidur-csv"
    assert df["arrival_us"].to_list() == [0, 731_000, 731_000, 2_500_000]
    assert df["input_tokens"].to_list() == [1024, 35, 4000, 1]
    assert df["max_tokens"].to_list() == [128, 300, 12, 1]
    texts = _texts(trace)
    assert [len(gpt2.encode(t, add_special_tokens=False).ids) for t in texts] == [1024, 35, 4000, 1]
    assert len(set(texts)) == 4
    with pytest.raises(TraceError, match=r"^v.csv: line 3: 'x' is not an integer >= 0 \(field 'num_decode_tokens'\)$"):
        _import(import_vidur, tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n1,2,x\n", name="v.csv")


def test_rows_are_sorted_within_a_chunk_and_must_not_go_back_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(tokens, "CHUNK_ROWS", 3)
    # out of order inside the first chunk of 3: sorted; 7 rows -> 3 row groups
    ok = "arrived_at,num_prefill_tokens,num_decode_tokens\n2,1,1\n1,2,1\n3,3,1\n4,4,1\n5,5,1\n6,6,1\n7,7,1\n"
    trace = _import(import_vidur, tmp_path, ok)
    assert trace.df["input_tokens"].to_list() == [2, 1, 3, 4, 5, 6, 7]
    import pyarrow.parquet as pq

    assert pq.ParquetFile(tmp_path / "out.parquet").num_row_groups == 3
    late = "arrived_at,num_prefill_tokens,num_decode_tokens\n2,1,1\n3,2,1\n4,3,1\n1,4,1\n"
    with pytest.raises(TraceError) as info:
        _import(import_vidur, tmp_path, late, name="late.csv")
    assert str(info.value).startswith("late.csv: line 5: time is earlier than line 4, already written")


def test_prefix_chain_extends_by_the_shared_tokens():
    chain = tokens.PrefixChain(10)
    a = chain.extend(None, 0, 25)  # 3 blocks, the last partial
    assert a == [1, 2, 3]
    assert chain.extend((a, 25), 25, 40) == [1, 2, 3, 4]  # the whole of a: its partial block too
    assert chain.extend((a, 25), 24, 40) == [1, 2, 5, 6]  # 24 shared: two full blocks only
    assert chain.extend((a, 25), 99, 12) == [1, 7]  # never more than either prompt holds
    assert chain.extend((a, 25), 0, 5) == [8]


def test_time_ordered_merges_spilled_runs_stably():
    recs = [
        tokens.TokenRecord(line=i, arrival_us=t, input_tokens=1, output_tokens=1, request_id=str(i))
        for i, t in enumerate([5, 1, 5, 0, 3, 1, 9])
    ]
    out = list(tokens.time_ordered(recs, run_rows=2))
    assert [(r.arrival_us, r.line) for r in out] == [(0, 3), (1, 1), (1, 5), (3, 4), (5, 0), (5, 2), (9, 6)]
