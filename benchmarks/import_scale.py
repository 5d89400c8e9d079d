"""Does importing a trace scale? Rows/s, peak RSS and bytes a row, ours against the old path.

Issue [5] "Scale": importing 1,000,000 Azure-like rows and 100,000 Mooncake-like rows must peak at
<= 1.5 GB, and the Mooncake-like Trace must be at least 20x smaller a row than the old importer's
(which stored every synthesized prompt: 277 MB for the 12,031-row Mooncake conversation trace).
A request log (every body's text, its history repeated each turn) must import in bounded memory
too.

Inputs, made in a temporary directory (never in the repository), from the shared public traces
but the request log, which is generated:

* Azure-like: ``azure_llm_2023_conv.csv`` repeated until N rows (default 1,000,000), each copy's
  timestamps shifted by the file's span plus one second, so the file stays in time order.
* Mooncake-like: ``mooncake_synthetic.jsonl`` repeated until N rows (default 100,000), each copy's
  timestamps shifted likewise and its hash ids offset past the previous copy's (a longer trace of
  the same shape, not copies sharing one cache).
* OpenAI request log: N requests (default 200,000; ``--log-requests``) generated from ``--seed``
  (:func:`make_openai_log`): multi-turn chats of 1-8 turns, each starting with one of a few
  system prompts, each request's body repeating its conversation's history and its line holding
  the recorded answer (a ``chat.completion`` object with usage), the texts of realistic lengths
  (about 3.9 KB a line; the script prints the file's size). Requests in time order: the
  conversations start as a Poisson process and a turn follows its answer after a think time.

Each import runs in a fresh subprocess; the parent reaps it with ``wait4`` and takes its peak RSS
(``ru_maxrss``) and wall time, and kills it if its RSS passes ``--max-rss-gb`` (default 8, lowered
to 70% of the memory available now). Rows:

* ``ours``: ``capture.importers.import_azure`` / ``import_mooncake`` of this checkout (streaming,
  null bodies).
* ``old``: the same functions of ``--old-ref`` (default 6dc1cb0, the last commit before the streaming
  importers), extracted with ``git archive`` into the temporary directory; they build the whole
  Trace in memory with every synthesized body and then write it. Run at ``--old-azure-rows`` /
  ``--old-mooncake-rows`` (default 50,000 / 5,000: the old path at full size needs tens of GB), with
  ``ours`` run at the same sizes beside it for the ratio.
* ``polars``: ``pl.read_csv`` / ``pl.read_ndjson`` of the same input and nothing else: the floor
  of just reading the file into memory, as a peer.
* ``ours`` of the log: ``capture.importers.import_log("openai", ...)`` (two streaming passes, raw
  text: no key, so no redaction). Its peer: ``json``, one ``json.loads`` of every line and nothing
  else (the importer parses each line twice); the old in-memory log importer is not run (its
  figures are in the commit that replaced it). Besides the table it prints the log's size and
  MB/s.

Not a pass/fail test: it prints a table (markdown) and the ratios. Progress goes to stderr.

usage: PYTHONPATH=<checkout> python benchmarks/import_scale.py [--azure-rows 1000000]
           [--mooncake-rows 100000] [--old-azure-rows 50000] [--old-mooncake-rows 5000]
           [--old-ref 6dc1cb0] [--no-old] [--log-requests 200000] [--seed 0]
           [--max-rss-gb 8] [--data DIR]

(``--log-requests 0`` leaves the request log out.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"

CHILD = {
    "ours-azure": "from capture.importers import import_azure\nimport_azure(SRC, OUT)",
    "ours-mooncake": "from capture.importers import import_mooncake\nimport_mooncake(SRC, OUT)",
    "old-azure": "from capture.importers import import_azure\nimport_azure(SRC).write(OUT)",
    "old-mooncake": "from capture.importers import import_mooncake\nimport_mooncake(SRC).write(OUT)",
    "polars-azure": "import polars as pl\nprint(pl.read_csv(SRC, infer_schema=False).height, file=sys.stderr)",
    "polars-mooncake": "import polars as pl\nprint(pl.read_ndjson(SRC).height, file=sys.stderr)",
    "ours-openai": "from capture.importers import import_log\nimport_log('openai', SRC, OUT)",
    "json-openai": "import json\nwith open(SRC, 'rb') as f:\n    print(sum(1 for line in f if json.loads(line)), "
    "file=sys.stderr)",
}

# the request log's words and shapes (make_openai_log)
WORDS = (
    "the a of to and in is for on that with as it be are this by from or at an not can we "
    "you your our have has will would should could use using used make data model request "
    "server cache token tokens prompt latency memory batch queue time first last each every "
    "value file line table column row result results test tests check error errors config "
    "option setting engine replay trace capture session answer question example case number "
    "small large fast slow better worse more less before after because when while which "
    "what how why where then than also only just still again here there about into over "
    "under between during function method class module python rust code write read run "
    "start stop open close send receive return call report measure compare explain"
).split()
SYSTEM_PROMPT_CHARS = (400, 800, 1200, 2000)  # a few system prompts, shared by every conversation
LOG_T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def make_azure(src: Path, dst: Path, rows: int) -> None:
    """Repeat the Azure CSV until ``rows`` data rows, shifting each copy's times past the last."""
    import numpy as np
    import polars as pl

    raw = pl.read_csv(src, infer_schema=False)
    stamps = raw["TIMESTAMP"].str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us")
    span = stamps.max() - stamps.min()
    shift_us = int(span.total_seconds() * 1e6) + 1_000_000
    base = stamps.cast(pl.Int64).to_numpy()
    ctx, gen = raw["ContextTokens"].to_list(), raw["GeneratedTokens"].to_list()
    with dst.open("w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        written, copy = 0, 0
        while written < rows:
            take = min(len(base), rows - written)
            us = base[:take] + copy * shift_us
            text = pl.Series(us.astype(np.int64)).cast(pl.Datetime("us")).dt.strftime("%Y-%m-%d %H:%M:%S%.6f").to_list()
            f.write("".join(f"{t}0,{c},{g}\n" for t, c, g in zip(text, ctx[:take], gen[:take])))
            written += take
            copy += 1


def make_mooncake(src: Path, dst: Path, rows: int) -> None:
    """Repeat the Mooncake JSONL until ``rows`` lines: times shifted, hash ids offset per copy."""
    lines = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    span = max(r["timestamp"] for r in lines) + 1000
    top = max(max(r["hash_ids"], default=0) for r in lines) + 1
    with dst.open("w") as f:
        written, copy = 0, 0
        while written < rows:
            for r in lines[: rows - written]:
                f.write(
                    json.dumps(
                        {
                            "timestamp": r["timestamp"] + copy * span,
                            "input_length": r["input_length"],
                            "output_length": r["output_length"],
                            "hash_ids": [h + copy * top for h in r["hash_ids"]],
                        }
                    )
                    + "\n"
                )
            written += min(len(lines), rows - written)
            copy += 1


def _text(rng: random.Random, chars: int) -> str:
    """Sentences of common words, about ``chars`` characters long."""
    out: list[str] = []
    size = 0
    while size < chars:
        words = rng.choices(WORDS, k=rng.randint(6, 20))
        sentence = " ".join(words).capitalize() + rng.choice(".....?!:")
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


def _chars(rng: random.Random, median: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, rng.lognormvariate(0, 0.8) * median)))


