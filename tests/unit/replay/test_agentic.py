"""The agent workload generator (``replay generate --profile agent``): a schema-3 DAG with real
agent histories whose token counts are exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replay import dag
from replay.agentic import ROOT_TOOLS, AgentConfig, generate_agentic
from replay.errors import ConfigError
from replay.prompts import count_tokens

SMALL = AgentConfig(sessions=3, steps_mean=10, max_context_tokens=40_000, subagent_p=0.3, seed=1)


@pytest.fixture(scope="module")
def trace():
    return generate_agentic(SMALL)


def _texts(body: dict) -> list[str]:
    """The texts a request's input_tokens count, in prompt order."""
    out = [t["function"]["description"] for t in body["tools"]]
    for m in body["messages"]:
        if m.get("content"):
            out.append(m["content"])
        for call in m.get("tool_calls") or []:
            out.append(json.loads(call["function"]["arguments"])["input"])
    return out


def test_the_graph_is_an_agents(trace):
    df = trace.df
    shape = dag.shape(df)
    assert shape is not None
    assert shape["joins"] >= 1, "a subagent joins back into its parent's next step"
    assert shape["fan_out"]["max"] >= 2, "parallel subagents leave together"
    assert shape["subagents_per_root_session"]["sessions_with_subagents"] >= 1
    subs = df.filter(df["parent_session_id"].is_not_null())
    assert set(subs["agent"].unique()) == {"explorer"}
    # every request but a root session's first waits for something; the wait is recorded
    roots = df.filter(df["depends_on"].list.len() == 0)
    assert roots["session_id"].n_unique() == roots.height == SMALL.sessions
    assert df.filter(df["depends_on"].list.len() > 0)["wait_us"].null_count() == 0
    # arrivals follow the recorded durations: a request arrives its wait after its last dependency ended
    end = dict(zip(df["request_id"], (df["arrival_us"] + df["e2e_us"]).to_list()))
    for rid, deps, arrival, wait in df.select("request_id", "depends_on", "arrival_us", "wait_us").iter_rows():
        if deps:
            assert abs(arrival - (max(end[d] for d in deps) + wait)) <= 2, rid


def test_bodies_are_valid_agent_histories_with_exact_token_counts(trace):
    df = trace.df
    for row in df.select("body", "input_tokens", "output_tokens", "agent").iter_rows(named=True):
        body = json.loads(row["body"])
        issued: set[str] = set()
        for m in body["messages"]:
            if m["role"] == "assistant":
                assert m.get("content") or m.get("tool_calls")
                issued |= {c["id"] for c in m.get("tool_calls") or []}
                for c in m.get("tool_calls") or []:
                    assert c["function"]["name"] in {t["function"]["name"] for t in body["tools"]}
            if m["role"] == "tool":
                assert m["tool_call_id"] in issued
        assert body["max_tokens"] == row["output_tokens"]
        names = [t["function"]["name"] for t in body["tools"]]
        assert names == list(ROOT_TOOLS) if row["agent"] == "coder" else "task" not in names
    # token counts: re-encode a spread of requests' texts
    for i in np.linspace(0, df.height - 1, 5).astype(int).tolist():
        body = json.loads(df["body"][i])
        assert count_tokens("".join(_texts(body))) == df["input_tokens"][i]


def test_contexts_grow_to_the_cap_and_the_prefix_is_shared(trace):
    df = trace.df
    assert df["input_tokens"].max() > 0.6 * SMALL.max_context_tokens
    assert (df["input_tokens"] + df["output_tokens"]).max() <= SMALL.max_context_tokens
    # the coding agent's tools and system prompt: ~13k tokens every root session starts with
    coder = df.filter(df["agent"] == "coder")
    first = coder.filter(coder["turn"] == 0)["block_hashes"].to_list()
    shared = next(k for k in range(len(first[0])) if len({h[k] for h in first}) > 1)
    prefix = len(ROOT_TOOLS) * SMALL.tool_tokens + SMALL.system_tokens
    assert shared == prefix // SMALL.block_size


def test_same_seed_same_trace_and_bad_config_is_refused():
    a = generate_agentic(AgentConfig(sessions=1, steps_mean=3, max_context_tokens=30_000, seed=4))
    b = generate_agentic(AgentConfig(sessions=1, steps_mean=3, max_context_tokens=30_000, seed=4))
    assert a.df.equals(b.df)
    with pytest.raises(ConfigError, match="--max-context: 10000 tokens does not hold"):
        AgentConfig(max_context_tokens=10_000)
    with pytest.raises(ConfigError, match="subagent_p must be in"):
        AgentConfig(subagent_p=2)
