"""Synthetic prompt text with exact token counts under a real tokenizer.

Owns the prompt vocabulary (:class:`PromptVocab`) and the functions built on it:
:func:`text_of_tokens`, :func:`block_text` and :func:`count_tokens`.

The trick: common English words that are each ONE token with their leading space (" the",
" model", ...). Under a byte-level BPE pre-tokenizer (gpt-2, qwen2) a run of letters with one
leading space is its own pre-token, so such words never merge with their neighbours, and neither
does a period placed after a word. A text of n units (words, and periods that never start a text
nor follow another period) is therefore exactly n tokens, and the concatenation of such texts
tokenizes to the concatenation of their ids. Every word is checked to be one token, and a long
sample is checked to tokenize additively, when the vocabulary is built for a tokenizer; a
tokenizer where that fails is refused with a :class:`~replay.errors.ConfigError`.

Randomness comes from numpy Generators seeded from integers, so texts are identical across
processes and platforms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError

__all__ = [
    "PromptVocab",
    "prompt_vocab",
    "text_of_tokens",
    "block_text",
    "block_units",
    "count_tokens",
]

_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but
have an they you were her she there one all we their been has when who will more no if out so
said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must
through back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life being
under never day same another know while last might us great old year off come since against go
came right used take three states himself few house use during without again place around
however home small found thought went say part once general high upon school every does group
number course water public war almost company system set order why later point head help less
team level power money case plan data model power story world night light table paper music
game market field voice price river music window garden doctor letter energy answer office
family report result change reason question minute moment street friend member service policy
morning country city church area book hand side face fact word name line form body kind sense
open close early late young strong clear full free short simple small large local major human
social common special certain recent final public private single natural green black white red
blue early happy ready simple quiet bright heavy quick slow warm cold deep wide real true whole
begin turn start show hear play run move live believe hold bring happen write provide sit stand
lose pay meet include continue learn lead understand watch follow stop create speak read allow
add spend grow offer remember love consider appear buy wait serve die send expect build stay fall
cut reach kill remain suggest raise pass sell require decide return explain hope develop carry
break receive agree support hit produce eat cover catch draw choose
""".split()
_PERIOD = "."
_PERIOD_P = 1.0 / 12.0  # chance that a unit (not the first, not after a period) is a period
_MIN_WORDS = 64
_CHECK_UNITS = 4096
_TEXT_DOMAIN = 0x7E57
BLOCK_DOMAIN = 0xB10C  # the entropy domain of block texts (block_units)
_U64 = 1 << 64


