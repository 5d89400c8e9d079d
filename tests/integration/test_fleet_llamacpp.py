"""A fleet of two real llama.cpp ``llama-server`` replicas (tiny random-weight model, loopback):
session routing keeps each session on one replica, every request is answered, and the results'
``replica`` column says which server answered."""

from __future__ import annotations

import contextlib

import polars as pl
import pytest

from replay.config import RunConfig
from replay.fleet import Target
from replay.runner import run_stage
from replay.targets import LlamaServer
from replay.targets.llamacpp_build import llama_server_path
from replay.targets.tiny_models import sdist_chat_template, tiny_gguf_path
from tests.integration.real_engines import require, small_trace

pytestmark = pytest.mark.engine

# one thread each (two replicas share a 2-core machine), two slots of 2048 tokens
BASE = {"threads": 1, "parallel": 2, "ctx_size": 4096}


def test_session_routing_over_two_llama_servers():
    binary = require(llama_server_path(), "llama-server", "replay engines build-llama-server")
    engine = LlamaServer(model=tiny_gguf_path("gpt-2"), binary=binary, defaults=BASE, chat_template=sdist_chat_template())
    trace = small_trace(n=12, seed=4)
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(engine.launch()) for _ in range(2)]
        targets = (Target("a", replicas[0].url), Target("b", replicas[1].url))
        config = RunConfig(url=targets[0].url, targets=targets, route="session", speedup=4.0, lag_bound_ms=50)
        result = run_stage(trace, config)
        # what each server itself counted: the tokens it generated
        served = {t.name: r.metrics().get("generation_tokens") for t, r in zip(targets, replicas)}
    df = result.requests
    assert df["status"].to_list() == [200] * 12, df.select("status", "error", "error_detail")
    assert df["error"].to_list() == ["none"] * 12
    assert set(df["replica"].unique()) <= {"a", "b"}
    per_session = df.group_by("session_id").agg(pl.col("replica").n_unique().alias("k"))
    assert per_session["k"].max() == 1, per_session
    tokens = {name: int(df.filter(pl.col("replica") == name)["completion_tokens"].sum() or 0) for name in served}
    assert served == tokens, "each server generated the tokens of the requests the replica column gives it"
    assert all(tokens.values()), "session routing used both replicas"
    table = result.summary.replicas
    assert table is not None and table["route"] == "session"
    assert sum(r["requests"] for r in table["rows"]) == 12
