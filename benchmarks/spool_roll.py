"""The memory and time of rolling a capture spool into its Parquet segment.

A spool of ``--rows`` rows (each a chat body of ``--prompt-words`` words and 250 block hashes,
about 13 KB a line at the defaults) is written as the recorder writes it, then rolled
(``Spool.close``): the peak RSS before and after the roll, and the roll's time. The roll reads
the spool a line at a time and writes it ``capture.spool.ROLL_CHUNK_ROWS`` rows at a time, so
its memory should not grow with the spool.

usage: python benchmarks/spool_roll.py [--rows 40000] [--prompt-words 4000]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--prompt-words", type=int, default=4_000)
    args = ap.parse_args()
    import polars as pl

    from capture.spool import ROLL_CHUNK_ROWS, Spool
    from replay.trace import SCHEMA, TraceMeta

    meta = TraceMeta(t0_unix_us=10, source_format="capture", redaction_policy="none")
    body = json.dumps({"messages": [{"role": "user", "content": "x " * args.prompt_words}]})
    folder = Path(tempfile.mkdtemp(prefix="spool-roll-"))
    try:
        spool = Spool(folder, meta, {"upstream": "u", "sample": 1.0}, 1)
        for lo in range(0, args.rows, 1000):
            k = min(1000, args.rows - lo)
            df = pl.DataFrame(
                {
                    "request_id": [f"r{i}" for i in range(lo, lo + k)],
                    "api": ["chat"] * k,
                    "arrival_us": list(range(lo, lo + k)),
                    "body": [body] * k,
                    "input_tokens": [args.prompt_words] * k,
                    "turn": [0] * k,
                    "outcome": ["completed"] * k,
                    "block_hashes": [[123456789012345678] * 250] * k,
                }
            )
            df = df.with_columns([pl.lit(None, SCHEMA[c]).alias(c) for c in SCHEMA if c not in df.columns]).select(list(SCHEMA))
            spool.append_rows(df)
        size = spool.path.stat().st_size
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.perf_counter()
        spool.close()
        took = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"spool of {args.rows:,} rows, {size / 1e6:.0f} MB: peak RSS {before:.0f} MB before the roll, {after:.0f} MB "
        f"after; the roll took {took:.1f} s ({ROLL_CHUNK_ROWS:,} rows at a time)"
    )


if __name__ == "__main__":
    main()
