"""vLLM as a target: its OpenAI server started from its own venv, its knob space, its metrics.

:class:`Vllm` runs ``python -m vllm.entrypoints.openai.api_server`` with the venv python from
:func:`replay.targets.vllm_install.install_vllm` (or any python that imports vllm), on loopback,
with per-request cache reports on (``--enable-prompt-tokens-details``) and, on CPU,
``--enforce-eager`` by default (healthy in ~25-30 s instead of 60-80 s). Each launch gets its own
TMPDIR and VLLM_CACHE_ROOT inside the scratch folder, removed when it stops, so nothing is left in
``~/.cache/vllm`` or ``/tmp``. :data:`VLLM_KNOBS` is the knob space; the scheduling knobs are shared
with the embedded engine, which takes vLLM's flag names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from replay.errors import TargetError
from replay.targets.engine import Knob, config_args
from replay.targets.process import MetricSpec, ProcessEngine

__all__ = ["Vllm", "VLLM_KNOBS", "VLLM_SCHEDULER_KNOBS", "VLLM_METRICS"]

# The scheduler and cache knobs that vLLM and the embedded engine share (vLLM's names and flags).
VLLM_SCHEDULER_KNOBS: tuple[Knob, ...] = (
    Knob(
        "max_num_seqs",
        "--max-num-seqs",
        "int",
        default=None,
        range=(1, 1024),
        doc="most sequences in one batch (vLLM: 256 on GPU, 128 on CPU)",
    ),
    Knob(
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        "int",
        default=None,
        range=(16, 131072),
        doc="token budget of one scheduler step (chunked prefill size); 2048 on CPU",
    ),
    Knob(
        "enable_prefix_caching",
        "--enable-prefix-caching",
        "bool",
        default=True,
        off_flag="--no-enable-prefix-caching",
        doc="reuse KV blocks of shared prompt prefixes",
    ),
    Knob(
        "gpu_memory_utilization",
        "--gpu-memory-utilization",
        "float",
        default=0.9,
        range=(0.05, 0.99),
        doc="share of accelerator memory for weights, activations and KV cache",
    ),
    Knob(
        "block_size",
        "--block-size",
        "choice",
        default=None,
        choices=("8", "16", "32", "64", "128", "256"),
        doc="tokens per KV block, the prefix-cache granularity (16 on GPU, 128 on CPU)",
    ),
    Knob(
        "scheduling_policy",
        "--scheduling-policy",
        "choice",
        default="fcfs",
        choices=("fcfs", "priority"),
        doc="order of the waiting queue",
    ),
    Knob(
        "long_prefill_token_threshold",
        "--long-prefill-token-threshold",
        "int",
        default=0,
        range=(0, 1 << 20),
        doc="prompts longer than this count as long for partial-prefill limits",
    ),
    Knob(
        "speculative_config",
        "--speculative-config",
        "json",
        default=None,
        doc='speculative decoding, e.g. {"method": "ngram", "num_speculative_tokens": 4}',
    ),
    Knob(
        "kv_cache_dtype",
        "--kv-cache-dtype",
        "choice",
        default="auto",
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
        lossless=False,
        doc="KV cache precision (lossy below the model's dtype)",
    ),
    Knob("max_model_len", "--max-model-len", "int", default=None, range=(16, 1 << 22), doc="longest context served"),
    Knob("seed", "--seed", "int", default=0, range=(0, 2**31 - 1), doc="sampling seed"),
)

VLLM_KNOBS: tuple[Knob, ...] = VLLM_SCHEDULER_KNOBS + (
    Knob(
        "enable_chunked_prefill",
        "--enable-chunked-prefill",
        "bool",
        default=True,
        off_flag="--no-enable-chunked-prefill",
        doc="split long prefills across steps",
    ),
    Knob(
        "max_num_partial_prefills",
        "--max-num-partial-prefills",
        "int",
        default=1,
        range=(1, 64),
        doc="prefills that may be partially done at once",
    ),
    Knob(
        "enforce_eager",
        "--enforce-eager",
        "bool",
        default=False,
        doc="skip graph capture / compilation (faster start, slower steps)",
    ),
    Knob(
        "async_scheduling",
        "--async-scheduling",
        "bool",
        default=None,
        off_flag="--no-async-scheduling",
        doc="overlap scheduling with the model step",
    ),
    Knob(
        "dtype",
        "--dtype",
        "choice",
        default="auto",
        choices=("auto", "bfloat16", "float16", "float32"),
        lossless=False,
        doc="weight and activation precision",
    ),
)

# common name -> vLLM metric names (with or without _total; older names after newer)
VLLM_METRICS: MetricSpec = {
    "running": (("vllm:num_requests_running",), "sum"),
    "waiting": (("vllm:num_requests_waiting",), "sum"),
    "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "mean"),
    "prefix_cache_queries": (("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), "sum"),
    "prefix_cache_hits": (("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"), "sum"),
    "preemptions": (("vllm:num_preemptions",), "sum"),
    "prompt_tokens": (("vllm:prompt_tokens",), "sum"),
    "generation_tokens": (("vllm:generation_tokens",), "sum"),
    "cached_prompt_tokens": (("vllm:prompt_tokens_cached",), "sum"),
    "requests_finished": (("vllm:request_success",), "sum"),
    "prefill_time_s": (("vllm:request_prefill_time_seconds_sum",), "sum"),
    "prefill_requests": (("vllm:request_prefill_time_seconds_count",), "sum"),
    "decode_time_s": (("vllm:request_decode_time_seconds_sum",), "sum"),
    "decode_requests": (("vllm:request_decode_time_seconds_count",), "sum"),
}


@dataclasses.dataclass
class Vllm(ProcessEngine):
    """vLLM serving ``model`` (a Hugging Face folder) with ``python`` (default: the cached venv's).

    ``defaults`` is the config under the caller's (CPU-friendly: eager mode); ``kv_cache_space_gib``
    sets VLLM_CPU_KVCACHE_SPACE (ignored on GPU builds); ``extra_args`` go last, unvalidated.

    ``tool_call_parser`` (e.g. ``hermes``) starts it with ``--enable-auto-tool-choice
    --tool-call-parser``: vLLM answers a request that carries ``tools`` without ``tool_choice``
    (which it takes as ``"auto"``) with a 400 unless both are set. ``chat_template`` (a file)
    replaces the model's own template (``--chat-template``).
    """

    model: str | Path
    python: str | Path | None = None
    served_model_name: str | None = None
    tool_call_parser: str | None = None
    chat_template: str | Path | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"enforce_eager": True})
    kv_cache_space_gib: float | None = 1.0
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = 300.0
    stop_timeout_s: float = 20.0

    name: ClassVar[str] = "vllm"
    knobs: ClassVar[tuple[Knob, ...]] = VLLM_KNOBS
    default_knobs: ClassVar[tuple[str, ...]] = ("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching")
    metric_spec: ClassVar[MetricSpec] = VLLM_METRICS

    def _python(self) -> str:
        if self.python is not None:
            return str(self.python)
        from replay.targets.vllm_install import vllm_python

        found = vllm_python()
        return str(found) if found is not None else "python3"

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        cmd = [
            self._python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enable-prompt-tokens-details",
            "--disable-uvicorn-access-log",
        ]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        if self.tool_call_parser:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.chat_template is not None:
            cmd += ["--chat-template", str(self.chat_template)]
        return cmd + config_args(self.name, self.knobs, config) + list(self.extra_args)

    def environment(self, scratch: Path) -> dict[str, str]:
        tmp, cache = scratch / "tmp", scratch / "vllm-cache"
        tmp.mkdir(exist_ok=True)
        cache.mkdir(exist_ok=True)
        env = {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CACHE_ROOT": str(cache),
            "TMPDIR": str(tmp),
            "PYTHONUNBUFFERED": "1",
            # exposes POST /reset_prefix_cache, which a sweep's stages (and the optimizer's
            # diagnostic sweep) call so that each starts from a cold prefix cache
            "VLLM_SERVER_DEV_MODE": "1",
        }
        if self.kv_cache_space_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_space_gib:g}"
        return env

    def preflight(self) -> None:
        if self.python is None:
            from replay.targets.vllm_install import vllm_python

            if vllm_python() is None:
                raise TargetError(
                    "vllm: not installed; run `replay engines install-vllm` (or pass python=... with vllm importable)"
                )
        elif not Path(self.python).exists():
            raise TargetError(f"vllm: python {self.python} not found")
