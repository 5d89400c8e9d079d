"""Part 1: is the embedded simulated engine ever the bottleneck? Streams and chunks/s on one core.

For each load (N concurrent chat streams of T tokens, all sent at once), start the engine
in-process with the ``instant`` profile (steps take no modelled time, so only the engine's own
CPU work limits it), replay the requests with our runner (one client worker thread) and report
completed streams, chunks, chunks/s and the CPU time of the engine's one server thread (from
/proc). The peer, measured in the same run under the same client: the workspace's
``sse-bench-server`` (pre-built chunks, no engine), one thread, same N and T; the ratio says how
much of the static server's rate the engine keeps. When both rates are close, the client is the
limit, not the engine.

Part 2: does the engine, calibrated, behave like a real one? For each real engine (llama-server
with a tiny random-weight model on one thread, -np 4 -c 8192; vLLM's CPU build with the adapter
defaults): start it once, run the probes of ``replay.calibrate`` (single requests at four prompt
lengths, concurrent decodes at a few batch sizes), fit a profile to them, measure the engine's
capacity with a burst of the evaluation workload (48 chat requests, prompts 100-300 tokens,
outputs 32-64), replay the workload with Poisson arrivals at 0.5, 0.9 and 1.3 × that capacity
(``--repeats`` times each, 3 by default, each repeat with its own arrival seed), stop the engine,
run the same probes against the embedded engine with that first fit and take out what the engine
adds on its own (``refine``), then replay the same stages against the embedded engine with the
refined profile (and the real engine's slots / step budget / block size). Prints the fitted profile and a markdown
table of TTFT p50/p90 (from intended send) and output tokens/s, real vs sim, each the median over
the repeats, with the error in % and the real engine's own spread of TTFT p50 across repeats.
The fit sees only the probes, never the evaluation stages.

usage: python benchmarks/sim_engine.py [--loads 1000x100,2000x50,200x1000|none] [--no-peer]
                                       [--calibrate llama,vllm|none] [--eval-requests 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from replay.calibrate import ModelShape, fit_step_costs, mirror_knobs, probe_decode, probe_prefill, refine, write_profile
from replay.config import Arrivals, RunConfig
from replay.prompts import text_of_tokens
from replay.runner import run_stage
from replay.sim import SimConfig, split_cpus, start_sim
from replay.trace import Trace, TraceMeta, validate

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "target" / "release" / "sse-bench-server"
TICK = os.sysconf("SC_CLK_TCK")


def trace(n: int, tokens: int) -> Trace:
    bodies = [
        json.dumps(
            {
                "model": "sim",
                "max_tokens": tokens,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": f"Tell me story number {i} about the sea."}],
            }
        )
        for i in range(n)
    ]
    df = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "api": ["chat"] * n,
            "model": ["sim"] * n,
            "arrival_us": [0] * n,
            "body": bodies,
            "input_tokens": [16] * n,
            "output_tokens": [tokens] * n,
            "max_tokens": [tokens] * n,
        }
    )
    meta = TraceMeta(source_format="benchmark", tokenizer="gpt2")
    return Trace(df=validate(df, meta, source="<benchmark>"), meta=meta)


def cpu_s(stat_path: Path) -> float:
    fields = stat_path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_stat(name: str) -> Path | None:
    """The /proc stat file of this process's thread called ``name`` (it names itself on start)."""
    for _ in range(100):
        for task in Path("/proc/self/task").iterdir():
            if (task / "comm").read_text().strip() == name:
                return task / "stat"
        time.sleep(0.01)
    return None


