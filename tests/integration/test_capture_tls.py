"""`replay capture` speaking TLS on both sides, as production clients and endpoints do: an https
listener (--tls-cert / --tls-key) the official openai SDK talks to, and an https upstream (Debian's
nginx terminating TLS in front of the embedded engine, its certificate signed by a private CA)
checked against --ca-cert, the system's roots, or nothing (--insecure)."""

from __future__ import annotations

import json
import ssl

import httpx
import openai
import pytest

from replay.sim import SimConfig, start_sim
from replay.trace import read_trace
from tests.integration.capture_proxy import capture
from tests.integration.nginx import private_ca, start_gateway

MSGS = [{"role": "user", "content": "Tell me about the weather in three words."}]


@pytest.fixture(scope="module")
def engine():
    with start_sim(SimConfig(time_scale=0.05, served_model_name="sim")) as server:
        yield server


def _client(url: str, verify) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1", api_key="sk-tls-test", max_retries=0, timeout=60, http_client=httpx.Client(verify=verify)
    )


def test_the_sdk_over_https_to_the_proxy_gets_what_it_gets_direct(engine, tmp_path):
    ca, cert, key = private_ca(tmp_path, names=("localhost", "127.0.0.1"))
    out = tmp_path / "cap"
    with capture(engine.url, out, "--tls-cert", str(cert), "--tls-key", str(key), redact=False) as proxy:
        assert proxy.url.startswith("https://127.0.0.1:")
        trusting = ssl.create_default_context(cafile=str(ca))
        with _client(proxy.url, verify=trusting) as via, _client(engine.url, verify=True) as direct:
            a = via.chat.completions.create(model="sim", messages=MSGS, max_tokens=6)
            b = direct.chat.completions.create(model="sim", messages=MSGS, max_tokens=6)
            assert a.choices[0].message.content == b.choices[0].message.content
            streamed = list(via.chat.completions.create(model="sim", messages=MSGS, max_tokens=6, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == a.choices[0].message.content
        assert all(c.usage is None for c in streamed)  # the usage chunk the proxy asked for is taken out
        # a client that does not trust the certificate never gets through, and nothing is recorded
        with _client(proxy.url, verify=True) as wary, pytest.raises(openai.APIConnectionError):
            wary.chat.completions.create(model="sim", messages=MSGS, max_tokens=2)
        # plain http to the TLS port is no request either
        with pytest.raises(httpx.HTTPError):
            httpx.post(proxy.url.replace("https://", "http://") + "/v1/chat/completions", json={}, timeout=10)
        assert proxy.stop() == 0
    rows = read_trace(out).df.to_dicts()
    assert [(r["status"], r["outcome"], r["output_tokens"]) for r in rows] == [(200, "completed", 6)] * 2
    assert rows[1]["cached_tokens"] is not None and len(rows[1]["chunk_us"]) >= 6  # the streamed one


def test_an_https_upstream_is_checked_against_ca_cert_or_not_at_all(engine, tmp_path):
    gateway = start_gateway(engine.url, tmp_path / "nginx")
    body = {"model": "sim", "messages": MSGS, "max_tokens": 4, "stream": True}
    try:
        # trusted through --ca-cert: answers pass, and are recorded
        with capture(gateway.url, tmp_path / "trusted", "--ca-cert", str(gateway.ca), redact=False) as proxy:
            r = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
            assert proxy.stop() == 0
        # the system's roots do not know the private CA: 502 naming the certificate, recorded
        with capture(gateway.url, tmp_path / "untrusted", redact=False) as proxy:
            r = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 502 and r.json()["error"]["type"] == "proxy_error"
            assert "certificate" in r.json()["error"]["message"], r.text
            assert proxy.stop() == 0
        # --insecure: encrypted, unchecked
        with capture(gateway.url, tmp_path / "insecure", "--insecure", redact=False) as proxy:
            r = httpx.post(proxy.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30)
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
            assert proxy.stop() == 0
    finally:
        gateway.stop()
    trusted = read_trace(tmp_path / "trusted").df.to_dicts()
    assert [(r["status"], r["outcome"], r["output_tokens"]) for r in trusted] == [(200, "completed", 4)]
    untrusted = read_trace(tmp_path / "untrusted").df.to_dicts()
    assert [(r["status"], r["outcome"]) for r in untrusted] == [(None, "upstream_error")]
    insecure = read_trace(tmp_path / "insecure")
    assert [(r["status"], r["outcome"]) for r in insecure.df.to_dicts()] == [(200, "completed")]
    assert json.loads(insecure.meta.capture_report)["recorded"] == 1


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tls-cert", "CERT"], "--tls-cert and --tls-key: TLS needs both"),
        (["--tls-cert", "/nonexistent.pem", "--tls-key", "KEY"], "--tls-cert /nonexistent.pem: no such file"),
        (["--ca-cert", "CERT"], "--ca-cert: only for an https:// --upstream"),
        (["--tls-cert", "KEY", "--tls-key", "KEY"], "tls_cert"),
    ],
)
def test_tls_flags_that_cannot_work_stop_with_one_line(tmp_path, flags, said):
    from tests.e2e.conftest import run_cli

    _, cert, key = private_ca(tmp_path)
    flags = [{"CERT": str(cert), "KEY": str(key)}.get(f, f) for f in flags]
    out = str(tmp_path / "c")
    done = run_cli("capture", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--out", out, "--no-redact", *flags)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
