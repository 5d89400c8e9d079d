"""A real local Ray cluster for tests and benchmarks: ``ray start --head`` plus worker nodes joined
to it, every process of this machine, each ``ray start --block`` a child of ours.

Each node gets its own ports and the cluster its own temp folder, so it never meets another Ray
on this machine; :meth:`LocalCluster.stop` ends our ``ray start`` processes (each takes its own
Ray processes down with it), never ``ray stop``, which would stop every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["LocalCluster"]

_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)


def _ray_command() -> str:
    """The `ray` CLI of this Python's Ray (beside the interpreter, else on PATH)."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def _free_ports(k: int) -> list[int]:
    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalCluster:
    """A head node and ``workers`` worker nodes of ``cpus`` logical CPUs each, on this machine."""

    def __init__(self, workers: int = 2, cpus: int = 2) -> None:
        self.workers, self.cpus = workers, cpus
        self.tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths
        self.procs: list[subprocess.Popen] = []
        self.address = ""

    def _node(self, *head_or_join: str) -> subprocess.Popen:
        ports = _free_ports(len(_PORT_FLAGS) + 2)
        args = [_ray_command(), "start", "--block", *head_or_join, "--num-cpus", str(self.cpus), "--temp-dir", str(self.tmp)]
        for flag, port in zip(_PORT_FLAGS, ports):
            args += [flag, str(port)]
        args += ["--min-worker-port", str(ports[-2]), "--max-worker-port", str(ports[-2] + 40)]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # as a driver connects by default
        with open(self.tmp / f"node{len(self.procs)}.log", "w") as log:  # the child keeps its own copy
            return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        from ray._private.services import get_node_ip_address

        port, dashboard = _free_ports(2)
        self.address = f"{get_node_ip_address()}:{port}"  # the address Ray's nodes report
        try:
            self.procs.append(
                self._node("--head", "--port", str(port), "--include-dashboard=false", "--dashboard-port", str(dashboard))
            )
            self._wait(1, timeout_s)
            for k in range(self.workers):  # one at a time: on 2 cores, together they time out
                self.procs.append(self._node("--address", self.address))
                self._wait(2 + k, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, nodes: int, timeout_s: float) -> None:
        """Until ``nodes`` nodes are alive (asked through a short-lived driver of its own)."""
        code = (
            "import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False); print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for k, p in enumerate(self.procs):
                if p.poll() is not None:
                    tail = (self.tmp / f"node{k}.log").read_text()[-1500:]
                    raise RuntimeError(f"ray start (node {k}) exited {p.returncode}:\n{tail}")
            out = subprocess.run(
                [sys.executable, "-c", code, self.address],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
            )
            if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(nodes)]:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the local Ray cluster did not reach {nodes} nodes in {timeout_s:.0f}s")

    def stop(self) -> None:
        """End each node's process group (``ray start --block`` and the Ray processes it
        started): SIGTERM, then SIGKILL to what is left a few seconds later."""
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        time.sleep(3)
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.procs = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
