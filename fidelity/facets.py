"""Facets: what a verdict vouches for, each judged by its most powerful test.

A stage is not judged on a pile of metrics but on the facets of the workload they stand for:
input lengths, output lengths, cache (prefix reuse, offered and taken), arrivals, sessions and
outcomes (:data:`FACETS`; a metric belongs to the first facet whose prefix its name has). A
facet

* *fails* when one of its metrics failed (a distance over its bound is over the noise, whichever
  test saw it);
* *passes* when one of its metrics passed conclusively (within a bound that is itself within
  the metric's ceiling, catching a change within its maximum): a distribution test that cannot
  tell on this live side does not make the facet "cannot tell" when a test of the same facet,
  a paired one above all (:mod:`fidelity.paired`), has the power to catch the same change. The
  facet names the test that decided (paired tests first, then the one that catches the smallest
  change) and the smallest change it catches;
* *cannot tell* when none of its metrics failed or passed conclusively, with what each needs;
* is *not applicable* when none of its metrics applies.

A stage is unfaithful when a facet failed, cannot tell when none failed but a required facet
(:data:`REQUIRED`: input and output lengths, cache, arrivals; outcomes too when they are judged)
did not pass, and faithful otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fidelity.bounds import CANNOT_TELL, FAIL, NOT_JUDGED, PASS

__all__ = ["FACETS", "REQUIRED", "OUTCOMES", "Facet", "facet_of", "judge_facets", "overall", "FAITHFUL", "UNFAITHFUL"]

# facet -> the prefixes of its metrics' names
FACETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("input lengths", ("input_tokens.",)),
    ("output lengths", ("output_tokens.", "lengths.")),
    ("cache", ("cache.",)),
    ("arrivals", ("arrivals.",)),
    ("sessions", ("sessions.",)),
    ("outcomes", ("outcomes.",)),
)
OUTCOMES = "outcomes"
# the facets a faithful verdict needs judged (outcomes too, when they are judged)
REQUIRED: tuple[str, ...] = ("input lengths", "output lengths", "cache", "arrivals")

# a verdict's state (CANNOT_TELL as for a metric)
FAITHFUL, UNFAITHFUL = "faithful", "unfaithful"


def facet_of(name: str) -> str:
    """The facet metric ``name`` belongs to."""
    for facet, prefixes in FACETS:
        if name.startswith(prefixes):
            return facet
    raise ValueError(f"{name}: no facet holds it")


@dataclass(frozen=True)
class Facet:
    """One facet's verdict: ``state`` PASS / FAIL / CANNOT_TELL / NOT_JUDGED, ``decided_by`` the
    metric it rests on (passed) or those that failed, ``detects`` the smallest change the
    deciding test catches, ``reason`` in words."""

    name: str
    state: str
    decided_by: tuple[str, ...]
    detects: str
    reason: str
    required: bool

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "state": self.state,
            "decided_by": list(self.decided_by),
            "detects": self.detects,
            "reason": self.reason,
            "required": self.required,
        }


def _conclusive(m) -> bool:
    """Passed within a bound that is within its ceiling (judged against noise, not a report)."""
    return m.state == PASS and m.ceiling is not None


def _strength(m) -> tuple:
    # paired tests first, then the smallest change caught (a metric that states none last)
    return (not m.paired, m.detectable is None, m.detectable if m.detectable is not None else math.inf)


def judge_facets(metrics: list, required: tuple[str, ...] = REQUIRED) -> list[Facet]:
    """Every facet's verdict from ``metrics`` (:class:`fidelity.compare.Metric`), in
    :data:`FACETS` order; facets with no metric at all are left out."""
    out = []
    for name, _ in FACETS:
        mine = [m for m in metrics if facet_of(m.name) == name]
        if not mine:
            continue
        need = name in required
        failed = [m for m in mine if m.state == FAIL]
        passed = sorted((m for m in mine if _conclusive(m)), key=_strength)
        undecided = [m for m in mine if m.state == CANNOT_TELL]
        if failed:
            out.append(
                Facet(
                    name,
                    FAIL,
                    tuple(m.name for m in failed),
                    "",
                    f"{name}: failed on " + "; ".join(m.reason for m in failed),
                    need,
                )
            )
        elif passed:
            best = passed[0]
            catches = f", catches {best.detects}" if best.detects else ""
            out.append(Facet(name, PASS, (best.name,), best.detects, f"{name}: by {best.name}{catches}", need))
        elif undecided:
            out.append(
                Facet(
                    name,
                    CANNOT_TELL,
                    (),
                    "",
                    f"{name}: " + "; ".join(f"{m.name} needs {m.needs}" for m in undecided),
                    need,
                )
            )
        else:
            out.append(Facet(name, NOT_JUDGED, (), "", f"{name}: no metric applies", need))
    return out


def overall(facets: list[Facet], metrics: list, required: tuple[str, ...] = REQUIRED) -> tuple[str, str]:
    """UNFAITHFUL when a facet failed; CANNOT_TELL when none did but a ``required`` facet did
    not pass (or had no metric at all); else FAITHFUL. With the reason in words."""
    failed = [m for m in metrics if m.state == FAIL]
    if failed:
        return UNFAITHFUL, "unfaithful: " + "; ".join(m.reason for m in failed)
    by = {f.name: f for f in facets}
    missing = [name for name in required if name not in by or by[name].state != PASS]
    if missing:
        why = [by[name].reason if name in by else f"{name}: no metric applies" for name in missing]
        return CANNOT_TELL, (
            "cannot tell: nothing failed, but "
            + ", ".join(missing)
            + " could not be judged on this live side ("
            + " | ".join(why)
            + ")"
        )
    decided = "; ".join(f"{f.name} by {f.decided_by[0]}" for f in facets if f.state == PASS)
    undecided = [m for m in metrics if m.state == CANNOT_TELL]
    also = (
        f"; {len(undecided)} more metrics cannot tell on this live side ({', '.join(m.name for m in undecided)})"
        if undecided
        else ""
    )
    return FAITHFUL, f"faithful: {decided}{also}"
