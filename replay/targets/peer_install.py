"""Installing the peer benchmark tools whose readers our exports are checked against, once per
machine, each into its own virtualenv (they pin their own pydantic / transformers / numpy).

``cache_dir()/peers/<name>-<version>/`` per peer (:data:`PEERS`). :func:`install_peer` creates
the venv, pip-installs the pinned release, checks that the reader imports, and only then writes a
marker file, so an interrupted install is redone rather than trusted. :func:`peer_python` finds
an installed one (or ``$FAITHFUL_REPLAY_<NAME>_PYTHON``).

- ``aiperf`` 0.13.0 (1.2 GB; 1.5 min with three installs in parallel, 3.3 min alone on a shared
  2-core machine, 2026-12-07): its ``dag_jsonl`` loader
  (``aiperf.dataset.loader.dag_jsonl.DagJsonlLoader``).
- ``inference-perf`` 0.7.0 (35 MB, 6 s): it requires Python >= 3.12 and its dependencies
  (transformers, datasets, boto3, ...) for the benchmark itself; the OTel replay graph builder
  (``inference_perf/datagen/replay/otel_trace_to_replay_graph.py`` and its three sibling
  modules) uses the standard library only, so the wheel is installed without dependencies and
  ``--ignore-requires-python``, and :data:`INFERENCE_PERF_GRAPH` imports that module without the
  package's ``__init__`` (which imports the rest).

GuideLLM is not here: its trace reader imports torch (a 5.9 GB venv), so its format is checked
against its documented fields (``tests/unit/capture/test_export_peers.py``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from replay.errors import TargetError
from replay.llamacpp_sdist import cache_dir

__all__ = ["PEERS", "INFERENCE_PERF_GRAPH", "Peer", "peer_dir", "peer_python", "install_peer"]

# Run by the inference-perf venv's python before a script that uses ``graph``: the replay graph
# module, imported with empty parent packages (their __init__ files import the whole benchmark).
INFERENCE_PERF_GRAPH = """
import importlib, importlib.util, pathlib, sys, types
_root = pathlib.Path(importlib.util.find_spec("inference_perf").submodule_search_locations[0])
for _name, _sub in (("inference_perf", ""), ("inference_perf.datagen", "datagen"),
                    ("inference_perf.datagen.replay", "datagen/replay")):
    _m = types.ModuleType(_name)
    _m.__path__ = [str(_root / _sub)]
    sys.modules[_name] = _m
graph = importlib.import_module("inference_perf.datagen.replay.otel_trace_to_replay_graph")
"""


@dataclass(frozen=True)
class Peer:
    """A peer tool: its PyPI package and version, extra pip arguments, and the import check."""

    package: str
    version: str
    pip_args: tuple[str, ...]
    check: str

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


PEERS: dict[str, Peer] = {
    "aiperf": Peer("aiperf", "0.13.0", (), "from aiperf.dataset.loader.dag_jsonl import DagJsonlLoader"),
    "inference-perf": Peer(
        "inference-perf",
        "0.7.0",
        ("--no-deps", "--ignore-requires-python"),
        INFERENCE_PERF_GRAPH + "graph.build_raw_calls, graph.build_graph\n",
    ),
}
_MARKER = "INSTALLED"


def _peer(name: str) -> Peer:
    if name not in PEERS:
        raise TargetError(f"peer '{name}' unknown (known: {', '.join(PEERS)})")
    return PEERS[name]


def peer_dir(name: str) -> Path:
    """The venv's folder: ``cache_dir()/peers/<name>-<version>``."""
    return cache_dir() / "peers" / f"{name}-{_peer(name).version}"


def _env_var(name: str) -> str:
    return f"FAITHFUL_REPLAY_{name.upper().replace('-', '_')}_PYTHON"


def peer_python(name: str) -> Path | None:
    """A python that has the peer: ``$FAITHFUL_REPLAY_<NAME>_PYTHON``, else the cached venv's, else None."""
    env = os.environ.get(_env_var(name))
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise TargetError(f"${_env_var(name)}={env}: no such file")
        return path
    root = peer_dir(name)
    python = root / "bin" / "python"
    return python if (root / _MARKER).is_file() and python.exists() else None


def _say(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


def install_peer(name: str, progress: Callable[[str], None] | None = _say, force: bool = False) -> Path:
    """Install (once) and return the venv python that has peer ``name``; TargetError on failure."""
    say = progress or (lambda _msg: None)
    root = peer_dir(name)
    if not force and (root / _MARKER).is_file():
        return root / "bin" / "python"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (root / _MARKER).is_file():
            return root / "bin" / "python"
        return _install(PEERS[name], root, say)


def _install(peer: Peer, root: Path, say: Callable[[str], None]) -> Path:
    started = time.monotonic()
    if root.exists():
        say(f"removing an unfinished install at {root}")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log_path = root / "install.log"
    python = root / "bin" / "python"
    say(f"installing {peer.spec} into {root}; log: {log_path}")
    with open(log_path, "w", buffering=1) as log:
        for step, cmd in (
            ("venv", [sys.executable, "-m", "venv", str(root)]),
            ("install", [str(python), "-m", "pip", "install", "--no-input", *peer.pip_args, peer.spec]),
            ("check", [str(python), "-c", peer.check]),
        ):
            log.write(f"$ {' '.join(cmd)}\n")
            env = dict(os.environ)
            env.pop("PYTHONPATH", None)  # the venv must not see the project's packages
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            if rc != 0:
                tail = " | ".join(x.strip() for x in log_path.read_text(errors="replace").strip().splitlines()[-6:])
                raise TargetError(f"{peer.package} install ({step}) exited {rc}: {tail}")
    (root / _MARKER).write_text(f"{peer.spec}\n")
    say(f"installed {peer.spec} in {time.monotonic() - started:.0f}s: {python}")
    return python
