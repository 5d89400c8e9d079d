"""Does a replay's memory stay bounded as the trace grows? Peak RSS of the library path vs N.

Issue [3] "Bounded memory": replaying N requests should need <= 1.5 GB at N = 1M and grow by at
most 1 KB per request past the first window. This measures where the memory of a replay goes, for
N requests (default 20k, 200k, 1M) shaped like the public Azure 2023 conversation trace's:

* Bodies: chat bodies ``{"model":"m","messages":[{"role":"user","content":"<row>: <text>"}],
  "max_tokens":50}``, the text one of 8 distinct strings of common English words (4,000 - 5,000
  characters, about 1,000 prompt tokens, 4.5 KB on average). The row number in front makes every
  body its own string: a trace of N requests holds N bodies, as a real trace does. They are built
  with polars expressions (no per-row Python loop) and written to a trace file (zstd Parquet,
  65,536-row groups) by a process of its own, before the measured one starts.
* The server: the workspace's ``sse-bench-server --chunks 50 --prompt-tokens 1000``, so each
  response streams 50 token events (as ``max_tokens`` asks), a usage event and ``[DONE]``.
* The replay: the path `replay run` takes, ``read_trace(path, bodies=False)`` (the bodies stay in
  the file and are made a window at a time as the stage runs), ``build_plan(trace,
  RunConfig(url, rate=5000, arrivals=Arrivals(kind="constant"), warm_connections=16))`` then
  ``run_plan`` (``run_stage`` would first ask the target for ``/v1/models``, which this server
  does not serve).

Each N runs in a fresh subprocess, which reports its RSS after imports (the baseline), after the
trace is read, after the plan is built and after the run; the parent reaps it with ``wait4`` and
takes its peak RSS (``ru_maxrss``) from there, with its wall time. The table shows those, the
achieved send rate and send lag p99 (so a run that fell behind its schedule is visible), bytes per
request ``(peak - baseline) / N`` and the growth per request between consecutive sizes
``(peak_b - peak_a) / (N_b - N_a)``, beside the targets.

A peer row replays the same N = 20k bodies with an asyncio + aiohttp open-loop sender (as in
runner_accuracy.py; uvloop if installed), holding the bodies as a list of bytes, and prints the
peak RSS ratio ours / peer. The peer keeps less per request than ours (its send times and a count
of good responses, no chunk times).

Safety: before each size, its peak is projected from the sizes already measured (baseline + N x
the largest bytes per request or growth seen; 30 KB a request before any is measured); a size
projected over the limit (``--max-rss-gb``, default 16, lowered to 80% of the memory available now)
is skipped with a note. The parent also watches each child's RSS and kills it past the limit, and
each child has a timeout (``--timeout-s``, default 120 s + 1 ms a request).

Not a pass/fail test: it prints a table. Progress goes to stderr.

usage: PYTHONPATH=<checkout with the built replay._engine> python benchmarks/runner_memory.py
           [--sizes 20000,200000,1000000] [--rate 5000] [--max-rss-gb 16] [--peer-n 20000]
           [--no-peer] [--server PATH] [--timeout-s S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "target" / "release" / "sse-bench-server"
CHUNKS = 50
PROMPT_TOKENS = 1000
N_TEXTS = 8
TEXT_CHARS = (4000, 5000)
PRIOR_BYTES_PER_REQUEST = 30_000  # projection before any size is measured (several copies of a body)
TARGET_PEAK_MB = 1.5 * 1024  # at 1M requests (1.5 GB; MB here are 2**20 bytes)
TARGET_GROWTH_B = 1024.0  # per request, past the first window
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have "
    "an they you were her she there been one all we their has would when if so no more out up into do "
    "any your what time some could them other than then now only its also about after two first new "
    "like over such our these may well way even most made where many through must before back years "
    "much good should people because each those very great while under last might both own world still "
    "between life being never another same general number small part system place point case power "
    "order model request server token stream cache memory latency schedule trace replay"
).split()
PREFIX = '{"model":"m","messages":[{"role":"user","content":"'
# what build_plan makes of a trace body (keys in this order, compact separators); the peer sends these
SUFFIX_TRACE = '"}],"max_tokens":%d}' % CHUNKS
SUFFIX_SENT = '"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}' % CHUNKS


# ---------------------------------------------------------------- child: one replay, one process


def proc_mb(path: str, key: str) -> float:
    """A kB field of a /proc file (VmRSS of /proc/<pid>/status, MemAvailable of /proc/meminfo) in
    MB; 0 when the process is gone."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb(pid: int | str = "self") -> float:
    return proc_mb(f"/proc/{pid}/status", "VmRSS")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def prompt_texts() -> list[str]:
    import numpy as np

    rng = np.random.default_rng(3)
    texts = []
    for length in np.linspace(*TEXT_CHARS, N_TEXTS).astype(int):
        words: list[str] = []
        size = 0
        while size < length:
            w = WORDS[int(rng.integers(len(WORDS)))]
            words.append(w + ("." if rng.random() < 0.08 else ""))
            size += len(words[-1]) + 1
        texts.append(" ".join(words)[:length])
    return texts


