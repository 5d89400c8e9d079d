"""How the A/A halves are drawn, and how far past their noise a metric may go, chosen by simulation (issue [13]).

A distribution metric passes within ``AA_FACTOR`` times its A/A noise (the largest of its
distances between the halves of ``AA_SPLITS`` splits of live, scaled to the sizes compared:
:mod:`fidelity.resample`). This script measures, for each split scheme (``sessions``: sessions to
halves at random; ``blocks``: blocks of time, interleaved) and each factor:

1. **false "unfaithful"** on stationary synthetic traffic: two disjoint windows of one long
   stream made by ``replay generate``'s own session scheduler (gamma-renewal arrivals of CV
   ``--burst-cv``, geometric sessions with lognormal think times, a fixed population of system
   prompts: the same traffic, sampled twice), with a window between them; the second judged
   against the first as another trace of the same traffic is (unpaired: its request ids are its
   own, so the paired tests do not apply and every distribution metric is judged), as
   ``replay drift`` judges two traces. A verdict is unfaithful when a metric's distance is over
   max(fixed bound, factor x A/A) (a metric with no A/A, no half of live long enough for it,
   cannot tell): the share of ``--pairs`` pairs with one, with its 95% Clopper-Pearson interval,
   and the metrics that did it;
2. **power** on the same traffic with a known change made to the second window: outputs x1.25,
   inputs x1.25, Poisson arrivals in place of the bursty ones, arrivals burstier (interarrival
   CV x1.5), no prefix shared: the share of pairs where the verdict is unfaithful, and where the
   metric of the change's own kind fails;
3. the same on the public traces (../shared/data/traces, when present: data nobody tuned on):
   adjacent windows of the Azure conversation trace, whose rate drifts over its hour (not
   stationary: a false rate there is the drift), and the changes made to the second window.

The synthetic windows' sizes are ``--sizes`` requests (default 500 and 2,000). Prints a table
per size and scheme, the factors side by side, the wall time and peak RSS. Not a pass/fail test;
about 15 minutes with the defaults on a 2-core machine. docs/fidelity.md quotes it.

    python benchmarks/fidelity_calibration.py [--pairs 300] [--sizes 500,2000] [--factors 2,3,4,5,6]
                                              [--schemes sessions,blocks] [--no-power] [--no-azure] [--raw F] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fidelity.bounds import FIXED_BOUNDS, family_value  # noqa: E402
from fidelity.compare import compare_sides  # noqa: E402
from fidelity.paired import share_bounds  # noqa: E402
from fidelity.power import burstier, cv_change  # noqa: E402
from fidelity.resample import SCHEMES  # noqa: E402
from fidelity.sides import Side, live_side  # noqa: E402
from replay.generate import GenerateConfig, schedule_sessions  # noqa: E402

AZURE = ROOT.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"
BLOCK = 16
E2E_PER_TOKEN_S = 0.02
CHANGES = ("outputs x1.25", "inputs x1.25", "Poisson arrivals", "burstier x1.5", "no prefix shared")
# the metrics of a change's own kind (their names' prefixes)
OWN_KIND = {
    "outputs x1.25": "output_tokens.",
    "inputs x1.25": "input_tokens.",
    "Poisson arrivals": "arrivals.",
    "burstier x1.5": "arrivals.",
    "no prefix shared": "cache.",
}


def stream(cfg: GenerateConfig, n: int, seed: int) -> pl.DataFrame:
    """``n`` requests of one stationary stream: ``replay generate``'s scheduler with a fixed
    population of system prompts (the same in every stream of this config)."""
    population = np.random.default_rng(12345)
    sys_len = np.clip(
        np.rint(cfg.system_prompt_tokens * np.exp(0.8 * population.standard_normal(cfg.n_system_prompts))), 16, 2000
    )
    rows = schedule_sessions(replace(cfg, n_requests=n), np.random.default_rng(seed), sys_len.astype(np.int64))
    return rows.with_row_index("i")


def side_of(rows: pl.DataFrame, name: str) -> Side:
    """The rows as a live side: block hashes of a shared system prompt then the session's own
    growing history (a turn's prompt extends the one before it), recorded E2E, and cached tokens
    as an unbounded prefix cache would give them."""
    sys_blocks = (rows["input_tokens"] - rows["user_tokens"]).to_numpy()  # the first turn's system prompt stays its prefix
    full = rows["input_tokens"].to_numpy() // BLOCK
    system = rows["system"].to_numpy()
    session = rows["session"].to_numpy()
    lists = []
    for k in range(rows.height):
        shared = min(int(sys_blocks[k]) // BLOCK, int(full[k]))
        ids = [(int(system[k]) << 40) | b for b in range(shared)]
        ids += [(1 << 62) | (int(session[k]) << 20) | b for b in range(shared, int(full[k]))]
        lists.append(ids)
    df = pl.DataFrame(
        {
            "request_id": [f"{name}-{i}" for i in rows["i"].to_list()],
            "session_id": [f"s{s}" for s in session.tolist()],
            "arrival_us": (rows["arrival_s"].to_numpy() * 1e6).astype(np.int64),
            "input_tokens": rows["input_tokens"],
            "output_tokens": rows["output_tokens"],
            "block_hashes": pl.Series(lists, dtype=pl.List(pl.UInt64)),
            "e2e_us": (rows["output_tokens"].to_numpy() * E2E_PER_TOKEN_S * 1e6).astype(np.int64),
        }
    )
    side = live_side(df, BLOCK, name=name)
    hits = side.offered_hits().astype(np.float64) * BLOCK
    return replace(side, engine_cached=hits)


def changed(side: Side, change: str, rng: np.random.Generator) -> Side:
    if change == "outputs x1.25":
        return replace(side, output_tokens=side.output_tokens * 1.25)
    if change == "inputs x1.25":
        return replace(side, input_tokens=side.input_tokens * 1.25)
    if change == "Poisson arrivals":
        t = side.times_s
        return replace(side, times_s=np.sort(rng.uniform(t.min(), t.max(), side.n)))
    if change == "burstier x1.5":
        lo, hi = 0.0, 4.0
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cv_change(side, mid) < 0.5 else (lo, mid)
        return burstier(side, hi)
    if change == "no prefix shared":
        counts = side.hashes.list.len()
        unique = pl.int_ranges(
            pl.Series(np.concatenate([[0], np.cumsum(counts.to_numpy())[:-1]])),
            pl.Series(np.cumsum(counts.to_numpy())),
            eager=True,
        )
        return replace(side, hashes=unique.cast(pl.List(pl.UInt64)), engine_cached=np.zeros(side.n))
    raise ValueError(change)


def judged(live: Side, other: Side, scheme: str, seed: int) -> list[tuple[str, float, float | None, float]]:
    """(name, distance, A/A, fixed bound) of every metric judged against A/A (n/a ones left out)."""
    verdict = compare_sides(live, other, seed=seed, aa_scheme=scheme)
    out = []
    for m in verdict.metrics:
        if m.distance is None or m.paired or m.state == "n/a":
            continue
        fixed = family_value(FIXED_BOUNDS, m.name)
        out.append((m.name, float(m.distance), m.aa, 0.1 if fixed is None else fixed))
    return out


# the rule before 2026-12-07: random session halves, 3 times their largest distance unscaled (3 x
# sqrt(2) times the scaled A/A of a replay of live's size), a metric with no A/A held to its fixed bound
BEFORE = 3 * 2**0.5


def fails(rows: list[tuple[str, float, float | None, float]], factor: float, before: bool = False) -> list[str]:
    """The metrics over max(fixed bound, factor x A/A); one without an A/A cannot tell (as the
    product judges it: fidelity.compare), so it fails nothing (``before``: it was held to its
    fixed bound, but for a length quantile whose halves lack ``MIN_TAIL`` values beyond it: the
    rule before took the halves' quantile anyway, an A/A this emulation does not have, so such a
    quantile is left out, in the old rule's favour)."""
    return [
        name
        for name, d, aa, fixed in rows
        if (aa is not None or (before and not _quantile(name))) and d > max(fixed, factor * aa if aa is not None else fixed)
    ]


def _quantile(name: str) -> bool:
    return name.startswith(("input_tokens.p", "output_tokens.p")) and name[-2:].isdigit()


def interval(k: int, n: int) -> str:
    lo, hi = share_bounds(k, n, confidence=0.975)
    return f"{100 * k / n:.2g}% [{100 * lo:.2g}, {100 * hi:.2g}]"


def windows(cfg: GenerateConfig, size: int, pairs: int, seed: int) -> list[tuple[Side, Side]]:
    rows = stream(cfg, 3 * size * pairs, seed)
    out = []
    for r in range(pairs):
        a = rows.slice(3 * r * size, size)
        b = rows.slice((3 * r + 2) * size, size)
        out.append((side_of(a, "live"), side_of(b, "other")))
    return out


def azure_windows(size: int) -> list[tuple[Side, Side]]:
    from capture.importers.azure import import_azure
    from replay.trace import read_trace
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trace = read_trace(import_azure(AZURE, Path(tmp) / "azure.parquet").path, bodies=False)
    df = trace.df.sort("arrival_us")
    n = df.height // size
    out = []
    for r in range(n - 1):
        a, b = (
            df.slice(r * size, size),
            df.slice((r + 1) * size, size).with_columns(request_id=pl.lit("o") + pl.col("request_id")),
        )
        out.append((live_side(a, trace.meta.block_size_tokens), live_side(b, trace.meta.block_size_tokens, name="other")))
    return out


def measure(
    pairs: list[tuple[Side, Side]],
    factors: list[float],
    rng: np.random.Generator,
    raw: dict | None = None,
    schemes: tuple[str, ...] = SCHEMES,
    changes: tuple[str, ...] = CHANGES,
) -> dict:
    """Per scheme and factor: the false unfaithful count, the metrics behind it, and the power
    per change. ``raw`` (when given) gets every pair's (metric, distance, A/A, fixed bound) rows,
    so that another factor can be judged without judging again."""
    out: dict = {}
    for scheme in schemes:
        null = [judged(a, b, scheme, seed=r) for r, (a, b) in enumerate(pairs)]
        power = {c: [judged(a, changed(b, c, rng), scheme, seed=r) for r, (a, b) in enumerate(pairs)] for c in changes}
        if raw is not None:
            raw[scheme] = {"null": null, **power}
        res: dict = {}
        for f in [*factors, *(["before"] if scheme == "sessions" else [])]:
            factor, before = (BEFORE, True) if f == "before" else (float(f), False)
            false = [fails(rows, factor, before) for rows in null]
            k = sum(bool(x) for x in false)
            by_metric: dict[str, int] = {}
            for x in false:
                for name in x:
                    by_metric[name] = by_metric.get(name, 0) + 1
            row = {"false_unfaithful": k, "pairs": len(null), "by_metric": by_metric, "power": {}}
            for c in changes:
                got = [fails(rows, factor, before) for rows in power[c]]
                row["power"][c] = {
                    "verdict": sum(bool(x) for x in got),
                    "own_kind": sum(any(n.startswith(OWN_KIND[c]) for n in x) for x in got),
                }
            res[f if f == "before" else f"{f:g}"] = row
        out[scheme] = res
    return out


def show(title: str, results: dict, factors: list[float], changes: tuple[str, ...] = CHANGES) -> None:
    print(f"\n### {title}\n")
    head = "| scheme | factor | false unfaithful (95% CI) | metrics that failed | " + " | ".join(changes) + " |"
    print(head)
    print("|" + "---|" * (4 + len(changes)))
    for scheme, res in results.items():
        for key in [f"{f:g}" for f in factors] + (["before"] if "before" in res else []):
            row = res[key]
            n = row["pairs"]
            worst = ", ".join(f"{k} {v}" for k, v in sorted(row["by_metric"].items(), key=lambda kv: -kv[1])[:3]) or "-"
            power = " | ".join(
                f"{100 * row['power'][c]['verdict'] / n:.0f}% ({100 * row['power'][c]['own_kind'] / n:.0f}%)" for c in changes
            )
            label = "3 x sqrt(2), before 2026-12-07" if key == "before" else key
            print(f"| {scheme} | {label} | {interval(row['false_unfaithful'], n)} | {worst} | {power} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=300, help="simulated pairs per size (default 300)")
    ap.add_argument("--sizes", default="500,2000", help="requests per window (default 500,2000)")
    ap.add_argument("--factors", default="2,3,4,5,6", help="AA_FACTOR candidates (default 2,3,4,5,6)")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help=f"split schemes (default {','.join(SCHEMES)})")
    ap.add_argument("--no-power", action="store_true", help="the false unfaithful rate only (no changed windows)")
    ap.add_argument("--no-azure", action="store_true", help="skip the Azure trace's windows")
    ap.add_argument("--raw", type=Path, help="write every pair's metric rows here (JSON), to judge other factors later")
    ap.add_argument(
        "--burst-cv", type=float, default=2.0, help="CV of the synthetic stream's gaps (default 2, replay generate's)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    schemes = tuple(args.schemes.split(","))
    changes = () if args.no_power else CHANGES
    cfg = GenerateConfig(burst_cv=args.burst_cv, rate=10.0)
    rng = np.random.default_rng(7)
    t0 = time.monotonic()
    everything: dict = {}
    print(
        f"A/A calibration: stationary synthetic traffic (generate's scheduler, rate {cfg.rate:g} req/s, burst CV "
        f"{cfg.burst_cv:g}, {cfg.turns_mean:g} turns a session), {args.pairs} pairs per size; power: share of pairs "
        f"unfaithful (in brackets: by a metric of the change's own kind)"
    )
    raw: dict = {}
    for size in (int(s) for s in args.sizes.split(",")):
        pairs = windows(cfg, size, args.pairs, seed=size)
        raw[f"synthetic {size}"] = {}
        results = measure(pairs, factors, rng, raw[f"synthetic {size}"], schemes, changes)
        everything[f"synthetic {size}"] = results
        show(f"synthetic, {size} requests a window", results, factors, changes)
    if AZURE.exists() and not args.no_azure:
        for size in (2000,):
            pairs = azure_windows(size)
            raw[f"azure {size}"] = {}
            results = measure(pairs, factors, rng, raw[f"azure {size}"])
            everything[f"azure {size}"] = results
            show(
                f"Azure conversation trace, adjacent windows of {size} requests ({len(pairs)} pairs; not stationary)",
                results,
                factors,
            )
    if args.raw:
        args.raw.write_text(json.dumps(raw))
    print(f"\n{time.monotonic() - t0:.0f} s, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        print(json.dumps(everything, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
