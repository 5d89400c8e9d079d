"""A fidelity report as one self-contained HTML file: the verdict, each stage's metric table and
diagnosis, and its plots embedded as base64 PNG (:mod:`fidelity.plots`).

The page loads nothing from elsewhere (no scripts, fonts or style sheets: a browser opening it
offline shows all of it), and every text that came from a trace or a results file (file names,
reasons, diagnosis) is HTML-escaped.
"""

from __future__ import annotations

from html import escape

from fidelity.bounds import AA_FACTOR, AA_MAX_REQUESTS, AA_SPLITS, CANNOT_TELL, CEILINGS, FAIL, FIXED_BOUNDS, PASS
from fidelity.paired import MISS_SHARE
from fidelity.resample import AA_BLOCKS, AA_SCHEME
from fidelity.compare import FAITHFUL
from fidelity.judge import FidelityReport, StageFidelity
from fidelity.plots import stage_plots, verdict_chart
from fidelity.power import MAX_DETECTABLE, in_words
from fidelity.render import _num, _word, headline, note, verdict_word
from replay.figures import STYLE_CSS, figure_html

__all__ = ["html_report", "thresholds_note"]


def thresholds_note(kind: str = "fidelity") -> str:
    """How a verdict is reached, in words (plain text), as :mod:`fidelity.compare` reaches it."""
    other = "the replay" if kind == "fidelity" else "the new trace"
    side = "the live trace" if kind == "fidelity" else "both traces together"
    split = (
        f"blocks of time ({AA_BLOCKS} across the trace, each session in the block of its first request), half of them "
        "to each half, closed up"
        if AA_SCHEME == "blocks"
        else "whole sessions to each half at random"
    )
    return (
        f"A verdict is given per facet: input lengths, output lengths, cache, arrivals (each required), sessions and "
        f"outcomes. A facet fails when one of its metrics fails, and passes when one of them passes conclusively, "
        f"the test that decided named. Where {other} sent live's own requests (paired by request id), each is "
        f"compared with the live one it replayed: a paired test counts the requests further from live than its "
        f"tolerance and passes when the share of them is under {100 * MISS_SHARE:g}% with 95% confidence "
        f"(Clopper-Pearson, over sessions), fails when it is over it, and cannot tell otherwise. Every other metric "
        f"is a distance between live and {other} (0 = the same). Its bound is the larger of a fixed bound and "
        f"{AA_FACTOR:g} times the largest of the same distances between two halves of {side} ({split}), over "
        f"{AA_SPLITS} splits, scaled to the sizes compared (the column A/A): a metric the live traffic itself does not "
        f"pin down more tightly than that cannot fail. It fails over its bound; within it, it passes if the bound is "
        f"within the metric's ceiling and the smallest change of its kind it would catch on this live side (the "
        f"column detects) is within its maximum ({_maxima()}); else it is 'cannot tell' (the note says about how "
        f"much live traffic would pin it down). A stage is unfaithful when a metric failed, cannot tell when none "
        f"failed but a required facet did not pass, and faithful otherwise. On more than {AA_MAX_REQUESTS:,} requests "
        f"the halves come from a sample of sessions of about that size. Metrics whose inputs are missing are not "
        f"applicable and do not count; outcomes (TTFT / ITL / E2E) and the engine's cached tokens request by request "
        f"are judged only when asked (the target ran live's engine config at live's rate). Every time-based metric "
        f"compares a stage at its own pace: counting windows are live's divided by the stage's compression, reuse "
        f"and think times are multiplied by it. The send lag p99 decides whether a stage is valid; the arrivals "
        f"facet judges what it did to the arrivals."
    )


def _maxima() -> str:
    return ", ".join(in_words(family, most, signed=False) for family, most in MAX_DETECTABLE.items())


def _tone(state: str) -> str:
    """The CSS class of a verdict's state: ok, unsure, bad."""
    return {FAITHFUL: "ok", CANNOT_TELL: "unsure"}.get(state, "bad")


