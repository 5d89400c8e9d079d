"""What one record costs the capture's recorder, alone (no proxy, no traffic on the machine).

The recorder's row building (`capture.record.RowBuilder.build`: the session linked, the answer's
SSE events parsed, token counts and block hashes of the raw text, then redaction: Presidio in
`--workers` worker processes, surrogates applied and the second lock in the recorder itself) is
run over the first `--requests` requests of the seeded PII chat corpus (examples/pii_corpus.py,
each with its whole history, a 21-event streamed answer each), in batches of `--batch`, as the
recorder takes them. Printed per worker count (0: redaction off): records a second, and per record
the recorder process's own CPU time and its wall time; the rest of the wall time it waited for
the Presidio workers. From these: what N cores would reach when the recorder has them to itself.

usage: python benchmarks/recorder_cost.py [--workers 0,1,2] [--requests 1500] [--batch 64]
                                          [--workload pii|generated]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def workload_bodies(workload: str, requests: int) -> list[bytes]:
    """The request bodies: the PII chat corpus (histories repeat turn after turn) or the
    generated production-shaped workload proxy_overhead.py sends (shared system prompts, every
    user text new)."""
    if workload == "generated":
        from replay.generate import GenerateConfig, generate

        trace = generate(GenerateConfig(n_requests=requests, seed=1, rate=1000.0, tokenizer="gpt2", model="bench"))
        return [b.encode() for b in trace.df["body"].to_list()]
    from examples.pii_corpus import make_corpus

    corpus = make_corpus(max(50, requests // 3), seed=7, turns_mean=4.5)
    return [json.dumps({**r, "stream": True}).encode() for r in corpus.requests[:requests]]


def tokenizing_cpu_ms(bodies: list[bytes], batch: int) -> float:
    """CPU ms a record of tokenizing the prompt texts the recorder has not seen before (its cache
    holds the others), batch by batch as it does: the part of a record no compiled parsing saves."""
    from replay.bodies import text_slots, text_token_ids
    from replay.tokenizer import load_tokenizer

    tok, seen = load_tokenizer("gpt2"), set()
    cpu = time.process_time()
    for i in range(0, len(bodies), batch):
        new = []
        for b in bodies[i : i + batch]:
            for slot in text_slots(json.loads(b)):
                if slot.text not in seen:
                    seen.add(slot.text)
                    new.append(slot.text)
        if new:
            text_token_ids(new, tok)
    return (time.process_time() - cpu) / len(bodies) * 1e3


def measure(workers: int, bodies: list[bytes], batch: int) -> dict:
    from capture.record import Exchange, RowBuilder
    from tests.integration.nginx import sse_events

    chunks = [(100 + j * 10, e.encode()) for j, e in enumerate(sse_events())]
    t0 = 1_700_000_000_000_000
    exchanges = [
        Exchange(f"r{i}", "chat", t0 + i * 1000, b, None, stream=True, status=200, ttfb_us=100, end_us=500, chunks=chunks)
        for i, b in enumerate(bodies)
    ]
    redactor = None
    if workers:
        from redact.key import RedactionKey
        from redact.pipeline import Redactor

        redactor = Redactor(RedactionKey(b"benchmark-key-" * 3), "gpt2", processes=workers)
        redactor._get_pool()  # Presidio loaded before the clock starts, as the recorder does
    builder = RowBuilder(t0, tokenizer="gpt2", block_size=16, sample=1.0, redactor=redactor)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(exchanges), batch):
        builder.build(exchanges[i : i + batch])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if redactor is not None:
        redactor.close()
    n = len(exchanges)
    return {"workers": workers, "records": n, "per_s": n / wall, "cpu_ms": cpu / n * 1e3, "wall_ms": wall / n * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workload", choices=("pii", "generated"), default="pii")
    args = ap.parse_args()
    bodies = workload_bodies(args.workload, args.requests)
    rows = [measure(int(w), bodies, args.batch) for w in args.workers.split(",")]
    print("| redaction workers | records / s | recorder CPU / record (ms) | wall / record (ms) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers'] or 'off'} | {r['per_s']:.0f} | {r['cpu_ms']:.2f} | {r['wall_ms']:.2f} |")
    if any(r["workers"] == 0 for r in rows):
        tokens = tokenizing_cpu_ms(bodies, args.batch)
        print(f"of a record's recorder CPU without redaction, {tokens:.2f} ms tokenizes prompt texts not seen before")
    one = next((r for r in rows if r["workers"] == 1), None)
    if one is not None:
        # with one worker the recorder waits for it: the worker's time is the wall less the
        # recorder's own CPU (both run at once only across batches: an upper bound for it)
        worker_ms = one["wall_ms"] - one["cpu_ms"]
        print(
            f"one record: about {one['cpu_ms']:.1f} ms in the recorder and {worker_ms:.1f} ms in a Presidio worker; "
            f"with N cores to itself the capture would record about min({1e3 / one['cpu_ms']:.0f}, "
            f"N x {1e3 / (one['cpu_ms'] + worker_ms):.0f}) requests/s (the recorder process is one)"
        )


if __name__ == "__main__":
    main()
