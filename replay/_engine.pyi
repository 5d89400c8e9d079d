"""Type stub of the compiled module ``replay._engine`` (the PyO3 binding in rust/py)."""

from collections.abc import Callable
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

class RunDefaults(TypedDict):
    """The core runner's defaults (times in seconds)."""

    timeout_s: float
    stall_timeout_s: float
    connect_timeout_s: float
    drain_s: float
    max_connections: int
    worker_threads: int

class Switches(TypedDict):
    voluntary: int
    involuntary: int

class RunnerStats(TypedDict):
    """The runner's own account of a run (``StageResult.runner``)."""

    warmup_ms: float
    warm_connections_wanted: int
    warm_connections: int
    warm_detail: str
    dispatcher_switches: Switches
    dispatcher_priority: str
    worker_switches: Switches
    resent: int
    body_waits: int
    body_wait_max_ms: float
    answers_resent: int
    answers_recorded: int

class Rows(TypedDict):
    """Finished requests' columns, in request order from ``first``."""

    first: int
    intended_ns: npt.NDArray[np.int64]
    release_ns: npt.NDArray[np.int64]
    conn_ns: npt.NDArray[np.int64]
    sent_ns: npt.NDArray[np.int64]
    first_byte_ns: npt.NDArray[np.int64]
    first_token_ns: npt.NDArray[np.int64]
    end_ns: npt.NDArray[np.int64]
    status: npt.NDArray[np.uint16]
    error_kind: npt.NDArray[np.uint8]
    prompt_tokens: npt.NDArray[np.int64]
    completion_tokens: npt.NDArray[np.int64]
    cached_tokens: npt.NDArray[np.int64]
    output_chunks: npt.NDArray[np.int64]
    error_detail_offsets: npt.NDArray[np.int64]
    error_detail_bytes: bytes
    chunk_offsets: npt.NDArray[np.uint64]
    chunk_us: npt.NDArray[np.uint32]
    # the replica each request went to (a fleet's index; 0 with one target; 65535: never sent)
    replica: npt.NDArray[np.uint16]

class RunOutput(Rows):
    """What :func:`run` returns: the rows not yet handed to ``results``, and the run's own facts."""

    start_unix_ns: int
    cancelled: bool
    cut_off: bool
    runner: RunnerStats
    interrupted: bool

def arrival_offsets(
    kind: str,
    n: int,
    trace_offsets_ns: npt.NDArray[np.int64],
    rate: float | None = None,
    speedup: float | None = None,
    cv: float | None = None,
    seed: int = 0,
) -> npt.NDArray[np.int64]:
    """Arrival offsets in ns from the run start: kind is trace, poisson, gamma or constant."""

def error_kinds() -> list[str]:
    """The error kind names, indexed by the codes in the ``error_kind`` column."""

def prompt_units(entropy: list[int], lengths: list[int], n_words: int) -> npt.NDArray[np.int32]:
    """Unit indices of texts of ``lengths`` laid end to end, as ``PromptVocab.sample_many(lengths,
    default_rng(SeedSequence(entropy)))`` draws them over ``n_words`` words (the period is
    ``n_words``)."""

def prompt_texts(
    table: list[str],
    seed: int,
    keys: npt.NDArray[np.uint64],
    lengths: npt.NDArray[np.int64],
    domain: int,
) -> list[str]:
    """Text i: ``lengths[i]`` units drawn from ``SeedSequence([seed, keys[i], domain])``, rendered
    with ``table`` (the unit strings, the period last); the GIL is released."""

