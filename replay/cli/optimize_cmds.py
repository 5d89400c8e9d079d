"""`replay optimize`: tune an engine's knobs against a trace, trusting only wins beyond the noise."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay.config import LAG_BOUND_MS, RETRY_INVALID, SLO_ATTAINMENT, RunConfig, Slo, parse_duration_s, parse_slo
from replay.errors import ConfigError

if TYPE_CHECKING:
    from optimizer.pool import Pool

__all__ = ["register", "parse_budget", "ENGINE_CHOICES"]

ENGINE_CHOICES = ["sim", "llama-server", "vllm", "sglang", "llama.cpp"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize",
        help="tune an engine's config against a trace: noise floor, diagnosis, verdicts that repeat",
        description="Measure the baseline config several times on fresh engine starts (its noise floor), name "
        "its bottleneck from the engine's metrics over a sweep (0.5, 1 and 2 x --rate on one start), then "
        "try configs from --space in the order the "
        "diagnosis suggests. A candidate is better only when it beats the baseline by 3 spreads + 1% "
        "and does it again on a fresh restart; every experiment, its hypothesis and verdict go to a "
        "SQLite ledger, so a campaign run again resumes. Exit 0 when it ran (whatever it found); 1 "
        "when it stopped (a failed or too noisy baseline; after the start, the report of what was "
        "judged until then is written).",
    )
    p.add_argument("trace", type=Path, help="the workload (a Trace; it must replay faithfully, see --allow-unfaithful)")
    # replay.targets.registry's ENGINES and ALIASES (not imported here: the CLI starts without the adapters)
    p.add_argument(
        "--engine",
        default="sim",
        choices=ENGINE_CHOICES,
        help="the engine to start for every measurement: sim (the embedded engine, default), "
        "llama-server (also called llama.cpp), vllm or sglang",
    )
    p.add_argument("--model", help="llama-server: a GGUF file; vllm / sglang: a model folder")
    p.add_argument("--sim-profile", default="a100-80g/llama-3.1-8b", help="sim: hardware + model profile")
    p.add_argument(
        "--sim-time-scale",
        type=float,
        default=1.0,
        help="sim: modelled time x this = wall time (0.1: ten times faster; default 1)",
    )
    p.add_argument("--space", type=Path, help="a TOML space file ([knobs.NAME] values = [...], [constraints] rules)")
    from replay.targets.registry import ENGINES

    own = "; ".join(f"{name}: {','.join(cls.default_knobs)}" for name, cls in ENGINES.items())
    p.add_argument(
        "--knobs",
        help="without --space: the knobs to tune, each over default values around the engine's default "
        f"(default: the engine's own; {own}; `replay engines list` lists every knob)",
    )
    p.add_argument(
        "--baseline",
        default="{}",
        metavar="JSON",
        help="the starting config, e.g. '{\"max_num_seqs\": 2}' (default: the engine's defaults)",
    )
    p.add_argument(
        "--objective",
        default="goodput",
        choices=["goodput", "throughput", "max_rate"],
        help="goodput (req/s meeting --slo, default) or throughput (req/s completed), at --rate; or "
        "max_rate: the highest rate whose stage meets --slo (doubling / halving from --rate, then "
        "3 bisections, on one engine start per measurement)",
    )
    p.add_argument("--rate", type=float, required=True, help="req/s each measurement offers (max_rate: the first rate tried)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--duration", default=None, help="each measurement's window, e.g. 30s")
    limit.add_argument("--requests", type=int, help="each measurement sends the first N requests")
    p.add_argument("--slo", help="objectives for goodput, e.g. ttft=2s,tpot=100ms")
    p.add_argument(
        "--slo-attainment", type=float, default=SLO_ATTAINMENT, help=f"share that must meet the SLO (default {SLO_ATTAINMENT:g})"
    )
    p.add_argument("--gpus", type=int, default=1, help="GPUs the engine uses: the objective is divided by it")
    p.add_argument(
        "--budget",
        default="trials=20,time=2h",
        help="caps: trials=N, time=DURATION, gpu_hours=H, gpus=G (GPUs busy at once: parallel "
        "measurements x --gpus) (default trials=20,time=2h)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="measure N configs at once, each on its own engine instance (a round of N proposals; "
        "on one machine they share its CPUs / GPUs) (default 1)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="run the measurements as Ray tasks (each asking for --gpus GPUs) on the cluster at ADDRESS "
        "(default: RAY_ADDRESS, or a new one on this machine); --parallel caps how many at once; "
        "every node needs the engine and model",
    )
    p.add_argument(
        "--search",
        default="coordinate",
        choices=["coordinate", "tpe", "random"],
        help="coordinate descent in the diagnosis's knob order (default), TPE (Optuna) or random",
    )
    p.add_argument("--repeats", type=int, default=4, help="baseline runs for the noise floor (default 4)")
    p.add_argument(
        "--recheck-every",
        type=int,
        metavar="N",
        help="measure the baseline again after every N candidate measurements, beside them, so that "
        "drift widens the noise floor (default: optimizer.campaign.RECHECK_EVERY, 4; 0: never)",
    )
    p.add_argument(
        "--max-noise",
        type=float,
        metavar="SHARE",
        help="stop when the baseline's runs spread more than this share of their median: the bench is "
        "too unstable to decide (default: optimizer.verdict.MAX_NOISE, 0.25)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for TPE / random search (default 0)")
    p.add_argument(
        "--allow-lossy",
        action="store_true",
        help="let the space hold lossy knobs (KV / weight precision); their wins need a person's approval",
    )
    p.add_argument(
        "--allow-unfaithful",
        action="store_true",
        help="tune even when a replay is not faithful to the trace (recorded in the results)",
    )
    p.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="let a replay whose fidelity verdict is 'cannot tell' (the trace is too small to judge a "
        "metric) pass the fidelity gate (recorded in the results); it fails the gate by default",
    )
    p.add_argument(
        "--lag-bound-ms",
        type=float,
        default=LAG_BOUND_MS,
        help=f"a stage over this send lag p99 is invalid (default {LAG_BOUND_MS:g} ms)",
    )
    p.add_argument(
        "--retry-invalid",
        type=int,
        default=RETRY_INVALID,
        metavar="N",
        help="measure a config again, from a fresh start of the engine, when the runner made its stage "
        "invalid (send lag p99 over --lag-bound-ms: the machine held the sender up, not the config), "
        f"up to N more times; the ledger names the attempts dropped (default {RETRY_INVALID}: an invalid "
        "stage is an invalid measurement, and an invalid baseline stops the campaign)",
    )
    p.add_argument("--ledger", type=Path, help="the SQLite ledger (default OUT/ledger.sqlite)")
    p.add_argument("--out", type=Path, help="results folder (default results/<trace>-optimize)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_optimize)


def parse_budget(text: str):
    from optimizer import Budget

    values: dict[str, Any] = {}  # Budget's fields: trials and gpus whole, time_s and gpu_hours numbers
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, _, value = part.partition("=")
        if key == "trials":
            try:
                values["trials"] = int(value)
            except ValueError:
                raise ConfigError(f"--budget: trials must be a whole number, got {value!r}") from None
        elif key == "time":
            values["time_s"] = parse_duration_s(value, "--budget time")
        elif key == "gpu_hours":
            try:
                values["gpu_hours"] = float(value)
            except ValueError:
                raise ConfigError(f"--budget: gpu_hours must be a number, got {value!r}") from None
        elif key == "gpus":
            try:
                values["gpus"] = int(value)
            except ValueError:
                raise ConfigError(f"--budget: gpus must be a whole number, got {value!r}") from None
        else:
            raise ConfigError(f"--budget: '{part}' is not one of trials=N, time=DURATION, gpu_hours=H, gpus=G")
    return Budget(**values)


def _engine(args: argparse.Namespace):
    from replay.targets.registry import engine_class

    cls: type[Any] = engine_class(args.engine)  # each adapter's constructor takes its own arguments
    if cls.name == "sim":
        return cls(profile=args.sim_profile, time_scale=args.sim_time_scale)
    if not args.model:
        raise ConfigError(f"--model: {cls.name} needs a model to serve")
    return cls(model=args.model)


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    if name == "vllm":
        from replay.targets.vllm_install import VLLM_VERSION

        return VLLM_VERSION
    if name == "llama-server":
        from replay.llamacpp_sdist import SDIST_VERSION

        return SDIST_VERSION
    try:  # the embedded engine is this package's; another engine is its own package
        return version("faithful-replay" if name == "sim" else name)
    except PackageNotFoundError:
        return "unknown"


def cmd_optimize(args: argparse.Namespace) -> int:
    from optimizer import Campaign, CampaignStopped, LocalPool, Objective, RayPool, SerialPool, Space, measure_on_engine
    from optimizer.campaign import RECHECK_EVERY, workload_hash
    from optimizer.verdict import MAX_NOISE
    from optimizer.report import print_result, verdict_text
    from optimizer.report_files import write_result
    from replay.traffic import prefix_reuse_share
    from replay.sim import SIM_DEFAULTS
    from replay.trace import read_trace

    trace = read_trace(args.trace)
    engine = _engine(args)
    try:
        baseline = json.loads(args.baseline)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--baseline: not JSON ({e.msg})") from None
    if not isinstance(baseline, dict):
        raise ConfigError("--baseline: expected a JSON object of knob: value")
    baseline = engine.check(baseline)
    if args.space:
        space = Space.load(engine.name, engine.knobs, args.space, allow_lossy=args.allow_lossy)
    else:
        names = [n.strip() for n in args.knobs.split(",") if n.strip()] if args.knobs is not None else list(engine.default_knobs)
        space = Space.of(engine.name, engine.knobs, {n: None for n in names}, allow_lossy=args.allow_lossy)
    slo = parse_slo(args.slo, args.slo_attainment) if args.slo else Slo(attainment=args.slo_attainment)
    if args.objective in ("goodput", "max_rate") and slo.empty:
        raise ConfigError(f"--slo: the {args.objective} objective needs SLOs (or use --objective throughput)")
    # the embedded engine as a fleet routes sessions by a header: the runner sends each root session in it
    fleet = engine.name == "sim" and bool({"replicas", "router"} & ({d.knob.name for d in space.dimensions} | set(baseline)))
    run = RunConfig(
        url="http://127.0.0.1:0",
        session_header=SIM_DEFAULTS["session_header"] if fleet else None,
        rate=args.rate,
        slo=slo,
        lag_bound_ms=args.lag_bound_ms,
        duration_s=parse_duration_s(args.duration, "--duration") if args.duration else None,
        requests=args.requests,
    )
    objective = Objective(args.objective, gpus=args.gpus)
    out = args.out or Path("results") / f"{args.trace.stem}-optimize"
    identity = {
        "engine": engine.name,
        "version": _version(engine.name),
        "model": str(args.model or args.sim_profile),
        "workload": workload_hash(trace),
        "objective": args.objective,
        "rate": args.rate,
        "slo": args.slo or "",
        "gpus": args.gpus,
    }
    measure = measure_on_engine(
        engine,
        trace,
        run,
        objective,
        live=trace,
        allow_unfaithful=args.allow_unfaithful,
        allow_inconclusive=args.allow_inconclusive,
        baseline=baseline,
        retry_invalid=args.retry_invalid,
    )
    budget = parse_budget(args.budget)
    if args.parallel < 1:
        raise ConfigError(f"--parallel: needs at least 1, got {args.parallel}")
    if budget.gpus is not None and budget.gpus < args.gpus:
        raise ConfigError(f"--budget: gpus={budget.gpus} is fewer than one engine's --gpus {args.gpus}")
    pool: Pool
    if args.ray:
        pool = RayPool(
            args.parallel, address=None if args.ray == "auto" else args.ray, gpus=args.gpus if engine.name != "sim" else 0
        )
    else:
        pool = LocalPool(args.parallel) if args.parallel > 1 else SerialPool()
    campaign = Campaign(
        space=space,
        measure=measure,
        ledger=args.ledger or out / "ledger.sqlite",
        identity=identity,
        baseline=baseline,
        repeats=args.repeats,
        budget=budget,
        searcher=args.search,
        seed=args.seed,
        gpus=args.gpus,
        offered_reuse=prefix_reuse_share(trace),
        pool=pool,
        recheck_every=RECHECK_EVERY if args.recheck_every is None else args.recheck_every,
        max_noise=MAX_NOISE if args.max_noise is None else args.max_noise,
    )
    try:
        if not args.json:
            print(
                f"measuring the baseline {json.dumps(baseline)} {args.repeats} times on fresh {engine.name} starts"
                f"{f', {campaign.slots} at a time' if campaign.slots > 1 else ''}",
                file=sys.stderr,
            )
        try:
            campaign.start()
        except CampaignStopped as e:
            print(f"error: optimize: {e}", file=sys.stderr)
            return 1
        if not args.json:
            d = campaign.diagnosis
            if d is not None:  # start() diagnoses the baseline
                print(f"bottleneck: {d.bottleneck} ({d.evidence})", file=sys.stderr)
        try:
            result, stop = (
                campaign.run(
                    progress=None
                    if args.json
                    else lambda step: print(f"  {step.hypothesis.get('change', '')}: {verdict_text(step)}", file=sys.stderr)
                ),
                None,
            )
        except CampaignStopped as e:  # result.stopped says why; the report shows what was judged
            stopped = campaign.result
            assert stopped is not None  # start() returned above
            result, stop = stopped, e
    finally:
        campaign.close()
    if args.allow_unfaithful:
        n = result.fidelity_overridden
        result.stopped += (
            f" (--allow-unfaithful: {n} measurement{'s' * (n != 1)} failed the fidelity gate and "
            f"{'were' if n != 1 else 'was'} kept)"
            if n
            else " (--allow-unfaithful: every measurement passed the fidelity gate)"
        )
    if args.allow_inconclusive and not args.allow_unfaithful:
        n = result.fidelity_inconclusive
        result.stopped += (
            f" (--allow-inconclusive: {n} measurement{'s' * (n != 1)} could not be told faithful "
            f"and {'were' if n != 1 else 'was'} kept)"
            if n
            else " (--allow-inconclusive: every measurement was judged faithful)"
        )
    paths = write_result(result, out, engine)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print_result(result, engine)
        print(f"report: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if stop is not None:
        print(f"error: optimize: {stop}", file=sys.stderr)
        return 1
    return 0
