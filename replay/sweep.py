"""Rising-rate sweeps: the same trace replayed at each rate, and the rate where the target saturates.

The saturation point is the first rate whose completions stop keeping up with sends (tracking
ratio under a tolerance), whose requests mostly fail, or whose SLO fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from replay.config import RunConfig
from replay.errors import ConfigError
from replay.runner import Progress, StageResult, resolve_model, run_stage
from replay.trace import Trace

__all__ = ["SweepResult", "sweep", "saturation"]


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


def saturation(rates: Sequence[float], summaries: Sequence[dict], track_tolerance: float = 0.9) -> tuple[float | None, str | None]:
    """The first rate at which the target stops keeping up, and why."""
    for rate, s in zip(rates, summaries):
        if s["sent"] and s["completed"] < 0.9 * s["sent"]:
            return rate, f"only {s['completed']}/{s['sent']} requests completed"
        ratio = s["tracking_ratio"]
        if ratio is not None and ratio < track_tolerance:
            return rate, f"completions fell behind sends (tracking ratio {ratio:.2f} < {track_tolerance})"
        if s["slo_pass"] is False:
            return rate, f"SLO attainment {s['slo_attainment']:.0%} below target"
    return None, None


def sweep(
    trace: Trace,
    config: RunConfig,
    rates: Sequence[float],
    *,
    track_tolerance: float = 0.9,
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
        if stop_after_saturation and saturation(rates[: i + 1], [s.summary for s in stages], track_tolerance)[0]:
            break
    summaries = [s.summary for s in stages]
    rate, reason = saturation(rates[: len(stages)], summaries, track_tolerance)
    return SweepResult(stages=stages, summaries=summaries, saturation_rate=rate, saturation_reason=reason)
