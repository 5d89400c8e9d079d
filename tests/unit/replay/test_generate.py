"""replay generate: production-shaped, deterministic, exact, with real prefix sharing."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest

from replay.blocks import block_hashes
from replay.errors import ConfigError
from replay.generate import GenerateConfig, generate


@pytest.fixture(scope="module")
def trace():
    return generate(GenerateConfig(n_requests=600, seed=3))


def _contents(body: dict) -> str:
    if "messages" in body:
        return "".join(m["content"] for m in body["messages"])
    return body["prompt"]


def test_deterministic_per_seed_and_different_across_seeds(trace):
    again = generate(GenerateConfig(n_requests=600, seed=3))
    assert again.df.equals(trace.df)
    assert again.meta == trace.meta
    other = generate(GenerateConfig(n_requests=600, seed=4))
    assert not other.df["body"].equals(trace.df["body"])
    assert not other.df["arrival_us"].equals(trace.df["arrival_us"])


def test_shape_and_metadata(trace):
    df = trace.df
    assert df.height == 600
    assert trace.meta.source_format == "generated"
    assert trace.meta.block_size_tokens == 16
    assert df["arrival_us"][0] == 0
    assert df["max_tokens"].equals(df["output_tokens"], check_names=False)
    body = json.loads(df["body"][0])
    assert set(body) == {"model", "messages", "max_tokens"}
    assert body["max_tokens"] == df["output_tokens"][0]
    assert body["messages"][0]["role"] == "system"
    assert ": " not in df["body"][0][:40]  # compact JSON


def test_sessions_chain_their_turns(trace):
    df = trace.df
    ids = set(df["request_id"].to_list())
    by_id = {r["request_id"]: r for r in df.iter_rows(named=True)}
    followups = df.filter(pl.col("turn") > 0)
    assert followups.height > 100
    for row in followups.iter_rows(named=True):
        parent = by_id[row["parent_request_id"]]
        assert parent["request_id"] in ids
        assert parent["session_id"] == row["session_id"]
        assert parent["turn"] == row["turn"] - 1
        assert parent["arrival_us"] < row["arrival_us"]
        # turn k+1's prompt starts with turn k's whole prompt: its full blocks are shared
        assert row["block_hashes"][: len(parent["block_hashes"])] == parent["block_hashes"]
        roles = [m["role"] for m in json.loads(row["body"])["messages"]]
        assert roles == ["system"] + ["user", "assistant"] * row["turn"] + ["user"]
    assert df.filter(pl.col("turn") == 0)["parent_request_id"].null_count() == df.filter(pl.col("turn") == 0).height


def test_system_prompts_are_shared_across_sessions(trace):
    firsts = trace.df.filter(pl.col("turn") == 0)
    system_texts = [json.loads(b)["messages"][0]["content"] for b in firsts["body"]]
    assert 1 < len(set(system_texts)) <= 4
    assert firsts.height > 50
    first_hashes = [h[0] for h in firsts["block_hashes"].to_list() if h]
    assert len(set(first_hashes)) <= 4  # sessions with one system prompt share its blocks


def test_input_tokens_are_exact(trace, gpt2):
    df = trace.df
    for i in np.linspace(0, df.height - 1, 15).astype(int).tolist():
        text = _contents(json.loads(df["body"][i]))
        token_ids = gpt2.encode(text, add_special_tokens=False).ids
        assert len(token_ids) == df["input_tokens"][i]
        assert block_hashes(token_ids, 16) == df["block_hashes"][i].to_list()


def _cv(arrival_us: pl.Series) -> float:
    gaps = np.diff(arrival_us.to_numpy())
    return float(gaps.std() / gaps.mean())


def test_arrivals_are_bursty_with_burst_cv_2_and_not_without():
    bursty = [_cv(generate(GenerateConfig(n_requests=800, seed=s)).df["arrival_us"]) for s in range(3)]
    poisson = _cv(generate(GenerateConfig(n_requests=800, seed=0, burst_cv=1.0)).df["arrival_us"])
    assert min(bursty) > 1.3
    assert 0.8 < poisson < 1.2


def test_rate_and_lengths_follow_the_config(trace, gpt2):
    df = trace.df
    duration_s = df["arrival_us"][-1] / 1e6
    assert 1.5 < df.height / duration_s < 2.7
    assert 90 < float(df["output_tokens"].median()) < 180
    last_user = [json.loads(b)["messages"][-1]["content"] for b in df["body"]]
    user = np.array([len(e.ids) for e in gpt2.encode_batch(last_user, add_special_tokens=False)])
    assert 140 < float(np.median(user)) < 280
    corr = np.corrcoef(np.log(user), np.log(df["output_tokens"].to_numpy()))[0, 1]
    assert 0.1 < corr < 0.6  # related, not one shared draw
    assert df["input_tokens"].max() <= GenerateConfig().max_input_tokens
    assert df["session_id"].n_unique() < df.height / 1.5


def test_completions_api_uses_a_prompt():
    t = generate(GenerateConfig(n_requests=50, seed=1, api="completions", model="m1", block_size=64))
    body = json.loads(t.df["body"][10])
    assert set(body) == {"model", "prompt", "max_tokens"}
    assert body["model"] == "m1"
    assert t.meta.block_size_tokens == 64
    assert all(len(h) == n // 64 for h, n in zip(t.df["block_hashes"], t.df["input_tokens"]))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_requests", 0),
        ("rate", -1.0),
        ("burst_cv", 0.0),
        ("turns_mean", 0.5),
        ("block_size", 0),
        ("api", "edit"),
        ("seed", -1),
        ("length_correlation", 1.0),
        ("think_time_mean_s", float("nan")),
    ],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"'{field}'"):
        dataclasses.replace(GenerateConfig(), **{field: value})
