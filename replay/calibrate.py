"""Calibration: fit the embedded engine's cost model to a real engine from a few measured probes.

The simulated engine (``docs/sim-engine.md``) prices a step as
``step_overhead + per_seq_overhead × seqs + max(compute, memory)``, and passes each request
through a front end (``request_overhead``, one request at a time) before scheduling it. On the
hardware this module was written for (a tiny model on a CPU) the memory-bound regime cannot be
told apart from the fixed cost, so the fit is the linear model::

    time_s = a + b·seqs + c·tokens + d·positions + r·[the time is a TTFT]

with ``tokens`` the new tokens in the step and ``positions`` the attended positions (a chunk of
``n`` new tokens after ``c`` cached ones attends ``n·c + n(n+1)/2``), solved by non-negative least
squares on relative errors (every sample counts alike, a 5 ms decode as much as a 200 ms
prefill). A TTFT holds one front-end pass and one prefill step; a time per output token holds
one decode step only, which is what tells ``r`` from ``a``. The coefficients map onto profile
fields (:meth:`CostFit.profile`):

* ``a`` → ``step_overhead_ms``, ``b`` → ``per_seq_overhead_us``, ``r`` → ``request_overhead_ms``;
* ``c`` → ``peak_tflops`` with ``compute_efficiency`` 1: FLOPs per token are ``2 × params``, so
  ``peak = 2·params / c``;
* ``d`` → ``hidden_size``: with ``num_attention_heads`` 0 the cost model uses it only for
  attention FLOPs (``4 × layers × hidden`` per position), so it is set to
  ``d · peak / (4 · layers)`` and ``num_attention_heads`` to 0 (a base preset's heads would
  otherwise price attention instead);
* the memory term is made negligible (``memory_bandwidth_gbs`` very high), since the fit holds
  the whole cost already.

Measurements come from probes (:func:`probe_prefill`, :func:`probe_decode`) against a running
engine: single requests at a few prompt lengths with one output token (their median TTFT is one
prefill step, HTTP and tokenization included, as the sim's TTFT is), and ``B`` concurrent requests at a
few batch sizes (their median time per output token is one decode step of ``B`` sequences).
Probes are separate from whatever the profile is later judged on. :func:`refine` takes out the
embedded engine's own HTTP/tokenization time (measured by the same probes against it) from the
fit. :func:`mirror_knobs` gives the
``SimConfig`` fields that copy a real engine's scheduler settings (slots, step budget, block size).

::

    samples = probe_prefill(url) + probe_decode(url, batches=(1, 2, 4))
    fit = fit_step_costs(samples, ModelShape.from_tiny())
    write_profile(fit.profile(ModelShape.from_tiny(), name="llama-fit"), "llama-fit.json")
    start_sim(SimConfig(profile="llama-fit.json", **mirror_knobs("llama-server", {"parallel": 4})))
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay.errors import ConfigError

__all__ = [
    "StepSample",
    "ModelShape",
    "CostFit",
    "fit_step_costs",
    "refine",
    "write_profile",
    "mirror_knobs",
    "probe_prefill",
    "probe_decode",
    "positions",
]

GIB = 1024.0**3
# bandwidth that makes the cost model's memory term negligible (the linear fit carries the cost)
UNBOUNDED_BANDWIDTH_GBS = 1e7


def positions(new_tokens: float, context: float) -> float:
    """Attended positions of a chunk of ``new_tokens`` after ``context`` cached ones (as cost.rs)."""
    return new_tokens * context + new_tokens * (new_tokens + 1) / 2


@dataclass(frozen=True)
class StepSample:
    """One measured step: ``seqs`` sequences, each computing ``new_tokens`` after ``context`` cached
    tokens, took ``seconds``; with ``request`` the time is a TTFT, so it also holds the request's
    pass through the engine's front end."""

    seqs: int
    new_tokens: int
    context: int
    seconds: float
    request: bool = False

    def check(self, where: str) -> None:
        for name, low in (("seqs", 1), ("new_tokens", 1), ("context", 0)):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
                raise ConfigError(f"{where}: {name} must be an integer >= {low}, got {v!r}")
        s = self.seconds
        if not (isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0):
            raise ConfigError(f"{where}: seconds must be a finite number > 0, got {s!r}")

    def features(self) -> list[float]:
        n = self.seqs
        return [
            1.0,
            float(n),
            float(n * self.new_tokens),
            n * positions(self.new_tokens, self.context),
            1.0 if self.request else 0.0,
        ]


