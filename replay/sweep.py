"""Rising-rate sweeps: the same trace replayed at each rate, and the rate where the target saturates.

The saturation point is the first rate at which the target stops keeping up: a queue builds
through the stage (TTFT from the intended send at least doubles from the first third of the stage
to the last, and grows by more than a bound), most requests fail, or the SLO fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.runner import Progress, StageResult, resolve_model, run_stage
from replay.trace import Trace

__all__ = ["SweepResult", "sweep", "saturation", "QUEUE_GROWTH_S"]


@dataclass(frozen=True)
class SweepResult:
    stages: list[StageResult]
    summaries: list[dict]
    saturation_rate: float | None  # None: no stage saturated
    saturation_reason: str | None

    def to_json(self) -> dict:
        return {
            "stages": self.summaries,
            "saturation": {"rate": self.saturation_rate, "reason": self.saturation_reason},
        }


QUEUE_GROWTH_S = 0.25


def saturation(
    rates: Sequence[float], summaries: Sequence[dict], queue_growth_s: float = QUEUE_GROWTH_S
) -> tuple[float | None, str | None]:
    """The first rate at which the target stops keeping up, and why."""
    for rate, s in zip(rates, summaries):
        if s["sent"] and s["completed"] < 0.9 * s["sent"]:
            return rate, f"only {s['completed']}/{s['sent']} requests completed"
        q = s["queue"]
        if q["growth_ms"] is not None and q["growth_ms"] > max(queue_growth_s * 1e3, q["ttft_first_third_ms"]):
            return rate, (f"a queue built up: TTFT p50 grew from {q['ttft_first_third_ms']:.0f} ms to "
                          f"{q['ttft_last_third_ms']:.0f} ms through the stage")
        if s["slo_pass"] is False:
            return rate, f"SLO attainment {s['slo_attainment']:.0%} below target"
    return None, None


def sweep(
    trace: Trace,
    config: RunConfig,
    rates: Sequence[float],
    *,
    queue_growth_s: float = QUEUE_GROWTH_S,
    progress: Callable[[float], Progress | None] | None = None,
    on_stage: Callable[[int, float, StageResult], None] | None = None,
    stop_after_saturation: bool = False,
) -> SweepResult:
    """Replay `trace` once per rate (in the order given); `on_stage` sees each stage as it ends."""
    if not rates:
        raise ConfigError("--rates: give at least one rate")
    if config.speedup is not None:
        raise ConfigError("--speedup: a sweep sets the rate of each stage; use --rates")
    model = resolve_model(trace, config)
    stages: list[StageResult] = []
    for i, rate in enumerate(rates):
        stage_config = dataclasses.replace(config, rate=rate)
        result = run_stage(trace, stage_config, progress(rate) if progress else None, model=model)
        stages.append(result)
        if on_stage is not None:
            on_stage(i, rate, result)
        if result.interrupted:
            break
        if stop_after_saturation and saturation(rates[: i + 1], [s.summary for s in stages], queue_growth_s)[0]:
            break
    summaries = [s.summary for s in stages]
    rate, reason = saturation(rates[: len(stages)], summaries, queue_growth_s)
    return SweepResult(stages=stages, summaries=summaries, saturation_rate=rate, saturation_reason=reason)
