"""A campaign's files: JSON, Markdown (:mod:`optimizer.report`) and the HTML page
(:mod:`optimizer.html`)."""

from __future__ import annotations

import json
from pathlib import Path

from optimizer.campaign import CampaignResult
from optimizer.report import flags, markdown

__all__ = ["write_result"]


def write_result(result: CampaignResult, out: Path, engine=None) -> list[Path]:
    """Write optimize.json, optimize.md and optimize.html into ``out``; returns their paths."""
    from optimizer.html import html_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "optimize.json", out / "optimize.md", out / "optimize.html"]
    data = result.to_json()
    data["final_flags"] = flags(engine, result.best)
    paths[0].write_text(json.dumps(data, indent=2, default=str) + "\n")
    paths[1].write_text(markdown(result, engine))
    paths[2].write_text(html_report(result, engine), encoding="utf-8")
    return paths
