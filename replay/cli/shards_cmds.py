"""`replay shards merge`: the results folders of one replay's shards (one per pod) as one folder."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "shards",
        help="merge the shards of one replay run without Ray (a Kubernetes Indexed Job)",
        description="One replay split over pods: each pod runs `replay run ... --shard I/N --start-at T "
        "--out DIR/shard-I`; `replay shards merge` merges their folders into one results folder of a "
        "single run's shape (a shard column, times from the one start instant), which fidelity, compare "
        "and optimize read. docs/sharding.md says what the driver does.",
    )
    what = p.add_subparsers(dest="shards_command", required=True)
    m = what.add_parser(
        "merge",
        help="merge the shard folders into one results folder",
        description="Merge the results folders of shards 0..N-1 (each from `replay run --shard I/N "
        "--start-at T`) into --out. Every shard must be there. A shard whose pod died mid-stage keeps the "
        "rows it wrote and marks its shard, and so the stage, invalid. The pods' clocks are trusted as "
        "their nodes keep them (NTP): no offset is measured without a driver.",
    )
    m.add_argument("folders", type=Path, nargs="+", help="the shard folders (their summary.json says which shard each is)")
    m.add_argument("--out", type=Path, required=True, help="the merged results folder")
    m.add_argument("--json", action="store_true", help="print the merged summary as JSON on stdout")
    m.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from replay.cli.report import print_stages
    from replay.shards import merge_folders

    summary = merge_folders(args.folders, args.out)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_stages(summary)
        print(f"results: {args.out}", file=sys.stderr)
    return 0
