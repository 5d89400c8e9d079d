"""https targets: the embedded engine behind Debian's nginx terminating TLS with a certificate
signed by a private CA, as a production endpoint sits behind a gateway. The runner (rustls), the target check
and the engine-metrics reads (Python's ssl) trust the same certificates: the system's roots,
else --ca-cert alone, else none (--insecure); a certificate nobody trusts stops the run before
any stage with one line naming the URL."""

from __future__ import annotations

import json

import pytest

from replay.config import RunConfig
from replay.errors import ConfigError, TargetError
from replay.runner import run_stage
from replay.sim import SimConfig, start_sim
from replay.targets.url import check_target
from tests.e2e.conftest import run_cli
from tests.integration.conftest import trace_of_bodies
from tests.integration.nginx import start_gateway


@pytest.fixture
def gateway(tmp_path):
    """nginx on https://localhost:PORT in front of the embedded engine (fast modelled time)."""
    with start_sim(SimConfig(time_scale=0.05)) as engine:
        gw = start_gateway(engine.url, tmp_path / "nginx")
        try:
            yield gw
        finally:
            gw.stop()


def chat_trace(n: int, gap_ms: int = 20):
    bodies = [{"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": f"question {i} " * 20}]} for i in range(n)]
    return trace_of_bodies(bodies, arrival_us=[i * gap_ms * 1000 for i in range(n)])


def test_a_stage_through_a_tls_gateway_trusting_its_certificate(gateway):
    stage = run_stage(chat_trace(30), RunConfig(url=gateway.url, ca_cert=str(gateway.ca), lag_bound_ms=50))
    df = stage.requests
    assert df["error"].to_list() == ["none"] * 30, df["error_detail"].to_list()
    assert df["completion_tokens"].to_list() == [4] * 30
    s = stage.summary
    assert s.completed == 30
    # the engine's /metrics, read through the gateway under the same certificate rule
    metrics = s.engine_metrics
    assert metrics.get("unavailable") is None and metrics["engine"] == "vllm", metrics
    # connections were opened, handshakes and all, before t0
    assert s.runner["warm_connections"] >= 1 and s.runner["warm_detail"] == "", s.runner


def test_insecure_skips_the_check_and_a_private_ca_without_it_fails(gateway, tmp_path):
    stage = run_stage(chat_trace(5), RunConfig(url=gateway.url, insecure=True, lag_bound_ms=50))
    assert stage.requests["error"].to_list() == ["none"] * 5
    with pytest.raises(TargetError, match=r"^https://localhost:\d+: TLS certificate not accepted .*--ca-cert"):
        check_target(gateway.url, context=RunConfig(url=gateway.url).ssl_context())
    with pytest.raises(ConfigError, match="--ca-cert and --insecure"):
        RunConfig(url=gateway.url, ca_cert=str(gateway.ca), insecure=True)
    with pytest.raises(ConfigError, match="--ca-cert: '/nonexistent.pem' is not a file"):
        RunConfig(url=gateway.url, ca_cert="/nonexistent.pem")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    with pytest.raises(ConfigError, match=r"--ca-cert: '.*not\.pem' holds no usable PEM certificate"):
        RunConfig(url=gateway.url, ca_cert=str(not_pem))


def test_the_cli_stops_before_any_stage_on_an_untrusted_certificate(gateway, tmp_path):
    trace = tmp_path / "t.parquet"
    chat_trace(6).write(trace)
    out = tmp_path / "res"
    done = run_cli("run", str(trace), "--url", gateway.url, "--out", str(out))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and gateway.url in lines[0] and "certificate" in lines[0], done.stderr
    assert not list(out.glob("stage*")), "no stage ran"
    done = run_cli(
        "run", str(trace), "--url", gateway.url, "--ca-cert", str(gateway.ca), "--out", str(out), "--lag-bound-ms", "50", "--json"
    )
    assert done.returncode == 0, done.stderr
    stage = json.loads(done.stdout)["stages"][0]
    assert stage["completed"] == 6 and stage["errors"] == {}
