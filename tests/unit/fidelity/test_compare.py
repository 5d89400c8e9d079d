"""Verdicts on replays made up from a production-shaped live trace: a faithful replay at the
live pace and 10x faster passes; each way of being unfaithful fails on its own metric."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from fidelity import AA_FACTOR, compare_stage, drift
from fidelity.cache import hit_share
from replay.generate import GenerateConfig, generate
from replay.trace import Trace

E2E_PER_TOKEN_S = 0.02


@pytest.fixture(scope="module")
def live() -> Trace:
    """6,000 requests over ~400 s with bursts, sessions and shared system prompts; what the live
    engine observed: E2E, and cached tokens as an unbounded prefix cache would give them."""
    return live_trace(6000)


def live_trace(n: int, seed: int = 5) -> Trace:
    """``n`` requests at 15 req/s as the ``live`` fixture has them."""
    trace = generate(
        GenerateConfig(
            n_requests=n,
            seed=seed,
            rate=15.0,
            burst_cv=3.0,
            n_system_prompts=3,
            system_prompt_tokens=64,
            turns_mean=3.0,
            think_time_mean_s=4.0,
            user_tokens_p50=40,
            output_tokens_p50=20,
            max_user_tokens=400,
            max_output_tokens=200,
            max_input_tokens=2000,
        )
    )
    df = trace.df
    from replay import _engine

    lengths = df["block_hashes"].list.len().to_numpy().astype(np.uint64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    flat = df["block_hashes"].explode().drop_nulls().to_numpy().astype(np.uint64)
    hits = _engine.prefix_cache_hits(flat, offsets, 0).astype(np.int64) * trace.meta.block_size_tokens
    df = df.with_columns(
        e2e_us=(pl.col("output_tokens") * E2E_PER_TOKEN_S * 1e6).cast(pl.Int64), cached_tokens=pl.Series(hits).cast(pl.Int32)
    )
    return Trace(df=df, meta=trace.meta)


def stage_of(
    live: Trace,
    *,
    speedup: float = 1.0,
    sent_s: np.ndarray | None = None,
    prompt_scale: float = 1.0,
    template: int = 9,
    cached: np.ndarray | None = None,
    seed: int = 0,
) -> pl.DataFrame:
    """The results frame of a replay of every live row: sent at live's times / speedup (or
    ``sent_s``), each answered in its live E2E / speedup, the engine counting ``template`` more
    prompt tokens (and ``prompt_scale`` of the recorded ones)."""
    df = live.df
    rng = np.random.default_rng(seed)
    arrival = df["arrival_us"].to_numpy() / 1e6
    intended = (arrival - arrival[0]) / speedup
    sent = intended + rng.uniform(0, 2e-4, len(df)) if sent_s is None else sent_s
    e2e = df["e2e_us"].to_numpy() / 1e6 / speedup
    prompt = np.round(df["input_tokens"].to_numpy() * prompt_scale).astype(np.int64) + template
    cached = df["cached_tokens"].to_numpy() if cached is None else cached
    out = df["output_tokens"].to_numpy()
    ns = lambda s: (np.asarray(s) * 1e9).astype(np.int64)  # noqa: E731
    return pl.DataFrame(
        {
            "request_id": df["request_id"],
            "session_id": df["session_id"],
            "api": df["api"],
            "input_tokens": df["input_tokens"],
            "expected_output_tokens": df["max_tokens"].fill_null(df["output_tokens"]),
            "intended_ns": ns(intended),
            "release_ns": ns(intended),
            "conn_ns": np.zeros(len(df), dtype=np.int64),
            "sent_ns": ns(sent),
            "first_byte_ns": ns(sent + 0.01),
            "first_token_ns": ns(sent + 0.02),
            "end_ns": ns(sent + e2e),
            "status": np.full(len(df), 200, dtype=np.int32),
            "error": ["none"] * len(df),
            "error_detail": [""] * len(df),
            "prompt_tokens": prompt,
            "completion_tokens": out,
            "cached_tokens": cached,
            "output_chunks": out,
        }
    )


def unshared(df: pl.DataFrame) -> pl.Series:
    """Every request's block hashes made its own (hashed with its row number): no prefix is shared."""
    rows = df.with_row_index("_i").select("_i", "block_hashes").explode("block_hashes")
    rows = rows.with_columns(h=pl.when(pl.col("block_hashes").is_not_null()).then(pl.struct("_i", "block_hashes").hash(7)))
    return rows.group_by("_i", maintain_order=True).agg(pl.col("h").drop_nulls())["h"].alias("block_hashes")


