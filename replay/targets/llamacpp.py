"""llama.cpp's ``llama-server`` as a target: command line, knob space, metrics.

:class:`LlamaServer` runs the binary from :func:`replay.targets.llamacpp_build.build_llama_server`
(or any ``llama-server``) on a GGUF model, on loopback, with ``--metrics`` always on so that
``/metrics`` serves the ``llamacpp:*`` counters. Its cache reports per request come back as
``usage.prompt_tokens_details.cached_tokens`` (and ``timings.cache_n``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from replay.errors import TargetError
from replay.targets.engine import Knob, config_args
from replay.targets.process import MetricSpec, ProcessEngine

__all__ = ["LlamaServer", "LLAMACPP_KNOBS", "LLAMACPP_METRICS", "KV_CACHE_TYPES"]

KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

LLAMACPP_KNOBS: tuple[Knob, ...] = (
    Knob(
        "ctx_size",
        "-c",
        "int",
        default=None,
        range=(0, 1 << 20),
        doc="KV cache size in tokens, shared by all slots (0: the model's context)",
    ),
    Knob("parallel", "-np", "int", default=None, range=(1, 256), doc="server slots: requests decoded at once (default: auto)"),
    Knob(
        "batch_size",
        "-b",
        "int",
        default=2048,
        range=(1, 1 << 16),
        doc="logical batch: most prompt tokens submitted per decode call",
    ),
    Knob("ubatch_size", "-ub", "int", default=512, range=(1, 1 << 16), doc="physical batch: most tokens per compute step"),
    Knob("threads", "-t", "int", default=None, range=(1, 512), doc="CPU threads for generation (default: all cores)"),
    Knob(
        "cache_reuse",
        "--cache-reuse",
        "int",
        default=0,
        range=(0, 1 << 16),
        doc="smallest chunk reused from the cache by KV shifting (0: off)",
    ),
    Knob("flash_attn", "-fa", "choice", default="auto", choices=("on", "off", "auto"), doc="flash attention"),
    Knob(
        "cont_batching",
        "--cont-batching",
        "bool",
        default=True,
        off_flag="--no-cont-batching",
        doc="continuous (in-flight) batching",
    ),
    Knob(
        "kv_unified",
        "--kv-unified",
        "bool",
        default=None,
        off_flag="--no-kv-unified",
        doc="one KV buffer shared by all slots (default: on when slots are auto)",
    ),
    Knob(
        "cache_ram",
        "--cache-ram",
        "int",
        default=8192,
        range=(-1, 1 << 20),
        doc="MiB of host RAM for the prompt cache across slots (-1: no limit, 0: off)",
    ),
    Knob("cache_type_k", "-ctk", "choice", default="f16", choices=KV_CACHE_TYPES, lossless=False, doc="K cache precision"),
    Knob(
        "cache_type_v",
        "-ctv",
        "choice",
        default="f16",
        choices=KV_CACHE_TYPES,
        lossless=False,
        doc="V cache precision (quantized V needs flash attention)",
    ),
)

# llama.cpp counts the prompt tokens it evaluated (llamacpp:prompt_tokens_total, "excluding cached
# tokens") apart from those reused from a slot's cache (llamacpp:prompt_tokens_cached_total);
# LlamaServer.derive adds them up so that prompt_tokens means all prompt tokens, as elsewhere.
LLAMACPP_METRICS: MetricSpec = {
    "running": (("llamacpp:requests_processing",), "sum"),
    "waiting": (("llamacpp:requests_deferred",), "sum"),
    "kv_usage": (("llamacpp:kv_cache_usage_ratio",), "mean"),
    "prefix_cache_hits": (("llamacpp:prompt_tokens_cached",), "sum"),
    "prompt_tokens": (("llamacpp:prompt_tokens",), "sum"),
    "generation_tokens": (("llamacpp:tokens_predicted",), "sum"),
    "cached_prompt_tokens": (("llamacpp:prompt_tokens_cached",), "sum"),
    "prefill_time_s": (("llamacpp:prompt_seconds",), "sum"),  # prompt processing time (counter)
    "decode_time_s": (("llamacpp:tokens_predicted_seconds",), "sum"),  # generation time (counter)
}


@dataclasses.dataclass
class LlamaServer(ProcessEngine):
    """``llama-server`` serving the GGUF ``model``; ``binary`` defaults to the cached build.

    ``defaults`` is the config under the caller's (one thread: two fight over a 2-core machine);
    ``extra_args`` go last, unvalidated. ``chat_template`` (a Jinja file) replaces the model's own
    template (``--chat-template-file``; this llama-server renders templates with Jinja by default,
    so a template that knows ``tools``, ``tool_calls`` and ``tool`` messages renders them).
    """

    model: str | Path
    binary: str | Path | None = None
    alias: str | None = None
    chat_template: str | Path | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = 120.0
    stop_timeout_s: float = 10.0

    name: ClassVar[str] = "llama-server"
    knobs: ClassVar[tuple[Knob, ...]] = LLAMACPP_KNOBS
    default_knobs: ClassVar[tuple[str, ...]] = ("parallel", "batch_size", "ubatch_size")
    metric_spec: ClassVar[MetricSpec] = LLAMACPP_METRICS

    def _binary(self) -> str:
        if self.binary is not None:
            return str(self.binary)
        from replay.targets.llamacpp_build import llama_server_path

        found = llama_server_path()
        return str(found) if found is not None else "llama-server"

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        cmd = [self._binary(), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port), "--metrics", "--no-webui"]
        if self.alias:
            cmd += ["--alias", self.alias]
        if self.chat_template is not None:
            cmd += ["--chat-template-file", str(self.chat_template)]
        return cmd + config_args(self.name, self.knobs, config) + list(self.extra_args)

    def preflight(self) -> None:
        binary = self._binary()
        if os.sep not in binary:
            if shutil.which(binary) is None:
                raise TargetError("llama-server: not built; run `replay engines build-llama-server` (or pass binary=...)")
        elif not os.access(binary, os.X_OK):
            raise TargetError(f"llama-server: {binary} is not an executable file")

    @classmethod
    def derive(cls, common: dict[str, float]) -> dict[str, float]:
        if "prompt_tokens" in common and "prefix_cache_hits" in common:
            common["prompt_tokens"] += common["prefix_cache_hits"]
            common["prefix_cache_queries"] = common["prompt_tokens"]
        return common
