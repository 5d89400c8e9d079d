"""A sweep's page: ``sweep.html`` beside its summary.json, drawn from that summary alone (so a
results folder can be drawn again later: :func:`write_sweep_html`).

What it shows, per stage (one point each, in the order run):

- latency against load: TTFT, TPOT and E2E, p50 (solid) and p99 (dashed), against the stage's
  achieved rate (its completed requests per second). TTFT and E2E are counted from the intended
  send, as a user of the open-loop schedule waits (replay.metrics);
- goodput (requests meeting every SLO per second; every completed one when no SLO was set) against
  the achieved rate, beside the line where they are equal;
- the engine's own metrics (replay.engine_metrics): KV-cache usage and waiting requests, p50 and
  max, against the achieved rate.

A closed-loop sweep (``replay sweep --concurrency``) draws the same, one point per number of users.
A fleet's sweep (several targets, replay.fleet) adds a table per replica: each stage's share of the
requests, errors, cache hit and TTFT / E2E per replica, and the imbalance flag where one was raised.

The saturation point (replay.sweep) is a vertical red line at that stage's achieved rate, and
an undetermined one a grey line; a stage the runner fell behind in (invalid) is drawn with
hollow markers, since its numbers may be the runner's. The page loads nothing from elsewhere,
and every text from the summary (paths, reasons) is HTML-escaped.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from replay.figures import STYLE_CSS, Plot, empty, figure_html, literal, new_figure, png_of
from replay.metrics import load_label

__all__ = ["SWEEP_HTML", "sweep_points", "sweep_plots", "sweep_html", "write_sweep_html"]

SWEEP_HTML = "sweep.html"
LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))
P50, P99 = "#1f77b4", "#d62728"
SATURATED, UNDETERMINED = "#c62828", "#757575"


def _latency(stage: dict, key: str, p: str) -> float | None:
    value = stage.get(key) or {}
    if "from_intended" in value:  # TTFT and E2E: from the intended send
        value = value["from_intended"]
    return value.get(p)


def sweep_points(summary: dict) -> dict:
    """What the plots draw, from a sweep's summary (summary.json): per stage its achieved and
    offered rate, validity, latency percentiles, goodput and engine metrics; and where the
    saturation line goes (``saturation_x``: the achieved rate of the stage it names, or None)."""
    stages = summary.get("stages") or []
    rates = summary.get("rates") or []
    points = []
    for i, s in enumerate(stages):
        m = s.get("engine_metrics") or {}
        point = {
            "requested": rates[i] if i < len(rates) else s.get("requested_rate"),
            "concurrency": s.get("concurrency"),
            "offered": s.get("offered_rate"),
            "achieved": s.get("throughput_rps"),  # completed requests per second
            "valid": bool(s.get("valid")),
            "goodput": s.get("goodput_rps"),
            "kv_usage": None if "unavailable" in m else m.get("kv_usage"),
            "waiting": None if "unavailable" in m else m.get("waiting"),
        }
        for key, _ in LATENCIES:
            point[key] = {p: _latency(s, key, p) for p in ("p50", "p99")}
        points.append(point)
    sat = summary.get("saturation") or {}
    x = None
    if sat.get("status") in ("saturated", "undetermined"):
        at = sat.get("rate") if sat["status"] == "saturated" else sat.get("undetermined_at")
        users = sat.get("concurrency")
        x = next(
            (
                p["achieved"]
                for p in points
                if (p["concurrency"] == users if users is not None else at is not None and p["requested"] == at)
            ),
            None,
        )
    return {"stages": points, "saturation": sat, "saturation_x": x}


def _mark_saturation(ax, data: dict) -> None:
    x = data["saturation_x"]
    if x is None:
        return
    saturated = data["saturation"].get("status") == "saturated"
    ax.axvline(
        x,
        color=SATURATED if saturated else UNDETERMINED,
        linestyle=":",
        linewidth=1.5,
        label="saturation" if saturated else "undetermined",
    )


def _series(ax, xs, ys, valid, color, style, label) -> bool:
    """One line through the stages that have both values, by rising x (the repeats of a stage side by
    side); invalid stages hollow. False: none had."""
    pts = sorted((x, y, v) for x, y, v in zip(xs, ys, valid) if x is not None and y is not None)
    if not pts:
        return False
    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=label)
    for x, y, v in pts:
        ax.plot([x], [y], "o", color=color, markerfacecolor=color if v else "white")
    return True


def _panel(ax, data: dict, series: dict[str, list], title: str, missing: str, ylabel: str | None = None) -> None:
    """One axes of two series against the achieved rate, the first solid, the second dashed
    (invalid stages hollow, the saturation point marked), or ``missing`` when neither has a point."""
    stages = data["stages"]
    xs = [s["achieved"] for s in stages]
    valid = [s["valid"] for s in stages]
    drawn = [
        _series(ax, xs, ys, valid, color, style, label)
        for (label, ys), color, style in zip(series.items(), (P50, P99), ("-", "--"))
    ]
    if not any(drawn):
        empty(ax, missing)
        return
    _mark_saturation(ax, data)
    ax.set_title(literal(title))
    ax.set_xlabel("achieved rate (completed req/s)")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)


def _latency_plot(data: dict) -> Plot:
    fig, axes = new_figure(3, width=4.2, height=3.2)
    for ax, (key, name) in zip(axes, LATENCIES):
        _panel(ax, data, {p: [s[key][p] for s in data["stages"]] for p in ("p50", "p99")}, name, f"no {name} measured", "ms")
    return Plot(
        "latency",
        "Latency against load",
        "TTFT, TPOT and E2E p50 (solid) and p99 (dashed) per stage against the rate it achieved; TTFT "
        "and E2E from the intended send. Hollow: a stage the runner fell behind in (invalid). Dotted: "
        "the saturation point.",
        png_of(fig),
    )


def _goodput_plot(data: dict) -> Plot:
    fig, (ax,) = new_figure(1, width=5.0, height=3.4)
    stages = data["stages"]
    xs = [s["achieved"] for s in stages]
    if _series(ax, xs, [s["goodput"] for s in stages], [s["valid"] for s in stages], P50, "-", "goodput"):
        top = max(x for x in xs if x is not None)
        ax.plot([0, top], [0, top], color="#9e9e9e", linewidth=0.8, label="goodput = achieved")
        _mark_saturation(ax, data)
        ax.set_xlabel("achieved rate (completed req/s)")
        ax.set_ylabel("goodput (req/s)")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    else:
        empty(ax, "no request completed")
    return Plot(
        "goodput",
        "Goodput against load",
        "Requests that met every SLO per second (every completed one when no SLO was set) against the "
        "rate achieved; below the grey line, some completed requests missed an SLO.",
        png_of(fig),
    )


def _engine_plot(data: dict) -> Plot:
    fig, axes = new_figure(2, width=4.5, height=3.2)
    for ax, (key, name, scale) in zip(axes, (("kv_usage", "KV-cache usage (%)", 100.0), ("waiting", "requests waiting", 1.0))):
        series = {p: [s[key][p] * scale if s[key] and p in s[key] else None for s in data["stages"]] for p in ("p50", "max")}
        _panel(ax, data, series, name, f"{name}: not read from the engine")
    return Plot(
        "engine",
        "The engine per stage",
        "The engine's own KV-cache usage and waiting requests (its /metrics, read every second during "
        "the stage), p50 (solid) and max (dashed), against the rate achieved.",
        png_of(fig),
    )


def sweep_plots(summary: dict) -> list[Plot]:
    """The page's plots: latency, goodput and the engine, against load."""
    data = sweep_points(summary)
    return [_latency_plot(data), _goodput_plot(data), _engine_plot(data)]


