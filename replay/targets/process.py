"""Starting an engine as a child process and holding it while a replay runs.

:class:`ProcessEngine` is the shared half of every adapter: it picks a free loopback port, starts
the command in its own process group with its output in a log file and its own scratch folder,
polls the health endpoint until the engine answers (or exits, or a timeout passes) and returns a
:class:`RunningEngine`. A failure to start is one TargetError line naming the engine, the reason,
the command and the last log lines joined with `` | ``. :meth:`RunningEngine.metrics` scrapes
``/metrics`` and maps the engine's own names onto :data:`replay.targets.engine.COMMON_METRICS`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from replay.errors import TargetError
from replay.targets.engine import Knob, check_config
from replay.targets.prometheus import Scrape, parse
from replay.targets.url import poll_ready

__all__ = ["MetricSpec", "ProcessEngine", "RunningEngine", "free_port", "normalize"]

# common name -> (candidate metric names, first found wins; how to combine label sets)
MetricSpec = Mapping[str, tuple[tuple[str, ...], str]]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def normalize(scrape: Scrape, spec: MetricSpec) -> dict[str, float]:
    """The common metric names an engine's scrape provides, per its ``spec``."""
    out: dict[str, float] = {}
    for common, (candidates, agg) in spec.items():
        for name in candidates:
            value = scrape.value(name, agg=agg)
            if value is not None:
                out[common] = value
                break
    return out


class ProcessEngine:
    """Base of the adapters that start an engine as a child process (see the module doc)."""

    name: ClassVar[str] = "engine"
    knobs: ClassVar[tuple[Knob, ...]] = ()
    # the knobs `replay optimize` tunes when not told which (--knobs): the ones that trade batch
    # size, admission and prefix caching on this engine
    default_knobs: ClassVar[tuple[str, ...]] = ()
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str] = "/metrics"
    metric_spec: ClassVar[MetricSpec] = {}
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 15.0
    defaults: Mapping[str, Any] = MappingProxyType({})  # the config under the caller's

    # --- what adapters provide ----------------------------------------------------------------
    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        raise NotImplementedError

    def environment(self, scratch: Path) -> dict[str, str]:
        """Extra environment for the process; ``scratch`` is removed when the engine stops."""
        return {}

    def preflight(self) -> None:
        """Raise TargetError when something the command needs is missing (binary, venv, ...)."""

    @classmethod
    def derive(cls, common: dict[str, float]) -> dict[str, float]:
        """Fill in common metrics an engine only exposes indirectly (adapters override)."""
        return common

    @classmethod
    def common_metrics(cls, scrape: Scrape) -> dict[str, float]:
        """The common metric names this engine's scrape provides (see COMMON_METRICS); a class
        method, so that a scrape of an engine someone else started is read the same way."""
        out = cls.derive(normalize(scrape, cls.metric_spec))
        if "prefix_cache_hit_rate" not in out and out.get("prefix_cache_queries"):
            out["prefix_cache_hit_rate"] = out.get("prefix_cache_hits", 0.0) / out["prefix_cache_queries"]
        return out

    # --- shared -------------------------------------------------------------------------------
    def check(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        return check_config(self.name, self.knobs, {**self.defaults, **(config or {})})

    def launch(
        self,
        config: Mapping[str, Any] | None = None,
        port: int = 0,
        *,
        log_path: str | Path | None = None,
        ready_timeout_s: float | None = None,
    ) -> RunningEngine:
        """Start with ``config``, wait for health, return the running engine.

        ``port`` 0 picks a free one. The log goes to ``log_path`` if given (kept afterwards),
        otherwise into the scratch folder (removed on stop). Raises TargetError if the engine
        exits, or is not healthy within ``ready_timeout_s`` (default: the adapter's).
        """
        checked = self.check(config)
        self.preflight()
        port = port or free_port()
        cmd = self.command(checked, port)
        scratch = Path(tempfile.mkdtemp(prefix=f"replay-{self.name}-"))
        log = Path(log_path) if log_path is not None else scratch / f"{self.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.environment(scratch)}
        started = time.monotonic()
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
                )
            except OSError as e:
                shutil.rmtree(scratch, ignore_errors=True)
                raise TargetError(f"{self.name}: cannot start `{shlex.join(cmd)}` ({e.strerror or e})") from e
        running = RunningEngine(self, cmd, proc, f"http://127.0.0.1:{port}", log, scratch, checked)
        try:
            running._wait_ready(ready_timeout_s or self.ready_timeout_s)
        except BaseException:
            running.stop()
            raise
        running.start_s = time.monotonic() - started
        return running


