"""Rising-rate sweeps: the same trace replayed at each rate, and the rate where the target saturates.

A stage shows that the target stopped keeping up when any of these holds (checked in this order):

- more than ``MAX_FAILED_SHARE`` (10%) of the requests it sent failed, not counting those the
  server rejected as invalid (HTTP 4xx other than 408 and 429: they would fail at any rate);
- a queue built through the stage: the median TTFT (from the intended send) of its last third is
  more than double that of its first third and more than ``queue_growth_s`` (default 250 ms) above it;
- its SLO failed (fewer than the attainment share of its requests met every objective).

The saturation point is the rate of the first stage, in the order run, that shows it. If that stage
is invalid (its send lag p99 exceeded the bound, or it was cancelled) the point is *undetermined* at
that rate instead: the runner's own lateness may have caused what it shows. :func:`saturation` is
this rule, a pure function over stage summaries.

**Repeats.** With ``repeats=K`` every stage runs K times: the whole list of stages once per
repeat, each repeat on a target of its own when the caller starts one (a fresh engine start:
``target``). Each repeat is judged as above on its own; the sweep's saturation point is the lowest
load where any repeat saturated or was undetermined (a load counts as held only when it held every
time). :func:`held_interval` says it as an interval: the highest load that held in every repeat,
the lowest that held in none, and the share of repeats that held each load between (a load holds
in a repeat when it and every lower load kept up and were valid). :func:`by_load` gives each load's
median and spread (:class:`replay.noise.NoiseFloor`) of the table's metrics over its valid repeats.

:func:`find_rates` picks the rates themselves: short probe stages double the rate until one shows
saturation, bisect between the last rate that kept up and the first that did not until they are
within 10% of each other, then spread the stages from a quarter of that rate to 1.5 times it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from replay.config import RETRY_INVALID, RunConfig
from replay.errors import ConfigError
from replay.plan import build_plan, schedule
from replay.engine_metrics import exhausted
from replay.metrics import StageSummary, load_label
from replay.noise import NoiseFloor
from replay.runner import Progress, RowsSink, StageResult, resolve_model, run_plan
from replay.targets.url import reset_prefix_cache
from replay.trace import Trace

__all__ = [
    "SweepResult",
    "Saturation",
    "HeldInterval",
    "RateSearch",
    "sweep",
    "saturation",
    "held_interval",
    "by_load",
    "find_rates",
    "check_stages",
    "check_repeats",
    "QUEUE_GROWTH_S",
    "MAX_FAILED_SHARE",
    "REPEAT_METRICS",
]

QUEUE_GROWTH_S = 0.25
MAX_FAILED_SHARE = 0.1  # a stage where more than this share of the sent requests failed has saturated

# find_rates defaults (see its docstring for the time bound they give)
START_RATE = 1.0
PROBE_S = 10.0
PROBE_TIMEOUT_S = 60.0
MAX_PROBES = 10
PRECISION = 0.10  # bisect until the lowest saturated rate is within 10% above the highest kept-up one
SPREAD = (0.25, 1.5)  # the stages run from SPREAD[0] to SPREAD[1] times the saturation rate
_LOWEST = 1 / 16  # probes go down to this share of start_rate at most

SaturationStatus = Literal["saturated", "undetermined", "not_reached"]


@dataclass(frozen=True)
class Saturation:
    """Where a sweep saturated: ``status`` says which of the other fields is set."""

    status: SaturationStatus
    rate: float | None = None  # the saturation point (status "saturated"; None also for an as-recorded stage)
    undetermined_at: float | None = None  # the invalid stage's rate (status "undetermined")
    # a closed-loop sweep's stage where it saturated (or was undetermined): its users
    concurrency: int | None = None
    reason: str | None = None
    # what the engine ran out of at that stage, from its own metrics (replay.engine_metrics.exhausted)
    resource: str | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def where(saturation: dict) -> str:
        """The stage a saturation (its JSON) names, in words: "8 req/s", "16 users", "the recorded rate"."""
        rate = saturation.get("rate") if saturation["status"] == "saturated" else saturation.get("undetermined_at")
        if saturation.get("concurrency") is None and rate is None:
            return "the recorded rate"
        return load_label(rate, saturation.get("concurrency"))


def _symptom(s: StageSummary, queue_growth_s: float) -> str | None:
    failed = s.sent - s.completed - s.rejected
    if s.sent and failed > MAX_FAILED_SHARE * s.sent:
        return f"{failed} of {s.sent} requests sent failed (more than {MAX_FAILED_SHARE:.0%})"
    q = s.queue
    first, growth = q["ttft_first_third_ms"], q["growth_ms"]
    if growth is not None and first is not None and growth > max(queue_growth_s * 1e3, first):
        return (
            f"a queue built up: TTFT p50 grew from {q['ttft_first_third_ms']:.0f} ms to "
            f"{q['ttft_last_third_ms']:.0f} ms through the stage"
        )
    if s.slo_pass is False:
        return f"SLO attainment {s.slo_attainment:.0%} below target"
    return None


def _invalid_because(s: StageSummary) -> str:
    if s.cancelled:
        return "the stage was cancelled"
    p99 = s.send_lag_ms["p99"]
    if p99 is None:
        return "nothing was sent"
    return f"send lag p99 {p99:.1f} ms above the {s.lag_bound_ms:g} ms bound"


def saturation(
    rates: Sequence[float | None], summaries: Sequence[StageSummary], queue_growth_s: float = QUEUE_GROWTH_S
) -> Saturation:
    """The saturation point of stages run at `rates` (in order), from their summaries (module docstring)."""
    for rate, s in zip(rates, summaries):
        reason = _symptom(s, queue_growth_s)
        if reason is None:
            continue
        resource = exhausted(s.engine_metrics)
        users = s.concurrency
        if not s.valid:
            return Saturation(
                "undetermined",
                undetermined_at=rate,
                reason=f"{reason}, but {_invalid_because(s)}: it may be the runner's",
                resource=resource,
                concurrency=users,
            )
        return Saturation("saturated", rate=rate, reason=reason, resource=resource, concurrency=users)
    return Saturation("not_reached")


def _load(summary: StageSummary) -> float | None:
    """A stage's load: its users (closed loop) or its requested rate (None: as recorded / sped up)."""
    return summary.concurrency if summary.concurrency is not None else summary.requested_rate


