"""Claude Code session logs (one JSON Lines file per session, subagents in files of their own):
one request per model call, its history from the ``parentUuid`` chain, tokens from the recorded
usage, and what waits for what (a step after its tools, a subagent spawned by a ``Task`` call and
joined back). The sample is written field by field from the entry shape Claude Code writes
(capture/importers/claude_code.py's docstring, /work/shared/notes/agentic.md)."""

from __future__ import annotations

import json

import pytest

from capture.importers import import_log
from replay.errors import TraceError
from replay.trace import read_trace

SESSION = "0b7e4c1e-5f7d-4d0a-9a55-3c1f2e8d9a10"
TASK = "Find every caller of parse() in the repository and report whether any relies on int results."
FOUND = "No caller relies on int results; two callers pass the value to float() already."


def entry(kind, uuid, parent, t, content, **extra):
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"id": extra.pop("msg"), "model": "claude-sonnet-4-5", "type": "message", "usage": extra.pop("usage", None)}
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "timestamp": f"2026-11-30T10:00:{t}Z",
        "isSidechain": extra.pop("side", False),
        "cwd": "/home/dev/proj",
        "version": "2.0.14",
        "message": message,
        **extra,
    }


def usage(inp, read, create, out):
    return {"input_tokens": inp, "cache_read_input_tokens": read, "cache_creation_input_tokens": create, "output_tokens": out}


def call(cid, name, args):
    return [{"type": "tool_use", "id": cid, "name": name, "input": args}]


def result(cid, text):
    return [{"type": "tool_result", "tool_use_id": cid, "content": text}]


@pytest.fixture
def sessions(tmp_path):
    main = [
        {"type": "summary", "summary": "Fix the parser test", "leafUuid": "u4"},
        entry("user", "u1", None, "00.000", "Fix the failing test in parser.py please"),
        entry(
            "assistant",
            "a1a",
            "u1",
            "02.000",
            [{"type": "thinking", "thinking": "look first"}],
            msg="msg_1",
            requestId="req_1",
            usage=usage(20, 15_000, 500, 60),
        ),
        entry(
            "assistant",
            "a1b",
            "a1a",
            "02.500",
            [{"type": "text", "text": "I'll look at the parser and its test first."}],
            msg="msg_1",
            requestId="req_1",
            usage=usage(20, 15_000, 500, 60),
        ),
        entry(
            "assistant",
            "a1c",
            "a1b",
            "02.800",
            call("toolu_1", "Read", {"file_path": "parser.py"}),
            msg="msg_1",
            requestId="req_1",
            usage=usage(20, 15_000, 500, 60),
        ),
        entry(
            "assistant",
            "a1d",
            "a1c",
            "03.000",
            call("toolu_2", "Read", {"file_path": "test_parser.py"}),
            msg="msg_1",
            requestId="req_1",
            usage=usage(20, 15_000, 500, 60),
        ),
        entry("user", "u2", "a1d", "03.200", result("toolu_1", "def parse(x):\n    return int(x)  # the whole parser")),
        entry("user", "u3", "u2", "03.400", result("toolu_2", "def test_parse():\n    assert parse('1.5') == 1.5")),
        entry(
            "assistant",
            "a2a",
            "u3",
            "05.000",
            [{"type": "text", "text": "The test wants floats; a subagent checks the callers."}],
            msg="msg_2",
            requestId="req_2",
            usage=usage(300, 15_500, 200, 90),
        ),
        entry(
            "assistant",
            "a2b",
            "a2a",
            "05.000",
            call("toolu_3", "Task", {"description": "callers", "prompt": TASK}),
            msg="msg_2",
            requestId="req_2",
            usage=usage(300, 15_500, 200, 90),
        ),
        entry("user", "u4", "a2b", "07.200", result("toolu_3", [{"type": "text", "text": FOUND}])),
        entry(
            "assistant",
            "a3",
            "u4",
            "09.000",
            [{"type": "text", "text": "parse() returns a float now; the test passes."}],
            msg="msg_3",
            requestId="req_3",
            usage=usage(120, 16_000, 100, 40),
        ),
        # Claude Code's own note of an interruption: not a model call
        entry(
            "assistant",
            "a4",
            "a3",
            "09.500",
            [{"type": "text", "text": "[Request interrupted by user]"}],
            msg="msg_4",
            **{"isApiErrorMessage": False},
        ),
    ]
    main[-1]["message"]["model"] = "<synthetic>"
    side = [
        entry("user", "s1", None, "05.100", TASK, side=True, agentId="a9f3"),
        entry(
            "assistant",
            "s2",
            "s1",
            "07.000",
            [{"type": "text", "text": FOUND}],
            msg="msg_s1",
            requestId="req_s1",
            side=True,
            agentId="a9f3",
            usage=usage(900, 0, 0, 30),
        ),
    ]
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / f"{SESSION}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in main))
    (folder / "agent-a9f3.jsonl").write_text("".join(json.dumps(e) + "\n" for e in side))
    return folder


