"""What the recording proxy saw of one request, and how it becomes a Trace row.

Owns :class:`Exchange` (the raw observation, made on the request path and handed to the recorder
process; never stored), :func:`parse_response` (the answer's text, usage, finish reason and each
token-bearing chunk's time, from the bytes the upstream sent) and :class:`RowBuilder` (in the
recorder process: sessions, sampling, token counts and block hashes from the RAW text, then
redaction; only the redacted row leaves it).

- Sessions: the session header's value when the request had one, else the conversation rule of
  ``replay import openai`` (:class:`capture.importers.linker.SessionLinker`), applied as requests
  end (a conversation's next turn arrives after its previous answer ended, so it is linked in
  time).
- ``--sample P`` keeps a session by the rule ``replay sample --sessions P --seed 0`` uses
  (:func:`replay.subsets.session_kept`): every request of a session is kept or none is.
- ``input_tokens`` and ``block_hashes`` are those of the raw prompt texts
  (:func:`replay.bodies.text_slots`, :func:`replay.bodies.prompt_token_ids`) under the trace's
  tokenizer, computed before redaction: the trace keeps the live prefix sharing. Each text is
  encoded on its own, so the ids of a text seen before (a system prompt, a conversation's
  history, repeated every turn) come from a bounded cache
  (:class:`capture.importers.logs.TokenCache`, the one ``replay import openai`` uses, here of at
  most :data:`TOKEN_CACHE_BYTES`).
- Redaction (:class:`redact.pipeline.Redactor`: Presidio in worker processes) rewrites the body's
  prompt texts and the answer; a request whose text cannot be analysed is dropped (counted),
  never written raw, and so is one the second lock (:mod:`redact.lock`) finds a PII shape in
  after redaction (counted per type: ``dropped_lock``, ``lock_<TYPE>``).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from capture.importers.linker import Link
    from redact.report import Accounts

__all__ = ["Exchange", "Answer", "parse_response", "RowBuilder", "TOKEN_CACHE_BYTES", "SAMPLE_SEED"]

# --sample P keeps the sessions `replay sample --sessions P --seed SAMPLE_SEED` keeps
SAMPLE_SEED = 0

# the recorder's token cache: the ids of the most recently used prompt texts, at most this many
# bytes of ids and entries (about 20 million tokens at 4 bytes each)
TOKEN_CACHE_BYTES = 80 << 20


@dataclass
class Exchange:
    """One proxied request as the proxy saw it (raw: it lives only in memory and in the queue to
    the recorder process)."""

    request_id: str
    api: str
    arrival_unix_us: int
    body: bytes  # the request body as the client sent it
    session_header: str | None  # the session header's value, if the request had one
    stream: bool = False
    status: int | None = None
    ttfb_us: int | None = None  # arrival -> first byte of the upstream's response
    end_us: int | None = None  # arrival -> the last byte (or the failure)
    outcome: str = "completed"
    # the upstream's response as it came: (µs after arrival, bytes) per read
    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    content_encoding: str | None = None


@dataclass
class Answer:
    """What the upstream's response held."""

    text: str | None = None
    usage: dict | None = None
    finish_reason: str | None = None
    first_token_us: int | None = None  # µs after arrival
    chunk_us: list[int] | None = None  # token-bearing chunks, µs after the first token
    calls: list[str] = field(default_factory=list)  # the arguments of its tool calls (JSON text)


def _call_pieces(choice: dict, calls: dict[int, list[str]]) -> None:
    """A streamed chat chunk's tool call deltas added to ``calls`` (index -> argument pieces):
    the first delta of a call names it, later ones carry pieces of its arguments."""
    delta = choice.get("delta")
    for call in (delta.get("tool_calls") or []) if isinstance(delta, dict) else []:
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            continue
        fn = call.get("function")
        piece = fn.get("arguments") if isinstance(fn, dict) else None
        calls.setdefault(call["index"], []).append(piece if isinstance(piece, str) else "")


def _choice_text(choice: dict, stream: bool) -> str | None:
    if stream:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                return content
            return None
    else:
        message = choice.get("message")
        if isinstance(message, dict):
            content = message.get("content")
            return content if isinstance(content, str) else None
    text = choice.get("text")
    return text if isinstance(text, str) else None