def _fmt(v, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def _headline(sat: dict) -> str:
    from replay.sweep import Saturation

    status = sat.get("status")
    if status == "saturated":
        line = f"saturates at {Saturation.where(sat)}: {sat.get('reason')}"
    elif status == "undetermined":
        line = f"saturation undetermined at {Saturation.where(sat)}: {sat.get('reason')}"
    else:
        line = "no saturation within the loads swept"
    if sat.get("resource"):
        line += f"; the engine ran out of {sat['resource']}"
    return line


def _arrivals(arrivals: dict | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (arrivals or {}).items() if v is not None) or "-"


def _targets(summary: dict) -> str:
    """The target's URL, or a fleet's replicas and route."""
    if not summary.get("targets"):
        return str(summary.get("url", ""))
    fleet = ", ".join(f"{t['name']} {t['url']}" for t in summary["targets"])
    return f"{fleet} (route {summary.get('route')})"


def _replicas_html(summary: dict) -> list[str]:
    """A fleet's per-replica table (stages with a ``replicas`` breakdown); none for one target."""
    rows = []
    for s in summary.get("stages") or []:
        table = s.get("replicas")
        if not table:
            continue
        load = load_label(s.get("requested_rate"), s.get("concurrency"))
        for r in table["rows"]:
            cells = [
                load,
                r["replica"],
                _fmt(r["share"], ".0%"),
                str(r["errors"]),
                _fmt(r["cache_hit_rate"], ".0%"),
                *(_fmt(r[k]) for k in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms")),
            ]
            rows.append("<tr>" + "".join(f'<td class="num">{escape(c)}</td>' for c in cells) + "</tr>")
        if table.get("imbalance"):
            why = escape(f"{load}: imbalanced: {table['imbalance']}")
            rows.append(f'<tr class="fail"><td colspan="9" class="word">{why}</td></tr>')
    if not rows:
        return []
    route = next((s["replicas"].get("route") for s in summary["stages"] if s.get("replicas")), None)
    head = (
        "<tr><th>load</th><th>replica</th><th>share</th><th>errors</th><th>cache hit</th><th>TTFT p50 ms</th>"
        "<th>TTFT p99</th><th>E2E p50</th><th>E2E p99</th></tr>"
    )
    return [
        f"<h2>Per replica (route: {escape(str(route))})</h2>",
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>",
    ]


def sweep_html(summary: dict, *, plots: bool = True) -> str:
    """The whole page for a sweep's summary (summary.json); ``plots=False``: the table and text only."""
    data = sweep_points(summary)
    sat = data["saturation"]
    headline = _headline(sat)
    rows = []
    for s, p in zip(summary.get("stages") or [], data["stages"]):
        word = "valid" if p["valid"] else f"invalid: {s.get('invalid_reason') or ''}"
        requested = load_label(None, p["concurrency"]) if p["concurrency"] is not None else _fmt(p["requested"], "g")
        cells = [
            requested,
            _fmt(p["offered"]),
            _fmt(p["achieved"]),
            f"{s.get('completed', 0)} / {s.get('sent', 0)}",
            *(_fmt(p[k][q]) for k, _ in LATENCIES for q in ("p50", "p99")),
            _fmt(p["goodput"]),
            _fmt((p["kv_usage"] or {}).get("max"), ".0%"),
            _fmt((p["waiting"] or {}).get("max")),
        ]
        cls = "pass" if p["valid"] else "fail"
        rows.append(
            f'<tr class="{cls}">'
            + "".join(f'<td class="num">{escape(c)}</td>' for c in cells)
            + f'<td class="word">{escape(word)}</td></tr>'
        )
    head = (
        "<tr><th>requested req/s (or users)</th><th>offered</th><th>achieved</th><th>completed / sent</th>"
        "<th>TTFT p50 ms</th><th>TTFT p99</th><th>TPOT p50</th><th>TPOT p99</th><th>E2E p50</th><th>E2E p99</th>"
        "<th>goodput req/s</th><th>KV max</th><th>waiting max</th><th>runner</th></tr>"
    )
    ok = sat.get("status") != "undetermined"
    body = [
        f'<div class="banner {"ok" if ok else "bad"}"><h1>Sweep: {escape(headline)}</h1></div>',
        f"<p>trace: <code>{escape(str(summary.get('trace', '')))}</code><br>"
        f"target: <code>{escape(_targets(summary))}</code><br>"
        f"{len(summary.get('stages') or [])} stages; arrivals: {escape(_arrivals(summary.get('arrivals')))}</p>",
        f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>",
    ]
    if summary.get("interval"):  # --repeats
        from replay.sweep import HeldInterval

        body.insert(
            1, f"<p><b>{escape(HeldInterval.line(summary['interval']))}</b> ({summary.get('repeats')} repeats of each stage)</p>"
        )
    body += _replicas_html(summary)
    if plots:
        body += [figure_html(plot) for plot in sweep_plots(summary)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Sweep: {escape(headline)}</title><style>{STYLE_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write_sweep_html(out: str | Path, summary: dict) -> Path:
    """``out``/sweep.html for ``summary``, written whole (a temporary file renamed over it)."""
    path = Path(out) / SWEEP_HTML
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(sweep_html(summary), encoding="utf-8")
    tmp.replace(path)
    return path