def failed(result) -> set[str]:
    return {m.name for m in result.verdict.failed}


@pytest.mark.parametrize("speedup", [1.0, 10.0])
def test_a_faithful_replay_passes_at_the_live_pace_and_10x_faster(live, speedup):
    result = compare_stage(live, stage_of(live, speedup=speedup))
    assert result.verdict.faithful, result.verdict.reason
    assert result.compression == pytest.approx(speedup, rel=1e-3)
    judged = {m.name for m in result.verdict.metrics if m.state != "n/a"}
    # every group is judged (pass, or cannot tell on 6,000 requests), the 60 s counts not (400 s of
    # live traffic: not enough windows)
    for name in (
        "input_tokens.ks",
        "cache.engine_hit_rate",
        "cache.offered_reuse.unbounded",
        "arrivals.dispersion_1s",
        "arrivals.dispersion_10s",
        "sessions.think_time.ks",
        "input_tokens.paired",
        "output_tokens.paired",
        "cache.paired_reuse",
        "arrivals.paired_offsets",
    ):
        assert name in judged, name
    assert any("+9 tokens" in d for d in result.verdict.diagnosis)
    # each required facet rests on its paired test, which says what it counted
    facets = {f.name: f for f in result.verdict.facets}
    for facet, test in (
        ("input lengths", "input_tokens.paired"),
        ("output lengths", "output_tokens.paired"),
        ("cache", "cache.paired_reuse"),
        ("arrivals", "arrivals.paired_offsets"),
    ):
        assert facets[facet].state == "pass" and facets[facet].decided_by == (test,), facets[facet]
    by = {m.name: m for m in result.verdict.metrics}
    assert "6,000 of 6,000 requests within max(8 tokens, 2%) of live's" in by["input_tokens.paired"].reason


def test_poisson_arrivals_fail_on_burstiness(live):
    arrival = live.df["arrival_us"].to_numpy() / 1e6
    rng = np.random.default_rng(3)
    poisson = np.cumsum(rng.exponential((arrival[-1] - arrival[0]) / len(arrival), len(arrival)))
    result = compare_stage(live, stage_of(live, sent_s=poisson - poisson[0]))
    bad = failed(result)
    # request by request (the sends are not live's), and in distribution (the gaps' CV)
    assert {"arrivals.interarrival_cv", "arrivals.paired_offsets"} <= bad, result.verdict.reason
    assert all(name.startswith(("arrivals.", "sessions.", "cache.reuse")) for name in bad), bad


def test_shortened_prompts_fail_on_lengths(live):
    result = compare_stage(live, stage_of(live, prompt_scale=0.5))
    bad = failed(result)
    assert {"input_tokens.ks", "input_tokens.p50", "input_tokens.paired"} <= bad, bad
    # the same cached tokens over half the prompt tokens is also a higher hit rate
    assert all(name.startswith(("input_tokens", "lengths.", "cache.engine")) for name in bad), bad


def test_prompts_sent_with_each_other_s_lengths_fail_per_request_only(live):
    """Every prompt the length of another request's: the distribution is live's exactly, so only
    the comparison request by request can see it."""
    stage = stage_of(live)
    shuffled = stage.with_columns(prompt_tokens=pl.col("prompt_tokens").shuffle(seed=1))
    result = compare_stage(live, shuffled)
    metrics = {m.name: m for m in result.verdict.metrics}
    marginal = ["input_tokens.ks", "input_tokens.wasserstein"] + [f"input_tokens.p{q}" for q in (50, 90, 99)]
    assert not any(metrics[name].state == "fail" for name in marginal), [metrics[n].reason for n in marginal]
    assert metrics["input_tokens.per_request"].state == "fail", metrics["input_tokens.per_request"].reason
    assert metrics["input_tokens.paired"].state == "fail", metrics["input_tokens.paired"].reason
    assert result.verdict.state == "unfaithful"
    faithful = {m.name: m for m in compare_stage(live, stage).verdict.metrics}["input_tokens.per_request"]
    assert faithful.state == "pass" and faithful.distance == pytest.approx(0, abs=1e-9)
    assert faithful.detects == "lengths +5%"  # its fixed bound: no A/A (halves hold other requests)