def bodies_frame(n: int, suffix: str):
    """n rows: request_id and body (row number, one of the texts, suffix), by polars expressions."""
    import polars as pl

    texts = pl.Series("text", prompt_texts())
    i = pl.int_range(0, n, eager=True).alias("i")
    return pl.DataFrame({"i": i, "text": texts.gather(i % N_TEXTS)}).select(
        pl.format("req-{}", pl.col("i")).alias("request_id"),
        pl.concat_str([pl.lit(PREFIX), pl.col("i").cast(pl.String), pl.lit(": "), pl.col("text"), pl.lit(suffix)]).alias("body"),
        (pl.col("i") * 200).cast(pl.Int64).alias("arrival_us"),  # 5,000 req/s as recorded
    )


# rows written at a time (and per row group) when the trace file is made
WRITE_ROWS = 65_536


def write_trace(n: int, path: Path) -> None:
    """The trace file of n requests, written WRITE_ROWS rows at a time (the writer's memory stays
    small too); the replay then reads it as a user's would, bodies left in the file."""
    import polars as pl
    import pyarrow.parquet as pq
    from replay.trace import TraceMeta, validate

    meta = TraceMeta(source_format="synthetic", redaction_policy="synthetic")
    full = bodies_frame(n, SUFFIX_TRACE)
    writer = None
    try:
        for start in range(0, n, WRITE_ROWS):
            df = full.slice(start, WRITE_ROWS).with_columns(
                api=pl.lit("chat"),
                model=pl.lit("m"),
                input_tokens=pl.lit(PROMPT_TOKENS, pl.Int32),
                output_tokens=pl.lit(CHUNKS, pl.Int32),
                max_tokens=pl.lit(CHUNKS, pl.Int32),
            )
            table = validate(df, meta, source="memory benchmark trace").to_arrow()
            if writer is None:
                schema = table.schema.with_metadata(meta.to_metadata())
                writer = pq.ParquetWriter(path, schema, compression="zstd")
            writer.write_table(table.cast(writer.schema), row_group_size=WRITE_ROWS)
    finally:
        if writer is not None:
            writer.close()


