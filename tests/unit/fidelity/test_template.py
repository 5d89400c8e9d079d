"""The chat template an engine adds to each prompt is taken out of its prompt counts before input
lengths are compared, and nothing else is: a few tokens a prompt and a few a message, never a
share of the prompt (a replay that sent longer prompts must not pass as a larger template)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from fidelity import compare_stage
from fidelity.sides import message_counts, template_overhead
from replay.trace import Trace
from tests.unit.fidelity.test_compare import live_trace, stage_of


def test_a_template_of_tokens_a_prompt_and_a_message_is_recovered():
    rng = np.random.default_rng(3)
    recorded = rng.integers(20, 2000, 500).astype(float)
    messages = rng.integers(1, 12, 500).astype(float)
    engine = recorded + 8 + 5 * messages
    per_request, words = template_overhead(engine, recorded, messages)
    assert np.allclose(per_request, 8 + 5 * messages)
    assert words == "+8 tokens a prompt and +5.0 a message"
    # without message counts, the part a prompt is what is taken, not a median over messages
    per_request, words = template_overhead(recorded + 11, recorded)
    assert np.all(per_request == 11) and words == "+11 tokens a prompt"


def test_prompts_made_longer_are_not_taken_for_a_template():
    rng = np.random.default_rng(4)
    recorded = rng.integers(20, 2000, 500).astype(float)
    messages = rng.integers(1, 12, 500).astype(float)
    per_request, _ = template_overhead(np.round(recorded * 1.15) + 8 + 5 * messages, recorded, messages)
    assert np.allclose(per_request, 8 + 5 * messages, atol=1)  # the 15% stays in the lengths
    # a count that grows faster than any template (another tokenizer) is no template at all
    assert template_overhead(recorded + 40 * messages, recorded, messages) is None
    assert template_overhead(recorded - 30, recorded) is None


def with_chat_bodies(live: Trace) -> Trace:
    """``live`` with a body per row of (turn + 1) user/assistant messages."""
    turns = live.df["turn"].fill_null(0).to_numpy()
    bodies = [json.dumps({"messages": [{"role": "user", "content": "x"}] * (int(t) * 2 + 1)}) for t in turns]
    return Trace(live.df.with_columns(body=pl.Series(bodies)), live.meta)


def test_a_stage_takes_out_a_template_that_grows_with_the_messages_and_still_catches_longer_prompts():
    live = with_chat_bodies(live_trace(2000, seed=11))
    counts = message_counts(live)
    assert counts.height == live.df.height and counts["_messages"].min() >= 1
    per_message = counts["_messages"].to_numpy() * 6
    faithful = stage_of(live).with_columns(prompt_tokens=pl.col("prompt_tokens") + per_message)
    result = compare_stage(live, faithful)
    assert any("+9 tokens a prompt and +6.0 a message" in d for d in result.verdict.diagnosis), result.verdict.diagnosis
    lengths = {m.name: m for m in result.verdict.metrics if m.name.startswith("input_tokens.")}
    assert lengths["input_tokens.ks"].distance == pytest.approx(0, abs=0.01)
    longer = stage_of(live, prompt_scale=1.3).with_columns(prompt_tokens=pl.col("prompt_tokens") + per_message)
    failed = {m.name for m in compare_stage(live, longer).verdict.failed}
    # request by request, and in distribution
    assert {"input_tokens.paired", "input_tokens.per_request"} <= failed, failed
    assert failed & {"input_tokens.ks", "input_tokens.wasserstein", "input_tokens.p50", "input_tokens.p90"}, failed
