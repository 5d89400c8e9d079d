"""The greedy output check's requests: temperature 0 and a fixed seed, over real loopback HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from optimizer import outputs


class _Capture(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append({"path": self.path, **body})
        answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": "same words"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def test_greedy_requests_send_temperature_0_and_a_fixed_seed():
    _Capture.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        bodies = [
            {"messages": [{"role": "user", "content": f"q{i}"}], "temperature": 0.9, "seed": 77, "model": "m"} for i in range(2)
        ]
        answers = outputs.greedy_answers(url, bodies, None)
    finally:
        server.shutdown()
        server.server_close()
    assert answers == ["same words", "same words"]
    sent = _Capture.bodies
    assert [b["path"] for b in sent] == ["/v1/chat/completions"] * 2
    for i, b in enumerate(sent):
        # the body's own sampling settings are replaced: greedy, the module's seed, every time
        assert b["temperature"] == 0 and b["seed"] == outputs.SEED == 0 and b["stream"] is False
        assert b["max_tokens"] == outputs.TOKENS and b["model"] == "m"
        # marked, so the sample shares no cached prefix with the workload
        assert b["messages"] == [{"role": "user", "content": f"{outputs.MARK}q{i}"}]
    assert bodies[0]["messages"][0]["content"] == "q0"  # the caller's bodies are left as they were


def test_the_mark_goes_before_the_first_message_only():
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": parts}]
    assert outputs.marked(messages) == [{"role": "system", "content": outputs.MARK + "sys"}, {"role": "user", "content": parts}]
    assert outputs.marked([{"role": "user", "content": parts}])[0]["content"] == [{"type": "text", "text": outputs.MARK}, *parts]
    assert outputs.marked([{"role": "assistant", "content": None}])[0]["content"] == outputs.MARK


def test_the_embedded_engine_takes_the_seed_and_answers_the_same_twice():
    from replay.targets import SimEngine

    bodies = [{"messages": [{"role": "user", "content": "tell me about the sea"}]}]
    with SimEngine(time_scale=0.01, served_model_name="sim").launch({}) as running:
        first = outputs.greedy_answers(running.url, bodies, "sim")
        second = outputs.greedy_answers(running.url, bodies, "sim")
    assert first == second and first[0]


@pytest.mark.slow
def test_the_sample_is_answered_before_the_stage_and_kept_out_of_its_counters():
    from optimizer import Objective, measure_on_engine
    from replay.config import RunConfig
    from replay.generate import GenerateConfig, generate
    from replay.targets import SimEngine

    trace = generate(GenerateConfig(n_requests=30, seed=1, rate=10))
    run = RunConfig(url="http://127.0.0.1:0", rate=8, requests=16, lag_bound_ms=50)
    measure = measure_on_engine(SimEngine(time_scale=0.05), trace, run, Objective("throughput"), baseline={"max_num_seqs": 4})
    m = measure({"max_num_seqs": 4})
    assert m.invalid is None and len(m.details["answers"]) == outputs.SAMPLE
    # the engine finished 16 + SAMPLE requests; the measurement's counters are the stage's 16
    assert m.details["summary"]["completed"] == m.details["counters"]["requests_finished"] == 16
