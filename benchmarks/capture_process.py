"""`replay capture` started as a user starts it (its own process and session), for the capture
benchmarks (proxy_overhead.py, capture_redaction.py): start, stop, its /metrics, peak RSS."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_capture(upstream: str, out: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """`replay capture --upstream UPSTREAM --out OUT FLAGS...` on a free loopback port, with a
    throwaway redaction key; returns the process and its URL once it listens."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "REPLAY_REDACT_KEY": "benchmark-throwaway-key-" + os.urandom(8).hex(),
    }
    cmd = [sys.executable, "-m", "replay.cli.main", "capture", "--upstream", upstream, "--listen", "127.0.0.1:0"]
    cmd += ["--out", str(out), *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    for line in proc.stdout:
        m = re.search(r"listening on (http://[\w.:\[\]]+)", line)
        if m:
            return proc, m.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("replay capture did not start")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to its process group (the recorder finishes what it holds), SIGKILL after 5 min."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def metrics(url: str) -> dict[str, float]:
    """Its /metrics, sample name (labels included) -> value."""
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def dropped(m: dict[str, float], reason: str) -> float:
    return m.get(f'replay_capture_records_dropped_total{{reason="{reason}"}}', 0.0)


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def descendants(pid: int) -> list[int]:
    """Its child processes, theirs, and so on (the recorder, the redaction workers)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            out.append(int(k))
            out.extend(descendants(int(k)))
    return out