def _sse_events(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The data of each event of an SSE stream, each with the time of the read that ended it:
    the runner's SSE framing, compiled (``replay._engine.sse_events``)."""
    from replay import _engine

    return _engine.sse_events(chunks)


def _decoded(ex: Exchange) -> bytes:
    body = b"".join(c for _, c in ex.chunks)
    enc = (ex.content_encoding or "").lower()
    if enc in ("gzip", "deflate"):
        try:
            return zlib.decompress(body, 47 if enc == "gzip" else zlib.MAX_WBITS)
        except zlib.error:
            return b""
    return body


def _event_objects(events: list[tuple[int, bytes]]) -> list[tuple[int, Any]]:
    """Each event's JSON (``[DONE]`` and events that are not JSON left out). When every event
    is one object (``{...}``, a stream's usual case) they are parsed in one call, as one array of
    as many objects, not one call a token; else (or if that array does not parse into as many)
    event by event."""
    events = [(t, p.strip()) for t, p in events if p.strip() != b"[DONE]"]
    if all(p.startswith(b"{") and p.endswith(b"}") for _, p in events):
        try:
            objs = json.loads(b"[" + b",".join(p for _, p in events) + b"]")
            if len(objs) == len(events):
                return [(t, obj) for (t, _), obj in zip(events, objs)]
        except ValueError:
            pass
    out = []
    for t, payload in events:
        try:
            out.append((t, json.loads(payload)))
        except ValueError:
            continue
    return out


def _responses_stream(ex: Exchange) -> Answer:
    """A Responses API stream: text from ``response.output_text.delta`` events (a token each,
    as :mod:`rust/core/src/openai.rs` counts them: any ``*.delta`` with text), usage and status
    from the last event (``response.completed`` / ``incomplete`` / ``failed``)."""
    ans = Answer()
    parts: list[str] = []
    times: list[int] = []
    for t, obj in _event_objects(_sse_events(ex.chunks)):
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            continue
        kind, delta = obj["type"], obj.get("delta")
        item = obj.get("item")
        if kind == "response.output_item.done" and isinstance(item, dict) and item.get("type") == "function_call":
            if isinstance(item.get("arguments"), str):
                ans.calls.append(item["arguments"])
        if kind.endswith(".delta") and isinstance(delta, str) and delta:
            times.append(t)
            if kind == "response.output_text.delta":
                parts.append(delta)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = got if isinstance(got := obj.get("response"), dict) else {}
            if isinstance(response.get("usage"), dict):
                ans.usage = response["usage"]
            ans.finish_reason = _responses_finish(response)
    ans.text = "".join(parts) if parts else None
    if times:
        ans.first_token_us = times[0]
        ans.chunk_us = [t - times[0] for t in times]
    return ans


def _responses_finish(response: dict) -> str | None:
    """A Responses API object's end in chat's words: ``stop`` when completed, ``length`` when
    cut by ``max_output_tokens``, else its status."""
    status = response.get("status")
    details = response.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict) and details.get("reason") == "max_output_tokens":
        return "length"
    return "stop" if status == "completed" else status if isinstance(status, str) else None


