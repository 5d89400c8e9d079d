"""A fidelity report as a person reads it: a terminal table, a Markdown summary, a JSON file.

Every text that came from a trace or a results file (file names, reasons quoting them) is
escaped for the format it goes into.
"""

from __future__ import annotations

import json
from pathlib import Path

from fidelity.judge import FidelityReport, StageFidelity

__all__ = ["headline", "note", "stage_summary", "markdown", "print_report", "write_report"]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _word(passed: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "n/a"}[passed]


def _md_escape(text: str) -> str:
    for ch in "\\|`*_[]<>":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def headline(report: FidelityReport) -> tuple[str, str]:
    """The report's title and overall verdict in words: ("Fidelity", "faithful"), ("Drift", "DRIFTED")..."""
    if report.kind == "drift":
        return "Drift", "no drift" if report.faithful else "DRIFTED"
    return "Fidelity", "faithful" if report.faithful else "NOT faithful"


def note(m) -> str:
    """A metric's note column: its flags, or why it was not judged."""
    return "; ".join(m.flags) if m.flags else (m.reason if m.passed is None else "")


def stage_summary(stage: StageFidelity, live: str) -> dict:
    """A stage's verdict in brief, for a results summary (the full one is in fidelity.json)."""
    return {"live": live, "faithful": stage.verdict.faithful, "compression": stage.compression,
            "failed": [m.name for m in stage.verdict.failed], "reason": stage.verdict.reason,
            "diagnosis": list(stage.verdict.diagnosis)}


def markdown(report: FidelityReport) -> str:
    title, verdict = headline(report)
    lines = [f"# {title}: {verdict}", "",
             f"- live: `{_md_escape(report.live)}`", f"- compared: `{_md_escape(report.results)}`", ""]
    for s in report.stages:
        rate = "as recorded" if s.requested_rate is None else f"{s.requested_rate:g} req/s"
        lines += [f"## {_md_escape(s.file)} ({rate}, {s.compression:.3g}x live's pace, {s.sent} of {s.requests} sent)",
                  "", f"**{_md_escape(s.verdict.reason)}**", ""]
        for d in s.verdict.diagnosis:
            lines.append(f"- {_md_escape(d)}")
        if s.verdict.diagnosis:
            lines.append("")
        lines += ["| group | metric | verdict | distance | bound | A/A | live | replay | note |",
                  "|---|---|---|---:|---:|---:|---:|---:|---|"]
        for m in s.verdict.metrics:
            lines.append(f"| {m.group} | {_md_escape(m.name)} | {_word(m.passed)} | {_num(m.distance)} | "
                         f"{_num(m.bound)} | {_num(m.aa)} | {_num(m.live)} | {_num(m.replay)} | {_md_escape(note(m))} |")
        lines.append("")
    return "\n".join(lines)


def print_report(report: FidelityReport, console=None) -> None:
    """The per-stage verdicts and their failed metrics, as a table on the terminal."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(stderr=False)
    table = Table(title="drift" if report.kind == "drift" else "fidelity")
    for col in ("stage", "rate", "pace", "verdict", "judged", "failed"):
        table.add_column(col)
    for s in report.stages:
        judged = sum(m.passed is not None for m in s.verdict.metrics)
        failed = ", ".join(m.name for m in s.verdict.failed) or "-"
        rate = "as recorded" if s.requested_rate is None else f"{s.requested_rate:g}"
        word = "[green]faithful[/]" if s.verdict.faithful else "[red]unfaithful[/]"
        table.add_row(escape(s.file), rate, f"{s.compression:.3g}x", word, str(judged), escape(failed))
    console.print(table)
    for s in report.stages:
        for m in s.verdict.failed:
            console.print(f"{escape(s.file)}: {escape(m.reason)}", highlight=False)
        for d in s.verdict.diagnosis:
            console.print(f"{escape(s.file)}: {escape(d)}", highlight=False)


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