def _row(m) -> str:
    cls = {PASS: "pass", FAIL: "fail", CANNOT_TELL: "undecided"}.get(m.state, "na")
    cells = [f"<td>{escape(m.group)}</td>", f"<td>{escape(m.name)}</td>", f'<td class="word">{_word(m.state)}</td>']
    cells += [f'<td class="num">{_num(v)}</td>' for v in (m.distance, m.bound, m.ceiling)]
    cells.append(f'<td class="detects">{escape(m.detects) or "-"}</td>')
    cells += [f'<td class="num">{_num(v)}</td>' for v in (m.aa, m.live, m.replay)]
    cells.append(f"<td>{escape(note(m))}</td>")
    return f'<tr class="{cls}" title="{escape(m.reason)}">{"".join(cells)}</tr>'


def _facet_row(f) -> str:
    cls = {PASS: "pass", FAIL: "fail", CANNOT_TELL: "undecided"}.get(f.state, "na")
    name = f.name if f.required else f"{f.name} (not required)"
    return (
        f'<tr class="{cls}" title="{escape(f.reason)}"><td>{escape(name)}</td><td class="word">{_word(f.state)}</td>'
        f"<td>{escape(', '.join(f.decided_by)) or '-'}</td><td>{escape(f.detects) or '-'}</td></tr>"
    )


def _stage(s: StageFidelity, plots: bool) -> str:
    rate = "as recorded" if s.requested_rate is None else f"{s.requested_rate:g} req/s"
    word = f'<span class="word {_tone(s.verdict.state)}">{verdict_word(s.verdict.state)}</span>'
    parts = [
        f'<section class="stage"><h2><code>{escape(s.file)}</code> {word}</h2>',
        f"<p>{escape(rate)}, {s.compression:.3g}x live's pace, {s.sent} of {s.requests} requests sent</p>",
        f"<p><b>{escape(s.verdict.reason)}</b></p>",
    ]
    if s.verdict.diagnosis:
        parts.append('<ul class="diagnosis">' + "".join(f"<li>{escape(d)}</li>" for d in s.verdict.diagnosis) + "</ul>")
    parts.append(
        "<table><thead><tr><th>facet</th><th>verdict</th><th>decided by</th>"
        '<th title="the smallest change the deciding test catches">catches</th></tr></thead><tbody>'
        + "".join(_facet_row(f) for f in s.verdict.facets)
        + "</tbody></table>"
    )
    parts.append(
        "<table><thead><tr><th>group</th><th>metric</th><th>verdict</th><th>distance</th><th>bound</th>"
        '<th>ceiling</th><th title="the smallest change of its kind this metric catches on this live side">'
        "detects</th><th>A/A</th><th>live</th><th>replay</th><th>note</th></tr></thead><tbody>"
        + "".join(_row(m) for m in s.verdict.metrics)
        + "</tbody></table>"
    )
    if plots:
        parts += [figure_html(p) for p in stage_plots(s)]
    parts.append("</section>")
    return "\n".join(parts)


def html_report(report: FidelityReport, *, plots: bool = True) -> str:
    """The whole report as one HTML page (``plots=False``: tables and text only)."""
    title, verdict = headline(report)
    bounds = "".join(
        f'<tr><td>{escape(name)}</td><td class="num">{bound:g}</td><td class="num">{_num(CEILINGS.get(name))}</td></tr>'
        for name, bound in FIXED_BOUNDS.items()
    )
    body = [
        f'<div class="banner {_tone(report.state)}"><h1>{escape(title)}: {escape(verdict)}</h1></div>',
        f"<p>live: <code>{escape(report.live)}</code><br>compared: <code>{escape(report.results)}</code><br>"
        f"{sum(s.verdict.faithful for s in report.stages)} of {len(report.stages)} stages faithful</p>",
    ]
    if plots and len(report.stages) > 1:
        body.append(figure_html(verdict_chart(report)))
    body.append(
        f'<div class="note"><p><b>How a verdict is reached.</b> {escape(thresholds_note(report.kind))}</p>'
        f"<details><summary>fixed bounds and ceilings</summary><table><tr><th>metric</th><th>fixed bound</th>"
        f"<th>ceiling</th></tr>"
        f"{bounds}</table></details></div>"
    )
    body += [_stage(s, plots) for s in report.stages]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}: {escape(verdict)}</title><style>{STYLE_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
