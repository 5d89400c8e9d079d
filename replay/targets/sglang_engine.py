"""SGLang as a target: its launch command, knob space and ``sglang:*`` metrics.

SGLang needs a GPU; on a machine without one the adapter still builds its command line and reads
its metrics text, which the tests check against recorded examples. :class:`SGLang` runs
``python -m sglang.launch_server`` on loopback with ``--enable-metrics`` (for ``/metrics``) and
``--enable-cache-report`` (for ``usage.prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from replay.targets.engine import Knob, config_args
from replay.targets.process import MetricSpec, ProcessEngine

__all__ = ["SGLang", "SGLANG_KNOBS", "SGLANG_METRICS"]

SGLANG_KNOBS: tuple[Knob, ...] = (
    Knob(
        "max_running_requests",
        "--max-running-requests",
        "int",
        default=None,
        range=(1, 4096),
        doc="most requests decoded at once (default: derived from memory)",
    ),
    Knob(
        "chunked_prefill_size",
        "--chunked-prefill-size",
        "int",
        default=None,
        range=(-1, 1 << 20),
        doc="most prompt tokens per prefill chunk (-1: no chunking)",
    ),
    Knob(
        "max_prefill_tokens",
        "--max-prefill-tokens",
        "int",
        default=16384,
        range=(1, 1 << 20),
        doc="token budget of one prefill batch",
    ),
    Knob(
        "mem_fraction_static",
        "--mem-fraction-static",
        "float",
        default=None,
        range=(0.05, 0.98),
        doc="share of GPU memory for weights and the KV pool",
    ),
    Knob(
        "schedule_policy",
        "--schedule-policy",
        "choice",
        default="fcfs",
        choices=("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key"),
        doc="waiting-queue order (lpm: longest prefix match first)",
    ),
    Knob(
        "schedule_conservativeness",
        "--schedule-conservativeness",
        "float",
        default=1.0,
        range=(0.01, 10.0),
        doc="how cautiously new requests are admitted (higher: fewer retractions)",
    ),
    Knob("disable_radix_cache", "--disable-radix-cache", "bool", default=False, doc="turn the radix prefix cache off"),
    Knob("page_size", "--page-size", "int", default=1, range=(1, 256), doc="tokens per KV page"),
    Knob("enable_mixed_chunk", "--enable-mixed-chunk", "bool", default=False, doc="mix prefill chunks and decodes in one batch"),
    Knob(
        "cuda_graph_max_bs",
        "--cuda-graph-max-bs",
        "int",
        default=None,
        range=(1, 4096),
        doc="largest batch captured as a CUDA graph",
    ),
    Knob("disable_cuda_graph", "--disable-cuda-graph", "bool", default=False, doc="no CUDA graphs"),
    Knob("tp_size", "--tp-size", "int", default=1, range=(1, 64), doc="tensor-parallel GPUs"),
    Knob("context_length", "--context-length", "int", default=None, range=(16, 1 << 22), doc="longest context served"),
    Knob(
        "kv_cache_dtype",
        "--kv-cache-dtype",
        "choice",
        default="auto",
        choices=("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"),
        lossless=False,
        doc="KV cache precision",
    ),
    Knob("random_seed", "--random-seed", "int", default=None, range=(0, 2**31 - 1), doc="sampling seed"),
)

# SGLang's scheduler gauges carry model_name plus rank labels; counters are prometheus_client's
# (declared without _total, exposed with it). prompt_tokens counts every prompt token of finished
# requests and cached_tokens those found in the radix cache, so they are the queries and hits.
SGLANG_METRICS: MetricSpec = {
    "running": (("sglang:num_running_reqs",), "sum"),
    "waiting": (("sglang:num_queue_reqs",), "sum"),
    "kv_usage": (("sglang:token_usage",), "mean"),
    "prefix_cache_hit_rate": (("sglang:cache_hit_rate",), "mean"),
    "prefix_cache_queries": (("sglang:prompt_tokens",), "sum"),
    "prefix_cache_hits": (("sglang:cached_tokens",), "sum"),
    "preemptions": (("sglang:num_retracted_requests",), "sum"),
    "prompt_tokens": (("sglang:prompt_tokens",), "sum"),
    "generation_tokens": (("sglang:generation_tokens",), "sum"),
    "cached_prompt_tokens": (("sglang:cached_tokens",), "sum"),
    "requests_finished": (("sglang:num_requests",), "sum"),
    "gen_throughput": (("sglang:gen_throughput",), "sum"),
}


@dataclasses.dataclass
class SGLang(ProcessEngine):
    """SGLang serving ``model`` (a folder or hub id) with ``python`` (default: this one)."""

    model: str | Path
    python: str | Path = sys.executable
    served_model_name: str | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0

    name: ClassVar[str] = "sglang"
    knobs: ClassVar[tuple[Knob, ...]] = SGLANG_KNOBS
    default_knobs: ClassVar[tuple[str, ...]] = ("max_running_requests", "max_prefill_tokens", "disable_radix_cache")
    metric_spec: ClassVar[MetricSpec] = SGLANG_METRICS

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        cmd = [
            str(self.python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enable-metrics",
            "--enable-cache-report",
        ]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        return cmd + config_args(self.name, self.knobs, config) + list(self.extra_args)

    def environment(self, scratch: Path) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
