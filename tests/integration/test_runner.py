"""The Rust open-loop runner against a real scripted HTTP server on loopback."""

from __future__ import annotations

import json
import socket

import numpy as np
import polars as pl

from replay.config import Arrivals, RunConfig
from replay.plan import build_plan
from replay.runner import run_plan, run_stage
from tests.integration.conftest import trace_of_bodies


def _by_fault(result, faults):
    df = result.requests.with_columns(pl.Series("fault", faults))
    return {row["fault"]: row for row in df.iter_rows(named=True)}


def test_requests_leave_on_schedule_while_the_server_stalls(scripted):
    # Every response is held 1.5 s before its headers; a closed-loop sender would wait for each.
    server = scripted(headers_delay_s=1.5)
    n = 40
    trace = trace_of_bodies([{"max_tokens": 2} for _ in range(n)])
    config = RunConfig(url=server.url, rate=20.0, arrivals=Arrivals(kind="constant"))
    result = run_stage(trace, config)
    df = result.requests
    assert df["error"].to_list() == ["none"] * n
    intended_unix = result.start_unix_ns + df["intended_ns"].to_numpy()
    assert len(server.arrivals) == n
    server_t = np.sort([a.t_unix_ns for a in server.arrivals])
    late_s = (server_t - np.sort(intended_unix)) / 1e9
    # Arrivals follow the 50 ms schedule: none waited for the 1.5 s responses of the earlier ones.
    assert late_s.max() < 0.5, late_s.max()
    assert late_s.min() > -0.05
    # Latency from the intended send includes the stall.
    e2e = (df["end_ns"] - df["intended_ns"]).to_numpy() / 1e9
    assert (e2e >= 1.5).all()
    # The schedule itself: 20 req/s constant.
    assert np.allclose(np.diff(df["intended_ns"].to_numpy()), 50_000_000)


def test_idle_connections_are_reused_then_dropped_before_servers_drop_them(scripted):
    # Requests 0.3 s apart reuse one keep-alive connection. One that waited 4.5 s idle is not
    # reused: uvicorn and llama-server close idle connections after 5 s, and reusing one as the
    # server closes it would record a reset the engine never caused.
    server = scripted()
    trace = trace_of_bodies([{"max_tokens": 2, "stream": True}] * 3, arrival_us=[0, 300_000, 4_800_000])
    result = run_stage(trace, RunConfig(url=server.url, lag_bound_ms=1000))
    assert result.requests["error"].to_list() == ["none"] * 3
    ports = [a.client_port for a in sorted(server.arrivals, key=lambda a: a.t_unix_ns)]
    assert ports[0] == ports[1] != ports[2]


def test_every_fault_is_recorded_and_the_run_goes_on(scripted):
    server = scripted(stall_s=5.0)
    faults = ["ok", "http500", "http404", "http429", "malformed", "reset", "stall", "no_done", "json", "ok"]
    trace = trace_of_bodies([{"max_tokens": 5, "x_fault": f} for f in faults])
    config = RunConfig(url=server.url, rate=50.0, arrivals=Arrivals(kind="constant"), stall_timeout_s=0.5)
    result = run_stage(trace, config)
    rows = _by_fault(result, faults)
    expected = {
        "ok": "none",
        "http500": "http_5xx",
        "http404": "http_4xx",
        "http429": "http_4xx",
        "malformed": "malformed_sse",
        "reset": "reset",
        "stall": "stall",
        "no_done": "reset",
        "json": "none",
    }
    for fault, kind in expected.items():
        assert rows[fault]["error"] == kind, (fault, rows[fault])
    ok = rows["ok"]
    assert ok["status"] == 200
    assert ok["completion_tokens"] == 5 and ok["prompt_tokens"] == 11 and ok["cached_tokens"] == 7
    assert ok["output_chunks"] == 5 and len(ok["chunk_us"]) == 5
    assert ok["release_ns"] <= ok["sent_ns"] <= ok["first_byte_ns"] <= ok["first_token_ns"] <= ok["end_ns"]
    # chunk times: µs after the first token, in arrival order, the last one before the end
    assert sorted(ok["chunk_us"]) == ok["chunk_us"] and ok["chunk_us"][0] == 0
    assert ok["first_token_ns"] + ok["chunk_us"][-1] * 1000 <= ok["end_ns"]
    assert rows["http500"]["status"] == 500 and "scripted 500" in rows["http500"]["error_detail"]
    assert rows["json"]["completion_tokens"] == 5
    assert rows["reset"]["output_chunks"] == 2
    assert len(server.arrivals) == len(faults)
    summary = result.summary
    assert summary.completed == 3
    assert summary.errors["http_4xx"] == 2
    assert summary.rejected == 1  # the 404; a 429 is the server under load, not a bad request


