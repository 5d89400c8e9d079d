"""Synthetic production-shaped traces: the library side of ``replay generate``.

Owns :class:`GenerateConfig` and :func:`generate`. The traffic model:

- Requests arrive as a gamma renewal process: mean rate ``rate`` requests per second, gaps
  with coefficient of variation ``burst_cv`` (1 is Poisson, larger is burstier). Each arrival
  slot goes to the session turn whose think time has passed longest ago or, when none is due,
  starts a new session; so sessions start in the same bursts, at about ``rate / turns_mean``
  per second, and a turn waits for the next slot after its think time (longer in a lull).
- A session has a geometric number of turns (mean ``turns_mean``) separated by lognormal think
  times (mean ``think_time_mean_s``; the gap between consecutive turns' arrivals, reading the
  reply included).
- Every session opens with one of ``n_system_prompts`` shared system prompts (Zipf-like
  popularity, lognormal lengths around ``system_prompt_tokens``). Turn k's request holds the
  whole conversation so far: system prompt, the user turns and the assistant replies (of the
  earlier turns' output lengths), so prefix sharing across turns and sessions is real.
- User-turn and output lengths are lognormal around their medians, clipped, and correlated in
  log space by ``length_correlation`` (not one shared draw).

Text comes from :mod:`replay.prompts`, so token counts are exact and token ids are known
without re-encoding; each distinct text is still encoded once to check them.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from replay.blocks import HASH_ALGO, block_hashes
from replay.bodies import body_json
from replay.errors import ConfigError
from replay.trace import APIS, BLOCK_SIZE, Trace, TraceMeta, validate

__all__ = ["GenerateConfig", "generate", "generated_meta", "schedule_sessions"]

_SESSION_DOMAIN = 0x5E55
_TEXT_DOMAIN = 0x7E47
_CHECK_REQUESTS = 24
_MAX_TURNS = 64
_SYSTEM_SIGMA = 0.8
_THINK_SIGMA = 1.0


@dataclass(frozen=True)
class GenerateConfig:
    """What :func:`generate` makes; every random choice follows ``seed``."""

    n_requests: int = 1000
    seed: int = 0
    rate: float = 2.0  # mean request rate (req/s), all turns; sessions: rate / turns_mean
    burst_cv: float = 2.0  # CV of the gamma gaps between requests (1 = Poisson)
    n_system_prompts: int = 4
    system_prompt_tokens: int = 400  # median system-prompt length (lognormal, sigma 0.8)
    turns_mean: float = 3.0  # mean turns per session (geometric, at least 1)
    think_time_mean_s: float = 10.0  # mean least gap between a session's turns (lognormal)
    user_tokens_p50: int = 200  # median tokens in one user turn
    output_tokens_p50: int = 130  # median output tokens
    length_sigma: float = 1.0  # log-space sigma of user-turn and output lengths
    length_correlation: float = 0.3  # correlation of log user-turn and log output lengths
    max_user_tokens: int = 8192
    max_output_tokens: int = 2048
    # fits with max_output_tokens in an 8k context; a session ends before a turn whose prompt
    # would exceed this
    max_input_tokens: int = 6144
    model: str = "default"
    tokenizer: str = "gpt2"
    block_size: int = BLOCK_SIZE
    api: str = "chat"

    def __post_init__(self) -> None:
        positive_ints = (
            "n_requests",
            "n_system_prompts",
            "system_prompt_tokens",
            "user_tokens_p50",
            "output_tokens_p50",
            "max_user_tokens",
            "max_output_tokens",
            "max_input_tokens",
            "block_size",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"generate: field '{name}' must be a positive integer, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"generate: field 'seed' must be an integer >= 0, got {self.seed!r}")
        for name in ("rate", "burst_cv", "think_time_mean_s", "length_sigma"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"generate: field '{name}' must be a positive number, got {value!r}")
        if not (isinstance(self.turns_mean, (int, float)) and 1.0 <= self.turns_mean <= _MAX_TURNS):
            raise ConfigError(f"generate: field 'turns_mean' must be in [1, {_MAX_TURNS}], got {self.turns_mean!r}")
        if not (isinstance(self.length_correlation, (int, float)) and -1.0 < self.length_correlation < 1.0):
            raise ConfigError(f"generate: field 'length_correlation' must be in (-1, 1), got {self.length_correlation!r}")
        if self.api not in APIS:
            raise ConfigError(f"generate: field 'api' must be one of {', '.join(sorted(APIS))}, got {self.api!r}")
        if self.system_prompt_tokens >= self.max_input_tokens:
            raise ConfigError("generate: field 'system_prompt_tokens' must be below 'max_input_tokens'")


def _lognormal_int(rng, median: float, sigma: float, z: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.rint(median * np.exp(sigma * z)), lo, hi).astype(np.int64)


def schedule_sessions(cfg: GenerateConfig, rng: np.random.Generator, sys_len: np.ndarray) -> pl.DataFrame:
    """Schedule the requests: one row per request, in arrival order.

    Arrival slots form a gamma renewal process (mean gap 1/rate, CV burst_cv). Each slot goes to
    the session turn that has waited longest for its think time to pass, or, when none is due,
    to a new session. So the request stream has the asked rate and CV exactly in distribution,
    and sessions start at about rate / turns_mean per second, in the same bursts. A turn's
    prompt holds the system prompt, the user turns up to it and the replies before it; a
    session ends before the first turn whose prompt would exceed max_input_tokens.
    """
    n = cfg.n_requests
    shape = 1.0 / cfg.burst_cv**2
    arrival = np.cumsum(rng.gamma(shape, 1.0 / (cfg.rate * shape), n))
    arrival -= arrival[0]
    popularity = 1.0 / np.arange(1, len(sys_len) + 1)
    popularity /= popularity.sum()
    n_turns = np.minimum(rng.geometric(1.0 / cfg.turns_mean, n), _MAX_TURNS).tolist()
    system = rng.choice(len(sys_len), n, p=popularity).tolist()
    # per created turn (at most 2n: each slot starts a session and/or queues a next turn)
    rho = cfg.length_correlation
    z_user = rng.standard_normal(2 * n)
    z_out = rho * z_user + math.sqrt(1 - rho**2) * rng.standard_normal(2 * n)
    user = _lognormal_int(rng, cfg.user_tokens_p50, cfg.length_sigma, z_user, 1, cfg.max_user_tokens).tolist()
    out = _lognormal_int(rng, cfg.output_tokens_p50, cfg.length_sigma, z_out, 1, cfg.max_output_tokens).tolist()
    think = rng.lognormal(math.log(cfg.think_time_mean_s) - _THINK_SIGMA**2 / 2, _THINK_SIGMA, 2 * n).tolist()
    rows: list[tuple[int, int, int, float, int, int, int]] = []
    due: list[tuple[float, int, int, int, int]] = []  # (ready_s, session, turn, created, prompt)
    created = sessions = 0
    for t in arrival.tolist():
        if due and due[0][0] <= t:
            _, session, turn, j, prompt = heapq.heappop(due)
        else:
            session, turn, j = sessions, 0, created
            sessions += 1
            created += 1
            user[j] = min(user[j], cfg.max_input_tokens - int(sys_len[system[session]]))
            prompt = int(sys_len[system[session]]) + user[j]
        rows.append((session, turn, system[session], t, user[j], out[j], prompt))
        if turn + 1 < n_turns[session]:
            nxt = created
            created += 1
            next_prompt = prompt + out[j] + user[nxt]
            if next_prompt <= cfg.max_input_tokens:
                heapq.heappush(due, (t + think[nxt], session, turn + 1, nxt, next_prompt))
    return pl.DataFrame(
        rows,
        orient="row",
        schema=[
            "session",
            "turn",
            "system",
            "arrival_s",
            "user_tokens",
            "output_tokens",
            "input_tokens",
        ],
    )


def generate(config: GenerateConfig | None = None) -> Trace:
    """Make a synthetic production-shaped trace as described in this module's docstring."""
    from replay.prompts import prompt_vocab

    cfg = config or GenerateConfig()
    vocab = prompt_vocab(cfg.tokenizer)
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, _SESSION_DOMAIN]))
    sys_len = _lognormal_int(
        rng, cfg.system_prompt_tokens, _SYSTEM_SIGMA, rng.standard_normal(cfg.n_system_prompts), 1, cfg.max_input_tokens - 1
    )
    sys_units = [vocab.sample(int(n), rng) for n in sys_len]

    requests = schedule_sessions(cfg, rng, sys_len)
    sys_texts = [vocab.render(u) for u in sys_units]

    # one text rng per session; each turn draws its user text, then its reply
    session_rng: dict[int, np.random.Generator] = {}
    user: dict[tuple[int, int], tuple[str, np.ndarray]] = {}
    reply: dict[tuple[int, int], tuple[str, np.ndarray]] = {}
    ids, parents, bodies, hashes, contents = [], [], [], [], []
    last_id: dict[int, str] = {}
    rows = requests.select("session", "turn", "system", "user_tokens", "output_tokens")
    for i, (session, turn, system, n_user, out) in enumerate(rows.iter_rows()):
        srng = session_rng.get(session)
        if srng is None:
            srng = np.random.default_rng(np.random.SeedSequence([cfg.seed, _TEXT_DOMAIN, session]))
            session_rng[session] = srng
        for store, n in ((user, n_user), (reply, out)):
            units = vocab.sample(n, srng)
            store[(session, turn)] = (vocab.render(units), units)
        pieces = [(sys_texts[system], sys_units[system])]
        messages = [{"role": "system", "content": sys_texts[system]}]
        for k in range(turn + 1):
            pieces.append(user[(session, k)])
            messages.append({"role": "user", "content": user[(session, k)][0]})
            if k < turn:
                pieces.append(reply[(session, k)])
                messages.append({"role": "assistant", "content": reply[(session, k)][0]})
        if cfg.api == "chat":
            body = {"model": cfg.model, "messages": messages, "max_tokens": out}
        else:
            body = {"model": cfg.model, "prompt": "".join(t for t, _ in pieces), "max_tokens": out}
        token_ids = vocab.ids(np.concatenate([u for _, u in pieces]))
        rid = f"req-{i:06d}"
        ids.append(rid)
        parents.append(last_id.get(session) if turn > 0 else None)
        last_id[session] = rid
        bodies.append(body_json(body))
        hashes.append(block_hashes(token_ids, cfg.block_size))
        contents.append((pieces, token_ids))
    if [len(t) for _, t in contents] != requests["input_tokens"].to_list():
        raise AssertionError("generate: prompt lengths disagree with the schedule")
    _check_sample(cfg.tokenizer, contents)

    df = pl.DataFrame(
        {
            "request_id": ids,
            "session_id": [f"session-{s:05d}" for s in requests["session"].to_list()],
            "parent_request_id": pl.Series(parents, dtype=pl.String),
            "turn": requests["turn"],
            "api": [cfg.api] * len(ids),
            "model": [cfg.model] * len(ids),
            "arrival_us": (requests["arrival_s"] * 1e6).round().cast(pl.Int64),
            "body": bodies,
            "input_tokens": requests["input_tokens"],
            "output_tokens": requests["output_tokens"],
            "max_tokens": requests["output_tokens"],
            "block_hashes": pl.Series(hashes, dtype=pl.List(pl.UInt64)),
        }
    )
    meta = generated_meta(cfg.tokenizer, cfg.block_size)
    return Trace(validate(df, meta, source="generated trace"), meta)


