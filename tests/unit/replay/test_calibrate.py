"""Fitting the sim's cost model to measured steps (replay.calibrate): recovery, profiles, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replay.calibrate import CostFit, ModelShape, StepSample, fit_step_costs, mirror_knobs, positions, refine, write_profile
from replay.errors import ConfigError

TRUE = {"a": 2e-3, "b": 0.4e-3, "c": 20e-6, "d": 4e-9, "r": 6e-3}


def exact(seqs: int, new: int, ctx: int, request: bool = False) -> float:
    t = TRUE["a"] + TRUE["b"] * seqs + TRUE["c"] * seqs * new + TRUE["d"] * seqs * positions(new, ctx)
    return t + (TRUE["r"] if request else 0.0)


def synthetic(noise: float = 0.0, seed: int = 0) -> list[StepSample]:
    """Probe-shaped samples from known coefficients: TTFTs of single prefills at a few lengths
    (front-end pass included), decode steps at a few batches."""
    rng = np.random.default_rng(seed)
    shapes = [(1, n, 0, True) for n in (32, 256, 768, 1536) for _ in range(3)]
    shapes += [(b, 1, 184, False) for b in (1, 2, 4, 8, 16, 32)]
    return [
        StepSample(seqs, new, ctx, exact(seqs, new, ctx, req) * (1 + noise * rng.standard_normal()), req)
        for seqs, new, ctx, req in shapes
    ]


def test_exact_samples_recover_the_coefficients():
    fit = fit_step_costs(synthetic())
    got = (fit.step_overhead_s, fit.per_seq_s, fit.per_token_s, fit.per_position_s, fit.request_overhead_s)
    assert got == pytest.approx(tuple(TRUE.values()), rel=1e-4)
    assert fit.rel_rms < 1e-6 and fit.n_samples == 18
    assert fit.predict(4, 1, 184) == pytest.approx(2e-3 + 4 * (0.4e-3 + 20e-6 + 4e-9 * 185), rel=1e-6)
    assert fit.predict(1, 100, 0, request=True) == pytest.approx(exact(1, 100, 0, True), rel=1e-6)


def test_noisy_samples_are_recovered_within_tolerance():
    fit = fit_step_costs(synthetic(noise=0.02, seed=3))
    assert fit.step_overhead_s == pytest.approx(TRUE["a"], rel=0.25)
    assert fit.per_seq_s == pytest.approx(TRUE["b"], rel=0.25)
    assert fit.per_token_s == pytest.approx(TRUE["c"], rel=0.1)
    assert fit.request_overhead_s == pytest.approx(TRUE["r"], rel=0.25)
    assert 0.01 < fit.rel_rms < 0.05
    # what matters downstream: predicted step times and TTFTs
    for seqs, new, ctx, req in [(1, 1000, 0, True), (8, 1, 200, False), (32, 1, 200, False)]:
        assert fit.predict(seqs, new, ctx, req) == pytest.approx(exact(seqs, new, ctx, req), rel=0.05)


def test_coefficients_are_never_negative():
    # decode steps that get cheaper per sequence than a free fit would allow: clamp, not negative
    samples = [StepSample(b, 1, 100, 0.01) for b in (1, 2, 4, 8)] + [StepSample(1, 500, 0, 0.012)]
    fit = fit_step_costs(samples)
    assert min(fit.step_overhead_s, fit.per_seq_s, fit.per_token_s, fit.per_position_s, fit.request_overhead_s) >= 0


def test_profile_maps_the_fit_and_the_engine_loads_it(tmp_path):
    shape = ModelShape.from_tiny()
    assert shape.params_b == pytest.approx(6.73e-3, rel=0.02) and shape.head_dim == 64
    fit = CostFit(2e-3, 0.4e-3, 20e-6, 4e-9, 6e-3, 0.0, 0.0, 10)
    p = fit.profile(shape, name="fit", kv_capacity_tokens=8192)
    flops = 2 * shape.params_b * 1e9
    assert p["peak_tflops"] * 1e12 == pytest.approx(flops / 20e-6)
    assert p["hidden_size"] == round(4e-9 * flops / 20e-6 / (4 * shape.num_layers))
    assert (p["step_overhead_ms"], p["per_seq_overhead_us"], p["request_overhead_ms"]) == pytest.approx((2.0, 400.0, 6.0))
    path = write_profile(p, tmp_path / "fit.json")
    assert json.loads(path.read_text())["base"] == "cpu/tiny"
    from replay.sim import SimConfig, start_sim

    knobs = mirror_knobs("llama-server", {"parallel": 4, "ctx_size": 8192})
    assert p["num_attention_heads"] == 0  # attention priced by the fitted hidden_size, not the base's heads
    with start_sim(SimConfig(profile=str(path), time_scale=0, **knobs)) as server:
        assert server.port > 0
        # the engine prices a prefill as the fit does: two prompt lengths' modelled TTFTs differ
        # by the fit's per-token and per-position terms
        import urllib.request

        from replay.sim import modelled_requests

        for word, n in (("a", 100), ("the", 1000)):  # different words: no prefix-cache hit
            body = json.dumps({"prompt": word + f" {word}" * (n - 1), "max_tokens": 1}).encode()
            req = urllib.request.Request(server.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
        short, long = modelled_requests(server.url)["ttft_s"].to_list()
        assert long - short == pytest.approx(fit.predict(1, 1000, 0) - fit.predict(1, 100, 0), rel=0.01)


def test_mirror_knobs():
    assert mirror_knobs("llama-server", {"parallel": 4, "ctx_size": 8192}) == {
        "max_num_seqs": 4,
        "max_num_batched_tokens": 2048,
        "max_model_len": 2048,
    }
    v = mirror_knobs("vllm", {"enforce_eager": True})
    assert (v["max_num_seqs"], v["block_size"], v["max_num_batched_tokens"]) == (128, 128, 2048)
    with pytest.raises(ConfigError, match="engine"):
        mirror_knobs("sglang")


@pytest.mark.parametrize(
    "bad, field",
    [
        (StepSample(1, 10, 0, -0.1), "seconds"),
        (StepSample(1, 10, 0, float("nan")), "seconds"),
        (StepSample(0, 10, 0, 0.1), "seqs"),
        (StepSample(1, 0, 0, 0.1), "new_tokens"),
        (StepSample(1, 10, -5, 0.1), "context"),
    ],
)
def test_bad_samples_name_the_field(bad, field):
    with pytest.raises(ConfigError, match=rf"sample 2: {field}"):
        fit_step_costs([StepSample(1, 10, 0, 0.1), StepSample(2, 1, 10, 0.01), bad])


def test_too_few_samples_and_bad_shapes_are_refused():
    with pytest.raises(ConfigError, match="at least 2"):
        fit_step_costs([StepSample(1, 10, 0, 0.1)] * 3)
    with pytest.raises(ConfigError, match="params_b"):
        ModelShape(params_b=0, num_layers=2, num_kv_heads=1, head_dim=64)
    with pytest.raises(ConfigError, match="kv_capacity_tokens"):
        CostFit(1e-3, 0, 1e-6, 0, 0, 0, 0, 2).profile(ModelShape.from_tiny(), kv_capacity_tokens=0)


def test_refine_takes_out_what_the_engine_adds():
    real = synthetic()
    first = fit_step_costs(real)
    # the engine measured with `first`'s profile adds 1.5 ms to every step and 4 ms to every TTFT
    sim = [StepSample(s.seqs, s.new_tokens, s.context, s.seconds + 1.5e-3 + (4e-3 if s.request else 0), s.request) for s in real]
    second = refine(real, first, sim)
    assert second.step_overhead_s == pytest.approx(TRUE["a"] - 1.5e-3, rel=1e-3)
    assert second.request_overhead_s == pytest.approx(TRUE["r"] - 4e-3, rel=1e-3)
    assert second.per_token_s == pytest.approx(TRUE["c"], rel=1e-3)
