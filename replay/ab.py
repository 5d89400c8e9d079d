"""``replay compare A B``: is B better than, the same as, or worse than A, stage by stage, beyond
the bench's own noise? For CI regression gates: exit 1 on a worse.

A and B are results folders of ``replay run`` / ``replay sweep``. Their stages are paired by load
(the requested rate, "as recorded", or a closed loop's number of users); a stage in only one of
them is listed and not judged. Each pair is judged on :data:`METRICS`: goodput and completed
requests per second (higher is better), TTFT, TPOT and E2E p50 / p99 (lower is better; TTFT and
E2E from the intended send time, as every report here counts them).

**The noise.** Where both folders hold two or more repeats of a stage (its stages share a load),
each side's values over its repeats make an :class:`replay.noise.NoiseFloor`: the medians are
compared and the spread is the larger of the two sides' spreads. Otherwise, where the two stages
sent the same requests (by request id, all but at most 5% of each side's: two replays of one trace
at one load), the requests are resampled in pairs, the same draw on both sides, :data:`BOOTSTRAP`
times (seeded), and the spread is the standard deviation of B - A over those resamples: a paired
bootstrap, whose noise a request's own length and place in the schedule, shared by both sides, do
not widen. Else each side's requests are resampled on their own and the spread is
``sqrt(sd_A^2 + sd_B^2)``. A bootstrap sees the sampling noise of the requests, not an engine's
run-to-run wobble (a fresh start, a noisy neighbour); the report says which method judged each
stage, and repeats see both.

**The rule** is the optimizer's (:mod:`replay.noise`: ``K``, ``MIN_GAIN``, ``MAX_NOISE``).
With ``d`` the change in B's favour (B - A for rates, A - B for latencies) and
``bar = K * spread + MIN_GAIN * |A|``: **better** when ``d > bar``, **worse** when ``d < -bar``,
**same** otherwise. The bar is symmetric here (the optimizer's "worse" only means "not adopted";
a gate should not fire on a 0.3% shift that is merely significant). **cannot tell** when either
side's stage is not to be trusted (invalid: send lag over its bound, cancelled, or partial), has
fewer completed requests than the metric needs (:data:`MIN_COMPLETED`: a p99 of fewer than 100
requests is their maximum), the two sides ran under different SLOs (goodput), or B is within the
bar but the spread is over ``MAX_NOISE`` of A's value (a "same" that noisy would say nothing; a
change beyond the bar is still better or worse).

The comparison is **worse** when a metric is worse, **cannot tell** when none is worse but one
cannot be told, and **not worse** otherwise: exit 1, 3, 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from replay.noise import MAX_NOISE, MIN_GAIN, K, NoiseFloor
from replay.config import Slo
from replay.errors import ConfigError
from replay.metrics import completed, load_label, slo_met
from replay.results import read_stage

__all__ = [
    "METRICS",
    "BOOTSTRAP",
    "MIN_COMPLETED",
    "BETTER",
    "SAME",
    "WORSE",
    "CANNOT_TELL",
    "NOT_WORSE",
    "EXIT_CODES",
    "Change",
    "StagePair",
    "Comparison",
    "compare_folders",
    "markdown",
    "html",
    "print_comparison",
    "write",
]

BETTER, SAME, WORSE, CANNOT_TELL = "better", "same", "worse", "cannot tell"
NOT_WORSE = "not worse"
EXIT_CODES = {NOT_WORSE: 0, WORSE: 1, CANNOT_TELL: 3}

# name -> (what it is, unit, higher is better)
METRICS: dict[str, tuple[str, str, bool]] = {
    "goodput": ("requests meeting the SLO per second", "req/s", True),
    "throughput": ("completed requests per second", "req/s", True),
    "ttft_p50": ("TTFT p50 (from the intended send)", "ms", False),
    "ttft_p99": ("TTFT p99 (from the intended send)", "ms", False),
    "tpot_p50": ("time per output token p50", "ms", False),
    "tpot_p99": ("time per output token p99", "ms", False),
    "e2e_p50": ("end-to-end latency p50 (from the intended send)", "ms", False),
    "e2e_p99": ("end-to-end latency p99 (from the intended send)", "ms", False),
}
BOOTSTRAP = 400  # resamples per side and stage
# two stages that sent the same requests (by id, this share of each side's at least) are resampled
# in pairs: the noise of B - A, not of each side alone
PAIRED_COVERAGE = 0.95
MIN_COMPLETED = {"p50": 20, "p99": 100, "rate": 20}  # completed requests a side needs for each kind of metric


@dataclass(frozen=True)
class _Run:
    """One stage of one folder, reduced to what the metrics need (per request, ms)."""

    file: str
    summary: dict
    ok: np.ndarray  # bool, every request
    met: np.ndarray  # bool, every request: completed and within the SLO (all completed without an SLO)
    ttft: np.ndarray  # float, nan where not completed
    tpot: np.ndarray
    e2e: np.ndarray
    duration_s: float
    ids: np.ndarray | None = None  # request id per row (None: the stage file has none)

    @property
    def trusted(self) -> str | None:
        """Why this stage's numbers cannot be trusted, or None."""
        s = self.summary
        if s.get("partial"):
            return f"{self.file} never finished (its process died)"
        if s.get("cancelled"):
            return f"{self.file} was cancelled"
        if s.get("valid") is False:
            return f"{self.file} is invalid: {s.get('invalid_reason') or 'its send lag was over its bound'}"
        return None

    def value(self, metric: str, idx: np.ndarray | None = None) -> float | None:
        pick = (lambda a: a) if idx is None else (lambda a: a[idx])
        if metric in ("goodput", "throughput"):
            if not self.duration_s > 0:
                return None
            return float(pick(self.met if metric == "goodput" else self.ok).sum()) / self.duration_s
        kind, q = metric.rsplit("_p", 1)
        values = pick(getattr(self, kind))
        values = values[~np.isnan(values)]
        return float(np.percentile(values, int(q))) if len(values) else None

    def count(self, metric: str) -> int:
        """How many completed requests ``metric`` is computed from."""
        if metric.startswith("tpot"):
            return int((~np.isnan(self.tpot)).sum())
        return int(self.ok.sum())


