"""`replay run` and `replay sweep`: flags -> RunConfig -> library call -> results folder + table."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from replay.cli.fidelity_cmds import add_outcome_flags, check_outcome_flags
from replay.cli.report import print_stages, progress_bar, raw_text_warning
from replay.config import (
    LAG_BOUND_MS,
    RETRY_INVALID,
    RUNNER_DEFAULTS,
    SESSION_MODES,
    SLO_ATTAINMENT,
    Arrivals,
    RunConfig,
    Slo,
    parse_duration_s,
    parse_header,
    parse_rates,
    parse_slo,
    parse_users,
)
from replay.errors import ConfigError
from replay.fleet import ROUTES, fleet_targets

__all__ = ["register"]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "trace", type=Path, help="a Trace: a Parquet file (from `replay generate` or `import`) or a `replay capture` folder"
    )
    p.add_argument(
        "--url",
        action="append",
        help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 or "
        "https://gateway.example.com (default: start the embedded simulated engine); given several "
        "times, a fleet of replicas that the runner routes among (--route; docs/fleets.md)",
    )
    p.add_argument(
        "--targets",
        metavar="FILE",
        help="a fleet's replicas, one a line: 'NAME URL' or just 'URL' (named by its host:port); # comments; instead of --url",
    )
    p.add_argument(
        "--route",
        choices=ROUTES,
        help="how a fleet's requests are routed, each as it is sent (default round-robin): round-robin "
        "cycles; session keeps a session (subagents with their root) on the replica it first got; "
        "prefix picks the replica whose recent requests share the longest block-hash prefix; "
        "least-loaded picks the fewest in flight (docs/fleets.md). Needs two targets or more",
    )
    p.add_argument(
        "--sim-profile",
        default=None,
        help="without --url: the embedded engine's hardware + model profile (default a100-80g/llama-3.1-8b, "
        "128k context; h100-80g/qwen3-4b-2507, 256k, for a trace whose longest request the default does not hold)",
    )
    p.add_argument(
        "--sim-config",
        metavar="JSON",
        help='without --url: embedded engine knobs, e.g. \'{"max_num_seqs": 64, "time_scale": 0.5}\'',
    )
    p.add_argument(
        "--replicas",
        type=int,
        help="without --url: run the embedded engine as a fleet of N replicas behind its own router (each its own "
        "scheduler, KV cache and modelled compute, as N GPUs; docs/sim-engine.md); default 1",
    )
    p.add_argument(
        "--router",
        metavar="POLICY",
        help="without --url, with --replicas: the embedded fleet's own server-side router (the policies of --route, "
        "which routes among --url targets client-side): round-robin (default), session, prefix or least-loaded",
    )
    p.add_argument(
        "--session-header",
        metavar="NAME",
        help="send each request's root session id (a subagent's: the session that started it) in header NAME, as "
        "inference-perf's session token, for a server-side router's session affinity (e.g. x-session-id); the "
        "embedded fleet (--replicas > 1) gets its own header without this flag",
    )
    p.add_argument(
        "--arrivals",
        default="trace",
        choices=["trace", "poisson", "gamma", "constant"],
        help="send times: the trace's own timing (default, keeps bursts) or new poisson / gamma / "
        "constant arrivals, compressed uniformly so each stage offers the rate over its window",
    )
    p.add_argument("--cv", type=float, default=1.0, help="coefficient of variation of gamma arrivals (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for generated arrivals (default 0)")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument(
        "--duration",
        help="the stage's window: send the requests due in its first S seconds "
        "(e.g. 60s, 5m); with a rate, the window offers that rate",
    )
    limit.add_argument(
        "--requests",
        type=int,
        help="send only the first N requests; with a rate, they offer that rate from the first send to the last",
    )
    p.add_argument("--model", help="model name to send (default: the trace's if served, else the server's first)")
    p.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the engine stop at EOS (default: ignore_eos so output lengths follow the trace)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY") or None,
        help="sent as 'Authorization: Bearer KEY' on every request and the target check (default: $OPENAI_API_KEY); never stored",
    )
    tls = p.add_mutually_exclusive_group()
    tls.add_argument(
        "--ca-cert",
        metavar="FILE",
        help="an https target's certificate must chain to a certificate in this PEM file (a private "
        "CA, a self-signed gateway) instead of the system's roots",
    )
    tls.add_argument("--insecure", action="store_true", help="accept an https target's certificate unchecked (still encrypted)")
    p.add_argument(
        "--metrics-url",
        metavar="URL|none",
        help="the engine's Prometheus endpoint, read every second during each stage (KV usage, "
        "running / waiting, prefix-cache hits, preemptions: summary.json's engine_metrics; "
        "default: the target's /metrics when it answers; none: not read)",
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an HTTP header sent on every request and the target check (repeatable; "
        "e.g. a gateway's tenant or route header); never stored",
    )
    p.add_argument("--slo", help="objectives for goodput, e.g. ttft=2s,tpot=100ms,e2e=30s")
    p.add_argument(
        "--slo-attainment",
        type=float,
        default=SLO_ATTAINMENT,
        help=f"share of requests that must meet the SLO for a stage to pass (default {SLO_ATTAINMENT:g})",
    )
    p.add_argument(
        "--lag-bound-ms",
        type=float,
        default=LAG_BOUND_MS,
        help=f"a stage whose send lag p99 exceeds this is invalid (default {LAG_BOUND_MS:g} ms)",
    )
    d = RUNNER_DEFAULTS
    p.add_argument(
        "--sessions",
        default="auto",
        choices=list(SESSION_MODES),
        help="auto (default): dag when the Trace has dependencies (schema 3 depends_on), else open; "
        "open: every request at its scheduled time; causal: a session's turn k also waits for the "
        "end of turn k-1 plus the recorded think time; dag: a request also waits for the end of "
        "every request it depends on plus its recorded wait (fan-out siblings leave together, a "
        "join waits for all). First turns stay open-loop; how far requests slipped is reported "
        "apart from the send lag",
    )
    p.add_argument(
        "--keep-waits",
        action="store_true",
        help="with --sessions dag, apply the recorded waits (tool and think times) as they were, not "
        "scaled as the stage scales time",
    )
    p.add_argument(
        "--answers",
        default="engine",
        choices=["engine", "recorded"],
        help="with --sessions causal or dag, the earlier answers a turn resends: engine (default): the "
        "ones the target streamed, as a live client resends them (its prefix cache then sees "
        "its own answers); recorded: the trace's, as stored",
    )
    p.add_argument(
        "--timeout",
        default=f"{d['timeout_s']:g}s",
        help=f"per-request deadline from its send, queueing in the engine included (default {d['timeout_s']:g}s)",
    )
    p.add_argument(
        "--stall-timeout",
        default=f"{d['stall_timeout_s']:g}s",
        help=f"longest silence inside a response once its first token arrived (default {d['stall_timeout_s']:g}s)",
    )
    p.add_argument(
        "--drain",
        default=f"{d['drain_s']:g}s",
        help=f"how long a stage waits after its last scheduled send; requests still open then are "
        f"cut off and miss the SLO (default {d['drain_s']:g}s, 0 = no limit)",
    )
    p.add_argument(
        "--warm-connections",
        type=int,
        help="keep-alive connections opened before t0 and kept open while the stage runs (default: "
        "the most requests the schedule has in flight at once, each taking its recorded or "
        "expected response time, at most 64; or, when more, the most requests due within any "
        "0.1 s, at most 2,048: a cushion while the I/O thread is off its CPU)",
    )
    p.add_argument(
        "--chunk-times",
        default="all",
        choices=["all", "none"],
        help="keep every chunk's arrival time (all, default: 4 bytes a chunk) or only count chunks",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=d["max_connections"],
        help=f"cap on requests in flight, hence open connections (default {d['max_connections']})",
    )
    p.add_argument(
        "--worker-threads", type=int, default=d["worker_threads"], help=f"runner I/O threads (default {d['worker_threads']})"
    )
    p.add_argument("--out", type=Path, help="results folder (default results/<trace name>-<command>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--fidelity",
        type=Path,
        metavar="LIVE",
        help="after the stages, judge each one against the live Trace LIVE (as `replay fidelity` does): "
        "a fidelity column in the table, a fidelity entry per stage in the summary, and "
        "fidelity.json / .md / .html in the results folder; exit 1 when a stage is unfaithful, "
        "3 when one cannot be told (the live trace is too small to judge a metric)",
    )
    p.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="with --fidelity: exit 0 when no stage is unfaithful but some cannot be told (recorded in summary.json)",
    )
    add_outcome_flags(p)  # --judge-outcomes, --aa-runs: with --fidelity
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="K",
        help="run every stage K times (default 1): the stages once per repeat, each repeat on a fresh "
        "start of the embedded engine when it is the target; the table then shows each load's "
        "median +- spread over its valid repeats, and a sweep's saturation as an interval (the "
        "highest rate that held in every repeat, the lowest that held in none, the share between). "
        "`replay compare` judges two such folders by their repeats",
    )
    p.add_argument(
        "--keep-prefix-cache",
        action="store_true",
        help="do not ask the target to drop its prefix cache before each stage (a sweep's stages and "
        "the repeats of a run; by default it POSTs /reset_prefix_cache, vLLM's and the embedded "
        "engine's, or /flush_cache, SGLang's: else a stage hits what the stages before it cached "
        "of the same requests)",
    )
    p.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="with --ray: split each stage by whole root session (subagents with their root) into N "
        "shards, one Ray actor per shard on its own node where the cluster has them, all starting at "
        "one instant on the driver's clock; the results are merged into this folder with a shard "
        "column, and a stage is valid only when every shard kept its schedule (docs/sharding.md)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the --shards on a Ray cluster: ADDRESS (e.g. 10.0.0.1:6379), or none for the "
        "cluster running on this machine (else a Ray started for this command); the results folder "
        "must be on a file system every node writes to",
    )
    p.add_argument(
        "--retry-invalid",
        type=int,
        default=RETRY_INVALID,
        metavar="N",
        help="run a stage that came out invalid (the runner's send lag p99 over --lag-bound-ms: the "
        "machine held the sender up) again, up to N more times, after a prefix-cache reset; the first "
        "valid attempt is kept (else the last), and the summary and the table name the attempts "
        f"discarded, which nothing judges (--fidelity neither) (default {RETRY_INVALID}: every stage as it ran)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="replay a trace once against a server",
        description="Replay a trace open-loop once: each request is sent at its scheduled time "
        "whatever the server does; latencies count from that time. With "
        "--concurrency N, closed loop instead: N users back to back.",
    )
    _add_common(p)
    rate = p.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate",
        type=float,
        help="req/s the stage offers over its window (--duration or "
        "--requests); the arrivals' shape is compressed uniformly to it",
    )
    rate.add_argument("--speedup", type=float, help="compress the trace's own timing K times (default 1 = as recorded)")
    rate.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help=f"closed loop instead: N users, each sending its next request the moment its last one "
        f"ended ({CLOSED_LOOP}); with --requests, not --duration",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I of N (I from 0: a Kubernetes Indexed Job's $JOB_COMPLETION_INDEX) of "
        "each stage, with --start-at; every pod runs the same flags into its own --out, and "
        "`replay shards merge` merges the folders (docs/sharding.md, examples/k8s/)",
    )
    p.add_argument(
        "--start-at",
        metavar="T",
        help="with --shard: the instant the shard starts, on this node's clock (Unix seconds, or ISO "
        "8601 with a zone: 2026-12-08T01:00:00Z); the same T for every shard",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "sweep",
        help="replay a trace at rising rates and find the saturation point",
        description="Replay the trace once per rate; the summary names the first rate where "
        "the server stops keeping up (more than 10% of requests fail, a queue "
        "builds, or the SLO fails), or says it is undetermined there when that "
        "stage's own send lag made it invalid. Beside summary.json it writes "
        "sweep.html: latency p50 / p99 and goodput against the achieved rate, the "
        "saturation point marked, and the engine's KV usage and queue per stage.",
    )
    _add_common(p)
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--concurrency",
        metavar="N,N,...",
        help=f"closed-loop stages instead of rates, one per number of users, e.g. 1,4,16 ({CLOSED_LOOP})",
    )
    load.add_argument(
        "--rates",
        help="comma-separated req/s, e.g. 1,2,4,8; or auto[:N] to find the saturation rate with short "
        "probe stages (--probe-duration each, at most 10: doubling, then bisecting to within 10%%) and run N "
        "stages (default 5) from a quarter of it to 1.5 times it",
    )
    p.add_argument(
        "--max-queue-growth",
        default="250ms",
        help="saturated when TTFT (from the intended send) at least doubles through a stage and "
        "grows by more than this (default 250ms)",
    )
    p.add_argument(
        "--probe-duration",
        default="10s",
        help="with --rates auto: the window of each probe stage (default 10s); the search takes at "
        "most 10 probes of this window plus up to 60s each for their last responses",
    )
    p.add_argument(
        "--stop-after-saturation",
        action="store_true",
        help="skip the rates after the saturation point (or after the stage where it is undetermined)",
    )
    p.set_defaults(func=cmd_sweep)


# how a closed-loop stage differs, for --help
CLOSED_LOOP = (
    "as vLLM's benchmark --max-concurrency and GuideLLM's concurrent profile: at most N in flight, no "
    "rate; latencies count from each request's release; the table's load column says 'N users'; with "
    "--sessions causal each user replays whole sessions, with their recorded think times"
)

# RunConfig needs a URL before the embedded engine has one: flags are checked with this, before it starts
_EMBEDDED_URL = "http://127.0.0.1:0"


def _sim_config(args: argparse.Namespace, trace):
    """The embedded engine's config from --sim-profile / --sim-config (None with --url); without
    --sim-profile, the profile that holds ``trace``'s longest request (replay.sim.embedded_profile),
    written back into ``args.sim_profile``."""
    if args.url or args.targets:
        for flag, value in (("--sim-config", args.sim_config), ("--replicas", args.replicas), ("--router", args.router)):
            if value:
                raise ConfigError(f"{flag}: only applies without --url (the embedded engine)")
        return None
    from replay.sim import SimConfig

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
    if args.sim_profile is None:
        import polars as pl

        from replay.sim import embedded_profile

        longest = trace.df.select(pl.col("input_tokens") + pl.max_horizontal("output_tokens", "max_tokens").fill_null(0)).max()
        args.sim_profile = embedded_profile(int(longest.item() or 0))
    fleet = {"replicas": args.replicas, "router": args.router, "session_header": args.session_header}
    return SimConfig(profile=args.sim_profile, **{**overrides, **{k: v for k, v in fleet.items() if v is not None}})


@contextmanager
def _target(args: argparse.Namespace, config: RunConfig, sim_config, quiet: bool):
    """`config` aimed at the target: --url as given, or the embedded engine started for this
    command on CPUs of its own (the runner then keeps off them) and at a lower CPU priority
    (replay.sim.ENGINE_PRIORITY)."""
    if sim_config is None:
        yield config
        return
    from replay.sim import engine_priority, split_cpus, start_sim

    engine_cpus, runner_cpus = split_cpus(sim_config.threads)
    server = start_sim(sim_config, cpus=engine_cpus, priority=engine_priority())
    try:
        if not quiet:
            print(f"no --url: replaying against the embedded engine ({args.sim_profile}) at {server.url}", file=sys.stderr)
        if sim_config.replicas > 1 and config.session_header is None:  # the fleet's router reads it
            config = dataclasses.replace(config, session_header=sim_config.session_header)
        yield dataclasses.replace(config, url=server.url, cpus=runner_cpus)
    finally:
        server.stop()


def _fresh_target(args: argparse.Namespace, sim_config):
    """sweep()'s `target` with --repeats: the embedded engine started afresh for each repeat."""
    if args.repeats == 1 or sim_config is None:
        return None
    return lambda config: _target(args, config, sim_config, quiet=True)


