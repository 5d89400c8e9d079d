"""`replay fidelity` and `replay drift`: does a replay (or today's traffic) match live traffic?"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    from fidelity.bounds import AA_FACTOR

    p = sub.add_parser(
        "fidelity",
        help="judge a replay against live traffic: token lengths, cache hits, arrivals, sessions",
        description="Compare every stage of a `replay run` / `replay sweep` results folder with the live Trace "
        "it replayed (at the stage's own pace) and give a verdict per facet (input and output lengths, cache, "
        "arrivals, sessions, outcomes) and per stage. A stage that sent live's own requests is judged request by "
        "request (paired tests: each prompt's and answer's length, the prefix reuse each request was offered, each "
        "send against live's rescaled arrival). Every other metric passes within the larger of a fixed bound and "
        f"{AA_FACTOR:g} times the largest of its distances between two halves of the live trace (blocks of its time, "
        "whole sessions), and is 'cannot tell' where that bound is over the metric's ceiling (the live trace is "
        "too small to judge it; docs/fidelity.md). Exit 0 when every stage is faithful, 1 when one is not, 3 when "
        "none is unfaithful but one cannot be told.",
    )
    p.add_argument("live", type=Path, help="the live Trace (captured or imported, with what live traffic observed)")
    p.add_argument("results", type=Path, help="the results folder of replay run / replay sweep")
    p.add_argument("--out", type=Path, help="write fidelity.json, fidelity.md and fidelity.html (plots embedded) here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_outcome_flags(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random A/A halves (default 0)")
    p.set_defaults(func=cmd_fidelity)

    p = sub.add_parser(
        "drift",
        help="has live traffic drifted from the workload a config was tuned on?",
        description="Compare two Traces (OLD: the workload a config was tuned on, NEW: today's traffic) with the "
        "fidelity metrics. Exit 0 when NEW matches OLD, 1 when it drifted, 3 when the traces are too "
        "small to tell.",
    )
    p.add_argument("old", type=Path, help="the Trace the config was tuned on")
    p.add_argument("new", type=Path, help="the recent Trace")
    p.add_argument("--out", type=Path, help="write drift.json, drift.md and drift.html (plots embedded) here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the random A/A halves (default 0)")
    p.set_defaults(func=cmd_drift)


def add_outcome_flags(p: argparse.ArgumentParser) -> None:
    """--judge-outcomes and --aa-runs, for `replay fidelity` and for run / sweep --fidelity."""
    from replay.noise import AA_RUNS

    p.add_argument(
        "--judge-outcomes",
        action="store_true",
        help="judge TTFT / ITL / E2E too (when the target ran live's engine config at live's rate): "
        "within a band that also covers how much the replays of a stage differ among themselves "
        "(a replay A/A: record them with replay run / sweep --repeats 2); without them, the "
        "outcomes cannot be told",
    )
    p.add_argument(
        "--aa-runs",
        type=int,
        default=AA_RUNS,
        metavar="N",
        help=f"with --judge-outcomes: the replays of a stage (same load) its replay A/A needs (default {AA_RUNS})",
    )


def check_outcome_flags(args: argparse.Namespace) -> None:
    """--aa-runs: an A/A needs two replays at least."""
    from replay.errors import ConfigError

    if args.aa_runs < 2:
        raise ConfigError(f"--aa-runs: an A/A needs at least 2 replays, got {args.aa_runs}")


def _finish(args: argparse.Namespace, report) -> int:
    from fidelity.render import exit_code, print_report
    from fidelity.report_files import write_report

    if args.out:
        paths = write_report(report, args.out, html=True)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
        if args.out:
            print(f"report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return exit_code(report.state)


def cmd_fidelity(args: argparse.Namespace) -> int:
    from fidelity import compare_results

    check_outcome_flags(args)
    return _finish(
        args, compare_results(args.live, args.results, judge_outcomes=args.judge_outcomes, seed=args.seed, aa_runs=args.aa_runs)
    )


def cmd_drift(args: argparse.Namespace) -> int:
    from fidelity import drift

    return _finish(args, drift(args.old, args.new, seed=args.seed))
