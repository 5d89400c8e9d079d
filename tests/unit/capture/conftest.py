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
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n"
                                for line in lines), encoding="utf-8")
        return path

    return write
