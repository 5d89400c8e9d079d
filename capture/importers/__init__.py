"""Importers of other trace formats (public traces) into the Trace schema."""

from capture.importers.azure import import_azure
from capture.importers.mooncake import import_mooncake

__all__ = ["import_azure", "import_mooncake"]