def send_bodies(
    bodies: list[str | tuple[str, str | None, int | None] | tuple[int, int, str | None, int | None] | None],
    path_index: npt.NDArray[np.uint8],
    max_tokens: npt.NDArray[np.int64],
    model: str | None = None,
    ignore_eos: bool = False,
    prompts: tuple[list[str], int, int] | None = None,
) -> tuple[bytes, npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """One window of bodies as sent (rust/core/src/body.rs): ``(data, offsets, left)``, body i at
    ``data[offsets[i]:offsets[i + 1]]``, from ``bodies[i]`` (a stored body's JSON text, a
    token-only row's ``(text, model, max_tokens)``, or ``(key, length, model, max_tokens)``
    for one whose text is drawn here as ``prompt_texts`` draws it, from ``prompts``: the unit
    table, seed and domain) with the API of ``path_index[i]``,
    ``max_tokens[i]`` (-1: none), ``model`` and ``ignore_eos`` set, exactly as
    ``replay.plan._rewrite_body`` writes it. ``left``: the rows not made (None, or a stored text
    that is not what ``body_json`` writes for it), an empty span each; the GIL is released."""

def sim_defaults() -> str:
    """The embedded engine's knob defaults, a JSON object keyed by the knobs' snake_case names."""

def sim_profiles() -> list[str]:
    """The embedded engine's preset profile names, the default first."""

def sim_profile_max_len(name: str) -> int | None:
    """A preset profile's default max_model_len (None: not a preset)."""

def run_defaults() -> RunDefaults:
    """The core runner's defaults: timeout_s, stall_timeout_s, connect_timeout_s, drain_s,
    max_connections, worker_threads."""

class RunOptions:
    """What a run is asked to do: the target, its TLS and headers, deadlines in seconds (None: the
    core's default, :func:`run_defaults`; 0: no limit), caps on connections and on requests in
    flight (``max_in_flight``: a closed-loop stage's users, 0 open loop), connections opened
    before t0, whether chunk times are kept, the I/O workers and their CPUs, whether a causal
    run resends the answers it streamed, and the wall-clock instant (ns since the epoch) t0 waits
    for after the warm-up (``start_at_unix_ns``, 0: none; a shard of ``replay.shards``). A fleet:
    ``more_urls`` are replicas 1, 2, ... (replica 0 is ``url``) and ``route`` picks each
    request's replica as it is sent (round-robin, session, prefix, least-loaded:
    ``replay_core::route``). A bad value raises ConfigError naming it, when made."""

    def __init__(
        self,
        url: str,
        *,
        headers: list[tuple[str, str]] = ...,
        ca_cert: str | None = None,
        insecure: bool = False,
        timeout_s: float | None = None,
        stall_timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
        drain_s: float | None = None,
        max_connections: int | None = None,
        max_in_flight: int = 0,
        warm_connections: int = 0,
        chunk_times: bool = True,
        worker_threads: int | None = None,
        cpus: list[int] = ...,
        resend_answers: bool = False,
        more_urls: list[str] = ...,
        route: str = "round-robin",
        start_at_unix_ns: int = 0,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    @property
    def urls(self) -> list[str]: ...
    @property
    def route(self) -> str: ...

# the request header by which a replay asks the embedded engine for a recorded answer's tool
# calls (rust/sim/src/tools.rs)
REPLAY_TOOL_CALLS_HEADER: str
# tokens a tool call costs an engine besides its argument text (the call's markers and name,
# Hermes-style; rust/sim/src/tools.rs CALL_OVERHEAD_TOKENS): the embedded engine counts each
# call as its argument tokens plus this
TOOL_CALL_OVERHEAD_TOKENS: int

def run(
    options: RunOptions,
    paths: list[str],
    path_index: npt.NDArray[np.uint8],
    offsets_ns: npt.NDArray[np.int64],
    bodies: bytes
    | Callable[
        [],
        tuple[bytes, npt.NDArray[np.uint64]]
        | tuple[bytes, npt.NDArray[np.uint64], npt.NDArray[np.int64], npt.NDArray[np.uint64]]
        | None,
    ],
    *,
    body_offsets: npt.NDArray[np.uint64] | None = None,
    after: npt.NDArray[np.int64] | None = None,
    think_ns: npt.NDArray[np.int64] | None = None,
    joins: npt.NDArray[np.int64] | None = None,
    join_offsets: npt.NDArray[np.int64] | None = None,
    head_lines: bytes | None = None,
    head_offsets: npt.NDArray[np.uint64] | None = None,
    progress: Callable[[int, int, int], object] | None = None,
    progress_interval_s: float = 0.2,
    results: Callable[[Rows], object] | None = None,
    route_sessions: npt.NDArray[np.uint64] | None = None,
    route_blocks: npt.NDArray[np.uint64] | None = None,
    route_block_offsets: npt.NDArray[np.uint64] | None = None,
) -> RunOutput:
    """Replay the planned requests open-loop as ``options`` say (GIL released). Bodies: all at
    once (bytes with ``body_offsets``) or a callable returning the next window ``(bytes,
    offsets)`` or None, called on a thread of its own a couple of windows ahead of the sends; a
    window's third and fourth elements, when given, are the byte spans of each body's earlier
    answers (start, end pairs, oldest first; body i's at ``spans[span_offsets[i]:span_offsets[i +
    1]]``), where a causal run with ``resend_answers`` writes the answers its engine streamed to
    those turns. With ``results``, finished requests are handed to it as the run goes, in
    consecutive batches in request order (the same per-request columns, ``first`` the index of a
    batch's first request), and the dict returned holds the rest. Returns ``first`` and numpy
    columns (intended_ns, release_ns, conn_ns, sent_ns, first_byte_ns, first_token_ns, end_ns,
    status, error_kind, prompt_tokens, completion_tokens, cached_tokens, output_chunks,
    error_detail_offsets, chunk_offsets, chunk_us), error_detail_bytes, start_unix_ns, cancelled,
    cut_off, interrupted and the runner's own statistics (runner). An https target whose
    certificate cannot be trusted raises TargetError before t0."""

class SimServer:
    """The embedded simulated engine, serving on its own thread."""

    def __init__(
        self,
        config: str | dict[str, Any] | None = None,
        tokenizer: str | None = None,
        cpus: list[int] = ...,
        priority: str = "normal",
    ) -> None: ...
    @property
    def port(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def num_gpu_blocks(self) -> int: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def running(self) -> bool: ...
    def metrics_text(self) -> str: ...
    def stop(self) -> None: ...
    def __enter__(self) -> SimServer: ...
    def __exit__(self, *args: object) -> bool: ...

# (api, arrival_unix_us, body, session, stream, status, ttfb_us, end_us, outcome, chunks,
# content_encoding): one finished exchange of the capture proxy
FinishedExchange = tuple[str, int, bytes, str | None, bool, int | None, int | None, int, str, list[tuple[int, bytes]], str | None]

class CaptureServer:
    """The data path of ``replay capture`` (rust/capture), serving on its own runtime threads."""

    def __init__(
        self,
        upstream: str,
        listen: str,
        metrics: Callable[[], bytes],
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        metrics_path: str,
        session_header: str,
        queue_size: int,
        backlog_bytes: int,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        ca_cert: str | None = None,
        insecure: bool = False,
        threads: int = 0,
        grace_s: float = 60.0,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    @property
    def address(self) -> tuple[str, int]: ...
    def wait(self, timeout_s: float) -> bool: ...
    def take(self, max: int) -> list[FinishedExchange]: ...
    def counters(self) -> dict[str, Any]: ...
    def stop(self) -> None: ...

def block_hashes(ids: npt.NDArray[np.uint32], block_size: int) -> npt.NDArray[np.uint64]:
    """One chained hash per full block of ``block_size`` ids (``replay.blocks.block_hashes``)."""

def chain_hash(parent: int | None, block: npt.NDArray[np.uint32]) -> int:
    """The hash of one block given its parent's (None: the first block)."""

def sse_events(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The data of each event of an SSE answer read as ``chunks`` ((µs, bytes) per read), each
    with the time of the read that ended it (the runner's WHATWG framing; events without data left
    out; a last event without its closing blank line taken at the end)."""

def prefix_cache_hits(
    hashes: npt.NDArray[np.uint64],
    offsets: npt.NDArray[np.uint64],
    capacity: int,
    times_s: npt.NDArray[np.float64] | None = None,
) -> Any:
    """For each request, the leading blocks an LRU prefix cache of ``capacity`` blocks (0:
    unbounded) held when it arrived; request i's chained block hashes are
    ``hashes[offsets[i]:offsets[i+1]]``. Every block of a request is touched after its look-up.
    With ``times_s`` (one per request): ``(hits, reuse_s)``, reuse_s the time since the request's
    deepest cached block was last touched (NaN without a hit); else ``hits`` (uint32)."""
