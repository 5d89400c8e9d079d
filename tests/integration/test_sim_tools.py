"""The embedded engine speaks tools, driven by the official ``openai`` SDK.

A tool-calling agent loop runs against the engine in both APIs (chat completions streamed, the
Responses API whole and streamed): the engine answers with parallel tool calls whose arguments
are valid for the tools' JSON schemas (checked with ``jsonschema``), the SDK parses them, the
tool results go back, several rounds, then a final text answer. Broken agent histories are 400s
naming the message; valid ones are 200s. ``tool_choice`` "required" and "none" make the loop
deterministic; the engine's outputs are deterministic per (seed, prompt) anyway.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import jsonschema
import openai
import pytest

from fidelity import compare_stage
from replay._engine import REPLAY_TOOL_CALLS_HEADER, TOOL_CALL_OVERHEAD_TOKENS
from replay.agentic import AgentConfig, generate_agentic
from replay.config import RunConfig
from replay.errors import ConfigError
from replay.plan import build_plan
from replay.runner import run_stage
from replay.sim import SimConfig, start_sim

# the tokens a call costs besides its argument text (rust/sim/src/tools.rs CALL_OVERHEAD_TOKENS)
CALL_OVERHEAD_TOKENS = TOOL_CALL_OVERHEAD_TOKENS

SCHEMAS = {
    "read_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "start_line": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
        },
        "required": ["path"],
    },
    "run_shell": {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout_s": {"type": "number", "minimum": 0},
            "background": {"type": "boolean"},
            "env": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["command", "timeout_s", "background"],
    },
    "search": {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "mode": {"type": "string", "enum": ["regex", "literal"]},
            "scope": {
                "type": "object",
                "properties": {"dir": {"type": "string"}, "depth": {"type": "integer"}},
                "required": ["dir", "depth"],
            },
        },
        "required": ["query", "mode", "scope"],
    },
}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": schema}}
    for name, schema in SCHEMAS.items()
]
RESPONSES_TOOLS = [{"type": "function", "name": name, "parameters": schema} for name, schema in SCHEMAS.items()]


@pytest.fixture(scope="module")
def server():
    # several calls per tool answer (mean 3 of at most 4), so parallel calls show up in a few rounds
    with start_sim(SimConfig(profile="instant", time_scale=0, mean_parallel_tool_calls=3.0, max_parallel_tool_calls=4)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as c:
        yield c


def check_call(name: str, arguments: str) -> dict:
    """A call names an offered tool and its arguments are valid JSON for that tool's schema."""
    assert name in SCHEMAS, name
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])
    return args


def count_tokens(server, text: str) -> int:
    req = urllib.request.Request(
        server.url + "/tokenize", data=json.dumps({"prompt": text}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["count"]


def test_chat_agent_loop_streamed_parallel_calls(client, server):
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find why the build fails and fix it."},
    ]
    rounds = []
    for turn in range(4):
        stream = client.chat.completions.create(
            model="sim",
            messages=messages,
            tools=CHAT_TOOLS,
            tool_choice="required",
            stream=True,
            stream_options={"include_usage": True},
        )
        calls: dict[int, dict] = {}
        finish, usage, content = None, None, ""
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                for d in choice.delta.tool_calls or []:
                    if d.index not in calls:
                        # the first delta of a call carries its id, type and name
                        assert d.id and d.type == "function" and d.function.name, d
                        calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                    else:
                        assert d.id is None and d.function.name is None, d
                    calls[d.index]["arguments"] += d.function.arguments or ""
        assert finish == "tool_calls" and content == ""
        assert sorted(calls) == list(range(len(calls)))
        for call in calls.values():
            check_call(call["name"], call["arguments"])
        # usage counts the calls: their argument tokens plus the fixed per-call overhead
        expected = sum(count_tokens(server, c["arguments"]) + CALL_OVERHEAD_TOKENS for c in calls.values())
        assert usage is not None and usage.completion_tokens == expected
        ordered = [calls[i] for i in sorted(calls)]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in ordered
                ],
            }
        )
        for c in reversed(ordered):  # results may come back in any order
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"result of {c['name']} in round {turn}"})
        rounds.append(len(calls))
    assert max(rounds) > 1, rounds  # parallel calls were parsed from the stream
    ids = [tc["id"] for m in messages if m["role"] == "assistant" for tc in m["tool_calls"]]
    assert len(set(ids)) == len(ids)
    # the SDK's own stream helper parses the same answer to the same calls
    with client.chat.completions.stream(model="sim", messages=messages, tools=CHAT_TOOLS, tool_choice="required") as s:
        helper = s.get_final_completion()
    again = client.chat.completions.create(model="sim", messages=messages, tools=CHAT_TOOLS, tool_choice="required")
    assert [(t.id, t.function.name, t.function.arguments) for t in helper.choices[0].message.tool_calls] == [
        (t.id, t.function.name, t.function.arguments) for t in again.choices[0].message.tool_calls
    ]
    assert again.choices[0].finish_reason == "tool_calls" and again.choices[0].message.content is None
    # the last round: text only
    final = client.chat.completions.create(
        model="sim", messages=messages, tools=CHAT_TOOLS, tool_choice="none", max_tokens=32, stream=True
    )
    text, finish = "", None
    for chunk in final:
        for choice in chunk.choices:
            assert not choice.delta.tool_calls
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text and finish in ("stop", "length")


