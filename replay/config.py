"""Run configuration: the frozen, validated objects a replay is described by.

`Arrivals` says how send times are made, `Slo` the service-level objectives used for goodput,
`RunConfig` one replay stage against one target. The CLI builds these from flags; library callers
build them directly. Every random choice takes a seed.
"""

from __future__ import annotations

import math
import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Literal

from replay.errors import ConfigError
from replay.fleet import DEFAULT_ROUTE, ROUTES, Target

__all__ = [
    "Arrivals",
    "Slo",
    "RunConfig",
    "AutoRates",
    "RUNNER_DEFAULTS",
    "SESSION_MODES",
    "LAG_BOUND_MS",
    "RETRY_INVALID",
    "SLO_ATTAINMENT",
    "parse_duration_s",
    "parse_slo",
    "parse_rates",
]

ArrivalKind = Literal["trace", "poisson", "gamma", "constant"]
ARRIVAL_KINDS = ("trace", "poisson", "gamma", "constant")
SessionMode = Literal["auto", "open", "causal", "dag"]
SESSION_MODES = ("auto", "open", "causal", "dag")
AnswerMode = Literal["engine", "recorded"]
ANSWER_MODES = ("engine", "recorded")


def _runner_defaults() -> dict:
    from replay import _engine

    return dict(_engine.run_defaults())


# The Rust runner's defaults (timeouts, drain, connection cap, threads): the one source of them.
RUNNER_DEFAULTS: dict = _runner_defaults()
# a stage whose send lag p99 exceeds this (ms) is invalid (--lag-bound-ms)
LAG_BOUND_MS = 1.0
# how many more times a stage the runner made invalid runs again (--retry-invalid of run, sweep and
# optimize): none by default, every stage as it ran
RETRY_INVALID = 0
# the share of a stage's requests that must meet every objective of its SLO (--slo-attainment)
SLO_ATTAINMENT = 0.9


@dataclass(frozen=True)
class Arrivals:
    """How request send times are made.

    ``trace`` (default) keeps the trace's own timing; ``poisson``, ``gamma`` (with coefficient of
    variation ``cv``) and ``constant`` draw new times at the target rate. Either way the times are
    then compressed uniformly, which keeps their burst shape, until the stage offers the target rate
    over its own window (:func:`replay.plan.schedule`).
    """

    kind: ArrivalKind = "trace"
    cv: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVAL_KINDS:
            raise ConfigError(f"--arrivals: unknown kind '{self.kind}' (one of {', '.join(ARRIVAL_KINDS)})")
        if not self.cv > 0:
            raise ConfigError(f"--cv: must be > 0, got {self.cv}")