def make_openai_log(dst: Path, requests: int, seed: int) -> None:
    """An OpenAI request log of ``requests`` lines (see the module docstring), from ``seed``."""
    rng = random.Random(seed)
    systems = [_text(rng, n) for n in SYSTEM_PROMPT_CHARS]
    # (time, conversation, turn) of every request; conversations start 20 a second
    events, t, conv, left = [], 0.0, 0, requests
    turns_of = []
    while left > 0:
        t += rng.expovariate(20.0)
        turns = min(left, rng.randint(1, 8))
        at = t
        for k in range(turns):
            events.append((at, conv, k))
            at += rng.uniform(2.0, 8.0) + rng.expovariate(1 / 20.0)  # the answer, then thinking
        turns_of.append(turns)
        left -= turns
        conv += 1
    events.sort()
    active: dict[int, tuple[str, list[tuple[str, str]]]] = {}
    with dst.open("w") as f:
        for i, (at, c, k) in enumerate(events):
            if k == 0:
                crng = random.Random(seed * 1_000_003 + c)
                system = systems[crng.choices(range(len(systems)), weights=(4, 3, 2, 1))[0]]
                active[c] = (
                    system,
                    [
                        (_text(crng, _chars(crng, 150, 20, 3000)), _text(crng, _chars(crng, 320, 20, 4000)))
                        for _ in range(turns_of[c])
                    ],
                )
            system, qa = active[c]
            messages = [{"role": "system", "content": system}]
            for q, a in qa[:k]:
                messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            messages.append({"role": "user", "content": qa[k][0]})
            answer = qa[k][1]
            prompt_tokens = sum(len(m["content"]) for m in messages) // 4
            completion_tokens = len(answer) // 4
            f.write(
                json.dumps(
                    {
                        "request_id": f"req-{i:08d}",
                        "timestamp": round(LOG_T0 + at, 6),
                        "body": {"model": "gpt-4o-mini", "messages": messages, "max_tokens": 1024, "temperature": 0.7},
                        "response": {
                            "id": f"chatcmpl-{i:08d}",
                            "object": "chat.completion",
                            "created": int(LOG_T0 + at),
                            "model": "gpt-4o-mini",
                            "choices": [
                                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}
                            ],
                            "usage": {
                                "prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens,
                            },
                        },
                    }
                )
                + "\n"
            )
            if k == turns_of[c] - 1:
                del active[c]


