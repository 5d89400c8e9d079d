"""The engines the suite knows by name: ``sim``, ``llama-server``, ``vllm``, ``sglang``, and the
other names they go by (:data:`ALIASES`: ``llama.cpp`` is llama-server)."""

from __future__ import annotations

from replay.errors import ConfigError
from replay.targets.llamacpp import LlamaServer
from replay.targets.process import ProcessEngine
from replay.targets.sglang_engine import SGLang
from replay.targets.sim_engine import SimEngine
from replay.targets.vllm_engine import Vllm

__all__ = ["ENGINES", "ALIASES", "engine_class"]

ENGINES: dict[str, type[ProcessEngine]] = {
    SimEngine.name: SimEngine,
    LlamaServer.name: LlamaServer,
    Vllm.name: Vllm,
    SGLang.name: SGLang,
}

# other names of an engine -> its name in ENGINES
ALIASES: dict[str, str] = {"llama.cpp": LlamaServer.name}


def engine_class(name: str) -> type[ProcessEngine]:
    """The adapter class called ``name`` (or one of its :data:`ALIASES`), or a ConfigError listing
    the known ones."""
    try:
        return ENGINES[ALIASES.get(name, name)]
    except KeyError:
        raise ConfigError(f"--engine: '{name}' unknown (one of {', '.join([*ENGINES, *ALIASES])})") from None
