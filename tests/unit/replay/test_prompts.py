"""Synthetic prompts: exact token counts, deterministic texts, blocks that concatenate exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.prompts import block_text, count_tokens, prompt_vocab, text_of_tokens

_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _ntok(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_vocab_words_are_single_tokens_with_a_leading_space(gpt2):
    vocab = prompt_vocab("gpt2")
    assert vocab.n_words >= 300
    for unit, token_id in zip(vocab.units, vocab.unit_ids.tolist()):
        assert gpt2.encode(unit, add_special_tokens=False).ids == [token_id]
    assert all(u.startswith(" ") and u[1:].isalpha() for u in vocab.units[:-1])


@_SETTINGS
@given(n=st.integers(0, 3000), seed=st.integers(0, 2**63))
def test_text_of_tokens_is_exactly_n_tokens(gpt2, n, seed):
    text = text_of_tokens(n, seed)
    assert _ntok(gpt2, text) == n
    assert count_tokens(text) == n


@_SETTINGS
@given(parts=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 10**6)), min_size=1, max_size=6))
def test_concatenated_texts_tokenize_to_the_sum(gpt2, parts):
    texts = [text_of_tokens(n, seed) for n, seed in parts]
    assert _ntok(gpt2, "".join(texts)) == sum(n for n, _ in parts)


@_SETTINGS
@given(ids=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=5), last=st.integers(1, 64), size=st.sampled_from([16, 64]))
def test_blocks_concatenate_exactly(gpt2, ids, last, size):
    last = min(last, size)
    text = "".join(block_text(h, size) for h in ids[:-1]) + block_text(ids[-1], size, last)
    encoded = gpt2.encode(text, add_special_tokens=False).ids
    assert len(encoded) == size * (len(ids) - 1) + last
    for k, h in enumerate(ids[:-1]):  # each block's tokens sit at its own offset
        block = gpt2.encode(block_text(h, size), add_special_tokens=False).ids
        assert encoded[k * size : (k + 1) * size] == block


def test_same_hash_same_text_and_partial_is_a_prefix():
    full = block_text(42, 512)
    assert block_text(42, 512) == full
    assert block_text(43, 512) != full
    part = block_text(42, 512, 100)
    assert full.startswith(part)
    assert count_tokens(part) == 100
    assert block_text(42, 512, 0) == ""
    with pytest.raises(ValueError):
        block_text(42, 512, 513)


def test_text_depends_on_seed_and_is_stable_across_processes():
    here = text_of_tokens(50, 7)
    assert here == text_of_tokens(50, 7)
    assert here != text_of_tokens(50, 8)
    code = "from replay.prompts import text_of_tokens, block_text;print(text_of_tokens(50, 7) + '|' + block_text(9, 16))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "123", **_env()}
    )
    assert out.stdout.rstrip("\n") == here + "|" + block_text(9, 16)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_qwen2_vocab_is_exact_too():
    tok_text = text_of_tokens(777, 3, tokenizer="qwen2")
    assert count_tokens(tok_text, tokenizer="qwen2") == 777
    assert count_tokens(block_text(5, 64, 33, tokenizer="qwen2"), tokenizer="qwen2") == 33


@settings(max_examples=200, deadline=None)
@given(
    entropy=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=7),
    lengths=st.lists(st.integers(0, 400), min_size=1, max_size=5),
)
def test_the_rust_draws_are_numpys(entropy, lengths):
    # rust/core/src/synth.rs reproduces SeedSequence, PCG64, bounded integers and random(): the
    # units it draws for any entropy (of up to 14 32-bit words, past numpy's pool of 4) and any
    # text lengths are PromptVocab.sample_many's, so synthesized prompts keep their stored hashes
    import numpy as np

    from replay import _engine

    vocab = prompt_vocab("gpt2")
    want = vocab.sample_many(np.array(lengths), np.random.default_rng(np.random.SeedSequence(entropy)))
    got = _engine.prompt_units(entropy, lengths, vocab.n_words)
    assert got.dtype == np.int32 and got.tolist() == want.tolist()


def test_token_only_prompts_built_in_rust_are_the_ones_numpy_draws(gpt2):
    import numpy as np

    from replay.synth import _REQUEST_DOMAIN, Synthesis, Synthesizer, request_key

    synth = Synthesizer("gpt2", Synthesis(seed=5))
    ids, lengths = [f"req-{i}" for i in range(50)], [0, 1, 2, 1000] + list(range(3, 49))
    texts = synth.texts(ids, lengths)
    vocab = prompt_vocab("gpt2")
    for rid, n, text in zip(ids, lengths, texts):
        seq = np.random.SeedSequence([5, request_key(rid), _REQUEST_DOMAIN])
        assert text == vocab.render(vocab.sample(n, np.random.default_rng(seq)))
    assert count_tokens(texts[3]) == 1000


def test_hash_id_blocks_drawn_in_rust_are_block_units():
    # the synthesizer draws a hash id's block with the engine; it must be prompts.block_units
    from replay.prompts import block_units
    from replay.synth import Synthesis, Synthesizer

    for block in (1, 16, 512):
        synth = Synthesizer("gpt2", Synthesis(block_tokens=block))
        ids = [0, 7, 2**63 + 5, 2**64 - 1]
        got = synth.units("r", block * len(ids), ids)
        assert got.tolist() == [u for h in ids for u in block_units(h, block).tolist()]


def test_hash_id_blocks_drawn_in_rust_are_the_ones_numpy_draws():
    # replay.prompts.block_units draws in Rust: the blocks of a Mooncake or OTel trace's hash ids
    # are those of numpy's SeedSequence([id, block_tokens, domain]), so stored hashes still hold
    import numpy as np

    from replay.prompts import BLOCK_DOMAIN, block_units

    vocab = prompt_vocab("gpt2")
    for hash_id, bt in ((0, 16), (7, 256), (2**64 - 1, 512), (12345678901, 1)):
        seq = np.random.SeedSequence([hash_id, bt, BLOCK_DOMAIN])
        assert block_units(hash_id, bt).tolist() == vocab.sample(bt, np.random.default_rng(seq)).tolist()