def _passes(summaries: Sequence[StageSummary]) -> list[list[StageSummary]]:
    """The stages of each repeat, in the order run (one pass when the stages were not repeated)."""
    passes: dict[int | None, list[StageSummary]] = {}
    for s in summaries:
        passes.setdefault(s.repeat, []).append(s)
    return list(passes.values())


def _saturation_over(summaries: Sequence[StageSummary], queue_growth_s: float) -> Saturation:
    """:func:`saturation` of each repeat; over several, the one at the lowest load (module docstring)."""
    found = [saturation([s.requested_rate for s in p], p, queue_growth_s) for p in _passes(summaries)]
    found = [f for f in found if f.status != "not_reached"]
    if not found:
        return Saturation("not_reached")

    def where(f: Saturation) -> float:
        load = f.concurrency if f.concurrency is not None else (f.rate if f.status == "saturated" else f.undetermined_at)
        return math.inf if load is None else load

    return min(found, key=where)


@dataclass(frozen=True)
class HeldInterval:
    """Where a sweep's target stopped keeping up, over its repeats (:func:`held_interval`)."""

    held: float | None  # the highest load that held in every repeat (None: the lowest did not)
    not_held: float | None  # the lowest load that held in no repeat (None: every load held at least once)
    shares: list[dict]  # per load, rising: {"load", "held": repeats it held in, "of": repeats judged}
    unit: str  # "req/s" or "users"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def line(interval: dict) -> str:
        """The interval (its JSON) in words."""
        unit, shares = interval["unit"], interval["shares"]
        each = ", ".join(f"{x['load']:g} in {x['held']} of {x['of']}" for x in shares)
        if interval["held"] is None and interval["not_held"] is None:
            head = "no load held in every repeat, and none failed in all"
        elif interval["held"] is None:
            head = f"below {interval['not_held']:g} {unit}: the lowest load did not hold in every repeat"
        elif interval["not_held"] is None:
            top = shares[-1]["load"]
            head = (
                f"held up to {interval['held']:g} {unit} in every repeat"
                if interval["held"] == top
                else f"between {interval['held']:g} {unit} (held in every repeat) and above {top:g} {unit}"
            )
        else:
            head = (
                f"between {interval['held']:g} {unit} (held in every repeat) and {interval['not_held']:g} {unit} (held in none)"
            )
        return f"saturation interval: {head}; held: {each} ({unit})"


