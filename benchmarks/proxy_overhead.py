"""The latency `replay capture` adds, against nginx as a reverse proxy, same run, same upstream.

Upstream: Debian's nginx (one worker) answering every chat request at once with a static
21-event SSE stream (tests/integration/nginx.py `start_static_sse`): a server nobody here wrote,
with nothing behind it, so what is measured is the proxies. The peer: a second Debian nginx as a
reverse proxy in front of it (`proxy_pass`, keep-alive upstream, `proxy_buffering off`,
`proxy_request_buffering off`; `start_gateway`). Ours: `replay capture` started as a user starts
it (its own process, its recorder process; `--no-redact` unless `--redact`), recording every
chat request it passes.

Clients, one after the other: our open-loop runner (Rust; `replay.runner.run_stage`, end to end
from the actual send) and the asyncio + aiohttp peer sender (benchmarks/asyncio_peer.py), both
sending the bodies of a generated production-shaped workload (sessions, shared system prompts) on
the same constant-rate schedule. For each rate and client the same schedule goes direct, through
nginx and through the capture proxy, in `--repeats` rounds (each side first in turn): a stall of
this machine's own (tens of ms, now and then, on any side) decides a 5 s stage's p99, so the table
gives medians over the rounds: p50 / p99 of end to end for each side, the p50 / p99 each proxy
adds (its quantile less the direct one's in the same round), requests that did not complete and
the records the capture dropped (its /metrics) over all rounds, and the records it wrote. The target: capture's
added p99 within 1.5x nginx's + 0.5 ms at every rate, nothing lost or dropped. Peak RSS of the
capture process and of its recorder at the end; the cores each used while the capture's stage
ran, and the recorder's CPU time a record over the whole run.

usage: python benchmarks/proxy_overhead.py [--rates 100,1000,4000,8000] [--seconds 5]
                                           [--clients ours,asyncio] [--repeats 3] [--redact]
(nginx is installed from Debian when missing and this runs as root.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from asyncio_peer import e2e_open_loop  # noqa: E402
from capture_process import descendants, metrics, peak_rss_mb, start_capture, stop  # noqa: E402
from redaction import proc_cpu_s  # noqa: E402
from runner_accuracy import ensure_nginx  # noqa: E402

from tests.integration.nginx import start_gateway, start_static_sse  # noqa: E402


def _capture_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds so far of the capture's own process and of its recorder (and workers)."""
    return proc_cpu_s(pid), sum(proc_cpu_s(k) for k in descendants(pid))


def _dropped_total(url: str) -> float:
    return sum(v for k, v in metrics(url).items() if k.startswith("replay_capture_records_dropped_total"))


def _ours(trace, url: str, rate: float, n: int) -> tuple[np.ndarray, int]:
    from replay.config import Arrivals, RunConfig
    from replay.runner import run_stage

    cfg = RunConfig(
        url=url,
        rate=rate,
        requests=n,
        lag_bound_ms=1e9,
        arrivals=Arrivals(kind="constant"),
        model="bench",
        warm_connections=min(256, int(rate / 20) + 4),
    )
    df = run_stage(trace, cfg).requests
    ok = df.filter(df["error"] == "none")
    return (ok["end_ns"].to_numpy() - ok["sent_ns"].to_numpy()) / 1e9, df.height - ok.height


