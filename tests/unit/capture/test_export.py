"""`replay export`: each format round-trips through its importer with the same counts, lengths
and prefix sharing; the block-size trap of Mooncake ids."""

from __future__ import annotations

import json

import pytest

from capture.exporters import export_trace
from capture.importers import import_mooncake, import_openai
from replay.blocks import prefix_hits
from replay.cli.main import main
from replay.trace import read_trace


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _canonical(lists):
    """Hash lists renumbered in order of first appearance (the sharing, not the values)."""
    seen: dict[int, int] = {}
    return [[seen.setdefault(h, len(seen)) for h in ids] for ids in lists]


MOONCAKE_ROWS = [  # prefix sharing across requests, partial last blocks, one repeated request
    {"timestamp": 0, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 3]},
    {"timestamp": 250, "input_length": 600, "output_length": 3, "hash_ids": [1, 9]},
    {"timestamp": 250, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
    {"timestamp": 1000.5, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 3]},
    {"timestamp": 1200, "input_length": 30, "output_length": 1, "hash_ids": [40]},
]


@pytest.fixture
def mooncake_trace(tmp_path):
    src = _jsonl(tmp_path / "m.jsonl", MOONCAKE_ROWS)
    import_mooncake(src, tmp_path / "m.parquet")
    return tmp_path / "m.parquet"


def test_mooncake_round_trip_gives_back_the_ids(mooncake_trace, tmp_path):
    out = tmp_path / "back.jsonl"
    assert export_trace("mooncake", mooncake_trace, out).written == 5
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["timestamp"] for x in lines] == [0, 250, 250, 1000.5, 1200]
    assert [x["input_length"] for x in lines] == [r["input_length"] for r in MOONCAKE_ROWS]
    assert [x["output_length"] for x in lines] == [r["output_length"] for r in MOONCAKE_ROWS]
    # the same sharing as the source's ids, partial last blocks included
    assert [x["hash_ids"] for x in lines] == _canonical([r["hash_ids"] for r in MOONCAKE_ROWS])
    import_mooncake(out, tmp_path / "again.parquet")
    first, again = read_trace(mooncake_trace), read_trace(tmp_path / "again.parquet")
    for col in ("arrival_us", "input_tokens", "output_tokens", "max_tokens"):
        assert again.df[col].to_list() == first.df[col].to_list()
    assert _canonical(again.df["block_hashes"].to_list()) == _canonical(first.df["block_hashes"].to_list())
    assert prefix_hits(again.df["block_hashes"].to_list()) == prefix_hits(first.df["block_hashes"].to_list())


def test_mooncake_block_size_is_the_readers_too(mooncake_trace, tmp_path):
    out = tmp_path / "b16.jsonl"
    export_trace("mooncake", mooncake_trace, out, block_size=16)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [len(x["hash_ids"]) for x in lines] == [-(-r["input_length"] // 16) for r in MOONCAKE_ROWS]
    # request 2's 1024 tokens are request 0's first 1024: 64 shared ids of 16 tokens
    assert lines[2]["hash_ids"] == lines[0]["hash_ids"][:64]
    # the trap: 512-token ids read as 16-token blocks make prompts 32x too short
    ids512 = MOONCAKE_ROWS[0]["hash_ids"]
    assert len(ids512) * 16 < MOONCAKE_ROWS[0]["input_length"] / 20
    # read back at the block size it was written at: the same lengths and the same sharing
    import_mooncake(out, tmp_path / "again.parquet", hash_block=16)
    first, again = read_trace(mooncake_trace), read_trace(tmp_path / "again.parquet")
    for col in ("arrival_us", "input_tokens", "output_tokens"):
        assert again.df[col].to_list() == first.df[col].to_list()
    assert prefix_hits(again.df["block_hashes"].to_list()) == prefix_hits(first.df["block_hashes"].to_list())
    # at Mooncake's default (512 tokens an id) the file is refused, naming the flag
    from replay.cli.main import main

    assert main(["import", "mooncake", str(out), "-o", str(tmp_path / "x.parquet"), "--quiet"]) != 0
    assert main(["import", "mooncake", str(out), "-o", str(tmp_path / "y.parquet"), "--quiet", "--hash-block", "16"]) == 0
    assert read_trace(tmp_path / "y.parquet").df["input_tokens"].to_list() == first.df["input_tokens"].to_list()
    assert main(["import", "azure", str(out), "-o", str(tmp_path / "z.parquet"), "--hash-block", "16"]) == 2


def test_aiperf_round_trip_keeps_text_lengths_and_sharing(mooncake_trace, tmp_path, gpt2):
    out = tmp_path / "aiperf.jsonl"
    export_trace("aiperf", mooncake_trace, out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert all("text_input" in x and "messages" not in x for x in lines)  # completions rows
    assert [len(gpt2.encode(x["text_input"], add_special_tokens=False).ids) for x in lines] == [
        r["input_length"] for r in MOONCAKE_ROWS
    ]
    import_mooncake(out, tmp_path / "again.parquet")
    first, again = read_trace(mooncake_trace), read_trace(tmp_path / "again.parquet")
    assert again.df["input_tokens"].to_list() == first.df["input_tokens"].to_list()
    assert again.df["output_tokens"].to_list() == first.df["output_tokens"].to_list()
    assert again.df["arrival_us"].to_list() == first.df["arrival_us"].to_list()
    assert again.df["block_hashes"].to_list() == first.df["block_hashes"].to_list()  # the same text


LOG = [
    {
        "timestamp": "2024-05-10T12:00:00.000001Z",
        "request_id": "a",
        "session_id": "s",
        "body": {
            "model": "m",
            "messages": [{"role": "system", "content": "Be brief. " * 20}, {"role": "user", "content": "Name three rivers."}],
            "max_tokens": 30,
        },
        "response": {
            "object": "chat.completion",
            "choices": [{"message": {"role": "assistant", "content": "Nile, Amazon, Danube."}}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 32}},
        },
        "ttft_ms": 12.5,
        "latency_ms": 80.25,
    },
    {
        "timestamp": "2024-05-10T12:00:03.5Z",
        "request_id": "b",
        "session_id": "s",
        "body": {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief. " * 20},
                {"role": "user", "content": "Name three rivers."},
                {"role": "assistant", "content": "Nile, Amazon, Danube."},
                {"role": "user", "content": "And lakes?"},
            ],
        },
        "status": 500,
    },
    {
        "timestamp": "2024-05-10T12:00:04Z",
        "request_id": "c",
        "body": {"model": "m", "prompt": "Once upon a time", "max_tokens": 5},
    },
    {  # the Responses API: its body has 'input', the url says which API; usage in its own names
        "timestamp": "2024-05-10T12:00:05Z",
        "request_id": "d",
        "url": "/v1/responses",
        "body": {"model": "m", "instructions": "Be brief.", "input": "Name a sea.", "max_output_tokens": 9},
        "response": {
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "The Baltic."}]}],
            "usage": {"input_tokens": 12, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 0}},
        },
    },
    {"timestamp": "2024-05-10T12:00:06Z", "request_id": "e", "url": "/v1/embeddings", "body": {"model": "m", "input": "sea"}},
]


