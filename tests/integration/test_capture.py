"""`replay capture` end to end: the official OpenAI SDK through the proxy to the embedded engine,
secrets, upstream faults, a crash under load, and a recorder that falls behind."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request

import httpx
import openai
import pytest
from presidio_analyzer import EntityRecognizer

from replay.sim import start_sim
from replay.trace import read_trace
from tests.integration.capture_proxy import KEY, capture, stored_bytes
from tests.scripted_server import ScriptedServer

AUTH = "sk-client-authorization-value-9f8e7d6c5b4a"
EMAIL = "margaret.hollis@example.org"
PROMPT_KEY = "sk-proj-Zx81KqWm29LpVnR4tY7uJ3hG5fD"


@pytest.fixture(scope="module")
def sim():
    # time_scale 0.2: an answer of 200 tokens streams for about a second (the disconnect test)
    server = start_sim(time_scale=0.2, served_model_name="sim")
    yield server
    server.stop()


def _client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=AUTH, max_retries=0, timeout=60, **kw)


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def test_the_openai_sdk_through_the_proxy_sees_what_it_sees_direct_and_every_request_is_recorded(sim, tmp_path):
    out = tmp_path / "cap"
    direct = _client(sim.url)
    msgs = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": f"I am {EMAIL}; my key is {PROMPT_KEY}. Tell me a story."},
    ]
    with capture(sim.url, out, "--segment-seconds", "1") as proxy:
        client = _client(proxy.url)
        # not streamed: the same answer, usage included
        a = client.chat.completions.create(model="sim", messages=msgs, max_tokens=12)
        b = direct.chat.completions.create(model="sim", messages=msgs, max_tokens=12)
        assert a.choices[0].message.content == b.choices[0].message.content
        assert (a.choices[0].finish_reason, a.usage.prompt_tokens, a.usage.completion_tokens) == (
            b.choices[0].finish_reason,
            b.usage.prompt_tokens,
            b.usage.completion_tokens,
        )
        # the next turn of that conversation
        turn2 = [*msgs, {"role": "assistant", "content": a.choices[0].message.content}, {"role": "user", "content": "And then?"}]
        client.chat.completions.create(model="sim", messages=turn2, max_tokens=5)
        # streamed without include_usage: the proxy asks for usage, the client never sees it
        s1 = list(client.chat.completions.create(model="sim", messages=msgs, max_tokens=12, stream=True))
        s2 = list(direct.chat.completions.create(model="sim", messages=msgs, max_tokens=12, stream=True))
        assert [c.choices[0].delta.content if c.choices else None for c in s1] == [
            c.choices[0].delta.content if c.choices else None for c in s2
        ]
        assert all(c.usage is None for c in s1) and all(c.usage is None for c in s2)
        # streamed with include_usage: the client gets its usage chunk
        s3 = list(
            client.chat.completions.create(
                model="sim", messages=msgs, max_tokens=12, stream=True, stream_options={"include_usage": True}
            )
        )
        assert s3[-1].usage is not None and s3[-1].usage.completion_tokens == 12
        # completions, not streamed
        c1 = client.completions.create(model="sim", prompt="Once upon a time", max_tokens=6)
        c2 = direct.completions.create(model="sim", prompt="Once upon a time", max_tokens=6)
        assert c1.choices[0].text == c2.choices[0].text
        # a client that goes away mid-stream
        stream = client.chat.completions.create(
            model="sim", messages=msgs, max_tokens=200, stream=True, extra_body={"ignore_eos": True}
        )
        got = [next(stream) for _ in range(3)]
        stream.close()
        assert len(got) == 3
        # a client that gives up waiting for a long answer that is not streamed
        impatient = openai.OpenAI(base_url=proxy.url + "/v1", api_key=AUTH, max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            impatient.chat.completions.create(model="sim", messages=msgs, max_tokens=3000, extra_body={"ignore_eos": True})
        # anything but chat / completions passes through unrecorded
        assert [m.id for m in client.models.list()] == [m.id for m in direct.models.list()]
        deadline = time.monotonic() + 30
        while "replay_capture_records_written_total 7.0" not in _metrics(proxy.url):
            assert time.monotonic() < deadline, _metrics(proxy.url)
            time.sleep(0.2)
        metrics = _metrics(proxy.url)
        assert 'replay_capture_outcomes_total{outcome="client_disconnected"} 2.0' in metrics, metrics
        assert 'replay_capture_records_dropped_total{reason="queue_full"} 0.0' in metrics
        # the models list is the one request passed through unrecorded (GET /metrics is the proxy's own)
        assert "replay_capture_unrecorded_total 1.0" in metrics
        # the rate the recorder keeps up with: records over its busy time, > 0 once it built any
        capacity = next(x for x in metrics.splitlines() if x.startswith("replay_capture_record_capacity "))
        assert float(capacity.split()[1]) > 0
        assert proxy.stop() == 0
        assert "Traceback" not in proxy.stderr()
        said = proxy.stderr().strip().splitlines()[-1]
        assert said.startswith("recorded 7 requests into ") and "the recorder keeps up with about " in said, said
        assert "requests/s (redaction on, " in said, said

    trace = read_trace(out)
    df = trace.df
    assert df.height == 7
    assert trace.meta.redaction_policy == "redacted" and trace.meta.source_format == "capture"
    report = json.loads(trace.meta.capture_report)
    assert report["recorded"] == 7 and report["no_redact"] is False and report["recorder_busy_us"] > 0
    assert json.loads(trace.meta.redaction_report)["entities"]["EMAIL_ADDRESS"] >= 1
    rows = df.to_dicts()
    assert [r["api"] for r in rows] == ["chat"] * 4 + ["completions", "chat", "chat"]
    assert [r["outcome"] for r in rows] == ["completed"] * 5 + ["client_disconnected"] * 2
    for r in rows[:6]:
        assert r["status"] == 200 and r["model"] == "sim" and r["input_tokens"] > 0
        assert 0 < r["ttfb_us"] <= r["e2e_us"]
    for r in rows[:5]:
        assert r["cached_tokens"] is not None
        assert r["finish_reason"] == "length" and r["output_tokens"] == r["max_tokens"]
    # the second request continues the first: same session, next turn
    assert (rows[1]["session_id"], rows[1]["parent_request_id"], rows[1]["turn"]) == (
        rows[0]["session_id"],
        rows[0]["request_id"],
        1,
    )
    # streamed: first token and each token-bearing chunk's time, as the client received them
    for r, chunks in ((rows[2], s1), (rows[3], s3)):
        assert r["ttft_us"] is not None and r["ttfb_us"] <= r["ttft_us"] <= r["e2e_us"]
        assert len(r["chunk_us"]) == sum(1 for c in chunks if c.choices and c.choices[0].delta.content)
        assert r["chunk_us"][0] == 0 and r["chunk_us"] == sorted(r["chunk_us"])
    assert rows[0]["chunk_us"] is None and rows[0]["ttft_us"] is None
    # the disconnected stream: recorded with what it got before the client left
    cut = rows[5]
    assert cut["output_tokens"] < 200 and cut["finish_reason"] is None
    # the one that gave up: the proxy closed the upstream request then, before any answer
    gave_up = rows[6]
    assert gave_up["status"] is None and gave_up["response"] is None and gave_up["e2e_us"] > 0
    # token counts and block hashes of the RAW text (before redaction)
    from replay.bodies import prompt_token_ids, text_slots
    from replay.blocks import block_hashes
    from replay.tokenizer import load_tokenizer

    raw_ids = prompt_token_ids([s.text for s in text_slots({"messages": msgs})], load_tokenizer("gpt2"))
    assert rows[0]["input_tokens"] == len(raw_ids)
    assert rows[0]["block_hashes"] == block_hashes(raw_ids, 16)
    # nothing raw stored: no Authorization value, no planted email or key, anywhere in the folder
    stored = stored_bytes(out)
    assert AUTH.encode() not in stored and b"Bearer" not in stored
    assert EMAIL.encode() not in stored and PROMPT_KEY.encode() not in stored
    assert KEY.encode() not in stored
    assert EMAIL not in json.dumps(rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float = 30.0) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def test_upstream_down_reset_slow_reach_the_client_as_502_504_and_are_recorded(tmp_path):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    scripted = ScriptedServer(stall_s=30).start()
    stalled = ScriptedServer(headers_delay_s=30).start()
    try:
        # down: nothing listens there
        with capture(f"http://127.0.0.1:{_free_port()}", tmp_path / "down", redact=False) as proxy:
            assert _post(proxy.url, body).status_code == 502
            assert proxy.stop() == 0
        # no headers within --timeout: 504
        with capture(stalled.url, tmp_path / "slow", "--timeout", "1", redact=False) as proxy:
            assert _post(proxy.url, body).status_code == 504
            assert proxy.stop() == 0
        # reset mid-stream, a stall mid-stream, an error status: then a good request still flows
        with capture(scripted.url, tmp_path / "mid", "--timeout", "1", redact=False) as proxy:
            with pytest.raises(httpx.RemoteProtocolError):
                _post(proxy.url, {**body, "x_fault": "reset"})
            with pytest.raises(httpx.RemoteProtocolError):
                _post(proxy.url, {**body, "x_fault": "stall"})
            r = _post(proxy.url, {**body, "stream": False, "x_fault": "http500"})
            assert r.status_code == 500
            ok = _post(proxy.url, body)
            assert ok.status_code == 200 and b"[DONE]" in ok.content
            # the client did not ask for usage: its usage-only chunk is taken out (and recorded)
            assert b'"usage"' not in ok.content and ok.content.count(b'"tok"') == 4
            assert proxy.stop() == 0
            assert "Traceback" not in proxy.stderr()
    finally:
        scripted.stop()
        stalled.stop()
    down = read_trace(tmp_path / "down").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in down] == [(None, "upstream_error")]
    slow = read_trace(tmp_path / "slow").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in slow] == [(None, "timeout")]
    assert slow[0]["e2e_us"] >= 1_000_000
    mid = read_trace(tmp_path / "mid").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in mid] == [
        (200, "upstream_error"),
        (200, "timeout"),
        (500, "upstream_error"),
        (200, "completed"),
    ]
    assert mid[0]["response"] and mid[1]["response"]  # what came before the fault is kept
    assert mid[3]["cached_tokens"] == 7 and mid[3]["output_tokens"] == 4
    assert read_trace(tmp_path / "mid").meta.redaction_policy == "none"
    assert json.loads(read_trace(tmp_path / "mid").meta.capture_report)["no_redact"] is True
    # a capture taken with --no-redact is redacted afterwards like any trace
    from redact import redact_file
    from redact.key import RedactionKey

    report = redact_file(tmp_path / "mid", tmp_path / "mid.parquet", RedactionKey(KEY.encode()), processes=1)
    assert report.written == 4
    redacted = read_trace(tmp_path / "mid.parquet")
    assert redacted.meta.redaction_policy == "redacted"
    assert redacted.df["outcome"].to_list() == [r["outcome"] for r in mid]


@pytest.mark.slow
def test_kill_9_under_load_loses_nothing_that_ended_a_second_before(sim, tmp_path):
    out = tmp_path / "cap"
    ended: dict[str, float] = {}  # session header -> when the client had the whole answer
    stop = threading.Event()

    def load(url: str, worker: int) -> None:
        with httpx.Client(timeout=30) as http:
            i = 0
            while not stop.is_set():
                sid = f"w{worker}-{i}"
                i += 1
                try:
                    r = http.post(
                        url + "/v1/chat/completions",
                        headers={"X-Session-Id": sid},
                        json={
                            "model": "sim",
                            "max_tokens": 4,
                            "messages": [{"role": "user", "content": f"request {sid} from {EMAIL}"}],
                        },
                    )
                except httpx.TransportError:
                    return  # the proxy is gone
                if r.status_code == 200:
                    ended[sid] = time.time()
                time.sleep(0.02)

    with capture(sim.url, out, "--segment-seconds", "1") as proxy:
        threads = [threading.Thread(target=load, args=(proxy.url, w)) for w in range(3)]
        for t in threads:
            t.start()
        time.sleep(4.0)
        killed_at = time.time()
        proxy.kill()
        stop.set()
        for t in threads:
            t.join(30)
    assert len(ended) > 30
    segments_before = sorted(p.name for p in out.glob("segment-*.parquet"))
    assert list(out.glob("spool-*.jsonl")), "the crash should leave a spool to recover"
    with capture(sim.url, out) as proxy:
        assert any(line.startswith("recovered ") for line in proxy.printed)
        assert proxy.stop() == 0
    trace = read_trace(out)
    recorded = set(trace.df["session_id"].to_list())
    must = {sid for sid, t in ended.items() if t <= killed_at - 1.0}
    assert must and must <= recorded, sorted(must - recorded)[:5]
    assert recorded <= set(ended)  # nothing invented
    assert trace.df["request_id"].is_unique().all()
    for seg in out.glob("segment-*.parquet"):
        assert len(read_trace(seg)) > 0
    assert len(list(out.glob("segment-*.parquet"))) > len(segments_before)
    assert EMAIL.encode() not in stored_bytes(out)


class SlowRecognizer(EntityRecognizer):
    """A recognizer that takes half a second a text: redaction far slower than the traffic."""

    def __init__(self):
        super().__init__(supported_entities=["SLOW_MARKER"], name="slow", supported_language="en")

    def load(self):
        pass

    def analyze(self, text, entities, nlp_artifacts=None):
        time.sleep(0.5)
        return []


@pytest.mark.slow
def test_when_redaction_falls_behind_traffic_flows_and_the_drops_are_counted(sim, tmp_path):
    import aiohttp

    from capture.proxy import CaptureProxy
    from capture.recorder import CaptureConfig
    from redact.key import RedactionKey

    n = 40
    cfg = CaptureConfig(
        upstream=sim.url,
        out=tmp_path / "cap",
        port=0,
        key=RedactionKey(KEY.encode()),
        queue_size=2,
        batch_size=1,
        hand_off=1,
        segment_seconds=0.5,
        extra_recognizers=(SlowRecognizer(),),
    )

    async def scenario():
        proxy = CaptureProxy(cfg)
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as http:

                async def one(i):
                    async with http.post(
                        proxy.url + "/v1/chat/completions",
                        json={"model": "sim", "max_tokens": 2, "messages": [{"role": "user", "content": f"distinct text {i}"}]},
                    ) as r:
                        return r.status, await r.json()

                answers = await asyncio.gather(*(one(i) for i in range(n)))
                async with http.get(proxy.url + "/metrics") as r:
                    metrics = await r.text()
                written_when_answered = proxy.counters()["recorded"]
        finally:
            await proxy.stop()
        return answers, written_when_answered, metrics, proxy.counters()

    answers, written_when_answered, metrics, counts = asyncio.run(scenario())
    assert all(status == 200 and a["choices"][0]["message"]["content"] for status, a in answers)
    # 40 texts at 0.5 s each is 20 s of redaction: every client had its answer while the
    # recorder was still on its first few
    assert written_when_answered < 5
    dropped = counts["dropped_queue_full"]
    assert dropped > 0 and counts["recorded"] + dropped == n
    # every drop happened as its request ended (hand_off=1), before the clients had all answers
    assert f'replay_capture_records_dropped_total{{reason="queue_full"}} {float(dropped)}' in metrics
    # what waits for the recorder then: queued by the data path, not yet taken by the recorder
    depth = next(x for x in metrics.splitlines() if x.startswith("replay_capture_queue_depth "))
    assert float(depth.split()[1]) >= 1
    trace = read_trace(tmp_path / "cap")
    assert len(trace) == counts["recorded"]
    assert json.loads(trace.meta.capture_report)["dropped_queue_full"] == dropped


@pytest.mark.slow
def test_when_the_backlog_is_full_whole_sessions_are_shed_never_a_session_s_middle(sim, tmp_path):
    import aiohttp

    from capture.proxy import CaptureProxy
    from capture.recorder import CaptureConfig
    from redact.key import RedactionKey

    sessions, turns = 8, 3
    cfg = CaptureConfig(
        upstream=sim.url,
        out=tmp_path / "cap",
        port=0,
        key=RedactionKey(KEY.encode()),
        queue_size=2,
        batch_size=1,
        hand_off=1,
        segment_seconds=0.5,
        extra_recognizers=(SlowRecognizer(),),
    )

    async def scenario():
        proxy = CaptureProxy(cfg)
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as http:
                # turn 1 of every session, then turn 2 of every session, ...: the backlog fills
                # while sessions are open
                for turn in range(1, turns + 1):
                    for s in range(sessions):
                        msgs = [{"role": "user", "content": f"session {s} turn {t}"} for t in range(1, turn + 1)]
                        async with http.post(
                            proxy.url + "/v1/chat/completions",
                            json={"model": "sim", "max_tokens": 2, "messages": msgs},
                            headers={"X-Session-Id": f"s{s}"},
                        ) as r:
                            assert r.status == 200
                            await r.read()
        finally:
            await proxy.stop()
        return proxy.counters()

    counts = asyncio.run(scenario())
    shed, full = counts["dropped_session_shed"], counts["dropped_queue_full"]
    assert full > 0 and shed > 0, counts
    assert counts["recorded"] + full + shed + counts["dropped_backlog"] == sessions * turns
    trace = read_trace(tmp_path / "cap")
    report = json.loads(trace.meta.capture_report)
    assert (report["dropped_session_shed"], report["dropped_queue_full"]) == (shed, full)
    recorded: dict[str, list[int]] = {}
    for row in trace.df.sort("arrival_us").to_dicts():
        last = json.loads(row["body"])["messages"][-1]["content"]
        recorded.setdefault(row["session_id"], []).append(int(last.rsplit(" ", 1)[1]))
    # each session recorded is its first turns, in order, with nothing missing in between
    for got in recorded.values():
        assert got == list(range(1, len(got) + 1)), recorded


def test_a_second_capture_into_the_same_folder_is_refused(tmp_path):
    import subprocess
    import sys

    from tests.integration.capture_proxy import ROOT

    upstream = f"http://127.0.0.1:{_free_port()}"
    with capture(upstream, tmp_path / "cap", redact=False) as first:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "replay.cli.main",
                "capture",
                "--upstream",
                upstream,
                "--listen",
                "127.0.0.1:0",
                "--out",
                str(tmp_path / "cap"),
                "--no-redact",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"error: --out {tmp_path / 'cap'}: another capture is recording into this folder"
        ]
        assert _post(first.url, {"messages": []}).status_code == 502  # the first goes on
        assert first.stop() == 0


def test_a_client_that_hangs_up_after_done_got_a_completed_answer(tmp_path):
    # The openai SDK stops reading at [DONE]; when the chunked terminator comes later, the proxy's
    # last write finds the client gone. That exchange is complete (on CI it was once recorded as
    # an upstream error against llama-server); a client that leaves before [DONE] is not.
    scripted = ScriptedServer(stall_s=0.5).start()
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    try:
        with capture(scripted.url, tmp_path / "cap", redact=False) as proxy:
            for body in ({**chat, "x_fault": "slow_end"}, {**chat, "x_fault": "stall"}):
                with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, timeout=30) as r:
                    for line in r.iter_lines():
                        if line == "data: [DONE]" or body["x_fault"] == "stall":
                            break
                time.sleep(0.8)  # the rest of the answer reaches the proxy, and the client is gone
            assert proxy.stop() == 0
    finally:
        scripted.stop()
    rows = read_trace(tmp_path / "cap").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in rows] == [(200, "completed"), (200, "client_disconnected")]
    assert rows[0]["output_tokens"] == 3


def test_answers_pass_byte_for_byte(tmp_path):
    scripted = ScriptedServer(chunk_delay_s=0.01).start()
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    cases = [
        {**chat, "stream": True, "stream_options": {"include_usage": True}},  # nothing to take out
        chat,  # a JSON answer
        {**chat, "stream": False, "x_fault": "http404"},  # an error answer
    ]
    try:
        with capture(scripted.url, tmp_path / "cap", redact=False) as proxy:
            for body in cases:
                direct = _post(scripted.url, body)
                via = _post(proxy.url, body)
                assert (via.status_code, via.content) == (direct.status_code, direct.content)
                assert via.headers["content-type"] == direct.headers["content-type"]
            # a streamed answer arrives a chunk at a time, not at its end
            with httpx.stream(
                "POST", proxy.url + "/v1/chat/completions", timeout=30, json={**chat, "max_tokens": 40, "stream": True}
            ) as r:
                reads = [time.monotonic() for _ in r.iter_raw()]
            assert len(reads) >= 10 and reads[-1] - reads[0] >= 0.2  # 40 chunks 10 ms apart
            assert proxy.stop() == 0
    finally:
        scripted.stop()
    rows = read_trace(tmp_path / "cap").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in rows] == [
        (200, "completed"),
        (200, "completed"),
        (404, "completed"),
        (200, "completed"),
    ]
    assert len(rows[3]["chunk_us"]) == 40 and rows[3]["chunk_us"][-1] >= 200_000