def child_ours(n: int, url: str, rate: float, warm: int, trace_path: Path) -> dict:
    from replay.config import Arrivals, RunConfig
    from replay.plan import build_plan
    from replay.runner import run_plan
    from replay.trace import read_trace

    out = {"baseline_mb": rss_mb()}
    t = time.perf_counter()
    trace = read_trace(trace_path, bodies=False)  # as `replay run` reads it: bodies stay in the file
    out |= {"trace_mb": rss_mb(), "trace_s": time.perf_counter() - t}
    print(f"  ours n={n}: trace read, RSS {out['trace_mb']:.0f} MB", file=sys.stderr, flush=True)
    config = RunConfig(url=url, rate=rate, arrivals=Arrivals(kind="constant"), warm_connections=warm)
    t = time.perf_counter()
    plan = build_plan(trace, config)
    first, offsets = next(plan.body_windows())
    out |= {"plan_mb": rss_mb(), "plan_s": time.perf_counter() - t, "body_bytes": len(first) / (len(offsets) - 1) * n}
    print(f"  ours n={n}: plan built, RSS {out['plan_mb']:.0f} MB", file=sys.stderr, flush=True)
    t = time.perf_counter()
    result = run_plan(plan, config)
    out |= {"run_mb": rss_mb(), "run_s": time.perf_counter() - t, "self_peak_mb": peak_mb()}
    # the numbers the table needs, from a few columns (summarize() would add its own memory)
    df = result.requests
    sent = df.filter(df["sent_ns"].is_not_null())
    lag = (sent["sent_ns"] - sent["release_ns"]).to_numpy() / 1e6
    out |= send_stats(sent["sent_ns"].to_numpy() / 1e9, lag, int((df["error"] == "none").sum()))
    return out


def send_stats(sent_s, lag_ms, ok: int) -> dict:
    import numpy as np

    span = float(sent_s.max() - sent_s.min()) if len(sent_s) > 1 else 0.0
    return {
        "achieved": (len(sent_s) - 1) / span if span > 0 else float("nan"),
        "lag_p99_ms": float(np.percentile(lag_ms, 99)) if len(lag_ms) else float("nan"),
        "ok": ok,
    }


def child_peer(n: int, url: str, rate: float) -> dict:
    import aiohttp  # noqa: F401  (imported before the baseline, like ours' imports)
    from asyncio_peer import send_open_loop

    out = {"baseline_mb": rss_mb()}
    t = time.perf_counter()
    frame = bodies_frame(n, SUFFIX_SENT)
    out |= {"trace_mb": rss_mb(), "trace_s": time.perf_counter() - t}
    t = time.perf_counter()
    bodies = [b.encode() for b in frame["body"].to_list()]
    del frame
    out |= {"plan_mb": rss_mb(), "plan_s": time.perf_counter() - t, "body_bytes": sum(map(len, bodies))}
    t = time.perf_counter()
    intended, sent, ok = send_open_loop(url, [i / rate for i in range(n)], bodies.__getitem__, timeout_s=600.0)
    stats = send_stats(sent, (sent - intended) * 1e3, ok)
    out |= {"run_mb": rss_mb(), "run_s": time.perf_counter() - t, "self_peak_mb": peak_mb()}
    return out | stats


def child_main(args: argparse.Namespace) -> int:
    import numpy  # noqa: F401  (the imports every replay makes, before the baseline)
    import polars  # noqa: F401

    import replay.runner  # noqa: F401

    if args.child == "write":
        write_trace(args.n, Path(args.trace))
        return 0
    if args.child == "ours":
        out = child_ours(args.n, args.url, args.rate, args.warm_connections, Path(args.trace))
    else:
        out = child_peer(args.n, args.url, args.rate)
    Path(args.out).write_text(json.dumps(out))
    return 0


# ---------------------------------------------------------------- parent: sizes, limits, table


