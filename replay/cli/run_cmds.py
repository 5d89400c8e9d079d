"""`replay run` and `replay sweep`: flags -> RunConfig -> library call -> results folder + table."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from contextlib import contextmanager
from pathlib import Path

from replay.cli.report import print_stages, progress_bar
from replay.config import Arrivals, RunConfig, Slo, parse_duration_s, parse_rates, parse_slo
from replay.errors import ConfigError

__all__ = ["register"]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=Path, help="a Trace Parquet file (from `replay generate`, `import` or `capture`)")
    p.add_argument("--url", help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 "
                                 "(default: start the embedded simulated engine)")
    p.add_argument("--sim-profile", default="a100-80g/llama-3-8b",
                   help="without --url: the embedded engine's hardware + model profile (default a100-80g/llama-3-8b)")
    p.add_argument("--sim-config", metavar="JSON",
                   help='without --url: embedded engine knobs, e.g. \'{"max_num_seqs": 64, "time_scale": 0.5}\'')
    p.add_argument("--arrivals", default="trace", choices=["trace", "poisson", "gamma", "constant"],
                   help="send times: the trace's own timing rescaled to the rate (default, keeps bursts), "
                        "or new poisson / gamma / constant arrivals at the rate")
    p.add_argument("--cv", type=float, default=1.0, help="coefficient of variation of gamma arrivals (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for generated arrivals (default 0)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--duration", help="send only requests scheduled in the first S seconds (e.g. 60s, 5m)")
    limit.add_argument("--requests", type=int, help="send only the first N requests")
    p.add_argument("--model", help="model name to send (default: the trace's if served, else the server's first)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the engine stop at EOS (default: ignore_eos so output lengths follow the trace)")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--slo", help="objectives for goodput, e.g. ttft=2s,tpot=100ms,e2e=30s")
    p.add_argument("--slo-attainment", type=float, default=0.9,
                   help="share of requests that must meet the SLO for a stage to pass (default 0.9)")
    p.add_argument("--lag-bound-ms", type=float, default=1.0,
                   help="a stage whose send lag p99 exceeds this is invalid (default 1 ms)")
    p.add_argument("--timeout", default="600s", help="per-request deadline from its send (default 600s)")
    p.add_argument("--stall-timeout", default="120s", help="longest silence inside a response (default 120s)")
    p.add_argument("--max-connections", type=int, default=20000, help="cap on open connections (default 20000)")
    p.add_argument("--worker-threads", type=int, default=1, help="runner I/O threads (default 1)")
    p.add_argument("--out", type=Path, help="results folder (default results/<trace name>-<command>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="replay a trace once against a server",
                       description="Replay a trace open-loop once: each request is sent at its scheduled time "
                                   "whatever the server does; latencies count from that time.")
    _add_common(p)
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=float, help="target mean rate in req/s")
    rate.add_argument("--speedup", type=float, help="compress the trace's own timing K times (default 1 = as recorded)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="replay a trace at rising rates and find the saturation point",
                       description="Replay the trace once per rate; the summary names the first rate where "
                                   "the server stops keeping up or fails the SLO.")
    _add_common(p)
    p.add_argument("--rates", required=True, help="comma-separated req/s, e.g. 1,2,4,8")
    p.add_argument("--max-queue-growth", default="250ms",
                   help="saturated when TTFT (from the intended send) at least doubles through a stage and "
                        "grows by more than this (default 250ms)")
    p.add_argument("--stop-after-saturation", action="store_true", help="skip the rates after the saturation point")
    p.set_defaults(func=cmd_sweep)


@contextmanager
def _target(args: argparse.Namespace, quiet: bool):
    """``(url, runner CPUs)``: --url, or the embedded engine started for this command on CPUs of
    its own (the runner then keeps off them)."""
    if args.url:
        if args.sim_config:
            raise ConfigError("--sim-config: only applies without --url (the embedded engine)")
        yield args.url, ()
        return
    from replay.sim import SimConfig, split_cpus, start_sim

    try:
        overrides = json.loads(args.sim_config) if args.sim_config else {}
    except json.JSONDecodeError as e:
        raise ConfigError(f"--sim-config: not JSON ({e.msg})") from None
    if not isinstance(overrides, dict):
        raise ConfigError("--sim-config: expected a JSON object of knob: value")
    known = {f.name for f in dataclasses.fields(SimConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"--sim-config: unknown knob '{unknown[0]}' (known: {', '.join(sorted(known))})")
    config = SimConfig(profile=args.sim_profile, **overrides)
    engine_cpus, runner_cpus = split_cpus(config.threads)
    server = start_sim(config, cpus=engine_cpus)
    try:
        if not quiet:
            print(f"no --url: replaying against the embedded engine ({args.sim_profile}) at {server.url}",
                  file=sys.stderr)
        yield server.url, runner_cpus
    finally:
        server.stop()


def _config(args: argparse.Namespace, target: tuple[str, tuple[int, ...]], rate: float | None,
            speedup: float | None) -> RunConfig:
    url, cpus = target
    slo = parse_slo(args.slo, args.slo_attainment) if args.slo else Slo(attainment=args.slo_attainment)
    return RunConfig(
        url=url,
        rate=rate,
        speedup=speedup,
        arrivals=Arrivals(kind=args.arrivals, cv=args.cv, seed=args.seed),
        duration_s=parse_duration_s(args.duration, "--duration") if args.duration else None,
        requests=args.requests,
        model=args.model,
        ignore_eos=args.ignore_eos,
        api_key=args.api_key,
        timeout_s=parse_duration_s(args.timeout, "--timeout"),
        stall_timeout_s=parse_duration_s(args.stall_timeout, "--stall-timeout"),
        max_connections=args.max_connections,
        worker_threads=args.worker_threads,
        cpus=cpus,
        lag_bound_ms=args.lag_bound_ms,
        slo=slo,
    )


def _out(args: argparse.Namespace, command: str) -> Path:
    return args.out or Path("results") / f"{args.trace.stem}-{command}"


def cmd_run(args: argparse.Namespace) -> int:
    from replay.results import stage_file, write_stage, write_summary
    from replay.runner import run_stage
    from replay.trace import read_trace

    trace = read_trace(args.trace)
    out = _out(args, "run")
    with _target(args, args.json) as target, progress_bar(quiet=args.json) as bar:
        config = _config(args, target, args.rate, args.speedup)
        result = run_stage(trace, config, bar.stage(f"{config.rate or 'as recorded'} req/s"))
    path = write_stage(result, stage_file(out, 0, config.rate))
    summary = {"trace": str(args.trace), "url": config.url, "stages": [result.summary], "files": [path.name]}
    write_summary(out, summary)
    _report(args, [config.rate], summary, out)
    if result.interrupted:
        print(f"interrupted: partial results kept in {out}", file=sys.stderr)
        return 130
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from replay.results import stage_file, write_stage, write_summary
    from replay.sweep import saturation, sweep
    from replay.trace import read_trace

    rates = parse_rates(args.rates)
    growth_s = parse_duration_s(args.max_queue_growth, "--max-queue-growth")
    trace = read_trace(args.trace)
    out = _out(args, "sweep")
    files: list[str] = []
    summaries: list[dict] = []

    def on_stage(i: int, rate: float, result) -> None:
        files.append(write_stage(result, stage_file(out, i, rate)).name)
        summaries.append(result.summary)
        sat_rate, reason = saturation(rates[: i + 1], summaries, growth_s)
        write_summary(out, _sweep_summary(args, config, rates, summaries, files, sat_rate, reason))

    with _target(args, args.json) as target, progress_bar(quiet=args.json) as bar:
        config = _config(args, target, None, None)
        result = sweep(trace, config, rates, queue_growth_s=growth_s,
                       progress=lambda rate: bar.stage(f"{rate:g} req/s"), on_stage=on_stage,
                       stop_after_saturation=args.stop_after_saturation)
    summary = _sweep_summary(args, config, rates, summaries, files, result.saturation_rate, result.saturation_reason)
    write_summary(out, summary)
    _report(args, rates, summary, out)
    if any(s.interrupted for s in result.stages):
        print(f"interrupted: partial results kept in {out}", file=sys.stderr)
        return 130
    return 0


def _sweep_summary(args, config: RunConfig, rates, summaries, files, sat_rate, reason) -> dict:
    return {
        "trace": str(args.trace),
        "url": config.url,
        "rates": list(rates),
        "arrivals": dataclasses.asdict(config.arrivals),
        "stages": summaries,
        "files": files,
        "saturation": {"rate": sat_rate, "reason": reason},
    }


def _report(args: argparse.Namespace, rates, summary: dict, out: Path) -> None:
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print_stages(rates, summary["stages"], summary.get("saturation"))
    print(f"results: {out}")
