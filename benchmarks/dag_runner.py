"""Does the runner hold its schedule with DAG gating? An agentic trace against nginx, replayed
with ``--sessions dag`` beside the same trace replayed without gating (``--sessions open``).

Issue [14]: "The runner holds its send-lag bound with DAG gating as it does without it". Under
``dag`` a request is released when its dependencies have ended plus its wait (the Rust dispatcher
parks it until then), and its send lag is measured from that release; so gating costs the
dispatcher the ends it must hear of and the parked requests it must release on time.

Server: nginx (Debian's; ``apt-get install nginx-light`` first when it is missing and this runs as
root), one worker answering every POST /v1/chat/completions at once with a static 21-event SSE
chat stream (tests/integration/nginx.py ``start_static_sse``), on 127.0.0.1, on the machine's
cores beside the sender.

Trace: ``replay.agentic.generate_agentic`` coding-agent sessions (``--sessions`` of them, 10
steps on average, 1-8 parallel calls, subagents on 6% of the steps; tools, system prompt and tool
results made small, so a body is a few KB, about a chat request's size, and the sender, not the
body bytes, is what is measured). A stage offers rate R (``RunConfig(rate=R)``: the trace's
arrivals compressed to R; its waits compressed alike) for ``--seconds`` (at most the trace's
requests).

Modes: ``open`` (no gating), ``dag`` (gating, ``--answers recorded``: the bodies as stored) and
``dag+answers`` (gating with ``--answers engine``, the default: each history carries the answers
the target streamed, so the body builder also finds the answers' spans in every body).

Printed per mode and rate: achieved send rate, send lag p50 / p99 / max, answered; then the
highest rate held (this rate and every lower one: lag p99 within the bound and >= 95% of the
offered rate achieved) at 1 and 2 ms per mode, the share of requests the graph held back (slip >
1 ms) at that rate, and the process's peak RSS. Not a pass/fail test.

    python benchmarks/dag_runner.py [--rates 250,500,1000,2000,4000] [--seconds 3] [--sessions 2000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.runner_accuracy import ensure_nginx, held, sweep_rates  # noqa: E402
from tests.integration.nginx import start_static_sse  # noqa: E402


def agent_trace(sessions: int):
    from replay.agentic import AgentConfig, generate_agentic

    config = AgentConfig(
        sessions=sessions,
        steps_mean=10,
        session_rate=50.0,
        system_tokens=300,
        tool_tokens=40,
        subagent_system_tokens=200,
        task_tokens_p50=60,
        content_tokens_p50=40,
        argument_tokens_p50=20,
        result_tokens_p50=120,
        answer_tokens_p50=60,
        max_result_tokens=600,
        max_context_tokens=6_000,
        seed=11,
    )
    return generate_agentic(config)


# the modes compared: no gating; gating with the bodies as recorded; gating with each request's
# history carrying the answers the target streamed (--answers engine, the default), which costs the
# body builder a search for the answers' spans in every body
MODES = {"open": ("open", "recorded"), "dag": ("dag", "recorded"), "dag+answers": ("dag", "engine")}


def run(trace, url: str, mode: str, rate: float, n: int) -> dict:
    from replay.config import RunConfig
    from replay.runner import run_stage

    sessions, answers = MODES[mode]
    config = RunConfig(
        url=url,
        rate=rate,
        requests=n,
        metrics_url="none",
        timeout_s=30.0,
        chunk_times=False,
        sessions=sessions,  # type: ignore[arg-type]
        answers=answers,  # type: ignore[arg-type]
    )
    result = run_stage(trace, config, model="m")
    s, df = result.summary, result.requests
    slipped = ((df["release_ns"] - df["intended_ns"]) > 1_000_000).mean()
    return {
        "achieved": s.achieved_send_rate or float("nan"),
        "lag_p50_ms": s.send_lag_ms["p50"],
        "lag_p99_ms": s.send_lag_ms["p99"],
        "lag_max_ms": s.send_lag_ms["max"],
        "ok": s.completed,
        "n": n,
        "why": (
            f"  held back by the graph {slipped:.0%}, after a failed dependency {s.after_failed_dependency}; "
            f"dispatcher preempted {result.runner['dispatcher_switches']['involuntary']}x, "
            f"waited for bodies {result.runner['body_waits']}x (max {result.runner['body_wait_max_ms']:.1f} ms)"
        ),
        "slipped": float(slipped or 0.0),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="250,500,1000,2000,4000")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--sessions", type=int, default=2000, help="root agent sessions in the trace")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    ensure_nginx()
    started = time.perf_counter()
    trace = agent_trace(args.sessions)
    print(
        f"trace: {len(trace):,} requests, {int((trace.df['depends_on'].list.len() > 0).sum()):,} with dependencies, "
        f"made in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        nginx = start_static_sse(Path(tmp) / "nginx")
        try:
            for mode in MODES:
                results[mode] = sweep_rates(
                    f"{mode}", rates, args.seconds, len(trace), lambda r, n, m=mode: run(trace, nginx.http_url, m, r, n)
                )
        finally:
            nginx.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'mode':12} {'held at 1 ms':>13} {'held at 2 ms':>13} {'held back there':>16}")
    for mode, rows in results.items():
        at1, at2 = held(rows, 1.0), held(rows, 2.0)
        back = next((r["slipped"] for r in rows if r["rate"] == at2), float("nan"))
        print(f"{mode:12} {at1:>9.0f} req/s {at2:>9.0f} req/s {back:>15.0%}")
    print(f"peak RSS {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
