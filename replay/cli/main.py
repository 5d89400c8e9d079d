"""The `replay` command: one entry point, one subcommand per job, a thin layer over the library.

Each command group lives in its own file and imports what it needs lazily, so `replay --help`
starts fast. `main()` turns a ReplayError into `error: <message>` on stderr and its exit code
(2 for bad input); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys

from replay.cli.parser import Parser
from replay.errors import ReplayError

__all__ = ["main", "build_parser"]

EPILOG = """\
examples:
  replay generate -o work.parquet --requests 500
  replay import azure ../shared/data/traces/azure_llm_2023_conv.csv -o azure.parquet
  replay inspect work.parquet
  replay run work.parquet --url http://127.0.0.1:8000 --rate 4 --requests 200
  replay sweep work.parquet --url http://127.0.0.1:8000 --rates 1,2,4,8 --slo ttft=2s,tpot=100ms
  replay sweep work.parquet --rates auto:5 --duration 30s
  replay fidelity live.parquet results/live-sweep --out report/
  replay compare results/before results/after --out compare/
  replay capture --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8080 --out capture/
"""


def build_parser() -> argparse.ArgumentParser:
    from replay.cli import (
        audit_cmds,
        capture_cmds,
        compare_cmds,
        engine_cmds,
        fidelity_cmds,
        optimize_cmds,
        run_cmds,
        shards_cmds,
        sim_cmds,
        trace_cmds,
    )

    parser = Parser(
        prog="replay",
        description="Replay real LLM-serving traffic open-loop against an OpenAI-compatible server.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    trace_cmds.register(sub)
    run_cmds.register(sub)
    shards_cmds.register(sub)
    fidelity_cmds.register(sub)
    compare_cmds.register(sub)
    optimize_cmds.register(sub)
    sim_cmds.register(sub)
    engine_cmds.register(sub)
    capture_cmds.register(sub)
    audit_cmds.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ReplayError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`replay ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
