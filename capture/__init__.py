"""Getting traffic into a Trace: importers of other trace formats and request logs, and the
recording proxy (``replay capture``: :mod:`capture.proxy`, :mod:`capture.recorder`,
:mod:`capture.record`, :mod:`capture.spool`).

The names below are imported on first use: ``import capture.recorder`` does not load the
importers (nor polars).
"""

from replay._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "capture.importers": ("import_azure", "import_log", "import_mooncake"),
        "capture.proxy": ("CaptureProxy", "run_capture"),
        "capture.recorder": ("CaptureConfig",),
    },
)
