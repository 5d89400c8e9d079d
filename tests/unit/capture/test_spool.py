"""capture.spool: the append-only spool, its segments, and recovery after a crash."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

from capture.spool import Spool, open_folder, recover
from replay.errors import ConfigError
from replay.trace import SCHEMA, TraceMeta, read_trace

META = TraceMeta(t0_unix_us=10, source_format="capture", redaction_policy="none")
BASE = {"upstream": "http://u", "sample": 1.0}


def _rows(ids, arrivals):
    return (
        pl.DataFrame(
            {
                "request_id": ids,
                "api": ["chat"] * len(ids),
                "arrival_us": arrivals,
                "body": [json.dumps({"messages": [], "n": i}) for i in ids],
                "input_tokens": [1] * len(ids),
                "outcome": ["completed"] * len(ids),
                "chunk_us": [[0, 5]] * len(ids),
                "turn": [0] * len(ids),
                "block_hashes": [[7]] * len(ids),
            }
        )
        .pipe(lambda df: df.with_columns([pl.lit(None, SCHEMA[c]).alias(c) for c in SCHEMA if c not in df.columns]))
        .select(list(SCHEMA))
    )


def test_rolled_segments_read_as_one_trace_with_the_counts(tmp_path):
    spool = Spool(tmp_path, META, BASE, 1)
    spool.append_rows(_rows(["b", "a"], [20, 10]))
    spool.append_counts(Counter(dropped_queue_full=2))
    spool.sync()
    assert spool.roll().name == "segment-000001.parquet"
    spool.append_rows(_rows(["c"], [15]))  # arrived before b ended: segments overlap in arrival
    spool.append_counts(Counter(dropped_queue_full=1, not_sampled=4))
    spool.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segment-000001.parquet", "segment-000002.parquet"]
    trace = read_trace(tmp_path)
    assert trace.df["request_id"].to_list() == ["a", "c", "b"]
    assert trace.df["chunk_us"].to_list() == [[0, 5]] * 3
    assert json.loads(trace.meta.capture_report) == {
        "upstream": "http://u",
        "sample": 1.0,
        "dropped_queue_full": 3,
        "not_sampled": 4,
    }


def test_recovery_rolls_a_crashed_spool_ignoring_its_torn_last_line(tmp_path):
    spool = Spool(tmp_path, META, BASE, 3)
    spool.append_rows(_rows(["a", "b"], [1, 2]))
    spool.append_counts(Counter(dropped_redaction_failed=1))
    spool.sync()
    spool._f.write(b'{"request_id":"c","api":"ch')  # the crash came mid-write
    spool._f.close()  # the process is gone: nothing rolled, nothing more written
    number, carry, recovered = recover(tmp_path, META, BASE)
    assert (number, carry, recovered) == (4, Counter(), 2)
    assert [p.name for p in tmp_path.iterdir()] == ["segment-000003.parquet"]
    trace = read_trace(tmp_path)
    assert trace.df["request_id"].to_list() == ["a", "b"]
    assert json.loads(trace.meta.capture_report)["dropped_redaction_failed"] == 1


def test_recovery_never_duplicates_and_carries_counts_of_a_spool_without_rows(tmp_path):
    spool = Spool(tmp_path, META, BASE, 1)
    spool.append_rows(_rows(["a"], [1]))
    spool.sync()
    spool.roll()
    # a crash between the segment's rename and the spool's delete: make the spool reappear
    (tmp_path / "spool-000001.jsonl").write_bytes(_rows(["a"], [1]).write_ndjson().encode())
    spool.append_counts(Counter(dropped_queue_full=5))  # spool 2: counts only
    spool.sync()
    spool._f.close()  # the crash
    (tmp_path / ".segment-000009.parquet.123.tmp").write_bytes(b"half a file")
    number, carry, recovered = recover(tmp_path, META, BASE)
    assert (number, carry, recovered) == (3, Counter(dropped_queue_full=5), 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segment-000001.parquet"]
    assert read_trace(tmp_path).df["request_id"].to_list() == ["a"]
    nxt = Spool(tmp_path, META, BASE, number, carry)
    nxt.append_rows(_rows(["b"], [2]))
    nxt.close()
    assert json.loads(read_trace(tmp_path).meta.capture_report)["dropped_queue_full"] == 5


def test_a_restart_must_agree_with_the_folder(tmp_path):
    settings = {"tokenizer": "gpt2", "block_size_tokens": 16, "redaction_policy": "redacted", "redaction_key": "abc"}
    first = open_folder(tmp_path / "cap", settings)
    again = open_folder(tmp_path / "cap", settings)
    assert again["t0_unix_us"] == first["t0_unix_us"] > 0
    with pytest.raises(ConfigError, match="redaction_policy='redacted', this run 'none'"):
        open_folder(tmp_path / "cap", {**settings, "redaction_policy": "none", "redaction_key": ""})


def test_sample_and_slice_read_a_capture_folder_in_arrival_order(tmp_path):
    from replay.subsets import sample_sessions, slice_window

    folder = tmp_path / "cap"
    folder.mkdir()
    spool = Spool(folder, META, BASE, 1)
    spool.append_rows(_rows(["b", "d"], [20, 40]))
    spool.sync()
    spool.roll()
    spool.append_rows(_rows(["a", "c"], [10, 30]))  # arrived earlier, ended later
    spool.close()
    assert sample_sessions(folder, tmp_path / "all.parquet", 1.0) == 4
    assert read_trace(tmp_path / "all.parquet").df["request_id"].to_list() == ["a", "b", "c", "d"]
    assert slice_window(folder, tmp_path / "w.parquet", 15e-6, 35e-6) == 2
    window = read_trace(tmp_path / "w.parquet").df
    assert window["request_id"].to_list() == ["b", "c"]
    assert window["body"].to_list() == [json.dumps({"messages": [], "n": i}) for i in ("b", "c")]


def test_a_folder_that_recorded_nothing_names_what_its_spools_dropped(tmp_path):
    from capture.spool import write_counts
    from replay.errors import TraceError
    from replay.trace import read_meta

    # every record failed redaction: the recorder stops with counts and no rows
    spool = Spool(tmp_path, META, BASE, 1)
    spool.append_counts(Counter(requests=4, dropped_redaction_failed=4))
    spool.sync()
    spool.close()
    # then a recorder died before writing anything: the proxy leaves its count
    write_counts(tmp_path, {"dropped_recorder_error": 2})
    assert sorted(p.name for p in tmp_path.glob("segment-*")) == []
    said = "no request was recorded; its spool counts dropped_recorder_error=2, dropped_redaction_failed=4, requests=4$"
    for read in (read_trace, read_meta):
        with pytest.raises(
            TraceError,
            match=f"^{tmp_path.name}: a capture folder with no trace "
            rf"segments \(segment-\*.parquet\): {said}",
        ):
            read(tmp_path)


def test_a_folder_before_its_first_roll_says_a_segment_comes(tmp_path):
    from replay.errors import TraceError

    with pytest.raises(TraceError, match=r"within seconds of its first request$"):
        read_trace(tmp_path)
    spool = Spool(tmp_path, META, BASE, 1)
    spool.append_rows(_rows(["a"], [1]))
    spool.append_counts(Counter(recorded=1, not_sampled=2))
    spool.sync()
    with pytest.raises(
        TraceError,
        match=r"first request \(its spool counts not_sampled=2, "
        r"recorded=1\)$",
    ):
        read_trace(tmp_path)
    spool._f.close()


def test_a_roll_that_fails_changes_nothing_and_the_next_one_takes_every_row(tmp_path):
    from replay.errors import TraceError

    spool = Spool(tmp_path, META, BASE, 1)
    spool.append_rows(_rows(["a"], [1]))
    (tmp_path / "segment-000001.parquet").mkdir()  # the segment's rename fails, root included
    with pytest.raises(TraceError, match="segment-000001.parquet: cannot write"):
        spool.roll()
    assert (spool.number, spool.rows, spool.segments_written) == (1, 1, 0)
    assert not list(tmp_path.glob(".segment-*"))  # its temporary file is gone
    spool.append_rows(_rows(["b"], [2]))  # the spool is still open
    (tmp_path / "segment-000001.parquet").rmdir()
    assert spool.roll().name == "segment-000001.parquet"
    spool.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segment-000001.parquet"]
    assert read_trace(tmp_path).df["request_id"].to_list() == ["a", "b"]


def test_a_roll_streams_the_spool_in_row_groups_and_sorts_by_arrival(tmp_path, monkeypatch):
    import random

    import pyarrow.parquet as pq

    import capture.spool

    monkeypatch.setattr(capture.spool, "ROLL_CHUNK_ROWS", 7)
    spool = Spool(tmp_path, META, BASE, 1)
    # rows are appended as requests end, not in arrival order; a body may quote a key
    arrivals = list(range(0, 50 * 3, 3))
    random.Random(1).shuffle(arrivals)
    ids = [f"r{i}" for i in range(50)]
    df = _rows(ids, arrivals).with_columns(body=pl.lit('{"prompt": "\\"arrival_us\\":999999, twice"}'))
    for lo in range(0, 50, 10):
        spool.append_rows(df.slice(lo, 10))
        spool.append_counts(Counter({"not_sampled": 1}))
    spool.close()
    seg = tmp_path / "segment-000001.parquet"
    assert pq.ParquetFile(seg).metadata.num_row_groups == 8  # 50 rows, 7 a roll chunk
    got = read_trace(seg)
    assert got.df["arrival_us"].to_list() == sorted(arrivals)
    by_arrival = dict(zip(arrivals, ids))
    assert got.df["request_id"].to_list() == [by_arrival[a] for a in sorted(arrivals)]
    assert json.loads(got.meta.capture_report)["not_sampled"] == 5
