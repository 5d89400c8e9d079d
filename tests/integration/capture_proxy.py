"""Starting `replay capture` as the user does (its own process, real HTTP on 127.0.0.1) for tests."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "capture-test-key-0123456789abcdef"


class CaptureProcess:
    """A running `replay capture` (its own session: a kill reaches its recorder and workers too)."""

    def __init__(self, upstream: str, out: Path, *flags: str, redact: bool = True, start_timeout_s: float = 240.0):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        if redact:
            env["REPLAY_REDACT_KEY"] = KEY
        else:
            flags = (*flags, "--no-redact")
        self.stderr_path = out.parent / f"{out.name}.stderr.{time.monotonic_ns()}"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
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
                str(out),
                *flags,
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()
        self.printed: list[str] = []
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"capture did not start: {self.stderr()}") from None
            if line is None:
                raise AssertionError(f"capture exited {self.proc.wait()}: {self.stderr()}")
            self.printed.append(line)
            if line.startswith("listening on "):
                self.url = line.split()[2]
                return

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM, as a service manager stops it: requests in flight end, the spool is rolled."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"capture did not stop: {self.stderr()}") from None
        self._close()
        return rc

    def _close(self) -> None:
        self._pumper.join(10)
        self.proc.stdout.close()
        self._stderr.close()

    def kill(self) -> None:
        """kill -9 of the proxy, its recorder and the redaction workers at once."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        self._close()


@contextmanager
def capture(upstream: str, out: Path, *flags: str, redact: bool = True):
    proc = CaptureProcess(upstream, out, *flags, redact=redact)
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            proc.kill()


def stored_bytes(folder: Path) -> bytes:
    """Every byte of every file in the capture folder, and the decoded rows and metadata of its
    Parquet segments (compressed on disk: their raw bytes would not show a stored value)."""
    import json

    import pyarrow.parquet as pq

    out = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out.append(p.read_bytes())
            if p.suffix == ".parquet":
                table = pq.read_table(p)
                out.append(json.dumps(table.to_pylist(), default=str, ensure_ascii=False).encode())
                out.extend(k + b"=" + v for k, v in (table.schema.metadata or {}).items())
    return b"\n".join(out)