def _run(folder: Path, file: str, summary: dict) -> _Run:
    df, meta = read_stage(folder / file)
    summary = {**summary, **meta} if meta.get("partial") else summary
    n = df.height
    ok_rows = completed(df.with_row_index("_row"))
    rows = ok_rows["_row"].to_numpy()
    ok = np.zeros(n, dtype=bool)
    ok[rows] = True

    def spread(col: str) -> np.ndarray:
        out = np.full(n, np.nan)
        out[rows] = ok_rows[col].cast(pl.Float64).fill_null(np.nan).to_numpy() / 1e6
        return out

    slo_json = summary.get("slo")
    met = ok.copy()
    if slo_json:
        slo = Slo(ttft_s=slo_json.get("ttft_s"), tpot_s=slo_json.get("tpot_s"), e2e_s=slo_json.get("e2e_s"))
        met[:] = False
        met[rows] = slo_met(ok_rows, slo)
    ids = df["request_id"].cast(pl.String).to_numpy() if "request_id" in df.columns else None
    return _Run(
        file,
        summary,
        ok,
        met,
        spread("ttft_ns"),
        spread("tpot_ns"),
        spread("e2e_ns"),
        float(summary.get("duration_s") or 0.0),
        ids,
    )


def _paired_rows(a: _Run, b: _Run) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of ``a`` and ``b`` that sent the same requests (by request id), in pairs, when
    those are all but at most 5% of each side's (two replays of one trace at one load); else None."""
    if a.ids is None or b.ids is None or not len(a.ids) or not len(b.ids):
        return None
    _, ia, ib = np.intersect1d(a.ids, b.ids, assume_unique=True, return_indices=True)
    if len(ia) < PAIRED_COVERAGE * max(len(a.ids), len(b.ids)):
        return None
    return ia, ib


