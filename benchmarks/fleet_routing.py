"""Which routing policy serves a multi-turn trace best over a fleet? Each policy of
`replay_core::route` (docs/fleets.md), side by side over the same schedule and fresh replicas.

Setup: `--replicas` embedded engines (replay.sim, profile a100-80g/llama-3.1-8b, `--time-scale`
of real time, `--gpu-memory-utilization` of the GPU each, leaving a KV cache small enough that sessions'
histories compete for it), started fresh
for every policy so each starts with empty caches; one generated trace (`replay generate`:
`--requests` requests in sessions of 4 turns on average, each resending its history, over 8 shared
system prompts of ~600 tokens) replayed open-loop at `--rate` req/s (constant arrivals). Per
policy: the engine-reported cache hit (cached over prompt tokens from the usage of each answer),
TTFT p50 / p99 and E2E p50 from the intended send (ms of wall time: modelled time x the time
scale), the largest replica's share of the requests and the imbalance flag, the send lag p99, and
the ratio of cache hit and TTFT p50 against round-robin; the process's peak RSS. Not a pass/fail
test; the engines' modelled times do not move with the machine's load, the send lag does.

With `--runner-cost RATE`: what routing costs the sender instead. Two nginx replicas
(tests/integration/nginx.py `start_static_sse`: every POST answered at once with a static 21-event
SSE stream) and one generated trace of `--requests` requests with stored bodies and block hashes,
replayed at RATE req/s (constant arrivals) against one of them alone, then against both under
each policy, `--rounds` times in turn: send lag p50 / p99 / max, achieved rate, and the p99 lag
against the single target's of the same round.

usage: python benchmarks/fleet_routing.py [--replicas 4] [--requests 400] [--rate 8]
                                          [--time-scale 0.1] [--gpu-memory-utilization 0.25]
       python benchmarks/fleet_routing.py --runner-cost 2000 [--requests 6000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.config import Arrivals, RunConfig  # noqa: E402
from replay.fleet import ROUTES, Target  # noqa: E402
from replay.generate import GenerateConfig, generate  # noqa: E402
from replay.runner import run_stage  # noqa: E402
from replay.sim import start_sim  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.25)
    p.add_argument("--runner-cost", type=float, metavar="RATE", help="measure the sender's cost of routing instead")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    if args.runner_cost:
        return runner_cost(args.runner_cost, args.requests if args.requests != 400 else 6000, args.rounds)
    trace = generate(
        GenerateConfig(
            n_requests=args.requests,
            rate=args.rate,
            turns_mean=4.0,
            think_time_mean_s=5.0,
            n_system_prompts=8,
            system_prompt_tokens=600,
            user_tokens_p50=150,
            output_tokens_p50=60,
            max_output_tokens=256,
            seed=7,
        )
    )
    print(
        f"{args.replicas} embedded replicas (time scale {args.time_scale}, "
        f"gpu_memory_utilization {args.gpu_memory_utilization} each), "
        f"{args.requests} requests at {args.rate:g} req/s (constant arrivals); 2-core shared machine"
    )
    print("| route | cache hit | TTFT p50 / p99 ms | E2E p50 ms | largest share | imbalance | lag p99 ms", end="")
    print(" | hit x rr | TTFT p50 x rr | s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    base = None
    for route in ROUTES:
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(
                    start_sim(
                        time_scale=args.time_scale,
                        gpu_memory_utilization=args.gpu_memory_utilization,
                        max_model_len=8192,
                        max_num_seqs=64,
                    )
                )
                for _ in range(args.replicas)
            ]
            targets = tuple(Target(f"r{i}", s.url) for i, s in enumerate(servers))
            config = RunConfig(
                url=targets[0].url,
                targets=targets,
                route=route,
                rate=args.rate,
                arrivals=Arrivals(kind="constant"),
                sessions="open",
                metrics_url="none",
                lag_bound_ms=5.0,
            )
            started = time.monotonic()
            s = run_stage(trace, config).summary
            took = time.monotonic() - started
        rows = s.replicas["rows"] if s.replicas else []
        hit = s.cache_hit_rate or 0.0
        ttft = s.ttft_ms["from_intended"]
        if base is None:
            base = (hit, ttft["p50"])
        print(
            f"| {route} | {hit:.1%} | {ttft['p50']:.1f} / {ttft['p99']:.1f} | {s.e2e_ms['from_intended']['p50']:.1f} | "
            f"{max((r['share'] for r in rows), default=1.0):.0%} | {(s.replicas or {}).get('imbalance') or '-'} | "
            f"{s.send_lag_ms['p99']:.3f} | {hit / base[0] if base[0] else float('nan'):.2f} | "
            f"{ttft['p50'] / base[1] if base[1] else float('nan'):.2f} | {took:.1f} |"
        )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def runner_cost(rate: float, n: int, rounds: int) -> None:
    import tempfile

    from tests.integration.nginx import start_static_sse

    trace = generate(GenerateConfig(n_requests=n, rate=rate, seed=7, output_tokens_p50=20, max_output_tokens=64))
    print(f"two nginx replicas (static SSE), {n} generated requests (stored bodies) at {rate:g} req/s; 2-core shared machine")
    print("| round | targets | route | achieved req/s | lag p50 / p99 / max ms | p99 x one target | largest share |")
    print("|---:|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        servers = [start_static_sse(Path(tmp) / f"nginx{i}") for i in range(2)]
        try:
            targets = tuple(Target(f"n{i}", s.http_url) for i, s in enumerate(servers))
            for k in range(rounds):
                one = None
                for route in (None, *ROUTES):
                    fleet = {} if route is None else {"targets": targets, "route": route}
                    config = RunConfig(
                        url=targets[0].url,
                        rate=rate,
                        arrivals=Arrivals(kind="constant"),
                        metrics_url="none",
                        chunk_times=False,
                        timeout_s=30.0,
                        **fleet,
                    )
                    s = run_stage(trace, config, model="m").summary
                    lag = s.send_lag_ms
                    one = lag["p99"] if route is None else one
                    share = max((r["share"] for r in (s.replicas or {}).get("rows", [])), default=1.0)
                    print(
                        f"| {k + 1} | {1 if route is None else 2} | {route or '-'} | {s.achieved_send_rate:.0f} | "
                        f"{lag['p50']:.3f} / {lag['p99']:.3f} / {lag['max']:.3f} | {lag['p99'] / one:.2f} | {share:.0%} |"
                    )
        finally:
            for s in servers:
                s.stop()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
