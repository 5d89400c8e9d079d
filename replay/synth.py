"""Synthesized bodies of token-only rows: the one rule that builds a null body's text.

Owns :data:`SYNTH_RULE`, :class:`Synthesis` (the ``synthesis`` metadata of a trace),
:class:`Synthesizer` (a row's prompt units, text, token ids, block hashes and body) and
:class:`BodyBuilder` (fills in the null bodies of a batch, for :meth:`replay.trace.Trace.body_batches`).

A row imported from a token-only trace (Azure, BurstGPT, vidur, Mooncake) stores no text: its
``body`` is null and the replay builds it, a window of requests ahead of the sender, from the
row's own columns. The text is made of the one-token words of :mod:`replay.prompts`, so it is
exactly ``input_tokens`` tokens under the trace's tokenizer, and it is deterministic:

- a row with ``hash_ids`` (Mooncake) is the concatenation of :func:`replay.prompts.block_units`
  of each id, ``block_tokens`` units each, the last block cut to the tokens left: the same id
  always gives the same block of text, so the trace's prefix sharing survives;
- any other row is ``vocab.sample(input_tokens)`` from a Generator seeded by
  ``(seed, blake2b-64 of the request id)``: unique per request, the same whichever rows are kept
  (``replay sample`` / ``slice`` keep a row's text). These draws are made in Rust
  (``rust/core/src/synth.rs``: numpy's SeedSequence, PCG64 and bounded integers, bit for bit;
  tests compare it with :meth:`replay.prompts.PromptVocab.sample_many`), a whole window of rows in
  one call with the GIL released: ``replay run`` builds the prompts of a token-only trace as it
  sends them.

The body is ``{"model": M, "messages": [{"role": "user", "content": TEXT}], "max_tokens": N}`` for
a chat row, ``{"model": M, "prompt": TEXT, "max_tokens": N}`` for a completions row,
``{"model": M, "input": TEXT, "max_output_tokens": N}`` for a Responses API row and ``{"model": M,
"input": TEXT}`` for an embeddings row (``model`` only where the row names one; ``N`` is
``max_tokens``, else ``output_tokens``, else absent).
The importer computes ``block_hashes`` over the same token ids, so a stored trace says exactly
which prefix blocks its replay will share.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from replay.bodies import body_json
from replay.errors import TraceError

__all__ = ["SYNTH_RULE", "Synthesis", "Synthesizer", "BodyBuilder", "request_key"]

SYNTH_RULE = "prompt-vocab-1"
_REQUEST_DOMAIN = 0x5E0D
_U64 = 1 << 64
# full blocks whose rendered text a Synthesizer keeps (a shared prefix is rendered once)
_BLOCK_TEXT_CACHE = 4096
_BLOCK_HASH_CACHE = 1 << 18


def request_key(request_id: str) -> int:
    """The 64-bit key of a request id that seeds its synthesized text."""
    return int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Synthesis:
    """How a trace's null bodies are built (stored as the ``synthesis`` metadata, JSON)."""

    seed: int = 0  # seeds the per-request texts
    block_tokens: int = 512  # tokens per hash id (rows with hash_ids)
    rule: str = SYNTH_RULE

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, text: str, source: str) -> Synthesis:
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise TraceError(f"{source}: metadata 'synthesis' is not a JSON object")
        if obj.get("rule") != SYNTH_RULE:
            raise TraceError(f"{source}: metadata 'synthesis' has rule {obj.get('rule')!r}, this build knows {SYNTH_RULE!r}")
        for name in ("seed", "block_tokens"):
            if not isinstance(obj.get(name), int) or isinstance(obj.get(name), bool):
                raise TraceError(f"{source}: metadata 'synthesis' field '{name}' is not an integer")
        if obj["block_tokens"] <= 0:
            raise TraceError(f"{source}: metadata 'synthesis' field 'block_tokens' must be positive")
        return cls(seed=obj["seed"], block_tokens=obj["block_tokens"])

    def check_rows(self, df: pl.DataFrame, source: str) -> None:
        """Rows with ``hash_ids`` have one id per ``block_tokens`` prompt tokens (partial last
        block included)."""
        ids = df.get_column("hash_ids")
        has = ids.is_not_null()
        if not has.any():
            return
        want = (df.get_column("input_tokens").cast(pl.Int64) + self.block_tokens - 1) // self.block_tokens
        bad = has & (ids.list.len().cast(pl.Int64) != want)
        if bad.any():
            row = int(bad.arg_true()[0])
            raise TraceError(
                f"{source}: column 'hash_ids' has {ids[row].len()} ids at row {row}, "
                f"expected ceil(input_tokens / {self.block_tokens}) = {want[row]}"
            )


