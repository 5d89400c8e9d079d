"""A campaign as one self-contained HTML page, in the fidelity report's style: the diagnosis, the
noise floor, the path of accepted changes with each gain and noise band, the final config as the
engine's flags, the wins on lossy knobs that need a person's approval, every experiment with its
hypothesis and verdict, and a plot of the search.

The plot: each experiment's measured objective in order (first measurement; a confirmation run
beside it), coloured by verdict, over the band a win had to clear (the baseline of the moment:
median and median + bar). Texts from the campaign (configs, reasons, hypotheses) are escaped.
"""

from __future__ import annotations

from html import escape

from replay.figures import STYLE_CSS, Plot, figure_html, literal, new_figure, png_of
from optimizer.campaign import CampaignResult

__all__ = ["search_plot", "html_report"]

COLOURS = {"better": "#2e7d32", "same": "#757575", "worse": "#ef6c00", "invalid": "#c62828"}


def search_plot(result: CampaignResult) -> Plot:
    fig, (ax,) = new_figure(1, width=9.0, height=3.6)
    noise = result.noise
    x0 = 0
    ax.scatter([x0] * len(noise.values), noise.values, color="#1f77b4", label="baseline runs", zorder=3)
    median, bar = noise.median, noise.bar()
    spans = []  # (from x, median, bar) each time the baseline moved
    for i, step in enumerate(result.steps, 1):
        v = step.verdict
        first = v.measurements[0].value if v.measurements and v.measurements[0].value is not None else None
        if first is None:
            ax.scatter([i], [median], marker="x", color=COLOURS["invalid"], zorder=3)
        else:
            ax.scatter([i], [first], color=COLOURS.get(v.kind, "#000"), zorder=3)
        for m in v.measurements[1:]:
            if m.value is not None:
                ax.scatter([i + 0.2], [m.value], color=COLOURS.get(v.kind, "#000"), marker="D", s=18, zorder=3)
        spans.append((i - 0.5, median, bar))
        if v.kind == "better" and not step.needs_approval and first is not None:
            median = (
                first if len(v.measurements) < 2 or v.measurements[1].value is None else (first + v.measurements[1].value) / 2
            )
    if spans:
        for j, (start, med, b) in enumerate(spans):
            end = spans[j + 1][0] if j + 1 < len(spans) else start + 1
            ax.hlines(med, start, end, color="#1f77b4", linewidth=1)
            ax.fill_between([start, end], [med, med], [med + b, med + b], color="#1f77b4", alpha=0.12, linewidth=0)
    for kind, colour in COLOURS.items():
        ax.scatter([], [], color=colour, label=kind, marker="x" if kind == "invalid" else "o")
    ax.set_xlabel("experiment (0: baseline runs; diamonds: fresh-restart confirmations)")
    ax.set_ylabel("objective")
    ax.set_title(literal("the search: each experiment against the bar a win had to clear"))
    ax.legend(fontsize=8, loc="best")
    return Plot(
        "search",
        "The search",
        "Each experiment's objective in order, coloured by its verdict, with the baseline of the moment "
        "(line: its median; band: up to median + the bar a win had to clear). A better config moves "
        "the baseline.",
        png_of(fig),
    )


def html_report(result: CampaignResult, engine=None) -> str:
    from optimizer.report import approval_line, checks_text, flags, hypothesis_text, rechecks_line, verdict_text

    ok = bool(result.accepted)
    title = "Optimize: " + (f"{len(result.accepted)} change(s) accepted" if ok else "no change beat the noise")
    if result.awaiting_approval:
        title += f"; {len(result.awaiting_approval)} lossy win(s) need a person's approval"
    parts = [f'<div class="banner {"ok" if ok else "bad"}"><h1>{escape(title)}</h1></div>']
    if result.diagnosis:
        parts.append(
            f"<p><b>Bottleneck: {escape(result.diagnosis.bottleneck)}</b> "
            f"({escape(result.diagnosis.evidence)}); knobs tried in the order "
            f"{escape(', '.join(result.diagnosis.order))}.</p>"
        )
        if result.diagnosis.sweep:
            parts.append(
                "<p>The baseline's diagnostic sweep, one engine start:</p><ul>"
                + "".join(f"<li>{escape(line)}</li>" for line in result.diagnosis.sweep_lines())
                + "</ul>"
            )
    n = result.noise
    parts.append(
        f"<p>Baseline <code>{escape(flags(engine, result.baseline) or '(engine defaults)')}</code>: "
        f"{n.median:.4g} over {len(n.values)} runs on fresh starts (spread {n.spread:.3g}, "
        f"{n.relative:.1%}); a win had to clear +{n.bar():.3g} and repeat on a fresh restart.</p>"
    )
    if result.rechecks:
        parts.append(f"<p>{escape(rechecks_line(result))}</p>")
    parts.append(
        "<h2>Accepted changes</h2><ol>"
        + "".join(
            f"<li>{escape(s.hypothesis.get('change', ''))}: gain "
            f"{'-' if s.verdict.gain is None else f'{s.verdict.gain:+.1%}'} ({escape(s.verdict.reason)})</li>"
            for s in result.accepted
        )
        + "</ol>"
        if result.accepted
        else "<h2>Accepted changes</h2><p>None.</p>"
    )
    if result.awaiting_approval:
        parts.append(
            "<h2>Needs a person's approval</h2><p>Wins that change lossy knobs (what the model computes); "
            "the campaign did not adopt them.</p><ul>"
            + "".join(f"<li>{escape(approval_line(s, engine))}</li>" for s in result.awaiting_approval)
            + "</ul>"
        )
    parts.append(
        f"<p>Final config: <code>{escape(flags(engine, result.best) or '(engine defaults)')}</code>. "
        f"Stopped: {escape(result.stopped)}.</p>"
    )
    parts.append(figure_html(search_plot(result)))
    rows = []
    for i, s in enumerate(result.steps, 1):
        v = s.verdict
        value = v.measurements[0].value if v.measurements and v.measurements[0].value is not None else None
        rows.append(
            f'<tr><td class="num">{i}</td><td>{escape(s.hypothesis.get("change", ""))}</td>'
            f"<td>{escape(verdict_text(s))}</td>"
            f'<td class="num">{"-" if value is None else f"{value:.4g}"}</td>'
            f'<td class="num">{"-" if v.gain is None else f"{v.gain:+.1%}"}</td>'
            f"<td>{escape(checks_text(s))}</td><td>{escape(v.reason)}</td><td>{escape(hypothesis_text(s))}; "
            f"wrong if: {escape(s.hypothesis.get('falsified_by', ''))}</td></tr>"
        )
    parts.append(
        "<h2>Experiments</h2><table><tr><th>#</th><th>change</th><th>verdict</th><th>value</th><th>gain</th>"
        "<th>predictions</th><th>why</th><th>hypothesis</th></tr>" + "".join(rows) + "</table>"
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