def test_chat_tool_choice_and_parallel_flag(client):
    base = {"model": "sim", "messages": [{"role": "user", "content": "List the files."}], "tools": CHAT_TOOLS}
    named = client.chat.completions.create(**base, tool_choice={"type": "function", "function": {"name": "search"}})
    calls = named.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["search"]
    check_call("search", calls[0].function.arguments)
    seen = set()
    for k in range(8):
        body = {**base, "messages": [{"role": "user", "content": f"List the files in dir {k}."}]}
        single = client.chat.completions.create(**body, tool_choice="required", parallel_tool_calls=False)
        assert len(single.choices[0].message.tool_calls) == 1
        many = client.chat.completions.create(**body, tool_choice="required")
        seen.add(len(many.choices[0].message.tool_calls))
    assert max(seen) > 1
    text = client.chat.completions.create(**base, tool_choice="none", max_tokens=8)
    assert text.choices[0].message.content and not text.choices[0].message.tool_calls
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        client.chat.completions.create(**base, tool_choice={"type": "function", "function": {"name": "nope"}})


def test_tool_call_probability_flag_decides_auto():
    prompts = [f"Question {k}: what changed?" for k in range(6)]
    for probability, tool_turns in ((0.0, 0), (1.0, len(prompts))):
        with start_sim(SimConfig(profile="instant", time_scale=0, tool_call_probability=probability)) as s:
            with openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0) as c:
                got = 0
                for p in prompts:
                    r = c.chat.completions.create(
                        model="sim", messages=[{"role": "user", "content": p}], tools=CHAT_TOOLS, max_tokens=512
                    )
                    got += bool(r.choices[0].message.tool_calls)
                # no tools offered: always text
                r = c.chat.completions.create(model="sim", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
                assert r.choices[0].message.tool_calls in (None, [])
        assert got == tool_turns
    with pytest.raises(ConfigError, match="--tool-call-probability"):
        start_sim(SimConfig(profile="instant", tool_call_probability=2.0))


def responses_round(client, items, tool_choice, stream, **extra):
    """One Responses API request; returns (response, the events' types, argument deltas per call)."""
    kwargs = {"model": "sim", "input": items, "tools": RESPONSES_TOOLS, "tool_choice": tool_choice, **extra}
    if not stream:
        return client.responses.create(**kwargs), [], {}
    types, deltas = [], {}
    with client.responses.stream(**kwargs) as s:
        for event in s:
            types.append(event.type)
            if event.type == "response.function_call_arguments.delta":
                deltas[event.item_id] = deltas.get(event.item_id, "") + event.delta
        response = s.get_final_response()
    return response, types, deltas


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_agent_loop(client, stream):
    items: list = [{"role": "user", "content": "Run the tests and fix what fails."}]
    rounds = []
    for turn in range(3):
        response, types, deltas = responses_round(client, items, "required", stream)
        assert response.status == "completed"
        calls = [o for o in response.output if o.type == "function_call"]
        assert calls and len(calls) == len(response.output)
        for c in calls:
            check_call(c.name, c.arguments)
            assert c.call_id.startswith("call_") and c.status == "completed"
        assert response.usage.output_tokens >= len(calls) * CALL_OVERHEAD_TOKENS
        if stream:
            assert types[0] == "response.created" and types[-1] == "response.completed"
            for kind in (
                "output_item.added",
                "function_call_arguments.delta",
                "function_call_arguments.done",
                "output_item.done",
            ):
                assert types.count(f"response.{kind}") >= len(calls), (kind, types)
            assert {c.id: c.arguments for c in calls} == deltas
        for c in calls:
            items.append({"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments})
        for c in calls:
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": f"ok {turn}"})
        rounds.append(len(calls))
    assert max(rounds) > 1, rounds
    final, types, _ = responses_round(client, items, "none", stream)
    assert final.output_text and all(o.type == "message" for o in final.output)
    assert "response.function_call_arguments.delta" not in types


def test_a_replay_header_gets_the_recorded_calls_in_both_apis(client, server):
    # a replay's request: ignore_eos with tool_choice auto (text without the header) and a
    # max_tokens below the calls' tokens; the header names each call's argument tokens
    sizes = [30, 12, 45]
    header = {REPLAY_TOOL_CALLS_HEADER: ",".join(map(str, sizes))}
    want = sum(sizes) + len(sizes) * CALL_OVERHEAD_TOKENS
    messages = [{"role": "user", "content": "Find why the build fails and fix it."}]
    ask = dict(model="sim", messages=messages, tools=CHAT_TOOLS, max_tokens=16, extra_body={"ignore_eos": True})

    def argument_sizes(calls: list[tuple[str, str]]) -> list[int]:
        """Each call's argument tokens, its arguments valid for its tool."""
        for name, args in calls:
            check_call(name, args)
        return [count_tokens(server, args) for _, args in calls]

    whole = client.chat.completions.create(**ask, extra_headers=header)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and whole.usage is not None and whole.usage.completion_tokens == want
    assert argument_sizes([(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]) == sizes
    stream = client.chat.completions.create(**ask, extra_headers=header, stream=True, stream_options={"include_usage": True})
    calls: dict[int, list[str]] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                got = calls.setdefault(d.index, [d.function.name or "", ""])
                got[1] += d.function.arguments or ""
    assert argument_sizes([(n, a) for n, a in (calls[i] for i in sorted(calls))]) == sizes
    assert usage is not None and usage.completion_tokens == want
    for stream_it in (False, True):
        response, _, _ = responses_round(client, [messages[0]], "auto", stream_it, extra_headers=header)
        fcalls = [o for o in response.output if o.type == "function_call"]
        assert argument_sizes([(c.name, c.arguments) for c in fcalls]) == sizes, stream_it
        assert response.usage.output_tokens == want
    # a recorded text answer, and tool_choice none whatever the record: text of max_tokens
    for value, choice_ in (("", "auto"), (header[REPLAY_TOOL_CALLS_HEADER], "none")):
        text = client.chat.completions.create(**ask, tool_choice=choice_, extra_headers={REPLAY_TOOL_CALLS_HEADER: value})
        assert not text.choices[0].message.tool_calls and text.usage.completion_tokens == 16
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**ask, extra_headers={REPLAY_TOOL_CALLS_HEADER: "40,some"})
    assert "x-replay-tool-calls: 'some' is not a token count" in str(e.value)


def test_an_agent_trace_replayed_on_the_engine_gets_each_recorded_answers_calls(server):
    # small contexts (the instant profile's length), several sessions of parallel calls
    trace = generate_agentic(
        AgentConfig(
            sessions=3,
            steps_mean=5,
            tool_tokens=20,
            system_tokens=200,
            task_tokens_p50=40,
            result_tokens_p50=60,
            max_context_tokens=3000,
            content_tokens_p50=20,
            seed=4,
        )
    )
    recorded = trace.df.select("request_id", "output_tokens", "tool_calls")
    assert recorded["tool_calls"].list.len().max() > 1 and (recorded["tool_calls"].list.len() == 0).any()
    result = run_stage(trace, RunConfig(url=server.url, sessions="dag", speedup=100.0))
    got = result.requests.join(recorded, on="request_id")
    assert got.height == trace.df.height and (got["error"] == "none").all() and (got["status"] == 200).all()
    # request by request: the recorded length, a tool answer's being text filling what its
    # recorded calls (arguments of the recorded sizes plus each call's overhead) leave of it
    for row in got.iter_rows(named=True):
        assert row["completion_tokens"] == row["output_tokens"], row
    # the texts answered and resent in later steps' histories keep the prompts live's: the
    # paired length tests miss on no request (a small trace may not be enough to pass them)
    verdict = compare_stage(trace, result.requests, lag_bound_ms=50).verdict
    lengths = {m.name: m for m in verdict.metrics if m.name in ("input_tokens.paired", "output_tokens.paired")}
    assert len(lengths) == 2, verdict.metrics
    for m in lengths.values():
        assert m.passed is not False and m.distance == 0, m
    # and the calls themselves, for one tool answer sent as the replay sent it
    plan = build_plan(trace, RunConfig(url=server.url, sessions="dag"), model="sim")
    lines, offsets = plan.head_lines()
    k = next(i for i, c in enumerate(plan.rows["tool_calls"].to_list()) if c and len(c) > 1)
    name, value = lines[int(offsets[k]) : int(offsets[k + 1])].decode().strip().split(": ")
    body = json.loads(trace.df["body"][k])
    with openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as c:
        answer = c.chat.completions.create(**{**body, "model": "sim"}, extra_headers={name: value})
    sizes = [count_tokens(server, t.function.arguments) for t in answer.choices[0].message.tool_calls or []]
    assert sizes == plan.rows["tool_calls"][k].to_list()


USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        (
            [USER, {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
            "messages[1]: tool_call_id 'call_1' answers no tool call",
        ),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "x"},
                {"role": "tool", "tool_call_id": "call_2", "content": "y"},
            ],
            "messages[3]: tool_call_id 'call_2'",
        ),
        ([USER, {"role": "tool", "content": "x"}], "messages[1]: a tool message needs a string 'tool_call_id'"),
        ([USER, {"role": "assistant", "content": None}], "messages[1]: an assistant message needs 'content' or 'tool_calls'"),
        ([USER, {"role": "assistant", "content": "a"}, USER, {"role": "assistant"}], "messages[3]: an assistant message needs"),
    ],
    ids=["unissued-id", "unknown-id", "no-id", "null-assistant", "empty-assistant"],
)
def test_broken_chat_histories_are_400_naming_the_message(client, messages, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="sim", messages=messages, max_tokens=4)
    assert words in e.value.message
    assert e.value.status_code == 400
    assert e.value.body["type"] == "invalid_request_error" and e.value.body["param"].startswith("messages.[")