class Synthesizer:
    """Builds the text of token-only rows under one tokenizer and :class:`Synthesis`."""

    def __init__(self, tokenizer: str, synthesis: Synthesis):
        from replay.prompts import prompt_vocab

        self.synthesis = synthesis
        self.tokenizer = tokenizer
        self.vocab = prompt_vocab(tokenizer)
        self._block_units: dict[int, np.ndarray] = {}
        self._block_text: dict[int, str] = {}
        self._block_hash: dict[tuple[int, int], int] = {}

    def _units_of_block(self, hash_id: int) -> np.ndarray:
        units = self._block_units.get(hash_id)
        if units is None:
            if len(self._block_units) >= _BLOCK_TEXT_CACHE:
                self._block_units.clear()
            from replay.prompts import block_units

            units = block_units(hash_id, self.synthesis.block_tokens, self.tokenizer)
            self._block_units[hash_id] = units
        return units

    def units(self, request_id: str, n_tokens: int, hash_ids: list[int] | None) -> np.ndarray:
        """The unit indices of a row's prompt (see the module docstring)."""
        if hash_ids is None:
            from replay import _engine

            entropy = [int(self.synthesis.seed) % _U64, request_key(request_id), _REQUEST_DOMAIN]
            return _engine.prompt_units(entropy, [int(n_tokens)], self.vocab.n_words)
        bt = self.synthesis.block_tokens
        parts = [self._units_of_block(h)[: max(0, min(bt, n_tokens - k * bt))] for k, h in enumerate(hash_ids)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def token_ids(self, request_id: str, n_tokens: int, hash_ids: list[int] | None) -> np.ndarray:
        return self.vocab.ids(self.units(request_id, n_tokens, hash_ids))

    def texts(self, request_ids: list[str], n_tokens: list[int]) -> list[str]:
        """The texts of rows without hash ids, in one call (see the module docstring)."""
        from replay import _engine

        keys = np.array([request_key(r) for r in request_ids], dtype=np.uint64)
        return _engine.prompt_texts(
            list(self.vocab.units), int(self.synthesis.seed) % _U64, keys, np.asarray(n_tokens, dtype=np.int64), _REQUEST_DOMAIN
        )

    def text(self, request_id: str, n_tokens: int, hash_ids: list[int] | None) -> str:
        if hash_ids is None:
            return self.texts([request_id], [n_tokens])[0]
        bt = self.synthesis.block_tokens
        out = []
        for k, h in enumerate(hash_ids):
            left = n_tokens - k * bt
            if left >= bt:
                text = self._block_text.get(h)
                if text is None:
                    if len(self._block_text) >= _BLOCK_TEXT_CACHE:
                        self._block_text.clear()
                    text = self.vocab.render(self._units_of_block(h))
                    self._block_text[h] = text
                out.append(text)
            elif left > 0:
                out.append(self.vocab.render(self._units_of_block(h)[:left]))
        return "".join(out)

    def block_hashes(self, request_id: str, n_tokens: int, hash_ids: list[int] | None, block_size: int) -> list[int]:
        """:func:`replay.blocks.block_hashes` of the row's token ids; for a row of hash ids
        hashed at the ids' own block size, one chained hash per full block, cached by
        (parent hash, id)."""
        from replay.blocks import block_hashes, chain_hash

        if hash_ids is None or block_size != self.synthesis.block_tokens:
            return block_hashes(self.token_ids(request_id, n_tokens, hash_ids), block_size)
        out: list[int] = []
        parent = None
        cache = self._block_hash
        for h in hash_ids[: n_tokens // block_size]:
            key = (parent if parent is not None else -1, h)
            value = cache.get(key)
            if value is None:
                if len(cache) >= _BLOCK_HASH_CACHE:
                    cache.clear()
                value = chain_hash(parent, self.vocab.ids(self._units_of_block(h)))
                cache[key] = value
            out.append(value)
            parent = value
        return out

    def block_hashes_after(self, known: np.ndarray, n_tokens: int, hash_ids: list[int], block_size: int) -> np.ndarray:
        """:meth:`block_hashes` (as uint64) of a row of ``hash_ids`` whose first ``len(known)``
        block hashes are known (an earlier row's, whose first ``len(known) * block_size``
        tokens are this row's): only the blocks after them are synthesized and hashed, each
        chained onto the one before."""
        from replay import _engine

        bt = self.synthesis.block_tokens
        k, n_full = len(known), n_tokens // block_size
        if n_full <= k:
            return np.asarray(known[:n_full], dtype=np.uint64)
        start, stop = k * block_size, n_full * block_size
        first = start // bt
        units = np.concatenate([self._units_of_block(h) for h in hash_ids[first : -(-stop // bt)]])
        ids = np.ascontiguousarray(self.vocab.ids(units[start - first * bt : stop - first * bt]), dtype="<u4")
        if k == 0:
            return _engine.block_hashes(ids, block_size)
        out = np.empty(n_full, np.uint64)
        out[:k] = known
        parent = int(known[-1])
        for j in range(n_full - k):
            parent = _engine.chain_hash(parent, ids[j * block_size : (j + 1) * block_size])
            out[k + j] = parent
        return out

    @staticmethod
    def body(api: str, model: str | None, max_tokens: int | None, text: str) -> dict:
        """A synthesized row's body (see the module docstring), as an object."""
        body: dict = {} if model is None else {"model": model}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        elif api in ("responses", "embeddings"):
            body["input"] = text
        else:
            body["prompt"] = text
        if max_tokens is not None and api != "embeddings":
            body["max_output_tokens" if api == "responses" else "max_tokens"] = int(max_tokens)
        return body


class BodyBuilder:
    """Fills in a batch's null bodies from the rows' own columns (a trace's synthesis rule)."""

    def __init__(self, meta) -> None:
        self.synth = Synthesizer(meta.tokenizer, Synthesis.parse(meta.synthesis, "trace"))

    def parts(self, rows: pl.DataFrame, drawn: bool = False) -> list[tuple]:
        """What the bodies of `rows` are built from: each row's ``(text, model, max_tokens)``
        for :meth:`Synthesizer.body` (with the row's ``api``). With ``drawn``, a row without
        hash ids is ``(key, length, model, max_tokens)`` instead, its text drawn in Rust by
        ``_engine.send_bodies`` (with :meth:`prompts`), which writes the bodies as sent."""
        cols = rows.select("request_id", "model", "input_tokens", "max_tokens", "output_tokens", "hash_ids").to_dict(
            as_series=False
        )
        plain = [i for i, ids in enumerate(cols["hash_ids"]) if ids is None]
        texts: dict = {}
        if not drawn:
            texts = dict(
                zip(plain, self.synth.texts([cols["request_id"][i] for i in plain], [cols["input_tokens"][i] for i in plain]))
            )
        out: list[tuple] = []
        for i in range(rows.height):
            mt = cols["max_tokens"][i]
            if mt is None:
                mt = cols["output_tokens"][i]
            if drawn and cols["hash_ids"][i] is None:
                out.append((request_key(cols["request_id"][i]), int(cols["input_tokens"][i]), cols["model"][i], mt))
                continue
            text = texts.get(i)
            if text is None:
                text = self.synth.text(cols["request_id"][i], cols["input_tokens"][i], cols["hash_ids"][i])
            out.append((text, cols["model"][i], mt))
        return out

    def prompts(self) -> tuple[list[str], int, int]:
        """What ``_engine.send_bodies`` draws the texts of :meth:`parts` ``(drawn=True)`` with:
        the vocabulary's unit strings, the seed and the domain (as :meth:`Synthesizer.texts`)."""
        return list(self.synth.vocab.units), int(self.synth.synthesis.seed) % _U64, _REQUEST_DOMAIN

    def objects(self, rows: pl.DataFrame) -> list[dict]:
        """The bodies of `rows` as the synthesis rule builds them, as objects (the replay sends
        them without a round trip through JSON text)."""
        apis = rows["api"].to_list()
        return [self.synth.body(api, model, mt, text) for api, (text, model, mt) in zip(apis, self.parts(rows))]

    def fill(self, bodies: list[str | None], rows: pl.DataFrame) -> list[str | None]:
        """`bodies` with each null one built (JSON text, as a trace stores a body)."""
        empty = [i for i, body in enumerate(bodies) if body is None]
        made = self.objects(rows[empty]) if empty else []
        out = list(bodies)
        for i, obj in zip(empty, made):
            out[i] = body_json(obj)
        return out
