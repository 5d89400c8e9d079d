"""`replay compare A B`: two results folders (or two Traces, swept first), stage by stage: better,
same, worse or cannot tell."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    from replay.ab import METRICS

    p = sub.add_parser(
        "compare",
        help="is results folder B better, the same or worse than A, stage by stage (a CI regression gate)",
        description="Pair the stages of two `replay run` / `replay sweep` results folders by load and judge "
        "each metric of B against A with the optimizer's rule: better / worse when B moves by more "
        "than 3 x the noise + 1% of A, same within that, cannot tell when a stage is invalid, too "
        "small or too noisy. The noise comes from the stage's repeats where both folders have them, "
        "else from a bootstrap over requests (which does not see run-to-run wobble). Exit 0 when "
        "nothing is worse, 1 when something is, 3 when nothing is worse but something cannot be "
        "told. A and B may also be two Traces: each is first replayed by `replay sweep` with the "
        "flags of --sweep (the same rates, target and repeats for both) into OUT/a and OUT/b.",
    )
    p.add_argument("a", type=Path, help="the reference (the baseline): a results folder, or a Trace with --sweep")
    p.add_argument("b", type=Path, help="judged against it: a results folder, or a Trace with --sweep")
    (
        p.add_argument(
            "--sweep",
            metavar="'FLAGS'",
            help="with two Traces: `replay sweep`'s flags for both, quoted as one argument, e.g. "
            "--sweep '--rates 2,4,8 --duration 30s --repeats 2 --url http://127.0.0.1:8000' "
            "(without --url both run on fresh starts of the embedded engine); results go to "
            "OUT/a and OUT/b",
        ),
    )
    p.add_argument("--metrics", default=",".join(METRICS), help=f"comma-separated, of {', '.join(METRICS)} (default: all)")
    p.add_argument(
        "--out",
        type=Path,
        help="write compare.json, compare.md and compare.html here (with two Traces, default results/compare-<A>-<B>)",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    p.set_defaults(func=cmd_compare)


def _is_results(path: Path) -> bool:
    return (path / "summary.json").is_file()


def _swept(args: argparse.Namespace) -> tuple[Path, Path] | int:
    """Two Traces replayed by `replay sweep --sweep FLAGS` into OUT/a and OUT/b: the folders, or the
    exit code that stopped a sweep (2: bad flags or target, 130: interrupted)."""
    from replay.cli import run_cmds
    from replay.cli.parser import Parser
    from replay.errors import ConfigError

    if args.sweep is None:
        first = args.a if not _is_results(args.a) else args.b
        raise ConfigError(
            f"{first}: not a results folder (no summary.json); to replay two Traces and compare "
            f"them, give the sweep's flags: --sweep '--rates 2,4,8 --duration 30s'"
        )
    if _is_results(args.a) or _is_results(args.b):
        raise ConfigError("compare: give two results folders, or two Traces with --sweep, not one of each")
    try:
        flags = shlex.split(args.sweep)
    except ValueError as e:
        raise ConfigError(f"--sweep: {e}") from None
    if any(f == "--out" or f.startswith("--out=") for f in flags):
        raise ConfigError("--sweep: --out is compare's (the sweeps go to OUT/a and OUT/b)")
    if args.out is None:
        args.out = Path("results") / f"compare-{args.a.stem}-{args.b.stem}"
    parser = Parser(prog="replay")  # `replay sweep` alone, as the command line parses it
    run_cmds.register(parser.add_subparsers(dest="command"))
    folders = []
    for name, trace in (("a", args.a), ("b", args.b)):
        sweep_args = parser.parse_args(["sweep", str(trace), *flags, "--out", str(args.out / name)])
        print(f"sweeping {name.upper()}: replay sweep {trace} {args.sweep} --out {args.out / name}", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the comparison alone (--json)
            code = sweep_args.func(sweep_args)
        if code in (2, 130):
            return code
        folders.append(args.out / name)
    return folders[0], folders[1]


def cmd_compare(args: argparse.Namespace) -> int:
    from replay.ab import compare_folders, print_comparison, write

    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    a, b = args.a, args.b
    if not (_is_results(a) and _is_results(b)) and (args.sweep is not None or a.is_file() or b.is_file()):
        swept = _swept(args)
        if isinstance(swept, int):
            return swept
        a, b = swept
    comparison = compare_folders(a, b, metrics=metrics, seed=args.seed)
    if args.out:
        paths = write(comparison, args.out)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print_comparison(comparison)
        if args.out:
            print(f"report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return comparison.exit_code