def _config(args: argparse.Namespace, rate: float | None, speedup: float | None) -> RunConfig:
    """Every run flag checked into a RunConfig (aimed at --url, or a stand-in for the embedded engine)."""
    slo = parse_slo(args.slo, args.slo_attainment) if args.slo else Slo(attainment=args.slo_attainment)
    targets = fleet_targets(args.url or [], args.targets)
    return RunConfig(
        url=targets[0].url if targets else _EMBEDDED_URL,
        targets=targets if len(targets) > 1 else (),
        route=args.route,
        rate=rate,
        speedup=speedup,
        arrivals=Arrivals(kind=args.arrivals, cv=args.cv, seed=args.seed),
        duration_s=parse_duration_s(args.duration, "--duration") if args.duration else None,
        requests=args.requests,
        model=args.model,
        ignore_eos=args.ignore_eos,
        api_key=args.api_key,
        headers=tuple(parse_header(h) for h in args.header),
        session_header=args.session_header,
        ca_cert=args.ca_cert,
        insecure=args.insecure,
        metrics_url=args.metrics_url,
        sessions=args.sessions,
        keep_waits=args.keep_waits,
        answers=args.answers,
        timeout_s=parse_duration_s(args.timeout, "--timeout"),
        stall_timeout_s=parse_duration_s(args.stall_timeout, "--stall-timeout"),
        drain_s=parse_duration_s(args.drain, "--drain"),
        warm_connections=args.warm_connections,
        chunk_times=args.chunk_times == "all",
        max_connections=args.max_connections,
        worker_threads=args.worker_threads,
        lag_bound_ms=args.lag_bound_ms,
        slo=slo,
    )