def held_interval(summaries: Sequence[StageSummary], queue_growth_s: float = QUEUE_GROWTH_S) -> HeldInterval | None:
    """The saturation interval of stages (their summaries, in the order run) over their repeats
    (module docstring); None when a stage has no load to order by (as recorded or sped up)."""
    of = {id(s): _load(s) for s in summaries}
    loads = [x for x in of.values() if x is not None]
    if not loads or len(loads) < len(of):
        return None
    load_of = {k: x for k, x in of.items() if x is not None}  # every stage's, known
    held: dict[float, int] = {}
    judged: dict[float, int] = {}
    for stages in _passes(summaries):
        ran = {load_of[id(s)] for s in stages}
        # the lowest load of this repeat that did not keep up or was invalid
        failed_at = min((load_of[id(s)] for s in stages if not s.valid or _symptom(s, queue_growth_s)), default=math.inf)
        for load in set(loads):
            if load in ran or load > failed_at:  # a load skipped after the saturation point did not hold
                judged[load] = judged.get(load, 0) + 1
                held[load] = held.get(load, 0) + (load < failed_at)
    shares = [{"load": x, "held": held[x], "of": judged[x]} for x in sorted(judged)]
    top_held = None
    for x in shares:  # the highest load that held every time, with every lower load too
        if x["held"] != x["of"]:
            break
        top_held = x["load"]
    none = [x["load"] for x in shares if x["held"] == 0 and (top_held is None or x["load"] > top_held)]
    unit = "users" if summaries[0].concurrency is not None else "req/s"
    return HeldInterval(held=top_held, not_held=min(none) if none else None, shares=shares, unit=unit)


# the per-load table of a sweep with repeats: name -> (path into a stage summary, format)
REPEAT_METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "achieved": (("achieved_send_rate",), "{:.3g}"),
    "req/s": (("throughput_rps",), "{:.2f}"),
    "tok/s": (("output_tokens_per_s",), "{:.0f}"),
    "TTFT p50": (("ttft_ms", "from_intended", "p50"), "{:.1f}"),
    "TTFT p99": (("ttft_ms", "from_intended", "p99"), "{:.1f}"),
    "TPOT p50": (("tpot_ms", "p50"), "{:.2f}"),
    "E2E p50": (("e2e_ms", "from_intended", "p50"), "{:.1f}"),
    "E2E p99": (("e2e_ms", "from_intended", "p99"), "{:.1f}"),
    "goodput": (("goodput_rps",), "{:.2f}"),
    "lag p99": (("send_lag_ms", "p99"), "{:.2f}"),
}


def by_load(summaries: Sequence[StageSummary]) -> list[dict]:
    """The stages grouped by load (rising; as-recorded stages last): for each, its runs, how many
    were valid, and every :data:`REPEAT_METRICS` metric's median and spread (a
    :class:`replay.noise.NoiseFloor` over the valid runs; None where no valid run has a value)."""
    groups: dict[float | None, list[StageSummary]] = {}
    for s in summaries:
        groups.setdefault(_load(s), []).append(s)
    out = []
    for load in sorted(groups, key=lambda x: (x is None, x or 0)):
        runs = groups[load]
        valid = [s for s in runs if s.valid]
        metrics = {}
        for name, (path, _) in REPEAT_METRICS.items():
            values = []
            for s in valid:
                v: Any = getattr(s, path[0])
                for key in path[1:]:
                    v = v.get(key) if isinstance(v, dict) else None
                if v is not None and math.isfinite(v):
                    values.append(float(v))
            floor = NoiseFloor(tuple(values)) if values else None
            metrics[name] = None if floor is None else {"median": floor.median, "spread": floor.spread, "values": values}
        out.append(
            {
                "load": load,
                "requested_rate": runs[0].requested_rate,
                "concurrency": runs[0].concurrency,
                "runs": len(runs),
                "valid": len(valid),
                "metrics": metrics,
            }
        )
    return out


