"""Codex CLI rollouts (one JSON Lines file per session, a subagent's in a file of its own): one
request per model call (closed by a ``token_count`` event), its history from the response items
before it, tokens from ``last_token_usage``, and what waits for what. The sample is written item
by item from the rollout line shape in openai/codex ``codex-rs/protocol`` (``RolloutLine``,
``RolloutItem``, ``ResponseItem``, ``TokenUsageInfo``), as capture/importers/codex.py states it."""

from __future__ import annotations

import json

import pytest

from capture.importers import import_log
from replay.errors import TraceError
from replay.trace import read_trace

MAIN = "019a6d2e-0c11-7a40-9d2b-5e0f8a1c3b77"
SUB = "019a6d2e-41f0-7c12-8e3a-2b6d9c0e1f55"
TASK = "List the modules that import config.py and say which ones read the timeout setting."
FOUND = "Three modules import config.py; only net/client.py reads the timeout setting."


def line(t, kind, payload):
    return {"timestamp": f"2026-11-30T09:00:{t}Z", "type": kind, "payload": payload}


def message(role, text):
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def tokens(inp, cached, out):
    last = {
        "input_tokens": inp,
        "cached_input_tokens": cached,
        "output_tokens": out,
        "reasoning_output_tokens": 0,
        "total_tokens": inp + out,
    }
    return {
        "type": "token_count",
        "info": {"total_token_usage": last, "last_token_usage": last, "model_context_window": 272000},
        "rate_limits": None,
    }


def fn_call(cid, name, args):
    return {"type": "function_call", "name": name, "arguments": json.dumps(args), "call_id": cid}


def output(cid, text):
    return {"type": "function_call_output", "call_id": cid, "output": text}


@pytest.fixture
def rollouts(tmp_path):
    meta = {
        "id": MAIN,
        "timestamp": "2026-11-30T09:00:00.000Z",
        "cwd": "/home/dev/proj",
        "originator": "codex_cli",
        "cli_version": "0.128.0",
        "source": "cli",
    }
    main = [
        line("00.000", "session_meta", meta),
        line("00.010", "turn_context", {"model": "gpt-5-codex", "cwd": "/home/dev/proj", "approval_policy": "on-request"}),
        line("00.020", "response_item", message("developer", "You are Codex, a coding agent working in the user's repository.")),
        line("00.030", "response_item", message("user", "Why does the client time out after 5 s?")),
        line("00.031", "event_msg", {"type": "user_message", "message": "Why does the client time out after 5 s?"}),
        line("00.032", "event_msg", {"type": "token_count", "info": None, "rate_limits": None}),
        line("01.500", "response_item", {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}),
        line("02.000", "response_item", message("assistant", "Let me read the client and its config.")),
        line("02.100", "response_item", fn_call("call_a", "shell", {"command": ["cat", "net/client.py"]})),
        line("02.150", "response_item", fn_call("call_b", "shell", {"command": ["cat", "config.py"]})),
        line("02.200", "event_msg", tokens(9_000, 8_000, 120)),
        line("02.600", "response_item", output("call_a", "TIMEOUT = settings.timeout or 5  # seconds, from config")),
        line("02.700", "response_item", output("call_b", "timeout = None  # read from the environment when unset")),
        line("04.000", "response_item", fn_call("call_c", "spawn_agent", {"message": TASK})),
        line("04.100", "event_msg", tokens(9_400, 9_000, 60)),
        line("09.000", "response_item", output("call_c", FOUND)),
        line(
            "10.500",
            "response_item",
            message("assistant", "The default of 5 s in net/client.py applies: config.py leaves it unset."),
        ),
        line("10.600", "event_msg", tokens(9_700, 9_300, 80)),
    ]
    sub_meta = {**meta, "id": SUB, "source": {"subagent": {"thread_spawn": {"parent_thread_id": MAIN, "depth": 1}}}}
    sub = [
        line("04.200", "session_meta", sub_meta),
        line("04.210", "turn_context", {"model": "gpt-5-codex"}),
        line("04.300", "response_item", message("user", TASK)),
        line("08.800", "response_item", message("assistant", FOUND)),
        line("08.900", "event_msg", tokens(3_000, 0, 40)),
    ]
    folder = tmp_path / "sessions" / "2026" / "11" / "30"
    folder.mkdir(parents=True)
    (folder / f"rollout-2026-11-30T09-00-00-{MAIN}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in main))
    (folder / f"rollout-2026-11-30T09-00-04-{SUB}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in sub))
    return tmp_path / "sessions"


def test_a_rollout_folder_is_one_request_per_model_call_with_its_graph(rollouts, tmp_path):
    out = tmp_path / "codex.parquet"
    import_log("codex", rollouts, out)
    trace = read_trace(out)
    rows = {r["request_id"]: r for r in trace.df.iter_rows(named=True)}
    first, second, third, sub = f"{MAIN}/call-1", f"{MAIN}/call-2", f"{MAIN}/call-3", f"{SUB}/call-1"
    assert list(trace.df["request_id"]) == [first, second, sub, third]
    assert trace.meta.source_format == "codex"
    # sent after the last input item; ended at its token count
    assert rows[second]["arrival_us"] - rows[first]["arrival_us"] == 2_670_000
    assert rows[first]["e2e_us"] == 2_170_000
    assert rows[first]["cached_tokens"] == 8_000 and rows[first]["output_tokens"] == 120
    assert rows[sub]["output_tokens"] == 40 and rows[third]["cached_tokens"] == 9_300
    body = json.loads(rows[second]["body"])
    assert body["model"] == "gpt-5-codex"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    answer = body["messages"][2]
    assert answer["content"] == "Let me read the client and its config."
    assert [c["id"] for c in answer["tool_calls"]] == ["call_a", "call_b"]
    # the graph: the tools' wait, the subagent spawned by spawn_agent and joined back
    assert rows[second]["depends_on"] == [first] and rows[second]["wait_us"] == 500_000
    assert rows[sub]["session_id"] == SUB and rows[sub]["parent_session_id"] == MAIN and rows[sub]["depends_on"] == [second]
    assert sorted(rows[third]["depends_on"]) == sorted([second, sub])
    report = json.loads(trace.meta.import_report)["codex"]
    assert report["files"] == 2 and report["recorded_prompt_tokens"] == 9_000 + 9_400 + 9_700 + 3_000
    assert report["not_requests"]["token count without an answer"] == 1


def test_a_bad_line_names_the_file_and_line(rollouts, tmp_path):
    path = next(rollouts.rglob(f"rollout-*{MAIN}.jsonl"))
    lines = path.read_text().splitlines()
    lines[3] = json.dumps({"type": "response_item", "payload": {}})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"line 4: is missing or not a string \(field 'timestamp'\)"):
        import_log("codex", path, tmp_path / "x.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no Codex rollout files"):
        import_log("codex", tmp_path / "empty", tmp_path / "y.parquet")