@dataclass(frozen=True)
class ModelShape:
    """The model a profile describes: what sets FLOPs per token, KV bytes per token and capacity."""

    params_b: float
    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_model_len: int = 2048
    weight_bytes_per_param: float = 2.0

    def __post_init__(self) -> None:
        if not (self.params_b > 0 and math.isfinite(self.params_b)):
            raise ConfigError(f"model shape: params_b must be > 0, got {self.params_b!r}")
        for name in ("num_layers", "num_kv_heads", "head_dim", "max_model_len"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"model shape: {name} must be >= 1, got {getattr(self, name)!r}")

    @classmethod
    def from_tiny(cls, shape: Any = None, vocab_size: int = 50257, max_model_len: int = 2048) -> ModelShape:
        """The shape of a :class:`replay.targets.tiny_models.TinyLlama` (default: the default one)."""
        from replay.targets.tiny_models import TinyLlama

        s = shape or TinyLlama()
        hd = s.head_dim
        layer = s.hidden * s.heads * hd * 2 + s.hidden * s.kv_heads * hd * 2 + 3 * s.hidden * s.ffn + 2 * s.hidden
        params = vocab_size * s.hidden * (1 if s.tied else 2) + s.layers * layer + s.hidden
        return cls(params_b=params / 1e9, num_layers=s.layers, num_kv_heads=s.kv_heads, head_dim=hd, max_model_len=max_model_len)

    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.num_layers * self.num_kv_heads * self.head_dim * 2.0


@dataclass(frozen=True)
class CostFit:
    """Fitted step-cost coefficients (seconds) and how well they fit (relative residuals)."""

    step_overhead_s: float
    per_seq_s: float
    per_token_s: float
    per_position_s: float
    request_overhead_s: float
    rel_rms: float
    rel_max: float
    n_samples: int

    def predict(self, seqs: int, new_tokens: int, context: int, request: bool = False) -> float:
        """Modelled seconds of one step of ``seqs`` equal sequences (plus a front-end pass with
        ``request``)."""
        x = StepSample(seqs, new_tokens, context, 1.0, request).features()
        return float(
            np.dot(x, [self.step_overhead_s, self.per_seq_s, self.per_token_s, self.per_position_s, self.request_overhead_s])
        )

    def profile(
        self, shape: ModelShape, name: str = "fitted", base: str = "cpu/tiny", kv_capacity_tokens: int | None = None
    ) -> dict[str, Any]:
        """A profile JSON object (``"base"`` + overrides) that makes the engine price steps as fitted.

        ``kv_capacity_tokens`` sizes the device memory so that the KV pool holds about that many
        tokens at ``gpu_memory_utilization`` 0.9 (None: the base's memory).
        """
        flops_per_token = 2.0 * shape.params_b * 1e9
        per_token = max(self.per_token_s, 1e-15)  # 0 would mean infinite FLOP/s
        flops_per_s = flops_per_token / per_token
        hidden = max(1, round(self.per_position_s * flops_per_s / (4.0 * shape.num_layers)))
        p: dict[str, Any] = {
            "base": base,
            "name": name,
            "params_b": shape.params_b,
            "weight_bytes_per_param": shape.weight_bytes_per_param,
            "num_layers": int(shape.num_layers),
            "hidden_size": int(hidden),
            "num_attention_heads": 0,
            "num_kv_heads": int(shape.num_kv_heads),
            "head_dim": int(shape.head_dim),
            "max_model_len": int(shape.max_model_len),
            "peak_tflops": flops_per_s / 1e12,
            "compute_efficiency": 1.0,
            "memory_bandwidth_gbs": UNBOUNDED_BANDWIDTH_GBS,
            "memory_efficiency": 1.0,
            "step_overhead_ms": self.step_overhead_s * 1e3,
            "per_seq_overhead_us": self.per_seq_s * 1e6,
            "request_overhead_ms": self.request_overhead_s * 1e3,
            "tensor_parallel": 1,
        }
        if kv_capacity_tokens is not None:
            if kv_capacity_tokens < 1:
                raise ConfigError(f"kv_capacity_tokens: must be >= 1, got {kv_capacity_tokens}")
            need = kv_capacity_tokens * shape.kv_bytes_per_token() + shape.params_b * 1e9 * shape.weight_bytes_per_param
            p["device_memory_gib"] = need / GIB / 0.9
            p["reserved_memory_gib"] = 0.0
        return p


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    try:
        from scipy.optimize import nnls

        return nnls(a, y)[0]
    except ImportError:  # numpy only: drop negative columns, refit
        active = list(range(a.shape[1]))
        x = np.zeros(a.shape[1])
        while active:
            sol = np.linalg.lstsq(a[:, active], y, rcond=None)[0]
            if (sol >= 0).all():
                x[active] = sol
                break
            active.pop(int(np.argmin(sol)))
        return x


