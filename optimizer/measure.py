"""How a config is measured on a real (or the embedded) engine: a fresh start, one replay stage
(or, for the ``max_rate`` objective, a rate search on that start), the engine's metrics, the
fidelity gate and the output check. See :class:`EngineMeasure`. Its :meth:`EngineMeasure.diagnose`
is the baseline's diagnostic sweep (:mod:`optimizer.diagnosis`).

Measurements are invalid, never numbers, when the engine failed to start, more than
``replay.sweep.MAX_FAILED_SHARE`` (10%) of the requests sent failed, the runner's send lag went
over its bound, the stage was cancelled, the fidelity gate failed, or the outputs changed under a
lossless knob. A measurement the runner made invalid (its send lag: the machine held the sender
up, not the config) is measured again from a fresh start, up to ``retry_invalid`` more times
(``replay optimize --retry-invalid``), as ``replay sweep --retry-invalid`` runs a stage again;
the attempts dropped are named in ``details["discarded_attempts"]``. The ``max_rate``
objective's probes, on one start, are each run again the same way after a prefix-cache reset
(each probe names its own).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from optimizer.campaign import Objective
from optimizer.verdict import Measurement
from replay.config import RETRY_INVALID, RunConfig
from replay.errors import ReplayError
from replay.trace import Trace

if TYPE_CHECKING:
    import polars as pl

__all__ = ["EngineMeasure", "measure_on_engine", "BISECT_STEPS", "MAX_DOUBLINGS"]

BISECT_STEPS = 3
MAX_DOUBLINGS = 6


def measure_on_engine(
    engine,
    trace: Trace,
    run: RunConfig,
    objective: Objective,
    *,
    live: Trace | None = None,
    allow_unfaithful: bool = False,
    allow_inconclusive: bool = False,
    baseline: Mapping[str, Any] | None = None,
    check_outputs: bool = True,
    retry_invalid: int = RETRY_INVALID,
) -> EngineMeasure:
    """The measurement of a config on a real (or the embedded) engine (:class:`EngineMeasure`)."""
    return EngineMeasure(
        engine,
        trace,
        run,
        objective,
        live=live,
        allow_unfaithful=allow_unfaithful,
        allow_inconclusive=allow_inconclusive,
        baseline=baseline,
        check_outputs=check_outputs,
        retry_invalid=retry_invalid,
    )


class EngineMeasure:
    """``measure(config)``: start the engine with the config, replay one stage of ``trace`` with
    ``run`` (its url is replaced) while sampling the engine's metrics (``details["peaks"]``, and
    the stage's own ``COUNTERS`` in ``details["counters"]``), stop it. With ``live``,
    the stage must also pass the fidelity gate against it (``fidelity.compare_stage``): a verdict
    of "cannot tell" fails it too, unless ``allow_inconclusive``; ``allow_unfaithful`` lets any
    verdict through. What was let through is recorded in the details. With
    ``check_outputs``, a config that differs from ``baseline`` in lossless knobs only must answer
    a greedy sample as the baseline did (:mod:`optimizer.outputs`; sent to the freshly started
    engine before the stage, so every start answers from the same state; a config whose answers
    changed is invalid and its stage is not run): a measurement of the baseline
    itself returns its answers in ``details["answers"]``, and :meth:`adopt` makes them the
    reference (the campaign calls it, so a measure that ran elsewhere, on a Ray node, or an
    earlier run's ledger entry, provides them too). ``retry_invalid``: a measurement whose stage
    the runner made invalid is taken again from a fresh start, up to this many more times.

    It holds no engine between calls and pickles (for :class:`optimizer.pool.RayPool`)."""

    def __init__(
        self,
        engine,
        trace: Trace,
        run: RunConfig,
        objective: Objective,
        *,
        live: Trace | None = None,
        allow_unfaithful: bool = False,
        allow_inconclusive: bool = False,
        baseline: Mapping[str, Any] | None = None,
        check_outputs: bool = True,
        retry_invalid: int = RETRY_INVALID,
    ) -> None:
        from replay.sweep import check_retries

        # each attempt on a fresh start of the engine: nothing cached from the one before
        self.retry_invalid = check_retries(retry_invalid, True)
        self.engine = engine
        self.trace = trace
        self.run = run
        self.objective = objective
        self.live = live
        self._messages: pl.DataFrame | None = None  # the bodies' message counts (fidelity.sides.message_counts)
        self.allow_unfaithful = allow_unfaithful
        self.allow_inconclusive = allow_inconclusive
        self.baseline = dict(baseline or {})
        self.check_outputs = check_outputs
        self.reference: list[str] | None = None  # the baseline's greedy answers

    def adopt(self, measurement: Measurement) -> None:
        """Take a baseline measurement's answers as the reference, if there is none yet."""
        answers = measurement.details.get("answers")
        if self.reference is None and answers is not None:
            self.reference = list(answers)

    def diagnose(self, config: Mapping[str, Any], stop: Callable[[dict], bool] | None = None) -> Measurement:
        """The diagnostic sweep of ``config`` (:mod:`optimizer.diagnosis`): on one start of the
        engine, a stage at each of ``SWEEP_FACTORS`` x the run's rate (with no rate: x its
        speedup), each with the run's requests or duration and its own metric sampler, until
        ``stop(stage)`` says a stage is enough (the campaign's: it named a bottleneck, which the
        higher rates would not change). It has no value: ``details["sweep"]`` holds one entry per
        rate run (rate, factor, peaks, the counters over the stage, goodput, throughput, sent,
        completed, valid). Invalid when the engine failed to start or a stage failed; the stages
        run before it are kept."""
        from optimizer.diagnosis import SWEEP_FACTORS

        try:
            running = self.engine.launch(dict(config))
        except ReplayError as e:
            return Measurement(None, f"the engine failed to start: {e}", {"sweep": []})
        stages: list[dict] = []
        with running:
            for factor in SWEEP_FACTORS:
                try:
                    stages.append(self._sweep_stage(running, factor))
                except ReplayError as e:
                    return Measurement(None, f"the replay failed at {factor:g} x the rate: {e}", {"sweep": stages})
                if stop is not None and stop(stages[-1]):
                    break
        return Measurement(None, None, {"sweep": stages})

    @staticmethod
    def _observed(running, replay: Callable[[], Any]) -> tuple[Any, dict[str, float], dict[str, float]]:
        """``replay()`` while the engine's metrics are sampled: (what it returned, the peaks, the
        engine's ``COUNTERS`` over it alone)."""
        from optimizer.diagnosis import MetricSampler, counter_deltas

        before = running.metrics()
        with MetricSampler(running) as sampler:
            result = replay()
        return result, sampler.peaks, counter_deltas(before, running.metrics())

    # the stages below read no metrics of their own (metrics_url "none"): _observed samples the
    # engine it started, through its adapter

    def _sweep_stage(self, running, factor: float) -> dict:
        from replay.runner import run_stage
        from replay.targets.url import reset_prefix_cache

        rate = self.run.rate * factor if self.run.rate else None
        speedup = None if rate else (self.run.speedup or 1.0) * factor
        config = dataclasses.replace(self.run, url=running.url, metrics_url="none", rate=rate, speedup=speedup)
        # each stage from a cold prefix cache, as the measurements (each on a fresh engine) start
        reset = reset_prefix_cache(running.url, headers=config.request_headers(), context=config.ssl_context())
        stage, peaks, counters = self._observed(running, lambda: run_stage(self.trace, config))
        s = stage.summary
        return {
            "rate": rate if rate else s.offered_rate,
            "factor": factor,
            "peaks": peaks,
            "counters": counters,
            "prefix_cache": reset,
            **{k: getattr(s, k) for k in ("goodput_rps", "throughput_rps", "sent", "completed", "valid")},
        }

    def _stage(self, running, rate: float | None):
        from replay.runner import run_stage

        return run_stage(self.trace, dataclasses.replace(self.run, url=running.url, metrics_url="none", rate=rate))

    def _search_rate(self, running) -> tuple[Any, float, list[dict]]:
        """The highest passing rate: (its stage, the rate, every probe)."""
        from replay.sweep import MAX_FAILED_SHARE as failed_share

        probes: list[dict] = []

        def probe(rate: float):
            stage = self._stage(running, rate)
            discarded: list[str] = []
            # a probe the runner made invalid runs again (retry_invalid), after a prefix-cache reset
            # as the sweep's retries (an engine without the endpoint keeps its cache: never raises)
            while not stage.summary.valid and not stage.summary.cancelled and len(discarded) < self.retry_invalid:
                from replay.targets.url import reset_prefix_cache

                discarded.append(stage.summary.invalid_reason or "")
                reset_prefix_cache(running.url, headers=self.run.request_headers(), context=self.run.ssl_context())
                stage = self._stage(running, rate)
            s = stage.summary
            passed = bool(
                s.valid
                and not s.cancelled
                and s.slo_pass is not False
                and (s.sent - s.completed) <= failed_share * max(s.sent, 1)
            )
            probes.append({"rate": rate, "passed": passed, "goodput_rps": s.goodput_rps, "discarded_attempts": discarded})
            return stage, passed

        rate = float(self.run.rate or 1.0)
        stage, ok = probe(rate)
        good, bad, best_stage = (rate, None, stage) if ok else (None, rate, None)
        for _ in range(MAX_DOUBLINGS):
            if good is not None and bad is not None:
                break
            rate = rate * 2 if ok else rate / 2
            stage, ok = probe(rate)
            if ok:
                good, best_stage = rate, stage
            else:
                bad = rate
        if good is not None and bad is not None:
            for _ in range(BISECT_STEPS):
                mid = (good + bad) / 2
                stage, ok = probe(mid)
                if ok:
                    good, best_stage = mid, stage
                else:
                    bad = mid
        return best_stage or stage, good or 0.0, probes

    def _answers(self, running) -> list[str]:
        from optimizer import outputs
        from replay.runner import resolve_model

        trace = self.trace
        bodies = [
            json.loads(b)
            for batch in trace.body_batches(min(outputs.SAMPLE, trace.df.height), outputs.SAMPLE, synthesize=True)
            for b in batch
            if b is not None
        ]
        bodies = [b for b in bodies if "messages" in b]
        model = resolve_model(trace, dataclasses.replace(self.run, url=running.url, metrics_url="none"))
        return outputs.greedy_answers(running.url, bodies, model)

    def _outputs(self, running, config: Mapping[str, Any]) -> tuple[list[str] | None, str | None]:
        """(the baseline's answers when ``config`` is the baseline, why the outputs changed)."""
        from optimizer import outputs

        if not self.check_outputs:
            return None, None
        knobs = {k.name: k for k in self.engine.knobs}
        changed = [k for k in set(config) | set(self.baseline) if config.get(k) != self.baseline.get(k)]
        if not changed:
            answers = self._answers(running)
            if self.reference is None:
                self.reference = answers
            return answers, None
        if any(not knobs[k].lossless for k in changed if k in knobs) or self.reference is None:
            return None, None  # lossy changes are judged by a person; no baseline answers yet
        return None, outputs.compare(self.reference, self._answers(running), outputs.encoder(self.trace.meta.tokenizer))

    def __call__(self, config: Mapping[str, Any]) -> Measurement:
        discarded: list[str] = []
        while True:
            measurement, runner_lagged = self._once(config)
            if not runner_lagged or len(discarded) >= self.retry_invalid:
                break
            discarded.append(measurement.invalid or "")
        if discarded:
            measurement.details["discarded_attempts"] = discarded
        return measurement

    def _once(self, config: Mapping[str, Any]) -> tuple[Measurement, bool]:
        """One measurement on one start, and whether it is invalid for the runner's lag alone."""
        from replay.sweep import MAX_FAILED_SHARE as failed_share

        objective, run = self.objective, self.run
        try:
            running = self.engine.launch(dict(config))
        except ReplayError as e:
            return Measurement(None, f"the engine failed to start: {e}"), False
        probes: list[dict] = []
        with running:
            try:
                # the greedy sample first, on the fresh engine (why: optimizer.outputs)
                answers, changed = self._outputs(running, config)
                if changed:
                    return Measurement(None, f"outputs changed under a lossless knob: {changed}"), False
                if objective.kind == "max_rate":
                    (stage, best_rate, probes), peaks, counters = self._observed(running, lambda: self._search_rate(running))
                else:
                    stage, peaks, counters = self._observed(running, lambda: self._stage(running, run.rate))
            except ReplayError as e:
                return Measurement(None, f"the replay failed: {e}"), False
        s = stage.summary
        details: dict[str, Any] = {
            "summary": {
                k: getattr(s, k)
                for k in (
                    "offered_rate",
                    "sent",
                    "completed",
                    "errors",
                    "throughput_rps",
                    "goodput_rps",
                    "send_lag_ms",
                    "valid",
                    "ttft_ms",
                    "tpot_ms",
                    "cache_hit_rate",
                )
            },
            "peaks": peaks,
            "counters": counters,
        }
        if answers is not None:
            details["answers"] = answers
        if objective.kind == "max_rate":
            details["probes"] = probes
            if not any(p["passed"] for p in probes):
                return Measurement(0.0, None, details), False  # no rate tried met the SLOs: a value, not a failure
        failed = s.sent - s.completed
        if s.cancelled:
            return Measurement(None, "the stage was cancelled", details), False
        if not s.valid:
            return Measurement(None, f"the runner fell behind: {s.invalid_reason}", details), True
        if s.sent and failed > failed_share * s.sent:
            return Measurement(None, f"{failed} of {s.sent} requests failed: {s.errors}", details), False
        if self.live is not None:
            from fidelity import compare_stage
            from fidelity.compare import CANNOT_TELL
            from fidelity.judge import own_times

            if self._messages is None:  # the bodies' message counts, read once for every run
                from fidelity.sides import message_counts

                self._messages = message_counts(self.trace)
            verdict = compare_stage(
                self.live,
                stage.requests,
                sent=self.trace,
                lag_bound_ms=run.lag_bound_ms,
                messages=self._messages,
                own_times=own_times(run.arrivals.kind, run.concurrency),
            ).verdict
            details["fidelity"] = verdict.reason
            if verdict.state == CANNOT_TELL and self.allow_inconclusive:
                details["fidelity_inconclusive_allowed"] = True
            elif not verdict.faithful:
                if not self.allow_unfaithful:
                    return Measurement(None, f"the fidelity gate failed: {verdict.reason}", details), False
                details["fidelity_overridden"] = True
        value = best_rate / objective.gpus if objective.kind == "max_rate" else objective.value(s)
        return Measurement(value, None, details), False