class RunningEngine:
    """A started engine: its URL, process, log and metrics; a context manager that stops it."""

    def __init__(
        self,
        engine: ProcessEngine,
        command: list[str],
        process: subprocess.Popen,
        url: str,
        log_path: Path,
        scratch: Path,
        config: dict[str, Any],
    ) -> None:
        self.engine = engine
        self.command = command
        self.process = process
        self.url = url
        self.log_path = log_path
        self.config = config
        self.start_s: float | None = None  # seconds from spawn to healthy
        self._scratch = scratch
        self._final_tail: list[str] | None = None

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive else f"exited {self.process.returncode}"
        return f"<RunningEngine {self.name} {self.url} pid={self.process.pid} {state}>"

    # --- health and shutdown ------------------------------------------------------------------
    def _wait_ready(self, timeout_s: float) -> None:
        def alive() -> None:
            code = self.process.poll()
            if code is not None:
                self._fail(f"exited with code {code} before it was ready")

        last = poll_ready(self.url, timeout_s, self.engine.health_path, alive=alive)
        if last is not None:
            self._fail(f"not healthy after {timeout_s:.0f}s ({last})")

    def _fail(self, reason: str) -> None:
        tail = " | ".join(line.strip() for line in self.logs_tail(8) if line.strip()) or "no output"
        cmd = shlex.join(self.command).replace("\n", "\\n")
        raise TargetError(f"{self.name}: {reason}: `{cmd}`; last log lines: {tail}")

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the engine and every process it started; returns the engine's exit code.

        SIGTERM to the engine, then (after ``timeout_s``) SIGTERM to what is left of its process
        group, so helpers such as vLLM's engine core and Python's resource tracker can exit and
        release shared memory, and SIGKILL for whatever still runs a few seconds later.
        """
        timeout_s = self.engine.stop_timeout_s if timeout_s is None else timeout_s
        if self.process.poll() is None:
            self._signal_leader(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        if self._group_alive():
            self._signal_group(signal.SIGTERM)
            deadline = time.monotonic() + max(timeout_s, 1.0)
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
                self.process.poll()
            self._signal_group(signal.SIGKILL)
        code = self.process.wait()
        if self._final_tail is None:
            self._final_tail = self._read_tail(200)
        if self._scratch.exists():
            shutil.rmtree(self._scratch, ignore_errors=True)
        return code

    def _signal_leader(self, sig: int) -> None:
        try:
            self.process.send_signal(sig)
        except ProcessLookupError:
            pass

    def _signal_group(self, sig: int) -> None:
        # the group is the one start_new_session made for this engine: its id is the engine's pid
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        self.process.poll()  # reap the leader, so that a zombie does not count
        try:
            os.killpg(self.process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    # --- logs and metrics ---------------------------------------------------------------------
    def _read_tail(self, n: int) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                data = f.read()
        except OSError:
            return []
        lines = data.decode("utf-8", errors="replace").splitlines()
        return lines[-n:] if n > 0 else []

    def logs_tail(self, n: int = 20) -> list[str]:
        """The last ``n`` lines of the engine's log (kept in memory once the engine stopped)."""
        if self._final_tail is not None and not self.log_path.exists():
            return self._final_tail[-n:] if n > 0 else []
        return self._read_tail(n)

    def scrape(self, timeout_s: float = 5.0) -> Scrape:
        """GET the metrics endpoint and parse it (TargetError naming the URL when it fails)."""
        url = self.url + self.engine.metrics_path
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310
                text = resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as e:
            raise TargetError(f"{self.name}: GET {url} failed ({getattr(e, 'reason', e)})") from e
        return parse(text, source=url)

    def metrics(self) -> dict[str, float]:
        """Common metric names (running, waiting, kv_usage, ...) plus every raw ``name{labels}`` sample."""
        scrape = self.scrape()
        return {**scrape.flat(), **self.engine.common_metrics(scrape)}
