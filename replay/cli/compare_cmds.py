"""`replay compare A B`: two results folders, stage by stage: better, same, worse or cannot tell."""

from __future__ import annotations

import argparse
import json
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
                    "told.",
    )
    p.add_argument("a", type=Path, help="the reference results folder (the baseline)")
    p.add_argument("b", type=Path, help="the results folder judged against it")
    p.add_argument("--metrics", default=",".join(METRICS),
                   help=f"comma-separated, of {', '.join(METRICS)} (default: all)")
    p.add_argument("--out", type=Path, help="write compare.json, compare.md and compare.html here")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from replay.ab import compare_folders, print_comparison, write

    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    comparison = compare_folders(args.a, args.b, metrics=metrics, seed=args.seed)
    if args.out:
        paths = write(comparison, args.out)
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2))
    else:
        print_comparison(comparison)
        if args.out:
            print(f"report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return comparison.exit_code
