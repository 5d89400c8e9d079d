"""A fidelity report as a person reads it: a terminal table and a Markdown summary (written
with the JSON and the HTML page by :mod:`fidelity.report_files`).

Every text that came from a trace or a results file (file names, reasons quoting them) is
escaped for the format it goes into.
"""

from __future__ import annotations


from fidelity.compare import CANNOT_TELL, FAIL, FAITHFUL, PASS, UNFAITHFUL
from fidelity.judge import FidelityReport, StageFidelity
from replay.fleet import replica_vs_live_lines

__all__ = ["headline", "verdict_word", "exit_code", "note", "stage_summary", "markdown", "print_report"]

# a report's state -> the CLI's exit code (`replay fidelity`, `replay drift`, and run / sweep --fidelity)
EXIT_CODES = {FAITHFUL: 0, UNFAITHFUL: 1, CANNOT_TELL: 3}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _word(state: str) -> str:
    """A metric's state as the tables print it."""
    return "FAIL" if state == FAIL else state


def verdict_word(state: str, kind: str = "fidelity") -> str:
    """A verdict's state in words: faithful / unfaithful / cannot tell (drift: no drift / DRIFTED)."""
    if state == CANNOT_TELL:
        return "cannot tell"
    if kind == "drift":
        return "no drift" if state == FAITHFUL else "DRIFTED"
    return state


def exit_code(state: str) -> int:
    """0 faithful, 1 unfaithful (drifted), 3 cannot tell."""
    return EXIT_CODES.get(state, EXIT_CODES[UNFAITHFUL])


def _md_escape(text: str) -> str:
    for ch in "\\|`*_[]<>":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def headline(report: FidelityReport) -> tuple[str, str]:
    """The report's title and overall verdict in words: ("Fidelity", "faithful"), ("Drift", "DRIFTED")..."""
    if report.kind == "drift":
        return "Drift", verdict_word(report.state, "drift")
    return "Fidelity", {CANNOT_TELL: "cannot tell", FAITHFUL: "faithful"}.get(report.state, "NOT faithful")


def note(m) -> str:
    """A metric's note column: its flags, or why it was not judged."""
    if m.state == CANNOT_TELL:
        return f"needs {m.needs}"
    return "; ".join(m.flags) if m.flags else (m.reason if m.passed is None else "")


def stage_summary(stage: StageFidelity, live: str) -> dict:
    """A stage's verdict in brief, for a results summary (the full one is in fidelity.json)."""
    return {
        "live": live,
        "state": stage.verdict.state,
        "faithful": stage.verdict.faithful,
        "compression": stage.compression,
        "failed": [m.name for m in stage.verdict.failed],
        "undecided": [m.name for m in stage.verdict.undecided],
        "facets": {
            f.name: {"state": f.state, "decided_by": list(f.decided_by), "detects": f.detects} for f in stage.verdict.facets
        },
        "reason": stage.verdict.reason,
        "diagnosis": list(stage.verdict.diagnosis),
    }


def markdown(report: FidelityReport) -> str:
    title, verdict = headline(report)
    lines = [
        f"# {title}: {verdict}",
        "",
        f"- live: `{_md_escape(report.live)}`",
        f"- compared: `{_md_escape(report.results)}`",
        "",
    ]
    for s in report.stages:
        rate = "as recorded" if s.requested_rate is None else f"{s.requested_rate:g} req/s"
        lines += [
            f"## {_md_escape(s.file)} ({rate}, {s.compression:.3g}x live's pace, {s.sent} of {s.requests} sent)",
            "",
            f"**{_md_escape(s.verdict.reason)}**",
            "",
        ]
        for d in s.verdict.diagnosis:
            lines.append(f"- {_md_escape(d)}")
        if s.verdict.diagnosis:
            lines.append("")
        if s.replicas:  # a fleet: shown, not judged
            lines += ["Per replica (not judged):", ""]
            lines += [f"- {_md_escape(line)}" for line in replica_vs_live_lines(s.replicas)]
            lines.append("")
        lines += ["| facet | verdict | decided by | catches |", "|---|---|---|---|"]
        for f in s.verdict.facets:
            lines.append(
                f"| {f.name}{'' if f.required else ' (not required)'} | {_word(f.state)} | "
                f"{_md_escape(', '.join(f.decided_by)) or '-'} | {_md_escape(f.detects) or '-'} |"
            )
        lines.append("")
        lines += [
            "| group | metric | verdict | distance | bound | ceiling | detects | A/A | live | replay | note |",
            "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|",
        ]
        for m in s.verdict.metrics:
            lines.append(
                f"| {m.group} | {_md_escape(m.name)} | {_word(m.state)} | {_num(m.distance)} | "
                f"{_num(m.bound)} | {_num(m.ceiling)} | {_md_escape(m.detects) or '-'} | {_num(m.aa)} | "
                f"{_num(m.live)} | {_num(m.replay)} | {_md_escape(note(m))} |"
            )
        lines.append("")
    return "\n".join(lines)


def print_report(report: FidelityReport, console=None) -> None:
    """The per-stage verdicts and their failed metrics, as a table on the terminal."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(stderr=False)
    table = Table(title="drift" if report.kind == "drift" else "fidelity")
    for col in ("stage", "rate", "pace", "verdict", "judged", "failed", "cannot tell"):
        table.add_column(col)
    colour = {FAITHFUL: "green", CANNOT_TELL: "yellow"}
    for s in report.stages:
        judged = sum(m.passed is not None for m in s.verdict.metrics)
        failed = ", ".join(m.name for m in s.verdict.failed) or "-"
        undecided = ", ".join(m.name for m in s.verdict.undecided) or "-"
        rate = "as recorded" if s.requested_rate is None else f"{s.requested_rate:g}"
        word = f"[{colour.get(s.verdict.state, 'red')}]{verdict_word(s.verdict.state, report.kind)}[/]"
        table.add_row(escape(s.file), rate, f"{s.compression:.3g}x", word, str(judged), escape(failed), escape(undecided))
    console.print(table)
    for s in report.stages:
        for f in s.verdict.facets:
            if f.state == PASS:
                said = f"{f.name}: pass by {f.decided_by[0]}" + (f" (catches {f.detects})" if f.detects else "")
                console.print(f"{escape(s.file)}: {escape(said)}", highlight=False)
        for m in s.verdict.failed + s.verdict.undecided:
            console.print(f"{escape(s.file)}: {escape(m.reason)}", highlight=False)
        if s.verdict.state == CANNOT_TELL and not s.verdict.undecided:
            console.print(f"{escape(s.file)}: {escape(s.verdict.reason)}", highlight=False)
        for d in s.verdict.diagnosis:
            console.print(f"{escape(s.file)}: {escape(d)}", highlight=False)
        for line in replica_vs_live_lines(s.replicas):
            console.print(f"{escape(s.file)}: {escape(line)}", highlight=False)