def _stage_runner(args: argparse.Namespace, held: contextlib.ExitStack):
    """sweep()'s `stage_runner`: the shards on Ray (--shards N --ray), one pod's shard (--shard
    I/N --start-at T), or None (one runner here). Bad combinations are ConfigErrors naming the flag."""
    shard, start_at = getattr(args, "shard", None), getattr(args, "start_at", None)
    if args.shards is not None and args.ray is None:
        raise ConfigError("--shards: needs --ray [ADDRESS] (the shards run as Ray actors; without Ray, `replay run --shard I/N`)")
    if args.ray is not None and args.shards is None:
        raise ConfigError("--ray: give --shards N (the number of shards to split each stage into)")
    if start_at is not None and shard is None:
        raise ConfigError("--start-at: only with --shard I/N")
    if shard is not None and start_at is None:
        raise ConfigError("--shard: needs --start-at T (the instant every shard starts at)")
    if shard is not None and args.shards is not None:
        raise ConfigError("--shard and --shards: give one (one pod's shard, or all of them on Ray)")
    if (args.shards is not None or shard is not None) and getattr(args, "concurrency", None) is not None:
        raise ConfigError("--shards: a closed-loop stage (--concurrency) cannot be sharded: its users share one cap")
    if shard is not None:
        from replay.shards import parse_shard, parse_start_at, slice_runner

        return slice_runner(*parse_shard(shard), parse_start_at(str(start_at)))
    if args.shards is None:
        return None
    from replay.shards import RayShards

    if args.shards < 1:
        raise ConfigError(f"--shards: must be a whole number >= 1, got {args.shards}")
    return held.enter_context(RayShards(args.shards, args.ray or None))


