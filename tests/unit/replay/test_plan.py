"""Stage schedules: every stage offers the requested rate over its own window, bursts kept."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay.config import Arrivals, RunConfig
from replay.errors import ConfigError
from replay.plan import build_plan, offered_window, schedule

URL = "http://127.0.0.1:8000"


def _bursty_arrivals_us() -> list[int]:
    # 60 requests 100 ms apart (10 req/s), then 140 requests 1 s apart: the trace's mean rate is far
    # below its first stretch's, like a trace whose first minutes are burstier than its mean.
    dense = [i * 100_000 for i in range(60)]
    sparse = [dense[-1] + (i + 1) * 1_000_000 for i in range(140)]
    return dense + sparse


@pytest.fixture
def bursty(make_trace):
    arrivals = _bursty_arrivals_us()
    return make_trace(len(arrivals), arrival_us=pl.Series(arrivals, dtype=pl.Int64))


@pytest.mark.parametrize("rate, duration_s", [(1.0, 20.0), (2.0, 20.0), (4.0, 10.0), (0.5, 40.0)])
def test_a_window_cut_from_a_burst_offers_the_requested_rate(bursty, rate, duration_s):
    config = RunConfig(url=URL, rate=rate, duration_s=duration_s)
    plan = build_plan(bursty, config)
    assert plan.n == round(rate * duration_s)
    assert plan.window_s == duration_s
    assert plan.offered_rate == pytest.approx(rate, rel=0.05)
    assert plan.offsets_ns[-1] < duration_s * 1e9
    # Scaling the whole trace to the rate (the old rule) offers several times too much in this window:
    arrivals = np.array(_bursty_arrivals_us(), dtype=np.float64)
    compressed_s = arrivals / 1e6 * ((len(arrivals) - 1) / (arrivals[-1] / 1e6)) / rate
    in_window = int(np.sum(compressed_s < duration_s))
    assert in_window / duration_s > 1.5 * rate


def test_the_burst_shape_is_kept_by_uniform_compression(bursty):
    plan = build_plan(bursty, RunConfig(url=URL, rate=1.0, duration_s=20.0))
    trace_us = np.array(_bursty_arrivals_us()[: plan.n], dtype=np.float64)
    factor = plan.offsets_ns[1:] / (trace_us[1:] * 1000)
    assert np.allclose(factor, factor[0], rtol=1e-6)
    # the request left out of the window is due exactly at its end: k requests, k gaps
    assert _bursty_arrivals_us()[plan.n] * 1000 * factor[0] == pytest.approx(20e9, rel=1e-9)


@pytest.mark.parametrize("kind", ["trace", "poisson", "gamma", "constant"])
def test_every_arrival_kind_offers_the_rate_over_its_window(bursty, kind):
    arrivals = Arrivals(kind=kind, cv=3.0, seed=4)
    plan = build_plan(bursty, RunConfig(url=URL, rate=3.0, duration_s=20.0, arrivals=arrivals))
    assert plan.offered_rate == pytest.approx(3.0, rel=0.05)
    assert plan.n / 20.0 == plan.offered_rate
    plan = build_plan(bursty, RunConfig(url=URL, rate=3.0, requests=50, arrivals=arrivals))
    span_s = (plan.offsets_ns[-1] - plan.offsets_ns[0]) / 1e9
    assert plan.n == 50 and (plan.n - 1) / span_s == pytest.approx(3.0, rel=1e-6)
    assert plan.offered_rate == pytest.approx(3.0, rel=1e-6) and plan.window_s == pytest.approx(span_s)


def test_seeded_arrivals_are_reproducible(bursty):
    config = RunConfig(url=URL, rate=3.0, duration_s=20.0, arrivals=Arrivals(kind="gamma", cv=2.0, seed=9))
    assert np.array_equal(schedule(bursty, config), schedule(bursty, config))


def test_simultaneous_requests_move_the_cut_to_the_nearest_count_it_can_keep(make_trace):
    # pairs of requests at the same instant: a cut between a pair's two requests is impossible
    arrivals = [(i // 2) * 1_000_000 for i in range(40)]
    trace = make_trace(40, arrival_us=pl.Series(arrivals, dtype=pl.Int64))
    offsets = schedule(trace, RunConfig(url=URL, rate=1.5, duration_s=5.0))  # asks for 7.5 -> 8 requests
    assert len(offsets) == 8 and len(offsets) % 2 == 0


def test_as_recorded_and_sped_up_stages_report_their_window(bursty):
    plan = build_plan(bursty, RunConfig(url=URL, duration_s=3.0))
    assert plan.n == 30 and plan.window_s == 3.0 and plan.offered_rate == pytest.approx(10.0)
    plan = build_plan(bursty, RunConfig(url=URL, speedup=2.0, duration_s=3.0))
    assert plan.n == 60 and plan.offered_rate == pytest.approx(20.0)
    plan = build_plan(bursty, RunConfig(url=URL, requests=60))
    assert plan.window_s == pytest.approx(5.9) and plan.offered_rate == pytest.approx(10.0)


def test_a_window_the_trace_cannot_fill_is_a_config_error(bursty):
    with pytest.raises(ConfigError, match=r"--duration: 20s at 10 req/s needs more than 200 requests; the trace has 200"):
        schedule(bursty, RunConfig(url=URL, rate=10.0, duration_s=20.0))
    with pytest.raises(ConfigError, match="--duration: 1s at 0.1 req/s keeps no request"):
        schedule(bursty, RunConfig(url=URL, rate=0.1, duration_s=1.0))
    with pytest.raises(ConfigError, match="--requests: 500 asked, the trace has 200 rows"):
        schedule(bursty, RunConfig(url=URL, rate=1.0, requests=500))


def test_offered_window():
    offsets = np.array([0, 1_000_000_000, 3_000_000_000], dtype=np.int64)
    assert offered_window(offsets, None) == (3.0, pytest.approx(2 / 3))
    assert offered_window(offsets, 4.0) == (4.0, 0.75)
    window, rate = offered_window(offsets[:1], None)
    assert window == 0.0 and np.isnan(rate)


def test_bodies_are_made_a_window_at_a_time():
    import json

    import numpy as np

    from replay.config import RunConfig
    from replay.plan import build_plan
    from tests.integration.conftest import trace_of_bodies

    trace = trace_of_bodies([{"prompt": f"p{i}", "max_tokens": i + 1} for i in range(7)], api="completions")
    plan = build_plan(trace, RunConfig(url="http://127.0.0.1:9", requests=5), model="m")
    windows = list(plan.body_windows(size=2))
    assert [len(offsets) - 1 for _, offsets in windows] == [2, 2, 1]
    bodies = [json.loads(data[int(a) : int(b)]) for data, offsets in windows for a, b in zip(offsets, offsets[1:])]
    assert [b["prompt"] for b in bodies] == ["p0", "p1", "p2", "p3", "p4"]
    assert all(b["model"] == "m" and b["stream"] and b["ignore_eos"] for b in bodies)
    assert [b["max_tokens"] for b in bodies] == [1, 2, 3, 4, 5]
    assert all(offsets.dtype == np.uint64 for _, offsets in windows)


def test_null_bodies_are_synthesized_a_window_at_a_time(tmp_path, gpt2):
    import json

    from capture.importers import import_mooncake
    from replay.prompts import block_text
    from replay.trace import read_trace

    src = tmp_path / "m.jsonl"
    src.write_text(
        "\n".join(
            json.dumps({"timestamp": i, "input_length": 600 + i, "output_length": 3 + i, "hash_ids": [1, 100 + i]})
            for i in range(5)
        )
        + "\n"
    )
    import_mooncake(src, tmp_path / "t.parquet")
    trace = read_trace(tmp_path / "t.parquet", bodies=False)
    plan = build_plan(trace, RunConfig(url=URL, requests=4), model="m")
    windows = list(plan.body_windows(size=3))
    assert [len(offsets) - 1 for _, offsets in windows] == [3, 1]
    bodies = [json.loads(data[int(a) : int(b)]) for data, offsets in windows for a, b in zip(offsets, offsets[1:])]
    assert [b["max_tokens"] for b in bodies] == [3, 4, 5, 6]
    assert all(b["model"] == "m" and b["stream"] and b["prompt"].startswith(block_text(1, 512)) for b in bodies)
    assert [len(gpt2.encode(b["prompt"], add_special_tokens=False).ids) for b in bodies] == [600, 601, 602, 603]


def test_a_request_that_stopped_early_live_is_sent_its_observed_length():
    import polars as pl

    from replay.plan import send_limits

    rows = pl.DataFrame(
        {"output_tokens": [43, 48, None], "max_tokens": [48, 48, 64]}, schema={"output_tokens": pl.Int32, "max_tokens": pl.Int32}
    )
    # ignore_eos decodes exactly max_tokens: the client's cap of 48 would lengthen a 43-token answer
    assert send_limits(rows, ignore_eos=True).to_list() == [43, 48, 64]
    # without it the engine stops where it will, within the request's own cap
    assert send_limits(rows, ignore_eos=False).to_list() == [48, 48, 64]


def test_each_api_s_body_is_sent_in_its_own_words():
    """Chat and completions stream with usage and max_tokens; a Responses API body streams with
    max_output_tokens and no stream_options (its last event carries the usage); an embeddings
    body is sent as recorded but for the model; each goes to its own path."""
    import json

    from replay.trace import Trace
    from tests.integration.conftest import trace_of_bodies

    bodies = [
        {"messages": [{"role": "user", "content": "a"}], "max_tokens": 3},
        {"prompt": "b", "max_tokens": 3},
        {"input": "c", "max_output_tokens": 3, "stream_options": {"include_obfuscation": False}},
        {"input": "d", "encoding_format": "base64"},
    ]
    trace = trace_of_bodies(bodies)
    trace = Trace(trace.df.with_columns(api=pl.Series(["chat", "completions", "responses", "embeddings"])), trace.meta)
    plan = build_plan(trace, RunConfig(url=URL), model="m")
    assert [plan.paths[i] for i in plan.path_index] == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
    ]
    ((data, offsets),) = plan.body_windows()
    chat, completion, response, embedding = (json.loads(data[int(a) : int(b)]) for a, b in zip(offsets, offsets[1:]))
    for body in (chat, completion):
        assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["max_tokens"] == 3
    # the row's recorded output length (4 here), as for every API
    assert response["stream"] and response["max_output_tokens"] == 4 and "max_tokens" not in response
    assert response["stream_options"] == {"include_obfuscation": False} and response["ignore_eos"]
    assert embedding == {"input": "d", "encoding_format": "base64", "model": "m"}


def test_token_only_rows_of_each_api_are_synthesized_in_its_shape():
    from replay.synth import Synthesizer

    assert Synthesizer.body("responses", "m", 5, "t") == {"model": "m", "input": "t", "max_output_tokens": 5}
    assert Synthesizer.body("embeddings", None, 5, "t") == {"input": "t"}
    assert Synthesizer.body("chat", None, None, "t") == {"messages": [{"role": "user", "content": "t"}]}


@pytest.mark.parametrize(
    "obj",
    [
        {"messages": [{"role": "user", "content": 'plain ASCII, "quoted", a \\ and a /'}]},
        {"prompt": "caf\u00e9 \u4e2d\u6587 \U0001f600"},  # non-ASCII kept as it is, not \u-escaped
        {"prompt": "tab\there, bell\x07, nul\x00"},  # control characters: escaped either way
        {"prompt": "a literal \\u0041 in the text"},  # an escape-shaped text that is not one
        {"m\u00e9ta": ["\u2028", 1, None, 2.5, True]},
    ],
)
def test_a_body_is_serialized_exactly_as_with_non_ascii_kept(obj):
    import json

    from replay.bodies import body_json

    assert body_json(obj) == json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _splice(body: bytes, spans: list[int], answers: list[str]) -> dict:
    """What the runner does with a body's spans (rust/core/src/answers.rs ``splice``): each span's
    bytes replaced by its answer as JSON string contents, oldest first."""
    import json

    out, done = b"", 0
    for (a, b), text in zip(zip(spans[::2], spans[1::2]), answers):
        out += body[done:a] + json.dumps(text, ensure_ascii=False)[1:-1].encode()
        done = b
    return json.loads(out + body[done:])


def test_every_earlier_answer_of_an_agent_history_gets_a_span_whatever_its_content():
    """An answer that was only tool calls (content null or absent) or a list of parts gets a span
    as a text answer does: the runner gives the newest span the parent's answer, the one before it
    the grandparent's, so a message without one would move every older answer onto the wrong
    turn. The engine's text goes into ``content``; the tool calls and their ids stay."""
    import json

    from replay.plan import _rewrite_body

    call = lambda cid: {"id": cid, "type": "function", "function": {"name": "grep", "arguments": '{"input": "x"}'}}  # noqa: E731
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "looking", "tool_calls": [call("c0")]},
        {"role": "tool", "tool_call_id": "c0", "content": "r0"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "assistant", "tool_calls": [call("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "r3"},
        {"role": "assistant", "content": [{"type": "text", "text": "parts "}, {"type": "text", "text": "joined"}]},
        {"role": "user", "content": "go on"},
    ]
    body, spans = _rewrite_body(
        json.dumps({"messages": messages}), 0, model=None, max_tokens=5, ignore_eos=True, mark_answers=True
    )
    assert len(spans) == 2 * 4
    # as recorded (no engine answer yet): every content a string, the parts' text joined
    sent = json.loads(body)["messages"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["looking", "", "", "parts joined"]
    engine = ['A0 "quoted" \u00e9', "A1", "A2\n", "A3"]
    spliced = _splice(body, spans, engine)["messages"]
    assert [m.get("content") for m in spliced if m["role"] == "assistant"] == engine
    for was, now in zip(messages, spliced):
        assert now["role"] == was["role"] and now.get("tool_calls") == was.get("tool_calls")
        assert now.get("tool_call_id") == was.get("tool_call_id")
    assert spliced[-1] == {"role": "user", "content": "go on"}


def test_a_session_header_carries_each_request_s_root_session(make_trace):
    """--session-header: each request with a session sends its root session (a subagent's
    parent chain followed to the top), beside the recorded tool calls' header; none without."""
    trace = make_trace(
        n=4,
        session_id=pl.Series(["root", "sub", None, "subsub"], dtype=pl.String),
        parent_session_id=pl.Series([None, "root", None, "sub"], dtype=pl.String),
    )
    plain = build_plan(trace, RunConfig(url="http://x"))
    assert plain.head_lines() is None
    plan = build_plan(trace, RunConfig(url="http://x", session_header="x-session-id"))
    text, offsets = plan.head_lines()
    lines = [text[offsets[i] : offsets[i + 1]].decode() for i in range(4)]
    assert lines == ["x-session-id: root\r\n", "x-session-id: root\r\n", "", "x-session-id: root\r\n"]
    with pytest.raises(ConfigError, match="--session-header"):
        RunConfig(url="http://x", session_header="bad header")
