"""The embedded simulated LLM engine: the default target of every ``replay`` command.

Owns :class:`SimConfig`, :data:`KNOBS`, :data:`PROFILES`, :func:`start_sim` and
:func:`modelled_requests` (each finished request's times on the engine's modelled clock). The engine itself
is Rust (``rust/sim``, exposed as ``replay._engine.SimServer``): an OpenAI-compatible HTTP server
with a real tokenizer, a real prefix cache, a continuous-batching scheduler and step times from a
hardware + model cost model, played out in real time. See ``docs/sim-engine.md``.

Knobs carry vLLM's names (the config key is the flag without ``--``, in snake case)::

    from replay.sim import SimConfig, start_sim
    with start_sim(SimConfig(max_num_seqs=64, time_scale=0.1)) as server:
        print(server.url)          # http://127.0.0.1:PORT, serving model "sim"
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from replay.errors import ConfigError
from replay.targets.engine import Knob

if TYPE_CHECKING:
    import polars as pl

    from replay._engine import SimServer

__all__ = [
    "SimConfig",
    "KNOBS",
    "ROUTERS",
    "PROFILES",
    "LONG_CONTEXT_PROFILE",
    "embedded_profile",
    "SIM_DEFAULTS",
    "ENGINE_PRIORITIES",
    "ENGINE_PRIORITY",
    "engine_priority",
    "lower_own_group",
    "start_sim",
    "split_cpus",
    "modelled_requests",
]

# The CPU priority of an embedded engine started beside the runner (``replay run`` / ``sweep``
# without --url, ``replay optimize --engine sim``): ``idle``, the policy SCHED_IDLE, which a
# runner thread that wakes preempts at once (and a CPU running only the engine counts as idle
# when the kernel places a waking thread). ``nice`` (niceness 10) only shares the CPU out by
# weight: a waking thread may wait out the engine's slice, a few ms. Lowering one's own priority
# needs no privilege (the runner's SCHED_FIFO dispatcher needs root). The engine's latencies are
# modelled time (docs/sim-engine.md), which its CPU priority does not move.
# REPLAY_ENGINE_PRIORITY=normal|nice|idle overrides it (for comparisons: benchmarks/colocated_lag.py).
ENGINE_PRIORITIES = ("normal", "nice", "idle")
ENGINE_PRIORITY = "idle"


def _sim_defaults() -> dict[str, Any]:
    from replay import _engine

    return json.loads(_engine.sim_defaults())


def _engine_profiles() -> list[str]:
    from replay import _engine

    return _engine.sim_profiles()


# The engine's knob defaults, from the Rust engine itself (rust/sim/src/config.rs): the one source
# of them for SimConfig, KNOBS and `replay serve-sim`'s flags.
SIM_DEFAULTS: dict[str, Any] = _sim_defaults()
_D = SIM_DEFAULTS

# the shipped hardware/model profiles, the default first, from the engine itself
# (rust/sim/src/profile.rs; a path to a profile .json works too; fields and sources in the doc)
PROFILES: tuple[str, ...] = tuple(_engine_profiles())
# the preset the embedded engine runs for a trace its default does not hold (embedded_profile)
LONG_CONTEXT_PROFILE = "h100-80g/qwen3-4b-2507"
# tokens a chat template may add to a recorded prompt (fidelity.sides.TEMPLATE_MAX)
_TEMPLATE_MARGIN = 256


def embedded_profile(longest_tokens: int) -> str:
    """The embedded engine's profile when none is named: the default (``PROFILES[0]``), or
    :data:`LONG_CONTEXT_PROFILE` when the trace's longest request (prompt + output tokens, and a
    chat template's margin) is over the default's context (a 150k-token agent context, a
    Mooncake prompt)."""
    from replay import _engine

    default = PROFILES[0]
    fits = _engine.sim_profile_max_len(default) or 0
    return default if longest_tokens + _TEMPLATE_MARGIN <= fits else LONG_CONTEXT_PROFILE


# the fleet's routing policies (replay_core::route::Policy, whose names the engine checks)
ROUTERS: tuple[str, ...] = ("round-robin", "session", "prefix", "least-loaded")

# The engine knobs worth tuning: vLLM's flag names, the simulator's own defaults and ranges.
KNOBS: tuple[Knob, ...] = (
    Knob(
        "max_num_seqs",
        "--max-num-seqs",
        "int",
        default=_D["max_num_seqs"],
        range=(1, 4096),
        doc="most sequences running in one step; more batches more decodes per weight read",
    ),
    Knob(
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        "int",
        default=_D["max_num_batched_tokens"],
        range=(16, 131072),
        doc="token budget of one step, shared by decodes and prefill chunks (chunked prefill)",
    ),
    Knob(
        "enable_prefix_caching",
        "--enable-prefix-caching",
        "bool",
        default=_D["enable_prefix_caching"],
        off_flag="--no-enable-prefix-caching",
        doc="reuse KV blocks of shared full-block prompt prefixes",
    ),
    Knob(
        "gpu_memory_utilization",
        "--gpu-memory-utilization",
        "float",
        default=_D["gpu_memory_utilization"],
        range=(0.05, 1.0),
        doc="share of device memory for weights + KV; the rest of it sets the number of KV blocks",
    ),
    Knob(
        "block_size",
        "--block-size",
        "choice",
        default=str(_D["block_size"]),
        choices=("8", "16", "32", "64", "128", "256"),
        doc="tokens per KV block: the prefix-cache granularity",
    ),
    Knob(
        "scheduling_policy",
        "--scheduling-policy",
        "choice",
        default=_D["scheduling_policy"],
        choices=("fcfs", "priority"),
        doc="waiting order (priority: the request's 'priority' field, lower first) and preemption victim",
    ),
    Knob(
        "long_prefill_token_threshold",
        "--long-prefill-token-threshold",
        "int",
        default=_D["long_prefill_token_threshold"],
        range=(0, 1 << 20),
        doc="largest prefill chunk of one request per step (0 = only the step budget)",
    ),
    Knob(
        "speculative_config",
        "--speculative-config",
        "json",
        default=None,
        doc='n-gram speculation, e.g. {"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,'
        '"prompt_lookup_min":2}; outputs are unchanged',
    ),
    Knob(
        "kv_cache_dtype",
        "--kv-cache-dtype",
        "choice",
        default=_D["kv_cache_dtype"],
        choices=("auto", "fp8"),
        lossless=False,
        doc="fp8 halves KV bytes per token (about twice the blocks, less KV traffic) and changes outputs",
    ),
    Knob(
        "max_model_len",
        "--max-model-len",
        "int",
        default=None,
        range=(16, 1 << 22),
        doc="longest prompt + max_tokens accepted (default: the profile's)",
    ),
    Knob(
        "replicas",
        "--replicas",
        "int",
        default=_D["replicas"],
        range=(1, 64),
        doc="engines behind one front, each its own scheduler, KV cache and compute (N GPUs: a cost knob); "
        "1 = no router in the path",
    ),
    Knob(
        "router",
        "--router",
        "choice",
        default=_D["router"],
        choices=ROUTERS,
        doc="how the front picks a replica (replicas > 1): round-robin, session (a session's requests to one "
        "replica, by the --session-header header), prefix (the replica that was sent the longest shared "
        "block-hash prefix) or least-loaded (fewest requests in flight)",
    ),
)


@dataclass(frozen=True)
class SimConfig:
    """Everything :func:`start_sim` needs. Field = vLLM flag in snake case (``--max-num-seqs``).

    ``profile`` names the simulated hardware + model (:data:`PROFILES`, or a profile .json path),
    ``tokenizer`` a name known to :func:`replay.tokenizer.tokenizer_path` or a tokenizer.json path,
    ``time_scale`` stretches modelled time into wall time (0.1 = ten times faster than the real
    hardware; 0 = as fast as the CPU allows), ``speculative_config`` a dict or JSON text, and
    ``threads`` the server's runtime threads (1 = one core). ``replicas`` > 1 runs that many
    engines behind one front that routes each request by ``router`` (:data:`ROUTERS`; a session
    is the ``session_header`` header's value): docs/sim-engine.md, "A fleet". The ``tool_*`` fields are the seeded
    policy by which a request offering ``tools`` is answered with tool calls (docs/sim-engine.md,
    "Tool calls"); the engine validates them.
    """

    profile: str = _D["profile"]
    tokenizer: str = "gpt2"  # a name replay.tokenizer resolves to a tokenizer.json (the engine needs a path)
    max_num_seqs: int = _D["max_num_seqs"]
    max_num_batched_tokens: int = _D["max_num_batched_tokens"]
    enable_prefix_caching: bool = _D["enable_prefix_caching"]
    gpu_memory_utilization: float = _D["gpu_memory_utilization"]
    block_size: int = _D["block_size"]
    scheduling_policy: str = _D["scheduling_policy"]
    long_prefill_token_threshold: int = _D["long_prefill_token_threshold"]
    speculative_config: Any = _D["speculative_config"]
    kv_cache_dtype: str = _D["kv_cache_dtype"]
    max_model_len: int | None = _D["max_model_len"]
    seed: int = _D["seed"]
    served_model_name: str = _D["served_model_name"]
    time_scale: float = _D["time_scale"]
    host: str = _D["host"]
    port: int = _D["port"]
    threads: int = _D["threads"]
    tool_call_probability: float = _D["tool_call_probability"]
    max_parallel_tool_calls: int = _D["max_parallel_tool_calls"]
    mean_parallel_tool_calls: float = _D["mean_parallel_tool_calls"]
    tool_argument_tokens: int = _D["tool_argument_tokens"]
    replicas: int = _D["replicas"]
    router: str = _D["router"]
    session_header: str = _D["session_header"]

    def __post_init__(self) -> None:
        knobs = {k.name: k for k in KNOBS}
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "gpu_memory_utilization",
            "long_prefill_token_threshold",
            "scheduling_policy",
            "kv_cache_dtype",
            "replicas",
            "router",
        ):
            object.__setattr__(self, name, knobs[name].check(getattr(self, name)))
        caching = knobs["enable_prefix_caching"].check(self.enable_prefix_caching)
        object.__setattr__(self, "enable_prefix_caching", caching)
        object.__setattr__(self, "block_size", int(knobs["block_size"].check(str(self.block_size))))
        if self.max_model_len is not None:
            object.__setattr__(self, "max_model_len", knobs["max_model_len"].check(self.max_model_len))
        if self.speculative_config is not None:
            spec = knobs["speculative_config"].check(self.speculative_config)
            object.__setattr__(self, "speculative_config", json.dumps(spec, sort_keys=True))
        for name, flag in (("seed", "--seed"), ("port", "--port"), ("threads", "--threads")):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{flag}: expected a non-negative integer, got {value!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port: {self.port} outside [0, 65535]")
        if self.threads < 1:
            raise ConfigError("--threads: must be >= 1")
        if not (isinstance(self.time_scale, (int, float)) and self.time_scale >= 0):
            raise ConfigError(f"--time-scale: must be a number >= 0, got {self.time_scale!r}")
        if not self.served_model_name:
            raise ConfigError("--served-model-name: must not be empty")

    def engine_json(self, tokenizer_path: str | None = None) -> str:
        """The JSON config the Rust engine reads (``tokenizer`` replaced by a resolved path)."""
        fields = dataclasses.asdict(self)
        fields["tokenizer"] = tokenizer_path
        fields["time_scale"] = float(self.time_scale)
        fields["tool_call_probability"] = float(self.tool_call_probability)
        fields["mean_parallel_tool_calls"] = float(self.mean_parallel_tool_calls)
        if self.speculative_config is not None:
            fields["speculative_config"] = json.loads(self.speculative_config)
        return json.dumps(fields)


def engine_priority() -> str:
    """The CPU priority to start an engine beside the runner at: :data:`ENGINE_PRIORITY`, or
    ``$REPLAY_ENGINE_PRIORITY`` (one of :data:`ENGINE_PRIORITIES`)."""
    value = os.environ.get("REPLAY_ENGINE_PRIORITY", ENGINE_PRIORITY)
    if value not in ENGINE_PRIORITIES:
        raise ConfigError(f"REPLAY_ENGINE_PRIORITY: one of {', '.join(ENGINE_PRIORITIES)}, got {value!r}")
    return value


def lower_own_group(priority: str) -> bool:
    """When this process leads its own session (an engine the suite started with
    ``start_new_session``) and ``priority`` is not ``normal``, set its autogroup's niceness to 19:
    with Linux's autogroup scheduling the CPU is shared between sessions first, so a thread's own
    priority does not yield to a runner in another session. A process in someone else's session
    (a shell's) is left alone, since that would lower them too. Returns whether it was set."""
    if priority == "normal" or not hasattr(os, "getsid") or os.getsid(0) != os.getpid():
        return False
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
        return True
    except OSError:
        return False


def start_sim(
    config: SimConfig | None = None, *, cpus: tuple[int, ...] = (), priority: str = "normal", **overrides: Any
) -> SimServer:
    """Start the engine on its own thread; returns a ``SimServer`` (``.url``, ``.port``,
    ``.stop()``, a context manager). ``overrides`` replace fields of ``config``; ``cpus`` pins the
    engine's threads (see :func:`split_cpus`); ``priority`` (:data:`ENGINE_PRIORITIES`) lowers
    their CPU priority below the caller's (:data:`ENGINE_PRIORITY` beside the runner).

    Raises ConfigError for a bad knob or tokenizer, TargetError when the port cannot be bound.
    """
    from replay import _engine
    from replay.tokenizer import tokenizer_path

    config = dataclasses.replace(config or SimConfig(), **overrides)
    path = tokenizer_path(config.tokenizer)
    return _engine.SimServer(config.engine_json(str(path)), cpus=list(cpus), priority=priority)


def modelled_requests(url: str, timeout_s: float = 30.0) -> pl.DataFrame:
    """The embedded engine's finished requests (the last 100,000, oldest first) on its modelled
    clock, read from ``GET {url}/sim/requests``: ``id`` (arrival order at its replica),
    ``replica`` (the fleet's replica that served it, 0 for one engine), ``prompt_tokens``,
    ``cached_tokens``, ``completion_tokens``, ``steps`` (engine steps that gave it tokens),
    ``finish``, and ``arrived_s`` / ``scheduled_s`` / ``first_token_s`` / ``finished_s`` in
    modelled seconds since the engine started, with ``queue_s``, ``ttft_s``, ``e2e_s`` and
    ``tpot_s`` ((finished - first token) / (completion tokens - 1); None for one token) derived.
    A fleet's replicas share one modelled epoch (they start together), so their times compare.

    Modelled time is the cost model's: steps take exactly their modelled cost whatever the
    machine does, so these latencies do not move with its load (docs/sim-engine.md, "Modelled
    time"). Raises TargetError when ``url`` does not answer it (not the embedded engine)."""
    import urllib.error
    import urllib.request

    import polars as pl

    from replay.errors import TargetError

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/sim/requests", timeout=timeout_s) as resp:
            got = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        error = TargetError(f"{url}: GET /sim/requests failed ({e}): not the embedded engine?")
        error.url = url
        raise error from None
    schema = {
        "id": pl.UInt64,
        "replica": pl.UInt32,
        "prompt_tokens": pl.UInt32,
        "cached_tokens": pl.UInt32,
        "completion_tokens": pl.UInt32,
        "steps": pl.UInt32,
        "finish": pl.String,
        "arrived_s": pl.Float64,
        "scheduled_s": pl.Float64,
        "first_token_s": pl.Float64,
        "finished_s": pl.Float64,
    }
    frame = pl.DataFrame(got["requests"], schema=schema)
    tokens = pl.col("completion_tokens").cast(pl.Float64)
    return frame.with_columns(
        queue_s=pl.col("scheduled_s") - pl.col("arrived_s"),
        ttft_s=pl.col("first_token_s") - pl.col("arrived_s"),
        e2e_s=pl.col("finished_s") - pl.col("arrived_s"),
        tpot_s=pl.when(tokens > 1).then((pl.col("finished_s") - pl.col("first_token_s")) / (tokens - 1)),
    )


def split_cpus(engine_threads: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Disjoint CPU sets ``(engine, runner)`` for an engine run in the same process as the runner.

    When the two share a core, every request wakes the engine, which then holds the core through
    its CPU burst (tokenizing a long prompt, planning a step: a few ms) while the runner's next
    send waits behind it, even with another core idle. On a 2-core machine that made send lag p99
    2.7-6.8 ms; with the engine and the runner on their own cores it was 0.3-1.5 ms. The
    engine gets the last ``engine_threads`` usable CPUs (at most all but one), the runner's I/O
    workers the rest (its dispatcher keeps every CPU: see ``RunConfig.cpus``). Returns
    ``((), ())`` (no pinning) with fewer than 2 usable CPUs or no affinity support.
    """
    if not hasattr(os, "sched_getaffinity"):
        return (), ()
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return (), ()
    k = min(max(engine_threads, 1), len(usable) - 1)
    return tuple(usable[-k:]), tuple(usable[:-k])
