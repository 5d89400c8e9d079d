"""How fast `replay capture` records with redaction on, per redaction worker count.

Workload: the seeded multi-turn chat corpus the redaction tests use (examples/pii_corpus.py:
sessions of 1 + Poisson(3.5) turns whose history repeats turn after turn, shared system prompts,
names, emails, phone and card numbers, addresses, keys in the user turns), its requests in arrival
order, each with its whole history, sent by our open-loop runner at a constant rate through
`replay capture` (its own process, redaction on, `--redact-processes N`) in front of Debian's
nginx answering every request with a static 21-event SSE stream (so the upstream costs nothing).

For each worker count the rates rise; at each, the stage's requests are sent (`--seconds` of
them), then the script waits for the recorder to write them. A rate is held when nothing was
dropped or shed and the recorder had written everything within `--drain` seconds of the stage's
end (it kept up rather than buffered), and when every lower rate was held too. Printed per rate:
records written, dropped (queue full / backlog / session shed), the time to drain, and the
recorder's own capacity (records a second while busy, from its /metrics); then per worker count
the highest rate held, and the ratio 2 workers / 1 worker. The "recorded / s" column is what the
recorder sustained: the stage's records over the stage and its drain. Peak RSS of the proxy and its recorder
and workers beside it (with Ray, the local cluster's processes too). A worker count `rayN`
analyses on N Presidio actors of a Ray cluster the capture starts on this machine
(`--redact-ray --redact-processes N`).

usage: python benchmarks/capture_redaction.py [--rates 25,50,100,200,400] [--seconds 10]
                                              [--workers 1,2,ray2] [--drain 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from capture_process import descendants, dropped, metrics, peak_rss_mb, start_capture, stop  # noqa: E402
from runner_accuracy import ensure_nginx  # noqa: E402

from tests.integration.nginx import start_static_sse  # noqa: E402


# the drop reasons of a recorder that fell behind, and those of records it could not write
SHED = ("queue_full", "backlog", "session_shed")
NOT_WRITTEN = ("redaction_failed", "recorder_error", "lock")


def _workload(n: int) -> list[dict]:
    """The corpus's first ``n`` requests, streamed, in arrival order."""
    from examples.pii_corpus import make_corpus

    corpus = make_corpus(max(50, n // 3), seed=7, turns_mean=4.5)
    bodies = [{**r, "stream": True, "max_tokens": 19} for r in corpus.requests[:n]]
    if len(bodies) < n:
        raise SystemExit(f"the corpus has {len(bodies)} requests, {n} wanted")
    return bodies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="25,50,100,200,400")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", default="1,2,ray2", help="worker processes per run; rayN: N actors on a local Ray cluster")
    ap.add_argument("--drain", type=float, default=2.0, help="seconds the recorder may take after a stage (default 2)")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    ensure_nginx()

    from replay.config import Arrivals, RunConfig
    from replay.runner import run_stage

    from tests.integration.conftest import trace_of_bodies

    # each stage sends the next requests of the corpus (new texts, as live traffic brings)
    bodies = _workload(int(sum(rates) * args.seconds))
    work = Path(tempfile.mkdtemp(prefix="capture-redaction-"))
    upstream = start_static_sse(work / "upstream")
    rows: list[dict] = []
    held: dict[str, float] = {}
    rss: dict[str, tuple[float, float]] = {}
    try:
        for workers in args.workers.split(","):
            on_ray = workers.startswith("ray")
            flags = ("--redact-ray",) if on_ray else ()
            count = workers.removeprefix("ray")
            proc, url = start_capture(upstream.http_url, work / f"cap-{workers}", *flags, "--redact-processes", count)
            held[workers] = 0.0
            offset = 0
            try:
                for rate in rates:
                    n = int(rate * args.seconds)
                    before = metrics(url)
                    stage = trace_of_bodies(bodies[offset : offset + n])
                    offset += n
                    cfg = RunConfig(url=url, rate=rate, requests=n, lag_bound_ms=1e9, arrivals=Arrivals(kind="constant"))
                    done = run_stage(stage, cfg).requests
                    ended = time.monotonic()
                    want = before.get("replay_capture_records_written_total", 0) + n
                    while True:
                        m = metrics(url)
                        gone = sum(dropped(m, r) - dropped(before, r) for r in SHED)
                        lost = sum(dropped(m, r) - dropped(before, r) for r in NOT_WRITTEN)
                        written = m.get("replay_capture_records_written_total", 0)
                        if written + gone + lost >= want or time.monotonic() - ended > 120:
                            break
                        time.sleep(0.1)
                    drain = time.monotonic() - ended
                    row = {
                        "workers": workers,
                        "rate": rate,
                        "sent": n,
                        "failed": int((done["error"] != "none").sum()),
                        "written": int(written - before.get("replay_capture_records_written_total", 0)),
                        "dropped": {
                            r: int(dropped(m, r) - dropped(before, r)) for r in ("queue_full", "backlog", "session_shed")
                        },
                        "lost": int(lost),
                        "drain_s": drain,
                        "capacity": m.get("replay_capture_record_capacity", float("nan")),
                    }
                    row["held"] = gone == 0 and drain <= args.drain and row["failed"] == 0
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if row["held"] and held[workers] == max((r for r in rates if r < rate), default=0.0):
                        held[workers] = rate
                    if gone > n / 2:  # far behind: higher rates only shed more
                        break
                rss[workers] = (peak_rss_mb(proc.pid), sum(peak_rss_mb(p) for p in descendants(proc.pid)))
            finally:
                stop(proc)
    finally:
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"load: {os.getloadavg()[0]:.2f} (1-min), cpus: {os.cpu_count()}, {args.seconds:g} s a rate, constant arrivals")
    print(
        "| workers | req/s | written | dropped: queue full / backlog / session shed | redaction failed + lock "
        "| drain (s) | recorded / s, stage and drain | recorder capacity (req/s) | held |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["dropped"]
        print(
            f"| {r['workers']} | {r['rate']:g} | {r['written']} of {r['sent']} | {d['queue_full']} / {d['backlog']} / "
            f"{d['session_shed']} | {r['lost']} | {r['drain_s']:.1f} | {r['written'] / (args.seconds + r['drain_s']):.0f} "
            f"| {r['capacity']:.0f} | {'yes' if r['held'] else 'no'} |"
        )
    for w, rate in held.items():
        print(
            f"{w} worker(s): highest rate held {rate:g} req/s; "
            f"peak RSS proxy {rss[w][0]:.0f} MB, recorder + workers {rss[w][1]:.0f} MB"
        )
    if held.get("1"):
        for two in ("2", "ray2"):
            if two in held:
                print(f"{two} / 1 worker: {held[two] / held['1']:.2f}x")


if __name__ == "__main__":
    main()