def _peer(bodies: list[bytes], url: str, rate: float, n: int) -> tuple[np.ndarray, int]:
    return e2e_open_loop(url, np.arange(n) / rate, lambda i: bodies[i % len(bodies)], timeout_s=60.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,1000,4000,8000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="ours,asyncio")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds of (direct, nginx, capture) per rate and client; the table gives medians over them",
    )
    ap.add_argument("--redact", action="store_true", help="capture with redaction on (one worker)")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    clients = args.clients.split(",")
    ensure_nginx()

    from replay.generate import GenerateConfig, generate

    n_max = int(max(rates) * args.seconds)
    trace = generate(GenerateConfig(n_requests=n_max, seed=1, rate=max(rates), tokenizer="gpt2", model="bench"))
    bodies = [b.encode() for b in trace.df["body"].to_list()]
    work = Path(tempfile.mkdtemp(prefix="proxy-overhead-"))
    upstream = start_static_sse(work / "upstream")
    peer = start_gateway(upstream.http_url, work / "peer")
    capture, capture_url = start_capture(upstream.http_url, work / "cap", *([] if args.redact else ["--no-redact"]))
    sides = {"direct": upstream.http_url, "nginx": peer.http_url, "capture": capture_url}
    rows = []
    recorder_cpu0 = _capture_cpu(capture.pid)[1]  # its start (the tokenizer loaded) not counted
    try:
        for rate in rates:
            n = int(rate * args.seconds)
            for client in clients:
                # per round: each side's (p50, p99) and requests not completed
                rounds: list[dict[str, tuple[float, float, int]]] = []
                dropped0 = _dropped_total(capture_url)
                cpu, busy = [0.0, 0.0], 0.0
                for r in range(args.repeats):
                    got = {}
                    first = r % len(sides)  # each side first in turn
                    order = list(sides)[first:] + list(sides)[:first]
                    for side in order:
                        url = sides[side]
                        if side == "capture":
                            cpu0, began = _capture_cpu(capture.pid), time.perf_counter()
                        e2e, lost = _ours(trace, url, rate, n) if client == "ours" else _peer(bodies, url, rate, n)
                        ms = e2e * 1e3
                        p50, p99 = (float(np.percentile(ms, p)) if len(ms) else float("nan") for p in (50, 99))
                        got[side] = (p50, p99, lost)
                        if side == "capture":
                            cpu = [c + b - a for c, a, b in zip(cpu, cpu0, _capture_cpu(capture.pid))]
                            busy += time.perf_counter() - began
                    rounds.append(got)
                time.sleep(1.0)  # the recorder catches up before drops are counted
                dropped = _dropped_total(capture_url) - dropped0

                def med(side: str, i: int, less: str | None = None) -> float:
                    """The median over rounds of a side's p50 (i 0) or p99 (1), less the
                    ``less`` side's in the same round."""
                    return float(np.median([g[side][i] - (g[less][i] if less else 0.0) for g in rounds]))

                row = {
                    "rate": rate,
                    "client": client,
                    "n": n,
                    **{f"{s}_p{p}": med(s, i) for s in sides for i, p in enumerate((50, 99))},
                    **{f"{s}_adds_p{p}": med(s, i, "direct") for s in ("nginx", "capture") for i, p in enumerate((50, 99))},
                    "lost": {s: sum(g[s][2] for g in rounds) for s in sides},
                    "dropped": int(dropped),
                    # cores the capture's processes used while its stages ran: the proxy process
                    # (data path and hand-off thread), the recorder
                    "proxy_cores": cpu[0] / busy,
                    "recorder_cores": cpu[1] / busy,
                }
                row["meets"] = (
                    row["capture_adds_p99"] <= 1.5 * max(row["nginx_adds_p99"], 0.0) + 0.5
                    and row["lost"]["capture"] == 0
                    and row["dropped"] == 0
                )
                rows.append(row)
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
        final = metrics(capture_url)
        recorder_cpu = _capture_cpu(capture.pid)[1] - recorder_cpu0
        written = final["replay_capture_records_written_total"]
        connections = final.get("replay_capture_upstream_connections_total", float("nan"))
        capture_rss = peak_rss_mb(capture.pid)
        kids = descendants(capture.pid)
        kids_rss = sum(peak_rss_mb(k) for k in kids)
    finally:
        stop(capture)
        peer.stop()
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"load: {os.getloadavg()[0]:.2f} (1-min), cpus: {os.cpu_count()}, redaction: {'on' if args.redact else 'off'}, "
        f"upstream: nginx static 21-event SSE, {args.seconds:g} s a stage, constant arrivals, "
        f"medians over {args.repeats} rounds"
    )
    print(
        "| req/s | client | direct p50 / p99 (ms) | nginx adds p50 / p99 | capture adds p50 / p99 "
        "| capture p99 added / nginx's | not completed (direct / nginx / capture) | records dropped "
        "| cores: proxy / recorder | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["capture_adds_p99"] / r["nginx_adds_p99"] if r["nginx_adds_p99"] > 0 else float("nan")
        lost = r["lost"]
        print(
            f"| {r['rate']:,.0f} | {r['client']} | {r['direct_p50']:.2f} / {r['direct_p99']:.2f} "
            f"| {r['nginx_adds_p50']:.2f} / {r['nginx_adds_p99']:.2f} "
            f"| {r['capture_adds_p50']:.2f} / {r['capture_adds_p99']:.2f} | {ratio:.2f} "
            f"| {lost['direct']} / {lost['nginx']} / {lost['capture']} | {r['dropped']} "
            f"| {r['proxy_cores']:.2f} / {r['recorder_cores']:.2f} | {'met' if r['meets'] else 'missed'} |"
        )
    print(
        f"records written: {written:.0f}; upstream connections the capture proxy opened: {connections:.0f}; "
        f"peak RSS: capture proxy {capture_rss:.0f} MB, recorder"
        f"{' + redaction workers' if args.redact else ''} {kids_rss:.0f} MB ({len(kids)} processes)"
    )
    if written:
        per = recorder_cpu / written * 1e3
        print(
            f"recorder CPU: {recorder_cpu:.1f} s for {written:.0f} records, {per:.2f} ms a record (each stage resends "
            f"the first of the same bodies: later stages find their texts' token ids cached): "
            f"a core of its own records about {1e3 / per:,.0f} requests/s"
        )


if __name__ == "__main__":
    main()
