"""Getting traffic into a Trace: importers of other trace formats and request logs (and the
recording proxy)."""

from capture.importers import import_azure, import_log, import_mooncake

__all__ = ["import_azure", "import_log", "import_mooncake"]
