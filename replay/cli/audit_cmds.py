"""`replay audit`: which strings of a stored trace still have a PII shape (never their values)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="scan a Trace for strings that still have a PII shape (exit 1 when any)",
        description="Runs the redaction's second lock (a fast scan for email, phone, card, IBAN, API key, "
        "JWT, private key and IP shapes) over every string the trace stores: each body's JSON "
        "strings, the responses and the other string columns, a row batch at a time. Hits "
        "whose exact string is a surrogate the redaction wrote (the trace's lock_exempt) are "
        "skipped. Prints per type how many strings have a PII shape and the request ids of "
        "their rows, never the values. Exit 1 when anything is found, 0 when clean, 2 on bad "
        "input. --deep also runs the full analyzer (Presidio with spaCy) over the prompt texts "
        "and responses, each distinct text once; names and places a redaction wrote are "
        "surrogates that --deep cannot tell from raw ones unless their strings are in the "
        "trace's lock_exempt.",
    )
    p.add_argument("trace", type=Path, help="a Trace: a Parquet file or a `replay capture` folder")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also run the full analyzer over prompt texts and responses (slow: tens of distinct texts a second)",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    from redact.audit import audit_trace

    if args.quiet:
        result = audit_trace(args.trace, deep=args.deep)
    else:
        from rich.console import Console
        from rich.progress import Progress

        console = Console(stderr=True)
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task(f"auditing {args.trace.name}", total=None)
            result = audit_trace(
                args.trace, deep=args.deep, progress=lambda done, total: bar.update(task, completed=done, total=total)
            )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.summary())
    return 0 if result.clean else 1