def replay(url: str, n: int, tokens: int, stat: Path | None) -> dict:
    cpu0 = cpu_s(stat) if stat else float("nan")
    t0 = time.perf_counter()
    result = run_stage(trace(n, tokens), RunConfig(url=url, lag_bound_ms=1000, worker_threads=1), model="sim")
    wall = time.perf_counter() - t0
    cpu = (cpu_s(stat) - cpu0) if stat else float("nan")
    rows = result.requests
    ok = rows.filter(pl.col("error") == "none")
    chunks = int(ok["output_chunks"].sum() or 0)
    span_s = (int(ok["end_ns"].max()) - int(rows["intended_ns"].min())) / 1e9 if ok.height else float("nan")
    # most streams open at once: overlap of [first byte, end] intervals
    starts, ends = ok["first_byte_ns"].to_numpy(), ok["end_ns"].to_numpy()
    events = np.concatenate([np.stack([starts, np.ones_like(starts)], 1), np.stack([ends, -np.ones_like(ends)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    peak = int(np.cumsum(events[:, 1]).max()) if len(events) else 0
    return {
        "ok": ok.height,
        "chunks": chunks,
        "span_s": span_s,
        "chunks_per_s": chunks / span_s,
        "peak_open": peak,
        "server_cpu_s": cpu,
        "wall_s": wall,
    }


def run_sim(n: int, tokens: int) -> dict:
    config = SimConfig(profile="instant", max_num_seqs=max(n, 1), max_num_batched_tokens=max(8192, 32 * n))
    with start_sim(config) as server:
        return replay(server.url, n, tokens, thread_stat("replay-sim"))


def run_peer(n: int, tokens: int, delay_us: int) -> dict | None:
    if not PEER.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "sse-bench-server"], cwd=ROOT, check=True)
    proc = subprocess.Popen(
        [str(PEER), "--port", "0", "--chunks", str(tokens), "--threads", "1", "--chunk-delay-us", str(delay_us)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = "http://" + proc.stdout.readline().split()[-1]
        return replay(url, n, tokens, Path(f"/proc/{proc.pid}/stat"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- part 2: calibration against real engines ------------------------------------------------------

LLAMA_CONFIG = {"threads": 1, "parallel": 4, "ctx_size": 8192}
RATE_FACTORS = (0.5, 0.9, 1.3)  # x the measured capacity: below, near, above


def eval_trace(n: int, seed: int = 5) -> Trace:
    """The evaluation workload: n chat requests, prompts of 100-300 tokens, outputs of 32-64."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(100, 301, n)
    outs = rng.integers(32, 65, n)
    bodies = [
        json.dumps(
            {"model": "m", "max_tokens": int(m), "messages": [{"role": "user", "content": text_of_tokens(int(k), seed=9000 + i)}]}
        )
        for i, (k, m) in enumerate(zip(lengths, outs))
    ]
    df = pl.DataFrame(
        {
            "request_id": [f"e{i}" for i in range(n)],
            "api": ["chat"] * n,
            "model": ["m"] * n,
            "arrival_us": [0] * n,
            "body": bodies,
            "input_tokens": lengths.astype(int).tolist(),
            "output_tokens": outs.astype(int).tolist(),
            "max_tokens": outs.astype(int).tolist(),
        }
    )
    meta = TraceMeta(source_format="benchmark", tokenizer="gpt2")
    return Trace(df=validate(df, meta, source="<calibration eval>"), meta=meta)


def stage(url: str, tr: Trace, rate: float | None, seed: int = 1, cpus: tuple[int, ...] = ()) -> dict:
    """One stage: a burst (rate None: all at once) or Poisson arrivals at ``rate`` (seeded); ``cpus``
    pins the runner (against the in-process engine)."""
    config = RunConfig(
        url=url,
        rate=rate,
        arrivals=Arrivals(kind="poisson", seed=seed) if rate else Arrivals(),
        lag_bound_ms=1000,
        timeout_s=300,
        cpus=cpus,
    )
    s = run_stage(tr, config).summary
    if s.completed != s.requests:
        print(f"  note: {s.requests - s.completed} of {s.requests} failed: {s.errors}")
    return s.to_json()


def workload(
    url: str, tr: Trace, rates: list[float] | None, repeats: int, cpus: tuple[int, ...] = ()
) -> tuple[float, list[float], list[list[dict]]]:
    """Capacity (burst throughput, req/s), the rates, and ``repeats`` summaries per rate (each
    repeat with its own Poisson seed; the rates interleaved, so slow drift hits all alike)."""
    burst = stage(url, tr, None, cpus=cpus)
    capacity = burst["throughput_rps"]
    rates = rates or [round(f * capacity, 2) for f in RATE_FACTORS]
    runs: list[list[dict]] = [[] for _ in rates]
    for k in range(repeats):
        for i, r in enumerate(rates):
            runs[i].append(stage(url, tr, r, seed=1 + k, cpus=cpus))
    return capacity, rates, runs


def launch_engine(name: str):
    """(engine, config, shape, kv tokens, probe batches), or None with a note when not installed."""
    from replay.targets import LlamaServer, Vllm
    from replay.targets.llamacpp_build import llama_server_path
    from replay.targets.tiny_models import tiny_gguf_path, tiny_hf_path
    from replay.targets.vllm_install import vllm_python

    shape = ModelShape.from_tiny()
    if name == "llama":
        binary = llama_server_path()
        if binary is None:
            print("note: llama-server not built (`replay engines build-llama-server`); skipped")
            return None
        engine = LlamaServer(model=tiny_gguf_path("gpt-2"), binary=binary, defaults=LLAMA_CONFIG)
        return engine, "llama-server", dict(LLAMA_CONFIG), shape, LLAMA_CONFIG["ctx_size"], (1, 2, 4)
    if name == "vllm":
        python = vllm_python()
        if python is None:
            print("note: vLLM not installed (`replay engines install-vllm`); skipped")
            return None
        engine = Vllm(model=tiny_hf_path("gpt2"), python=python, served_model_name="tiny")
        kv_tokens = int((engine.kv_cache_space_gib or 1.0) * 1024**3 / shape.kv_bytes_per_token())
        return engine, "vllm", dict(engine.defaults), shape, kv_tokens, (1, 4, 16, 32)
    raise SystemExit(f"--calibrate: unknown engine {name!r} (llama, vllm)")


def calibrate(name: str, n_requests: int, repeats: int, out_dir: Path) -> list[dict]:
    found = launch_engine(name)
    if found is None:
        return []
    engine, kind, config, shape, kv_tokens, batches = found
    tr = eval_trace(n_requests)
    t0 = time.perf_counter()
    with engine.launch() as running:
        started = time.perf_counter() - t0
        samples = probe_prefill(running.url, gap_s=0.3 if kind == "llama-server" else 0.6)
        samples += probe_decode(running.url, batches=batches)
        t_probe = time.perf_counter() - t0
        real_cap, rates, real = workload(running.url, tr, None, repeats)
    t_real = time.perf_counter() - t0
    knobs = mirror_knobs(kind, config)
    first = fit_step_costs(samples, shape)
    # the same probes against the engine with the first fit: what it adds itself comes out (refine)
    path = write_profile(first.profile(shape, name=f"{kind}-fit1", kv_capacity_tokens=kv_tokens), out_dir / f"{kind}-fit1.json")
    # the engine and the runner on CPUs of their own, as `replay run` without --url has them
    engine_cpus, runner_cpus = split_cpus()
    with start_sim(SimConfig(profile=str(path), **knobs), cpus=engine_cpus) as server:
        sim_samples = probe_prefill(server.url, gap_s=0.3 if kind == "llama-server" else 0.6, cpus=runner_cpus)
        sim_samples += probe_decode(server.url, batches=batches, cpus=runner_cpus)
    fit = refine(samples, first, sim_samples)
    profile = fit.profile(shape, name=f"{kind}-fitted", kv_capacity_tokens=kv_tokens)
    path = write_profile(profile, out_dir / f"{kind}-fitted.json")
    t_fit = time.perf_counter() - t0
    with start_sim(SimConfig(profile=str(path), **knobs), cpus=engine_cpus) as server:
        sim_cap, _, sim = workload(server.url, tr, rates, repeats, runner_cpus)
    t_all = time.perf_counter() - t0
    print(
        f"\n{kind}: started in {started:.1f}s, probes {t_probe - started:.1f}s, real stages "
        f"{t_real - t_probe:.1f}s, sim probes {t_fit - t_real:.1f}s, sim stages {t_all - t_fit:.1f}s"
    )
    for label, f in (("fit to probes", first), ("refined", fit)):
        print(
            f"  {label} ({f.n_samples} steps, relative residual rms {100 * f.rel_rms:.1f}%, max "
            f"{100 * f.rel_max:.1f}%): step {1e3 * f.step_overhead_s:.2f} ms + {1e3 * f.per_seq_s:.3f} ms/seq "
            f"+ {1e6 * f.per_token_s:.2f} us/token + {1e9 * f.per_position_s:.3f} ns/position; "
            f"front end {1e3 * f.request_overhead_s:.2f} ms/request"
        )
    for s, m in zip(samples, sim_samples):
        shape = (s.seqs, s.new_tokens, s.context, s.request)
        print(
            f"    probe {'TTFT' if s.request else 'TPOT'} seqs={s.seqs:>2} new={s.new_tokens:>4} ctx={s.context:>4}: "
            f"real {1e3 * s.seconds:7.2f} ms, first fit {1e3 * first.predict(*shape):7.2f} ms, sim with it "
            f"{1e3 * m.seconds:7.2f} ms (new={m.new_tokens}), refined {1e3 * fit.predict(*shape):7.2f} ms"
        )
    shown = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in profile.items()}
    print(f"  profile {path.name}: {json.dumps(shown)}")
    print(f"  sim knobs: {knobs}")
    print(
        f"  capacity (burst of {n_requests}): real {real_cap:.2f} req/s, sim {sim_cap:.2f} req/s "
        f"({100 * (sim_cap - real_cap) / real_cap:+.0f}%)"
    )
    rows = []
    for rate, r, s in zip(rates, real, sim):
        ttft = lambda runs, q: [x["ttft_ms"]["from_intended"][q] for x in runs]  # noqa: E731
        rows.append(
            {
                "engine": kind,
                "rate": rate,
                "repeats": len(r),
                "real_p50": float(np.median(ttft(r, "p50"))),
                "real_p90": float(np.median(ttft(r, "p90"))),
                "real_p50_range": (min(ttft(r, "p50")), max(ttft(r, "p50"))),
                "sim_p50": float(np.median(ttft(s, "p50"))),
                "sim_p90": float(np.median(ttft(s, "p90"))),
                "real_tps": float(np.median([x["output_tokens_per_s"] for x in r])),
                "sim_tps": float(np.median([x["output_tokens_per_s"] for x in s])),
            }
        )
    return rows


def err(sim: float, real: float) -> str:
    return f"{100 * (sim - real) / real:+.0f}%"


def print_table(rows: list[dict]) -> None:
    print(f"\nmedians of {rows[0]['repeats']} runs per stage; the range is the real engine's own spread of TTFT p50")
    print(
        "\n| engine | rate (req/s) | real TTFT p50 / p90 (ms) | real p50 range | sim TTFT p50 / p90 (ms) "
        "| error p50 / p90 | real out tok/s | sim out tok/s | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["real_p50_range"]
        print(
            f"| {r['engine']} | {r['rate']:.2f} | {r['real_p50']:.0f} / {r['real_p90']:.0f} | {lo:.0f}-{hi:.0f} "
            f"| {r['sim_p50']:.0f} / {r['sim_p90']:.0f} | {err(r['sim_p50'], r['real_p50'])} / "
            f"{err(r['sim_p90'], r['real_p90'])} | {r['real_tps']:.0f} | {r['sim_tps']:.0f} "
            f"| {err(r['sim_tps'], r['real_tps'])} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="1000x100,2000x50,200x1000", help="streams x tokens, comma-separated")
    ap.add_argument("--no-peer", action="store_true", help="skip sse-bench-server")
    ap.add_argument(
        "--peer-delay-us",
        type=int,
        default=1000,
        help="the peer's pause before each chunk, so it too writes one chunk per write like a "
        "token stream (default 1000; 0 lets it batch a whole response into few writes)",
    )
    ap.add_argument(
        "--calibrate", default="llama,vllm", help="part 2: real engines to calibrate against (llama, vllm; 'none' skips part 2)"
    )
    ap.add_argument("--eval-requests", type=int, default=48, help="requests in part 2's evaluation workload")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each part 2 stage (the table shows medians)")
    args = ap.parse_args()
    if args.loads != "none":
        part1(args)
    if args.calibrate != "none":
        t0 = time.perf_counter()
        rows = []
        with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
            for name in filter(None, (x.strip() for x in args.calibrate.split(","))):
                rows += calibrate(name, args.eval_requests, args.repeats, Path(tmp))
        if rows:
            print_table(rows)
        print(f"\npart 2 took {time.perf_counter() - t0:.0f}s")


def part1(args: argparse.Namespace) -> None:
    loads = [tuple(int(x) for x in part.split("x")) for part in args.loads.split(",")]
    header = (
        f"{'streams':>7} {'tokens':>6} | {'ok':>5} {'peak open':>9} {'chunks':>8} {'chunks/s':>8} "
        f"{'CPU%':>5} {'us CPU/chunk':>12} | {'peer chunks/s':>13} {'CPU%':>5} {'us CPU/chunk':>12} "
        f"{'rate ratio':>10}"
    )
    print(header)
    print("-" * len(header))
    for n, tokens in loads:
        sim = run_sim(n, tokens)
        peer = None if args.no_peer else run_peer(n, tokens, args.peer_delay_us)
        line = (
            f"{n:>7} {tokens:>6} | {sim['ok']:>5} {sim['peak_open']:>9} {sim['chunks']:>8} "
            f"{sim['chunks_per_s']:>8,.0f} {100 * sim['server_cpu_s'] / sim['span_s']:>5.0f} "
            f"{1e6 * sim['server_cpu_s'] / sim['chunks']:>12.1f} |"
        )
        if peer:
            line += (
                f" {peer['chunks_per_s']:>13,.0f} {100 * peer['server_cpu_s'] / peer['span_s']:>5.0f} "
                f"{1e6 * peer['server_cpu_s'] / peer['chunks']:>12.1f} "
                f"{sim['chunks_per_s'] / peer['chunks_per_s']:>10.2f}"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
