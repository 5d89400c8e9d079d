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
- ``guidellm`` 0.8.1 (440 MB, 23 s with a warm pip cache on a shared 2-core machine, 2026-12-07):
  the full install pulls torch (a 5.9 GB venv), which only its ``data/loaders/torch.py`` imports
  (reached from ``guidellm/data/__init__.py``), not the trace readers. The wheel is installed without dependencies, then the
  five its trace readers import (:attr:`Peer.deps`: datasets, which brings pyarrow and pandas,
  faker, loguru, pydantic, pydantic-settings); :data:`GUIDELLM_TRACE` imports
  ``guidellm/data/deserializers/{file,trace_minimal,trace_mooncake}.py`` with empty parent
  packages, and stands in a one-class ``transformers`` module: those files import
  ``PreTrainedTokenizerBase`` for annotations only (a 170 MB install; the tokenizer is the
  caller's). Its own deserializer factory, file reader (``datasets``' JSON loader), row checks
  and prompt builder then run as they are.
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

__all__ = ["PEERS", "INFERENCE_PERF_GRAPH", "GUIDELLM_TRACE", "Peer", "peer_dir", "peer_python", "install_peer"]


def _bare_packages(package: str, subpackages: tuple[str, ...]) -> str:
    """Python source that registers ``package`` and its ``subpackages`` (paths under it) as empty
    packages, so that a module under them imports without their ``__init__`` files."""
    names = ", ".join(repr(x) for x in ("", *subpackages))
    return f"""
import importlib, importlib.util, pathlib, sys, types
_root = pathlib.Path(importlib.util.find_spec({package!r}).submodule_search_locations[0])
for _sub in ({names},):
    _m = types.ModuleType(f"{package}.{{_sub}}".replace("/", ".").rstrip("."))
    _m.__path__ = [str(_root / _sub)]
    sys.modules[_m.__name__] = _m
"""


# Run by the inference-perf venv's python before a script that uses ``graph``: the replay graph
# module, imported with empty parent packages (their __init__ files import the whole benchmark).
INFERENCE_PERF_GRAPH = _bare_packages("inference_perf", ("datagen", "datagen/replay")) + (
    'graph = importlib.import_module("inference_perf.datagen.replay.otel_trace_to_replay_graph")\n'
)

# Run by the guidellm venv's python before a script that reads a trace: its file and trace
# deserializers registered (json_file; the trace_synthetic and mooncake kinds), with empty parent
# packages (guidellm.data's __init__ imports torch) and a stand-in for transformers, whose
# PreTrainedTokenizerBase those modules name in annotations only.
GUIDELLM_TRACE = (
    _bare_packages("guidellm", ("data", "data/deserializers", "scheduler", "utils"))
    + """
sys.modules["transformers"] = types.ModuleType("transformers")
sys.modules["transformers"].PreTrainedTokenizerBase = type("PreTrainedTokenizerBase", (), {})
for _mod in ("file", "trace_minimal", "trace_mooncake"):
    importlib.import_module(f"guidellm.data.deserializers.{_mod}")
from guidellm.data.deserializers.deserializer import DatasetDeserializerFactory
from guidellm.schemas.data.deserializers import FileDataArgs, MinimalTraceFormatArgs, MooncakeTraceFormatArgs
assert "torch" not in sys.modules
"""
)


@dataclass(frozen=True)
class Peer:
    """A peer tool: its PyPI package and version, extra pip arguments, and the import check;
    ``deps``: pinned requirements installed after it (for a package installed ``--no-deps``)."""

    package: str
    version: str
    pip_args: tuple[str, ...]
    check: str
    deps: tuple[str, ...] = ()

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
    "guidellm": Peer(
        "guidellm",
        "0.8.1",
        ("--no-deps",),
        GUIDELLM_TRACE + "assert DatasetDeserializerFactory.get_registered_object('mooncake')\n",
        ("datasets==5.2.0", "faker==40.63.0", "loguru==0.8.0", "pydantic==2.14.4", "pydantic-settings==2.16.3"),
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
            *([("deps", [str(python), "-m", "pip", "install", "--no-input", *peer.deps])] if peer.deps else []),
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
