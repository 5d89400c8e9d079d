"""`replay serve-sim`: serve the embedded simulated engine until Ctrl-C.

Flags are vLLM's names (so a config tuned here reads like a vLLM command line), plus
``--profile`` (simulated hardware + model), ``--tokenizer`` and ``--time-scale``. The first line
printed is ``listening on http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

__all__ = ["register", "config_from_args"]


def register(sub: argparse._SubParsersAction) -> None:
    from replay.sim import PROFILES, SIM_DEFAULTS, SimConfig

    p = sub.add_parser(
        "serve-sim",
        help="serve the embedded simulated LLM engine (OpenAI-compatible)",
        description="An OpenAI-compatible server that behaves like an LLM engine under load: real tokenizer, "
        "prefix cache, continuous batching with chunked prefill and preemption, n-gram speculation, "
        "and step times from a hardware + model cost model. Flags follow vLLM's names.",
    )
    d = SIM_DEFAULTS
    p.add_argument("--host", default=d["host"], help=f"address to listen on (default {d['host']})")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port)")
    p.add_argument(
        "--profile",
        default=d["profile"],
        help=f"simulated hardware + model: {', '.join(PROFILES)}, or a profile .json (default {d['profile']})",
    )
    p.add_argument(
        "--tokenizer", default=SimConfig.tokenizer, help=f"gpt2, qwen2 or a tokenizer.json path (default {SimConfig.tokenizer})"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=d["time_scale"],
        help=f"wall time = modelled time x this (default {d['time_scale']:g}; 0.1 runs 10x faster; 0 = no waiting)",
    )
    p.add_argument(
        "--served-model-name", default=d["served_model_name"], help=f"the model name served (default {d['served_model_name']})"
    )
    p.add_argument(
        "--max-num-seqs", type=int, default=d["max_num_seqs"], help=f"most sequences per step (default {d['max_num_seqs']})"
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d["max_num_batched_tokens"],
        help=f"token budget of one step (default {d['max_num_batched_tokens']})",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=d["enable_prefix_caching"],
        help=f"reuse KV blocks of shared prompt prefixes (default {'on' if d['enable_prefix_caching'] else 'off'})",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=d["gpu_memory_utilization"],
        help=f"share of device memory for weights + KV cache; sets the KV blocks (default {d['gpu_memory_utilization']:g})",
    )
    p.add_argument("--block-size", type=int, default=d["block_size"], help=f"tokens per KV block (default {d['block_size']})")
    p.add_argument(
        "--scheduling-policy",
        choices=["fcfs", "priority"],
        default=d["scheduling_policy"],
        help=f"fcfs or priority (request field 'priority', lower first; default {d['scheduling_policy']})",
    )
    p.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        default=d["long_prefill_token_threshold"],
        help=f"largest prefill chunk of one request per step (default {d['long_prefill_token_threshold']}; 0 = no cap)",
    )
    p.add_argument(
        "--speculative-config",
        metavar="JSON",
        help='n-gram speculation, e.g. \'{"method":"ngram","num_speculative_tokens":4,'
        '"prompt_lookup_max":4,"prompt_lookup_min":2}\'',
    )
    p.add_argument(
        "--kv-cache-dtype",
        choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
        default=d["kv_cache_dtype"],
        help="fp8 halves KV bytes (about twice the blocks) and changes outputs (lossy)",
    )
    p.add_argument("--max-model-len", type=int, help="longest prompt + max_tokens (default: the profile's)")
    p.add_argument("--seed", type=int, default=d["seed"], help=f"output seed (default {d['seed']})")
    p.add_argument("--threads", type=int, default=d["threads"], help=f"server runtime threads (default {d['threads']})")
    p.add_argument(
        "--tool-call-probability",
        type=float,
        default=d["tool_call_probability"],
        help="chance that a request offering tools (tool_choice auto) is answered with tool calls "
        f"(default {d['tool_call_probability']:g}; 'required' or a named function always is, 'none' never)",
    )
    p.add_argument(
        "--max-parallel-tool-calls",
        type=int,
        default=d["max_parallel_tool_calls"],
        help=f"most tool calls in one answer (default {d['max_parallel_tool_calls']}; 1 when the request sets "
        "parallel_tool_calls false)",
    )
    p.add_argument(
        "--mean-parallel-tool-calls",
        type=float,
        default=d["mean_parallel_tool_calls"],
        help=f"mean tool calls in a tool answer, 1 + a geometric count (default {d['mean_parallel_tool_calls']:g})",
    )
    p.add_argument(
        "--tool-argument-tokens",
        type=int,
        default=d["tool_argument_tokens"],
        help=f"median size of a call's JSON arguments in tokens, lognormal (default {d['tool_argument_tokens']})",
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=d["replicas"],
        help=f"run N engines behind one front, each with its own scheduler, KV cache and modelled compute, as N GPUs "
        f"(default {d['replicas']}: one engine, no router); /metrics then has each replica's series (label replica) "
        "beside the fleet's totals, and each answer names its replica in the x-replay-replica header",
    )
    p.add_argument(
        "--router",
        default=d["router"],
        metavar="POLICY",
        help="with --replicas N: how the front picks a replica: round-robin, session (every request of a session to "
        "one replica, the session being the --session-header value), prefix (the replica that was sent the longest "
        f"shared block-hash prefix of the prompt) or least-loaded (fewest in flight) (default {d['router']})",
    )
    p.add_argument(
        "--session-header",
        default=d["session_header"],
        metavar="NAME",
        help=f"the request header holding a request's session, for --router session (default {d['session_header']}; "
        "`replay run --session-header` sends it)",
    )
    p.add_argument(
        "--priority",
        choices=("normal", "nice", "idle"),
        default="normal",
        help="the engine threads' CPU priority: idle (SCHED_IDLE: a runner on the same machine preempts it the "
        "moment a send is due), nice (niceness 10) or normal (default); below normal, when this process leads "
        "its own session (replay optimize --engine sim starts it so), its autogroup gets niceness 19 too",
    )
    p.set_defaults(func=cmd_serve_sim)


def config_from_args(args: argparse.Namespace):
    """The SimConfig the flags describe (ConfigError names a bad flag)."""
    from replay.errors import ConfigError
    from replay.sim import SimConfig

    spec = None
    if args.speculative_config:
        try:
            spec = json.loads(args.speculative_config)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--speculative-config: not JSON ({e.msg})") from None
    kv = "fp8" if args.kv_cache_dtype.startswith("fp8") else args.kv_cache_dtype
    return SimConfig(
        profile=args.profile,
        tokenizer=args.tokenizer,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_prefix_caching=args.enable_prefix_caching,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        scheduling_policy=args.scheduling_policy,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        speculative_config=spec,
        kv_cache_dtype=kv,
        max_model_len=args.max_model_len,
        seed=args.seed,
        served_model_name=args.served_model_name,
        time_scale=args.time_scale,
        host=args.host,
        port=args.port,
        threads=args.threads,
        tool_call_probability=args.tool_call_probability,
        max_parallel_tool_calls=args.max_parallel_tool_calls,
        mean_parallel_tool_calls=args.mean_parallel_tool_calls,
        tool_argument_tokens=args.tool_argument_tokens,
        replicas=args.replicas,
        router=args.router,
        session_header=args.session_header,
    )


def cmd_serve_sim(args: argparse.Namespace) -> int:
    from replay.sim import lower_own_group, start_sim

    config = config_from_args(args)
    lower_own_group(args.priority)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    # before the server says it listens: a SIGTERM sent the moment it does stops it cleanly
    # (installed after the line, one sent right away killed the process: exit -15)
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        server = start_sim(config, priority=args.priority)
    except KeyboardInterrupt:
        signal.signal(signal.SIGTERM, previous)
        return 0
    print(f"listening on {server.url}", flush=True)
    print(
        f"profile {config.profile} | {server.num_gpu_blocks} KV blocks of {config.block_size} tokens | "
        f"max-model-len {server.max_model_len} | model {config.served_model_name} | "
        f"time scale {config.time_scale:g}"
        + (f" | {config.replicas} replicas, {config.router} router (blocks per replica)" if config.replicas > 1 else ""),
        flush=True,
    )
    try:
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
    return 0
