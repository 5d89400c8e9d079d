"""Importers of other trace formats (public traces, request logs) into the Trace schema.

Each format's module imports the shared machinery (:mod:`capture.importers.logs`,
:mod:`capture.importers.tokens`), and this package joins them: the format name to its importer
(:func:`import_log`, :func:`import_token_trace`)."""

import os
from collections.abc import Callable
from typing import Any

from capture.importers.aiperf import import_aiperf_dag, import_aiperf_multi_turn
from capture.importers.azure import import_azure
from capture.importers.bailian import import_bailian
from capture.importers.baseten import import_baseten
from capture.importers.burstgpt import import_burstgpt
from capture.importers.claude_code import import_claude_code
from capture.importers.codex import import_codex
from capture.importers.copilot import import_copilot
from capture.importers.langfuse import import_langfuse
from capture.importers.litellm import import_litellm
from capture.importers.logs import LOG_FORMATS, check_block_size, build_trace
from capture.importers.mooncake import import_mooncake
from capture.importers.openai_log import import_openai
from capture.importers.otel import import_otel
from capture.importers.records import LogRecord, Usage
from capture.importers.servegen import import_servegen
from capture.importers.sharegpt import THINK_TIME_S, import_sharegpt
from capture.importers.tokens import ImportResult
from capture.importers.tracelab import import_tracelab
from capture.importers.sagemaker import import_sagemaker
from capture.importers.vidur import import_vidur
from capture.importers.weka import import_weka
from replay.trace import BLOCK_SIZE

# the token-only formats (as the CLI spells them) and their importers
TOKEN_FORMATS = {
    "azure": import_azure,
    "burstgpt": import_burstgpt,
    "vidur": import_vidur,
    "mooncake": import_mooncake,
    "servegen": import_servegen,  # a folder of per-client distributions, sampled (seeded)
    "bailian": import_bailian,
    "copilot": import_copilot,  # agent sessions with tool batches (a DAG)
    "weka": import_weka,
    "tracelab": import_tracelab,
}


def import_token_trace(format: str, path, out, **kwargs) -> ImportResult:
    """Import a token-only public trace of ``format`` into the Trace file ``out`` (streaming)."""
    from replay.errors import ConfigError

    if format not in TOKEN_FORMATS:
        raise ConfigError(f"format '{format}' unknown (known: {', '.join(TOKEN_FORMATS)})")
    return TOKEN_FORMATS[format](path, out, **kwargs)


def import_log(
    format: str,
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    rate: float | None = None,
    seed: int = 0,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
    sharegpt_mode: str = "single",
    think_s: float = THINK_TIME_S,
) -> ImportResult:
    """Import a request log of ``format`` ("openai", "litellm", "langfuse", or "claude-code" /
    "codex": a session file or a folder of them, :mod:`capture.importers.claude_code`,
    :mod:`capture.importers.codex`; or a source with real text rebuilt as one: "aiperf-dag",
    "aiperf-multi-turn" (:mod:`capture.importers.aiperf`), "baseten", "sagemaker") into the Trace
    file ``out``, in two streaming passes (see the module docstring). Without ``key`` (a
    :class:`redact.key.RedactionKey`) the text is raw (``redaction_policy="none"``: redact it
    before sharing it); with one, each chunk is redacted before it is written.

    ``rate`` (req/s) and ``seed`` space an OpenAI Batch input file's requests as a seeded
    Poisson process (it has no times), or an AIPerf dataset's root sessions; ``limit`` keeps the
    first N requests of the file.
    "sharegpt" (:mod:`capture.importers.sharegpt`) needs ``rate`` too (requests, or with
    ``sharegpt_mode="multi"`` conversations, per second; ``think_s`` between turns).
    """
    from replay.errors import ConfigError

    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    check_block_size(block_size)
    common: dict[str, Any] = dict(
        tokenizer=tokenizer, block_size=block_size, skip_bad=skip_bad, limit=limit, key=key, progress=progress
    )  # the keyword arguments the three log importers share
    if format == "openai":
        return import_openai(path, out, rate=rate, seed=seed, **common)
    if format == "sharegpt":
        return import_sharegpt(path, out, mode=sharegpt_mode, rate=rate, think_s=think_s, seed=seed, **common)
    if format == "aiperf-dag":
        return import_aiperf_dag(path, out, rate=rate, seed=seed, **common)
    if format == "aiperf-multi-turn":
        return import_aiperf_multi_turn(path, out, rate=rate, seed=seed, **common)
    if format not in LOG_FORMATS:
        raise ConfigError(f"log format '{format}' unknown (known: {', '.join(LOG_FORMATS)})")
    if rate is not None:
        raise ConfigError(
            f"--rate: only for OpenAI Batch input files and AIPerf datasets, not {format} logs (they have their own times)"
        )
    if format == "litellm":
        return import_litellm(path, out, **common)
    if format == "claude-code":
        return import_claude_code(path, out, **common)
    if format == "codex":
        return import_codex(path, out, **common)
    if format == "baseten":
        return import_baseten(path, out, **common)
    if format == "sagemaker":
        return import_sagemaker(path, out, **common)
    return import_langfuse(path, out, **common)


__all__ = [
    "LOG_FORMATS",
    "TOKEN_FORMATS",
    "ImportResult",
    "LogRecord",
    "Usage",
    "build_trace",
    "import_aiperf_dag",
    "import_aiperf_multi_turn",
    "import_azure",
    "import_bailian",
    "import_baseten",
    "import_burstgpt",
    "import_langfuse",
    "import_claude_code",
    "import_codex",
    "import_litellm",
    "import_log",
    "import_mooncake",
    "import_openai",
    "import_otel",
    "import_sagemaker",
    "import_servegen",
    "import_sharegpt",
    "import_token_trace",
    "import_vidur",
    "import_copilot",
    "import_tracelab",
    "import_weka",
]
