"""The chat template an engine adds to each prompt is taken out of its prompt counts before input
lengths are compared, and nothing else is: a few tokens a prompt and a few a message, never a
share of the prompt (a replay that sent longer prompts must not pass as a larger template)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.sides import message_counts, template_overhead
from replay.trace import Trace, TraceMeta
from tests.unit.fidelity.test_compare import live_trace, stage_of


def test_a_template_of_tokens_a_prompt_and_a_message_is_recovered():
    rng = np.random.default_rng(3)
    recorded = rng.integers(20, 2000, 500).astype(float)
    messages = rng.integers(1, 12, 500).astype(float)
    engine = recorded + 8 + 5 * messages
    per_request, words = template_overhead(engine, recorded, messages)
    assert np.allclose(per_request, 8 + 5 * messages)
    assert words == "+8 tokens a prompt and +5.0 a message"
    # without message counts, the part a prompt is what is taken, not a median over messages
    per_request, words = template_overhead(recorded + 11, recorded)
    assert np.all(per_request == 11) and words == "+11 tokens a prompt"


def test_prompts_made_longer_are_not_taken_for_a_template():
    rng = np.random.default_rng(4)
    recorded = rng.integers(20, 2000, 500).astype(float)
    messages = rng.integers(1, 12, 500).astype(float)
    per_request, _ = template_overhead(np.round(recorded * 1.15) + 8 + 5 * messages, recorded, messages)
    assert np.allclose(per_request, 8 + 5 * messages, atol=1)  # the 15% stays in the lengths
    # a count that grows faster than any template (another tokenizer) is no template at all
    assert template_overhead(recorded + 40 * messages, recorded, messages) is None
    assert template_overhead(recorded - 30, recorded) is None


def with_chat_bodies(live: Trace) -> Trace:
    """``live`` with a body per row of (turn + 1) user/assistant messages."""
    turns = live.df["turn"].fill_null(0).to_numpy()
    bodies = [json.dumps({"messages": [{"role": "user", "content": "x"}] * (int(t) * 2 + 1)}) for t in turns]
    return Trace(live.df.with_columns(body=pl.Series(bodies)), live.meta)


def test_a_stage_takes_out_a_template_that_grows_with_the_messages_and_still_catches_longer_prompts():
    live = with_chat_bodies(live_trace(2000, seed=11))
    counts = message_counts(live)
    assert counts.height == live.df.height and counts["_messages"].min() >= 1
    per_message = counts["_messages"].to_numpy() * 6
    faithful = stage_of(live).with_columns(prompt_tokens=pl.col("prompt_tokens") + per_message)
    result = compare_stage(live, faithful)
    assert any("+9 tokens a prompt and +6.0 a message" in d for d in result.verdict.diagnosis), result.verdict.diagnosis
    lengths = {m.name: m for m in result.verdict.metrics if m.name.startswith("input_tokens.")}
    assert lengths["input_tokens.ks"].distance == pytest.approx(0, abs=0.01)
    longer = stage_of(live, prompt_scale=1.3).with_columns(prompt_tokens=pl.col("prompt_tokens") + per_message)
    failed = {m.name for m in compare_stage(live, longer).verdict.failed}
    # request by request, and in distribution
    assert {"input_tokens.paired", "input_tokens.per_request"} <= failed, failed
    assert failed & {"input_tokens.ks", "input_tokens.wasserstein", "input_tokens.p50", "input_tokens.p90"}, failed


def test_tool_calls_and_tool_definitions_are_part_of_the_template():
    # an agent's prompts: the same 16 tools in every request (part of a prompt's constant), a
    # history that grows by messages and tool calls (the embedded engine: +17.7 a message, +29.8
    # a call, measured on a dag replay of replay.agentic's sessions)
    rng = np.random.default_rng(5)
    recorded = rng.integers(13_000, 40_000, 300).astype(float)
    calls = rng.integers(0, 12, 300).astype(float)
    messages = 2 + 2 * calls + rng.integers(0, 2, 300)
    tools = np.full(300, 16.0)
    engine = recorded + 40 * 16 + 18 * messages + 30 * calls
    per_request, words = template_overhead(engine, recorded, messages, calls, tools)
    assert np.allclose(per_request, 640 + 18 * messages + 30 * calls)
    assert words == "+640 tokens a prompt and +18.0 a message and +30.0 a tool call"
    # without the calls counted, the growth is not a template of messages alone
    assert template_overhead(engine, recorded, messages) is None
    # tools that vary from request to request (a subagent has fewer) are fitted as their own term
    tools = rng.choice([5.0, 16.0], 300)
    engine = recorded + 9 + 40 * tools + 18 * messages + 30 * calls
    per_request, words = template_overhead(engine, recorded, messages, calls, tools)
    assert np.allclose(per_request, 9 + 40 * tools + 18 * messages + 30 * calls)
    assert "+40.0 a tool definition" in words
    # a call that adds more than a template could (another tokenizer for the arguments) is none
    assert template_overhead(recorded + 9 + 18 * messages + 300 * calls, recorded, messages, calls, tools) is None


def test_message_counts_count_tool_calls_and_definitions_in_both_apis():
    tools = [{"type": "function", "function": {"name": f"t{k}", "parameters": {"type": "object"}}} for k in range(3)]
    call = {"id": "c1", "type": "function", "function": {"name": "t0", "arguments": '{"arguments": 1}'}}
    chat = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "c2"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "tool", "tool_call_id": "c2", "content": "2"},
        ],
        "tools": tools,
    }
    responses = {
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "t0", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
        ],
        "tools": [{"type": "function", "name": "t0", "parameters": {"type": "object"}}],
    }
    df = pl.DataFrame(
        {
            "request_id": ["chat", "responses", "plain", "completion"],
            "api": ["chat", "responses", "chat", "completions"],
            "arrival_us": [0, 1, 2, 3],
            "body": [
                json.dumps(chat),
                json.dumps(responses),
                json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                '{"prompt": "x"}',
            ],
            "input_tokens": [10, 10, 10, 10],
        }
    )
    got = {
        r["request_id"]: (r["_messages"], r["_calls"], r["_tools"])
        for r in message_counts(Trace(df, TraceMeta())).iter_rows(named=True)
    }
    assert got == {"chat": (4, 2, 3), "responses": (4, 1, 1), "plain": (1, 0, 0), "completion": (0, 0, 0)}
