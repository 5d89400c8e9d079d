"""PII detection (Presidio) and fidelity-preserving pseudonymization of traces (a later issue)."""

__all__: list[str] = []
