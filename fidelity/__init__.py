"""Comparing a replay with live traffic: metrics, thresholds, reports and verdicts (a later issue)."""

__all__: list[str] = []
