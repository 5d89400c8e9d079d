"""A tuning campaign: baseline, noise floor, then experiments judged against the noise, in a ledger.

``Campaign.evaluate(config, hypothesis)`` measures one config (a fresh engine start and one
replay stage of the workload) and judges it against the baseline (:mod:`optimizer.verdict`); a
"better" is measured again on a fresh restart before it counts, and then becomes the baseline
the campaign continues from. ``ask()`` / ``tell()`` let an outside loop (an agent) propose the
configs, and measure them its own way if it likes (``tell(proposal, measurement)``: the same
rule and ledger); ``run()`` drives a built-in searcher (:mod:`optimizer.search`) until the budget
ends.

Lossy wins wait for a person: a config that sets a lossy knob (``Knob.lossless`` False: KV or
weight precision, in a space only with ``allow_lossy``) differently from the baseline it is
judged against is judged and confirmed on a fresh restart like any other, but a "better" on it is
never adopted as the baseline. Its step lists those knobs (``Step.needs_approval``), the result
lists it in ``CampaignResult.awaiting_approval``, the reports show it as needing a person's
approval, and the searcher is told "same", so the search goes on from the lossless baseline.

The objective (:class:`Objective`): goodput (requests per second meeting the SLOs) or throughput
at a fixed offered rate, or the highest rate meeting them, divided by the GPUs the config uses.
How a config is measured on an engine, and when a measurement is invalid: :mod:`optimizer.measure`.

The baseline is measured again between candidates (every :data:`RECHECK_EVERY` candidate
measurements, and beside every confirmation of a win; in a parallel round, in one of the
round's slots, beside the candidates), and a confirmation is judged against the floor that
holds the baseline's run beside it: a win must beat a baseline measured at the same time. Each
recheck joins the baseline's noise floor, so a bench that drifts (an engine that settles at
another level, a neighbour that starts or stops) widens the bar instead of making later
candidates look better or worse than they are, and a drift past ``K`` spreads is reported
(``CampaignResult.rechecks``). A baseline that drifts so far that its floor spreads over
``max_noise`` (:data:`optimizer.verdict.MAX_NOISE` unless the caller sets it) stops the campaign,
as an unstable start does.

What is measured goes to the ledger as it is measured: a campaign run again with the same
engine, hardware, workload and objective reuses its baseline noise floor and never measures a
judged config again (a failed one is a dead end).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from optimizer.diagnosis import Diagnosis, diagnose, diagnose_sweep, names_bottleneck
from optimizer.hypotheses import check, hypothesis, observed
from optimizer.ledger import Entry, Ledger, hardware_id
from optimizer.pool import Measure, Pool, SerialPool
from optimizer.search import SEARCHERS, Proposal, Searcher
from optimizer.space import Space, config_key
from optimizer.verdict import K, MAX_NOISE, REPEATS, Measurement, NoiseFloor, Verdict, judge
from replay.errors import ReplayError
from replay.trace import Trace

if TYPE_CHECKING:
    from replay.metrics import StageSummary

__all__ = ["Objective", "Budget", "Campaign", "CampaignResult", "CampaignStopped", "Step", "workload_hash", "RECHECK_EVERY"]

# candidate measurements between two measurements of the baseline (0: never measured again)
RECHECK_EVERY = 4


class CampaignStopped(ReplayError):
    """The campaign cannot go on (a failed baseline, an environment too noisy to decide)."""


@dataclass(frozen=True)
class Objective:
    """``goodput`` / ``throughput``: req/s meeting the SLOs / completed, at the offered rate.
    ``max_rate``: the highest offered rate whose stage meets the SLOs (attainment at least the
    SLO's), found on one engine start by doubling (or halving) from the run's rate until the
    answer flips, then ``optimizer.measure.BISECT_STEPS`` bisections; the value is the highest rate that passed.
    Every value is divided by ``gpus``."""

    kind: str = "goodput"
    gpus: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("goodput", "throughput", "max_rate"):
            from replay.errors import ConfigError

            raise ConfigError(f"--objective: '{self.kind}' not one of goodput, throughput, max_rate")

    def value(self, summary: StageSummary) -> float:
        """A stage's goodput or throughput (none: 0) per GPU; ``max_rate`` is valued by its search."""
        rate = summary.goodput_rps if self.kind == "goodput" else summary.throughput_rps
        return float(rate or 0.0) / self.gpus


@dataclass(frozen=True)
class Budget:
    trials: int = 20  # candidate configs judged
    time_s: float = 2 * 3600.0
    gpu_hours: float | None = None  # measurements x their wall time x GPUs
    gpus: int | None = None  # GPUs busy at once: caps the parallel measurements at gpus // the engine's

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
    """One judged proposal. Its hypothesis (:func:`optimizer.hypotheses.hypothesis`) carries,
    once measured, ``checks`` (each prediction against the incumbent's run) and ``diagnosis``
    (the candidate's own bottleneck and evidence)."""

    config: dict[str, Any]
    hypothesis: dict[str, Any]
    verdict: Verdict
    reused: bool = False  # judged by an earlier run of the campaign (from the ledger)
    # a win that changes these lossy knobs: not adopted, it waits for a person's approval
    needs_approval: tuple[str, ...] = ()

    @property
    def checks(self) -> list[dict]:
        return list(self.hypothesis.get("checks") or [])

    def to_json(self) -> dict:
        return {
            "config": self.config,
            "hypothesis": self.hypothesis,
            "verdict": self.verdict.to_json(),
            "reused": self.reused,
            "needs_approval": list(self.needs_approval),
        }


@dataclass
class CampaignResult:
    baseline: dict[str, Any]
    noise: NoiseFloor
    best_noise: NoiseFloor  # the incumbent's floor: the baseline's until a win replaces it
    steps: list[Step] = field(default_factory=list)
    accepted: list[Step] = field(default_factory=list)  # the path of accepted changes
    awaiting_approval: list[Step] = field(default_factory=list)  # lossy wins, not adopted (module docstring)
    best: dict[str, Any] = field(default_factory=dict)
    diagnosis: Diagnosis | None = None
    stopped: str = ""
    # the baseline measured again between candidates: config, value, the floor's median before
    # it, and whether it landed more than K spreads from that median
    rechecks: list[dict[str, Any]] = field(default_factory=list)
    # measurements kept although their replay failed the fidelity gate (``allow_unfaithful``),
    # earlier runs of the campaign included (from the ledger)
    fidelity_overridden: int = 0
    # ... and those whose verdict was "cannot tell", kept with ``allow_inconclusive``
    fidelity_inconclusive: int = 0

    def count_gate(self, details: dict) -> None:
        """Count a measurement the fidelity gate let through by an override."""
        self.fidelity_overridden += bool(details.get("fidelity_overridden"))
        self.fidelity_inconclusive += bool(details.get("fidelity_inconclusive_allowed"))

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline,
            "noise": self.noise.to_json(),
            "rechecks": self.rechecks,
            "diagnosis": self.diagnosis.to_json() if self.diagnosis else None,
            "steps": [s.to_json() for s in self.steps],
            "accepted": [s.to_json() for s in self.accepted],
            "awaiting_approval": [s.to_json() for s in self.awaiting_approval],
            "best": self.best,
            "best_noise": self.best_noise.to_json(),
            "stopped": self.stopped,
            "fidelity_overridden": self.fidelity_overridden,
            "fidelity_inconclusive": self.fidelity_inconclusive,
        }