@dataclass(frozen=True)
class Slo:
    """Per-request objectives; a request meets the SLO when every set bound holds (seconds)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    # a stage passes its SLO when at least this share of requests meets it
    attainment: float = SLO_ATTAINMENT

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ConfigError(f"--slo: {name[:-2]} must be > 0, got {v}")
        if not 0 < self.attainment <= 1:
            raise ConfigError(f"--slo-attainment: must be in (0, 1], got {self.attainment}")

    @property
    def empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None


@dataclass(frozen=True)
class RunConfig:
    """One replay stage: which requests, when, against which URL, and how to judge it."""

    url: str
    # req/s offered over the stage's window (replay.plan.schedule); None with speedup None: as recorded
    rate: float | None = None
    speedup: float | None = None  # time compression factor for the trace's own timing
    arrivals: Arrivals = field(default_factory=Arrivals)
    duration_s: float | None = None  # the stage's window: send the requests due in [0, duration_s)
    requests: int | None = None  # keep the first N requests
    model: str | None = None  # override the body's model (None: keep it if served, else the target's first)
    ignore_eos: bool = True  # ask the engine to decode exactly max_tokens (vLLM / llama.cpp `ignore_eos`)
    # sent as "Authorization: Bearer KEY" (unless `headers` has an Authorization); never stored
    api_key: str | None = field(default=None, repr=False)
    # (name, value) sent on every request and on the target check (--header); never stored
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # send each request's root session id (replay.dag.root_sessions) in this header, as
    # inference-perf's session token: a server-side router's session affinity key (--session-header)
    session_header: str | None = None
    # an https target's certificate: checked against the system's roots, or the PEM file
    # `ca_cert` alone (--ca-cert), or not at all (--insecure); replay.targets.url.ssl_context
    ca_cert: str | None = None
    insecure: bool = False
    # the engine's Prometheus endpoint read during each stage (replay.engine_metrics): None, the
    # target's /metrics; "none", not read
    metrics_url: str | None = None
    # open: every request at its scheduled time; causal: a session's turn k also waits for the
    # end of turn k-1 plus the recorded think time (see replay.causal); dag: a request also waits
    # for the end of every request it depends on plus its recorded wait (see replay.dag); auto:
    # dag when the trace has dependencies, else open (replay.plan.session_mode)
    sessions: SessionMode = "auto"
    # dag: apply the recorded waits as they were, not scaled by the stage's compression of time
    keep_waits: bool = False
    # causal sessions: a turn resends the previous turn's answer as the target engine streamed it
    # ("engine", as live clients do, so the engine's prefix cache sees its own answer), or as
    # recorded (rust/core/src/answers.rs)
    answers: AnswerMode = "engine"
    # a closed-loop stage: N users, each sending its next request the moment its last one ended
    # (every request due at once, at most N in flight; no rate: see replay.plan.schedule); with
    # causal sessions each user replays whole sessions, turn after turn with the recorded think
    # time between them
    concurrency: int | None = None
    timeout_s: float = RUNNER_DEFAULTS["timeout_s"]  # whole request, from its send
    stall_timeout_s: float = RUNNER_DEFAULTS["stall_timeout_s"]  # silence after the first token
    connect_timeout_s: float = RUNNER_DEFAULTS["connect_timeout_s"]
    drain_s: float = RUNNER_DEFAULTS["drain_s"]  # wait after the last scheduled send; 0 = no limit
    max_connections: int = RUNNER_DEFAULTS["max_connections"]
    warm_connections: int | None = None  # opened before t0; None = the plan's peak in flight (replay.runner.warm_connections)
    chunk_times: bool = True  # keep every chunk's arrival time (False: only count chunks)
    worker_threads: int = RUNNER_DEFAULTS["worker_threads"]
    # pin the runner's I/O threads to these CPUs (() = no pinning; the dispatcher keeps the
    # process's); see replay.sim.split_cpus
    cpus: tuple[int, ...] = ()
    lag_bound_ms: float = LAG_BOUND_MS  # a stage whose send lag p99 exceeds this is invalid
    slo: Slo = field(default_factory=Slo)
    # a fleet (replay.fleet): every replica, the first at `url` (empty: one target, `url`), and
    # the routing policy that picks each request's replica (None: round-robin for a fleet)
    targets: tuple[Target, ...] = ()
    route: str | None = None

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/\s]+", self.url or ""):
            raise ConfigError(f"--url: '{self.url}' is not an http:// or https:// URL")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigError(f"--rate: must be a finite number > 0, got {self.rate}")
        if self.speedup is not None and not self.speedup > 0:
            raise ConfigError(f"--speedup: must be > 0, got {self.speedup}")
        if self.rate is not None and self.speedup is not None:
            raise ConfigError("--rate and --speedup: give one, not both")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"--duration: must be > 0, got {self.duration_s}")
        if self.requests is not None and self.requests < 1:
            raise ConfigError(f"--requests: must be >= 1, got {self.requests}")
        for name in ("timeout_s", "stall_timeout_s", "connect_timeout_s", "lag_bound_ms"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"--{name.rsplit('_', 1)[0].replace('_', '-')}: must be > 0")
        if not self.drain_s >= 0:
            raise ConfigError(f"--drain: must be >= 0 (0 = no limit), got {self.drain_s}")
        if self.sessions not in SESSION_MODES:
            raise ConfigError(f"--sessions: unknown mode '{self.sessions}' ({', '.join(SESSION_MODES)})")
        if self.answers not in ANSWER_MODES:
            raise ConfigError(f"--answers: unknown mode '{self.answers}' (engine or recorded)")
        if self.concurrency is not None:
            self._check_closed_loop()
        if self.warm_connections is not None and self.warm_connections < 0:
            raise ConfigError(f"--warm-connections: must be >= 0, got {self.warm_connections}")
        if self.max_connections < 1 or self.worker_threads < 1:
            raise ConfigError("--max-connections and --worker-threads: must be >= 1")
        if self.metrics_url not in (None, "none") and not re.match(r"^https?://[^/\s]+", self.metrics_url):
            raise ConfigError(f"--metrics-url: '{self.metrics_url}' is not an http:// or https:// URL (or none)")
        if self.ca_cert is not None and self.insecure:
            raise ConfigError("--ca-cert and --insecure: give one (--insecure checks no certificate at all)")
        if self.ca_cert is not None and not os.path.isfile(self.ca_cert):
            raise ConfigError(f"--ca-cert: '{self.ca_cert}' is not a file")
        if self.ca_cert is not None:
            self.ssl_context()  # reads the file: ConfigError when it holds no certificate
        for name, value in self.headers:
            if not _valid_header(name, value):
                raise ConfigError(f"--header: '{name}' is not a header name, or its value holds a line break")
        if self.session_header is not None and not _valid_header(self.session_header, "x"):
            raise ConfigError(f"--session-header: '{self.session_header}' is not a header name")
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in self.cpus):
            raise ConfigError(f"cpus: expected CPU numbers >= 0, got {self.cpus!r}")
        self._check_fleet()

    def _check_fleet(self) -> None:
        if self.route is not None and self.route not in ROUTES:
            raise ConfigError(f"--route: unknown policy '{self.route}' ({', '.join(ROUTES)})")
        if self.route is not None and len(self.targets) < 2:
            raise ConfigError(
                f"--route {self.route}: routes among two targets or more (--url given several times, or --targets FILE)"
            )
        for t in self.targets:
            if not re.match(r"^https?://[^/\s]+", t.url):
                raise ConfigError(f"--url: '{t.url}' ({t.name}) is not an http:// or https:// URL")
        if self.targets and self.targets[0].url != self.url:
            raise ConfigError(f"targets: the first replica's URL ({self.targets[0].url}) is not url ({self.url})")
        if len({t.name for t in self.targets}) != len(self.targets):
            raise ConfigError("targets: two replicas have the same name")

    def _check_closed_loop(self) -> None:
        c = self.concurrency
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ConfigError(f"--concurrency: must be a whole number >= 1, got {c!r}")
        if self.rate is not None or self.speedup is not None:
            raise ConfigError("--concurrency: a closed-loop stage sets no rate; give --concurrency or --rate / --speedup")
        if self.duration_s is not None:
            raise ConfigError(
                "--concurrency: a closed-loop stage ends when its requests are done; use --requests, not --duration"
            )
        if self.arrivals.kind != "trace":
            raise ConfigError(f"--concurrency: a closed-loop stage has no arrivals to draw (--arrivals {self.arrivals.kind})")
        if c > self.max_connections:
            raise ConfigError(f"--concurrency: {c} users need as many connections; --max-connections is {self.max_connections}")
        if self.sessions == "dag":
            raise ConfigError("--concurrency: a closed-loop stage replays chains (--sessions causal), not --sessions dag")

    @property
    def fleet(self) -> bool:
        """Several replicas (routed client-side), not one target."""
        return len(self.targets) > 1

    @property
    def routing(self) -> str | None:
        """The routing policy of a fleet (None: one target)."""
        return (self.route or DEFAULT_ROUTE) if self.fleet else None

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of the target check and the metrics reads: the same certificate rule as
        the runner's (the system's roots, else --ca-cert alone, else --insecure)."""
        from replay.targets.url import ssl_context

        return ssl_context(self.ca_cert, self.insecure)

    def request_headers(self) -> list[tuple[str, str]]:
        """The headers every request and the target check carry: ``headers``, then the API key as
        ``Authorization: Bearer`` unless ``headers`` has an Authorization of its own."""
        out = list(self.headers)
        if self.api_key and not any(n.lower() == "authorization" for n, _ in out):
            out.append(("Authorization", f"Bearer {self.api_key}"))
        return out