@dataclass(frozen=True, eq=False)
class PromptVocab:
    """The verified one-token units of one tokenizer: words (with leading space), then ".".

    A text is a sequence of unit indices (``int32``); :meth:`render` gives its string and
    :meth:`ids` its token ids without running the tokenizer.
    """

    tokenizer: str
    units: tuple[str, ...]
    unit_ids: np.ndarray  # uint32, token id of each unit
    unit_chars: np.ndarray  # int64, characters in each unit

    @property
    def n_words(self) -> int:
        return len(self.units) - 1

    @property
    def period(self) -> int:
        return len(self.units) - 1

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` unit indices: words, with sparse periods (never first, never two in a row)."""
        return self.sample_many(np.array([n], dtype=np.int64), rng)

    def sample_many(self, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Unit indices of several texts laid end to end (each starts with a word)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        total = int(lengths.sum())
        units = rng.integers(0, self.n_words, total, dtype=np.int32)
        period = rng.random(total) < _PERIOD_P
        starts = np.cumsum(lengths) - lengths
        period[starts[lengths > 0]] = False
        period[1:] &= ~period[:-1]
        units[period] = self.period
        return units

    def render(self, units: np.ndarray) -> str:
        table = self.units
        return "".join([table[i] for i in units.tolist()])

    def ids(self, units: np.ndarray) -> np.ndarray:
        return self.unit_ids[units]

    def char_offsets(self, units: np.ndarray) -> np.ndarray:
        """Character offset of the start of each unit, plus the total length at the end."""
        out = np.zeros(len(units) + 1, dtype=np.int64)
        np.cumsum(self.unit_chars[units], out=out[1:])
        return out


@functools.lru_cache(maxsize=8)
def prompt_vocab(tokenizer: str = "gpt2") -> PromptVocab:
    """Build (once per process) the verified vocabulary for ``tokenizer``."""
    from replay.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer)
    candidates = list(dict.fromkeys(" " + w for w in _WORDS))
    encoded = tok.encode_batch(candidates + [_PERIOD], add_special_tokens=False)
    period_ids = encoded[-1].ids
    if len(period_ids) != 1:
        raise ConfigError(f"tokenizer '{tokenizer}': '.' is not a single token")
    words = [(w, e.ids[0]) for w, e in zip(candidates, encoded[:-1]) if len(e.ids) == 1]
    if len(words) < _MIN_WORDS:
        raise ConfigError(
            f"tokenizer '{tokenizer}': only {len(words)} common words are single tokens "
            f"(need {_MIN_WORDS}); prompts need a byte-level BPE tokenizer"
        )
    units = tuple(w for w, _ in words) + (_PERIOD,)
    vocab = PromptVocab(
        tokenizer=tokenizer,
        units=units,
        unit_ids=np.array([i for _, i in words] + period_ids, dtype=np.uint32),
        unit_chars=np.array([len(u) for u in units], dtype=np.int64),
    )
    sample = vocab.sample(_CHECK_UNITS, np.random.default_rng(0))
    text = vocab.render(sample) + vocab.render(sample[:-1])
    got = tok.encode(text, add_special_tokens=False).ids
    want = np.concatenate([vocab.ids(sample), vocab.ids(sample[:-1])]).tolist()
    if got != want:
        raise ConfigError(
            f"tokenizer '{tokenizer}': one-token words do not tokenize additively; prompts need a byte-level BPE tokenizer"
        )
    return vocab


def text_rng(seed: int) -> np.random.Generator:
    """The Generator behind :func:`text_of_tokens` for ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) % _U64, _TEXT_DOMAIN]))


def block_units(hash_id: int, block_tokens: int, tokenizer: str = "gpt2") -> np.ndarray:
    """Unit indices of the full block named ``hash_id`` (``block_tokens`` units)."""
    if block_tokens <= 0:
        raise ConfigError(f"block_tokens must be positive, got {block_tokens}")
    # ``prompt_vocab(tokenizer).sample(block_tokens, default_rng(SeedSequence([hash_id, block_tokens,
    # BLOCK_DOMAIN])))``, drawn in Rust bit for bit (``rust/core/src/synth.rs``), 15x faster
    from replay import _engine

    entropy = [int(hash_id) % _U64, int(block_tokens), BLOCK_DOMAIN]
    return _engine.prompt_units(entropy, [int(block_tokens)], prompt_vocab(tokenizer).n_words)


def text_of_tokens(n: int, seed: int, tokenizer: str = "gpt2") -> str:
    """A text of exactly ``n`` tokens under ``tokenizer``; same (n, seed), same text."""
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    vocab = prompt_vocab(tokenizer)
    return vocab.render(vocab.sample(n, text_rng(seed)))


def block_text(hash_id: int, block_tokens: int, n_tokens: int | None = None, tokenizer: str = "gpt2") -> str:
    """The text of block ``hash_id``: ``block_tokens`` tokens, or its first ``n_tokens`` tokens.

    The same hash id always gives the same text, so blocks laid end to end keep a trace's
    prefix sharing; any concatenation of blocks tokenizes to the sum of their tokens.
    """
    n = block_tokens if n_tokens is None else n_tokens
    if not 0 <= n <= block_tokens:
        raise ConfigError(f"n_tokens must be in [0, {block_tokens}], got {n_tokens}")
    units = block_units(hash_id, block_tokens, tokenizer)
    return prompt_vocab(tokenizer).render(units[:n])


def count_tokens(text: str, tokenizer: str = "gpt2") -> int:
    """Tokens in ``text`` under ``tokenizer`` (no special tokens added)."""
    from replay.tokenizer import load_tokenizer

    return len(load_tokenizer(tokenizer).encode(text, add_special_tokens=False).ids)