def _out(args: argparse.Namespace, command: str) -> Path:
    return args.out or Path("results") / f"{args.trace.stem}-{command}"


class _Saver:
    """Writes each stage's rows as they come, its file when it ends, and rewrites summary.json
    after every stage (crash safety: replay.results)."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args, self.out = args, out
        self.files: list[str] = []  # the stage files written, by name
        self.fidelity: list[dict] | None = None  # per stage, once --fidelity judged them
        self.fidelity_state: str | None = None  # the report's, once judged

    def rows(self, index: int, config: RunConfig):
        from replay.results import StageParts, stage_file

        return StageParts(stage_file(self.out, index, config.rate, config.concurrency))

    def __call__(self, result) -> None:
        from replay.results import stage_file, write_stage, write_summary

        i = len(result.stages) - 1
        c = result.stages[i].config
        self.files.append(write_stage(result.stages[i], stage_file(self.out, i, c.rate, c.concurrency)).name)
        write_summary(self.out, self.summary(result))

    def summary(self, result) -> dict:
        summary = result.to_json(trace=str(self.args.trace), files=list(self.files))
        if self.fidelity is not None:
            for stage, verdict in zip(summary["stages"], self.fidelity):
                stage["fidelity"] = verdict
            summary["fidelity"] = {
                "live": str(self.args.fidelity),
                "state": self.fidelity_state,
                "inconclusive_allowed": bool(self.args.allow_inconclusive),
            }
        return summary


def _check_live(args: argparse.Namespace, trace) -> None:
    """--fidelity LIVE: readable, and holding every request of the trace to replay (the stages are
    judged against the live rows they replayed): checked before any stage runs."""
    if args.fidelity is None:
        return
    from replay.trace import read_trace

    live = read_trace(args.fidelity, bodies=False)
    missing = trace.df.select("request_id").join(live.df.select("request_id"), on="request_id", how="anti")
    if missing.height:
        raise ConfigError(
            f"--fidelity: {missing.height} of the {trace.df.height} requests of {args.trace} are not "
            f"in {args.fidelity} (first: {missing['request_id'][0]!r}): judge a replay against the "
            f"live trace it was made from"
        )


def _judge(args: argparse.Namespace, result, saver: _Saver) -> None:
    """--fidelity: every stage written so far judged against LIVE; the report beside the stages,
    a brief verdict per stage in summary.json."""
    if args.fidelity is None or not saver.files:
        return
    from fidelity import compare_results
    from fidelity.render import stage_summary
    from fidelity.report_files import write_report
    from replay.results import write_summary

    if not args.json:
        print(f"judging {len(saver.files)} stage(s) against {args.fidelity}...", file=sys.stderr)
    report = compare_results(
        args.fidelity, saver.out, judge_outcomes=args.judge_outcomes, aa_runs=args.aa_runs
    )  # as `replay fidelity` judges it
    paths = write_report(report, saver.out, html=True)
    saver.fidelity = [stage_summary(s, str(args.fidelity)) for s in report.stages]
    saver.fidelity_state = report.state
    write_summary(saver.out, saver.summary(result))
    if not args.json:
        print(f"fidelity report: {', '.join(str(p) for p in paths)}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from replay.plan import schedule
    from replay.sweep import check_repeats, check_retries, sweep
    from replay.trace import read_trace

    trace = read_trace(args.trace, bodies=False)  # bodies are read a window at a time as the stage runs
    if trace.meta.raw_text:
        print(raw_text_warning(args.trace), file=sys.stderr)
    config = dataclasses.replace(_config(args, args.rate, args.speedup), concurrency=args.concurrency)
    schedule(trace, config)  # bad --duration / --requests: before the engine starts
    repeats = check_repeats(args.repeats)  # before the engine starts
    check_retries(args.retry_invalid, not args.keep_prefix_cache)
    check_outcome_flags(args)
    _check_live(args, trace)
    sim_config = _sim_config(args, trace)
    saver = _Saver(args, _out(args, "run"))
    fresh = _fresh_target(args, sim_config)
    with contextlib.ExitStack() as held, progress_bar(quiet=args.json) as bar:
        runner = _stage_runner(args, held)  # bad --shards / --ray / --shard: before the engine starts
        if not fresh:
            config = held.enter_context(_target(args, config, sim_config, args.json))
        # one stage; its repeats and retries start from an empty prefix cache, as the first did
        result = sweep(
            trace,
            config,
            None,
            progress=bar.stage,
            on_stage=saver,
            on_rows=saver.rows,
            reset_cache=(repeats > 1 or args.retry_invalid > 0) and not args.keep_prefix_cache,
            repeats=repeats,
            target=fresh,
            retry_invalid=args.retry_invalid,
            stage_runner=runner,
        )
    return _report(args, result, saver)


def cmd_sweep(args: argparse.Namespace) -> int:
    from replay.config import AutoRates
    from replay.sweep import RateSearch, check_repeats, check_retries, check_stages, find_rates, sweep
    from replay.trace import read_trace

    users = parse_users(args.concurrency) if args.concurrency else None
    rates = parse_rates(args.rates) if args.rates else []
    growth_s = parse_duration_s(args.max_queue_growth, "--max-queue-growth")
    probe_s = parse_duration_s(args.probe_duration, "--probe-duration")
    if not probe_s > 0:
        raise ConfigError(f"--probe-duration: must be > 0, got {args.probe_duration}")
    trace = read_trace(args.trace, bodies=False)  # bodies are read a window at a time as the stage runs
    if trace.meta.raw_text:
        print(raw_text_warning(args.trace), file=sys.stderr)
    config = _config(args, None, None)
    repeats = check_repeats(args.repeats)  # before the engine starts
    check_retries(args.retry_invalid, not args.keep_prefix_cache)
    check_outcome_flags(args)
    if not isinstance(rates, AutoRates):
        check_stages(trace, config, rates, users)  # every stage's flags: before the engine starts
    _check_live(args, trace)
    sim_config = _sim_config(args, trace)
    saver = _Saver(args, _out(args, "sweep"))
    fresh = _fresh_target(args, sim_config)
    with progress_bar(quiet=args.json) as bar, contextlib.ExitStack() as held:
        runner = _stage_runner(args, held)
        if fresh is None:  # one target for the search and every stage
            config = held.enter_context(_target(args, config, sim_config, args.json))
        stages: list[float] | RateSearch
        if isinstance(rates, AutoRates):
            with _target(args, config, sim_config, True) if fresh else contextlib.nullcontext(config) as probed:
                stages = find_rates(
                    trace,
                    probed,
                    rates.points,
                    probe_s=probe_s,
                    queue_growth_s=growth_s,
                    progress=lambda rate: bar.stage(f"probe {rate:.3g} req/s"),
                )
            print(_search_line(stages), file=sys.stderr)
            if stages.interrupted:
                print("interrupted during the rate search", file=sys.stderr)
                return 130
        else:
            stages = rates
        result = sweep(
            trace,
            config,
            stages,
            concurrency=users,
            queue_growth_s=growth_s,
            progress=bar.stage,
            on_stage=saver,
            on_rows=saver.rows,
            stop_after_saturation=args.stop_after_saturation,
            reset_cache=not args.keep_prefix_cache,
            repeats=repeats,
            retry_invalid=args.retry_invalid,
            target=fresh,
            stage_runner=runner,
        )
    return _report(args, result, saver, page=True)


def _search_line(search) -> str:
    sat = search.saturation
    probed = ", ".join(f"{p['rate']:.3g}" for p in search.probes)
    if sat.status == "saturated":
        found = f"saturates at {sat.rate:.3g} req/s"
    elif sat.status == "undetermined":
        found = f"undetermined at {sat.undetermined_at:.3g} req/s (the runner fell behind)"
    else:
        found = "no saturation found"
    if search.kept_up_rate is not None:
        found += f", kept up at {search.kept_up_rate:.3g} req/s"
    stages = ", ".join(f"{r:g}" for r in search.rates)
    return f"auto rates: probed {probed} req/s in {search.elapsed_s:.0f}s: {found}; stages at {stages} req/s"


def _report(args: argparse.Namespace, result, saver: _Saver, page: bool = False) -> int:
    """Judge (--fidelity), print the table (or the JSON), and with ``page`` write sweep.html."""
    if not result.interrupted:
        _judge(args, result, saver)
    summary = saver.summary(result)
    page_path = None
    if page and result.stages:
        from replay.sweep_html import write_sweep_html

        page_path = write_sweep_html(saver.out, summary)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_stages(summary)
        print(f"results: {saver.out}" + (f" (page: {page_path})" if page_path else ""))
    if result.interrupted:
        print(f"interrupted: partial results kept in {saver.out}", file=sys.stderr)
        return 130
    return _fidelity_exit(args, saver.fidelity_state)


def _fidelity_exit(args: argparse.Namespace, state: str | None) -> int:
    """The exit code of run / sweep: 0 without --fidelity, else as `replay fidelity` exits (1
    unfaithful, 3 cannot tell), but 0 for cannot tell with --allow-inconclusive."""
    from fidelity.compare import CANNOT_TELL
    from fidelity.render import exit_code

    if state is None:
        return 0
    if state == CANNOT_TELL and args.allow_inconclusive:
        print("fidelity: cannot tell, allowed (--allow-inconclusive)", file=sys.stderr)
        return 0
    return exit_code(state)