def test_destroyed_prefix_sharing_fails_on_the_offered_reuse(live):
    # the replayed trace: the same requests, every block hash made unique (no shared prefix)
    sent = Trace(df=live.df.with_columns(block_hashes=unshared(live.df)), meta=live.meta)
    cached = np.zeros(live.df.height, dtype=np.int64)  # an engine finds nothing to reuse
    result = compare_stage(live, stage_of(live, cached=cached), sent=sent)
    bad = failed(result)
    assert {"cache.offered_reuse.unbounded", "cache.engine_hit_rate"} <= bad, bad
    assert any("workload side" in d for d in result.verdict.diagnosis), result.verdict.diagnosis


def test_an_engine_without_prefix_caching_fails_on_the_engine_side(live):
    result = compare_stage(live, stage_of(live, cached=np.zeros(live.df.height, dtype=np.int64)))
    assert failed(result) == {"cache.engine_hit_rate"}, result.verdict.reason
    # request by request the engine's hits are reported, and judged with the outcomes
    by = {m.name: m for m in result.verdict.metrics}
    assert by["cache.paired_engine_hits"].state == "n/a" and by["cache.paired_engine_hits"].distance > 0.5
    diagnosis = " ".join(result.verdict.diagnosis)
    assert "reuse is reproduced, but the engine hit less" in diagnosis and "prefix caching is off" in diagnosis


def test_thresholds_come_from_the_live_trace_s_own_halves(live):
    result = compare_stage(live, stage_of(live))
    by = {m.name: m for m in result.verdict.metrics}
    ks = by["input_tokens.ks"]
    assert ks.aa is not None and ks.aa > 0
    assert ks.bound == pytest.approx(max(0.05, AA_FACTOR * ks.aa))


def test_a_stage_of_another_trace_is_one_clear_error(live):
    from replay.errors import ConfigError

    other = stage_of(live).with_columns(request_id=pl.lit("x") + pl.col("request_id"))
    with pytest.raises(ConfigError, match="not in the live trace"):
        compare_stage(live, other, file="s.parquet")


def test_drift_flags_growing_prompts_and_not_two_random_halves(live):
    df = live.df
    half = df.height // 2
    old = Trace(df=df.head(half), meta=live.meta)
    grown = df.tail(df.height - half).with_columns(input_tokens=pl.col("input_tokens") * 2)
    new = Trace(df=grown, meta=live.meta)
    report = drift(old, new)
    assert not report.faithful
    assert {m for m in failed(report.stages[0]) if m.startswith("input_tokens.")}, report.stages[0].verdict.reason
    picks = df["session_id"].fill_null(df["request_id"]).hash(11) % 2 == 0
    a, b = Trace(df=df.filter(picks), meta=live.meta), Trace(df=df.filter(~picks), meta=live.meta)
    same = drift(a, b, seed=1)
    assert same.state != "unfaithful", same.stages[0].verdict.reason


def test_the_simulated_cache_sees_shared_system_prompts(live):
    share = hit_share(live.df["block_hashes"], live.df["input_tokens"], live.meta.block_size_tokens)
    assert share > 0.3
    assert hit_share(unshared(live.df), live.df["input_tokens"], live.meta.block_size_tokens) == 0


def test_causal_slip_is_reported_not_judged(live):
    stage = stage_of(live)
    held = stage.with_columns(
        release_ns=pl.col("intended_ns") + pl.when(pl.col("request_id").str.ends_with("1")).then(250_000_000).otherwise(0)
    )
    held = held.with_columns(sent_ns=pl.col("release_ns") + 50_000)
    result = compare_stage(live, held)
    slip = {m.name: m for m in result.verdict.metrics}["sessions.slip_ms"]
    assert slip.passed is None and slip.replay == pytest.approx(250.0)
    by = {m.name: m for m in result.verdict.metrics}
    lag = by["arrivals.send_lag_p99_ms"]
    assert lag.state == "n/a" and lag.replay == pytest.approx(0.05), "slip is kept out of the send lag"
    # the held turns are sent 50 µs after their release: on time, whatever their slip
    offsets = by["arrivals.paired_offsets"]
    assert offsets.state == "pass" and offsets.distance == 0, offsets.reason
    held = live.df["request_id"].str.ends_with("1").sum()
    assert f"{held:,} causal turns held for the turn before" in offsets.reason, offsets.reason


