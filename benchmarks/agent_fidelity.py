"""Does the fidelity report tell a replay that keeps an agent trace's graph from one that does not?

Issue [14] asks: on an agentic trace, a replay that ignores the edges (a plain replay of the
recorded times, as peers' trace replay does: AIPerf's and vLLM's ``bench serve`` trace modes
send each request at its timestamp) is judged unfaithful, naming the metrics, and the
``--sessions dag`` replay of the same trace is judged faithful.

``replay.agentic.generate_agentic`` makes coding-agent sessions (steps with parallel tool calls
and tool waits, subagents that fan out and join back; contexts to ``--max-context``); the
embedded engine replays them twice at ``--speedup`` times the recorded pace, its modelled time
run as fast (``time_scale`` 1/speedup), with ``--sessions open`` and with ``--sessions dag``
(the engine's answers spliced into every dependent's history, its tool calls following the
trace's: ``x-replay-tool-calls``), and ``fidelity.compare_stage`` judges each against the trace.
Printed per mode: the verdict, the facets and the metric that decided each, the metrics that
failed and their distances, the share of dependent requests sent before a dependency ended, the
errors, the stage's wall time; and the peak RSS of this process (``ru_maxrss``: generation,
replays and judging).

    python benchmarks/agent_fidelity.py [--sessions 16] [--max-context 40000] [--speedup 10] [--seed 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fidelity import compare_stage  # noqa: E402
from replay.agentic import AgentConfig, generate_agentic  # noqa: E402
from replay.config import RunConfig  # noqa: E402
from replay.runner import run_stage  # noqa: E402
from replay.sim import SimConfig, embedded_profile, start_sim  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=16, help="root agent sessions")
    ap.add_argument("--max-context", type=int, default=40_000, help="largest prompt + answer, tokens")
    ap.add_argument("--speedup", type=float, default=10.0, help="times the recorded pace")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    config = AgentConfig(
        sessions=args.sessions,
        steps_mean=8,
        result_tokens_p50=2_000,
        max_result_tokens=8_000,
        max_context_tokens=args.max_context,
        session_rate=0.5,
        seed=args.seed,
    )
    trace = generate_agentic(config)
    longest = int((trace.df["input_tokens"] + trace.df["output_tokens"]).max())
    sessions = trace.df["session_id"].n_unique()
    print(f"agent trace: {len(trace)} requests in {sessions} sessions ({args.sessions} root), longest {longest:,} tokens")
    sim = SimConfig(profile=embedded_profile(longest), time_scale=1 / args.speedup)
    verdicts = {}
    with start_sim(sim) as engine:
        # a send-lag bound a shared 2-CPU machine keeps (the default, 1 ms, wants a quiet one)
        base = RunConfig(url=engine.url, speedup=args.speedup, lag_bound_ms=50)
        for mode in ("open", "dag"):
            t0 = time.perf_counter()
            stage = run_stage(trace, dataclasses.replace(base, sessions=mode))
            wall = time.perf_counter() - t0
            verdict = compare_stage(trace, stage.requests, lag_bound_ms=base.lag_bound_ms).verdict
            verdicts[mode] = verdict
            by = {m.name: m for m in verdict.metrics}
            errors = sum(stage.summary.errors.values())
            done = f"{stage.summary.completed}/{stage.summary.requests} completed, {errors} errors, {wall:.1f} s"
            print(f"\n--sessions {mode}: {verdict.state.upper()}  ({done})")
            early = by["sessions.dag.early"]
            print(f"  sent before a dependency ended: {early.replay:.1%} of the dependent requests ({early.state})")
            for facet in verdict.facets:
                print(f"  facet {facet.name:15s} {facet.state:12s} {', '.join(facet.decided_by)}")
            for m in verdict.failed:
                print(f"  failed {m.name}: {m.distance:.4g} over the bound {m.bound:.4g}")
    ok = verdicts["open"].state == "unfaithful" and verdicts["dag"].state == "faithful"
    states = f"open judged {verdicts['open'].state}, dag judged {verdicts['dag'].state}"
    print(f"\n{states}: {'as' if ok else 'NOT as'} issue [14] asks")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