class Times(TypedDict):
    """When a measurement started and finished (``time.time()``), as the ledger records them."""

    started: float
    finished: float


def workload_hash(trace: Trace) -> str:
    """A short hash of what a replay of ``trace`` sends: request ids, times, lengths, block hashes."""
    h = hashlib.blake2b(digest_size=8)
    for col in ("request_id", "arrival_us", "input_tokens", "output_tokens"):
        h.update(trace.df[col].cast(str).str.join("\x1f").item().encode())
    h.update(trace.df["block_hashes"].list.len().cast(str).str.join(",").item().encode())
    return h.hexdigest()


class Campaign:
    """One tuning campaign. ``measure(config) -> Measurement`` is how a config is measured (see
    :func:`optimizer.measure.measure_on_engine`); without one, the caller measures: it gives the
    baseline's runs to :meth:`start` and each proposal's runs to :meth:`tell`. ``identity`` keys
    its ledger rows (engine, version, hardware, workload, objective; the hardware is
    :func:`optimizer.ledger.hardware_id` unless it names one).
    ``pool`` is where measurements run (:mod:`optimizer.pool`): with more than one slot,
    :meth:`run` judges that many proposals a round, each on its own engine."""

    def __init__(
        self,
        *,
        space: Space,
        measure: Callable[[Mapping[str, Any]], Measurement] | None = None,
        ledger: str | Path,
        identity: Mapping[str, Any],
        baseline: Mapping[str, Any] | None = None,
        repeats: int = REPEATS,
        budget: Budget = Budget(),
        searcher: str | Searcher = "coordinate",
        order: list[str] | None = None,
        seed: int = 0,
        gpus: int = 1,
        offered_reuse: float | None = None,
        pool: Pool | None = None,
        recheck_every: int = RECHECK_EVERY,
        max_noise: float = MAX_NOISE,
    ) -> None:
        if repeats < 2:
            from replay.errors import ConfigError

            raise ConfigError("--repeats: the noise floor needs at least 2 baseline runs")
        self.space = space
        self._measure = measure
        self.ledger = Ledger(ledger, {**identity, "hardware": identity.get("hardware") or hardware_id()})
        self.baseline = dict(baseline or {})
        self.repeats = repeats
        self.budget = budget
        self.gpus = gpus
        self.seed = seed
        self.offered_reuse = offered_reuse
        self.pool = pool or SerialPool()
        if recheck_every < 0:
            from replay.errors import ConfigError

            raise ConfigError(f"--recheck-every: {recheck_every} is negative (0: never measure the baseline again)")
        self.recheck_every = recheck_every
        if not max_noise > 0:
            from replay.errors import ConfigError

            raise ConfigError(f"--max-noise: {max_noise} must be above 0 (the baseline's spread, a share of its median)")
        self.max_noise = max_noise
        self._since_recheck = 0  # candidate measurements since the baseline was last measured
        self.diagnosis: Diagnosis | None = None  # the baseline's
        # the incumbent's first run (details, value) and diagnosis: what a hypothesis starts from
        # and its predictions are checked against; a win replaces both
        self._reference: tuple[dict, float | None] = ({}, None)
        self._incumbent_diagnosis: Diagnosis | None = None
        self._searcher_spec = searcher
        self._order = order
        self.noise: NoiseFloor | None = None
        self.result: CampaignResult | None = None
        self._search: Searcher | None = None
        self._gpu_s = 0.0
        self._started = time.monotonic()
        # proposals whose first run, told from outside, cleared the bar: their confirmation is due
        self._pending: dict[str, Proposal] = {}

    @property
    def _result(self) -> CampaignResult:
        """The result so far: there is none before :meth:`start` has measured the baseline."""
        if self.result is None:
            from replay.errors import ConfigError

            raise ConfigError("the campaign has not started: start() measures the baseline's noise floor first")
        return self.result

    @property
    def slots(self) -> int:
        """Measurements run at once: the pool's slots, within the budget's concurrent GPUs."""
        slots = self.pool.slots
        if self.budget.gpus is not None:
            slots = min(slots, self.budget.gpus // self.gpus)
        return max(1, slots)

    # -- measuring ---------------------------------------------------------------------------------
    def _measure_many(self, configs: list[Mapping[str, Any]], candidates: bool = True) -> Iterator[tuple[Measurement, Times]]:
        """Measure ``configs``, ``slots`` at a time: (measurement, when it started and finished)
        each, yielded as each group of ``slots`` ends, so the caller puts them in the ledger before
        the next group starts. Between ``candidates``, when a recheck of the baseline is due, it
        takes one slot of the next group (or a group of its own, with one slot)."""
        i = 0
        while i < len(configs):
            measure = self._needs_measure("measuring a config")
            recheck = candidates and bool(self.recheck_every) and self._since_recheck >= self.recheck_every
            group: list[Mapping[str, Any]] = [self._result.best] if recheck else []
            take = self.slots - len(group)
            group += configs[i : i + take]
            i += take
            for k, t in enumerate(self.pool.map(measure, group)):
                self._gpu_s += t.seconds * self.gpus
                if self.result is not None:
                    self.result.count_gate(t.measurement.details)
                times = Times(started=t.started, finished=t.started + t.seconds)
                if recheck and k == 0:
                    self._recheck(t.measurement, times)
                    continue
                self._since_recheck += candidates
                yield t.measurement, times

    def _recheck(self, m: Measurement, times: Times) -> None:
        """The baseline measured again: into the ledger and its noise floor (see the module
        docstring)."""
        config = self._result.best
        self.ledger.record(config, "recheck", m, **times)
        self._since_recheck = 0
        if m.invalid:
            raise CampaignStopped(f"the baseline {config_key(config)} turned invalid when measured again: {m.invalid}")
        before, value = self._result.best_noise, m.valid_value()
        drifted = abs(value - before.median) > K * before.spread
        self._result.rechecks.append({"config": dict(config), "value": value, "median": before.median, "drifted": drifted})
        floor = NoiseFloor(before.values + (value,))
        if floor.too_noisy(self.max_noise):
            raise CampaignStopped(
                f"the environment is too unstable to decide: the baseline, measured again, gave "
                f"{value:.4g} against a median of {before.median:.4g}; its runs now spread "
                f"{floor.relative:.0%} of their median (more than {self.max_noise:.0%})"
            )
        self._result.best_noise = floor

    def _floor_of(self, config: Mapping[str, Any], role: str, extra: Sequence[Measurement] = ()) -> NoiseFloor:
        """The noise floor of ``config``: its ``role`` and recheck measurements in the ledger (and
        ``extra``), topped up to ``repeats`` valid runs, each on a fresh engine start."""
        done = [e.measurement for r in (role, "recheck") for e in self.ledger.entries(config, r)] + list(extra)
        if any(m.invalid for m in done):
            bad = next(m for m in done if m.invalid)
            raise CampaignStopped(f"the baseline {config_key(config)} is invalid: {bad.invalid}")
        missing = max(0, self.repeats - len(done))
        if missing and self._measure is None:
            if role == "baseline":
                from replay.errors import ConfigError

                raise ConfigError(
                    f"the baseline's noise floor needs {self.repeats} runs, each on a fresh engine "
                    f"start, and {len(done)} were given: pass them to start(), or give the campaign "
                    f"a measure"
                )
            missing = 0  # a win told from outside: its floor is the runs told (two at least)
        for m, t in self._measure_many([config] * missing, candidates=False):
            self.ledger.record(config, role, m, **t)
            if m.invalid:  # no more runs of a config that fails
                raise CampaignStopped(f"the baseline {config_key(config)} is invalid: {m.invalid}")
            done.append(m)
        values = [m.valid_value() for m in done]
        adopt = getattr(self._measure, "adopt", None)
        if adopt is not None and role == "baseline":
            for m in done:
                adopt(m)
        floor = NoiseFloor(tuple(values))
        if floor.too_noisy(self.max_noise):
            raise CampaignStopped(
                f"the environment is too unstable to decide: the baseline's runs "
                f"{[round(v, 4) for v in values]} spread {floor.relative:.0%} of their median "
                f"(more than {self.max_noise:.0%})"
            )
        return floor

    def baseline_runs_needed(self) -> int:
        """How many more runs of the baseline its noise floor needs (``repeats`` less those in
        the ledger): what a caller without a measure gives :meth:`start`."""
        return max(0, self.repeats - len(self.ledger.entries(self.baseline, "baseline")))

    def start(self, baseline_runs: Sequence[Measurement] = ()) -> NoiseFloor:
        """Measure (or read back) the baseline's noise floor, then diagnose its bottleneck: from
        the measure's diagnostic sweep of the baseline when it has one (``measure.diagnose(config)``,
        :meth:`optimizer.measure.EngineMeasure.diagnose`; run once, in the ledger as the role
        "diagnosis", so a resumed campaign reads it back), else from the engine metrics of the
        baseline's first run. ``baseline_runs``: runs of the baseline measured by the caller (each
        on a fresh engine start), into the ledger before the floor is made of it."""
        if self.noise is None:
            for m in baseline_runs:
                self.ledger.record(self.baseline, "baseline", m)
            self.noise = self._floor_of(self.baseline, "baseline")
            first = self.ledger.entries(self.baseline, "baseline")[0].measurement
            sweep = self._sweep()
            if sweep:
                self.diagnosis = diagnose_sweep(sweep, self.baseline, self._default_seqs(), self.space.names, self.offered_reuse)
            else:
                self.diagnosis = self._diagnose(self.baseline, first)
            self._reference = (first.details, first.value)
            self._incumbent_diagnosis = self.diagnosis
            self.result = CampaignResult(
                baseline=dict(self.baseline),
                noise=self.noise,
                best=dict(self.baseline),
                best_noise=self.noise,
                diagnosis=self.diagnosis,
            )
            for e in self.ledger.entries():
                self._result.count_gate(e.measurement.details)
        return self.noise

    def _sweep(self) -> list[dict]:
        """The stages of the baseline's diagnostic sweep: from the ledger, or run now (in the pool,
        its time counted against the budget) when the measure has one; [] when it has none or the
        sweep ran no stage."""
        done = self.ledger.entries(self.baseline, "diagnosis")
        if done:
            return done[-1].measurement.details.get("sweep") or []
        sweep = getattr(self._measure, "diagnose", None)
        if sweep is None:
            return []
        if "stop" in inspect.signature(sweep).parameters:
            # no stage past the first that names a bottleneck: diagnose_sweep would not look at it
            done_at = partial(
                names_bottleneck,
                config=self.baseline,
                max_num_seqs_default=self._default_seqs(),
                names=self.space.names,
                offered_reuse=self.offered_reuse,
            )
            sweep = partial(sweep, stop=done_at)
        t = self.pool.map(sweep, [self.baseline])[0]
        self._gpu_s += t.seconds * self.gpus
        self.ledger.record(self.baseline, "diagnosis", t.measurement, started=t.started, finished=t.started + t.seconds)
        return t.measurement.details.get("sweep") or []

    def evaluate(self, config: Mapping[str, Any], hypothesis: Mapping[str, str] | None = None) -> Verdict:
        """Measure ``config`` and judge it against the current baseline (the best so far). A config
        judged before (in this run or an earlier one) is not measured again. A "better" becomes the
        baseline, with the noise floor of its own runs."""
        return self.evaluate_many([Proposal(dict(config), dict(hypothesis or {}))])[0]

    def evaluate_many(self, proposals: Sequence[Proposal]) -> list[Verdict]:
        """Judge ``proposals`` as one round, against the baseline in force when it starts: their
        first measurements run at once (the pool's slots), then the confirmations of those that
        cleared the bar. Of the round's confirmed wins, the one with the highest first measurement
        becomes the baseline; the others keep their "better" (over the round's baseline). A win
        that changes a lossy knob is not adopted: it waits for a person's approval."""
        self.start()
        noise = self._result.best_noise
        base = self._result.best
        proposals = list(proposals)
        verdicts: list[Verdict | None] = [None] * len(proposals)
        reused: set[int] = set()
        fresh: list[int] = []
        twins: dict[str, int] = {}  # config key -> the first proposal of it in this round
        for i, p in enumerate(proposals):
            previous = self.ledger.judged(p.config)
            if previous is not None:
                verdicts[i] = self._from_ledger(previous, noise)
                reused.add(i)
            elif not self.space.allows(p.config):
                verdicts[i] = self._forbidden(p)
            elif config_key(p.config) in twins:
                reused.add(i)  # proposed twice in one round: measured once, judged once
            else:
                twins[config_key(p.config)] = i
                fresh.append(i)
        firsts: dict[int, Measurement] = {}
        rows: dict[int, int] = {}
        for i, (m, t) in zip(fresh, self._measure_many([proposals[i].config for i in fresh])):
            firsts[i] = m
            rows[i] = self.ledger.record(proposals[i].config, "candidate", m, hypothesis=proposals[i].hypothesis, **t)
        to_confirm = [i for i in fresh if judge(noise, firsts[i]).kind == "better"]
        if to_confirm and self.recheck_every:
            self._since_recheck = self.recheck_every  # the baseline is measured beside the confirmations
        seconds: dict[int, Measurement] = {}
        for i, (m, t) in zip(to_confirm, self._measure_many([proposals[i].config for i in to_confirm])):
            seconds[i] = m
            self.ledger.record(proposals[i].config, "confirm", m, hypothesis=proposals[i].hypothesis, **t)
        for i in fresh:
            verdict = judge(noise, firsts[i], lambda i=i: seconds[i], confirm_noise=self._result.best_noise)
            verdicts[i] = verdict
            proposals[i] = Proposal(proposals[i].config, self._checked(proposals[i], firsts[i], verdict.kind), proposals[i].token)
            self.ledger.set_verdict(rows[i], verdict.kind, verdict.reason, proposals[i].hypothesis)
        judged: list[Verdict] = []
        for i, p in enumerate(proposals):
            verdict_or_twin = verdicts[i] or verdicts[twins[config_key(p.config)]]
            assert verdict_or_twin is not None  # every proposal measured was judged above; a twin reads its first's
            judged.append(verdict_or_twin)
        steps = [
            Step(
                dict(p.config),
                dict(p.hypothesis),
                v,
                reused=i in reused,
                needs_approval=self._needs_approval(base, p.config, v),
            )
            for i, (p, v) in enumerate(zip(proposals, judged))
        ]
        self._result.steps.extend(steps)
        self._result.awaiting_approval.extend(s for s in steps if s.needs_approval)
        wins = [
            s
            for s in steps
            if s.verdict.kind == "better" and not s.needs_approval and s.verdict.measurements[0].valid_value() > noise.median
        ]
        if wins:
            self._accept(max(wins, key=lambda s: s.verdict.measurements[0].valid_value()))
        return judged

    def _forbidden(self, proposal: Proposal) -> Verdict:
        """The verdict on a config the space's constraints forbid, recorded in the ledger unmeasured."""
        verdict = Verdict("invalid", "the space's constraints forbid this config")
        self.ledger.record(
            proposal.config,
            "candidate",
            Measurement(None, verdict.reason),
            hypothesis=proposal.hypothesis,
            verdict="invalid",
            reason=verdict.reason,
        )
        return verdict

    def _needs_approval(self, base: Mapping[str, Any], config: Mapping[str, Any], verdict: Verdict) -> tuple[str, ...]:
        """The lossy knobs a win changes from ``base`` (it waits for a person's approval); () otherwise."""
        return tuple(self.space.lossy_changes(base, config)) if verdict.kind == "better" else ()

    def _from_ledger(self, previous: Entry, noise: NoiseFloor) -> Verdict:
        """The verdict on a config judged before (its candidate row in the ledger), its gain
        over the current baseline."""
        m, b = previous.measurement, noise.median
        gain = (m.value - b) / b if m.value is not None and b else None
        confirms = tuple(e.measurement for e in self.ledger.entries(previous.config, "confirm"))[:1]
        return Verdict(
            previous.verdict or "invalid",
            f"(from the ledger) {previous.reason}",
            gain,
            measurements=(m, *confirms) if previous.verdict == "better" else (m,),
        )

    def _default_seqs(self) -> int | None:
        """The space's default max_num_seqs (the batch cap a config without one runs under)."""
        knobs = {d.name: d.knob for d in self.space.dimensions}
        return knobs["max_num_seqs"].default if "max_num_seqs" in knobs else None

    def _diagnose(self, config: Mapping[str, Any], m: Measurement) -> Diagnosis:
        """The bottleneck of one run of ``config`` (its engine metrics)."""
        return diagnose(
            m.details.get("peaks", {}),
            m.details.get("counters", {}),
            config,
            self._default_seqs(),
            self.space.names,
            self.offered_reuse,
            rate=(m.details.get("summary") or {}).get("offered_rate"),
        )

    def _checked(self, proposal: Proposal, first: Measurement, verdict: str) -> dict[str, Any]:
        """``proposal``'s hypothesis with its predictions checked against the incumbent's run
        and the candidate diagnosed on its own metrics (:mod:`optimizer.hypotheses`)."""
        out = dict(proposal.hypothesis)
        if first.invalid is None:
            d = self._diagnose(proposal.config, first)
            out["diagnosis"] = {"bottleneck": d.bottleneck, "evidence": d.evidence}
        if out.get("predictions"):
            details, value = self._reference
            out["checks"] = check(out["predictions"], observed(details, value), observed(first.details, first.value), verdict)
        return out

    def describe(self, base: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
        """The hypothesis for ``config``, from the incumbent (the campaign's best so far, which
        the candidate is judged against) and its diagnosis."""
        d = self._incumbent_diagnosis
        return hypothesis(self._result.best, config, d.bottleneck if d else None, d.evidence if d else "")

    def _accept(self, step: Step) -> None:
        """``step``'s config becomes the baseline, with the noise floor of its own runs (measured
        first: a floor that stops the campaign leaves the baseline as it was); its first run and
        its own diagnosis are what the next hypotheses start from."""
        floor = self._floor_of(step.config, "confirm", extra=[step.verdict.measurements[0]])
        first = step.verdict.measurements[0]
        self._reference = (first.details, first.value)
        self._incumbent_diagnosis = self._diagnose(step.config, first)
        self._result.accepted.append(step)
        self._result.best = dict(step.config)
        self._result.best_noise = floor
        self._since_recheck = 0

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
        start = self._result.best  # the baseline, or what an outside loop already won
        if spec == "coordinate":
            order = self._order or (self.diagnosis.order if self.diagnosis is not None else None)
            return cls(self.space, start, order=order, describe=self.describe)
        return cls(self.space, start, seed=self.seed, describe=self.describe)

    def run(self, searcher: Searcher | None = None, progress: Callable[[Step], None] | None = None) -> CampaignResult:
        """Baseline, then rounds of the searcher's proposals (``slots`` a round) until it has none
        or the budget is spent. A :class:`CampaignStopped` after the start (a recheck, a new
        baseline's floor) is raised with ``result.stopped`` set to its reason and ``result``
        holding what was judged before it."""
        self._needs_measure("run()")
        self.start()
        searcher = searcher or self.searcher()
        if hasattr(searcher, "known"):
            searcher.known[config_key(self._result.best)] = self._result.best_noise.median
        try:
            self._rounds(searcher, progress)
        except CampaignStopped as e:
            self._result.stopped = str(e)
            raise
        return self._result

    def _rounds(self, searcher: Searcher, progress: Callable[[Step], None] | None) -> None:
        while True:
            judged = sum(not s.reused for s in self._result.steps)
            why = self.budget.left(judged, self._started, self._gpu_s)
            if why:
                self._result.stopped = why
                break
            batch: list[Proposal] = []
            while len(batch) < min(self.slots, self.budget.trials - judged):
                proposal = searcher.ask()
                if proposal is None:
                    break
                batch.append(proposal)
            if not batch:
                self._result.stopped = "the searcher has nothing left to try"
                break
            before = len(self._result.steps)
            self.evaluate_many(batch)
            for proposal, step in zip(batch, self._result.steps[before:]):
                _tell(searcher, proposal, step)
            if progress is not None:
                for step in self._result.steps[before:]:
                    progress(step)

    # ask / tell for outside loops ------------------------------------------------------------------
    def ask(self) -> Proposal | None:
        """What to measure next: a proposal whose first run, told from outside, cleared the bar
        and needs its confirming run (``role`` "confirm"), else the built-in searcher's next
        proposal with its hypothesis (None: nothing left to try)."""
        self.start()
        if self._pending:
            return next(iter(self._pending.values()))
        if self._search is None:
            self._search = self.searcher()
            if hasattr(self._search, "known"):
                self._search.known[config_key(self._result.best)] = self._result.best_noise.median
        return self._search.ask()

    def tell(self, proposal: Proposal, measured: Measurement | Sequence[Measurement] | None = None) -> Verdict:
        """Judge a proposal (the built-in searcher's from :meth:`ask`, or an outside loop's own
        config and hypothesis) and tell the built-in searcher what came of it.

        Without ``measured`` the campaign measures it with its measure (and its confirmation).
        With ``measured``, the caller measured it its own way: one :class:`Measurement` (a value,
        or an invalid reason), or several (repeats, each on a fresh engine start). The runs go to
        the ledger and are judged by the same rule: the first against the baseline's floor; when
        it clears the bar, the second must clear it too. Given only a first run that clears the
        bar, the verdict is "pending": nothing is adopted or told to the searcher, :meth:`ask`
        returns the proposal again (``role`` "confirm"), and telling it with its second run
        finishes the verdict. A win told this way becomes the baseline with the noise floor of
        its runs told."""
        if measured is None:
            self._needs_measure("tell() without a measurement")
            verdict = self.evaluate(proposal.config, proposal.hypothesis)
            step = self._result.steps[-1]
        else:
            runs = [measured] if isinstance(measured, Measurement) else list(measured)
            verdict, told = self._judge_told(proposal, runs)
            if told is None:
                return verdict
            step = told
        if self._search is not None:
            _tell(self._search, proposal, step)
        return verdict

    def _needs_measure(self, what: str) -> Measure:
        """The campaign's measure; a campaign without one is told its measurements."""
        if self._measure is None:
            from replay.errors import ConfigError

            raise ConfigError(
                f"{what} needs a campaign with a measure: this one's configs are measured by its "
                f"caller (tell(proposal, measurement))"
            )
        return self._measure

    def _judge_told(self, proposal: Proposal, runs: list[Measurement]) -> tuple[Verdict, Step | None]:
        """:meth:`tell` with runs measured by the caller: (the verdict, its step; None while a
        first run that cleared the bar waits for its confirmation)."""
        if not runs:
            from replay.errors import ConfigError

            raise ConfigError("tell(): no measurement given (one Measurement, or a list of repeats)")
        self.start()
        noise, base, config = self._result.best_noise, self._result.best, dict(proposal.config)
        key = config_key(config)
        previous = self.ledger.judged(config)
        if previous is not None:
            verdict = self._from_ledger(previous, noise)
            step = Step(config, dict(proposal.hypothesis), verdict, reused=True)
            self._result.steps.append(step)
            return verdict, step
        if not self.space.allows(config):
            verdict = self._forbidden(proposal)
            step = Step(config, dict(proposal.hypothesis), verdict)
            self._result.steps.append(step)
            return verdict, step
        pending = self._pending.pop(key, None)
        if pending is not None:  # its first run is in the ledger, waiting for this confirmation
            entry = [e for e in self.ledger.entries(config, "candidate") if e.verdict is None][-1]
            row, first, proposal = entry.id, entry.measurement, pending
        else:
            first = runs.pop(0)
            self._result.count_gate(first.details)
            row = self.ledger.record(config, "candidate", first, hypothesis=proposal.hypothesis)
        if not runs and judge(noise, first).kind == "better":
            self._pending[key] = replace(proposal, role="confirm")
            b, value = noise.median, first.valid_value()
            return Verdict(
                "pending",
                f"{value:.4g} clears the bar of the baseline {b:.4g} ± {noise.spread:.3g} "
                f"once: a win must repeat; tell a second run on a fresh engine start",
                (value - b) / b if b else None,
                (first,),
            ), None
        for m in runs:  # repeats on fresh starts: the confirmation first, and with a win, its floor
            self._result.count_gate(m.details)
            self.ledger.record(config, "confirm", m, hypothesis=proposal.hypothesis)
        verdict = judge(noise, first, lambda: runs[0])
        checked = self._checked(proposal, first, verdict.kind)
        self.ledger.set_verdict(row, verdict.kind, verdict.reason, checked)
        step = Step(config, checked, verdict, needs_approval=self._needs_approval(base, config, verdict))
        self._result.steps.append(step)
        if step.needs_approval:
            self._result.awaiting_approval.append(step)
        elif verdict.kind == "better":
            self._accept(step)
        return verdict, step

    def close(self) -> None:
        self.ledger.close()
        self.pool.close()


def _tell(searcher: Searcher, proposal: Proposal, step: Step) -> None:
    """Tell ``searcher`` what came of ``proposal``; a win awaiting approval as "same" (with its
    value), since the campaign does not continue from it."""
    v = step.verdict
    value = v.measurements[0].value if v.measurements else None
    searcher.tell(proposal, "same" if step.needs_approval else v.kind, value)
