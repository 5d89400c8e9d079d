"""Azure LLM inference CSV import: the shared trace and bad inputs."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import polars as pl
import pytest

from capture.importers import import_azure
from replay.blocks import block_hashes
from replay.errors import TraceError
from replay.inspect import summarize


@pytest.fixture(scope="module")
def azure(shared_traces):
    path = shared_traces / "azure_llm_2023_conv.csv"
    return path, import_azure(path), pl.read_csv(path)


@pytest.mark.data
@pytest.mark.slow
def test_full_shared_file(azure, gpt2):
    _, trace, raw = azure
    df = trace.df
    assert df.height == raw.height == 19_366
    stamps = raw["TIMESTAMP"].str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us")
    span_s = (stamps.max() - stamps.min()).total_seconds()
    s = summarize(trace)
    assert s["mean_rate_rps"] == pytest.approx((raw.height - 1) / span_s, rel=1e-6)
    assert 5.3 < s["mean_rate_rps"] < 5.7
    assert s["input_tokens_p50"] == pytest.approx(raw["ContextTokens"].median())
    assert s["output_tokens_p50"] == pytest.approx(raw["GeneratedTokens"].median())
    assert trace.meta.t0_unix_us == int(stamps.min().replace(tzinfo=timezone.utc).timestamp()
                                        * 1_000_000)
    assert df["input_tokens"].to_list() == raw["ContextTokens"].to_list()  # file is in time order
    assert df["request_id"].n_unique() == df.height
    for i in np.linspace(0, df.height - 1, 12).astype(int).tolist():
        body = json.loads(df["body"][i])
        assert body["max_tokens"] == raw["GeneratedTokens"][i]
        assert [m["role"] for m in body["messages"]] == ["user"]
        token_ids = gpt2.encode(body["messages"][0]["content"], add_special_tokens=False).ids
        assert len(token_ids) == raw["ContextTokens"][i]
        assert block_hashes(token_ids, 16) == df["block_hashes"][i].to_list()
    assert df["body"].n_unique() == df.height
    assert s["prefix_reuse_share"] < 0.001


def _csv(tmp_path, text: str, name: str = "a.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_mixed_timestamp_formats_and_unsorted_rows(tmp_path, gpt2):
    path = _csv(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                          "2024-05-10 00:00:02.5+00:00,30,5\n"
                          "2024-05-10T00:00:01Z,20,4\n"
                          "2024-05-10 02:00:00.000001+02:00,10,3\n"
                          "2024-05-10 00:00:01.1234567,0,2\n")
    trace = import_azure(path, seed=1)
    t0 = int(datetime(2024, 5, 10, 0, 0, 0, tzinfo=timezone.utc).timestamp() * 1_000_000)
    assert trace.meta.t0_unix_us == t0 + 1
    assert trace.df["arrival_us"].to_list() == [0, 999_999, 1_123_455, 2_499_999]
    assert trace.df["input_tokens"].to_list() == [10, 20, 0, 30]
    assert trace.df["request_id"].to_list() == ["azure-000002", "azure-000001", "azure-000003",
                                                "azure-000000"]
    for body, n in zip(trace.df["body"], trace.df["input_tokens"]):
        content = json.loads(body)["messages"][0]["content"]
        assert len(gpt2.encode(content, add_special_tokens=False).ids) == n
    assert import_azure(path, seed=1).df.equals(trace.df)
    assert not import_azure(path, seed=2).df["body"].equals(trace.df["body"])
    assert import_azure(path, limit=2).df.height == 2
    with_model = json.loads(import_azure(path, model="m").df["body"][0])
    assert with_model["model"] == "m"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n",
         "a.csv: column 'GeneratedTokens' missing (Azure LLM inference trace CSV)"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,4\n"
         "2023-11-16 18:15:47.68,x3,4\n",
         "a.csv: line 3: column 'ContextTokens' has 'x3', expected an integer >= 0"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,-4\n",
         "a.csv: line 2: column 'GeneratedTokens' has '-4', expected an integer >= 0"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,4\n"
         "2023-13-16 18:15:46.68,3,4\n",
         "a.csv: line 3: column 'TIMESTAMP' has '2023-13-16 18:15:46.68', "
         "expected a time like '2023-11-16 18:15:46.6805900'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
         "a.csv: line 2: column 'TIMESTAMP' has 'yesterday', "
         "expected a time like '2023-11-16 18:15:46.6805900'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,,4\n",
         "a.csv: line 2: column 'ContextTokens' is empty"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "a.csv: trace is empty"),
    ],
)
def test_bad_input_names_file_line_and_column(tmp_path, text, expected):
    with pytest.raises(TraceError) as info:
        import_azure(_csv(tmp_path, text))
    assert str(info.value) == expected


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match=r"^nope.csv: no such file$"):
        import_azure(tmp_path / "nope.csv")