def parse_response(ex: Exchange) -> Answer:
    """The answer in ``ex``'s response: an SSE stream of chunks, or one JSON object (a chat or
    completions answer, a Responses API object, embeddings: usage only). A response that is
    neither (an error page, a cut stream's tail) yields what could be read."""
    if ex.stream and ex.api == "responses":
        return _responses_stream(ex)
    ans = Answer()
    if ex.stream:
        parts: list[str] = []
        times: list[int] = []
        calls: dict[int, list[str]] = {}  # tool call index -> its argument pieces
        for t, obj in _event_objects(_sse_events(ex.chunks)):
            if not isinstance(obj, dict):
                continue
            if isinstance(obj.get("usage"), dict):
                ans.usage = obj["usage"]
            got_token = False
            for choice in obj.get("choices") or []:
                if not isinstance(choice, dict):
                    continue
                _call_pieces(choice, calls)
                text = _choice_text(choice, True)
                if text:
                    parts.append(text)
                    got_token = True
                if choice.get("finish_reason"):
                    ans.finish_reason = choice["finish_reason"]
            if got_token:
                times.append(t)
        ans.text = "".join(parts) if parts else None
        ans.calls = ["".join(calls[k]) for k in sorted(calls)]
        if times:
            ans.first_token_us = times[0]
            ans.chunk_us = [t - times[0] for t in times]
        return ans
    try:
        obj = json.loads(_decoded(ex))
    except ValueError:
        return ans
    if not isinstance(obj, dict):
        return ans
    if isinstance(obj.get("usage"), dict):
        ans.usage = obj["usage"]
    from capture.importers.records import answer_calls

    ans.calls = list(answer_calls(obj))
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        ans.text = _choice_text(choices[0], False)
        ans.finish_reason = choices[0].get("finish_reason")
    elif obj.get("object") == "response":
        from capture.importers.records import output_text

        ans.text = output_text(obj.get("output"))
        ans.finish_reason = _responses_finish(obj)
    return ans


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class RowBuilder:
    """Turns exchanges into Trace rows (runs in the recorder process; see the module docstring).

    ``redactor`` is a :class:`redact.pipeline.Redactor`, or None to keep raw text
    (``--no-redact``). ``counts`` collects what was recorded, not sampled and dropped, by reason.
    """

    def __init__(
        self,
        t0_unix_us: int,
        *,
        tokenizer: str,
        block_size: int,
        sample: float,
        redactor: Any | None,
        max_sessions_requests: int = 200_000,
    ):
        from capture.importers.logs import TokenCache
        from capture.importers.linker import SessionLinker
        from replay.tokenizer import load_tokenizer

        self.t0 = t0_unix_us
        self.tok = load_tokenizer(tokenizer)
        self.block_size = block_size
        self.sample = sample
        self.redactor = redactor
        self.linker = SessionLinker(max_requests=max_sessions_requests)
        self.counts: Counter = Counter()
        # the redaction report, kept from each row's account: there is one with a redactor
        self.accounts: Accounts | None = None
        if redactor is not None:
            from redact.report import Accounts

            self.accounts = Accounts()
        self.tokens = TokenCache(self.tok, max_bytes=TOKEN_CACHE_BYTES)

    def build(self, exchanges: list[Exchange]) -> pl.DataFrame | None:
        """The rows of ``exchanges`` (redacted unless there is no redactor), or None when none is
        kept."""
        from replay.bodies import text_slots
        from replay.blocks import block_hashes
        from replay.subsets import session_kept

        kept: list[tuple[Exchange, dict, Answer, Link]] = []
        for ex in exchanges:
            self.counts["requests"] += 1
            try:
                body = json.loads(ex.body)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError:
                self.counts["not_json"] += 1
                continue
            ans = parse_response(ex)
            end = ex.arrival_unix_us + ex.end_us if ex.end_us is not None else None
            link = self.linker.add(
                ex.request_id,
                ex.api,
                body,
                ans.text,
                ex.session_header,
                calls=ans.calls,
                arrival_us=ex.arrival_unix_us,
                end_us=end,
            )
            if self.sample < 1.0 and not session_kept(link.session_id, self.sample, SAMPLE_SEED):
                self.counts["not_sampled"] += 1
                continue
            kept.append((ex, body, ans, link))
        token_ids = self.tokens.prompts_ids([[s.text for s in text_slots(body)] for _, body, *_ in kept])
        rows: list[dict] = []
        for (ex, body, ans, link), ids in zip(kept, token_ids):
            usage = ans.usage or {}
            # the Responses API names them input / output tokens
            details = usage.get("prompt_tokens_details", usage.get("input_tokens_details"))
            out_tokens = _int_or_none(usage.get("completion_tokens", usage.get("output_tokens")))
            if out_tokens is None and ans.text is not None:
                out_tokens = len(self.tok.encode(ans.text, add_special_tokens=False).ids)
            if ex.api == "embeddings" and ex.status is not None and 200 <= ex.status < 300:
                out_tokens = 0  # an embedding is the prompt's forward pass, no token decoded
            limit = next(
                (
                    body[k]
                    for k in ("max_completion_tokens", "max_tokens", "max_output_tokens")
                    if _int_or_none(body.get(k)) is not None
                ),
                None,
            )
            model = body.get("model")
            # the answer's tool calls (each one's argument tokens), where a whole answer came
            answered = ex.outcome == "completed" and ex.status is not None and 200 <= ex.status < 300
            calls = [len(self.tok.encode(a, add_special_tokens=False).ids) for a in ans.calls]
            rows.append(
                {
                    "request_id": ex.request_id,
                    "session_id": link.session_id,
                    "parent_request_id": link.parent_request_id,
                    "turn": link.turn,
                    "api": ex.api,
                    "model": model if isinstance(model, str) else None,
                    "arrival_us": max(0, ex.arrival_unix_us - self.t0),
                    "body": ex.body.decode("utf-8", "replace"),
                    "input_tokens": len(ids),
                    "output_tokens": out_tokens,
                    "max_tokens": limit if limit is not None else out_tokens,
                    "block_hashes": block_hashes(np.asarray(ids), self.block_size),
                    "cached_tokens": _int_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None,
                    "status": ex.status,
                    # a non-streamed answer shows no first token, only its end (e2e_us)
                    "ttft_us": ans.first_token_us,
                    "e2e_us": ex.end_us,
                    "response": ans.text,
                    "ttfb_us": ex.ttfb_us,
                    "chunk_us": ans.chunk_us,
                    "finish_reason": ans.finish_reason if isinstance(ans.finish_reason, str) else None,
                    "outcome": ex.outcome,
                    "depends_on": link.depends_on,
                    "wait_us": link.wait_us,
                    "parent_session_id": link.parent_session_id,
                    "tool_calls": calls if answered and ex.api in ("chat", "responses") else None,
                }
            )
        if not rows:
            return None
        df = pl.DataFrame(rows, schema=_ROW_SCHEMA)
        if self.redactor is not None:
            assert self.accounts is not None  # made with the redactor
            df, accounts = self.redactor.redact_rows(df, self.block_size)
            df = self.accounts.add(df, accounts)
            for acc in accounts:
                kind, _, what = (acc.reason or "").partition(":")
                if kind == "lock":  # "lock: TYPE,TYPE": kept out by the second lock
                    self.counts["dropped_lock"] += 1
                    self.counts.update(f"lock_{t}" for t in what.strip().split(","))
                elif kind:
                    self.counts["dropped_redaction_failed"] += 1
        self.counts["recorded"] += df.height
        return df if df.height else None


def _row_schema() -> dict[str, pl.DataType]:
    from replay.trace import SCHEMA

    return dict(SCHEMA)


_ROW_SCHEMA = _row_schema()
