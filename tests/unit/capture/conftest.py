"""Fixtures for the importer tests: JSON Lines files written in the test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def jsonl(tmp_path) -> Callable[..., Path]:
    """Write ``lines`` (dicts are JSON-encoded, strings written as they are) to a file, one a
    line, and return its path."""

    def write(lines: list, name: str = "log.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8")
        return path

    return write


@pytest.fixture
def imported(tmp_path) -> Callable[..., object]:
    """``imported(importer, *args, **kw)``: run a streaming importer (``import_log``,
    ``import_openai``, ...) into a new Trace file under tmp_path and read that file back."""
    from itertools import count

    from replay.trace import read_trace

    numbers = count()

    def run(importer, *args, **kw):
        out = tmp_path / f"imported-{next(numbers)}.parquet"
        return read_trace(importer(*args, out, **kw).path)

    return run
