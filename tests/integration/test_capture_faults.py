"""`replay capture` when its own side fails, and what it must never store: redaction that raises,
a recorder that dies, secrets in headers and query strings, the session header, an upstream
that resets before its headers, the default listen address. Real HTTP on 127.0.0.1 through the
real proxy (in this process where the test reaches into it, else `replay capture` as the user
runs it)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import aiohttp
import httpx
import pytest
from presidio_analyzer import EntityRecognizer

from capture.proxy import CaptureProxy
from capture.recorder import CaptureConfig
from redact.key import RedactionKey
from replay.trace import read_trace
from tests.integration.capture_proxy import KEY, capture, stored_bytes

POISON = "poison-marker-7f3e9a"
EMAIL = "evelyn.castellano@example.net"
CHAT = "/v1/chat/completions"
# a streamed request that asks for usage itself: its answer passes byte for byte
USAGE = {"include_usage": True}


class RaisingRecognizer(EntityRecognizer):
    """A recognizer that raises on every text holding POISON: such a text cannot be analysed."""

    def __init__(self):
        super().__init__(supported_entities=["POISON_MARKER"], name="raising", supported_language="en")

    def load(self):
        pass

    def analyze(self, text, entities, nlp_artifacts=None):
        if POISON in text:
            raise RuntimeError("this recognizer fails")
        return []


def _chat(text: str, **kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 3, **kw}


async def _post(http: aiohttp.ClientSession, url: str, body: dict, headers=None) -> tuple[int, bytes]:
    async with http.post(url + CHAT, json=body, headers=headers) as r:
        return r.status, await r.read()


async def _metrics(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url + "/metrics") as r:
        return await r.text()


def _dropped(metrics: str, reason: str) -> float:
    prefix = f'replay_capture_records_dropped_total{{reason="{reason}"}} '
    return float(next(line for line in metrics.splitlines() if line.startswith(prefix))[len(prefix) :])


async def _until(proxy: CaptureProxy, name: str, value: int, timeout_s: float = 60.0) -> None:
    """Wait until the recorder's counter ``name`` reaches ``value`` (a bound, not a threshold)."""
    deadline = time.monotonic() + timeout_s
    while proxy.counters()[name] < value:
        assert time.monotonic() < deadline, proxy.counters()
        await asyncio.sleep(0.05)


def _run(cfg: CaptureConfig, scenario):
    """Start the proxy of ``cfg`` in this process, run ``scenario(proxy, http)``, stop it."""

    async def main():
        proxy = CaptureProxy(cfg)
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as http:
                return await scenario(proxy, http)
        finally:
            await proxy.stop()

    return asyncio.run(main())


# -- traffic first when the recorder's side fails ------------------------------------------------


