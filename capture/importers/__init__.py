"""Importers of other trace formats (public traces, request logs) into the Trace schema."""

from capture.importers.azure import import_azure
from capture.importers.burstgpt import import_burstgpt
from capture.importers.langfuse import import_langfuse
from capture.importers.litellm import import_litellm
from capture.importers.logs import LOG_FORMATS, build_trace, import_log
from capture.importers.mooncake import import_mooncake
from capture.importers.openai_log import import_openai
from capture.importers.records import LogRecord, Usage
from capture.importers.tokens import ImportResult
from capture.importers.vidur import import_vidur

# the token-only formats (as the CLI spells them) and their importers
TOKEN_FORMATS = {"azure": import_azure, "burstgpt": import_burstgpt, "vidur": import_vidur,
                 "mooncake": import_mooncake}


def import_token_trace(format: str, path, out, **kwargs) -> ImportResult:
    """Import a token-only public trace of ``format`` into the Trace file ``out`` (streaming)."""
    from replay.errors import ConfigError

    if format not in TOKEN_FORMATS:
        raise ConfigError(f"format '{format}' unknown (known: {', '.join(TOKEN_FORMATS)})")
    return TOKEN_FORMATS[format](path, out, **kwargs)


__all__ = [
    "LOG_FORMATS",
    "TOKEN_FORMATS",
    "ImportResult",
    "LogRecord",
    "Usage",
    "build_trace",
    "import_azure",
    "import_burstgpt",
    "import_langfuse",
    "import_litellm",
    "import_log",
    "import_mooncake",
    "import_openai",
    "import_token_trace",
    "import_vidur",
]
