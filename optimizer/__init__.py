"""Knob spaces, noise floor, verdicts, search and the experiment ledger (a later issue)."""

__all__: list[str] = []