@dataclass(frozen=True)
class Change:
    """One metric of one stage pair: A's and B's values, B's change, the bar, the verdict."""

    metric: str
    a: float | None
    b: float | None
    bar: float | None  # how far B must move from A (in the metric's unit) to count
    verdict: str
    reason: str

    @property
    def relative(self) -> float | None:
        if self.a is None or self.b is None or not self.a:
            return None
        return (self.b - self.a) / abs(self.a)

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "unit": METRICS[self.metric][1],
            "a": self.a,
            "b": self.b,
            "relative_change": self.relative,
            "bar": self.bar,
            "verdict": self.verdict,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class StagePair:
    load: str
    a_files: tuple[str, ...]
    b_files: tuple[str, ...]
    method: str  # "repeats (a x b)", "paired bootstrap over the N requests both sent" or "bootstrap over requests"
    changes: tuple[Change, ...]
    # a fleet's stages (replay.fleet.replica_breakdown): A's and B's per-replica tables, shown
    # beside the verdicts (never judged); None when neither side had more than one replica
    replicas: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        return _overall([c.verdict for c in self.changes])

    def to_json(self) -> dict:
        return {
            "load": self.load,
            "a_files": list(self.a_files),
            "b_files": list(self.b_files),
            "method": self.method,
            "verdict": self.verdict,
            "changes": [c.to_json() for c in self.changes],
            **({"replicas": self.replicas} if self.replicas else {}),
        }


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    pairs: tuple[StagePair, ...]
    only_a: tuple[str, ...] = ()  # loads only A ran
    only_b: tuple[str, ...] = ()
    metrics: tuple[str, ...] = tuple(METRICS)
    seed: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def state(self) -> str:
        return _overall([p.verdict for p in self.pairs], whole=True)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.state]

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "state": self.state,
            "metrics": list(self.metrics),
            "seed": self.seed,
            "rule": {
                "K": K,
                "min_gain": MIN_GAIN,
                "max_noise": MAX_NOISE,
                "bootstrap": BOOTSTRAP,
                "min_completed": MIN_COMPLETED,
            },
            "pairs": [p.to_json() for p in self.pairs],
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "notes": list(self.notes),
        }


def _overall(verdicts: list[str], *, whole: bool = False) -> str:
    """A stage pair's verdict from its metrics' (worse, cannot tell, better, same: the first
    present), or the comparison's from its pairs' (worse, cannot tell, else not worse)."""
    if WORSE in verdicts:
        return WORSE
    if CANNOT_TELL in verdicts or not verdicts:
        return CANNOT_TELL
    if whole:
        return NOT_WORSE
    return BETTER if BETTER in verdicts else SAME


