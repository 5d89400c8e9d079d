"""A campaign as a person reads it: Markdown, and a table on the terminal (written with the JSON
and the HTML page by :mod:`optimizer.report_files`).

It shows the diagnosis, the noise floor, every experiment with its hypothesis and verdict, the
path of accepted changes with each one's gain and noise band, the wins on lossy knobs that need
a person's approval (never adopted by the campaign), and the final config as the engine's own
flags.
"""

from __future__ import annotations

import json
from typing import Any

from optimizer.campaign import CampaignResult, Step
from optimizer.hypotheses import score
from optimizer.verdict import K

__all__ = ["markdown", "print_result", "flags", "rechecks_line", "approval_line", "verdict_text"]


def flags(engine, config: dict[str, Any]) -> str:
    """A config as the engine's own command-line flags (JSON without an engine)."""
    from replay.targets.engine import config_args

    import shlex

    return shlex.join(config_args(engine.name, engine.knobs, config)) if engine is not None else json.dumps(config)


def _esc(text: str) -> str:
    for ch in "\\|`*_[]<>":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", " ")


def markdown(result: CampaignResult, engine=None, title: str = "Optimize") -> str:
    lines = [f"# {title}", ""]
    if result.diagnosis:
        lines += [
            f"**Bottleneck: {result.diagnosis.bottleneck}** ({_esc(result.diagnosis.evidence)}); knobs tried "
            f"in the order {', '.join(result.diagnosis.order)}.",
            "",
        ]
        if result.diagnosis.sweep:
            lines += ["The baseline's diagnostic sweep, one engine start:", ""]
            lines += [f"- {_esc(line)}" for line in result.diagnosis.sweep_lines()] + [""]
    n = result.noise
    lines += [
        f"Baseline `{_esc(flags(engine, result.baseline)) or '(engine defaults)'}`: {n.median:.4g} "
        f"(runs {', '.join(f'{v:.4g}' for v in n.values)}; spread {n.spread:.3g}, {n.relative:.1%}; a win must "
        f"clear +{n.bar():.3g} and repeat on a fresh restart).",
        "",
    ]
    if result.rechecks:
        lines += [_esc(rechecks_line(result)), ""]
    lines += ["## Accepted changes", ""]
    if not result.accepted:
        lines += ["None: no candidate beat the baseline beyond its noise and repeated.", ""]
    for i, step in enumerate(result.accepted, 1):
        v = step.verdict
        gain = "-" if v.gain is None else f"{v.gain:+.1%}"
        lines.append(f"{i}. {_esc(step.hypothesis.get('change', ''))}: gain {gain} ({_esc(v.reason)})")
    if result.awaiting_approval:
        lines += [
            "",
            "## Needs a person's approval",
            "",
            "Wins that change lossy knobs (what the model computes); the campaign did not adopt them.",
            "",
        ]
        lines += [f"- {_esc(approval_line(step, engine))}" for step in result.awaiting_approval]
    best = flags(engine, result.best)
    lines += [
        "",
        f"Final config: `{_esc(best) or '(engine defaults)'}`",
        "",
        f"Stopped: {_esc(result.stopped)}",
        "",
        "## Experiments",
        "",
        "| # | change | verdict | value | gain | predictions | why | hypothesis |",
        "|---:|---|---|---:|---:|---|---|---|",
    ]
    for i, step in enumerate(result.steps, 1):
        v = step.verdict
        value = v.measurements[0].value if v.measurements and v.measurements[0].value is not None else None
        lines.append(
            f"| {i} | {_esc(step.hypothesis.get('change', json.dumps(step.config)))} | "
            f"{verdict_text(step)} | {'-' if value is None else f'{value:.4g}'} | "
            f"{'-' if v.gain is None else f'{v.gain:+.1%}'} | {_esc(checks_text(step))} | {_esc(v.reason)} | "
            f"{_esc(hypothesis_text(step))} |"
        )
    return "\n".join(lines) + "\n"


def checks_text(step: Step) -> str:
    """The prediction score and each checked prediction: "2 held, 1 refuted (waiting 12 -> 3 held; ...)"."""
    checks = step.checks
    if not checks:
        return score(checks)
    verb = {1: "up", -1: "down", 0: "flat"}

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}"

    return (
        f"{score(checks)} ("
        + "; ".join(
            f"{c['metric']} {verb[c['direction']]}: {num(c['incumbent'])} -> {num(c['candidate'])} {c['outcome']}" for c in checks
        )
        + ")"
    )


def hypothesis_text(step: Step) -> str:
    """The explanation, mechanism and prediction, and the candidate's own bottleneck once measured."""
    h = step.hypothesis
    parts = [h.get("explanation", "")]
    if h.get("mechanism"):
        parts.append(f"mechanism: {h['mechanism']}")
    if h.get("prediction"):
        parts.append(f"predicted: {h['prediction']}")
    if h.get("diagnosis"):
        parts.append(f"then: {h['diagnosis']['bottleneck']}")
    return "; ".join(p for p in parts if p)


def verdict_text(step: Step) -> str:
    """The verdict as the tables show it: marked when it came from the ledger or needs approval."""
    return (
        step.verdict.kind + (" (needs a person's approval)" if step.needs_approval else "") + (" (ledger)" if step.reused else "")
    )


def approval_line(step: Step, engine=None) -> str:
    """A lossy win: its change, its gain, the lossy knobs, that a person must approve it, its flags."""
    v = step.verdict
    gain = "-" if v.gain is None else f"{v.gain:+.1%}"
    return (
        f"{step.hypothesis.get('change') or json.dumps(step.config)}: gain {gain}, confirmed on a fresh "
        f"restart; lossy knob(s) {', '.join(step.needs_approval)}: needs a person's approval "
        f"(config: {flags(engine, step.config) or '(engine defaults)'})"
    )


def rechecks_line(result: CampaignResult) -> str:
    """What the baseline's measurements between candidates showed."""
    r = result.rechecks
    drifted = [c for c in r if c["drifted"]]
    line = f"The baseline was measured again {len(r)} time(s) between candidates: " + ", ".join(f"{c['value']:.4g}" for c in r)
    if drifted:
        return line + (
            f"; {len(drifted)} landed more than {K:g} spreads from the median before them (drift), and widened the noise floor."
        )
    return line + "; none drifted beyond the noise."


def print_result(result: CampaignResult, engine=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if result.diagnosis:
        console.print(f"bottleneck: {escape(result.diagnosis.bottleneck)} ({escape(result.diagnosis.evidence)})", highlight=False)
        for line in result.diagnosis.sweep_lines():
            console.print(f"  {escape(line)}", highlight=False)
    n = result.noise
    console.print(f"baseline {n.median:.4g} ± {n.spread:.3g} ({n.relative:.1%}) over {len(n.values)} runs", highlight=False)
    if result.rechecks:
        console.print(escape(rechecks_line(result)), highlight=False)
    table = Table(title="experiments")
    for col in ("#", "change", "verdict", "gain", "predictions"):
        table.add_column(col)
    for i, step in enumerate(result.steps, 1):
        v = step.verdict
        table.add_row(
            str(i),
            escape(step.hypothesis.get("change", "")),
            escape(verdict_text(step)),
            "-" if v.gain is None else f"{v.gain:+.1%}",
            escape(score(step.checks)),
        )
    console.print(table)
    for step in result.awaiting_approval:
        console.print(escape(approval_line(step, engine)), highlight=False)
    console.print(f"final config: {escape(flags(engine, result.best)) or '(engine defaults)'}", highlight=False)
    console.print(f"stopped: {escape(result.stopped)}", highlight=False)
