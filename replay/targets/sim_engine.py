"""The embedded simulated engine as a target: ``replay serve-sim`` run as a child process.

The simulator takes vLLM's flag names for its scheduler and cache; its knob space, with its own
defaults and ranges, is defined once in :data:`replay.sim.KNOBS` (the KV-cache dtype lossy: fp8
halves KV bytes and changes outputs), and it exposes vLLM's ``vllm:*`` metric names.
It answers on loopback like any other engine, so the same launch, health and metrics code applies;
it is the default target, needing nothing but this package.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from replay.sim import KNOBS
from replay.targets.engine import Knob, config_args
from replay.targets.process import MetricSpec, ProcessEngine
from replay.targets.vllm_engine import VLLM_METRICS

__all__ = ["SimEngine", "SIM_KNOBS"]


SIM_KNOBS: tuple[Knob, ...] = KNOBS


@dataclasses.dataclass
class SimEngine(ProcessEngine):
    """``replay serve-sim`` with a hardware/model ``profile``, tokenizer and time scale (None: its defaults)."""

    profile: str | None = None
    served_model_name: str | None = None
    tokenizer: str | None = None
    time_scale: float | None = None
    python: str = sys.executable
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    ready_timeout_s: float = 30.0
    stop_timeout_s: float = 5.0

    name: ClassVar[str] = "sim"
    knobs: ClassVar[tuple[Knob, ...]] = SIM_KNOBS
    default_knobs: ClassVar[tuple[str, ...]] = ("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching")
    metric_spec: ClassVar[MetricSpec] = VLLM_METRICS

    def command(self, config: Mapping[str, Any], port: int) -> list[str]:
        from replay.sim import engine_priority

        # below the runner's priority, as the embedded engine beside `replay run` (replay.sim.ENGINE_PRIORITY)
        cmd = [self.python, "-m", "replay.cli.main", "serve-sim", "--port", str(port), "--priority", engine_priority()]
        if self.profile:
            cmd += ["--profile", self.profile]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        if self.tokenizer:
            cmd += ["--tokenizer", self.tokenizer]
        if self.time_scale is not None:
            cmd += ["--time-scale", f"{self.time_scale:g}"]
        return cmd + config_args(self.name, self.knobs, config) + list(self.extra_args)
