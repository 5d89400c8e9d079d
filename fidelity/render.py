"""A fidelity report as a person reads it: a terminal table, a Markdown summary, a JSON file.

Every text that came from a trace or a results file (file names, reasons quoting them) is
escaped for the format it goes into.
"""

from __future__ import annotations

import json
from pathlib import Path

from fidelity.judge import FidelityReport

__all__ = ["markdown", "print_report", "write_report"]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _word(passed: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "n/a"}[passed]


def _md_escape(text: str) -> str:
    for ch in "\\|`*_[]<>":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def markdown(report: FidelityReport) -> str:
    title = "Drift" if report.kind == "drift" else "Fidelity"
    verdict = "faithful" if report.faithful else "NOT faithful"
    if report.kind == "drift":
        verdict = "no drift" if report.faithful else "DRIFTED"
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
            note = "; ".join(m.flags) if m.flags else (m.reason if m.passed is None else "")
            lines.append(f"| {m.group} | {_md_escape(m.name)} | {_word(m.passed)} | {_num(m.distance)} | "
                         f"{_num(m.bound)} | {_num(m.aa)} | {_num(m.live)} | {_num(m.replay)} | {_md_escape(note)} |")
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


def write_report(report: FidelityReport, out: Path) -> list[Path]:
    """Write ``fidelity.json`` and ``fidelity.md`` into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = report.kind
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    paths[0].write_text(json.dumps(report.to_json(), indent=2) + "\n")
    paths[1].write_text(markdown(report))
    return paths
