"""An agent recorded by the proxy: the official ``openai`` SDK runs a tool-calling agent loop
(streamed parallel calls, a subagent spawned by one call whose answer comes back as that call's
result) through ``replay capture`` in front of the embedded engine; the capture is a Trace whose
``depends_on`` says what waited for what, found from the requests alone (no session header)."""

from __future__ import annotations

import openai

from replay.sim import SimConfig, start_sim
from replay.tokenizer import load_tokenizer
from replay.trace import read_trace
from tests.integration.capture_proxy import capture

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} in the repository",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    for name in ("search", "read_file", "task")
]


def ask(client, messages, tool_choice):
    """One streamed request; its text and its tool calls, parsed from the stream."""
    stream = client.chat.completions.create(
        model="sim", messages=messages, tools=TOOLS, tool_choice=tool_choice, stream=True, max_tokens=24
    )
    text, calls = "", {}
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                call = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
                call["arguments"] += d.function.arguments or ""
    return text, [calls[i] for i in sorted(calls)]


def test_an_sdk_agent_loop_through_the_proxy_is_a_trace_with_its_edges(tmp_path):
    out = tmp_path / "cap"
    config = SimConfig(profile="instant", time_scale=0, mean_parallel_tool_calls=3.0, max_parallel_tool_calls=4)
    with start_sim(config) as engine, capture(engine.url, out, redact=False) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
        messages = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Find why the build fails and fix it."},
        ]
        steps, spawned, asked = 0, None, []
        for _ in range(3):
            _, calls = ask(client, messages, "required")
            steps += 1
            assert calls
            asked.append([c["arguments"] for c in calls])
            results = {}
            if spawned is None:
                # the first call's arguments start a subagent; its answer is that call's result
                spawned = calls[0]
                sub_text, _ = ask(client, [{"role": "user", "content": spawned["arguments"]}], "none")
                results[spawned["id"]] = sub_text
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                        for c in calls
                    ],
                }
            )
            for c in calls:
                content = results.get(c["id"], f"{c['name']} found nothing new")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})
        final, _ = ask(client, messages, "none")
        assert final
        client.close()
        assert proxy.stop() == 0
    trace = read_trace(out)
    df = trace.df.sort("arrival_us")
    assert df.height == steps + 2  # the loop's steps, the subagent, the final answer
    rid = df["request_id"].to_list()
    deps = dict(zip(rid, df["depends_on"].to_list()))
    main = [r for r, m in zip(rid, df["body"].to_list()) if "coding agent" in m]
    sub = [r for r in rid if r not in main]
    assert len(main) == steps + 1 and len(sub) == 1
    # each step depends on the one before; the step after the spawn also joins the subagent
    assert deps[main[0]] == [] and deps[sub[0]] == [main[0]]
    assert deps[main[1]] == [main[0], sub[0]]
    assert all(deps[b] == [a] for a, b in zip(main[1:], main[2:]))
    rows = {r["request_id"]: r for r in df.iter_rows(named=True)}
    assert rows[sub[0]]["parent_session_id"] == rows[main[0]]["session_id"]
    assert len({rows[r]["session_id"] for r in main}) == 1
    assert all(rows[r]["wait_us"] is not None and rows[r]["wait_us"] >= 0 for r in rid[1:])
    # each answer's tool calls as the SDK parsed them: their argument tokens under the trace's
    # tokenizer, in order (the final answer and the subagent's were text)
    tok = load_tokenizer(trace.meta.tokenizer)
    sizes = [[len(tok.encode(a, add_special_tokens=False).ids) for a in step] for step in asked]
    assert [rows[r]["tool_calls"] for r in main] == [*sizes, []]
    assert rows[sub[0]]["tool_calls"] == [] and max(map(len, sizes)) > 1