def fit_step_costs(samples: Iterable[StepSample], shape: ModelShape | None = None) -> CostFit:
    """Fit ``time_s = a + b·seqs + c·tokens + d·positions + r·request`` (all >= 0) to measured steps.

    Raises ConfigError naming the sample and field at fault, or when fewer than 2 samples of
    different shapes are given. ``shape`` is checked for use with :meth:`CostFit.profile`.
    """
    rows = list(samples)
    for i, s in enumerate(rows):
        if not isinstance(s, StepSample):
            raise ConfigError(f"calibration sample {i}: expected a StepSample, got {type(s).__name__}")
        s.check(f"calibration sample {i}")
    if len({(s.seqs, s.new_tokens, s.context) for s in rows}) < 2:
        raise ConfigError(f"calibration samples: need at least 2 samples of different shapes (got {len(rows)})")
    x = np.array([s.features() for s in rows])
    y = np.array([s.seconds for s in rows])
    w = 1.0 / y  # relative errors
    scale = np.abs(x * w[:, None]).max(axis=0)
    scale[scale == 0] = 1.0
    coef = _nnls(x * w[:, None] / scale, y * w) / scale
    rel = (x @ coef - y) / y
    return CostFit(
        step_overhead_s=float(coef[0]),
        per_seq_s=float(coef[1]),
        per_token_s=float(coef[2]),
        per_position_s=float(coef[3]),
        request_overhead_s=float(coef[4]),
        rel_rms=float(np.sqrt(np.mean(rel**2))),
        rel_max=float(np.abs(rel).max()),
        n_samples=len(rows),
    )


def refine(samples: Sequence[StepSample], fit: CostFit, sim_samples: Sequence[StepSample]) -> CostFit:
    """Take out what the embedded engine adds on its own and fit again.

    The engine's measured times are its modelled steps plus its own HTTP, tokenization and
    scheduling time (a few ms on a busy 2-core machine, not small next to a tiny model's steps).
    ``sim_samples`` are the same probes run against the engine with ``fit``'s profile; each real
    sample is lowered by what the engine added at that shape (its fitted time minus ``fit``'s),
    and the result is fitted again. One fixed-point step; it uses probes only.
    """
    sim_fit = fit_step_costs(sim_samples)
    corrected = []
    for s in samples:
        shape = (s.seqs, s.new_tokens, s.context, s.request)
        extra = sim_fit.predict(*shape) - fit.predict(*shape)
        corrected.append(dataclasses.replace(s, seconds=max(s.seconds - extra, 0.2 * s.seconds)))
    return fit_step_costs(corrected)


def write_profile(profile: Mapping[str, Any], path: str | Path) -> Path:
    """Write a profile object as JSON (what ``SimConfig(profile=path)`` loads)."""
    path = Path(path)
    path.write_text(json.dumps(dict(profile), indent=1, sort_keys=True) + "\n")
    return path