def generated_meta(tokenizer: str, block_size: int) -> TraceMeta:
    """The metadata of a generated trace (made-up text: nothing to redact)."""
    return TraceMeta(
        t0_unix_us=0,
        source_format="generated",
        tokenizer=tokenizer,
        block_size_tokens=block_size,
        hash_algo=HASH_ALGO,
        redaction_policy="synthetic",
    )


_Prompt = tuple[list[tuple[str, np.ndarray]], np.ndarray]  # (text pieces with units, token ids)


def _check_sample(name: str, contents: list[_Prompt]) -> None:
    """Re-encode the prompts of a spread of requests (and the longest) and compare token ids.

    Additivity of the prompt units is checked when the vocabulary is built; this checks the
    assembled prompts end to end without paying to encode every request."""
    from replay.tokenizer import load_tokenizer

    n = len(contents)
    picks = set(np.linspace(0, n - 1, min(n, _CHECK_REQUESTS)).astype(int).tolist())
    picks.add(int(np.argmax([len(t) for _, t in contents])))
    texts = ["".join(t for t, _ in contents[i][0]) for i in sorted(picks)]
    encoded = load_tokenizer(name).encode_batch(texts, add_special_tokens=False)
    for i, enc in zip(sorted(picks), encoded):
        if enc.ids != contents[i][1].tolist():
            raise ConfigError(f"tokenizer '{name}': request {i}'s synthesized prompt does not re-encode exactly")
