"""What every HTML report here draws with: matplotlib figures on the Agg renderer (no pyplot, no
global state) turned into PNG bytes, embedded as base64 in pages that load nothing from elsewhere.

The fidelity report (:mod:`fidelity.html`), the optimizer's report (:mod:`optimizer.html`) and the
sweep's (:mod:`replay.sweep_html`) share these, so they look alike and draw alike.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from html import escape

__all__ = ["DPI", "Plot", "new_figure", "png_of", "literal", "empty", "figure_html", "STYLE_CSS"]

DPI = 96


@dataclass(frozen=True)
class Plot:
    kind: str  # what it shows (cdf, qq, counts, cache, survival, verdicts, search, latency, ...)
    title: str
    caption: str
    png: bytes


def literal(s: str) -> str:
    """``s`` as literal matplotlib text (a ``$`` would start mathtext)."""
    return s.replace("\\", "\\\\").replace("$", r"\$")


def new_figure(ncols: int, nrows: int = 1, width: float = 4.0, height: float = 3.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=DPI, layout="constrained")
    return fig, list(fig.subplots(nrows, ncols, squeeze=False).ravel())


def png_of(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def empty(ax, what: str) -> None:
    """An axes with nothing to draw says why, in its middle."""
    ax.text(0.5, 0.5, literal(what), ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def figure_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure><img class="plot" data-kind="{plot.kind}" alt="{escape(plot.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption><b>{escape(plot.title)}.</b> '
        f"{escape(plot.caption)}</figcaption></figure>"
    )


STYLE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1280px;
       padding: 0 1em; color: #212121; }
.banner { padding: 0.8em 1.2em; border-radius: 6px; color: #fff; }
.banner.ok { background: #2e7d32; } .banner.bad { background: #c62828; } .banner.unsure { background: #e65100; }
.banner h1 { margin: 0; font-size: 1.6em; }
code { background: #f3f3f3; padding: 0 0.25em; border-radius: 3px; word-break: break-all; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.8em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.pass td.word { color: #2e7d32; } tr.fail td.word { color: #c62828; font-weight: bold; }
tr.fail { background: #fff3f3; } tr.na { color: #757575; }
tr.undecided td.word { color: #e65100; font-weight: bold; } tr.undecided { background: #fff8e1; }
.stage { border-top: 2px solid #ddd; margin-top: 2em; }
.stage h2 .word { font-size: 0.8em; padding: 0.1em 0.5em; border-radius: 4px; color: #fff; }
.stage h2 .ok { background: #2e7d32; } .stage h2 .bad { background: #c62828; } .stage h2 .unsure { background: #e65100; }
figure { margin: 1em 0; } figcaption { font-size: 0.85em; color: #555; }
img.plot { max-width: 100%; height: auto; border: 1px solid #eee; }
.note { background: #f7f7f7; padding: 0.6em 1em; border-left: 4px solid #90a4ae; }
"""
