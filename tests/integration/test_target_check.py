"""A wrong target is one TargetError naming the URL, raised before any stage sends a request."""

from __future__ import annotations

import socket

import pytest

from replay.config import RunConfig
from replay.errors import TargetError
from replay.runner import run_stage
from replay.sweep import sweep
from replay.targets.url import check_target
from tests.integration.conftest import trace_of_bodies


def closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) but never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def test_a_refused_connection_names_the_url():
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(TargetError, match=rf"^{url}: connection refused"):
        check_target(url)
    trace = trace_of_bodies([{"max_tokens": 2}] * 3)
    with pytest.raises(TargetError, match="connection refused"):
        run_stage(trace, RunConfig(url=url, rate=10.0, model="m"))  # also with --model given
    with pytest.raises(TargetError, match="connection refused"):
        sweep(trace, RunConfig(url=url), rates=[1.0, 2.0])


def test_a_server_that_never_answers_times_out(silent_port):
    url = f"http://127.0.0.1:{silent_port}"
    with pytest.raises(TargetError, match=rf"^{url}: no answer to GET /v1/models within 0.3s"):
        check_target(url, timeout_s=0.3)
    with pytest.raises(TargetError, match="no answer"):
        run_stage(trace_of_bodies([{"max_tokens": 2}]), RunConfig(url=url, connect_timeout_s=0.3))


def test_an_unknown_host_names_the_url():
    with pytest.raises(TargetError, match=r"^http://no-such-host\.invalid:8000: cannot connect"):
        check_target("http://no-such-host.invalid:8000")


def test_a_wrong_api_key_stops_the_sweep_before_any_request(scripted):
    server = scripted(api_key="sekrit")
    trace = trace_of_bodies([{"max_tokens": 2}] * 4)
    with pytest.raises(TargetError, match=r"GET /v1/models answered HTTP 401 \(Unauthorized\): check --api-key"):
        sweep(trace, RunConfig(url=server.url, api_key="wrong", lag_bound_ms=50), rates=[10.0, 20.0])
    with pytest.raises(TargetError, match="HTTP 401"):
        run_stage(trace, RunConfig(url=server.url, rate=10.0))
    assert server.arrivals == []  # no stage sent anything
    # the key goes with the probe as with every request
    result = sweep(trace, RunConfig(url=server.url, api_key="sekrit", lag_bound_ms=50), rates=[20.0])
    assert result.summaries[0].completed == 4
    # the target check (urllib) ran once per sweep or stage run, not once per stage; the runner's
    # warm-up connections each ask GET /v1/models too, with the key as well
    checks = [h for h in server.models_requests if h.get("User-Agent", "").startswith("Python-urllib")]
    assert len(checks) == 3
    assert checks[-1]["Authorization"] == "Bearer sekrit"
    warm = [h for h in server.models_requests if h not in checks]
    assert warm and all(h.get("Authorization") == "Bearer sekrit" for h in warm)


@pytest.mark.parametrize("status", [403, 500, 503])
def test_other_error_statuses_are_errors(scripted, status):
    server = scripted(models_status=status)
    with pytest.raises(TargetError, match=rf"^{server.url}: GET /v1/models answered HTTP {status}"):
        check_target(server.url)


def test_a_server_that_does_not_list_models_is_replayed(scripted):
    server = scripted(models_status=404)
    assert check_target(server.url) is None
    trace = trace_of_bodies([{"max_tokens": 2, "model": "m"}] * 3)
    result = run_stage(trace, RunConfig(url=server.url, rate=20.0, lag_bound_ms=50))
    assert result.summary.completed == 3
    assert {a.body["model"] for a in server.arrivals} == {"m"}  # the bodies keep their model


def test_a_listing_server_gives_its_models(scripted):
    server = scripted()
    assert check_target(server.url + "/v1/") == ["scripted"]