@pytest.mark.slow
def test_when_redaction_raises_clients_get_their_answers_and_the_drops_are_counted(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    cfg = CaptureConfig(
        upstream=upstream.url,
        out=out,
        port=0,
        key=RedactionKey(KEY.encode()),
        segment_seconds=0.5,
        extra_recognizers=(RaisingRecognizer(),),
    )

    def poisoned(i):
        return [_chat(f"{POISON} {i}: write to {EMAIL}"), _chat(f"{POISON} streamed {i}", stream=True, stream_options=USAGE)]

    def scenario(bodies):
        async def run(proxy, http):
            answers = [(await _post(http, proxy.url, b), await _post(http, upstream.url, b)) for b in bodies]
            await _until(proxy, "requests_recorder_saw", len(bodies))
            return answers, await _metrics(http, proxy.url), proxy.counters()

        return run

    # every record fails redaction: each client gets the upstream's answer, byte for byte
    bodies = [b for i in range(3) for b in poisoned(i)]
    answers, metrics, counts = _run(cfg, scenario(bodies))
    for (status, via), (direct_status, direct) in answers:
        assert (status, via) == (direct_status, direct) and status == 200
    assert counts["dropped_redaction_failed"] == len(bodies) and counts["recorded"] == 0
    assert _dropped(metrics, "redaction_failed") == len(bodies)
    assert not list(out.glob("segment-*.parquet"))  # nothing to write, never the raw text
    stored = stored_bytes(out)
    assert POISON.encode() not in stored and EMAIL.encode() not in stored
    # the folder is no trace, and reading it says what was dropped
    _says_nothing_was_recorded(out, f"dropped_redaction_failed={len(bodies)}")

    # a restart into the folder: some fail, some do not; the trace's metadata counts every drop
    mixed = [_chat(f"clean {i}") for i in range(2)] + [_chat(f"{POISON} again")]
    answers, metrics, counts = _run(cfg, scenario(mixed))
    assert all(status == 200 for (status, _), _ in answers)
    assert (counts["recorded"], counts["dropped_redaction_failed"]) == (2, 1)
    trace = read_trace(out)
    assert sorted(json.loads(b)["messages"][0]["content"] for b in trace.df["body"]) == ["clean 0", "clean 1"]
    report = json.loads(trace.meta.capture_report)
    assert report["dropped_redaction_failed"] == len(bodies) + 1 and report["recorded"] == 2
    stored = stored_bytes(out)
    assert POISON.encode() not in stored and EMAIL.encode() not in stored


def test_when_the_recorder_dies_traffic_flows_and_the_drops_are_counted(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    cfg = CaptureConfig(upstream=upstream.url, out=out, port=0, key=None, hand_off=1)

    async def scenario(proxy, http):
        before = [await _post(http, proxy.url, _chat(f"before {i}")) for i in range(3)]
        await _until(proxy, "recorded", 3)
        # two more are handed to a recorder that is stopped, then killed before it reads them
        os.kill(proxy._proc.pid, signal.SIGSTOP)
        in_flight = [await _post(http, proxy.url, _chat(f"in flight {i}")) for i in range(2)]
        proxy._proc.kill()  # kill -9
        await asyncio.get_running_loop().run_in_executor(None, proxy._proc.join, 30)
        bodies = [b for i in range(4) for b in (_chat(f"after {i}"), _chat(f"after {i}", stream=True, stream_options=USAGE))]
        after = [(await _post(http, proxy.url, b), await _post(http, upstream.url, b)) for b in bodies]
        # the pump counts what it could not hand over when it next runs (it runs SCHED_IDLE:
        # behind the traffic's threads and this test's), so the count is awaited, then checked
        await _until(proxy, "dropped_recorder_error", len(in_flight) + len(after))
        return before + in_flight, after, await _metrics(http, proxy.url), proxy.counters()

    before, after, metrics, counts = _run(cfg, scenario)
    assert [status for status, _ in before] == [200] * 5
    for via, direct in after:
        assert via == direct and via[0] == 200
    assert "replay_capture_recorder_up 0.0" in metrics
    lost = 2 + len(after)
    assert counts["dropped_recorder_error"] == lost and counts["recorded"] == 3
    assert _dropped(metrics, "recorder_error") == lost
    # what it had written survives (the next start recovers the spool), and the drops are in
    # the trace's metadata
    _run(cfg, lambda proxy, http: _post(http, proxy.url, _chat("after the restart")))
    trace = read_trace(out)
    assert sorted(json.loads(b)["messages"][0]["content"] for b in trace.df["body"]) == [
        "after the restart",
        "before 0",
        "before 1",
        "before 2",
    ]
    assert json.loads(trace.meta.capture_report)["dropped_recorder_error"] == lost


def test_a_recorder_that_dies_before_writing_leaves_a_folder_that_names_the_drops(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    cfg = CaptureConfig(upstream=upstream.url, out=out, port=0, key=None, hand_off=1)

    async def scenario(proxy, http):
        proxy._proc.kill()  # kill -9 before a single request
        await asyncio.get_running_loop().run_in_executor(None, proxy._proc.join, 30)
        return [await _post(http, proxy.url, _chat(f"lost {i}")) for i in range(3)]

    assert [status for status, _ in _run(cfg, scenario)] == [200] * 3
    assert not list(out.glob("segment-*.parquet"))
    _says_nothing_was_recorded(out, "dropped_recorder_error=3")


def test_a_roll_that_fails_is_counted_and_tried_again_and_loses_nothing(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    cfg = CaptureConfig(upstream=upstream.url, out=out, port=0, key=None, hand_off=1, segment_seconds=0.2)
    ran = {}

    async def scenario(proxy, http):
        ran["proxy"] = proxy
        # a folder where the first segment must go: its rename fails (EISDIR, root included)
        (out / "segment-000001.parquet").mkdir()
        first = [await _post(http, proxy.url, _chat(f"first {i}")) for i in range(3)]
        await _until(proxy, "segment_roll_failed", 2)  # tried, and tried again
        metrics = await _metrics(http, proxy.url)
        spooled = (out / "spool-000001.jsonl").read_text()
        (out / "segment-000001.parquet").rmdir()
        await _until(proxy, "segments_written", 1)
        # the next one fails up to the stop: its rows stay in the spool for the next start
        (out / "segment-000002.parquet").mkdir()
        failed = proxy.counters()["segment_roll_failed"]
        second = [await _post(http, proxy.url, _chat(f"second {i}")) for i in range(2)]
        await _until(proxy, "segment_roll_failed", failed + 1)
        return first + second, metrics, spooled

    answers, metrics, spooled = _run(cfg, scenario)
    assert [status for status, _ in answers] == [200] * 5
    assert "replay_capture_recorder_up 1.0" in metrics
    prefix = "replay_capture_segment_roll_failures_total "
    assert float(next(x for x in metrics.splitlines() if x.startswith(prefix))[len(prefix) :]) >= 2
    assert sum('"request_id"' in line for line in spooled.splitlines()) == 3
    counts = ran["proxy"].counters()
    assert counts["recorded"] == 5 and counts["segments_written"] == 1
    assert read_trace(out / "segment-000001.parquet").df.height == 3
    (out / "segment-000002.parquet").rmdir()
    assert (out / "spool-000002.jsonl").exists()

    recovered = _run(cfg, lambda proxy, http: asyncio.sleep(0, proxy.recovered_rows))
    assert recovered == 2
    trace = read_trace(out)
    assert sorted(json.loads(b)["messages"][0]["content"] for b in trace.df["body"]) == [
        "first 0",
        "first 1",
        "first 2",
        "second 0",
        "second 1",
    ]
    report = json.loads(trace.meta.capture_report)
    assert report["segment_roll_failed"] == counts["segment_roll_failed"] >= 3
    assert report["recorded"] == 5


def _says_nothing_was_recorded(out, counts: str) -> None:
    """``replay inspect`` and ``replay run`` of the capture folder ``out`` (no segment) fail with
    one line naming what its spools counted."""
    import contextlib
    import io

    from replay.cli.main import main
    from replay.errors import TraceError

    said = f"{out.name}: a capture folder with no trace segments (segment-*.parquet): no request was recorded; its spool counts "
    with pytest.raises(TraceError) as e:
        read_trace(out)
    assert str(e.value).startswith(said) and counts in str(e.value)
    for argv in (["inspect", str(out)], ["run", str(out), "--url", "http://127.0.0.1:9"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(argv) == 2
        assert err.getvalue() == f"error: {e.value}\n"


# -- what is never stored, and what the session header sets ---------------------------------------

COOKIE = "sessionid=cookie-secret-41c7d2e8"
AZURE_KEY = "azure-api-key-5b9f0e3a7c21"
AUTH = "sk-authorization-value-0d6e2b9a"
QUERY_KEYS = ("query-api-key-8e1f4c", "query-key-2a7d9b", "query-token-6c3e1f")


def _wait_recorded(url: str, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while f"replay_capture_records_written_total {float(n)}" not in httpx.get(url + "/metrics").text:
        assert time.monotonic() < deadline, httpx.get(url + "/metrics").text
        time.sleep(0.1)


def test_cookies_api_keys_and_query_secrets_pass_to_the_upstream_and_are_never_stored(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    headers = {"Cookie": COOKIE, "api-key": AZURE_KEY, "Authorization": f"Bearer {AUTH}", "x-api-key": AZURE_KEY}
    query = {"api-version": "2024-06-01", "api_key": QUERY_KEYS[0], "key": QUERY_KEYS[1], "access_token": QUERY_KEYS[2]}
    secrets = (COOKIE.split("=")[1], AZURE_KEY, AUTH, *QUERY_KEYS)
    # --no-redact: nothing but the rule "headers and query strings are never stored" keeps them out
    with capture(upstream.url, out, "--segment-seconds", "600", redact=False) as proxy:
        for path, body in (
            ("/v1/chat/completions", _chat("visible prompt marker")),
            ("/v1/chat/completions", _chat("streamed marker", stream=True)),
            ("/v1/completions", {"model": "m", "prompt": "completion marker", "max_tokens": 2}),
        ):
            r = httpx.post(proxy.url + path, params=query, headers=headers, json=body, timeout=30)
            assert r.status_code == 200
        _wait_recorded(proxy.url, 3)
        spooled = stored_bytes(out)  # the spool, as written (fsynced) while the capture runs
        assert proxy.stop() == 0
    assert len(upstream.arrivals) == 3
    stored = stored_bytes(out)
    for when in (spooled, stored):
        assert b"visible prompt marker" in when and b"completion marker" in when  # it reads what is stored
        for secret in secrets:
            assert secret.encode() not in when, secret
    assert len(read_trace(out)) == 3


def test_a_non_default_session_header_sets_the_session_ids(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    sends = [
        ({"X-Conv-Id": "conv-a"}, "a first"),
        ({"X-Conv-Id": "conv-b"}, "b first"),
        ({"X-Conv-Id": "conv-a"}, "a second"),
        ({"X-Session-Id": "the-default-header"}, "not this header"),
    ]
    with capture(upstream.url, out, "--session-header", "X-Conv-Id", redact=False) as proxy:
        for headers, text in sends:
            assert httpx.post(proxy.url + CHAT, headers=headers, json=_chat(text), timeout=30).status_code == 200
        assert proxy.stop() == 0
    rows = {json.loads(r["body"])["messages"][0]["content"]: r for r in read_trace(out).df.to_dicts()}
    assert [rows[t]["session_id"] for t in ("a first", "b first", "a second")] == ["conv-a", "conv-b", "conv-a"]
    assert (rows["a second"]["turn"], rows["a second"]["parent_request_id"]) == (1, rows["a first"]["request_id"])
    # X-Session-Id is only a header now: the session comes from the conversation
    assert rows["not this header"]["session_id"] not in (None, "the-default-header", "conv-a", "conv-b")
    assert json.loads((out / "capture.json").read_text())["session_header"] == "X-Conv-Id"


# -- upstream faults, the listen address -----------------------------------------------------------


def test_an_upstream_that_drops_the_connection_before_its_headers_gives_502_and_the_proxy_goes_on(scripted, tmp_path):
    upstream = scripted()
    out = tmp_path / "cap"
    faults = ("reset_before_headers", "close_before_headers")
    with capture(upstream.url, out, redact=False) as proxy:
        for fault in faults:
            r = httpx.post(proxy.url + CHAT, json=_chat(fault, stream=True, x_fault=fault), timeout=30)
            assert r.status_code == 502 and r.json()["error"]["type"] == "proxy_error"
        ok = httpx.post(proxy.url + CHAT, json=_chat("after", stream=True), timeout=30)
        assert ok.status_code == 200 and b"[DONE]" in ok.content
        metrics = httpx.get(proxy.url + "/metrics").text
        assert 'replay_capture_outcomes_total{outcome="upstream_error"} 2.0' in metrics
        assert proxy.stop() == 0
        assert "Traceback" not in proxy.stderr()
    assert len(upstream.arrivals) == 3  # each reached the upstream
    rows = read_trace(out).df.to_dicts()
    assert [(r["status"], r["outcome"], r["response"]) for r in rows[:2]] == [(None, "upstream_error", None)] * 2
    assert (rows[2]["status"], rows[2]["outcome"], rows[2]["output_tokens"]) == (200, "completed", 3)


def test_without_listen_the_proxy_binds_loopback(tmp_path, monkeypatch):
    from replay.cli.main import build_parser, main

    args = build_parser().parse_args(["capture", "--upstream", "http://127.0.0.1:9", "--out", "x"])
    assert args.listen == ("127.0.0.1", 8080)
    # what `replay capture` without --listen hands the proxy
    seen = []
    monkeypatch.setattr("capture.proxy.run_capture", lambda cfg, on_ready=None: seen.append(cfg) or {})
    assert main(["capture", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "c"), "--no-redact"]) == 0
    assert (seen[0].host, seen[0].port) == ("127.0.0.1", 8080)
    assert CaptureConfig(upstream="u", out=tmp_path).host == "127.0.0.1"

    # and the socket it binds with that host (port 0: any free one)
    async def scenario(proxy, http):
        return [proxy.address]  # the listening socket's getsockname()

    cfg = CaptureConfig(upstream="http://127.0.0.1:9", out=tmp_path / "cap", host=seen[0].host, port=0, key=None)
    bound = _run(cfg, scenario)
    assert bound and all(host == "127.0.0.1" for host, *_ in bound)