@dataclass(frozen=True)
class RateSearch:
    """What :func:`find_rates` probed and the stage rates it chose."""

    probes: list[dict]  # per probe, in order: rate, offered_rate, sent, completed, valid, status, reason
    kept_up_rate: float | None  # the highest probed rate that showed no saturation
    saturation: Saturation  # the lowest probed rate that did (saturated or undetermined), if any
    rates: list[float]  # the stages chosen, rising
    elapsed_s: float
    interrupted: bool = False  # Ctrl-C during a probe: the search stopped there

    def to_json(self) -> dict:
        return {
            "probes": self.probes,
            "kept_up_rate": self.kept_up_rate,
            "saturation": self.saturation.to_json(),
            "rates": self.rates,
            "elapsed_s": self.elapsed_s,
            "interrupted": self.interrupted,
        }


@dataclass(frozen=True)
class SweepResult:
    """One sweep (or one `replay run`: a single stage): the stages run so far and the saturation point.

    The one result of the library and the CLI; :meth:`to_json` is the one JSON shape (summary.json).
    """

    config: RunConfig  # the sweep's config; each stage ran it with its own rate (or users)
    rates: list[float | None]  # the requested rate of every stage planned (None: as recorded / sped up / closed loop)
    stages: list[StageResult]  # the stages run, in order (fewer than `rates` when stopped early)
    summaries: list[StageSummary]  # their summaries (replay.metrics.summarize)
    saturation: Saturation
    queue_growth_s: float = QUEUE_GROWTH_S
    rate_search: RateSearch | None = None  # how the rates were chosen (--rates auto)
    concurrency: list[int] | None = None  # a closed-loop sweep: the users of every stage planned
    repeats: int = 1  # each stage ran this many times (the rates of `rates` once per repeat)

    @classmethod
    def of(
        cls,
        config: RunConfig,
        rates: Sequence[float | None],
        stages: Sequence[StageResult],
        *,
        queue_growth_s: float = QUEUE_GROWTH_S,
        rate_search: RateSearch | None = None,
        concurrency: Sequence[int] | None = None,
        repeats: int = 1,
    ) -> SweepResult:
        """The result of `stages`, run at the first rates of `rates` (or users of `concurrency`):
        summaries and saturation computed (over the repeats, module docstring)."""
        summaries = [s.summary for s in stages]
        return cls(
            config=config,
            rates=list(rates),
            stages=list(stages),
            summaries=summaries,
            saturation=_saturation_over(summaries, queue_growth_s),
            queue_growth_s=queue_growth_s,
            rate_search=rate_search,
            concurrency=None if concurrency is None else list(concurrency),
            repeats=repeats,
        )

    @property
    def interval(self) -> HeldInterval | None:
        """The saturation interval over the repeats (:func:`held_interval`)."""
        return held_interval(self.summaries, self.queue_growth_s)

    @property
    def saturation_rate(self) -> float | None:
        return self.saturation.rate

    @property
    def saturation_reason(self) -> str | None:
        return self.saturation.reason

    @property
    def interrupted(self) -> bool:
        return any(s.interrupted for s in self.stages)

    def to_json(self, **context) -> dict:
        """The result as JSON-ready data; `context` (e.g. the CLI's trace path and stage files) comes first."""
        c = self.config
        body: dict[str, Any] = {
            "url": c.url,
            "arrivals": dataclasses.asdict(c.arrivals),
            "duration_s": c.duration_s,
            "requests": c.requests,
            "speedup": c.speedup,
            "max_queue_growth_s": self.queue_growth_s,
            "rates": self.rates,
            "concurrency": self.concurrency,
            "rate_search": self.rate_search.to_json() if self.rate_search else None,
            "stages": [s.to_json() for s in self.summaries],
            "saturation": self.saturation.to_json(),
            "repeats": self.repeats,
        }
        if c.fleet:  # replay.fleet: every replica, and how requests were routed among them
            body["targets"] = [{"name": t.name, "url": t.url} for t in c.targets]
            body["route"] = c.routing
        if self.repeats > 1:
            interval = self.interval
            body["interval"] = interval.to_json() if interval else None
            body["by_load"] = by_load(self.summaries)
        clash = sorted(set(context) & set(body))
        if clash:
            raise ConfigError(f"to_json: context key '{clash[0]}' is a result field")
        return {**context, **body}


