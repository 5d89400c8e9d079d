"""Part 1: is the embedded simulated engine ever the bottleneck? Streams and chunks/s on one core.

For each load (N concurrent chat streams of T tokens, all sent at once), start the engine
in-process with the ``instant`` profile (steps take no modelled time, so only the engine's own
CPU work limits it), replay the requests with our runner (one client worker thread) and report
completed streams, chunks, chunks/s and the CPU time of the engine's one server thread (from
/proc). The peer, measured in the same run under the same client: the workspace's
``sse-bench-server`` (pre-built chunks, no engine), one thread, same N and T; the ratio says how
much of the static server's rate the engine keeps. When both rates are close, the client is the
limit, not the engine. (Part 2, calibration against llama.cpp / vLLM, comes later.)

usage: python benchmarks/sim_engine.py [--loads 1000x100,2000x50,200x1000] [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import polars as pl

from replay.config import RunConfig
from replay.runner import run_stage
from replay.sim import SimConfig, start_sim
from replay.trace import Trace, TraceMeta, validate

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "target" / "release" / "sse-bench-server"
TICK = os.sysconf("SC_CLK_TCK")


def trace(n: int, tokens: int) -> Trace:
    bodies = [json.dumps({"model": "sim", "max_tokens": tokens, "ignore_eos": True,
                          "messages": [{"role": "user", "content": f"Tell me story number {i} about the sea."}]})
              for i in range(n)]
    df = pl.DataFrame({"request_id": [f"r{i}" for i in range(n)], "api": ["chat"] * n, "model": ["sim"] * n,
                       "arrival_us": [0] * n, "body": bodies, "input_tokens": [16] * n,
                       "output_tokens": [tokens] * n, "max_tokens": [tokens] * n})
    meta = TraceMeta(source_format="benchmark", tokenizer="gpt2")
    return Trace(df=validate(df, meta, source="<benchmark>"), meta=meta)


def cpu_s(stat_path: Path) -> float:
    fields = stat_path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_stat(name: str) -> Path | None:
    """The /proc stat file of this process's thread called ``name`` (it names itself on start)."""
    for _ in range(100):
        for task in Path("/proc/self/task").iterdir():
            if (task / "comm").read_text().strip() == name:
                return task / "stat"
        time.sleep(0.01)
    return None


def replay(url: str, n: int, tokens: int, stat: Path | None) -> dict:
    cpu0 = cpu_s(stat) if stat else float("nan")
    t0 = time.perf_counter()
    result = run_stage(trace(n, tokens), RunConfig(url=url, lag_bound_ms=1000, worker_threads=1), model="sim")
    wall = time.perf_counter() - t0
    cpu = (cpu_s(stat) - cpu0) if stat else float("nan")
    rows = result.requests
    ok = rows.filter(pl.col("error") == "none")
    chunks = int(ok["output_chunks"].sum() or 0)
    span_s = (int(ok["end_ns"].max()) - int(rows["intended_ns"].min())) / 1e9 if ok.height else float("nan")
    # most streams open at once: overlap of [first byte, end] intervals
    starts, ends = ok["first_byte_ns"].to_numpy(), ok["end_ns"].to_numpy()
    events = np.concatenate([np.stack([starts, np.ones_like(starts)], 1), np.stack([ends, -np.ones_like(ends)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    peak = int(np.cumsum(events[:, 1]).max()) if len(events) else 0
    return {"ok": ok.height, "chunks": chunks, "span_s": span_s, "chunks_per_s": chunks / span_s,
            "peak_open": peak, "server_cpu_s": cpu, "wall_s": wall}


def run_sim(n: int, tokens: int) -> dict:
    config = SimConfig(profile="instant", max_num_seqs=max(n, 1), max_num_batched_tokens=max(8192, 32 * n))
    with start_sim(config) as server:
        return replay(server.url, n, tokens, thread_stat("replay-sim"))


def run_peer(n: int, tokens: int, delay_us: int) -> dict | None:
    if not PEER.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "sse-bench-server"], cwd=ROOT, check=True)
    proc = subprocess.Popen([str(PEER), "--port", "0", "--chunks", str(tokens), "--threads", "1",
                             "--chunk-delay-us", str(delay_us)],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = "http://" + proc.stdout.readline().split()[-1]
        return replay(url, n, tokens, Path(f"/proc/{proc.pid}/stat"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="1000x100,2000x50,200x1000", help="streams x tokens, comma-separated")
    ap.add_argument("--no-peer", action="store_true", help="skip sse-bench-server")
    ap.add_argument("--peer-delay-us", type=int, default=1000,
                    help="the peer's pause before each chunk, so it too writes one chunk per write like a "
                         "token stream (default 1000; 0 lets it batch a whole response into few writes)")
    args = ap.parse_args()
    loads = [tuple(int(x) for x in part.split("x")) for part in args.loads.split(",")]
    header = (f"{'streams':>7} {'tokens':>6} | {'ok':>5} {'peak open':>9} {'chunks':>8} {'chunks/s':>8} "
              f"{'CPU%':>5} {'us CPU/chunk':>12} | {'peer chunks/s':>13} {'CPU%':>5} {'us CPU/chunk':>12} "
              f"{'rate ratio':>10}")
    print(header)
    print("-" * len(header))
    for n, tokens in loads:
        sim = run_sim(n, tokens)
        peer = None if args.no_peer else run_peer(n, tokens, args.peer_delay_us)
        line = (f"{n:>7} {tokens:>6} | {sim['ok']:>5} {sim['peak_open']:>9} {sim['chunks']:>8} "
                f"{sim['chunks_per_s']:>8,.0f} {100 * sim['server_cpu_s'] / sim['span_s']:>5.0f} "
                f"{1e6 * sim['server_cpu_s'] / sim['chunks']:>12.1f} |")
        if peer:
            line += (f" {peer['chunks_per_s']:>13,.0f} {100 * peer['server_cpu_s'] / peer['span_s']:>5.0f} "
                     f"{1e6 * peer['server_cpu_s'] / peer['chunks']:>12.1f} "
                     f"{sim['chunks_per_s'] / peer['chunks_per_s']:>10.2f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
