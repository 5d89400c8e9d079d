"""faithful-replay's core: errors, the Trace, schedules, the run and sweep API, targets and the CLI.

Everything the `replay` command does is one import away::

    from replay import read_trace, RunConfig, sweep
    result = sweep(read_trace("prod.parquet"), RunConfig(url="http://127.0.0.1:8000"), rates=[1, 2, 4, 8])

Names are imported on first use, so `import replay.errors` (and `replay --help`) stays light.
"""

from __future__ import annotations

from replay._lazy import lazy_exports

_EXPORTS = {
    "replay.config": ("Arrivals", "RunConfig", "Slo"),
    "replay.errors": (
        "ReplayError",
        "TraceError",
        "ConfigError",
        "TargetError",
        "RunnerError",
        "RedactionError",
        "BudgetExhausted",
    ),
    "replay.trace": ("Trace", "TraceMeta", "read_trace", "validate", "SCHEMA", "REQUIRED_COLUMNS", "SCHEMA_VERSION"),
    "replay.generate": ("GenerateConfig", "generate"),
    "replay.traffic": ("trace_summary",),
    "replay.tokenizer": ("load_tokenizer",),
    "replay.blocks": ("block_hashes", "HASH_ALGO"),
    "replay.prompts": ("text_of_tokens", "block_text", "count_tokens"),
    "replay.runner": ("StageResult", "run_stage"),
    "replay.sweep": ("SweepResult", "sweep", "find_rates"),
}
__all__, __getattr__, __dir__ = lazy_exports("replay", _EXPORTS)
