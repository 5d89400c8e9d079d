"""A fleet of two real llama.cpp ``llama-server`` replicas (tiny random-weight model, loopback):
under each routing policy every request is answered and the results' ``replica`` column says
which server answered (each server's own token count agrees); round robin takes turns, session
routing keeps each session on one replica."""

from __future__ import annotations

import contextlib

import polars as pl
import pytest

from replay.config import RunConfig
from replay.fleet import ROUTES, Target
from replay.runner import run_stage
from replay.targets import LlamaServer
from replay.targets.llamacpp_build import llama_server_path
from replay.targets.tiny_models import sdist_chat_template, tiny_gguf_path
from tests.integration.real_engines import require, small_trace

pytestmark = pytest.mark.engine

# one thread each (two replicas share a 2-core machine), two slots of 2048 tokens
BASE = {"threads": 1, "parallel": 2, "ctx_size": 4096}


def test_every_route_over_two_llama_servers():
    binary = require(llama_server_path(), "llama-server", "replay engines build-llama-server")
    engine = LlamaServer(model=tiny_gguf_path("gpt-2"), binary=binary, defaults=BASE, chat_template=sdist_chat_template())
    trace = small_trace(n=12, seed=4)
    results = {}
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(engine.launch()) for _ in range(2)]
        targets = (Target("a", replicas[0].url), Target("b", replicas[1].url))

        def generated() -> dict[str, int]:
            # what each server itself counted: the tokens it generated so far
            return {t.name: int(r.metrics().get("generation_tokens") or 0) for t, r in zip(targets, replicas)}

        for route in ROUTES:
            before = generated()
            config = RunConfig(url=targets[0].url, targets=targets, route=route, speedup=4.0, lag_bound_ms=50)
            result = run_stage(trace, config)
            after = generated()
            results[route] = result
            df = result.requests
            assert df["status"].to_list() == [200] * 12, (route, df.select("status", "error", "error_detail"))
            assert df["error"].to_list() == ["none"] * 12, route
            assert set(df["replica"].unique()) <= {"a", "b"}, route
            tokens = {n: int(df.filter(pl.col("replica") == n)["completion_tokens"].sum() or 0) for n in before}
            served = {n: after[n] - before[n] for n in before}
            assert served == tokens, f"{route}: each server generated the tokens the replica column gives it"
            table = result.summary.replicas
            assert table is not None and table["route"] == route
            assert sum(r["requests"] for r in table["rows"]) == 12, route
    # round robin: in the order due (the order picked), the replicas take turns
    order = results["round-robin"].requests.sort("intended_ns")["replica"].to_list()
    assert order == ["a", "b"] * 6, order
    # session: each session on one replica, both replicas used
    df = results["session"].requests
    assert df.group_by("session_id").agg(pl.col("replica").n_unique().alias("k"))["k"].max() == 1
    assert df["replica"].n_unique() == 2
