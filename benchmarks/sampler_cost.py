"""What does reading the engine's metrics during a stage cost the runner's 1 ms send-lag bound?
(issue [9])

A stage reads the target's Prometheus endpoint every second (`replay.engine_metrics.EngineSampler`,
a Python thread: an HTTP GET and a parse of the whole text). This runs the same stages with the
sampler on (the target's /metrics) and off (`--metrics-url none`), alternating, against one server
nobody here wrote:

* **nginx** (Debian's, one worker; tests/integration/nginx.py): every POST /v1/chat/completions
  answered at once with a static 21-event SSE stream, and GET /metrics answered with a real vLLM
  0.32 scrape (tests/fixtures/metrics/vllm.txt, 53 KB: histograms and all, as a vLLM server
  sends it), so each read parses what a vLLM target would send.

Bodies: `replay generate` chat sessions (real gpt2 token counts; shared system prompts, multi-turn
histories), stored in the trace, constant arrivals. Each rate runs `--repeats` times per mode, in
the order off, on, off, on, ...; printed per rate and mode: send lag p50 / p99 / max (medians over
the repeats) and the ratio of the p99s on / off. Also printed: the sampler's own cost, the wall time
of one read + parse of that scrape (median of 50), and the peak RSS. Not a pass/fail test.

    python benchmarks/sampler_cost.py [--rates 250,1000,2000] [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.config import Arrivals, RunConfig  # noqa: E402
from replay.engine_metrics import EngineSampler  # noqa: E402
from replay.generate import GenerateConfig, generate  # noqa: E402
from replay.runner import run_stage  # noqa: E402
from tests.integration.nginx import _quoted, sse_events, start_nginx  # noqa: E402

SCRAPE = ROOT / "tests" / "fixtures" / "metrics" / "vllm.txt"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def start(folder: Path):
    """nginx: the static SSE chat stream, /v1/models, and the vLLM scrape at /metrics."""
    models = '{"object": "list", "data": [{"id": "m", "object": "model"}]}'
    return start_nginx(
        folder,
        locations=f"""
        location /v1/models {{
            default_type application/json;
            return 200 {_quoted(models)};
        }}
        location = /metrics {{
            default_type text/plain;
            alias {SCRAPE};
        }}
        location ~ ^/v1/(chat/)?completions$ {{
            default_type text/event-stream;
            return 200 {_quoted("".join(sse_events()))};
        }}""",
    )


def stage(trace, url: str, rate: float, n: int, sampler: bool) -> dict:
    config = RunConfig(
        url=url,
        rate=rate,
        arrivals=Arrivals(kind="constant"),
        requests=n,
        metrics_url=None if sampler else "none",
        timeout_s=30.0,
        chunk_times=False,
    )
    result = run_stage(trace, config, model="m")
    s = result.summary
    reads = (s.engine_metrics or {}).get("samples") if sampler else None
    return {
        "p50": s.send_lag_ms["p50"],
        "p99": s.send_lag_ms["p99"],
        "max": s.send_lag_ms["max"],
        "ok": s.completed,
        "n": n,
        "reads": reads,
    }


def read_cost(url: str, times: int = 50) -> float:
    """Median wall time (ms) of one read + parse of the target's /metrics."""
    sampler = EngineSampler(url + "/metrics")
    walls = []
    for _ in range(times):
        t = time.perf_counter()
        sampler._read()
        walls.append((time.perf_counter() - t) * 1e3)
    return statistics.median(walls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="250,1000,2000")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    n_max = int(max(rates) * args.seconds)
    t = time.perf_counter()
    trace = generate(GenerateConfig(n_requests=n_max, seed=1, rate=100.0))
    print(f"{n_max} generated chat requests in {time.perf_counter() - t:.1f} s")
    with tempfile.TemporaryDirectory(prefix="sampler-cost-") as tmp:
        nginx = start(Path(tmp) / "nginx")
        try:
            url = nginx.http_url
            print(
                f"one read + parse of the {SCRAPE.stat().st_size / 1024:.0f} KB vLLM scrape: "
                f"{read_cost(url):.2f} ms (median of 50)"
            )
            print(f"{'rate':>7} {'mode':>4} {'lag p50':>8} {'p99':>7} {'max':>7} {'reads':>5} {'ok':>11}  p99 on/off")
            for rate in rates:
                n = int(rate * args.seconds)
                runs: dict[str, list[dict]] = {"off": [], "on": []}
                for _ in range(args.repeats):
                    for mode in ("off", "on"):
                        runs[mode].append(stage(trace, url, rate, n, sampler=mode == "on"))
                p99 = {}
                for mode in ("off", "on"):
                    r = runs[mode]
                    med = {k: statistics.median(x[k] for x in r) for k in ("p50", "p99", "max")}
                    p99[mode] = med["p99"]
                    reads = "-" if mode == "off" else str(statistics.median(x["reads"] or 0 for x in r))
                    ok = f"{sum(x['ok'] for x in r)}/{sum(x['n'] for x in r)}"
                    ratio = f"  {p99['on'] / p99['off']:.2f}" if mode == "on" and p99["off"] else ""
                    print(
                        f"{rate:>7g} {mode:>4} {med['p50']:>8.3f} {med['p99']:>7.3f} {med['max']:>7.2f} "
                        f"{reads:>5} {ok:>11}{ratio}",
                        flush=True,
                    )
        finally:
            nginx.stop()
    print(f"peak RSS {rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
