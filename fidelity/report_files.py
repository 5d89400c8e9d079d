"""A fidelity (or drift) report's files: JSON, Markdown (:mod:`fidelity.render`) and the
self-contained HTML page (:mod:`fidelity.html`)."""

from __future__ import annotations

import json
from pathlib import Path

from fidelity.judge import FidelityReport
from fidelity.render import markdown

__all__ = ["write_report"]


def write_report(report: FidelityReport, out: Path, *, html: bool = False) -> list[Path]:
    """Write ``fidelity.json`` and ``fidelity.md`` (``drift.*`` for drift) into ``out``, and with
    ``html`` the self-contained ``fidelity.html`` with its plots; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = report.kind
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    paths[0].write_text(json.dumps(report.to_json(), indent=2) + "\n")
    paths[1].write_text(markdown(report))
    if html:
        from fidelity.html import html_report

        paths.append(out / f"{stem}.html")
        paths[2].write_text(html_report(report), encoding="utf-8")
    return paths