def check_stages(
    trace: Trace, config: RunConfig, rates: Sequence[float], concurrency: Sequence[int] | None = None
) -> list[RunConfig]:
    """Each stage's config (a closed-loop sweep: one per number of users in `concurrency`, and no
    rates); every stage's schedule is built, so a bad flag is a ConfigError before any runs."""
    if concurrency is not None:
        if rates:
            raise ConfigError("--rates and --concurrency: give one (open-loop rates or closed-loop users)")
        if not concurrency:
            raise ConfigError("--concurrency: give at least one number of users")
        configs = [dataclasses.replace(config, concurrency=c) for c in concurrency]
        for c in configs:
            schedule(trace, c)
        return configs
    if not rates:
        raise ConfigError("--rates: give at least one rate")
    if config.speedup is not None:
        raise ConfigError("--speedup: a sweep sets the rate of each stage; use --rates")
    configs = [dataclasses.replace(config, rate=float(rate)) for rate in rates]
    for c in configs:
        schedule(trace, c)
    return configs


def check_repeats(repeats: int) -> int:
    """`repeats` if it is a whole number >= 1 (--repeats), else ConfigError."""
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ConfigError(f"--repeats: must be a whole number >= 1, got {repeats!r}")
    return repeats


def check_retries(retry_invalid: int, reset_cache: bool) -> int:
    """`retry_invalid` if it is a whole number >= 0 (--retry-invalid) that the sweep can honour
    (a retried stage must start from a cold prefix cache, as its first attempt did), else ConfigError."""
    if not (isinstance(retry_invalid, int) and retry_invalid >= 0):
        raise ConfigError(f"--retry-invalid: must be a whole number >= 0, got {retry_invalid!r}")
    if retry_invalid and not reset_cache:
        raise ConfigError(
            "--retry-invalid: a stage run again would find its first attempt's prefixes cached; "
            "it needs the prefix cache reset before each stage (drop --keep-prefix-cache)"
        )
    return retry_invalid