def test_reuse_times_of_requests_that_shared_a_timestamp_survive_a_replay_sent_us_apart():
    # whole-millisecond timestamps (as Mooncake's): requests in the same ms reuse a prefix 0 s
    # after it was last used; a replay sends them 0-200 µs apart
    trace = live_trace(300, seed=8)
    same_ms = trace.df.with_row_index("_i").with_columns(arrival_us=(pl.col("_i") // 3 * 200_000).cast(pl.Int64)).drop("_i")
    live = Trace(df=same_ms, meta=trace.meta)
    result = compare_stage(live, stage_of(live))
    (reuse,) = [m for m in result.verdict.metrics if m.name == "cache.reuse_time.ks"]
    assert reuse.distance is not None and reuse.distance < 0.05, reuse.reason
    assert "cache.reuse_time.ks" not in failed(result)


def test_reuse_times_move_within_the_stage_s_lag_bound_without_counting_apart():
    from fidelity import stats

    trace = live_trace(300, seed=8)
    # arrivals at least 0.12 s apart, so that sends late by up to 50 ms keep live's order (two
    # requests that swap change which one hits the other's prefix: a real difference)
    gaps = np.maximum(np.diff(trace.df["arrival_us"].to_numpy(), prepend=0), 120_000)
    live = Trace(df=trace.df.with_columns(arrival_us=pl.Series(np.cumsum(gaps))), meta=trace.meta)
    intended = (live.df["arrival_us"].to_numpy() - live.df["arrival_us"][0]) / 1e6
    rng = np.random.default_rng(3)

    def reuse_ks(late_s: float, lag_bound_ms: float = 1.0) -> float:
        stage = stage_of(live, sent_s=intended + rng.uniform(0, late_s, len(intended)))
        result = compare_stage(live, stage, lag_bound_ms=lag_bound_ms)
        (reuse,) = [m for m in result.verdict.metrics if m.name == "cache.reuse_time.ks"]
        sides = (result.live_side.reuse_s(), result.replay_side.reuse_s())
        return reuse.distance, stats.ks_distance(*sides)

    # each request sent up to 0.9 ms late (a valid stage under the 1 ms bound): every reuse time
    # moved by less than the slack, so nothing is apart, where the plain KS sees them all moved
    within, plain = reuse_ks(0.9e-3)
    assert within == 0 and plain > 0.05
    # sent up to 50 ms late: beyond a 1 ms bound's slack the moves count; under a stage's own
    # 50 ms bound they do not
    assert reuse_ks(50e-3)[0] > 0
    assert reuse_ks(50e-3, lag_bound_ms=50)[0] == 0


def slower(live: Trace, factor: float) -> Trace:
    """``live`` whose every E2E is ``factor`` times its own (to make replays that answered slower)."""
    return Trace(df=live.df.with_columns(e2e_us=(pl.col("e2e_us") * factor).cast(pl.Int64)), meta=live.meta)


def outcome(result, name="outcomes.e2e"):
    return next(m for m in result.verdict.metrics if m.name == name)


def test_judged_outcomes_need_a_replay_aa_and_fail_beyond_its_band(live):
    # E2E of 0.5 s + 1 ms a token: live's halves agree within a few % even at p99
    live = Trace(df=live.df.with_columns(e2e_us=500_000 + 1_000 * pl.col("output_tokens").cast(pl.Int64)), meta=live.meta)
    stage = stage_of(live)
    # not asked: reported only
    assert outcome(compare_stage(live, stage)).state == "n/a"
    # asked, but the stage ran once: the bench's own wobble is unknown, so cannot tell
    once = compare_stage(live, stage, judge_outcomes=True)
    assert outcome(once).state == "cannot tell" and "replay A/A" in outcome(once).needs
    assert once.verdict.state == "cannot tell" and "outcomes" in once.verdict.reason
    # two replays 2% apart: the band is set by them (and live's halves), and the replay passes
    twice = compare_stage(live, stage, judge_outcomes=True, repeats=(stage_of(slower(live, 1.02)),))
    assert outcome(twice).state == "pass" and "replay A/A over 2 replays: 0.02" in outcome(twice).reason
    assert twice.verdict.faithful, twice.verdict.reason
    # answers 12% slower than live: within the band of replays 3% apart among themselves (5 x 0.03),
    # not within that of replays 1% apart (the fixed 0.1)
    off = stage_of(slower(live, 1.12))
    wobbly = compare_stage(live, off, judge_outcomes=True, repeats=(stage_of(slower(live, 1.12 * 1.03)),))
    steady = compare_stage(live, off, judge_outcomes=True, repeats=(stage_of(slower(live, 1.12 * 1.01)),))
    assert outcome(wobbly).state == "pass" and outcome(wobbly).bound == pytest.approx(AA_FACTOR * 0.03, abs=0.01)
    assert outcome(steady).state == "fail" and outcome(steady).bound == pytest.approx(0.1)
    # a third replay asked for (aa_runs=3) and missing: cannot tell again
    assert (
        outcome(compare_stage(live, stage, judge_outcomes=True, repeats=(stage_of(slower(live, 1.02)),), aa_runs=3)).state
        == "cannot tell"
    )
    # answers 40% slower than live, the replays steady among themselves: fails
    slow = stage_of(slower(live, 1.4))
    worse = compare_stage(live, slow, judge_outcomes=True, repeats=(stage_of(slower(live, 1.41)),))
    assert outcome(worse).state == "fail" and worse.verdict.state == "unfaithful"
    # the same 40% with replays 30% apart among themselves: the bench is too noisy to tell
    noisy = compare_stage(live, slow, judge_outcomes=True, repeats=(stage_of(slower(live, 1.0)),))
    assert outcome(noisy).state == "cannot tell" and "steadier bench" in outcome(noisy).needs


def causal_stage(live: Trace, speedup: float, answers_s: np.ndarray) -> pl.DataFrame:
    """A causal replay at ``speedup``: turn k of a session released at the later of its schedule
    and the end of turn k-1 plus live's think time / speedup; each answer takes ``answers_s``."""
    df = live.df.with_row_index("_i").sort("arrival_us", maintain_order=True)
    arrival = df["arrival_us"].to_numpy() / 1e6
    live_end = arrival + df["e2e_us"].to_numpy() / 1e6
    intended = (arrival - arrival[0]) / speedup
    order = df["_i"].to_numpy()  # live row of each arrival
    release = intended.copy()
    last: dict[str, int] = {}
    for j, sid in enumerate(df["session_id"].to_list()):
        if sid in last:
            i = last[sid]
            think = max(arrival[j] - live_end[i], 0.0) / speedup
            release[j] = max(intended[j], release[i] + answers_s[order[i]] + think)
        last[sid] = j
    back, intended_back = np.empty_like(release), np.empty_like(intended)  # in live's row order
    back[order], intended_back[order] = release, intended
    stage = stage_of(live, sent_s=back + 5e-5)
    e2e_ns = (answers_s * 1e9).astype(np.int64)
    return stage.with_columns(
        intended_ns=pl.Series((intended_back * 1e9).astype(np.int64)),
        release_ns=pl.Series((back * 1e9).astype(np.int64)),
        end_ns=pl.col("sent_ns") + pl.Series(e2e_ns),
    )


def reuse_diagnosis(result) -> list[str]:
    return [d for d in result.verdict.diagnosis if d.startswith("reuse times:")]


def test_a_causal_replay_faster_than_live_with_uncompressed_answers_is_diagnosed(live):
    live_e2e = live.df["e2e_us"].to_numpy() / 1e6
    # an engine as fast as live's: answers as long as live's (the quickstart's capture gave D 0.098)
    slow = compare_stage(live, causal_stage(live, 2.0, live_e2e))
    reuse = {m.name: m for m in slow.verdict.metrics}["cache.reuse_time.ks"]
    assert reuse.distance > reuse.bound / 2, reuse.reason
    (said,) = reuse_diagnosis(slow)
    assert "ran at 2x live's pace" in said and "--speedup 1" in said, said
    # the whole system compressed (answers / 2 too): reuse times are live's / 2, nothing to say
    whole = compare_stage(live, causal_stage(live, 2.0, live_e2e / 2))
    assert not reuse_diagnosis(whole), whole.verdict.diagnosis
    # at live's pace a slower engine delays turns too, but the stage is not compressed
    paced = compare_stage(live, causal_stage(live, 1.0, live_e2e * 4))
    assert not reuse_diagnosis(paced), paced.verdict.diagnosis
    # an open-loop stage at 2x (no turn held) is not causal
    assert not reuse_diagnosis(compare_stage(live, stage_of(live, speedup=2.0)))


def test_doubled_outputs_fail_request_by_request_and_in_distribution_at_1500_requests():
    live = live_trace(1500, seed=13)
    result = compare_stage(live, stage_of(live).with_columns(completion_tokens=pl.col("completion_tokens") * 2))
    assert result.verdict.state == "unfaithful"
    assert {"output_tokens.paired", "output_tokens.ks", "output_tokens.p50"} <= failed(result), result.verdict.reason
    (facet,) = [f for f in result.verdict.facets if f.name == "output lengths"]
    assert facet.state == "fail" and "output_tokens.paired" in facet.decided_by


def test_a_replay_of_a_sample_judged_against_the_whole_trace_is_judged_by_its_distributions(live):
    """A replay of a tenth of live's sessions holds a tenth of the live requests: it is not a
    replay of live's own requests, so its paired tests do not apply, and the distribution tests
    judge it, with their "cannot tell" where 600 requests are too few. (A tenth of the sessions
    is a thinner arrival stream, less bursty, reusing its prefixes less often: those
    distribution tests may see it, never a paired one.)"""
    from fidelity.compare import compare_sides
    from fidelity.sides import live_side
    from replay.subsets import session_kept

    sessions = live.df["session_id"].fill_null(live.df["request_id"])
    keep = pl.Series([session_kept(s, 0.1, 1) for s in sessions.to_list()])
    sample = Trace(df=live.df.filter(keep), meta=live.meta)
    replayed = compare_stage(sample, stage_of(sample))
    assert replayed.verdict.state == "faithful"  # against its own rows: paired, request by request
    whole = compare_sides(live_side(live.df, live.meta.block_size_tokens), replayed.replay_side)
    by = {m.name: m for m in whole.metrics}
    for name in ("input_tokens.paired", "output_tokens.paired", "cache.paired_reuse", "arrivals.paired_offsets"):
        assert by[name].state == "n/a" and "not a replay of live's own requests" in by[name].reason, by[name].reason
    assert all(not f.decided_by or "paired" not in f.decided_by[0] for f in whole.facets)
    assert whole.state != "faithful", whole.reason
    assert all(m.name.startswith(("arrivals.", "cache.", "sessions.")) for m in whole.failed), whole.reason
    lengths = [m for m in whole.metrics if m.name.startswith(("input_tokens.", "output_tokens.")) and m.state == "cannot tell"]
    assert lengths and all("needs about" in m.reason for m in lengths), "600 requests leave length distributions undecided"


def test_the_engine_s_cached_tokens_request_by_request_are_judged_with_the_outcomes_within_the_replays_band(live):
    stage = stage_of(live)
    cached = live.df["cached_tokens"].to_numpy()
    # an engine that caches 8% less on every request than live's did
    less = stage_of(live, cached=np.round(cached * 0.92).astype(np.int64))

    def engine_hits(result):
        return next(m for m in result.verdict.metrics if m.name == "cache.paired_engine_hits")

    # not asked: reported
    assert engine_hits(compare_stage(live, less)).state == "n/a"
    # asked, one replay: the bench's own wobble is unknown
    once = engine_hits(compare_stage(live, less, judge_outcomes=True))
    assert once.state == "cannot tell" and "replay A/A" in once.needs
    # two replays that agree with each other: the 5.5-point gap (8% of live's 68% hits) fails the
    # fixed 5 points; replays 1.4 points apart among themselves make the band 7 points (5 x 1.4)
    steady = engine_hits(compare_stage(live, less, judge_outcomes=True, repeats=(less,)))
    assert steady.state == "fail" and steady.bound == pytest.approx(0.05), steady.reason
    wobbly_repeat = stage_of(live, cached=np.round(cached * 0.90).astype(np.int64))
    wobbly = engine_hits(compare_stage(live, less, judge_outcomes=True, repeats=(wobbly_repeat,)))
    assert wobbly.state == "pass" and wobbly.bound == pytest.approx(AA_FACTOR * wobbly.aa), wobbly.reason
    # the replay as live cached: passes with two steady replays
    same = engine_hits(compare_stage(live, stage, judge_outcomes=True, repeats=(stage,)))
    assert same.state == "pass" and same.distance == 0