def head(src: Path, dst: Path, rows: int, header: bool) -> None:
    with src.open() as f, dst.open("w") as g:
        for i, line in enumerate(f):
            if i >= rows + header:
                break
            g.write(line)


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 / 1024
    return 8.0


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_child(kind: str, src: Path, out: Path, pythonpath: Path, limit_mb: float, timeout_s: float) -> dict:
    code = f"import sys\nSRC, OUT = {str(src)!r}, {str(out)!r}\n" + CHILD[kind]
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=pythonpath)
    killed = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if rss_mb(proc.pid) > limit_mb:
            killed = f"killed past {limit_mb:.0f} MB"
            proc.send_signal(signal.SIGKILL)
        elif time.perf_counter() - started > timeout_s:
            killed = f"killed after {timeout_s:.0f} s"
            proc.send_signal(signal.SIGKILL)
        time.sleep(0.05)
    wall = time.perf_counter() - started
    ok = os.waitstatus_to_exitcode(status) == 0 and killed is None
    return {
        "kind": kind,
        "wall_s": wall,
        "peak_mb": usage.ru_maxrss / 1024,
        "out_bytes": out.stat().st_size if ok and out.exists() else None,
        "note": killed or ("" if ok else f"exit {os.waitstatus_to_exitcode(status)}"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--azure-rows", type=int, default=1_000_000)
    ap.add_argument("--mooncake-rows", type=int, default=100_000)
    ap.add_argument("--old-azure-rows", type=int, default=50_000)
    ap.add_argument("--old-mooncake-rows", type=int, default=5_000)
    ap.add_argument("--old-ref", default="6dc1cb0")
    ap.add_argument("--no-old", action="store_true")
    ap.add_argument("--log-requests", type=int, default=200_000, help="requests in the generated OpenAI request log (0: no log)")
    ap.add_argument("--seed", type=int, default=0, help="the request log's seed")
    ap.add_argument("--max-rss-gb", type=float, default=8.0)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    limit_mb = min(args.max_rss_gb, 0.7 * available_gb()) * 1024
    print(f"load: {os.getloadavg()}, RSS limit {limit_mb:.0f} MB", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="import-scale-"))
    try:
        inputs = {}
        print("making inputs ...", file=sys.stderr)
        inputs["azure", args.azure_rows] = tmp / "azure.csv"
        make_azure(args.data / "azure_llm_2023_conv.csv", inputs["azure", args.azure_rows], args.azure_rows)
        inputs["mooncake", args.mooncake_rows] = tmp / "mooncake.jsonl"
        make_mooncake(args.data / "mooncake_synthetic.jsonl", inputs["mooncake", args.mooncake_rows], args.mooncake_rows)
        old_dir = None
        plan = [
            ("ours", "azure", args.azure_rows),
            ("polars", "azure", args.azure_rows),
            ("ours", "mooncake", args.mooncake_rows),
            ("polars", "mooncake", args.mooncake_rows),
        ]
        if args.log_requests > 0:
            inputs["openai", args.log_requests] = tmp / "openai.jsonl"
            make_openai_log(inputs["openai", args.log_requests], args.log_requests, args.seed)
            plan += [("ours", "openai", args.log_requests), ("json", "openai", args.log_requests)]
        if not args.no_old:
            old_dir = tmp / "old"
            old_dir.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.old_ref, "replay", "capture"], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(old_dir)], input=archive, check=True)
            for so in (ROOT / "replay").glob("_engine*.so"):
                shutil.copy(so, old_dir / "replay" / so.name)
            for fmt, n, full in (
                ("azure", args.old_azure_rows, args.azure_rows),
                ("mooncake", args.old_mooncake_rows, args.mooncake_rows),
            ):
                path = tmp / f"{fmt}-{n}{inputs[fmt, full].suffix}"
                head(inputs[fmt, full], path, n, header=fmt == "azure")
                inputs[fmt, n] = path
                plan += [("old", fmt, n), ("ours", fmt, n)]
        results = []
        for who, fmt, n in plan:
            print(f"{who} {fmt} {n:,} rows ...", file=sys.stderr)
            r = run_child(
                f"{who}-{fmt}", inputs[fmt, n], tmp / "out.parquet", old_dir if who == "old" else ROOT, limit_mb, timeout_s=1800
            )
            r.update(who=who, fmt=fmt, rows=n)
            results.append(r)
            print(f"  {r['wall_s']:.1f} s, peak {r['peak_mb']:.0f} MB {r['note']}", file=sys.stderr)
        print(f"\nload after: {os.getloadavg()}\n")
        print("| importer | input | rows | wall s | rows/s | peak RSS MB | Trace bytes/row | note |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        for r in results:
            per_row = f"{r['out_bytes'] / r['rows']:,.0f}" if r["out_bytes"] else "-"
            print(
                f"| {r['who']} | {r['fmt']}-like | {r['rows']:,} | {r['wall_s']:.1f} | "
                f"{r['rows'] / r['wall_s']:,.0f} | {r['peak_mb']:,.0f} | {per_row} | {r['note']} |"
            )
        by = {(r["who"], r["fmt"], r["rows"]): r for r in results}
        print()
        for fmt, n in (("azure", args.old_azure_rows), ("mooncake", args.old_mooncake_rows)):
            old, ours = by.get(("old", fmt, n)), by.get(("ours", fmt, n))
            if old and ours and old["out_bytes"] and ours["out_bytes"]:
                print(
                    f"{fmt} at {n:,} rows: old/ours wall {old['wall_s'] / ours['wall_s']:.1f}x, "
                    f"peak RSS {old['peak_mb'] / ours['peak_mb']:.1f}x, "
                    f"bytes a row {old['out_bytes'] / ours['out_bytes']:.1f}x"
                )
        for fmt, n in (("azure", args.azure_rows), ("mooncake", args.mooncake_rows)):
            ours, peer = by[("ours", fmt, n)], by[("polars", fmt, n)]
            print(
                f"{fmt} at {n:,} rows: ours peak {ours['peak_mb']:.0f} MB (target <= 1536), "
                f"{ours['peak_mb'] / peer['peak_mb']:.2f}x the polars read's; wall "
                f"{ours['wall_s'] / peer['wall_s']:.1f}x"
            )
        if args.log_requests > 0:
            n = args.log_requests
            size = inputs["openai", n].stat().st_size
            ours, peer = by[("ours", "openai", n)], by[("json", "openai", n)]
            print(
                f"openai log at {n:,} requests: {size / 1e6:,.0f} MB ({size / n:,.0f} bytes a "
                f"request); ours {n / ours['wall_s']:,.0f} rows/s ({size / 1e6 / ours['wall_s']:.1f} "
                f"MB/s), peak {ours['peak_mb']:.0f} MB; wall {ours['wall_s'] / peer['wall_s']:.1f}x "
                f"one json.loads of every line"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
