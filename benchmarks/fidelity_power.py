"""How much live traffic does a fidelity verdict need, and what does it catch? (issue [10])

On the two public traces in ../shared/data/traces (data nobody here tuned the ceilings on): the
Azure 2023 conversation trace (19,366 requests, bursty arrivals, no prefix sharing recorded) and
Mooncake's synthetic trace (3,993 requests, Poisson arrivals, 65% prefix reuse), imported as
`replay import` does. For each live size (the first N requests by arrival) it judges three
replays of exactly those rows, built from the rows themselves (sent at live's times, 0-50 µs
late, the engine answering with the recorded lengths plus 9 template tokens):

* **faithful**: as recorded: the verdict should be faithful, or "cannot tell" where N is small;
* **outputs x1.25**: every output 25% longer: should not be faithful;
* **Poisson**: the same requests sent at Poisson arrivals of the same mean rate: a change only
  for a trace whose arrivals are not Poisson already (Azure: CV about 1.09).

Each replay is judged twice: **paired**, as ``replay fidelity`` judges a replay of live's own
requests (request by request: a Poisson replay is then a sender that did not follow the trace),
and **unpaired**, its request ids renamed, as a trace of other requests would be (the
distribution tests alone; the Poisson replay told that the stage drew its arrivals, as
``--arrivals poisson`` would). Printed per trace and size: each verdict, and for the faithful
paired replay the test each required facet rests on with the smallest change it catches (for
the unpaired one, which facets could be told); the time to judge and the peak RSS.

    python benchmarks/fidelity_power.py [--sizes 60,500,2000,5000,all]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capture.importers import import_token_trace  # noqa: E402
from fidelity import compare_stage  # noqa: E402
from fidelity.compare import PASS, compare_sides  # noqa: E402
from fidelity.judge import own_times  # noqa: E402
from replay.trace import Trace, read_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces"
FILES = {"azure": "azure_llm_2023_conv.csv", "mooncake": "mooncake_synthetic.jsonl"}


def replay_of(live: Trace, *, output_scale: float = 1.0, sent_s: np.ndarray | None = None, seed: int = 1) -> pl.DataFrame:
    """The results frame of a replay of every live row (see the module's description)."""
    df = live.df
    n = df.height
    rng = np.random.default_rng(seed)
    arrival = df["arrival_us"].to_numpy() / 1e6
    intended = ((arrival - arrival[0] if sent_s is None else sent_s) * 1e9).astype(np.int64)
    sent = intended + rng.integers(0, 50_000, n)
    out = np.round(df["output_tokens"].to_numpy() * output_scale).astype(np.int64)
    return pl.DataFrame(
        {
            "request_id": df["request_id"],
            "session_id": df["session_id"],
            "api": df["api"],
            "input_tokens": df["input_tokens"],
            "expected_output_tokens": out,
            "intended_ns": intended,
            "release_ns": intended,
            "conn_ns": np.zeros(n, dtype=np.int64),
            "sent_ns": sent,
            "first_byte_ns": sent + 5_000_000,
            "first_token_ns": sent + 10_000_000,
            "end_ns": sent + 1_000_000_000,
            "status": np.full(n, 200, dtype=np.int32),
            "error": pl.Series(["none"] * n),
            "prompt_tokens": df["input_tokens"].to_numpy().astype(np.int64) + 9,
            "completion_tokens": out,
            "cached_tokens": pl.Series([None] * n, dtype=pl.Int64),
            "output_chunks": out,
        }
    )


def poisson_times(live: Trace, seed: int = 2) -> np.ndarray:
    arrival = live.df["arrival_us"].to_numpy() / 1e6
    gaps = np.random.default_rng(seed).exponential((arrival[-1] - arrival[0]) / max(len(arrival) - 1, 1), len(arrival) - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def facets_line(verdict) -> str:
    """Per required facet: the test it rests on and the change it catches, or why it cannot tell."""
    parts = []
    for f in verdict.facets:
        if not f.required:
            continue
        if f.state == PASS:
            parts.append(f"{f.name}: {f.decided_by[0]} {f.detects}".rstrip())
        else:
            parts.append(f"{f.name}: {f.state}")
    return "; ".join(parts)


def unpaired(result, times: str | None = None):
    """The stage's verdict with its request ids renamed: judged as a trace of other requests."""
    other = result.replay_side
    renamed = replace(other, ids=np.char.add("other:", other.ids.astype(str)))
    return compare_sides(result.live_side, renamed, own_times=times)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="60,500,2000,5000,all")
    args = ap.parse_args()
    missing = [f for f in FILES.values() if not (TRACES / f).exists()]
    if missing:
        sys.exit(f"{TRACES}: {', '.join(missing)} missing: this benchmark judges the public traces there")
    with tempfile.TemporaryDirectory(prefix="fidelity-power-") as tmp:
        for name, file in FILES.items():
            path = Path(tmp) / f"{name}.parquet"
            import_token_trace(name, TRACES / file, path)
            full = read_trace(path, bodies=False)
            full = Trace(df=full.df.sort("arrival_us"), meta=full.meta)
            print(f"\n## {name}: {full.df.height:,} requests over {full.df['arrival_us'].max() / 1e6 / 60:.0f} min\n")
            print(
                "| live requests | paired: faithful | outputs x1.25 | Poisson sends | unpaired: faithful | outputs x1.25 | "
                "--arrivals poisson | what the faithful paired verdict rests on | unpaired facets told | judged in |"
            )
            print("|---:|---|---|---|---|---|---|---|---|---:|")
            sizes = sorted({full.df.height if s == "all" else min(int(s), full.df.height) for s in args.sizes.split(",")})
            for n in sizes:
                live = Trace(df=full.df.head(n), meta=full.meta)
                t = time.perf_counter()
                faithful = compare_stage(live, replay_of(live))
                elapsed = time.perf_counter() - t
                longer = compare_stage(live, replay_of(live, output_scale=1.25))
                poisson = compare_stage(live, replay_of(live, sent_s=poisson_times(live)))
                alone = unpaired(faithful)
                told = [f.name for f in alone.facets if f.required and f.state == PASS]
                print(
                    f"| {n:,} | {faithful.verdict.state} | {longer.verdict.state} | {poisson.verdict.state} | "
                    f"{alone.state} | {unpaired(longer).state} | {unpaired(poisson, own_times('poisson')).state} | "
                    f"{facets_line(faithful.verdict)} | {', '.join(told) or 'none'} | {elapsed:.2f} s |",
                    flush=True,
                )
    print(f"\npeak RSS {rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
