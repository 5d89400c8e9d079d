"""Is a candidate config better than the baseline, beyond the bench's own wobble?

The noise floor comes from the baseline replayed ``REPEATS`` (4) times, each on a freshly
started engine (:class:`NoiseFloor`: median, MAD and standard deviation of the objective). Its
spread is ``s = max(1.4826 * MAD, SD, MIN_SPREAD * median)``: 1.4826 * MAD estimates a standard
deviation robustly, but from four runs it can come out tiny by luck, so the sample standard
deviation and a floor of 0.5% of the median bound it from below. A candidate measured at ``c``
against the baseline median ``b`` (higher is better):

- **better** when ``c - b > K * s + MIN_GAIN * b`` and a second measurement, on a freshly
  restarted engine, clears the same bar (a win that does not repeat is **same**); in a campaign
  the second one's bar is that of the floor with a run of the baseline measured beside it
  (:mod:`optimizer.campaign`, rechecks);
- **worse** when ``c - b < -K * s``;
- **same** otherwise;
- **invalid** when the measurement itself is not to be trusted (the engine failed to start,
  requests failed, the runner fell behind, the fidelity gate failed, outputs changed under a
  lossless knob): :class:`Measurement.invalid` says why.

With ``K = 3`` and ``MIN_GAIN`` 1%, a candidate identical to the baseline is judged better only
when two independent measurements each land more than three standard deviations and 1% high:
with 5% run-to-run noise that happened in 0.45% of 20,000 simulated A/A comparisons, and
tests/unit/optimizer measures it again. The smallest win it can see is about ``3 s + 1%``.
A campaign whose baseline spread is over ``MAX_NOISE`` (the campaign's ``max_noise``, 25% by default)
of its median stops: the environment is too unstable to decide anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.noise import K, MAX_NOISE, MIN_GAIN, MIN_SPREAD, NoiseFloor

__all__ = ["REPEATS", "K", "MIN_GAIN", "MIN_SPREAD", "MAX_NOISE", "Measurement", "NoiseFloor", "Verdict", "judge"]

REPEATS = 4


@dataclass(frozen=True)
class Measurement:
    """One replay of one config on one engine start: the objective's value, or why it is invalid."""

    value: float | None
    invalid: str | None = None  # the reason, when the value cannot be trusted
    details: dict = field(default_factory=dict)  # the stage summaries, engine metrics, ...

    def valid_value(self) -> float:
        """The value to compare; a measurement without one (invalid, or a diagnostic sweep's)
        cannot be judged, and saying so here keeps it from being compared as a number."""
        if self.value is None:
            from replay.errors import ConfigError

            raise ConfigError(f"a measurement without a value cannot be compared: {self.invalid or 'nothing was measured'}")
        return self.value

    def to_json(self) -> dict:
        return {"value": self.value, "invalid": self.invalid, "details": self.details}


@dataclass(frozen=True)
class Verdict:
    kind: str  # better | same | worse | invalid; pending: a first run told from outside cleared the bar (Campaign.tell)
    reason: str
    gain: float | None = None  # (candidate - baseline median) / baseline median, from the first measurement
    measurements: tuple[Measurement, ...] = ()

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "gain": self.gain,
            "measurements": [m.to_json() for m in self.measurements],
        }


def judge(noise: NoiseFloor, first: Measurement, confirm=None, confirm_noise: NoiseFloor | None = None) -> Verdict:
    """The verdict on a candidate from its ``first`` measurement; ``confirm()`` (a fresh-restart
    measurement) is called only when the first clears the bar, and must clear the bar of
    ``confirm_noise`` (default ``noise``): the campaign passes the floor that holds a run of the
    baseline measured beside the confirmation."""
    if first.invalid:
        return Verdict("invalid", first.invalid, measurements=(first,))
    b, c = noise.median, first.valid_value()
    gain = (c - b) / b if b else None
    band = f"baseline {b:.4g} ± {noise.spread:.3g} (bar +{noise.bar():.3g})"
    if c - b < -K * noise.spread:
        return Verdict("worse", f"{c:.4g} vs {band}", gain, (first,))
    if c - b <= noise.bar():
        return Verdict("same", f"{c:.4g} within the noise of {band}", gain, (first,))
    if confirm is None:
        return Verdict("better", f"{c:.4g} over {band} (not confirmed)", gain, (first,))
    second = confirm()
    if second.invalid:
        return Verdict("invalid", f"the confirmation run: {second.invalid}", gain, (first, second))
    again = confirm_noise or noise
    if again is not noise:
        band += (
            f"; at the confirmation, with the baseline measured beside it: {again.median:.4g} ± "
            f"{again.spread:.3g} (bar +{again.bar():.3g})"
        )
    c2 = second.valid_value()
    if c2 - again.median <= again.bar():
        return Verdict(
            "same",
            f"{c:.4g} over {band}, but the fresh-restart confirmation gave {c2:.4g}: the win did not repeat",
            gain,
            (first, second),
        )
    return Verdict("better", f"{c:.4g} and {c2:.4g} (fresh restart) over {band}", gain, (first, second))
