"""`replay import auto` finds the format from the input's head: each format's required fields,
a folder of agent sessions by its files, and a one-line error for anything else."""

from __future__ import annotations

import json

import pytest

from capture.importers.sniff import sniff
from replay.errors import TraceError
from tests.unit.capture.test_claude_code_import import sessions  # noqa: F401 (fixture)
from tests.unit.capture.test_codex_import import rollouts  # noqa: F401 (fixture)

HEADS = {
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n",
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n",
    "vidur": "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,120,30\n",
    "mooncake": {"timestamp": 0, "input_length": 40160, "output_length": 6, "hash_ids": [0, 1]},
    "bailian": {
        "chat_id": 7,
        "parent_chat_id": -1,
        "timestamp": 0.25,
        "input_length": 20,
        "output_length": 3,
        "type": "text",
        "turn": 1,
        "hash_ids": [0, 1],
    },
    "openai": {"timestamp": 1767000000.5, "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}},
    "litellm": {"id": "x", "call_type": "acompletion", "model": "m", "messages": [], "startTime": 1.0},
    "langfuse": {"id": "o1", "type": "GENERATION", "traceId": "t1", "startTime": "2026-01-01T00:00:00Z"},
    "otel": {"resourceSpans": [{"resource": {}, "scopeSpans": []}]},
    "codex": {"timestamp": "2026-11-30T09:00:00.000Z", "type": "session_meta", "payload": {"id": "s"}},
    "claude-code": {
        "type": "user",
        "uuid": "u1",
        "parentUuid": None,
        "sessionId": "s",
        "message": {"role": "user", "content": "hi"},
    },
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_each_format_is_found_from_its_head(tmp_path, name):
    head = HEADS[name]
    path = tmp_path / ("in.csv" if isinstance(head, str) else "in.jsonl")
    path.write_text(head if isinstance(head, str) else json.dumps(head) + "\n" + json.dumps(head) + "\n")
    assert sniff(path) == name


def test_folders_of_agent_sessions_and_protobuf_files(sessions, rollouts, tmp_path):  # noqa: F811
    assert sniff(sessions) == "claude-code"
    assert sniff(rollouts) == "codex"
    binary = tmp_path / "spans.pb"
    binary.write_bytes(b"\x00\x00\x01\x0a\xff\xfe\x80")
    assert sniff(binary) == "otel"
    # OTLP/JSON whose first line holds the spans' log records (one file of both signals)
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"resourceLogs": [{"scopeLogs": []}]}) + "\n" + json.dumps(HEADS["otel"]) + "\n")
    assert sniff(both) == "otel"
    # a small message whose bytes happen to be UTF-8: its length prefix tells
    binary.write_bytes(b"\x00\x00\x00\x04\x0a\x02\x0a\x00")
    assert sniff(binary) == "otel"


def test_what_is_no_format_is_one_line_naming_the_file(tmp_path):
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"when": 1, "tokens": 3}) + "\n")
    with pytest.raises(TraceError, match=r"odd.jsonl: line 1's fields \(tokens, when\) are none of the formats"):
        sniff(odd)
    csv = tmp_path / "odd.csv"
    csv.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match="odd.csv: a header of .* is none of the CSV formats"):
        sniff(csv)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="a folder of neither Codex rollouts"):
        sniff(tmp_path / "empty")


def test_the_cli_says_which_format_it_chose(rollouts, tmp_path):  # noqa: F811
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "replay.cli.main",
            "import",
            "auto",
            str(rollouts),
            "-o",
            str(tmp_path / "t.parquet"),
            "--no-redact",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "sessions: importing as codex (found by `auto`)" in done.stderr
