"""The Trace schema: round trip and the one-line errors for each kind of bad file."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.errors import TraceError
from replay.trace import (
    REQUIRED_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    VERSION_KEY,
    Trace,
    TraceMeta,
    read_trace,
    validate,
)


def _write_raw(path: Path, df: pl.DataFrame, metadata: dict[str, str] | None) -> Path:
    """Write a Parquet file bypassing validation (to make bad files)."""
    table = df.to_arrow()
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path)
    return path


def _good(make_trace) -> tuple[pl.DataFrame, dict[str, str]]:
    trace = make_trace()
    return trace.df, trace.meta.to_metadata()


def _read_error(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path.name}: ")
    return message


def test_round_trip_keeps_every_column_and_the_metadata(make_trace, tmp_path):
    trace = make_trace(n=6)
    path = trace.write(tmp_path / "t.parquet")
    back = read_trace(path)
    assert back.meta == trace.meta
    assert back.df.schema == pl.Schema(SCHEMA)
    assert back.df.equals(trace.df)
    assert back.df["block_hashes"].to_list()[3] == [0, 1, 2]
    assert back.df["session_id"].to_list()[1] is None
    md = pq.read_metadata(path).metadata
    assert md[VERSION_KEY.encode()] == str(SCHEMA_VERSION).encode()
    for key in ("t0_unix_us", "source_format", "tokenizer", "block_size_tokens", "hash_algo", "redaction_policy"):
        assert key.encode() in md
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_uint64_hashes_above_int64_survive(make_trace, tmp_path):
    big = 2**64 - 1
    trace = make_trace(n=2, block_hashes=pl.Series([[big], [1, big]], dtype=pl.List(pl.UInt64)))
    back = read_trace(trace.write(tmp_path / "t.parquet"))
    assert back.df["block_hashes"].to_list() == [[big], [1, big]]


def test_validate_casts_compatible_integer_widths_and_fills_optional_columns():
    df = pl.DataFrame(
        {
            "request_id": ["a", "b"],
            "api": ["chat", "chat"],
            "arrival_us": pl.Series([0, 5], dtype=pl.Int32),
            "body": ["{}", "{}"],
            "input_tokens": pl.Series([1, 2], dtype=pl.Int64),
            "block_hashes": [[1, 2], []],
        }
    )
    out = validate(df, TraceMeta(), "mem")
    assert out.schema == pl.Schema(SCHEMA)
    assert out["turn"].to_list() == [0, 0]
    assert out["status"].null_count() == 2
    assert set(REQUIRED_COLUMNS) <= set(df.columns)


def test_write_is_atomic_and_validates_first(make_trace, tmp_path):
    trace = make_trace()
    bad = Trace(trace.df.with_columns(api=pl.lit("moderations")), trace.meta)
    with pytest.raises(TraceError, match=r"^out.parquet: column 'api' is 'moderations' at row 0"):
        bad.write(tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda df: df.drop("arrival_us"), "column 'arrival_us' missing (schema 3)"),
        (lambda df: df.drop("body"), "column 'body' missing (schema 3)"),
        (lambda df: df.with_columns(pl.col("arrival_us").cast(pl.String)), "column 'arrival_us' has type String, expected Int64"),
        (lambda df: df.with_columns(pl.col("turn").cast(pl.Float64)), "column 'turn' has type Float64, expected Int32"),
        (
            lambda df: df.with_columns(input_tokens=pl.Series([0, 1, 2**40, 3])),
            "column 'input_tokens' value at row 2 does not fit Int32",
        ),
        (
            lambda df: df.with_columns(arrival_us=pl.Series([0, 5, 3, 9])),
            "column 'arrival_us' is not sorted (row 2 goes back in time)",
        ),
        (lambda df: df.with_columns(arrival_us=pl.Series([-4, -3, 0, 1])), "column 'arrival_us' is negative at row 0"),
        (lambda df: df.with_columns(output_tokens=pl.Series([1, 2, 3, -1])), "column 'output_tokens' is negative at row 3"),
        (lambda df: df.head(0), "trace is empty"),
        (
            lambda df: df.with_columns(request_id=pl.Series(["a", "b", "a", "c"])),
            "column 'request_id' has duplicate 'a' at row 0",
        ),
        (lambda df: df.with_columns(request_id=pl.Series(["a", None, "b", "c"])), "column 'request_id' is null at row 1"),
        (
            lambda df: df.with_columns(api=pl.Series(["chat", "chat", "chat", "edit"])),
            "column 'api' is 'edit' at row 3, expected one of chat, completions, embeddings, responses",
        ),
        (lambda df: df.with_columns(body=pl.Series(["{}", "[1]", "{}", "{}"])), "column 'body' is not a JSON object at row 1"),
        (lambda df: df.with_columns(body=pl.Series(["{}", "{}", "{", "{}"])), "column 'body' is not a JSON object at row 2"),
        (
            lambda df: df.with_columns(block_hashes=pl.Series([[1], [-2], [], []])),
            "column 'block_hashes' value at row 1 does not fit List(UInt64)",
        ),
        (lambda df: df.with_columns(extra=pl.lit(1)), "column 'extra' unknown (schema 3)"),
    ],
)
def test_bad_columns_give_one_line_naming_file_and_column(make_trace, tmp_path, change, expected):
    df, md = _good(make_trace)
    path = _write_raw(tmp_path / "x.parquet", change(df), md)
    assert _read_error(path) == f"x.parquet: {expected}"


def test_unknown_schema_version(make_trace, tmp_path):
    df, md = _good(make_trace)
    path = _write_raw(tmp_path / "x.parquet", df, {**md, VERSION_KEY: "7"})
    assert _read_error(path) == "x.parquet: schema version '7' unknown (this build reads 1, 2, 3)"


def test_parquet_without_our_metadata(make_trace, tmp_path):
    df, _ = _good(make_trace)
    path = _write_raw(tmp_path / "x.parquet", df, None)
    assert _read_error(path) == (f"x.parquet: not a faithful-replay trace (no '{VERSION_KEY}' metadata)")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("t0_unix_us", None, "metadata 't0_unix_us' missing (schema 3)"),
        ("block_size_tokens", "big", "metadata 'block_size_tokens' is 'big', expected an integer"),
        ("block_size_tokens", "0", "metadata 'block_size_tokens' must be positive"),
    ],
)
def test_bad_metadata(make_trace, tmp_path, key, value, expected):
    df, md = _good(make_trace)
    md = {k: v for k, v in md.items() if k != key}
    if value is not None:
        md[key] = value
    path = _write_raw(tmp_path / "x.parquet", df, md)
    assert _read_error(path) == f"x.parquet: {expected}"


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("request_id,arrival_us\na,1\n")
    assert _read_error(path) == "x.parquet: not a Parquet file"


def test_no_such_file(tmp_path):
    assert _read_error(tmp_path / "x.parquet") == "x.parquet: no such file"


def test_meta_round_trips_through_strings():
    meta = TraceMeta(
        t0_unix_us=12, source_format="f", tokenizer="qwen2", block_size_tokens=512, hash_algo="h", redaction_policy="p"
    )
    md = meta.to_metadata()
    assert all(isinstance(v, str) for v in md.values())
    assert TraceMeta.from_metadata(md, "m") == meta
    assert pa.schema([], metadata=md).metadata  # storable as Arrow metadata


def test_bodies_can_stay_in_the_file_and_come_in_batches(make_trace, tmp_path):
    trace = make_trace(n=10)
    path = tmp_path / "t.parquet"
    # small row groups: the bodies are read across several of them
    pq.write_table(trace.df.to_arrow().replace_schema_metadata(trace.meta.to_metadata()), path, row_group_size=3)
    lazy = read_trace(path, bodies=False)
    assert "body" not in lazy.df.columns and lazy.body_file == path
    assert lazy.df.equals(trace.df.drop("body"))
    in_memory = [b for batch in trace.body_batches(7, 4) for b in batch]
    from_file = list(lazy.body_batches(7, 4))
    assert [len(b) for b in from_file] == [4, 3]
    assert [b for batch in from_file for b in batch] == in_memory == trace.df["body"].head(7).to_list()
    with pytest.raises(TraceError, match="read without its bodies"):
        lazy.write(tmp_path / "copy.parquet")


@pytest.mark.parametrize(
    "bad, message",
    [
        (None, "column 'body' is null at row 8 \\(and the metadata has no 'synthesis' rule to build it\\)"),
        ("[1, 2]", "column 'body' is not a JSON object at row 8"),
    ],
)
def test_a_bad_body_in_the_file_is_named_by_row(make_trace, tmp_path, bad, message):
    df = (
        make_trace(n=10)
        .df.with_row_index()
        .with_columns(body=pl.when(pl.col("index") == 8).then(pl.lit(bad, pl.String)).otherwise(pl.col("body")))
        .drop("index")
    )
    path = tmp_path / "t.parquet"
    meta = make_trace(n=10).meta.to_metadata()
    pq.write_table(df.to_arrow().replace_schema_metadata(meta), path, row_group_size=3)
    with pytest.raises(TraceError, match=f"^t.parquet: {message}$"):
        read_trace(path, bodies=False)


def test_a_version_1_file_reads_as_version_3(make_trace, tmp_path):
    trace = make_trace(n=5)
    v1 = trace.df.drop("hash_ids")  # version 1 had no hash_ids column
    md = {**trace.meta.to_metadata(), VERSION_KEY: "1"}
    md.pop("synthesis")
    path = _write_raw(tmp_path / "v1.parquet", v1, md)
    back = read_trace(path)
    assert back.meta.schema_version == SCHEMA_VERSION and back.meta.synthesis == ""
    assert back.df.equals(trace.df)
    assert back.df["hash_ids"].is_null().all()


def test_null_bodies_need_a_synthesis_rule_and_are_built_from_it(make_trace, tmp_path, gpt2):
    import json

    from replay.synth import Synthesis

    trace = make_trace(n=4)
    df = trace.df.with_columns(
        body=pl.Series([None, trace.df["body"][1], None, None], dtype=pl.String),
        hash_ids=pl.Series([None, None, [7] * 1, None], dtype=pl.List(pl.UInt64)),
        input_tokens=pl.Series([20, trace.df["input_tokens"][1], 300, 0]),
        block_hashes=pl.Series([[], [], [], []], dtype=pl.List(pl.UInt64)),
    )
    with pytest.raises(TraceError, match="column 'body' is null at row 0"):
        validate(df, trace.meta, "t")
    meta = TraceMeta(block_size_tokens=16, synthesis=Synthesis(seed=3, block_tokens=512).to_json())
    path = Trace(validate(df, meta, "t"), meta).write(tmp_path / "t.parquet")
    lazy = read_trace(path, bodies=False)
    stored = [b for batch in lazy.body_batches(4, 3) for b in batch]
    assert stored[0] is None and stored[1] == trace.df["body"][1]
    built = [b for batch in lazy.body_batches(4, 3, synthesize=True) for b in batch]
    assert built[1] == stored[1]
    for row in (0, 2, 3):
        body = json.loads(built[row])
        text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
        assert len(gpt2.encode(text, add_special_tokens=False).ids) == df["input_tokens"][row]
    assert built == [b for batch in read_trace(path).body_batches(4, 4, synthesize=True) for b in batch]
    bad = df.with_columns(hash_ids=pl.Series([None, None, [7, 8], None], dtype=pl.List(pl.UInt64)))
    with pytest.raises(
        TraceError,
        match=r"column 'hash_ids' has 2 ids at row 2, expected "
        r"ceil\(input_tokens / 512\) = 1",
    ):
        validate(bad, meta, "t")
    with pytest.raises(TraceError, match="metadata 'synthesis' is not a JSON object"):
        validate(df, TraceMeta(synthesis="{"), "t")


# -- schema 2 and capture folders ---------------------------------------------------------------


def test_a_version_1_file_reads_as_version_3_with_the_live_and_graph_columns_empty(make_trace, tmp_path):
    df, md = _good(make_trace)
    live = ("ttfb_us", "chunk_us", "finish_reason", "outcome")
    graph = ("depends_on", "wait_us", "parent_session_id", "agent")
    v1 = df.drop("hash_ids", *live, *graph)  # version 1 had none of them
    md = {k: v for k, v in md.items() if k != "synthesis"}
    path = _write_raw(tmp_path / "v1.parquet", v1, {**md, VERSION_KEY: "1"})
    back = read_trace(path)
    assert back.meta.schema_version == SCHEMA_VERSION
    assert back.df["depends_on"].to_list() == [[]] * back.df.height
    assert back.df.schema == pl.Schema(SCHEMA)
    for name in live:
        assert back.df[name].null_count() == back.df.height
    assert back.df.drop("hash_ids", *live, *graph).equals(v1)


def test_the_live_columns_round_trip_and_a_bad_outcome_is_named(make_trace, tmp_path):
    trace = make_trace(
        n=2,
        ttfb_us=pl.Series([5, None]),
        chunk_us=pl.Series([[0, 7, 9], None], dtype=pl.List(pl.UInt32)),
        finish_reason=pl.Series(["stop", None]),
        outcome=pl.Series(["completed", "client_disconnected"]),
    )
    back = read_trace(trace.write(tmp_path / "t.parquet"))
    assert back.df["chunk_us"].to_list() == [[0, 7, 9], None]
    assert back.df["outcome"].to_list() == ["completed", "client_disconnected"]
    df, md = _good(make_trace)
    bad = _write_raw(tmp_path / "x.parquet", df.with_columns(outcome=pl.lit("exploded")), md)
    assert _read_error(bad).startswith("x.parquet: column 'outcome' is 'exploded' at row 0")


def test_tool_calls_round_trip_a_file_without_them_reads_as_unknown_and_a_bad_count_is_named(make_trace, tmp_path):
    trace = make_trace(n=3, tool_calls=pl.Series([[40, 25], [], None], dtype=pl.List(pl.Int32)))
    back = read_trace(trace.write(tmp_path / "t.parquet"))
    assert back.df["tool_calls"].to_list() == [[40, 25], [], None]
    df, md = _good(make_trace)
    old = read_trace(_write_raw(tmp_path / "old.parquet", df.drop("tool_calls", strict=False), md))
    assert old.df["tool_calls"].null_count() == old.df.height
    bad = df.with_columns(tool_calls=pl.Series([[3, -1]] + [[]] * (df.height - 1), dtype=pl.List(pl.Int32)))
    assert _read_error(_write_raw(tmp_path / "x.parquet", bad, md)).startswith(
        "x.parquet: column 'tool_calls' has a null or negative token count at row 0"
    )


def _segment(make_trace, folder: Path, n: int, arrivals: list[int], ids: list[str], **meta) -> None:
    trace = make_trace(
        n=len(arrivals),
        arrival_us=pl.Series(arrivals, dtype=pl.Int64),
        request_id=pl.Series(ids),
        body=pl.Series([f'{{"prompt":"{i}"}}' for i in ids]),
        meta=TraceMeta(t0_unix_us=1, source_format="capture", **meta),
    )
    trace.write(folder / f"segment-{n:06d}.parquet")


def test_a_capture_folder_is_one_trace_in_arrival_order_with_or_without_bodies(make_trace, tmp_path):
    # segments hold the requests that ENDED in their window: their arrivals overlap
    _segment(
        make_trace,
        tmp_path,
        1,
        [0, 30, 50],
        ["a", "d", "f"],
        capture_report='{"upstream":"u","sample":0.5,"recorded":3,"dropped_queue_full":1}',
    )
    _segment(
        make_trace,
        tmp_path,
        2,
        [10, 20, 40, 60],
        ["b", "c", "e", "g"],
        capture_report='{"upstream":"u","sample":0.5,"recorded":4,"dropped_queue_full":2}',
    )
    (tmp_path / "capture.json").write_text("{}")
    whole = read_trace(tmp_path)
    assert whole.df["request_id"].to_list() == list("abcdefg")
    assert whole.df["body"].to_list() == [f'{{"prompt":"{c}"}}' for c in "abcdefg"]
    import json

    report = json.loads(whole.meta.capture_report)
    assert report == {"upstream": "u", "sample": 0.5, "recorded": 7, "dropped_queue_full": 3}
    lean = read_trace(tmp_path, bodies=False)
    assert "body" not in lean.df.columns
    batches = list(lean.body_batches(6, 4))
    assert [len(b) for b in batches] == [4, 2]
    assert sum(batches, []) == whole.df["body"].to_list()[:6]
    from replay.trace import read_meta

    meta, rows = read_meta(tmp_path)
    assert rows == 7 and json.loads(meta.capture_report)["recorded"] == 7


def test_a_capture_folder_whose_segments_disagree_or_that_is_empty_is_named(make_trace, tmp_path):
    with pytest.raises(TraceError, match=r"^[^/]+: a folder with no trace segments"):
        read_trace(tmp_path)
    _segment(make_trace, tmp_path, 1, [0], ["a"], tokenizer="gpt2")
    _segment(make_trace, tmp_path, 2, [5], ["b"], tokenizer="qwen2")
    with pytest.raises(TraceError, match="segment-000002.parquet: metadata 'tokenizer' is 'qwen2'"):
        read_trace(tmp_path)
