"""A tuning campaign: baseline, noise floor, then experiments judged against the noise, in a ledger.

``Campaign.evaluate(config, hypothesis)`` measures one config (a fresh engine start and one
replay stage of the workload) and judges it against the baseline (:mod:`optimizer.verdict`); a
"better" is measured again on a fresh restart before it counts, and then becomes the baseline
the campaign continues from. ``ask()`` / ``tell()`` let an outside loop (an agent) propose the
configs; ``run()`` drives a built-in searcher (:mod:`optimizer.search`) until the budget ends.

The objective (:class:`Objective`): goodput (requests per second meeting the SLOs) or throughput
at a fixed offered rate, divided by the GPUs the config uses. Measurements are invalid, never
numbers, when the engine failed to start, more than 10% of the requests sent failed, the runner's
send lag went over its bound, or the stage was cancelled.

What is measured goes to the ledger as it is measured: a campaign run again with the same
engine, hardware, workload and objective reuses its baseline noise floor and never measures a
judged config again (a failed one is a dead end).
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.diagnosis import Diagnosis, diagnose
from optimizer.ledger import Ledger
from optimizer.search import SEARCHERS, Proposal, Searcher
from optimizer.space import Space, config_key
from optimizer.verdict import MAX_NOISE, REPEATS, Measurement, NoiseFloor, Verdict, judge
from replay.config import RunConfig
from replay.errors import ReplayError
from replay.trace import Trace

__all__ = ["Objective", "Budget", "Campaign", "CampaignResult", "CampaignStopped", "Step", "workload_hash"]

MAX_FAILED_SHARE = 0.1


class CampaignStopped(ReplayError):
    """The campaign cannot go on (a failed baseline, an environment too noisy to decide)."""


@dataclass(frozen=True)
class Objective:
    kind: str = "goodput"  # goodput | throughput (req/s at the offered rate)
    gpus: int = 1  # per-GPU normalization: the value is divided by this

    def __post_init__(self) -> None:
        if self.kind not in ("goodput", "throughput"):
            from replay.errors import ConfigError
            raise ConfigError(f"--objective: '{self.kind}' not one of goodput, throughput")

    def value(self, summary: Mapping[str, Any]) -> float:
        key = "goodput_rps" if self.kind == "goodput" else "throughput_rps"
        return float(summary.get(key) or 0.0) / self.gpus


@dataclass(frozen=True)
class Budget:
    trials: int = 20  # candidate configs judged
    time_s: float = 2 * 3600.0
    gpu_hours: float | None = None  # measurements x their wall time x GPUs

    def left(self, trials: int, started: float, gpu_s: float) -> str | None:
        """Why the budget is spent, or None."""
        if trials >= self.trials:
            return f"the trial budget ({self.trials}) is spent"
        if time.monotonic() - started >= self.time_s:
            return f"the time budget ({self.time_s:g} s) is spent"
        if self.gpu_hours is not None and gpu_s / 3600 >= self.gpu_hours:
            return f"the GPU-hour budget ({self.gpu_hours:g}) is spent"
        return None


@dataclass(frozen=True)
class Step:
    config: dict[str, Any]
    hypothesis: dict[str, str]
    verdict: Verdict
    reused: bool = False  # judged by an earlier run of the campaign (from the ledger)

    def to_json(self) -> dict:
        return {"config": self.config, "hypothesis": self.hypothesis, "verdict": self.verdict.to_json(),
                "reused": self.reused}


@dataclass
class CampaignResult:
    baseline: dict[str, Any]
    noise: NoiseFloor
    steps: list[Step] = field(default_factory=list)
    accepted: list[Step] = field(default_factory=list)  # the path of accepted changes
    best: dict[str, Any] = field(default_factory=dict)
    best_noise: NoiseFloor | None = None
    diagnosis: Diagnosis | None = None
    stopped: str = ""

    def to_json(self) -> dict:
        return {"baseline": self.baseline, "noise": self.noise.to_json(),
                "diagnosis": self.diagnosis.to_json() if self.diagnosis else None,
                "steps": [s.to_json() for s in self.steps],
                "accepted": [s.to_json() for s in self.accepted], "best": self.best,
                "best_noise": self.best_noise.to_json() if self.best_noise else None, "stopped": self.stopped}


def workload_hash(trace: Trace) -> str:
    """A short hash of what a replay of ``trace`` sends: request ids, times, lengths, block hashes."""
    h = hashlib.blake2b(digest_size=8)
    for col in ("request_id", "arrival_us", "input_tokens", "output_tokens"):
        h.update(trace.df[col].cast(str).str.join("\x1f").item().encode())
    h.update(trace.df["block_hashes"].list.len().cast(str).str.join(",").item().encode())
    return h.hexdigest()


def measure_on_engine(engine, trace: Trace, run: RunConfig, objective: Objective, *,
                      live: Trace | None = None, allow_unfaithful: bool = False,
                      ) -> Callable[[Mapping[str, Any]], Measurement]:
    """The measurement of a config on a real (or the embedded) engine: start it with the config,
    replay one stage of ``trace`` with ``run`` (its url is replaced) while sampling the engine's
    metrics, stop it. With ``live``, the stage must also pass the fidelity gate against it
    (``fidelity.compare_stage``), unless ``allow_unfaithful`` (then the failed verdict is recorded
    in the details)."""
    from optimizer.diagnosis import MetricSampler
    from replay.runner import run_stage
    from replay.sweep import MAX_FAILED_SHARE as failed_share

    def measure(config: Mapping[str, Any]) -> Measurement:
        try:
            running = engine.launch(dict(config))
        except ReplayError as e:
            return Measurement(None, f"the engine failed to start: {e}")
        with running:
            try:
                with MetricSampler(running) as sampler:
                    stage = run_stage(trace, dataclasses.replace(run, url=running.url))
            except ReplayError as e:
                return Measurement(None, f"the replay failed: {e}")
            metrics = running.metrics()
        s = stage.summary
        details: dict[str, Any] = {
            "summary": {k: s[k] for k in ("offered_rate", "sent", "completed", "errors", "throughput_rps",
                                          "goodput_rps", "send_lag_ms", "valid", "ttft_ms", "tpot_ms",
                                          "cache_hit_rate")},
            "peaks": sampler.peaks,
            "counters": {k: v for k, v in metrics.items() if "{" not in k and ":" not in k},
        }
        failed = s["sent"] - s["completed"]
        if s["cancelled"]:
            return Measurement(None, "the stage was cancelled", details)
        if not s["valid"]:
            return Measurement(None, f"the runner fell behind: {s['invalid_reason']}", details)
        if s["sent"] and failed > failed_share * s["sent"]:
            return Measurement(None, f"{failed} of {s['sent']} requests failed: {s['errors']}", details)
        if live is not None:
            from fidelity import compare_stage

            verdict = compare_stage(live, stage.requests, sent=trace).verdict
            details["fidelity"] = verdict.reason
            if not verdict.faithful:
                if not allow_unfaithful:
                    return Measurement(None, f"the fidelity gate failed: {verdict.reason}", details)
                details["fidelity_overridden"] = True
        return Measurement(objective.value(s), None, details)

    return measure


class Campaign:
    """One tuning campaign. ``measure(config) -> Measurement`` is how a config is measured (see
    :func:`measure_on_engine`); ``identity`` keys its ledger rows (engine, version, hardware,
    workload, objective)."""

    def __init__(self, *, space: Space, measure: Callable[[Mapping[str, Any]], Measurement],
                 ledger: str | Path, identity: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                 repeats: int = REPEATS, budget: Budget = Budget(), searcher: str | Searcher = "coordinate",
                 order: list[str] | None = None, seed: int = 0, gpus: int = 1,
                 offered_reuse: float | None = None) -> None:
        if repeats < 2:
            from replay.errors import ConfigError
            raise ConfigError("--repeats: the noise floor needs at least 2 baseline runs")
        self.space = space
        self._measure = measure
        self.ledger = Ledger(ledger, {**identity, "hardware": identity.get("hardware", platform.machine())})
        self.baseline = dict(baseline or {})
        self.repeats = repeats
        self.budget = budget
        self.gpus = gpus
        self.seed = seed
        self.offered_reuse = offered_reuse
        self.diagnosis: Diagnosis | None = None
        self._searcher_spec = searcher
        self._order = order
        self.noise: NoiseFloor | None = None
        self.result: CampaignResult | None = None
        self._search: Searcher | None = None
        self._gpu_s = 0.0
        self._started = time.monotonic()

    # -- measuring ---------------------------------------------------------------------------------
    def _timed(self, config: Mapping[str, Any]) -> tuple[Measurement, float]:
        t = time.time()
        m = self._measure(config)
        self._gpu_s += (time.time() - t) * self.gpus
        return m, t

    def _floor_of(self, config: Mapping[str, Any], role: str, extra: list[Measurement] = ()) -> NoiseFloor:
        """The noise floor of ``config``: its ``role`` measurements in the ledger (and ``extra``),
        topped up to ``repeats`` valid runs, each on a fresh engine start."""
        done = [e.measurement for e in self.ledger.entries(config, role)] + list(extra)
        if any(m.invalid for m in done):
            bad = next(m for m in done if m.invalid)
            raise CampaignStopped(f"the baseline {config_key(config)} is invalid: {bad.invalid}")
        values = [m.value for m in done]
        while len(values) < self.repeats:
            m, t = self._timed(config)
            self.ledger.record(config, role, m, started=t)
            if m.invalid:
                raise CampaignStopped(f"the baseline {config_key(config)} is invalid: {m.invalid}")
            values.append(m.value)
        floor = NoiseFloor(tuple(values))
        if floor.too_noisy:
            raise CampaignStopped(f"the environment is too unstable to decide: the baseline's runs "
                                  f"{[round(v, 4) for v in values]} spread {floor.relative:.0%} of their median "
                                  f"(more than {MAX_NOISE:.0%})")
        return floor

    def start(self) -> NoiseFloor:
        """Measure (or read back) the baseline's noise floor, and diagnose its bottleneck from the
        engine metrics of its first run."""
        if self.noise is None:
            self.noise = self._floor_of(self.baseline, "baseline")
            first = self.ledger.entries(self.baseline, "baseline")[0].measurement.details
            knobs = {d.name: d.knob for d in self.space.dimensions}
            default_seqs = knobs["max_num_seqs"].default if "max_num_seqs" in knobs else None
            self.diagnosis = diagnose(first.get("peaks", {}), first.get("counters", {}), self.baseline,
                                      default_seqs, self.space.names, self.offered_reuse)
            self.result = CampaignResult(baseline=dict(self.baseline), noise=self.noise, best=dict(self.baseline),
                                         best_noise=self.noise, diagnosis=self.diagnosis)
        return self.noise

    def evaluate(self, config: Mapping[str, Any], hypothesis: Mapping[str, str] | None = None) -> Verdict:
        """Measure ``config`` and judge it against the current baseline (the best so far). A config
        judged before (in this run or an earlier one) is not measured again. A "better" becomes the
        baseline, with the noise floor of its own runs."""
        self.start()
        config = dict(config)
        hypothesis = dict(hypothesis or {})
        previous = self.ledger.judged(config)
        if previous is not None:
            m, b = previous.measurement, self.result.best_noise.median
            gain = (m.value - b) / b if m.value is not None and b else None
            confirms = tuple(e.measurement for e in self.ledger.entries(config, "confirm"))[:1]
            verdict = Verdict(previous.verdict or "invalid", f"(from the ledger) {previous.reason}", gain,
                              measurements=(m, *confirms) if previous.verdict == "better" else (m,))
            step = Step(config, hypothesis, verdict, reused=True)
            self.result.steps.append(step)
            if verdict.kind == "better":  # a resumed campaign continues from where it had got to
                self._accept(step, previous.measurement)
            return verdict
        if not self.space.allows(config):
            verdict = Verdict("invalid", "the space's constraints forbid this config")
            self.ledger.record(config, "candidate", Measurement(None, verdict.reason), hypothesis=hypothesis,
                               verdict="invalid", reason=verdict.reason)
            self.result.steps.append(Step(config, hypothesis, verdict))
            return verdict
        first, t = self._timed(config)
        row = self.ledger.record(config, "candidate", first, hypothesis=hypothesis, started=t)

        def confirm() -> Measurement:
            m, t2 = self._timed(config)
            self.ledger.record(config, "confirm", m, hypothesis=hypothesis, started=t2)
            return m

        verdict = judge(self.result.best_noise, first, confirm)
        self.ledger.set_verdict(row, verdict.kind, verdict.reason)
        step = Step(config, hypothesis, verdict)
        self.result.steps.append(step)
        if verdict.kind == "better":
            self._accept(step, first)
        return verdict

    def _accept(self, step: Step, first: Measurement) -> None:
        """``step``'s config becomes the baseline, with the noise floor of its own runs."""
        self.result.accepted.append(step)
        self.result.best = dict(step.config)
        self.result.best_noise = self._floor_of(step.config, "confirm", extra=[first])

    # -- driving -----------------------------------------------------------------------------------
    def searcher(self) -> Searcher:
        spec = self._searcher_spec
        if not isinstance(spec, str):
            return spec
        cls = SEARCHERS.get(spec)
        if cls is None:
            from replay.errors import ConfigError
            raise ConfigError(f"--search: '{spec}' not one of {', '.join(SEARCHERS)}")
        self.start()
        explanation = f"{self.diagnosis.bottleneck}: {self.diagnosis.evidence}"
        if spec == "coordinate":
            return cls(self.space, self.baseline, order=self._order or self.diagnosis.order, explanation=explanation)
        return cls(self.space, self.baseline, seed=self.seed)

    def run(self, searcher: Searcher | None = None, progress: Callable[[Step], None] | None = None) -> CampaignResult:
        """Baseline, then the searcher's proposals until it has none or the budget is spent."""
        self.start()
        searcher = searcher or self.searcher()
        if hasattr(searcher, "known"):
            searcher.known[config_key(self.baseline)] = self.noise.median
        while True:
            judged = sum(not s.reused for s in self.result.steps)
            why = self.budget.left(judged, self._started, self._gpu_s)
            if why:
                self.result.stopped = why
                break
            proposal = searcher.ask()
            if proposal is None:
                self.result.stopped = "the searcher has nothing left to try"
                break
            verdict = self.evaluate(proposal.config, proposal.hypothesis)
            value = verdict.measurements[0].value if verdict.measurements else None
            searcher.tell(proposal, verdict.kind, value)
            if progress is not None:
                progress(self.result.steps[-1])
        return self.result

    # ask / tell for outside loops ------------------------------------------------------------------
    def ask(self) -> Proposal | None:
        """The built-in searcher's next proposal (None: nothing left to try)."""
        self.start()
        if self._search is None:
            self._search = self.searcher()
            if hasattr(self._search, "known"):
                self._search.known[config_key(self.baseline)] = self.noise.median
        return self._search.ask()

    def tell(self, proposal: Proposal) -> Verdict:
        """Judge a proposal (the built-in searcher's from :meth:`ask`, or an outside loop's own
        config and hypothesis) and tell the built-in searcher what came of it."""
        verdict = self.evaluate(proposal.config, proposal.hypothesis)
        if self._search is not None:
            value = verdict.measurements[0].value if verdict.measurements else None
            self._search.tell(proposal, verdict.kind, value)
        return verdict

    def close(self) -> None:
        self.ledger.close()