def sweep(
    trace: Trace,
    config: RunConfig,
    rates: Sequence[float] | RateSearch | None,
    *,
    concurrency: Sequence[int] | None = None,
    queue_growth_s: float = QUEUE_GROWTH_S,
    progress: Callable[[str], Progress | None] | None = None,
    on_stage: Callable[[SweepResult], None] | None = None,
    on_rows: Callable[[int, RunConfig], RowsSink] | None = None,
    stop_after_saturation: bool = False,
    reset_cache: bool = True,
    repeats: int = 1,
    target: Callable[[RunConfig], contextlib.AbstractContextManager[RunConfig]] | None = None,
    retry_invalid: int = RETRY_INVALID,
    stage_runner: Callable[..., StageResult] | None = None,
) -> SweepResult:
    """Replay `trace` once per rate (in the order given, or the rates a :func:`find_rates` search
    chose), or, with `concurrency` (and no rates), once per number of users in closed loop; with
    `rates` None, one stage at `config`'s own load (``replay run``).

    Every stage's flags are checked and the target probed (TargetError when it cannot serve) before
    the first stage. `progress(label)` gives the stage's progress callback (label: its load in
    words, :func:`replay.metrics.load_label`); `on_stage` sees the result so far after each stage
    (to save partial results); `on_rows(index, stage_config)` gives the stage's sink for its rows
    as they come (:func:`run_plan`). `stop_after_saturation` skips the stages after the first one
    that saturated or was undetermined. With `reset_cache` the target is asked to drop its prefix
    cache before each stage (:func:`replay.targets.url.reset_prefix_cache`), so that a stage does
    not hit what the stages before it cached (the same requests, replayed again); what the target
    answered is in each stage's summary (`prefix_cache`).

    `repeats`: every stage K times, the list of stages once per repeat (module docstring). `target`
    (optional) is entered once per repeat with `config` and yields it aimed at the target that
    repeat runs on: a freshly started engine, so that a repeat's noise includes an engine start.

    `retry_invalid`: a stage the runner made invalid (its send lag p99 over the bound: the machine
    held the sender up) is run again, after the same prefix-cache reset, up to this many more
    times; the first valid attempt is kept (else the last), and the kept stage lists the reasons
    of the attempts it replaced (`discarded_attempts`), which are judged nowhere. 0: as run.

    `stage_runner`: runs each stage's plan, with :func:`run_plan`'s arguments (plan, config,
    progress, on_rows); default :func:`run_plan` (one runner here), or the shards of
    :class:`replay.shards.RayShards` (one trace on a cluster, one clock).
    """
    check_repeats(repeats)
    check_retries(retry_invalid, reset_cache)
    search = rates if isinstance(rates, RateSearch) else None
    users: list[int] | None
    stage_rates: list[float | None]
    if rates is None:
        schedule(trace, config)
        stage_rates, users = [config.rate], None if config.concurrency is None else [config.concurrency]

        def configs_of(aimed: RunConfig) -> list[RunConfig]:
            return [aimed]
    else:
        asked = list(rates.rates if isinstance(rates, RateSearch) else rates)
        users = None if concurrency is None else list(concurrency)
        check_stages(trace, config, asked, users)
        stage_rates = [None] * len(users) if users is not None else list(asked)

        def configs_of(aimed: RunConfig) -> list[RunConfig]:
            return check_stages(trace, aimed, [] if users is not None else asked, users)

    stages: list[StageResult] = []

    def result_of() -> SweepResult:
        return SweepResult.of(
            config,
            stage_rates * repeats,
            stages,
            queue_growth_s=queue_growth_s,
            rate_search=search,
            concurrency=None if users is None else users * repeats,
            repeats=repeats,
        )

    result = result_of()
    for k in range(repeats):
        with target(config) if target else contextlib.nullcontext(config) as aimed:
            model = resolve_model(trace, aimed)
            for stage_config in configs_of(aimed):
                label = load_label(stage_config.rate, stage_config.concurrency)
                if repeats > 1:
                    label += f", repeat {k + 1} of {repeats}"
                discarded: list[str] = []
                while True:
                    plan = build_plan(trace, stage_config, model=model)  # each attempt reads its bodies anew
                    reset = "kept (--keep-prefix-cache)"
                    if reset_cache:  # a fleet: every replica's
                        resets = [
                            reset_prefix_cache(url, headers=stage_config.request_headers(), context=stage_config.ssl_context())
                            for url in [t.url for t in stage_config.targets] or [stage_config.url]
                        ]
                        reset = (
                            resets[0]
                            if len(set(resets)) == 1
                            else "; ".join(f"{t.name}: {r}" for t, r in zip(stage_config.targets, resets))
                        )
                    stage = (stage_runner or run_plan)(
                        plan,
                        stage_config,
                        progress(label + (f", attempt {len(discarded) + 1}" if discarded else "")) if progress else None,
                        on_rows(len(stages), stage_config) if on_rows else None,
                    )
                    summary = stage.summary
                    if summary.valid or stage.cancelled or stage.interrupted or len(discarded) >= retry_invalid:
                        break
                    discarded.append(summary.invalid_reason or "invalid")
                stages.append(
                    dataclasses.replace(
                        stage, prefix_cache=reset, repeat=k if repeats > 1 else None, discarded_attempts=tuple(discarded)
                    )
                )
                result = result_of()
                if on_stage is not None:
                    on_stage(result)
                if stages[-1].interrupted:
                    return result
                if (
                    stop_after_saturation
                    and _saturation_over(_passes(result.summaries)[-1], queue_growth_s).status != "not_reached"
                ):
                    break
    return result


def _max_rate(rows: int, duration_s: float | None) -> float:
    """The highest rate whose --duration window the trace can fill (round(rate * duration) < rows)."""
    return math.inf if duration_s is None else (rows - 1) / duration_s


def _spread(center: float, points: int, top: float, bottom: float) -> list[float]:
    hi = max(min(SPREAD[1] * center, top), bottom)
    lo = max(min(SPREAD[0] * center, hi / 2), bottom)
    rates = sorted({float(f"{r:.3g}") for r in np.linspace(lo, hi, points)})
    return [r for r in rates if r > 0]


