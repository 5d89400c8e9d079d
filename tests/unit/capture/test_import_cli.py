"""`replay import` of request logs: the redaction key first, --no-redact, and the raw-text
warning of `replay inspect`, `replay run` and `replay sweep`."""

from __future__ import annotations

import json

import pytest

from replay.cli import trace_cmds
from replay.cli.main import main
from replay.trace import read_trace

LINES = [
    {
        "timestamp": 1715299200.0,
        "request_id": "r1",
        "session_id": "s",
        "body": {"model": "m", "messages": [{"role": "user", "content": "My name is Ada Lovelace."}]},
        "response": {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "Hello Ada."}}]},
    },
    {
        "timestamp": 1715299201.0,
        "request_id": "r2",
        "session_id": "s",
        "body": {"model": "m", "messages": [{"role": "user", "content": "What is my name?"}]},
    },
]


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)


def test_no_redact_writes_raw_text_and_inspect_warns(jsonl, tmp_path, capsys, no_key):
    out = tmp_path / "live.parquet"
    assert main(["import", "openai", str(jsonl(LINES)), "-o", str(out), "--no-redact"]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "2 requests" in captured.out
    warning = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "raw" in warning[0] and str(out) in warning[0]
    trace = read_trace(out)
    assert trace.meta.redaction_policy == "none" and trace.meta.source_format == "openai-jsonl"
    assert "Ada Lovelace" in trace.df["body"][0] and trace.df["response"][0] == "Hello Ada."
    assert json.loads(trace.meta.import_report)["records_imported"] == 2

    assert main(["inspect", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"] == 2  # stdout stays JSON
    assert len(captured.err.strip().splitlines()) == 1 and "raw request text" in captured.err


def test_run_and_sweep_warn_about_raw_text(jsonl, tmp_path, capsys, no_key):
    out = tmp_path / "live.parquet"
    assert main(["import", "openai", str(jsonl(LINES)), "-o", str(out), "--no-redact"]) == 0
    capsys.readouterr()
    # a bad flag value stops each command after it read the trace, before any engine starts
    for argv in (["run", str(out), "--timeout", "soon"], ["sweep", str(out), "--rates", "1", "--timeout", "soon"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith("warning:") and "raw request text" in err[0]
        assert err[1].startswith("error: --timeout")


def test_a_synthetic_trace_gets_no_warning(tmp_path, capsys, make_trace):
    path = make_trace().write(tmp_path / "t.parquet")
    assert main(["inspect", str(path), "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_missing_key_fails_fast_with_one_line(jsonl, tmp_path, capsys, no_key):
    out = tmp_path / "live.parquet"
    for path in (jsonl(LINES), tmp_path / "does-not-exist.jsonl"):  # the key is checked first
        assert main(["import", "openai", str(path), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert err.startswith("error: ") and "REPLAY_REDACT_KEY" in err
    assert not out.exists()
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    assert main(["import", "litellm", str(jsonl(LINES)), "-o", str(out), "--key-file", str(empty)]) == 2
    assert "--key-file" in capsys.readouterr().err
    assert not out.exists()


def test_flags_that_do_not_apply(jsonl, tmp_path, capsys, no_key):
    out = str(tmp_path / "x.parquet")
    log = str(jsonl(LINES))
    for argv, flag in [
        (["import", "azure", log, "-o", out, "--no-redact"], "--no-redact"),
        (["import", "mooncake", log, "-o", out, "--rate", "2"], "--rate"),
        (["import", "openai", log, "-o", out, "--no-redact", "--model", "m"], "--model"),
        (["import", "openai", log, "-o", out, "--no-redact", "--key-file", log], "--key-file"),
        (["import", "openai", log, "-o", out, "--no-redact", "--rate", "2"], "--rate"),
        (["import", "langfuse", log, "-o", out, "--no-redact", "--rate", "2"], "--rate"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag}") or f" {flag}" in err, (argv, err)
        assert len(err.strip().splitlines()) == 1


def test_batch_import_from_the_cli(jsonl, tmp_path, capsys, no_key):
    batch = jsonl(
        [
            {
                "custom_id": f"q{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": f"task {i}"}]},
            }
            for i in range(5)
        ]
    )
    out = tmp_path / "b.parquet"
    assert main(["import", "openai", str(batch), "-o", str(out), "--no-redact"]) == 2
    err = capsys.readouterr().err
    assert "--rate" in err and len(err.strip().splitlines()) == 1
    assert (
        main(["import", "openai", str(batch), "-o", str(out), "--no-redact", "--rate", "5", "--seed", "1", "--block-size", "4"])
        == 0
    )
    trace = read_trace(out)
    assert trace.meta.source_format == "openai-batch" and trace.meta.block_size_tokens == 4
    assert trace.df["request_id"].to_list() == [f"q{i}" for i in range(5)]


def test_cli_formats_are_the_library_formats():
    from capture.importers import LOG_FORMATS

    from capture.importers import TOKEN_FORMATS

    assert trace_cmds.LOG_FORMATS == LOG_FORMATS
    assert set(trace_cmds.SYNTHETIC_FORMATS) == set(TOKEN_FORMATS)


def test_public_traces_still_import(tmp_path, capsys):
    csv = tmp_path / "a.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:01,40,3\n2024-05-10 00:00:02,20,4\n")
    out = tmp_path / "azure.parquet"
    assert main(["import", "azure", str(csv), "-o", str(out), "--block-size", "8", "--seed", "2"]) == 0
    trace = read_trace(out)
    assert trace.meta.block_size_tokens == 8 and trace.meta.redaction_policy == "synthetic"
    assert trace.df["block_hashes"].list.len().to_list() == [5, 2]
    assert capsys.readouterr().err == ""
    assert main(["import", "mooncake", str(csv), "-o", str(out), "--block-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err == "error: a.csv: line 1: not valid JSON\n"  # one line naming file and line
    assert read_trace(out).meta.block_size_tokens == 8  # the failed import left the old file
