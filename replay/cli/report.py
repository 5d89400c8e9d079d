"""Terminal output of replays: a progress bar per stage and the stage table."""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["progress_bar", "print_stages", "saturation_line", "raw_text_warning"]


class _Bar:
    def __init__(self, progress) -> None:
        self._progress = progress

    def stage(self, label: str):
        """A runner progress callback drawing one bar for this stage (None when quiet)."""
        if self._progress is None:
            return None
        task = self._progress.add_task(label, total=None, errors=0, sent=0)

        def update(sent: int, completed: int, errors: int, total: int) -> None:
            self._progress.update(task, completed=completed, total=total, sent=sent, errors=errors)

        return update


def raw_text_warning(path) -> str:
    """The one-line warning for a trace whose bodies hold raw, unredacted text."""
    return (
        f"warning: {path} holds raw request text, not redacted (redaction_policy=none: the "
        "analyzer and the second lock were both bypassed): keep it private, or redact it before sharing"
    )


@contextmanager
def progress_bar(quiet: bool = False):
    if quiet:
        yield _Bar(None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("sent {task.fields[sent]}  errors {task.fields[errors]}"),
        TimeElapsedColumn(),
    )
    console = Console(stderr=True)
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        yield _Bar(progress)


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _num(x, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _rate(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _fidelity(verdict: dict | None) -> str:
    if verdict is None:
        return "-"
    state = verdict.get("state", "faithful" if verdict["faithful"] else "unfaithful")
    return {"faithful": "faithful", "cannot tell": "[yellow]cannot tell[/yellow]"}.get(state, "[red]unfaithful[/red]")


def saturation_line(saturation: dict) -> str:
    """One line for a result's saturation (`SweepResult.to_json()["saturation"]`)."""
    from replay.sweep import Saturation

    ran_out = f"; the engine ran out of {saturation['resource']}" if saturation.get("resource") else ""
    if saturation["status"] == "saturated":
        return f"saturation: {Saturation.where(saturation)} ({saturation['reason']}{ran_out})"
    if saturation["status"] == "undetermined":
        return f"saturation: undetermined at {Saturation.where(saturation)} ({saturation['reason']}{ran_out})"
    return "saturation: not reached at these loads"


def _requested(requested_rate: float | None, concurrency: int | None) -> str:
    """The table's load column: the rate asked for, "as recorded", or a closed loop's "N users"."""
    if concurrency is not None:
        from replay.metrics import load_label

        return load_label(None, concurrency)
    return "as recorded" if requested_rate is None else f"{requested_rate:g}"


def print_stages(summary: dict) -> None:
    """The stage table and saturation line of a result's JSON (`SweepResult.to_json`)."""
    from rich.console import Console
    from rich.table import Table

    from replay.engine_metrics import describe
    from replay.fleet import replica_lines
    from replay.metrics import StageSummary, load_label

    table = Table(
        title="replay stages (req/s requested, or users of a closed loop; offered over the stage's "
        "window, achieved; ms from the intended send time, a closed loop's from the release; "
        "lag = send lag)"
    )
    # the CLI's own keys beside each stage's summary: its fidelity verdict (--fidelity LIVE)
    fidelity = [raw.get("fidelity") for raw in summary["stages"]]
    stages = [StageSummary.from_json(raw, f"summary.json stage {i + 1}") for i, raw in enumerate(summary["stages"])]
    judged = any("fidelity" in raw for raw in summary["stages"])  # replay run / sweep --fidelity LIVE
    repeated = summary.get("repeats", 1) > 1
    if repeated:
        table.add_column("repeat", justify="right")
    for col in (
        "requested",
        "offered",
        "achieved",
        "ok",
        "errors",
        "req/s",
        "tok/s",
        "TTFT p50/p99",
        "TPOT p50",
        "ITL p50",
        "E2E p50/p99",
        "lag p99",
        "goodput",
        "valid",
    ) + (("fidelity",) if judged else ()):
        table.add_column(col, justify="right")
    for s, verdict in zip(stages, fidelity):
        errors = ", ".join(f"{k} {v}" for k, v in s.errors.items()) or "0"
        ttft, e2e = s.ttft_ms["from_intended"], s.e2e_ms["from_intended"]
        table.add_row(
            *((str((s.repeat or 0) + 1),) if repeated else ()),
            _requested(s.requested_rate, s.concurrency),
            _rate(s.offered_rate),
            _rate(s.achieved_send_rate),
            str(s.completed),
            errors,
            _num(s.throughput_rps),
            _num(s.output_tokens_per_s, "{:.0f}"),
            f"{_ms(ttft['p50'])}/{_ms(ttft['p99'])}",
            _ms(s.tpot_ms["p50"]),
            _ms(s.itl_ms["p50"]),
            f"{_ms(e2e['p50'])}/{_ms(e2e['p99'])}",
            _ms(s.send_lag_ms["p99"]),
            _num(s.goodput_rps),
            "yes" if s.valid else "[red]NO[/red]",
            *((_fidelity(verdict),) if judged else ()),
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and pipes: one line per stage
    console.print(table)
    for s, verdict in zip(stages, fidelity):
        at = load_label(s.requested_rate, s.concurrency)
        at = at if at == "as recorded" else f"at {at}"
        if repeated:
            at += f" (repeat {(s.repeat or 0) + 1})"
        for k, why in enumerate(s.discarded_attempts, 1):
            console.print(f"attempt {k} {at} discarded (--retry-invalid), run again: {why}", highlight=False)
        if s.invalid_reason:
            console.print(f"invalid {at}: {s.invalid_reason}", highlight=False)
        if s.cut_off:
            console.print(f"cut off {at}: {s.cut_off} requests still open when the drain ended", highlight=False)
        if verdict and verdict["failed"]:
            console.print(f"unfaithful {at}: {', '.join(verdict['failed'])}", highlight=False, markup=False)
        elif verdict and not verdict["faithful"]:
            console.print(f"{verdict['reason']} ({at})", highlight=False, markup=False)
        if s.engine_metrics:
            console.print(f"{at}: {describe(s.engine_metrics)}", highlight=False, markup=False)
        for line in replica_lines(s.replicas):
            console.print(f"{at}: {line}", highlight=False, markup=False)
    if repeated:
        console.print(_repeats_table(summary))
    console.print(saturation_line(summary["saturation"]), highlight=False)
    if repeated and summary.get("interval"):
        from replay.sweep import HeldInterval

        console.print(HeldInterval.line(summary["interval"]), highlight=False)


def _repeats_table(summary: dict):
    """Each load's median +- spread over its valid repeats (`SweepResult.to_json()["by_load"]`)."""
    from rich.table import Table

    from replay.sweep import REPEAT_METRICS

    table = Table(
        title=f"over {summary['repeats']} repeats: median +- spread of the valid runs (spread: "
        f"replay.noise.NoiseFloor, as replay compare and the optimizer count it)"
    )
    for col in ("requested", "valid", *REPEAT_METRICS):
        table.add_column(col, justify="right")
    for row in summary["by_load"]:
        cells = []
        for name, (_, fmt) in REPEAT_METRICS.items():
            m = row["metrics"][name]
            cells.append("-" if m is None else f"{fmt.format(m['median'])} +- {fmt.format(m['spread'])}")
        valid = f"{row['valid']} of {row['runs']}"
        valid = valid if row["valid"] == row["runs"] else f"[red]{valid}[/red]"
        table.add_row(_requested(row["requested_rate"], row["concurrency"]), valid, *cells)
    return table
