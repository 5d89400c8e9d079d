"""`replay import otel` of a large generated OTLP/JSON file: spans a second and peak RSS.

Writes ``--spans`` spans (about) of agent traces as a batching exporter would: ``--concurrent``
agent runs under way at once, each an ``invoke_agent`` root over steps of one ``chat`` span and
1-4 parallel ``execute_tool`` spans, every span written when it ends, ``--batch`` spans a line,
so each trace's spans are spread over many lines and its root comes last. No content (token-only
rows, as an application that did not opt in records). Then imports it in a fresh process and
prints the wall time, spans/s, requests/s and that process's peak RSS.

    python benchmarks/otel_import.py --spans 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _attrs(**kv) -> list[dict]:
    out = []
    for k, v in kv.items():
        value = {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}
        out.append({"key": k.replace("__", "."), "value": value})
    return out


def _span(trace: str, sid: str, parent: str, name: str, start: int, end: int, attributes: list[dict]) -> dict:
    return {
        "traceId": trace,
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "kind": 3,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attributes,
        "status": {},
    }


def _line(spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}) + "\n"


def generate(path: Path, spans: int, concurrent: int, batch: int, seed: int) -> tuple[int, int]:
    """Write the file; return (spans, chat spans) written."""
    rng = np.random.default_rng(seed)
    written = chats = 0
    pending: list[tuple[int, dict]] = []  # (end, span) waiting to be exported, by end time
    runs: list[dict] = []
    next_trace = 0
    clock = T0

    def new_run(start: int) -> dict:
        nonlocal next_trace
        next_trace += 1
        return {"trace": f"{next_trace:032x}", "root": f"{next_trace:08x}00000000", "start": start, "t": start, "steps": 0,
                "n": int(rng.geometric(1 / 20)), "ctx": int(rng.integers(2000, 12000)), "k": 0}  # fmt: skip

    runs = [new_run(clock + i * 50 * MS) for i in range(concurrent)]
    with path.open("w") as f:
        line: list[dict] = []
        while written < spans:
            run = min(runs, key=lambda r: r["t"])
            trace, root = run["trace"], run["root"]
            run["k"] += 1
            sid = f"{root[:8]}{run['k']:08x}"
            start = run["t"]
            out_tokens = int(rng.integers(20, 400))
            end = start + int(200 * MS + out_tokens * 20 * MS)
            attrs = _attrs(gen_ai__operation__name="chat", gen_ai__request__model="m", gen_ai__usage__input_tokens=run["ctx"],
                           gen_ai__usage__output_tokens=out_tokens)  # fmt: skip
            pending.append((end, _span(trace, sid, root, "chat m", start, end, attrs)))
            chats += 1
            run["ctx"] += out_tokens
            run["steps"] += 1
            t = end
            if run["steps"] < run["n"]:
                tool_end = t
                for _ in range(int(rng.integers(1, 5))):
                    run["k"] += 1
                    d = int(rng.lognormal(np.log(1500), 1.0) * MS)
                    ts = _span(trace, f"{root[:8]}{run['k']:08x}", root, "execute_tool run", t + MS, t + MS + d,
                               _attrs(gen_ai__operation__name="execute_tool"))  # fmt: skip
                    pending.append((t + MS + d, ts))
                    tool_end = max(tool_end, t + MS + d)
                    run["ctx"] += int(rng.integers(100, 2000))
                run["t"] = tool_end + 5 * MS
            else:
                agent = _span(trace, root, "", "invoke_agent a", run["start"], t + MS,
                              _attrs(gen_ai__operation__name="invoke_agent", gen_ai__agent__name="a"))  # fmt: skip
                pending.append((t + MS, agent))
                runs[runs.index(run)] = new_run(t + 2 * MS)
            # export what ended before the earliest run's clock
            horizon = min(r["t"] for r in runs)
            pending.sort(key=lambda p: p[0])
            while pending and pending[0][0] <= horizon:
                line.append(pending.pop(0)[1])
                if len(line) >= batch:
                    f.write(_line(line))
                    written += len(line)
                    line = []
        line += [p[1] for p in pending]
        if line:
            f.write(_line(line))
            written += len(line)
    return written, chats


def _child(src: str, out: str) -> None:
    from capture.importers.otel import import_otel

    started = time.perf_counter()
    result = import_otel(src, out)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    report = json.loads(result.meta.import_report)
    shared = {k: report.get(k) for k in ("prefix_rows", "prefix_tokens", "prefix_sources_forgotten", "prefix_hashes_recomputed")}
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rows": result.rows, "peak_rss_mb": usage.ru_maxrss / 1024, **shared}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spans", type=int, default=200_000)
    ap.add_argument("--concurrent", type=int, default=64, help="agent runs under way at once")
    ap.add_argument("--batch", type=int, default=512, help="spans a line")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "spans.jsonl"
        started = time.perf_counter()
        spans, chats = generate(src, args.spans, args.concurrent, args.batch, args.seed)
        took = time.perf_counter() - started
        print(f"generated {spans:,} spans ({chats:,} chat) in {took:.1f} s, {src.stat().st_size / 1e6:.0f} MB")
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(src), str(Path(tmp) / "t.parquet")], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"imported {got['rows']:,} requests in {got['wall_s']:.1f} s: {spans / got['wall_s']:,.0f} spans/s, "
            f"{got['rows'] / got['wall_s']:,.0f} requests/s; {got['cpu_s']:.1f} s of CPU (the process, imports "
            f"included); peak RSS {got['peak_rss_mb']:,.0f} MB"
        )
        if got.get("prefix_rows") is not None:
            print(
                f"prefix sharing: {got['prefix_rows']:,} rows share {got['prefix_tokens']:,} tokens; predecessors "
                f"forgotten {got['prefix_sources_forgotten']}, hashes recomputed {got['prefix_hashes_recomputed']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
