"""Shared pytest fixtures: the public traces in ../shared/data, the real tokenizer, and small
traces built in code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The folder of public traces; tests that use it skip when it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"public traces not found at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture(scope="session")
def gpt2():
    """The real gpt2 tokenizer (built from llama.cpp's vocab on first use, then cached)."""
    from replay.tokenizer import load_tokenizer

    return load_tokenizer("gpt2")


@pytest.fixture
def make_trace() -> Callable[..., object]:
    """Build a small valid Trace in code; keyword arguments override columns or metadata."""
    from replay.trace import Trace, TraceMeta, validate

    def make(n: int = 4, meta: TraceMeta | None = None, **columns: object) -> Trace:
        df = pl.DataFrame(
            {
                "request_id": [f"r{i}" for i in range(n)],
                "session_id": ["s0" if i % 2 == 0 else None for i in range(n)],
                "parent_request_id": [None] + [f"r{i - 1}" for i in range(1, n)],
                "turn": list(range(n)),
                "api": ["chat" if i % 2 == 0 else "completions" for i in range(n)],
                "model": ["m"] * n,
                "arrival_us": [i * 1000 for i in range(n)],
                "body": [f'{{"prompt":"x{i}","max_tokens":{i + 1}}}' for i in range(n)],
                "input_tokens": [10 * i for i in range(n)],
                "output_tokens": [i + 1 for i in range(n)],
                "max_tokens": [i + 1 for i in range(n)],
                "block_hashes": pl.Series([list(range(i)) for i in range(n)], dtype=pl.List(pl.UInt64)),
                "cached_tokens": [None] + [0] * (n - 1),
                "status": [200] * n,
                "ttft_us": [100 + i for i in range(n)],
                "e2e_us": [1000 + i for i in range(n)],
            }
        )
        if columns:
            df = df.with_columns(**columns)
        meta = meta or TraceMeta(t0_unix_us=1_700_000_000_000_000, source_format="test")
        return Trace(validate(df, meta, source="fixture"), meta)

    return make
