"""The runner's send lag over https beside http: same server, same gateway, same run.

Debian's nginx (installed from Debian if missing and this runs as root; one worker) sits in front of
the workspace's `sse-bench-server` (20 SSE chunks a response) with two listeners on 127.0.0.1:
plain http and https (TLS 1.3, a server certificate from a private CA made for the run, trusted
with --ca-cert as a company CA would be; tests/integration/nginx.py). At each offered rate the
runner sends the same constant-rate schedule of short chat requests first over http, then over
https, warmed as `replay run` warms a plan with no recorded response times (WARM_CAP connections
opened before t0, the TLS handshakes among them). Printed per rate and scheme: the achieved send
rate, send lag p50 / p99 / max, requests answered; then the highest rate each scheme held (lag p99
<= 1 ms and >= 95% of the offered rate, this and every lower rate) and their ratio (https / http),
and the process's peak RSS. Not a pass/fail test. benchmarks/runner_accuracy.py measures https
with real request bodies against nginx alone.

usage: python benchmarks/https_lag.py [--rates 250,500,1000,2000,4000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner_accuracy import LAG_BOUND_MS, ensure_nginx, held, start_server  # noqa: E402

from tests.integration.nginx import start_gateway  # noqa: E402

BODY = json.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
).encode()


def send(url: str, offsets_s: np.ndarray, ca_cert: str | None) -> dict:
    from replay import _engine
    from replay.runner import WARM_CAP

    n = len(offsets_s)
    options = _engine.RunOptions(
        url, ca_cert=ca_cert, timeout_s=30.0, worker_threads=1, warm_connections=WARM_CAP, chunk_times=False
    )
    raw = _engine.run(
        options,
        ["/v1/chat/completions"],
        np.zeros(n, np.uint8),
        (offsets_s * 1e9).astype(np.int64),
        BODY * n,
        body_offsets=np.arange(n + 1, dtype=np.uint64) * len(BODY),
    )
    sent = raw["sent_ns"] >= 0
    lag_ms = (raw["sent_ns"][sent] - raw["intended_ns"][sent]) / 1e6
    span_s = (raw["sent_ns"][sent].max() - raw["sent_ns"][sent].min()) / 1e9
    return {
        "achieved": (int(sent.sum()) - 1) / span_s if span_s > 0 else float("nan"),
        "lag_p50_ms": float(np.percentile(lag_ms, 50)),
        "lag_p99_ms": float(np.percentile(lag_ms, 99)),
        "lag_max_ms": float(lag_ms.max()),
        "ok": int((raw["error_kind"] == 0).sum()),
        "n": n,
        "warm": int(raw["runner"]["warm_connections"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="250,500,1000,2000,4000")
    parser.add_argument("--seconds", type=float, default=3.0, help="schedule length per rate and scheme")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    ensure_nginx()
    server, upstream = start_server(threads=1)
    rows: dict[str, list[dict]] = {"http": [], "https": []}
    with tempfile.TemporaryDirectory(prefix="https-lag-") as folder:
        gateway = start_gateway(upstream, Path(folder))
        try:
            for rate in rates:
                n = max(100, int(rate * args.seconds))
                offsets = np.arange(n) / rate
                for scheme, url, ca in (("http", gateway.http_url, None), ("https", gateway.url, str(gateway.ca))):
                    r = send(url, offsets, ca)
                    r["rate"] = rate
                    rows[scheme].append(r)
                    print(
                        f"{scheme:5s} {rate:7.0f} req/s  achieved {r['achieved']:8.1f}  lag p50 {r['lag_p50_ms']:.3f}"
                        f"  p99 {r['lag_p99_ms']:.3f}  max {r['lag_max_ms']:.3f} ms  ok {r['ok']}/{n}"
                        f"  warm {r['warm']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(0.5)
        finally:
            gateway.stop()
            server.terminate()
            server.wait(10)
    print("\n| offered req/s | scheme | achieved req/s | lag p50 ms | lag p99 ms | lag max ms | answered |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for i, rate in enumerate(rates):
        for scheme in ("http", "https"):
            r = rows[scheme][i]
            print(
                f"| {rate:.0f} | {scheme} | {r['achieved']:.0f} | {r['lag_p50_ms']:.3f} | {r['lag_p99_ms']:.3f} | "
                f"{r['lag_max_ms']:.3f} | {r['ok']}/{r['n']} |"
            )
    for r in rows["http"] + rows["https"]:
        r["lag_p99_ms"] = r["lag_p99_ms"] if r["ok"] == r["n"] else float("inf")  # a lost request is not held
    plain, secure = held(rows["http"], LAG_BOUND_MS), held(rows["https"], LAG_BOUND_MS)
    ratio = f"{secure / plain:.2f}x" if plain else "http held no rate"
    print(
        f"\nhighest rate held (lag p99 <= {LAG_BOUND_MS:g} ms, achieved >= 95%, every request answered; this "
        f"and every lower rate): http {plain:.0f} req/s, https {secure:.0f} req/s (https / http {ratio})"
    )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
