"""Getting traffic into a Trace: importers of other trace formats (and the recording proxy)."""

from capture.importers import import_azure, import_mooncake

__all__ = ["import_azure", "import_mooncake"]
