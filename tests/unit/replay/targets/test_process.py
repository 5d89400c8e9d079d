"""Launching, health, metrics, logs and shutdown of an engine process, with a stand-in engine.

The stand-in is a small Python HTTP server started exactly as adapters start real engines: it
answers /health with 503 for a while (loading) and then 200, serves a Prometheus text on /metrics,
and can be told to exit early or ignore SIGTERM.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from replay.errors import TargetError
from replay.targets.engine import Knob, config_args
from replay.targets.process import ProcessEngine, free_port

STAND_IN = r"""
import http.server, signal, sys, time
port, mode, loading_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
print("stand-in: starting on", port, flush=True)
if mode == "crash":
    print("stand-in: error: model file not found: /nope.gguf", flush=True)
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *a: print("stand-in: ignoring SIGTERM", flush=True))
start = time.monotonic()
METRICS = (b"# TYPE fake:running gauge\nfake:running{slot=\"0\"} 1\nfake:running{slot=\"1\"} 2\n"
           b"# TYPE fake:hits counter\nfake:hits_total 7\n")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/health":
            ready = time.monotonic() - start >= loading_s
            self.send_response(200 if ready else 503); self.end_headers(); self.wfile.write(b"{}")
        elif self.path == "/metrics":
            self.send_response(200); self.end_headers(); self.wfile.write(METRICS)
        else:
            self.send_response(404); self.end_headers()
srv = http.server.HTTPServer(("127.0.0.1", port), H)
print("stand-in: ready", flush=True)
srv.serve_forever()
"""


@dataclasses.dataclass
class StandIn(ProcessEngine):
    mode: str = "ok"
    loading_s: float = 0.3
    ready_timeout_s: float = 20.0
    stop_timeout_s: float = 1.0

    name: ClassVar[str] = "stand-in"
    knobs: ClassVar[tuple[Knob, ...]] = (Knob("slots", "--slots", "int", range=(1, 8), doc="slots"),)
    metric_spec: ClassVar = {"running": (("fake:running",), "sum"), "prefix_cache_hits": (("fake:hits",), "sum")}

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        return [
            sys.executable,
            "-c",
            STAND_IN,
            str(port),
            self.mode,
            str(self.loading_s),
            *config_args(self.name, self.knobs, config),
        ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_launch_waits_for_health_then_serves_metrics_and_stops():
    with StandIn(loading_s=0.5).launch({"slots": 2}) as running:
        assert running.alive and running.start_s >= 0.5
        assert running.url.startswith("http://127.0.0.1:")
        assert running.command[-2:] == ["--slots", "2"] and running.config == {"slots": 2}
        m = running.metrics()
        assert m["running"] == 3 and m["prefix_cache_hits"] == 7
        assert m['fake:running{slot="1"}'] == 2 and m["fake:hits_total"] == 7
        assert any("stand-in: ready" in line for line in running.logs_tail(5))
        pid, scratch = running.process.pid, running._scratch
        assert scratch.is_dir()
    assert not running.alive and not _alive(pid)
    assert not scratch.exists()  # log and scratch removed ...
    assert any("stand-in: ready" in line for line in running.logs_tail(5))  # ... tail kept


def test_a_given_log_path_is_kept(tmp_path):
    log = tmp_path / "logs" / "engine.log"
    running = StandIn().launch(log_path=log)
    running.stop()
    assert "stand-in: ready" in log.read_text()


def test_an_engine_that_exits_is_one_target_error_with_its_last_log_lines():
    with pytest.raises(TargetError) as info:
        StandIn(mode="crash").launch()
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("stand-in: exited with code 3 before it was ready: `")
    assert "last log lines: stand-in: starting on" in msg
    assert " | stand-in: error: model file not found: /nope.gguf" in msg


def test_an_engine_never_healthy_times_out_and_is_stopped():
    # 5 s to become healthy: long enough for the stand-in to be up and answering 503 on a loaded
    # machine (with 1 s it was sometimes not listening yet, and the last failure was a refusal),
    # far short of its 60 s of loading, which the launch must not wait out
    with pytest.raises(TargetError, match=r"stand-in: not healthy after 5s \(HTTP 503\).*last log lines"):
        StandIn(loading_s=60).launch(ready_timeout_s=5)


def test_stop_kills_an_engine_that_ignores_sigterm():
    running = StandIn(mode="stubborn").launch()
    pid = running.process.pid
    code = running.stop(timeout_s=0.5)
    assert code == -signal.SIGKILL and not _alive(pid)  # it ignored SIGTERM: only SIGKILL ends it
    assert running.stop() == code  # idempotent


def test_bad_configs_fail_before_anything_starts():
    from replay.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--slots: 9 outside \[1, 8\]"):
        StandIn().launch({"slots": 9})


def test_a_missing_binary_is_a_target_error_naming_the_command():
    engine = StandIn()
    engine.command = lambda config, port: ["/nonexistent/engine-binary", "--port", str(port)]
    with pytest.raises(TargetError, match=r"stand-in: cannot start `/nonexistent/engine-binary --port \d+`"):
        engine.launch()


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
