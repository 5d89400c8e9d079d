"""Comparing a replay with live traffic: metrics, thresholds from A/A, verdicts and reports.

``compare_results(LIVE, RESULTS)`` judges every stage of a ``replay run`` / ``replay sweep``
results folder against the live Trace; ``drift(OLD, NEW)`` judges two Traces. See
:mod:`fidelity.compare` for the metrics and the rule that sets their thresholds.
"""

from fidelity.compare import AA_FACTOR, FIXED_BOUNDS, Metric, FidelityVerdict
from fidelity.judge import FidelityReport, StageFidelity, compare_results, compare_stage, drift

__all__ = [
    "AA_FACTOR",
    "FIXED_BOUNDS",
    "Metric",
    "FidelityVerdict",
    "FidelityReport",
    "StageFidelity",
    "compare_results",
    "compare_stage",
    "drift",
]
