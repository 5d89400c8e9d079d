"""Tiny random-weight models: GGUF with a real llama.cpp vocab, Hugging Face format with a real tokenizer."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from replay.errors import ConfigError
from replay.targets.tiny_models import CHAT_TEMPLATE, TinyLlama, make_tiny_gguf, make_tiny_hf


def test_gguf_has_the_llama_layout_and_the_vocab_of_the_sdist(tmp_path):
    from gguf import GGUFReader

    shape = TinyLlama(hidden=64, heads=2, kv_heads=1, ffn=128, layers=2, seed=7)
    path = make_tiny_gguf("llama-spm", tmp_path / "tiny.gguf", shape)
    reader = GGUFReader(str(path))
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    assert field("general.architecture") == "llama"
    assert field("llama.block_count") == 2 and field("llama.embedding_length") == 64
    assert field("llama.attention.head_count_kv") == 1 and field("llama.rope.dimension_count") == 32
    assert field("tokenizer.ggml.model") == "llama"
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == 32000 and field("llama.vocab_size") == 32000
    assert field("tokenizer.chat_template") == CHAT_TEMPLATE
    names = {t.name: t for t in reader.tensors}
    assert len(names) == 2 + 9 * 2  # embeddings, final norm, 9 per layer (tied output)
    assert list(names["token_embd.weight"].shape) == [64, 32000]  # ggml order: [in, out]
    assert list(names["blk.1.attn_k.weight"].shape) == [64, 32]
    assert list(names["blk.0.ffn_down.weight"].shape) == [128, 64]


def test_weights_follow_the_seed():
    a, b, c = (TinyLlama(seed=s).weights(100) for s in (1, 1, 2))
    assert a.keys() == b.keys() == c.keys()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert np.array_equal(a[q], b[q]) and not np.array_equal(a[q], c[q])
    assert a[q].shape == (128, 128) and a["model.layers.1.self_attn.k_proj.weight"].shape == (64, 128)


def test_cached_models_are_made_once(tmp_path, monkeypatch):
    from replay.targets.tiny_models import tiny_hf_path
    from replay.tokenizer import tokenizer_path

    built = tokenizer_path("gpt2")  # the machine's cache has it; the test cache borrows it
    (tmp_path / "tokenizers").mkdir()
    (tmp_path / "tokenizers" / "gpt2.json").symlink_to(built)
    monkeypatch.setenv("FAITHFUL_REPLAY_CACHE", str(tmp_path))
    first = tiny_hf_path("gpt2", TinyLlama(seed=3))
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert tiny_hf_path("gpt2", TinyLlama(seed=3)) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert tiny_hf_path("gpt2", TinyLlama(seed=4)) != first


def test_hf_folder_has_config_tokenizer_and_bf16_safetensors(tmp_path):
    out = make_tiny_hf(tmp_path / "hf", "gpt2", TinyLlama())
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["head_dim"] == 64
    assert config["vocab_size"] == 50257 and config["eos_token_id"] == 50256
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["eos_token"] == "<|endoftext|>" and tok_config["chat_template"] == CHAT_TEMPLATE
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("Hello world").ids == [15496, 995]
    raw = (out / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    emb = header["model.embed_tokens.weight"]
    assert emb["dtype"] == "BF16" and emb["shape"] == [50257, 128]
    assert "lm_head.weight" not in header  # tied
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert len(raw) == 8 + n + end and n % 8 == 0
    lo, hi = header["model.norm.weight"]["data_offsets"]
    norm = np.frombuffer(raw[8 + n + lo : 8 + n + hi], np.uint16).astype(np.uint32) << 16
    assert np.all(norm.view(np.float32) == 1.0)


def test_shapes_vllm_cannot_serve_are_refused():
    with pytest.raises(ConfigError, match="head_dim 16 unsupported"):
        TinyLlama(hidden=32, heads=2)
    with pytest.raises(ConfigError, match="do not divide"):
        TinyLlama(hidden=128, heads=3)


def test_unknown_vocab_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="vocab 'bert' unknown"):
        make_tiny_gguf("bert", tmp_path / "x.gguf")
