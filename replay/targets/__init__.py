"""Targets: a URL, or an engine the suite starts with a config and replays against.

The core owns the protocol (:class:`~replay.targets.engine.Engine`, its
:class:`~replay.targets.engine.Knob` space, :class:`~replay.targets.process.RunningEngine`);
adapters implement it: the embedded simulator (``sim``), llama.cpp's ``llama-server``, vLLM and
SGLang. Builders put the real engines in the cache once per machine, and tiny models make them
loadable offline::

    from replay.targets import LlamaServer, build_llama_server, make_tiny_gguf
    engine = LlamaServer(model=make_tiny_gguf("gpt-2", "tiny.gguf"), binary=build_llama_server())
    with engine.launch({"parallel": 4, "threads": 1}) as running:
        print(running.url, running.metrics()["running"])

Names are imported on first use, so ``import replay.targets`` stays light.
"""

from __future__ import annotations

from replay._lazy import lazy_exports

_EXPORTS = {
    "replay.targets.url": ("base_url", "check_target"),
    "replay.targets.engine": ("Engine", "Knob", "KnobKind", "COMMON_METRICS", "check_config", "config_args"),
    "replay.targets.process": ("ProcessEngine", "RunningEngine", "free_port"),
    "replay.targets.prometheus": ("Scrape", "Sample", "Histogram", "parse"),
    "replay.targets.sim_engine": ("SimEngine", "SIM_KNOBS"),
    "replay.targets.llamacpp": ("LlamaServer", "LLAMACPP_KNOBS"),
    "replay.targets.vllm_engine": ("Vllm", "VLLM_KNOBS"),
    "replay.targets.sglang_engine": ("SGLang", "SGLANG_KNOBS"),
    "replay.targets.llamacpp_build": ("build_llama_server", "llama_server_path"),
    "replay.targets.vllm_install": ("install_vllm", "vllm_python"),
    "replay.targets.tiny_models": (
        "TinyLlama",
        "make_tiny_gguf",
        "make_tiny_hf",
        "tiny_gguf_path",
        "tiny_hf_path",
        "smollm2_path",
    ),
    "replay.targets.registry": ("ENGINES", "engine_class"),
}
__all__, __getattr__, __dir__ = lazy_exports("replay.targets", _EXPORTS)