# an HTTP header's name (RFC 9110's token)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _valid_header(name: str, value: str) -> bool:
    """A header name that is a token, and a value with no line break (nothing can be smuggled in)."""
    return _HEADER_NAME.fullmatch(name) is not None and not any(c in value for c in "\r\n\0")


def parse_header(text: str) -> tuple[str, str]:
    """'Name: value' (--header) -> (name, value); ConfigError when it is not one."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _valid_header(name, value):
        raise ConfigError(f"--header: '{text}' is not 'Name: value'")
    return name, value


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str, flag: str) -> float:
    """'2s', '100ms', '1.5', '3m' -> seconds (a bare number is seconds)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]*)\s*", text)
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise ConfigError(f"{flag}: '{text}' is not a duration (e.g. 2s, 100ms)")
    return float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1.0)


def parse_slo(text: str, attainment: float = SLO_ATTAINMENT) -> Slo:
    """'ttft=2s,tpot=100ms[,e2e=30s]' -> Slo."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "tpot", "e2e"):
            raise ConfigError(f"--slo: '{part}' is not one of ttft=..., tpot=..., e2e=...")
        values[f"{key}_s"] = parse_duration_s(value, f"--slo {key}")
    return Slo(**values, attainment=attainment)


@dataclass(frozen=True)
class AutoRates:
    """``--rates auto[:N]``: find the saturation rate first, then run `points` stages around it
    (:func:`replay.sweep.find_rates`)."""

    points: int = 5

    def __post_init__(self) -> None:
        if not (isinstance(self.points, int) and self.points >= 2):
            raise ConfigError(f"--rates auto:N: N must be a whole number >= 2, got {self.points!r}")


def parse_users(text: str) -> list[int]:
    """'1,4,16' (--concurrency) -> [1, 4, 16]: whole numbers >= 1, as given."""
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not parts or not all(x.isdigit() and int(x) >= 1 for x in parts):
        raise ConfigError(f"--concurrency: '{text}' must list whole numbers of users >= 1, e.g. 1,4,16")
    return [int(x) for x in parts]


def parse_rates(text: str) -> list[float] | AutoRates:
    """'1,2,4,8' -> [1.0, 2.0, 4.0, 8.0] (positive, as given); 'auto' or 'auto:N' -> AutoRates(N)."""
    head, sep, points = text.strip().partition(":")
    if head == "auto":
        if not sep:
            return AutoRates()
        if not points.strip().isdigit():
            raise ConfigError(f"--rates: '{text}' is not auto or auto:N (N stages, e.g. auto:5)")
        return AutoRates(int(points))
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--rates: '{text}' is not a comma-separated list of numbers") from None
    if not rates or any(not (math.isfinite(r) and r > 0) for r in rates):
        raise ConfigError(f"--rates: '{text}' must list positive rates, e.g. 1,2,4,8")
    return rates
