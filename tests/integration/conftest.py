"""Fixtures for tests that talk real HTTP over loopback: the scripted SSE server and small traces."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from replay.trace import Trace, TraceMeta, validate
from tests.scripted_server import ScriptedServer


def trace_of_bodies(bodies: list[dict], arrival_us: list[int] | None = None, api: str = "chat") -> Trace:
    """A valid Trace whose rows carry exactly these bodies (output lengths from their max_tokens)."""
    n = len(bodies)
    max_tokens = [b.get("max_tokens", 4) for b in bodies]
    df = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "api": [api] * n,
            "model": ["m"] * n,
            "arrival_us": arrival_us if arrival_us is not None else [i * 10_000 for i in range(n)],
            "body": [json.dumps(b) for b in bodies],
            "input_tokens": [11] * n,
            "output_tokens": max_tokens,
            "max_tokens": max_tokens,
        }
    )
    meta = TraceMeta(source_format="test", tokenizer="none")
    return Trace(df=validate(df, meta, source="<test>"), meta=meta)


def in_flight_at_sends(df) -> np.ndarray:
    """How many requests were open just after each send (sent by then, not yet ended)."""
    sent, end = df["sent_ns"].to_numpy(), df["end_ns"].to_numpy()
    return np.array([int(((sent <= t) & (end > t)).sum()) for t in sent])


@pytest.fixture
def scripted():
    servers: list[ScriptedServer] = []

    def start(**kwargs) -> ScriptedServer:
        server = ScriptedServer(**kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()
