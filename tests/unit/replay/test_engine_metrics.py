"""The engine's metrics during a stage (replay.engine_metrics): read over real HTTP from a
Prometheus endpoint whose values move while the stage runs."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from replay.engine_metrics import EngineSampler, describe, exhausted, identify


class _Endpoint:
    """GET /metrics: vLLM's names; each read moves the gauges and counters on."""

    def __init__(self, status: int = 200, text: str | None = None) -> None:
        self.reads, self.headers = 0, []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                endpoint.headers.append(dict(self.headers))
                k = endpoint.reads
                endpoint.reads += 1
                body = (
                    text
                    if text is not None
                    else f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {min(k, 8)}\n"
                    f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting {max(0, k - 8)}\n"
                    f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc {min(1.0, k / 10)}\n"
                    f"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total {100 * k}\n"
                    f"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total {25 * k}\n"
                    f"# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total {k // 4}\n"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    made = []

    def start(**kw) -> _Endpoint:
        made.append(_Endpoint(**kw))
        return made[-1]

    yield start
    for e in made:
        e.close()


def test_a_stage_gets_gauge_quantiles_and_counter_deltas(endpoint):
    ep = endpoint()
    with EngineSampler(ep.url, headers=[("X-Tenant", "t1")], interval_s=0.05) as sampler:
        time.sleep(0.8)
    m = sampler.summary()
    assert m["engine"] == "vllm" and m["samples"] >= 5
    reads = ep.reads  # the read before, the samples, the read after
    assert reads == m["samples"] + 2
    # gauges over the samples taken while it ran (reads 1 .. reads-2)
    assert m["running"]["max"] == min(reads - 2, 8) and m["kv_usage"]["max"] == pytest.approx(min(1.0, (reads - 2) / 10))
    assert m["waiting"]["max"] == max(0, reads - 2 - 8)
    # counters: after less before, whatever they were when the stage began
    assert m["prefix_cache_hit_rate"] == pytest.approx(0.25)
    assert m["preemptions"] == (reads - 1) // 4
    assert all(h.get("X-Tenant") == "t1" for h in ep.headers)
    assert describe(m).startswith(f"engine metrics (vllm names, {m['samples']} samples): kv_usage p50")


def test_an_endpoint_that_does_not_answer_or_is_not_an_engine_says_why(endpoint):
    missing = endpoint(status=404)
    with EngineSampler(missing.url, interval_s=0.05) as sampler:
        time.sleep(0.1)
    assert sampler.summary() == {"url": missing.url, "unavailable": f"GET {missing.url} answered HTTP 404"}
    assert missing.reads == 1  # not read again
    other = endpoint(text="# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n")
    with EngineSampler(other.url) as sampler:
        pass
    assert "no vLLM, SGLang or llama.cpp metric names" in sampler.summary()["unavailable"]
    assert describe(sampler.summary()).startswith("engine metrics: unavailable (")


def test_the_engine_is_told_by_its_names():
    assert identify({"vllm:num_requests_running"}) == "vllm"
    assert identify({"sglang:token_usage", "process_cpu"}) == "sglang"
    assert identify({"llamacpp:kv_cache_usage_ratio"}) == "llama-server"
    assert identify({"process_cpu_seconds_total"}) is None


def test_the_resource_that_ran_out():
    assert exhausted({"kv_usage": {"p50": 0.5, "max": 0.95}, "preemptions": 0}).startswith("the KV cache (usage max 95%")
    assert exhausted({"kv_usage": {"p50": 0.2, "max": 0.3}, "preemptions": 3}).endswith("3 preemptions)")
    assert (
        exhausted({"kv_usage": {"p50": 0.2, "max": 0.4}, "waiting": {"p50": 2, "max": 7}, "running": {"p50": 4, "max": 4}})
        == "the batch (up to 7 waited while 4 ran, KV usage max 40%)"
    )
    assert exhausted({"kv_usage": {"p50": 0.2, "max": 0.4}, "waiting": {"p50": 0, "max": 0}}) is None
    assert exhausted({"unavailable": "x"}) is None and exhausted(None) is None
