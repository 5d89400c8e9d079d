"""What do the HTML report's plots cost on a production-sized trace, beside the metrics themselves?

Builds the same synthetic live Trace and 10x-faster replay as ``benchmarks/fidelity_scale.py``
(N requests, default 1,000,000: bursty sessions, shared system prompts, recorded TTFT / E2E /
cached tokens), judges it with ``fidelity.compare_stage`` (every metric, the peer this is measured
against), then renders ``fidelity.html.html_report`` on the judged stage: every plot (CDFs, QQ,
counts over time, cache-hit curves, survival), drawn with matplotlib's Agg renderer and embedded
as PNG. Prints both times, their ratio (plots / metrics), the page's size, and the peak RSS
(``ru_maxrss``) after each step. The plots reuse the prefix-cache simulations the metrics ran
(memoized on the sides) and draw at most 20,000 points per CDF series.

    python benchmarks/fidelity_report.py [--requests 1000000] [--out report.html]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_scale import replay_of, synthetic_live  # noqa: E402

from fidelity import compare_stage  # noqa: E402
from fidelity.html import html_report  # noqa: E402
from fidelity.judge import FidelityReport  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, help="also write the page here")
    args = ap.parse_args()

    t = time.perf_counter()
    live = synthetic_live(args.requests)
    stage = replay_of(live)
    print(
        f"built {args.requests:,} live rows + their replay in {time.perf_counter() - t:.1f} s; peak RSS {rss_mb():.0f} MB",
        file=sys.stderr,
    )

    t = time.perf_counter()
    judged = compare_stage(live, stage, file="synthetic", requested_rate=None)
    metrics_s = time.perf_counter() - t
    metrics_rss = rss_mb()

    t = time.perf_counter()
    page = html_report(FidelityReport(live="synthetic live", results="synthetic replay", stages=[judged]))
    plots_s = time.perf_counter() - t
    if args.out:
        args.out.write_text(page, encoding="utf-8")
    load = os.getloadavg()[0]
    print(f"{args.requests:,} requests (load average {load:.1f} on {os.cpu_count()} CPUs):")
    print(f"  metrics  (compare_stage)      {metrics_s:7.1f} s   peak RSS {metrics_rss:7.0f} MB")
    print(
        f"  HTML page (plots, tables)     {plots_s:7.1f} s   peak RSS {rss_mb():7.0f} MB   "
        f"{len(page) / 1e6:.2f} MB, {page.count('<img')} plots"
    )
    print(f"  plots / metrics = {plots_s / metrics_s:.2f}")


if __name__ == "__main__":
    main()