def test_a_session_folder_is_one_request_per_model_call_with_its_graph(sessions, tmp_path):
    out = tmp_path / "cc.parquet"
    import_log("claude-code", sessions, out)
    trace = read_trace(out)
    df = trace.df
    rows = {r["request_id"]: r for r in df.iter_rows(named=True)}
    assert list(df["request_id"]) == ["req_1", "req_2", "req_s1", "req_3"]  # in arrival order
    assert trace.meta.source_format == "claude-code"
    # arrival: the entry each call follows; latency to the answer's last entry
    assert rows["req_2"]["arrival_us"] - rows["req_1"]["arrival_us"] == 3_400_000
    assert rows["req_1"]["e2e_us"] == 3_000_000 and rows["req_2"]["e2e_us"] == 1_600_000
    # tokens from the usage: cached = cache read, output = output
    assert rows["req_1"]["cached_tokens"] == 15_000 and rows["req_1"]["output_tokens"] == 60
    assert rows["req_s1"]["output_tokens"] == 30 and rows["req_3"]["cached_tokens"] == 16_000
    # the history: text and both calls in one assistant message, the results as tool messages
    body = json.loads(rows["req_2"]["body"])
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    answer = body["messages"][1]
    assert answer["content"] == "I'll look at the parser and its test first."
    assert [c["id"] for c in answer["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert json.loads(answer["tool_calls"][0]["function"]["arguments"]) == {"file_path": "parser.py"}
    assert [m["tool_call_id"] for m in body["messages"][2:]] == ["toolu_1", "toolu_2"]
    # sessions: the subagent's its own, spawned by the Task call and joined back
    assert rows["req_s1"]["session_id"] == f"{SESSION}/a9f3" and rows["req_1"]["session_id"] == SESSION
    assert rows["req_s1"]["parent_session_id"] == SESSION
    assert rows["req_2"]["depends_on"] == ["req_1"]
    assert rows["req_2"]["wait_us"] == 400_000  # the tools' time: answer ended 10:00:03.0, sent at 03.4
    assert rows["req_s1"]["depends_on"] == ["req_2"]
    assert sorted(rows["req_3"]["depends_on"]) == ["req_2", "req_s1"]
    report = json.loads(trace.meta.import_report)["claude_code"]
    assert report["files"] == 2 and report["not_requests"] == {"summary": 1, "synthetic answer": 1}
    assert report["recorded_prompt_tokens"] == 15_520 + 16_000 + 900 + 16_220


def test_a_bad_line_names_the_file_line_and_field_and_skip_bad_counts_it(sessions, tmp_path):
    path = sessions / f"{SESSION}.jsonl"
    lines = path.read_text().splitlines()
    broken = json.loads(lines[2])
    del broken["timestamp"]
    path.write_text("\n".join([lines[0], lines[1], json.dumps(broken), *lines[3:], "{not json"]) + "\n")
    with pytest.raises(TraceError, match=rf"{SESSION}.jsonl: line 3: is missing or not a string \(field 'timestamp'\)"):
        import_log("claude-code", path, tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    import_log("claude-code", sessions, tmp_path / "y.parquet", skip_bad=True)
    report = json.loads(read_trace(tmp_path / "y.parquet").meta.import_report)["claude_code"]
    assert report["skipped_lines"] == 2 and "line 3" in report["first_skipped"][0]


def test_the_cli_imports_a_session_folder(sessions, tmp_path, monkeypatch):
    from replay.cli.main import main

    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    assert main(["import", "claude-code", str(sessions), "-o", str(tmp_path / "raw.parquet"), "--no-redact", "--quiet"]) == 0
    assert read_trace(tmp_path / "raw.parquet").meta.redaction_policy == "none"
