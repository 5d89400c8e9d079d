"""The latency `replay capture` adds: client through the proxy vs client direct, same run.

Upstream: the workspace's ``sse-bench-server`` (Rust, pre-built SSE chunks, no engine: a fast
upstream, so what is measured is the proxy), one thread. Client: our open-loop runner
(``replay.runner.run_stage``, Rust), Poisson arrivals at each rate for ``--seconds``, the bodies of
a generated production-shaped workload (sessions, shared system prompts). The proxy is started as
the user starts it (``replay capture``, its own process, redaction ON with a throwaway key unless
``--no-redact``) and records everything it passes.

For each rate, the same schedule is sent direct, then through a bare aiohttp proxy that records
nothing (``benchmarks/bare_proxy.py``: the peer, what aiohttp itself costs), then through the
capture proxy (``--repeats`` times). Per request: time to first byte (``first_byte - sent``) and
end to end (``end - sent``); the table gives p50 / p99 of end to end for each, the p50 / p99 each
proxy adds (its distribution minus the direct one), the records dropped during the capture stage
(from the proxy's /metrics), and the peak RSS of the capture proxy process and of its recorder
(+ redaction worker) at the end.

usage: python benchmarks/proxy_overhead.py [--rates 100,500,1000] [--seconds 5] [--repeats 1]
                                           [--no-redact] [--upstream-binary PATH]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "target" / "release" / "sse-bench-server"


def _start(cmd: list[str], env: dict | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT, start_new_session=True
    )
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        m = re.search(r"listening on (?:http://)?([\w.:\[\]]+)", line)
        if m:
            return proc, "http://" + m.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit(f"{cmd[0]}: did not start")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            out.append(int(k))
            out.extend(_children(int(k)))
    return out


def _latencies(df) -> tuple[np.ndarray, np.ndarray, int]:
    ok = df.filter(df["error"] == "none")
    sent = ok["sent_ns"].to_numpy()
    return ((ok["first_byte_ns"].to_numpy() - sent) / 1e3, (ok["end_ns"].to_numpy() - sent) / 1e3, df.height - ok.height)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,500,1000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-redact", action="store_true")
    ap.add_argument("--upstream-binary", type=Path, default=PEER)
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    if not args.upstream_binary.exists():
        raise SystemExit(f"{args.upstream_binary}: not built (cargo build --release -p sse-server)")

    from replay.config import Arrivals, RunConfig
    from replay.generate import GenerateConfig, generate
    from replay.runner import run_stage

    n = int(max(rates) * args.seconds) + 10
    trace = generate(GenerateConfig(n_requests=n, seed=1, rate=max(rates), tokenizer="gpt2", model="bench"))
    work = Path(tempfile.mkdtemp(prefix="proxy-overhead-"))
    upstream, up_url = _start([str(args.upstream_binary), "--port", "0", "--chunks", "8", "--threads", "1"])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "REPLAY_REDACT_KEY": "benchmark-throwaway-key-" + os.urandom(8).hex(),
    }
    cmd = [
        sys.executable,
        "-m",
        "replay.cli.main",
        "capture",
        "--upstream",
        up_url,
        "--listen",
        "127.0.0.1:0",
        "--out",
        str(work / "cap"),
    ]
    if args.no_redact:
        cmd.append("--no-redact")
    proxy, proxy_url = _start(cmd, env)
    bare, bare_url = _start([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"), up_url], env)
    rows = []
    try:
        for rate in rates:
            requests = int(rate * args.seconds)
            for rep in range(args.repeats):
                got = {}
                for side, url in (("direct", up_url), ("bare", bare_url), ("proxy", proxy_url)):
                    dropped0 = _metric(proxy_url, "replay_capture_records_dropped_total")
                    cfg = RunConfig(
                        url=url,
                        rate=rate,
                        requests=requests,
                        lag_bound_ms=1e9,
                        arrivals=Arrivals(kind="poisson", seed=rep),
                        model="bench",
                        warm_connections=min(64, int(rate / 10) + 4),
                    )
                    res = run_stage(trace, cfg)
                    got[side] = _latencies(res.requests)
                    if side == "proxy":
                        time.sleep(1.0)  # let the recorder catch up before counting drops
                        got["dropped"] = _metric(proxy_url, "replay_capture_records_dropped_total") - dropped0
                        got["written"] = _metric(proxy_url, "replay_capture_records_written_total")
                (d_fb, d_e2e, d_err), (p_fb, p_e2e, p_err) = got["direct"], got["proxy"]
                _, b_e2e, b_err = got["bare"]
                q = lambda a, p: float(np.percentile(a, p)) if len(a) else float("nan")  # noqa: E731
                rows.append(
                    {
                        "rate": rate,
                        "rep": rep,
                        "requests": requests,
                        "direct_e2e_p50": q(d_e2e, 50),
                        "direct_e2e_p99": q(d_e2e, 99),
                        "bare_added_e2e_p50": q(b_e2e, 50) - q(d_e2e, 50),
                        "bare_added_e2e_p99": q(b_e2e, 99) - q(d_e2e, 99),
                        "proxy_e2e_p50": q(p_e2e, 50),
                        "proxy_e2e_p99": q(p_e2e, 99),
                        "added_ttfb_p50": q(p_fb, 50) - q(d_fb, 50),
                        "added_ttfb_p99": q(p_fb, 99) - q(d_fb, 99),
                        "added_e2e_p50": q(p_e2e, 50) - q(d_e2e, 50),
                        "added_e2e_p99": q(p_e2e, 99) - q(d_e2e, 99),
                        "errors": d_err + p_err + b_err,
                        "dropped": int(got["dropped"]),
                    }
                )
                print(rows[-1], flush=True)
        proxy_rss = _peak_rss_mb(proxy.pid)
        kids = _children(proxy.pid)
        kids_rss = sum(_peak_rss_mb(k) for k in kids)
    finally:
        _stop(proxy)
        _stop(bare)
        _stop(upstream)
    from replay.trace import read_trace

    recorded = len(read_trace(work / "cap", bodies=False))
    shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"load: {os.getloadavg()[0]:.2f} (1-min), cpus: {os.cpu_count()}, redaction: "
        f"{'off' if args.no_redact else 'on'}, upstream: sse-bench-server 8 chunks"
    )
    print(
        "| req/s | direct e2e p50 / p99 (µs) | bare aiohttp adds p50 / p99 (µs) "
        "| capture proxy e2e p50 / p99 (µs) | capture adds TTFB p50 / p99 (µs) "
        "| capture adds e2e p50 / p99 (µs) | capture / bare added p50 | errors | records dropped |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['rate']:.0f} | {r['direct_e2e_p50']:.0f} / {r['direct_e2e_p99']:.0f} "
            f"| {r['bare_added_e2e_p50']:.0f} / {r['bare_added_e2e_p99']:.0f} "
            f"| {r['proxy_e2e_p50']:.0f} / {r['proxy_e2e_p99']:.0f} "
            f"| {r['added_ttfb_p50']:.0f} / {r['added_ttfb_p99']:.0f} "
            f"| {r['added_e2e_p50']:.0f} / {r['added_e2e_p99']:.0f} "
            f"| {r['added_e2e_p50'] / r['bare_added_e2e_p50']:.2f} | {r['errors']} | {r['dropped']} |"
        )
    print(
        f"peak RSS: proxy {proxy_rss:.0f} MB, recorder + redaction workers {kids_rss:.0f} MB "
        f"({len(kids)} processes); records in the capture folder: {recorded}"
    )


if __name__ == "__main__":
    main()
