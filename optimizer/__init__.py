"""Tuning an engine's config against a faithful workload, trusting only wins that beat the bench's
own noise and repeat on a fresh restart.

``Campaign`` (baseline, noise floor, ``evaluate(config, hypothesis) -> Verdict``, ``ask`` /
``tell``, ``run``), ``Space`` (knobs from the engine adapter), searchers (coordinate descent, TPE,
random), the SQLite ledger, and the pools measurements run in (one at a time, several engine
instances here, Ray tasks). See :mod:`optimizer.verdict` for the rule behind a verdict.
"""

from optimizer.campaign import Budget, Campaign, CampaignResult, CampaignStopped, Objective
from optimizer.measure import EngineMeasure, measure_on_engine
from optimizer.pool import LocalPool, RayPool, SerialPool
from optimizer.search import SEARCHERS, CoordinateDescent, Proposal, RandomSearch, TPE
from optimizer.space import Space
from optimizer.verdict import Measurement, NoiseFloor, Verdict, judge

__all__ = [
    "Budget",
    "Campaign",
    "CampaignResult",
    "CampaignStopped",
    "EngineMeasure",
    "Objective",
    "measure_on_engine",
    "LocalPool",
    "RayPool",
    "SerialPool",
    "SEARCHERS",
    "CoordinateDescent",
    "Proposal",
    "RandomSearch",
    "TPE",
    "Space",
    "Measurement",
    "NoiseFloor",
    "Verdict",
    "judge",
]
