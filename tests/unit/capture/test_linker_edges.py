"""What waits for what, found from the requests alone (capture/importers/linker.py): an agent's
steps chain, parallel requests continuing one answer are siblings, a subagent's first request
depends on the call that spawned it, and a step carrying subagents' answers joins them."""

from __future__ import annotations

import json

import pytest

from capture.importers import import_log
from capture.importers.linker import MIN_ANSWER_CHARS, SessionLinker
from replay.agentic import AgentConfig, answer_messages, generate_agentic
from replay.trace import read_trace

SYSTEM = {"role": "system", "content": "You are a coding agent with tools."}
TASK = {"role": "user", "content": "Fix the failing test in the parser module."}


def call(cid: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "task", "arguments": json.dumps(args)}}


def test_chain_siblings_spawn_and_join_with_their_waits():
    linker = SessionLinker()
    # step 0 answers with two task calls (their arguments recorded with the answer)
    spawn = [call("c1", {"input": "Find where the parser reads numbers."}), call("c2", {"input": "List the parser's tests."})]
    step0 = linker.add(
        "s0",
        "chat",
        {"messages": [SYSTEM, TASK]},
        "I will look at the parser.",
        calls=[c["function"]["arguments"] for c in spawn],
        arrival_us=0,
        end_us=1_000,
    )
    assert step0.depends_on == [] and step0.session_id == "s0"
    # two subagents start from the calls' arguments: each depends on s0, spawned by its session
    answers = {"a": "Numbers are read in parse_number at line 88.", "b": "The parser has 41 tests in test_parser.py."}
    first = {}
    for who, (c, end) in zip("ab", ((spawn[0], 5_000), (spawn[1], 7_000))):
        text = json.loads(c["function"]["arguments"])["input"]
        first[who] = linker.add(
            f"{who}0", "chat", {"messages": [{"role": "user", "content": text}]}, answers[who], arrival_us=1_100, end_us=end
        )
        assert first[who].depends_on == ["s0"] and first[who].wait_us == 100
        assert first[who].parent_session_id == "s0" and first[who].session_id == f"{who}0"
    # step 1 carries both answers as tool results: it continues s0 and joins both subagents
    history = [
        SYSTEM,
        TASK,
        {"role": "assistant", "content": "I will look at the parser.", "tool_calls": spawn},
        {"role": "tool", "tool_call_id": "c1", "content": answers["a"]},
        {"role": "tool", "tool_call_id": "c2", "content": answers["b"]},
    ]
    step1 = linker.add("s1", "chat", {"messages": history}, "Found it.", arrival_us=7_300, end_us=9_000)
    assert step1.session_id == "s0" and step1.turn == 1 and step1.parent_request_id == "s0"
    assert step1.depends_on == ["s0", "a0", "b0"] and step1.wait_us == 300
    # two parallel requests continuing step 1's answer are siblings: each depends on s1 alone
    after = [*history, {"role": "assistant", "content": "Found it."}, {"role": "user", "content": "Now fix it."}]
    for rid in ("x", "y"):
        link = linker.add(rid, "chat", {"messages": after}, None, arrival_us=9_500)
        assert link.depends_on == ["s1"] and link.wait_us == 500
    assert linker.joins == 2 and linker.subagents == 2


def test_an_answer_recorded_without_its_calls_still_continues_and_short_texts_prove_nothing():
    linker = SessionLinker()
    tool_call = {"id": "t", "type": "function", "function": {"name": "grep", "arguments": '{"input": "parse"}'}}
    linker.add("p", "chat", {"messages": [SYSTEM, TASK]}, "Searching.")  # the log kept the text only
    nxt = [SYSTEM, TASK, {"role": "assistant", "content": "Searching.", "tool_calls": [tool_call]}]
    nxt.append({"role": "tool", "tool_call_id": "t", "content": "ok"})
    assert linker.add("q", "chat", {"messages": nxt}, None).depends_on == ["p"]
    # a tool result as short as "ok" is not another request's answer, however many said "ok"
    linker.add("other", "chat", {"messages": [{"role": "user", "content": "Say ok."}]}, "ok")
    assert len("ok") < MIN_ANSWER_CHARS
    nxt2 = [*nxt, {"role": "assistant", "content": "x"}, {"role": "tool", "tool_call_id": "t", "content": "ok"}]
    assert "other" not in linker.add("r", "chat", {"messages": nxt2}, None).depends_on


@pytest.mark.parametrize("seed", [0, 1])
def test_a_logged_agent_imports_with_every_edge(tmp_path, seed):
    """An agent trace written as a request log (no session ids) imports with the generator's
    edges, exactly (benchmarks/edge_recovery.py measures it over more seeds)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from edge_recovery import edges, write_log

    truth = generate_agentic(AgentConfig(sessions=4, steps_mean=8, max_context_tokens=30_000, subagent_p=0.3, seed=seed))
    write_log(truth, tmp_path / "log.jsonl")
    import_log("openai", tmp_path / "log.jsonl", tmp_path / "t.parquet")
    got = read_trace(tmp_path / "t.parquet").df
    assert edges(got) == edges(truth.df)
    wait = dict(zip(truth.df["request_id"], truth.df["wait_us"]))
    assert all(w is None or abs(w - wait[r]) <= 1 for r, w in zip(got["request_id"], got["wait_us"]))
    subs = truth.df.filter(truth.df["parent_session_id"].is_not_null() & (truth.df["turn"] == 0))
    assert got.filter(got["request_id"].is_in(subs["request_id"].implode()))["parent_session_id"].null_count() == 0
    assert answer_messages(truth)  # every request has its answer
