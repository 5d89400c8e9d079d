"""One trace on a local Ray cluster, on one clock: 1, 2 and 4 shards against the Rust peer server.

A local cluster (tests/ray_cluster.py: ``ray start --head`` plus worker nodes joined to it, all on
this machine) runs each stage as N shards (replay.shards.RayShards): the trace split by whole
session, one actor per shard, one start instant. The target is sse-bench-server (this workspace's
rust/sse-server, 20 chunks a response; built when missing), as in benchmarks/runner_accuracy.py.
The peer run beside it is one runner in this process (replay.runner.run_plan, no Ray) on the same
plan: the ratio column is the sharded aggregate achieved rate over the peer's.

Printed per shard count: offered and achieved aggregate rate, the stage's validity, per shard
its send lag p50 / p99, its start lag and its clock offset (and uncertainty) to the driver; peak
RSS of the driver and of each actor. Every shard and the server share this machine's cores, so
more shards do not add CPU here: the figures show the mechanism and its cost, not a cluster's
capacity (docs/sharding.md projects that from the per-shard figure).

    python benchmarks/sharded_replay.py [--rate 2000] [--duration 5] [--shards 1,2,4] [--nodes 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.config import Arrivals, RunConfig  # noqa: E402
from replay.generate import GenerateConfig, generate  # noqa: E402
from replay.plan import build_plan  # noqa: E402
from replay.runner import run_plan  # noqa: E402
from replay.shards import RayShards  # noqa: E402
from tests.ray_cluster import LocalCluster  # noqa: E402

SERVER = ROOT / "target" / "release" / "sse-bench-server"


def start_server() -> tuple[subprocess.Popen, str]:
    """sse-bench-server (built when missing) on a free port, one thread; (process, base URL)."""
    if not SERVER.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "sse-bench-server"], cwd=ROOT, check=True)
    proc = subprocess.Popen([str(SERVER), "--port", "0", "--chunks", "20", "--threads", "1"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    return proc, "http://" + line.rsplit(" ", 1)[-1]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2000.0, help="aggregate req/s of each stage (default 2000)")
    ap.add_argument("--duration", type=float, default=5.0, help="each stage's window in s (default 5)")
    ap.add_argument("--shards", default="1,2,4", help="shard counts to run (default 1,2,4)")
    ap.add_argument("--nodes", type=int, default=2, help="nodes of the local cluster (head + workers, default 2)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args()
    counts = [int(x) for x in args.shards.split(",")]

    n = int(args.rate * args.duration) + 1
    started = time.monotonic()
    trace = generate(GenerateConfig(n_requests=n, seed=1, rate=args.rate, model="bench", output_tokens_p50=20))
    print(f"trace: {n} generated requests (stored bodies) in {time.monotonic() - started:.0f}s", file=sys.stderr)
    server, url = start_server()
    rows: list[dict] = []
    try:
        config = RunConfig(
            url=url,
            rate=args.rate,
            duration_s=args.duration,
            arrivals=Arrivals(kind="constant"),
            metrics_url="none",
            sessions="open",
        )
        peer = run_plan(build_plan(trace, config, model="bench"), config).summary
        print(
            f"peer (one runner, no Ray): offered {peer.offered_rate:.0f} req/s, achieved {fmt(peer.achieved_send_rate, 0)}, "
            f"send lag p50 {fmt(peer.send_lag_ms['p50'], 3)} / p99 {fmt(peer.send_lag_ms['p99'], 3)} ms, "
            f"valid {peer.valid}, driver peak RSS {rss_mb():.0f} MB"
        )
        with LocalCluster(workers=args.nodes - 1, cpus=4) as cluster:
            for k in counts:
                with RayShards(k, cluster.address) as shards:
                    t = time.monotonic()
                    merged = shards(build_plan(trace, config, model="bench"), config)
                    wall = time.monotonic() - t
                    import ray

                    actor_rss = ray.get([a.peak_rss_mb.remote() for a in shards.actors])
                    s = merged.summary
                    row = {
                        "shards": k,
                        "placement": shards.strategy,
                        "offered_rate": s.offered_rate,
                        "achieved_send_rate": s.achieved_send_rate,
                        "ratio_to_peer": (s.achieved_send_rate or 0) / (peer.achieved_send_rate or 1),
                        "valid": s.valid,
                        "invalid_reason": s.invalid_reason,
                        "stage_wall_s": wall,
                        "driver_peak_rss_mb": rss_mb(),
                        "actor_peak_rss_mb": actor_rss,
                        "per_shard": s.shards,
                    }
                    rows.append(row)
                    print(
                        f"\n{k} shard(s), {shards.strategy}: offered {s.offered_rate:.0f} req/s, achieved "
                        f"{fmt(s.achieved_send_rate, 0)} ({row['ratio_to_peer']:.3f} x peer), valid {s.valid}, "
                        f"stage {wall:.1f}s, driver peak RSS {rss_mb():.0f} MB"
                    )
                    if not s.valid:
                        print(f"  invalid: {s.invalid_reason}")
                    print("  shard  requests  rate req/s  lag p50 ms  lag p99 ms  start lag ms  offset ms (+-)   actor RSS MB")
                    for x, mb in zip(s.shards or [], actor_rss):
                        lag = x["send_lag_ms"]
                        print(
                            f"  {x['shard']:>5}  {x['requests']:>8}  {fmt(x['achieved_send_rate'], 0):>10}"
                            f"  {fmt(lag['p50'], 3):>10}"
                            f"  {fmt(lag['p99'], 3):>10}  {fmt(x['start_lag_ms'], 3):>12}  "
                            f"{fmt(x['clock_offset_ms'], 3):>7} ({fmt(x['clock_uncertainty_ms'], 3)})  {mb:>10.0f}"
                        )
    finally:
        server.terminate()
        server.wait()
    print(
        "\nnote: every shard, the driver and the server share this machine's cores (2 here, busy with "
        "other work): more shards add no CPU, so these figures are the mechanism's cost, not a cluster's reach."
    )
    if args.json:
        args.json.write_text(json.dumps({"peer": peer.to_json(), "sharded": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
