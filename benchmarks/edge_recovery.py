"""Edge recovery: does the log importer find what waits for what in agent traffic?

Issue [14] asks for precision and recall >= 0.99 of the dependencies (``depends_on``) that
``replay import openai`` (and the recording proxy, which runs the same linker:
``capture/importers/linker.py``) recovers from requests alone, on traffic whose edges are known.

For each seed, ``replay.agentic.generate_agentic`` makes coding-agent sessions (chains of steps
with parallel tool calls, subagents that fan out from a step and join back into the next); the
trace is written as an OpenAI request log the way a gateway logs it: each line the request body
as sent, its arrival (``timestamp``, epoch seconds), its latency (``latency_ms``) and the
``chat.completion`` it got (the answer's text and tool calls: ``replay.agentic.answer_messages``),
with no session ids. That log is imported (``capture.importers.import_log``, raw text) and every
recovered (request, dependency) pair is held against the generator's. Printed per seed and in
all: precision and recall of the pairs, recall by kind (a step's previous step: ``chain``; a
subagent's last request joined back: ``join``; a subagent's first request and the step that
called it: ``spawn``), subagent sessions whose ``parent_session_id`` was found, the largest
``wait_us`` error over pairs found, and the import's wall time and peak RSS (``ru_maxrss`` of this
process, which also generated the traces).

    python benchmarks/edge_recovery.py [--seeds 3] [--sessions 20] [--steps 20] [--max-context 60000]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capture.importers import import_log  # noqa: E402
from replay.agentic import AgentConfig, answer_messages, generate_agentic  # noqa: E402
from replay.trace import read_trace  # noqa: E402

T0_S = 1_767_000_000.0


def write_log(trace, path: Path) -> None:
    answers = answer_messages(trace)
    with path.open("w") as f:
        for row in trace.df.iter_rows(named=True):
            message = answers[row["request_id"]]
            line = {
                "request_id": row["request_id"],
                "timestamp": T0_S + row["arrival_us"] / 1e6,
                "latency_ms": row["e2e_us"] / 1e3,
                "body": json.loads(row["body"]),
                "response": {
                    "id": row["request_id"],
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": row["input_tokens"], "completion_tokens": row["output_tokens"]},
                },
            }
            f.write(json.dumps(line) + "\n")


def edges(df) -> dict[tuple[str, str], str]:
    """(request, dependency) -> its kind."""
    session = dict(zip(df["request_id"], df["session_id"]))
    out = {}
    for rid, deps, turn in df.select("request_id", "depends_on", "turn").iter_rows():
        for d in deps:
            kind = "chain" if session[d] == session[rid] else "spawn" if turn == 0 else "join"
            out[(rid, d)] = kind
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--sessions", type=int, default=20, help="root agent sessions a seed")
    p.add_argument("--steps", type=float, default=20.0, help="mean steps a root session")
    p.add_argument("--max-context", type=int, default=60_000)
    p.add_argument("--subagent-p", type=float, default=0.15, help="chance a root step spawns subagents")
    args = p.parse_args()
    totals = {"truth": 0, "found": 0, "right": 0}
    by_kind: dict[str, list[int]] = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            cfg = AgentConfig(
                sessions=args.sessions,
                steps_mean=args.steps,
                max_context_tokens=args.max_context,
                subagent_p=args.subagent_p,
                session_rate=0.5,
                seed=seed,
            )
            truth_trace = generate_agentic(cfg)
            log = Path(tmp) / f"agent-{seed}.jsonl"
            write_log(truth_trace, log)
            started = time.perf_counter()
            import_log("openai", log, Path(tmp) / f"agent-{seed}.parquet")
            took = time.perf_counter() - started
            got_df = read_trace(Path(tmp) / f"agent-{seed}.parquet").df
            truth, got = edges(truth_trace.df), edges(got_df)
            right = set(truth) & set(got)
            for pair, kind in truth.items():
                seen = by_kind.setdefault(kind, [0, 0])
                seen[0] += 1
                seen[1] += pair in got
            subs = truth_trace.df.filter(truth_trace.df["parent_session_id"].is_not_null())
            # the imported sessions are named by their first request's id
            first = subs.filter(subs["turn"] == 0)["request_id"].to_list()
            found = got_df.filter(got_df["request_id"].is_in(first))["parent_session_id"].is_not_null().sum()
            wait_true = dict(zip(truth_trace.df["request_id"], truth_trace.df["wait_us"]))
            errors = [
                abs(w - wait_true[r])
                for r, w in zip(got_df["request_id"], got_df["wait_us"])
                if w is not None and wait_true[r] is not None
            ]
            rows.append(
                (
                    seed,
                    len(truth_trace),
                    len(truth),
                    len(got),
                    len(right) / len(got) if got else float("nan"),
                    len(right) / len(truth) if truth else float("nan"),
                    f"{found}/{len(first)}",
                    max(errors, default=0),
                    took,
                )
            )
            totals["truth"] += len(truth)
            totals["found"] += len(got)
            totals["right"] += len(right)
    head = ("seed", "requests", "edges", "found", "precision", "recall", "subagents", "wait err us", "import s")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (4, 8, 6, 6, 9, 7, 9, 11, 8))))
    for seed, n, t, g, prec, rec, subs_found, err, took in rows:
        print(f"{seed:>4} {n:>8} {t:>6} {g:>6} {prec:>9.4f} {rec:>7.4f} {subs_found:>9} {err:>11} {took:>8.2f}")
    precision = totals["right"] / totals["found"] if totals["found"] else float("nan")
    recall = totals["right"] / totals["truth"] if totals["truth"] else float("nan")
    kinds = "  ".join(f"{k} {v[1]}/{v[0]}" for k, v in sorted(by_kind.items()))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"all: precision {precision:.4f}  recall {recall:.4f}  (recall by kind: {kinds});  peak RSS {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
