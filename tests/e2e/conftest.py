"""Fixtures for the CLI end to end: running `replay` in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.conftest import scripted  # noqa: F401  (re-exported fixture)


def run_cli(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli.main", *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


@pytest.fixture
def cli():
    return run_cli