def find_rates(
    trace: Trace,
    config: RunConfig,
    points: int = 5,
    *,
    start_rate: float = START_RATE,
    probe_s: float = PROBE_S,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    max_probes: int = MAX_PROBES,
    queue_growth_s: float = QUEUE_GROWTH_S,
    progress: Callable[[float], Progress | None] | None = None,
) -> RateSearch:
    """Find the saturation rate with short probe stages, then choose `points` stage rates around it.

    Each probe replays the trace's first requests at one rate for a `probe_s` window (all of the
    trace, or of `config.requests`, when it holds fewer than that window needs) with a per-request
    timeout of at most `probe_timeout_s`, and judges it with :func:`saturation`. The rate starts at
    `start_rate` and doubles until a probe saturates (or halves, down to 1/16 of it and to no fewer
    than one request per window, until one keeps up), then bisects (geometric mean) between the
    highest rate that kept up and the lowest that did not until the latter is within 10% above the former.
    An undetermined probe (the runner could not keep its schedule) counts as not keeping up. The
    chosen rates are spaced evenly from a quarter of the lowest saturated rate to 1.5 times it (with
    none found, around the highest rate that kept up), kept between one request per
    `config.duration_s` window and the highest rate whose window the trace can fill.

    Time bound: a probe ends at most `probe_s` + `probe_timeout_s` after it starts, so the search
    takes at most ``max_probes * (probe_s + probe_timeout_s)`` (defaults: 10 * 70 s, about 12 min);
    it usually ends well before, since a probe ends when its last response does.
    """
    if not (isinstance(points, int) and points >= 2):
        raise ConfigError(f"--rates auto:N: N must be a whole number >= 2, got {points!r}")
    for name, value in (("start_rate", start_rate), ("probe_s", probe_s), ("probe_timeout_s", probe_timeout_s)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"find_rates: {name} must be a finite number > 0, got {value}")
    if max_probes < 2:
        raise ConfigError(f"find_rates: max_probes must be >= 2, got {max_probes}")
    if config.speedup is not None:
        raise ConfigError("--speedup: a sweep sets the rate of each stage; use --rates")
    rows = config.requests or trace.df.height
    schedule(trace, dataclasses.replace(config, rate=start_rate, duration_s=None))  # bad flags: before any probe
    top = _max_rate(rows, config.duration_s)
    bottom = 0.0 if config.duration_s is None else 1 / config.duration_s  # a stage sends at least one request
    model = resolve_model(trace, config)
    started = time.monotonic()
    timeout_s = min(config.timeout_s, probe_timeout_s)
    probes: list[dict] = []
    kept_up: float | None = None
    worst: tuple[float, Saturation] | None = None  # the lowest rate that did not keep up
    rate = start_rate
    while len(probes) < max_probes:
        window = probe_s if round(rate * probe_s) < rows else None  # else: all the rows at this rate
        probe_config = dataclasses.replace(config, rate=rate, duration_s=window, timeout_s=timeout_s)
        stage = run_plan(build_plan(trace, probe_config, model=model), probe_config, progress(rate) if progress else None)
        s = stage.summary
        verdict = saturation([rate], [s], queue_growth_s)
        status = "kept_up" if verdict.status == "not_reached" else verdict.status
        probes.append(
            {
                "rate": rate,
                "offered_rate": s.offered_rate,
                "sent": s.sent,
                "completed": s.completed,
                "valid": s.valid,
                "status": status,
                "reason": verdict.reason,
            }
        )
        if stage.interrupted:
            break
        if status == "kept_up":
            kept_up = rate if kept_up is None else max(kept_up, rate)
        elif worst is None or rate < worst[0]:
            worst = (rate, verdict)
        if worst is None:
            if rate >= top:
                break
            rate = min(rate * 2, top)
        elif kept_up is None:
            if rate / 2 < start_rate * _LOWEST or round(rate / 2 * probe_s) < 1:
                break
            rate /= 2
        elif worst[0] / kept_up <= 1 + PRECISION:
            break
        else:
            rate = float(f"{math.sqrt(kept_up * worst[0]):.3g}")
    found = worst[1] if worst else Saturation("not_reached")
    center = worst[0] if worst else (kept_up or start_rate)
    return RateSearch(
        probes=probes,
        kept_up_rate=kept_up,
        saturation=found,
        rates=_spread(center, points, top, bottom),
        elapsed_s=time.monotonic() - started,
        interrupted=stage.interrupted,
    )