def test_broken_responses_input_is_400_naming_the_item(client):
    good = [USER, {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"}]
    for items, words in (
        ([USER, {"type": "function_call_output", "call_id": "c1", "output": "x"}], "input[1]: function_call_output call_id 'c1'"),
        (
            [*good, {"type": "function_call_output", "call_id": "c2", "output": "x"}],
            "input[2]: function_call_output call_id 'c2'",
        ),
    ):
        with pytest.raises(openai.BadRequestError) as e:
            client.responses.create(model="sim", input=items, max_output_tokens=4)
        assert words in e.value.message and e.value.body["param"].startswith("input.[")
    ok = client.responses.create(
        model="sim", input=[*good, {"type": "function_call_output", "call_id": "c1", "output": "x"}], max_output_tokens=4
    )
    assert ok.status in ("completed", "incomplete")


def test_valid_agent_history_is_200(client):
    messages = [
        {"role": "system", "content": "s"},
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "b"},
        {"role": "tool", "tool_call_id": "call_1", "content": "a"},
        {"role": "assistant", "content": "done"},
        USER,
    ]
    r = client.chat.completions.with_raw_response.create(model="sim", messages=messages, max_tokens=4)
    assert r.status_code == 200 and r.parse().choices[0].message.content


def test_serve_sim_help_lists_the_tool_flags():
    out = subprocess.run(
        [sys.executable, "-m", "replay.cli.main", "serve-sim", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in ("--tool-call-probability", "--max-parallel-tool-calls", "--mean-parallel-tool-calls", "--tool-argument-tokens"):
        assert flag in out
    import argparse

    from replay.cli.sim_cmds import config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "serve-sim",
            "--tool-call-probability",
            "0.5",
            "--max-parallel-tool-calls",
            "3",
            "--mean-parallel-tool-calls",
            "2",
            "--tool-argument-tokens",
            "12",
        ]
    )
    c = config_from_args(args)
    assert (c.tool_call_probability, c.max_parallel_tool_calls, c.mean_parallel_tool_calls, c.tool_argument_tokens) == (
        0.5,
        3,
        2.0,
        12,
    )