def mirror_knobs(engine: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``SimConfig`` fields that copy a real engine's scheduler settings.

    llama-server: slots (``parallel``, default 4) → ``max_num_seqs``, logical batch (``batch_size``,
    2048) → ``max_num_batched_tokens``, per-slot context (``ctx_size / parallel``) →
    ``max_model_len``. vLLM's CPU build: its own defaults (128 sequences, 2048 batched tokens, KV
    blocks of 128 tokens) unless ``config`` sets them.
    """
    config = dict(config or {})
    if engine == "llama-server":
        slots = int(config.get("parallel") or 4)
        out: dict[str, Any] = {"max_num_seqs": slots, "max_num_batched_tokens": int(config.get("batch_size") or 2048)}
        if config.get("ctx_size"):
            out["max_model_len"] = max(16, int(config["ctx_size"]) // slots)
        return out
    if engine == "vllm":
        out = {
            "max_num_seqs": int(config.get("max_num_seqs") or 128),
            "max_num_batched_tokens": int(config.get("max_num_batched_tokens") or 2048),
            "block_size": int(config.get("block_size") or 128),
            "enable_prefix_caching": bool(config.get("enable_prefix_caching", True)),
        }
        if config.get("max_model_len"):
            out["max_model_len"] = int(config["max_model_len"])
        return out
    raise ConfigError(f"mirror_knobs: engine must be 'llama-server' or 'vllm', got {engine!r}")


# --- probes against a running engine --------------------------------------------------------------


def _trace(prompts: Sequence[str], max_tokens: Sequence[int], arrival_us: Sequence[int], input_tokens: Sequence[int]):
    import polars as pl

    from replay.trace import Trace, TraceMeta, validate

    n = len(prompts)
    bodies = [
        json.dumps({"model": "m", "max_tokens": int(m), "messages": [{"role": "user", "content": p}]})
        for p, m in zip(prompts, max_tokens)
    ]
    df = pl.DataFrame(
        {
            "request_id": [f"p{i}" for i in range(n)],
            "api": ["chat"] * n,
            "model": ["m"] * n,
            "arrival_us": [int(a) for a in arrival_us],
            "body": bodies,
            "input_tokens": [int(t) for t in input_tokens],
            "output_tokens": [int(m) for m in max_tokens],
            "max_tokens": [int(m) for m in max_tokens],
        }
    )
    meta = TraceMeta(source_format="calibration-probe", tokenizer="gpt2")
    return Trace(df=validate(df, meta, source="<calibration probe>"), meta=meta)


def _run(url: str, trace, cpus: tuple[int, ...]):
    from replay.config import RunConfig
    from replay.runner import run_stage

    df = run_stage(trace, RunConfig(url=url, lag_bound_ms=1000, timeout_s=120, cpus=cpus)).requests
    bad = df.filter(df["error"] != "none")
    if bad.height:
        from replay.errors import TargetError

        raise TargetError(
            f"calibration probe against {url}: {bad.height} of {df.height} requests failed "
            f"({bad['error'][0]}: {bad['error_detail'][0]})"
        )
    return df


def probe_prefill(
    url: str,
    lengths: Sequence[int] = (32, 128, 256, 512, 1024),
    repeats: int = 3,
    gap_s: float = 0.3,
    seed: int = 7,
    cpus: tuple[int, ...] = (),
) -> list[StepSample]:
    """Single requests (one output token) at each prompt length, ``gap_s`` apart so that each finds
    the engine idle, after one warm-up request (dropped); one sample per length: a front-end pass
    and a prefill step of the engine-reported prompt length, taking the median TTFT (from sending)
    of its ``repeats``. ``cpus`` pins the runner (see :func:`replay.sim.split_cpus`)."""
    from replay.prompts import text_of_tokens

    prompts, order = [text_of_tokens(64, seed=seed - 1)], [64]
    for r in range(repeats):
        for length in lengths:
            prompts.append(text_of_tokens(int(length), seed=seed + 1000 * r + int(length)))
            order.append(int(length))
    trace = _trace(prompts, [1] * len(prompts), [int(i * gap_s * 1e6) for i in range(len(prompts))], order)
    df = _run(url, trace, cpus).sort("intended_ns").slice(1)
    by_length: dict[int, list[tuple[int, float]]] = {}
    for length, row in zip(order[1:], df.iter_rows(named=True)):
        n = row["prompt_tokens"] or row["input_tokens"]
        by_length.setdefault(length, []).append((int(n), (row["first_token_ns"] - row["sent_ns"]) / 1e9))
    return [
        StepSample(1, int(np.median([n for n, _ in v])), 0, float(np.median([t for _, t in v])), request=True)
        for v in by_length.values()
    ]


def probe_decode(
    url: str,
    batches: Sequence[int] = (1, 2, 4),
    prompt_tokens: int = 160,
    max_tokens: int = 48,
    seed: int = 11,
    cpus: tuple[int, ...] = (),
) -> list[StepSample]:
    """For each batch size B: B requests sent at once; one sample per batch: a decode step of B
    sequences (context: prompt + half the output) taking the median time per output token.
    ``cpus`` pins the runner."""
    from replay.prompts import text_of_tokens

    out = []
    for b in batches:
        prompts = [text_of_tokens(prompt_tokens, seed=seed + 100 * b + i) for i in range(b)]
        df = _run(url, _trace(prompts, [max_tokens] * b, [0] * b, [prompt_tokens] * b), cpus)
        n_out = df["completion_tokens"].fill_null(df["output_chunks"]).to_numpy()
        tpot = (df["end_ns"].to_numpy() - df["first_token_ns"].to_numpy()) / np.maximum(n_out - 1, 1) / 1e9
        prompt = int(np.median(df["prompt_tokens"].fill_null(prompt_tokens).to_numpy()))
        out.append(StepSample(int(b), 1, prompt + max_tokens // 2, float(np.median(tpot))))
    return out