def test_refused_connections_are_recorded():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # run_stage would refuse this target up front (tests/integration/test_target_check.py); the runner
    # itself records each refused request and goes on
    trace = trace_of_bodies([{"max_tokens": 2} for _ in range(5)])
    config = RunConfig(url=f"http://127.0.0.1:{port}", rate=100.0, model="m")
    result = run_plan(build_plan(trace, config), config)
    assert result.requests["error"].to_list() == ["connect_refused"] * 5
    # never on the wire: no send stamp, but the time spent trying to connect is kept
    assert result.requests["sent_ns"].null_count() == 5
    assert result.requests["conn_ns"].null_count() == 0
    assert result.summary.completed == 0


def test_whole_request_timeout(scripted):
    server = scripted(headers_delay_s=3.0)
    trace = trace_of_bodies([{"max_tokens": 2} for _ in range(3)])
    result = run_stage(trace, RunConfig(url=server.url, rate=100.0, timeout_s=0.4))
    assert result.requests["error"].to_list() == ["timeout"] * 3
    # it gave up at the deadline, not when the server answered
    assert (result.requests["end_ns"].is_null() | (result.requests["end_ns"] < 2_000_000_000)).all()


def test_body_rewrite_sets_streaming_max_tokens_and_model(scripted):
    server = scripted()
    trace = trace_of_bodies([{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "model": "m"}])
    run_stage(trace, RunConfig(url=server.url))
    body = server.arrivals[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 3 and body["ignore_eos"] is True
    assert body["model"] == "scripted"  # the trace's model is not served: the server's first is used
    run_stage(trace, RunConfig(url=server.url, ignore_eos=False, model="other"))
    body = server.arrivals[1].body
    assert "ignore_eos" not in body and body["model"] == "other"


def test_the_server_receives_each_stored_body_with_only_the_replay_s_settings_changed(scripted):
    """Bodies stored as traces store them (``body_json``) are written in Rust, the others in
    Python; either way the bytes on the wire are exactly Python's rewrite of the stored body."""
    from replay.bodies import body_json
    from replay.plan import _rewrite_body
    from replay.trace import Trace, validate

    server = scripted()
    objs = [
        {"model": "a", "messages": [{"role": "user", "content": f'caf\u00e9 "{i}" \\ \t\u0001 \U0001f600'}], "temperature": 0.7}
        for i in range(6)
    ]
    stored = [body_json(o) for o in objs[:4]] + [json.dumps(o) for o in objs[4:]]  # the last two: spaces
    base = trace_of_bodies(objs)
    trace = Trace(validate(base.df.with_columns(body=pl.Series(stored)), base.meta, source="<test>"), base.meta)
    result = run_stage(trace, RunConfig(url=server.url, rate=100.0, model="m"))
    assert result.requests["error"].to_list() == ["none"] * 6
    got = {a.body["messages"][0]["content"]: a.raw for a in server.arrivals}
    for i, text in enumerate(stored):
        want, _ = _rewrite_body(text, i, model="m", max_tokens=4, ignore_eos=True)
        assert got[objs[i]["messages"][0]["content"]] == want
    # a stored body's own bytes are kept: only the settings differ
    assert got[objs[0]["messages"][0]["content"]] == stored[0][:-1].replace('"a"', '"m"', 1).encode() + (
        b',"stream":true,"stream_options":{"include_usage":true},"max_tokens":4,"ignore_eos":true}'
    )


def _session_trace(sessions: list[str], arrival_us: list[int]):
    from replay.trace import Trace, validate

    base = trace_of_bodies([{"max_tokens": 2} for _ in sessions], arrival_us=arrival_us)
    df = base.df.with_columns(pl.Series("session_id", sessions, dtype=pl.String))
    return Trace(df=validate(df, base.meta, source="<test>"), meta=base.meta)


def test_causal_turns_wait_for_the_previous_turn_of_a_stalled_server(scripted):
    # Every response is held 1 s. Session a's second turn is scheduled 0.1 s after its first;
    # causal replay sends it only after the first turn ended (+ 0.1 s think time), while
    # session b's request at 0.05 s still leaves on schedule.
    server = scripted(headers_delay_s=1.0)
    trace = _session_trace(["a", "b", "a"], [0, 50_000, 100_000])
    result = run_stage(trace, RunConfig(url=server.url, sessions="causal", lag_bound_ms=1000))
    df = result.requests
    assert df["error"].to_list() == ["none"] * 3
    first, other, second = df.row(0, named=True), df.row(1, named=True), df.row(2, named=True)
    assert second["release_ns"] == first["end_ns"] + 100_000_000
    assert second["sent_ns"] >= second["release_ns"]
    assert other["release_ns"] == other["intended_ns"] and other["sent_ns"] < first["end_ns"]
    # the server saw the second turn a full response time after the first
    assert len(server.arrivals) == 3
    times = sorted(a.t_unix_ns for a in server.arrivals)
    assert (times[2] - times[0]) / 1e9 >= 1.0
    summary = result.summary
    assert summary.valid, summary.send_lag_ms
    # the same trace open-loop: the second turn goes at its own time, before the first ended
    open_result = run_stage(trace, RunConfig(url=server.url, lag_bound_ms=1000))
    second_open = open_result.requests.row(2, named=True)
    assert second_open["sent_ns"] < open_result.requests.row(0, named=True)["end_ns"]


def test_the_drain_cuts_off_requests_still_waiting(scripted):
    server = scripted(headers_delay_s=5.0)
    trace = trace_of_bodies([{"max_tokens": 2} for _ in range(4)])
    result = run_stage(trace, RunConfig(url=server.url, rate=50.0, drain_s=0.3, model="m", warm_connections=0))
    assert result.cut_off and not result.cancelled
    assert result.requests["error"].to_list() == ["cut_off"] * 4
    assert result.requests["sent_ns"].null_count() == 0
    assert (result.requests["end_ns"] < 2_000_000_000).all(), "cut off at the drain, not at the answer"


def test_without_chunk_times_chunks_are_still_counted(scripted):
    server = scripted()
    trace = trace_of_bodies([{"max_tokens": 4} for _ in range(3)])
    result = run_stage(trace, RunConfig(url=server.url, rate=50.0, chunk_times=False))
    df = result.requests
    assert df["output_chunks"].to_list() == [4, 4, 4]
    assert df["chunk_us"].list.len().to_list() == [0, 0, 0]
    assert result.summary.itl_ms["p50"] is None


def test_warm_up_is_reported(scripted):
    server = scripted()
    trace = trace_of_bodies([{"max_tokens": 2} for _ in range(6)])
    result = run_stage(trace, RunConfig(url=server.url, rate=20.0, warm_connections=3))
    runner = result.runner
    assert runner["warm_connections_wanted"] == 3 and runner["warm_connections"] == 3
    assert runner["warm_detail"] == "" and runner["warmup_ms"] > 0
    # the requests went out on the warm connections: the server saw no new client port
    ports = {a.client_port for a in server.arrivals}
    assert len(ports) <= 3


def test_a_trace_read_without_bodies_sends_the_same_requests(scripted, tmp_path):
    from replay.trace import read_trace

    server = scripted()
    bodies = [{"messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 2 + i % 3} for i in range(7)]
    path = trace_of_bodies(bodies).write(tmp_path / "t.parquet")
    run_stage(read_trace(path), RunConfig(url=server.url, rate=100.0, model="x"))
    run_stage(read_trace(path, bodies=False), RunConfig(url=server.url, rate=100.0, model="x"))
    sent = [a.body for a in server.arrivals]
    assert len(sent) == 14
    key = lambda b: b["messages"][0]["content"]  # noqa: E731
    assert sorted(sent[:7], key=key) == sorted(sent[7:], key=key)


def test_a_body_source_that_falls_behind_is_counted(scripted, monkeypatch):
    import time

    from replay.plan import Plan

    server = scripted()
    trace = trace_of_bodies([{"max_tokens": 1} for _ in range(10)])
    windows = Plan.body_windows

    def late_fourth(self, size=2):
        for k, window in enumerate(windows(self, size=2)):
            if k == 3:  # three windows are read ahead before t0; the fourth keeps the sends waiting
                time.sleep(1.0)
            yield window

    monkeypatch.setattr(Plan, "body_windows", late_fourth)
    result = run_stage(trace, RunConfig(url=server.url, rate=1000.0, lag_bound_ms=1.0))
    assert result.requests["error"].to_list() == ["none"] * 10
    # the one-second stall is counted; a busy machine may add waits of a few ms to the count
    assert result.runner["body_waits"] >= 1 and result.runner["body_wait_max_ms"] >= 500
    assert not result.summary.valid
    reason = result.summary.invalid_reason
    assert f"waited for request bodies {result.runner['body_waits']} times" in reason


def test_the_bodies_are_read_a_second_of_sends_ahead(scripted, monkeypatch):
    """A feeder stall shorter than the lookahead (a second of sends) keeps no request waiting: at
    200 req/s in windows of 20 (0.1 s each), window 15 is asked for about 0.5 s into the run and
    takes 0.6 s to make; with two windows ahead (0.2 s) the sends would wait about 0.4 s."""
    import time

    from replay.plan import Plan

    server = scripted()
    trace = trace_of_bodies([{"max_tokens": 1} for _ in range(400)])
    windows = Plan.body_windows
    asked: list[float] = []

    def slow_fifteenth(self, size=20):
        for k, window in enumerate(windows(self, size=20)):
            asked.append(time.monotonic())
            if k == 15:
                time.sleep(0.6)
            yield window

    monkeypatch.setattr(Plan, "body_windows", slow_fifteenth)
    result = run_stage(trace, RunConfig(url=server.url, rate=200.0))
    assert result.requests["error"].to_list() == ["none"] * 400
    # read ahead as the sends go, not all at once: window 15 came well after window 0
    assert asked[15] - asked[0] > 0.3
    assert result.runner["body_wait_max_ms"] < 100, result.runner


def _chat_session(first_fault: str = "ok"):
    """One session of three turns; each later turn resends the recorded answers to the earlier."""
    from replay.trace import Trace, validate

    system = {"role": "system", "content": "be brief"}
    recorded = ['RECORDED "one" \u00e9\n', "RECORDED two"]
    u = [{"role": "user", "content": c} for c in ("alpha beta", "and then?", "why")]
    a = [{"role": "assistant", "content": c} for c in recorded]
    bodies = [
        {"messages": [system, u[0]], "max_tokens": 2, "x_fault": first_fault},
        {"messages": [system, u[0], a[0], u[1]], "max_tokens": 2},
        {"messages": [system, u[0], a[0], u[1], a[1], u[2]], "max_tokens": 2},
    ]
    base = trace_of_bodies(bodies, arrival_us=[0, 20_000, 40_000])
    df = base.df.with_columns(pl.Series("session_id", ["s"] * 3, dtype=pl.String))
    return Trace(df=validate(df, base.meta, source="<test>"), meta=base.meta), recorded


def _answers_sent(server) -> list[list[str]]:
    """The assistant messages of each request the server got, in arrival order."""
    return [
        [m["content"] for m in a.body["messages"] if m["role"] == "assistant"]
        for a in sorted(server.arrivals, key=lambda a: a.t_unix_ns)
    ]


def test_a_causal_turn_resends_the_answers_the_engine_streamed(scripted):
    server = scripted(echo=True)  # answers with the last user message, a word at a time
    trace, recorded = _chat_session()
    result = run_stage(trace, RunConfig(url=server.url, sessions="causal", lag_bound_ms=1000))
    assert result.requests["error"].to_list() == ["none"] * 3
    assert _answers_sent(server) == [[], ["alpha beta "], ["alpha beta ", "and then? "]]
    last = max(server.arrivals, key=lambda a: a.t_unix_ns).body
    assert last["messages"][-1]["content"] == "why" and last["max_tokens"] == 2
    assert result.runner["answers_resent"] == 3 and result.runner["answers_recorded"] == 0
    # as recorded: asked for, or open-loop (a turn may leave before the answer exists)
    for config in (
        RunConfig(url=server.url, sessions="causal", answers="recorded", lag_bound_ms=1000),
        RunConfig(url=server.url, lag_bound_ms=1000),
    ):
        server.arrivals.clear()
        again = run_stage(trace, config)
        assert _answers_sent(server) == [[], recorded[:1], recorded]
        assert again.runner["answers_resent"] == 0


def test_an_answer_that_was_only_tool_calls_takes_its_own_turns_engine_answer(scripted):
    # turn 1's recorded answer is tool calls with content null: it gets turn 1's engine answer in
    # its content, and turn 0's stays with turn 0's message (a null left out of the spans once
    # moved turn 1's answer onto turn 0's message); the calls and their ids go as recorded
    from replay.trace import Trace, validate

    server = scripted(echo=True)
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}}
    u = [{"role": "user", "content": c} for c in ("alpha beta", "and then?", "why")]
    a0 = {"role": "assistant", "content": "RECORDED zero"}
    a1 = {"role": "assistant", "content": None, "tool_calls": [call]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "found"}
    bodies = [
        {"messages": [u[0]], "max_tokens": 2},
        {"messages": [u[0], a0, u[1]], "max_tokens": 2},
        {"messages": [u[0], a0, u[1], a1, tool, u[2]], "max_tokens": 2},
    ]
    base = trace_of_bodies(bodies, arrival_us=[0, 20_000, 40_000])
    df = base.df.with_columns(pl.Series("session_id", ["s"] * 3, dtype=pl.String))
    result = run_stage(
        Trace(df=validate(df, base.meta, source="<test>"), meta=base.meta),
        RunConfig(url=server.url, sessions="causal", lag_bound_ms=1000),
    )
    assert result.requests["error"].to_list() == ["none"] * 3
    assert _answers_sent(server) == [[], ["alpha beta "], ["alpha beta ", "and then? "]]
    last = max(server.arrivals, key=lambda a: a.t_unix_ns).body["messages"]
    assert last[3]["tool_calls"] == [call] and last[4] == tool
    assert result.runner["answers_resent"] == 3 and result.runner["answers_recorded"] == 0


def test_a_turn_whose_earlier_turn_failed_resends_that_answer_as_recorded(scripted):
    server = scripted(echo=True)
    trace, recorded = _chat_session(first_fault="http500")
    result = run_stage(trace, RunConfig(url=server.url, sessions="causal", lag_bound_ms=1000))
    assert result.requests["error"].to_list() == ["http_5xx", "none", "none"]
    assert _answers_sent(server) == [[], recorded[:1], [recorded[0], "and then? "]]
    assert result.runner["answers_resent"] == 1 and result.runner["answers_recorded"] == 2


def _agent_trace(fault_on: str | None = None):
    """An agent turn as a DAG: a0 asks for two tool calls, a1 and a2 fan out from it (each after a
    50 ms tool wait), a3 joins them (20 ms after the later one); b is another user's request."""
    from replay.trace import Trace, validate

    ids = ["a0", "b", "a1", "a2", "a3"]
    bodies = [{"max_tokens": 2, "x_fault": "http500" if rid == fault_on else "ok"} for rid in ids]
    base = trace_of_bodies(bodies, arrival_us=[0, 50_000, 350_000, 350_000, 700_000])
    df = base.df.with_columns(
        pl.Series("request_id", ids),
        pl.Series("session_id", ["a", "b", "a", "a", "a"]),
        pl.Series("depends_on", [[], [], ["a0"], ["a0"], ["a1", "a2"]], dtype=pl.List(pl.String)),
        pl.Series("wait_us", [None, None, 50_000, 50_000, 20_000], dtype=pl.Int64),
    )
    return Trace(df=validate(df, base.meta, source="<test>"), meta=base.meta)


def test_a_dag_replay_waits_for_every_dependency(scripted):
    # every response is held 0.4 s: the fan-out leaves together 50 ms after a0 ended, the join
    # 20 ms after the later of its two dependencies; b leaves on its own schedule
    server = scripted(headers_delay_s=0.4)
    trace = _agent_trace()
    result = run_stage(trace, RunConfig(url=server.url, lag_bound_ms=1000))  # auto: the trace has edges
    assert result.summary.sessions == "dag"
    df = {r["request_id"]: r for r in result.requests.iter_rows(named=True)}
    assert all(r["error"] == "none" for r in df.values())
    a0, b, a1, a2, a3 = (df[k] for k in ("a0", "b", "a1", "a2", "a3"))
    assert a1["release_ns"] == a2["release_ns"] == a0["end_ns"] + 50_000_000
    assert a3["release_ns"] == max(a1["end_ns"], a2["end_ns"]) + 20_000_000
    assert a3["sent_ns"] >= a3["release_ns"] and a1["sent_ns"] >= a1["release_ns"]
    assert b["release_ns"] == b["intended_ns"] and b["sent_ns"] < a0["end_ns"]
    assert not result.requests["after_failed_dependency"].any()
    assert result.summary.slip_ms is not None and result.summary.valid
    # the same trace with --sessions open: a1 goes at its own time, before a0 ended + 50 ms
    open_df = run_stage(trace, RunConfig(url=server.url, sessions="open", lag_bound_ms=1000)).requests
    rows = {r["request_id"]: r for r in open_df.iter_rows(named=True)}
    assert rows["a1"]["sent_ns"] < rows["a0"]["end_ns"] + 50_000_000


def test_a_request_after_a_failed_dependency_is_sent_and_marked(scripted):
    server = scripted(headers_delay_s=0.05)
    result = run_stage(_agent_trace(fault_on="a1"), RunConfig(url=server.url, sessions="dag", lag_bound_ms=1000))
    df = {r["request_id"]: r for r in result.requests.iter_rows(named=True)}
    assert df["a1"]["error"] == "http_5xx"
    assert df["a3"]["error"] == "none" and df["a3"]["sent_ns"] is not None
    assert [r for r in df if df[r]["after_failed_dependency"]] == ["a3"]
    assert result.summary.after_failed_dependency == 1