def test_openai_round_trip(tmp_path):
    path = import_openai(_jsonl(tmp_path / "log.jsonl", LOG), tmp_path / "t.parquet").path
    first = read_trace(path)
    out = tmp_path / "back.jsonl"
    export_trace("openai", path, out)
    again = read_trace(import_openai(out, tmp_path / "back.parquet").path)
    for col in (
        "request_id",
        "session_id",
        "parent_request_id",
        "turn",
        "api",
        "model",
        "arrival_us",
        "body",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "block_hashes",
        "cached_tokens",
        "status",
        "ttft_us",
        "e2e_us",
        "response",
    ):
        assert again.df[col].to_list() == first.df[col].to_list(), col
    assert again.meta.t0_unix_us == first.meta.t0_unix_us
    assert first.df["api"].to_list()[-2:] == ["responses", "embeddings"]
    assert first.df.row(3, named=True)["response"] == "The Baltic." and first.df.row(3, named=True)["output_tokens"] == 4


def test_openai_export_of_a_token_only_trace_writes_the_synthesized_text(mooncake_trace, tmp_path, gpt2):
    out = tmp_path / "log.jsonl"
    export_trace("openai", mooncake_trace, out)
    again = read_trace(import_openai(out, tmp_path / "back.parquet", block_size=512).path)
    first = read_trace(mooncake_trace)
    assert again.df["input_tokens"].to_list() == first.df["input_tokens"].to_list()
    assert again.df["block_hashes"].to_list() == first.df["block_hashes"].to_list()


def test_cli_export_and_its_errors(mooncake_trace, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["export", "mooncake", str(mooncake_trace), "-o", str(out), "--block-size", "64", "--quiet"]) == 0
    assert "5 requests" in capsys.readouterr().out
    assert len(json.loads(out.read_text().splitlines()[0])["hash_ids"]) == 18
    assert main(["export", "aiperf", str(mooncake_trace), "-o", str(out), "--block-size", "64"]) == 2
    assert "--block-size" in capsys.readouterr().err
    assert main(["export", "mooncake", str(tmp_path / "nope.parquet"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "error: nope.parquet: no such file\n"


def test_an_azure_import_round_trips_through_mooncake_and_aiperf(tmp_path):
    from capture.importers import import_azure

    src = tmp_path / "a.csv"
    src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.000001+00:00,700,5\n2024-05-10 00:00:00.5,20,4\n"
        "2024-05-10 00:00:02.123456,1500,3\n"
    )
    import_azure(src, tmp_path / "a.parquet")
    first = read_trace(tmp_path / "a.parquet")
    for fmt in ("mooncake", "aiperf"):
        export_trace(fmt, tmp_path / "a.parquet", tmp_path / f"{fmt}.jsonl")
        import_mooncake(tmp_path / f"{fmt}.jsonl", tmp_path / f"{fmt}.parquet", block_size=16)
        again = read_trace(tmp_path / f"{fmt}.parquet")
        for col in ("arrival_us", "input_tokens", "output_tokens"):
            assert again.df[col].to_list() == first.df[col].to_list(), (fmt, col)
        assert prefix_hits(again.df["block_hashes"].to_list()) == [0, 0, 0]  # nothing shared, still
    # aiperf carries the text itself: the same token ids, the same hashes
    assert read_trace(tmp_path / "aiperf.parquet").df["block_hashes"].to_list() == first.df["block_hashes"].to_list()
