"""Getting traffic into a Trace: importers of other trace formats and request logs, and the
recording proxy (``replay capture``: :mod:`capture.proxy`, :mod:`capture.recorder`,
:mod:`capture.record`, :mod:`capture.spool`)."""

from capture.importers import import_azure, import_log, import_mooncake
from capture.proxy import CaptureProxy, run_capture
from capture.recorder import CaptureConfig

__all__ = ["import_azure", "import_log", "import_mooncake", "CaptureConfig", "CaptureProxy", "run_capture"]
