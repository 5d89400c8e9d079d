"""Importers of other trace formats (public traces, request logs) into the Trace schema."""

from capture.importers.azure import import_azure
from capture.importers.langfuse import import_langfuse
from capture.importers.litellm import import_litellm
from capture.importers.logs import LOG_FORMATS, LogRecord, Usage, build_trace, import_log
from capture.importers.mooncake import import_mooncake
from capture.importers.openai_log import import_openai

__all__ = [
    "LOG_FORMATS",
    "LogRecord",
    "Usage",
    "build_trace",
    "import_azure",
    "import_langfuse",
    "import_litellm",
    "import_log",
    "import_mooncake",
    "import_openai",
]
