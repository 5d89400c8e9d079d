"""An agent workload end to end, as a library: generate, inspect, replay by dependency, judge.

1. ``replay.agentic`` makes coding-agent sessions: steps with parallel tool calls and tool waits,
   subagents that fan out from a step and join back into the next (schema 3 ``depends_on``).
2. ``replay.dag.shape`` says what the graph looks like (what ``replay inspect`` prints).
3. The embedded engine (its 256k profile when the trace's contexts outgrow the 128k default:
   ``replay.sim.embedded_profile``), run twice as slow as the engine the trace recorded (as a
   config under test may be), serves two replays at 10x the recorded pace: ``--sessions dag``
   (each request waits for its dependencies' ends plus its recorded wait) and ``open`` (the
   recorded times only, as peers' trace replay does: a request leaves before the answer it
   carries was given, whenever the engine is slower than live's).
4. ``fidelity.compare_stage`` judges both against the trace: the graph's metrics
   (``sessions.dag.early``: requests sent before a dependency ended; ``sessions.dag.wait.ks``)
   pass under ``dag`` and fail under ``open``.

    python examples/agent_workload.py     # about 30 s on 2 CPUs

``main(sessions, max_context)`` makes a smaller workload (the test runs it that way); with the
defaults the contexts pass 128k tokens.
"""

from __future__ import annotations

import dataclasses

from fidelity import compare_stage
from replay.agentic import AgentConfig, generate_agentic
from replay.config import RunConfig
from replay.dag import shape
from replay.runner import run_stage
from replay.sim import SimConfig, embedded_profile, start_sim

SPEEDUP = 10.0
SLOWER = 2.0  # the replay's engine against the recorded one


def main(sessions: int = 2, max_context: int = 200_000) -> dict:
    # large tool results (file dumps, logs) take the contexts past 128k within a few steps
    config = AgentConfig(
        sessions=sessions,
        steps_mean=6,
        result_tokens_p50=12_000 if max_context > 100_000 else 2_000,
        max_result_tokens=40_000,
        max_context_tokens=max_context,
        session_rate=0.5,
        seed=3,
    )
    trace = generate_agentic(config)
    graph = shape(trace.df)
    assert graph is not None
    print(
        f"{len(trace)} requests in {graph['sessions']} sessions ({graph['root_sessions']} root), "
        f"{graph['joins']} joins, critical path {graph['critical_path_requests']} requests, "
        f"longest prompt {trace.df['input_tokens'].max():,} tokens"
    )
    longest = int((trace.df["input_tokens"] + trace.df["output_tokens"]).max())
    # the engine's modelled time runs as fast as the replay's (10x), so durations scale with waits,
    # and twice as slow again
    sim = SimConfig(profile=embedded_profile(longest), time_scale=SLOWER / SPEEDUP)
    out: dict = {"requests": len(trace), "profile": sim.profile}
    with start_sim(sim) as engine:
        # a send-lag bound a shared 2-CPU machine keeps (the default, 1 ms, wants a quiet one)
        base = RunConfig(url=engine.url, speedup=SPEEDUP, lag_bound_ms=50)
        for mode in ("dag", "open"):
            stage = run_stage(trace, dataclasses.replace(base, sessions=mode))
            verdict = compare_stage(trace, stage.requests, lag_bound_ms=base.lag_bound_ms).verdict
            early = next(m for m in verdict.metrics if m.name == "sessions.dag.early")
            failed = sorted(m.name for m in verdict.failed)
            errors = sum(stage.summary.errors.values())
            print(
                f"--sessions {mode}: {stage.summary.completed}/{stage.summary.requests} completed, {errors} errors; "
                f"sent before a dependency ended: {early.replay:.0%} ({early.state}); verdict {verdict.state}"
                + (f" (failed: {', '.join(failed)})" if failed else "")
            )
            out[mode] = {"early": early.replay, "early_state": early.state, "errors": errors, "failed": failed}
    return out


if __name__ == "__main__":
    main()