def _stages(folder: Path) -> dict[str, list[tuple[str, dict]]]:
    """A results folder's stages by load: ``{load: [(file, summary), ...]}`` (repeats share a load)."""
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise ConfigError(f"{folder}: no summary.json (not a results folder of replay run / replay sweep)")
    try:
        summary = json.loads(path.read_text())
        files, stages = summary["files"], summary["stages"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a results summary ({e})") from None
    out: dict[str, list[tuple[str, dict]]] = {}
    for file, stage in zip(files, stages):
        load = load_label(stage.get("requested_rate"), stage.get("concurrency"))
        out.setdefault(load, []).append((file, stage))
    return out


def _kind(metric: str) -> str:
    return "rate" if metric in ("goodput", "throughput") else metric.rsplit("_", 1)[1]


def _judge(metric: str, a: float | None, b: float | None, spread: float, why_not: str | None) -> Change:
    unit = METRICS[metric][1]
    if why_not is None and (a is None or b is None):
        why_not = "no value on " + ("A" if a is None else "B")
    if why_not is not None or a is None or b is None:
        return Change(metric, a, b, None, CANNOT_TELL, why_not or "no value")
    bar = K * spread + MIN_GAIN * abs(a)
    gain = (b - a) if METRICS[metric][2] else (a - b)
    shown = f"A {a:.4g} {unit}, B {b:.4g} {unit} ({100 * (b - a) / abs(a):+.1f}%)" if a else f"A {a:.4g}, B {b:.4g}"
    if gain > bar:
        return Change(metric, a, b, bar, BETTER, f"{shown}: better by more than the bar {bar:.3g} {unit}")
    if gain < -bar:
        return Change(metric, a, b, bar, WORSE, f"{shown}: worse by more than the bar {bar:.3g} {unit}")
    if not spread <= MAX_NOISE * abs(a):  # nan or inf spread too
        return Change(
            metric,
            a,
            b,
            bar,
            CANNOT_TELL,
            f"{shown}: within the bar {bar:.3g} {unit}, but the noise "
            f"({spread:.3g} {unit}) is over {100 * MAX_NOISE:g}% of A's value",
        )
    return Change(metric, a, b, bar, SAME, f"{shown}: within the bar {bar:.3g} {unit}")


def _untrusted(metric: str, a: list[_Run], b: list[_Run]) -> str | None:
    for side, runs in (("A", a), ("B", b)):
        for r in runs:
            if r.trusted:
                return f"{side}: {r.trusted}"
            need = MIN_COMPLETED[_kind(metric)]
            if r.count(metric) < need:
                return f"{side}: {r.file} has {r.count(metric)} completed requests to compute it from (needs {need})"
    if metric == "goodput" and any(r.summary.get("slo") != a[0].summary.get("slo") for r in a + b):
        return "A and B ran under different SLOs"
    return None


def _pair(load: str, a: list[_Run], b: list[_Run], metrics: tuple[str, ...], seed: int) -> StagePair:
    changes = []
    repeats = len(a) >= 2 and len(b) >= 2
    rng = np.random.default_rng(seed)
    pairs = None if repeats else _paired_rows(a[0], b[0])
    if repeats:
        method = f"repeats ({len(a)} A x {len(b)} B)"
    elif pairs is not None:
        method = f"paired bootstrap over the {len(pairs[0]):,} requests both sent"
    else:
        method = "bootstrap over requests"
    draws = (
        {}
        if repeats or pairs is not None
        else {id(r): [rng.integers(0, len(r.ok), len(r.ok)) for _ in range(BOOTSTRAP)] for r in (a[0], b[0]) if len(r.ok)}
    )
    paired_draws = [] if pairs is None else [rng.integers(0, len(pairs[0]), len(pairs[0])) for _ in range(BOOTSTRAP)]
    for metric in metrics:
        why_not = _untrusted(metric, a, b)
        if why_not is not None:
            changes.append(_judge(metric, None, None, math.nan, why_not))
            continue
        if repeats:
            va = [v for r in a if (v := r.value(metric)) is not None]
            vb = [v for r in b if (v := r.value(metric)) is not None]
            if len(va) < len(a) or len(vb) < len(b):
                changes.append(_judge(metric, None, None, math.nan, "a repeat has no value"))
                continue
            fa, fb = NoiseFloor(tuple(va)), NoiseFloor(tuple(vb))
            changes.append(_judge(metric, fa.median, fb.median, max(fa.spread, fb.spread), None))
        elif pairs is not None:
            # the same requests drawn on both sides: the spread of B - A, which a request's own
            # length and place in the schedule, shared by both, do not widen
            ia, ib = pairs
            diffs = [
                xb - xa
                for idx in paired_draws
                if (xa := a[0].value(metric, ia[idx])) is not None
                and (xb := b[0].value(metric, ib[idx])) is not None
                and math.isfinite(xb - xa)
            ]
            spread = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.inf
            changes.append(_judge(metric, a[0].value(metric), b[0].value(metric), spread, None))
        else:
            sds = []
            for r in (a[0], b[0]):
                vals = [v for idx in draws.get(id(r), []) if (v := r.value(metric, idx)) is not None and math.isfinite(v)]
                sds.append(float(np.std(vals, ddof=1)) if len(vals) > 1 else math.inf)
            changes.append(_judge(metric, a[0].value(metric), b[0].value(metric), math.hypot(*sds), None))
    tables = {"a": a[0].summary.get("replicas"), "b": b[0].summary.get("replicas")}
    replicas = tables if any(tables.values()) else None
    return StagePair(load, tuple(r.file for r in a), tuple(r.file for r in b), method, tuple(changes), replicas)


def _replica_lines(p: StagePair) -> list[str]:
    """A fleet stage pair's per-replica lines, A's then B's (first run of each side)."""
    from replay.fleet import replica_lines

    if not p.replicas:
        return []
    return [f"{side.upper()} {line}" for side in ("a", "b") for line in replica_lines(p.replicas.get(side))]


def compare_folders(a: Path, b: Path, *, metrics: tuple[str, ...] = tuple(METRICS), seed: int = 0) -> Comparison:
    """Judge results folder ``b`` against ``a``, stage by stage (see the module's description)."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ConfigError(f"--metrics: unknown {', '.join(unknown)} (known: {', '.join(METRICS)})")
    sa, sb = _stages(a), _stages(b)
    pairs = []
    for load in [k for k in sa if k in sb]:
        runs_a = [_run(Path(a), f, s) for f, s in sa[load]]
        runs_b = [_run(Path(b), f, s) for f, s in sb[load]]
        pairs.append(_pair(load, runs_a, runs_b, tuple(metrics), seed))
    notes = []
    if any("bootstrap" in p.method for p in pairs):
        notes.append(
            "a bootstrap over requests (paired or not) sees the sampling noise of the requests, not an engine's run-to-run "
            "wobble; run each side with --repeats for that"
        )
    if not pairs:
        notes.append("A and B share no stage load: nothing to compare")
    return Comparison(
        str(a),
        str(b),
        tuple(pairs),
        tuple(k for k in sa if k not in sb),
        tuple(k for k in sb if k not in sa),
        tuple(metrics),
        seed,
        tuple(notes),
    )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def rule_text() -> str:
    """The verdict rule in words, as :func:`_judge` applies it."""
    return (
        f"better / worse when B moves from A, in its favour / against it, by more than the bar "
        f"{K:g} x spread + {100 * MIN_GAIN:g}% of A; same within it; cannot tell when a stage is invalid, "
        f"too small ({MIN_COMPLETED['p50']} completed requests for a p50 or a rate, {MIN_COMPLETED['p99']} "
        f"for a p99), ran under different SLOs, or B is within the bar but the spread is over "
        f"{100 * MAX_NOISE:g}% of A"
    )


def markdown(c: Comparison) -> str:
    lines = [f"# Compare: {c.state}", "", f"A: `{c.a}`  ", f"B: `{c.b}`", "", f"Rule: {rule_text()}.", ""]
    lines += [f"- {n}" for n in c.notes]
    if c.only_a or c.only_b:
        lines.append(f"- not compared (one side only): A {', '.join(c.only_a) or '-'}; B {', '.join(c.only_b) or '-'}")
    for p in c.pairs:
        lines += [
            "",
            f"## {p.load}: {p.verdict} ({p.method})",
            "",
            "| metric | A | B | change | bar | verdict | why |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        for ch in p.changes:
            why = ch.reason.replace("|", "\\|")
            lines.append(
                f"| {ch.metric} ({METRICS[ch.metric][1]}) | {_num(ch.a)} | {_num(ch.b)} | {_pct(ch.relative)} | "
                f"{_num(ch.bar)} | {ch.verdict} | {why} |"
            )
        if p.replicas:
            lines += ["", *(f"- {line}" for line in _replica_lines(p))]
    return "\n".join(lines) + "\n"


def html(c: Comparison) -> str:
    from replay.figures import STYLE_CSS

    tone = {NOT_WORSE: "ok", CANNOT_TELL: "unsure"}.get(c.state, "bad")
    row_class = {BETTER: "pass", SAME: "na", WORSE: "fail", CANNOT_TELL: "undecided"}
    body = [
        f'<div class="banner {tone}"><h1>Compare: {escape(c.state)}</h1></div>',
        f"<p>A: <code>{escape(c.a)}</code><br>B: <code>{escape(c.b)}</code></p>",
        f'<div class="note"><p><b>Rule.</b> {escape(rule_text())}.</p>'
        + "".join(f"<p>{escape(n)}</p>" for n in c.notes)
        + "</div>",
    ]
    for p in c.pairs:
        rows = "".join(
            f'<tr class="{row_class[ch.verdict]}"><td>{escape(ch.metric)} ({METRICS[ch.metric][1]})</td>'
            f'<td class="num">{_num(ch.a)}</td><td class="num">{_num(ch.b)}</td><td class="num">{_pct(ch.relative)}</td>'
            f'<td class="num">{_num(ch.bar)}</td><td class="word">{escape(ch.verdict)}</td><td>{escape(ch.reason)}</td></tr>'
            for ch in p.changes
        )
        body.append(
            f'<section class="stage"><h2>{escape(p.load)}: {escape(p.verdict)}</h2><p>{escape(p.method)}; '
            f"A {escape(', '.join(p.a_files))}, B {escape(', '.join(p.b_files))}</p><table><thead><tr>"
            "<th>metric</th><th>A</th><th>B</th><th>change</th><th>bar</th><th>verdict</th><th>why</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>"
            + "".join(f"<p>{escape(line)}</p>" for line in _replica_lines(p))
            + "</section>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Compare: {escape(c.state)}</title><style>{STYLE_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def print_comparison(c: Comparison, console=None) -> None:
    """One table per stage pair on the terminal, and the notes."""
    from rich.console import Console
    from rich.markup import escape as rich_escape
    from rich.table import Table

    console = console or Console()
    colour = {BETTER: "green", SAME: "default", WORSE: "red", CANNOT_TELL: "yellow"}
    for p in c.pairs:
        table = Table(title=f"{p.load}: {p.verdict} ({p.method})")
        for col in ("metric", "A", "B", "change", "bar", "verdict"):
            table.add_column(col)
        for ch in p.changes:
            table.add_row(
                f"{ch.metric} ({METRICS[ch.metric][1]})",
                _num(ch.a),
                _num(ch.b),
                _pct(ch.relative),
                _num(ch.bar),
                f"[{colour[ch.verdict]}]{ch.verdict}[/]",
            )
        console.print(table)
        for ch in p.changes:
            if ch.verdict in (WORSE, CANNOT_TELL):
                console.print(f"{p.load} {ch.metric}: {rich_escape(ch.reason)}", highlight=False)
        for line in _replica_lines(p):
            console.print(f"{p.load} {rich_escape(line)}", highlight=False)
    for n in c.notes:
        console.print(rich_escape(n), highlight=False)
    if c.only_a or c.only_b:
        console.print(
            f"not compared (one side only): A {', '.join(c.only_a) or '-'}; B {', '.join(c.only_b) or '-'}", highlight=False
        )
    console.print(f"compare: {c.state}", highlight=False)


def write(c: Comparison, out: Path) -> list[Path]:
    """compare.json, compare.md and compare.html in ``out``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.md", out / "compare.html"]
    for path, text in zip(paths, (json.dumps(c.to_json(), indent=2) + "\n", markdown(c), html(c))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return paths