def start_server(path: Path, threads: int) -> tuple[subprocess.Popen, str]:
    if not path.exists():
        if path != SERVER:
            sys.exit(f"error: --server {path}: no such file")
        subprocess.run(["cargo", "build", "--release", "-p", "sse-bench-server"], cwd=ROOT, check=True)
    proc = subprocess.Popen(
        [str(path), "--port", "0", "--chunks", str(CHUNKS), "--threads", str(threads), "--prompt-tokens", str(PROMPT_TOKENS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().strip()
    return proc, "http://" + line.rsplit(" ", 1)[-1]


def run_child(kind: str, n: int, args: argparse.Namespace, url: str, limit_mb: float) -> dict:
    """One replay in a fresh process: its report plus peak RSS (from wait4) and wall time; on a
    timeout, a limit kill or a failure, a dict with 'failed' saying why."""
    timeout_s = args.timeout_s if args.timeout_s else 120 + n / 1000
    with tempfile.TemporaryDirectory(prefix="runner-memory-") as tmp:
        out = Path(tmp) / "out.json"
        trace = Path(tmp) / "trace.parquet"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--n",
            str(n),
            "--url",
            url,
            "--rate",
            str(args.rate),
            "--warm-connections",
            str(args.warm_connections),
            "--out",
            str(out),
            "--trace",
            str(trace),
        ]
        if kind == "ours":  # the trace file is made by a process of its own, not counted
            print(f"  writing the trace file of {n} requests", file=sys.stderr, flush=True)
            subprocess.run(cmd + ["--child", "write"], check=True, timeout=600)
        cmd += ["--child", kind]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, start_new_session=True)
        why = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if why is None:
                rss = rss_mb(proc.pid)
                if rss > limit_mb:
                    why = f"killed at {rss:.0f} MB RSS (limit {limit_mb:.0f} MB)"
                elif time.perf_counter() - start > timeout_s:
                    why = f"timed out after {timeout_s:.0f} s"
                if why:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - start
        res = {"n": n, "kind": kind, "wall_s": wall, "peak_mb": usage.ru_maxrss / 1024}
        if why is None and proc.returncode != 0:
            why = f"exited with status {proc.returncode}"
        if why is None and not out.exists():
            why = "wrote no report"
        if why:
            return res | {"failed": why}
        return res | json.loads(out.read_text())


def projected_mb(n: int, done: list[dict]) -> float:
    """Peak RSS projected for n requests from the sizes measured so far."""
    ok = [r for r in done if "failed" not in r]
    if not ok:
        return 200 + n * PRIOR_BYTES_PER_REQUEST / 2**20
    per = [(r["peak_mb"] - r["baseline_mb"]) * 2**20 / r["n"] for r in ok]
    per += [g for g in growths(ok) if g is not None]
    return max(r["baseline_mb"] for r in ok) + n * max(per) / 2**20


def growths(rows: list[dict]) -> list[float | None]:
    """Bytes per request between each measured size and the one before it (None for the first)."""
    out: list[float | None] = [None]
    for a, b in zip(rows, rows[1:]):
        out.append((b["peak_mb"] - a["peak_mb"]) * 2**20 / (b["n"] - a["n"]))
    return out


def report(r: dict) -> None:
    name = "ours" if r["kind"] == "ours" else "asyncio+aiohttp"
    print(
        f"{name} n={r['n']}: "
        + (
            r["failed"]
            if "failed" in r
            else f"peak {r['peak_mb']:.0f} MB (its own ru_maxrss after the run {r['self_peak_mb']:.0f} MB), "
            f"wall {r['wall_s']:.1f} s (run {r['run_s']:.1f} s), ok {r['ok']}/{r['n']}"
        ),
        file=sys.stderr,
        flush=True,
    )


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or x != x else format(x, spec)


def print_table(rows: list[dict], peer: dict | None) -> None:
    print(
        "\n| sender | requests | peak RSS MB | RSS after trace MB | RSS after plan MB | RSS after run MB | wall s "
        "| achieved req/s | send lag p99 ms | ok | bytes/request | growth B/request |"
    )
    print("|---|" + "---:|" * 11)
    measured = [r for r in rows if "failed" not in r]
    growth = dict(zip((r["n"] for r in measured), growths(measured)))
    for r in rows + ([peer] if peer else []):
        name = "ours" if r["kind"] == "ours" else "asyncio+aiohttp"
        if "failed" in r:
            print(f"| {name} | {r['n']} | {r.get('failed')} |" + " |" * 10)
            continue
        per = (r["peak_mb"] - r["baseline_mb"]) * 2**20 / r["n"]
        g = growth.get(r["n"]) if r["kind"] == "ours" else None
        print(
            f"| {name} | {r['n']} | {r['peak_mb']:.0f} | {r['trace_mb']:.0f} | {r['plan_mb']:.0f} "
            f"| {r['run_mb']:.0f} | {r['wall_s']:.1f} | {fmt(r['achieved'], '.0f')} | {fmt(r['lag_p99_ms'], '.2f')} "
            f"| {r['ok']}/{r['n']} | {per:.0f} | {fmt(g, '.0f')} |"
        )
    if measured:
        base = measured[0]
        print(
            f"\nbaseline (after imports): {base['baseline_mb']:.0f} MB; bodies {base['body_bytes'] / base['n']:.0f} "
            f"bytes/request as sent"
        )
    at_1m = next((r for r in measured if r["n"] == 1_000_000), None)
    print(
        f"target: peak <= {TARGET_PEAK_MB:.0f} MB at 1M requests: "
        + (
            f"{at_1m['peak_mb']:.0f} MB, {'met' if at_1m['peak_mb'] <= TARGET_PEAK_MB else 'NOT met'}"
            if at_1m
            else "not measured"
        )
    )
    pairs = [(a, b, g) for a, b, g in zip(measured, measured[1:], growths(measured)[1:])]
    verdict = (
        ", ".join(f"{a['n']}->{b['n']}: {g:.0f} B ({'met' if g <= TARGET_GROWTH_B else 'NOT met'})" for a, b, g in pairs)
        or "needs two sizes"
    )
    print(f"target: growth <= {TARGET_GROWTH_B:.0f} B/request past the first window: {verdict}")
    if peer and "failed" not in peer:
        ours = next((r for r in measured if r["n"] == peer["n"]), None)
        ratio = f"{ours['peak_mb'] / peer['peak_mb']:.2f}" if ours else f"- (ours not run at N={peer['n']})"
        print(f"peak RSS ratio ours / asyncio+aiohttp at N={peer['n']}: {ratio}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,200000,1000000")
    parser.add_argument("--rate", type=float, default=5000.0, help="constant arrivals, req/s")
    parser.add_argument("--max-rss-gb", type=float, default=16.0)
    parser.add_argument("--peer-n", type=int, default=20000)
    parser.add_argument("--no-peer", action="store_true", help="skip the asyncio + aiohttp peer")
    parser.add_argument("--server", type=Path, default=SERVER, help="sse-bench-server binary")
    parser.add_argument("--server-threads", type=int, default=1)
    parser.add_argument("--warm-connections", type=int, default=16)
    parser.add_argument("--timeout-s", type=float, default=None, help="per child (default 120 s + 1 ms a request)")
    parser.add_argument("--child", choices=("write", "ours", "peer"), help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)

    sizes = sorted({int(s) for s in args.sizes.split(",")})
    limit_mb = min(args.max_rss_gb * 1024, 0.8 * proc_mb("/proc/meminfo", "MemAvailable"))
    print(f"RSS limit {limit_mb:.0f} MB (--max-rss-gb {args.max_rss_gb:g}, 80% of available memory)", file=sys.stderr)
    proc, url = start_server(args.server, args.server_threads)
    rows: list[dict] = []
    peer = None
    try:
        for n in sizes:
            guess = projected_mb(n, rows)
            if guess > limit_mb:
                print(
                    f"note: skipping N={n}: projected peak {guess:.0f} MB over the {limit_mb:.0f} MB limit",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(f"ours n={n}: projected peak {guess:.0f} MB", file=sys.stderr, flush=True)
            r = run_child("ours", n, args, url, limit_mb)
            rows.append(r)
            report(r)
            time.sleep(1.0)
        guess = projected_mb(args.peer_n, rows)
        if args.no_peer:
            pass
        elif guess > limit_mb:
            print(
                f"note: skipping the peer at N={args.peer_n}: projected peak {guess:.0f} MB over the limit",
                file=sys.stderr,
                flush=True,
            )
        else:
            print(f"asyncio+aiohttp n={args.peer_n}: projected peak {guess:.0f} MB", file=sys.stderr, flush=True)
            peer = run_child("peer", args.peer_n, args, url, limit_mb)
            report(peer)
    finally:
        proc.terminate()
        proc.wait(10)
    print_table(rows, peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
