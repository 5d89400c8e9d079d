"""The request plan: which trace rows are sent, when, to which path, with which exact bytes.

A plan is columns ready for the Rust runner (offsets in ns, a path index per request) and its
bodies, made a window at a time (:meth:`Plan.body_windows`) while the stage runs, so that memory
holds a few windows of bodies, not all of them. Bodies are the trace's bodies with the replay's
settings applied: streaming with usage, `max_tokens` from the trace and the engine's ignore-EOS flag (so the
server decodes as much as live traffic did), and the target's model name. A Responses API body
streams with `max_output_tokens` (its last event carries the usage; it has no `stream_options`
to ask); an embeddings body gets only the model name. Send times come from
:func:`schedule`, which offers the requested rate over the stage's own window
(:func:`offered_window`), so that a stage cut from a bursty stretch of a trace offers the rate asked
for, not that stretch's own rate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from replay.bodies import body_json
from replay.config import RunConfig
from replay.errors import ConfigError, TraceError
from replay.trace import Trace

__all__ = ["Plan", "build_plan", "schedule", "offered_window", "send_limits", "session_mode", "API_PATHS", "BODY_WINDOW"]

API_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
}
# requests whose bodies are made at a time (the runner reads about a second of sends ahead, at least two windows)
BODY_WINDOW = 1024


def send_limits(rows: pl.DataFrame, ignore_eos: bool) -> pl.Series:
    """The ``max_tokens`` a replay sends for each row. With ``ignore_eos`` the engine decodes
    exactly that many, so it is the recorded output length where the trace has one (a request
    that stopped early live stops as early here), else the request's own limit; without it the
    engine stops where it will, within the request's own limit (else the recorded length)."""
    observed, cap = rows["output_tokens"], rows["max_tokens"]
    return observed.fill_null(cap) if ignore_eos else cap.fill_null(observed)


@dataclass(frozen=True)
class Plan:
    rows: pl.DataFrame  # the selected trace rows, in send order (request_id, input/output tokens, ...)
    offsets_ns: np.ndarray  # int64, intended send offset from the run start
    path_index: np.ndarray  # uint8 index into `paths`
    paths: tuple[str, ...]
    window_s: float  # the stage's window (see offered_window)
    offered_rate: float  # req/s the schedule offers over its window (nan: one request, or all at once)
    trace: Trace  # where the bodies come from
    model: str | None  # replaces every body's model name (None: keep it)
    ignore_eos: bool
    # causal sessions resending the engine's answers: each body's earlier answers are located
    # (body_windows' spans) so that the runner can write the engine's own in their place
    mark_answers: bool = False
    # how requests wait for each other: open, causal or dag (config's "auto" resolved: session_mode)
    sessions: str = "open"
    # each request's root session is sent in this header (RunConfig.session_header)
    session_header: str | None = None

    @property
    def n(self) -> int:
        return len(self.offsets_ns)

    def body_windows(self, size: int = BODY_WINDOW) -> Iterator[tuple]:
        """The bodies as sent, ``size`` requests at a time: ``(bytes, offsets)`` with body i of
        the window at ``bytes[offsets[i]:offsets[i + 1]]``. A null body (a token-only row) is
        built here, a window at a time, by the trace's synthesis rule (:mod:`replay.synth`).
        With ``mark_answers``, ``(bytes, offsets, spans, span_offsets)``: the byte spans of body i's
        earlier answers (its assistant messages before the final one, as JSON string contents;
        start, end, ... oldest first) are ``spans[span_offsets[i]:span_offsets[i + 1]]``.

        Without ``mark_answers`` the bodies are written in Rust (``_engine.send_bodies``,
        ``rust/core/src/body.rs``): the settings are set in the stored text, which is what
        :func:`_rewrite_body` writes wherever the stored text is what :func:`body_json` writes
        for it (as traces store bodies); any other body is made by :func:`_rewrite_body`."""
        max_tokens = send_limits(self.rows, self.ignore_eos)
        builder = None
        if self.trace.meta.synthesis:
            from replay.synth import BodyBuilder

            builder = BodyBuilder(self.trace.meta)
        row = 0
        for stored in self.trace.body_batches(self.n, size):
            if self.mark_answers:
                yield self._marked_window(stored, row, max_tokens, builder)
            else:
                yield self._window(stored, row, max_tokens, builder)
            row += len(stored)

    def _window(self, stored: list[str | None], row: int, max_tokens: pl.Series, builder) -> tuple[bytes, np.ndarray]:
        from replay import _engine

        batch: list = list(stored)  # a null body becomes what its synthesized body is built from
        empty = [k for k, body in enumerate(batch) if body is None]
        prompts = None
        if empty and builder is not None:
            for k, parts in zip(empty, builder.parts(self.rows.slice(row, len(batch))[empty], drawn=True)):
                batch[k] = parts
            prompts = builder.prompts()
        tokens = max_tokens.slice(row, len(batch))
        data, offsets, left = _engine.send_bodies(
            batch,
            np.ascontiguousarray(self.path_index[row : row + len(batch)], dtype=np.uint8),
            tokens.fill_null(-1).to_numpy().astype(np.int64),
            model=self.model,
            ignore_eos=self.ignore_eos,
            prompts=prompts,
        )
        if len(left) == 0:
            return data, offsets
        # bodies whose stored text is not body_json's (or null without a synthesis rule)
        made = [data[offsets[i] : offsets[i + 1]] for i in range(len(batch))]
        apis = self.rows["api"].slice(row, len(batch)).to_list()
        for k in left.tolist():
            made[k], _ = _rewrite_body(
                batch[k], row + k, model=self.model, max_tokens=tokens[k], ignore_eos=self.ignore_eos, api=apis[k]
            )
        offsets = np.zeros(len(made) + 1, dtype=np.uint64)
        np.cumsum([len(p) for p in made], out=offsets[1:])
        return b"".join(made), offsets

    def _marked_window(self, stored: list[str | None], row: int, max_tokens: pl.Series, builder) -> tuple:
        batch: list[str | dict | None] = list(stored)  # a null body becomes its synthesized object
        empty = [k for k, body in enumerate(batch) if body is None]
        if empty and builder is not None:
            for k, obj in zip(empty, builder.objects(self.rows.slice(row, len(batch))[empty])):
                batch[k] = obj
        tokens = max_tokens.slice(row, len(batch)).to_list()
        apis = self.rows["api"].slice(row, len(batch)).to_list()
        made = [
            _rewrite_body(body, row + k, model=self.model, max_tokens=mt, ignore_eos=self.ignore_eos, mark_answers=True, api=api)
            for k, (body, mt, api) in enumerate(zip(batch, tokens, apis))
        ]
        offsets = np.zeros(len(made) + 1, dtype=np.uint64)
        np.cumsum([len(p) for p, _ in made], out=offsets[1:])
        span_offsets = np.zeros(len(made) + 1, dtype=np.uint64)
        np.cumsum([len(spans) for _, spans in made], out=span_offsets[1:])
        spans = np.fromiter((x for _, s in made for x in s), dtype=np.int64, count=int(span_offsets[-1]))
        return b"".join(p for p, _ in made), offsets, spans, span_offsets

    def head_lines(self) -> tuple[bytes, np.ndarray] | None:
        """Each request's own header lines for the runner (``_engine.run(head_lines=,
        head_offsets=)``), or None when no request has any: a row whose ``tool_calls`` is known
        sends ``x-replay-tool-calls: 40,25,10`` (the argument tokens of each call the live answer
        carried; an empty value: it was text), which the embedded engine answers with the same
        calls of the same sizes and other servers ignore (docs/sim-engine.md); with
        ``session_header``, a row with a session sends its root session id
        (:func:`replay.dag.root_sessions`) in it, for a server-side router's session affinity."""
        from replay import _engine
        from replay.dag import root_sessions

        calls = self.rows["tool_calls"] if "tool_calls" in self.rows.columns else None
        parts = []
        if calls is not None and calls.null_count() < self.n:
            name = _engine.REPLAY_TOOL_CALLS_HEADER
            parts.append(pl.lit(f"{name}: ") + calls.list.eval(pl.element().cast(pl.String)).list.join(",") + pl.lit("\r\n"))
        if self.session_header is not None:
            roots = pl.Series(root_sessions(self.rows), dtype=pl.String)
            if roots.null_count() < self.n:
                # a header value holds no line break (a session id that does is sent without it)
                roots = roots.str.replace_all(r"[\r\n]", "")
                parts.append(pl.lit(f"{self.session_header}: ") + pl.lit(roots) + pl.lit("\r\n"))
        if not parts:
            return None
        lines = pl.concat_str([p.fill_null("") for p in parts])
        text = pl.select(lines.alias("l"))["l"]
        offsets = np.zeros(self.n + 1, dtype=np.uint64)
        np.cumsum(text.str.len_bytes().to_numpy(), out=offsets[1:])
        return "".join(text.to_list()).encode("ascii"), offsets


def offered_window(offsets_ns: np.ndarray, duration_s: float | None) -> tuple[float, float]:
    """``(window_s, rate)``: the window a stage's send offsets cover and the rate they offer over it.

    With a duration the window is ``[0, duration_s)`` and the rate is the requests due in it over
    ``duration_s``. Without one the window runs from the first send offset to the last and the rate
    is ``(n - 1) / window`` (n requests, n - 1 gaps); nan when n < 2 or all are due at once.
    """
    n = len(offsets_ns)
    if duration_s is not None:
        return duration_s, n / duration_s
    span_s = float(offsets_ns[-1] - offsets_ns[0]) / 1e9 if n else 0.0
    return span_s, (n - 1) / span_s if n > 1 and span_s > 0 else float("nan")


def _compress(base_ns: np.ndarray, speedup: float) -> np.ndarray:
    """`base_ns` (nondecreasing, from 0) with time divided by `speedup`: the burst shape is kept."""
    from replay import _engine

    return _engine.arrival_offsets("trace", len(base_ns), base_ns, speedup=speedup)


def _fit_requests(base_ns: np.ndarray, rate: float) -> np.ndarray:
    """Compress `base_ns` so its requests offer `rate`: (n - 1) / (last - first offset) = rate."""
    n = len(base_ns)
    if n < 2 or base_ns[-1] == base_ns[0]:
        return np.zeros(n, np.int64)  # one request, or all at one instant: nothing to rescale
    span_s = float(base_ns[-1] - base_ns[0]) / 1e9
    return _compress(base_ns, span_s * rate / (n - 1))


def _fit_window(base_ns: np.ndarray, rate: float, duration_s: float) -> np.ndarray:
    """Compress `base_ns` so that the requests due in [0, duration_s) offer `rate` over it.

    k = round(rate * duration_s) requests are kept and time is compressed so that the next one,
    request k, is due exactly at the window's end: the window holds k requests and k gaps. Where
    requests share a send time, k moves to the nearest count that such a cut can keep.
    """
    target = round(rate * duration_s)
    n = len(base_ns)
    if target < 1:
        raise ConfigError(f"--duration: {duration_s:g}s at {rate:g} req/s keeps no request")
    if target > n - 1:
        raise ConfigError(
            f"--duration: {duration_s:g}s at {rate:g} req/s needs more than {target} requests; "
            f"the trace has {n} (shorten --duration or lower the rate)"
        )
    cuts = np.flatnonzero(np.diff(base_ns) > 0) + 1  # k such that request k is due after request k - 1
    if len(cuts) == 0:
        return np.zeros(target, np.int64)  # all at one instant
    k = int(cuts[np.argmin(np.abs(cuts - target))])
    return _compress(base_ns[:k], float(base_ns[k]) / 1e9 / duration_s)


def schedule(trace: Trace, config: RunConfig) -> np.ndarray:
    """The intended send offsets (ns from the run start) of the requests this stage sends: the
    first ``len(result)`` rows of the trace.

    The time shape comes from the arrival kind: ``trace`` uses the trace's own arrival times,
    ``poisson`` / ``gamma`` / ``constant`` draw times at ``config.rate``. With ``config.rate`` the
    shape is then compressed uniformly (bursts kept) so the stage offers exactly that rate over its
    own window (see :func:`offered_window`): with ``duration_s``, ``round(rate * duration_s)``
    requests due in ``[0, duration_s)``; otherwise over the requests sent (``requests``, else the
    whole trace), ``(n - 1) / (last - first offset) = rate``. Without a rate the trace's timing is
    divided by ``speedup`` (default 1: as recorded) and cut at ``duration_s``.

    A closed-loop stage (``concurrency``) has no schedule: every request is due at once, and the
    runner releases the next one each time one of its ``concurrency`` in flight ends.
    """
    from replay import _engine

    total = trace.df.height
    if total == 0:
        raise TraceError("trace is empty")
    n = total
    if config.requests is not None:
        if config.requests > total:
            raise ConfigError(f"--requests: {config.requests} asked, the trace has {total} rows")
        n = config.requests
    arrivals, rate, duration_s = config.arrivals, config.rate, config.duration_s
    if config.closed_loop:
        return np.zeros(n, dtype=np.int64)
    if arrivals.kind == "trace":
        trace_ns = trace.df["arrival_us"].to_numpy()[:n].astype(np.int64) * 1000
        base = _compress(trace_ns, config.speedup or 1.0)
    elif rate is None:
        raise ConfigError(f"--arrivals {arrivals.kind}: needs --rate")
    else:
        base = _engine.arrival_offsets(arrivals.kind, n, np.zeros(0, np.int64), rate=rate, cv=arrivals.cv, seed=arrivals.seed)
    base = np.asarray(base, dtype=np.int64)
    if rate is not None:
        return _fit_window(base, rate, duration_s) if duration_s is not None else _fit_requests(base, rate)
    if duration_s is not None:
        base = base[: int(np.searchsorted(base, int(duration_s * 1e9), side="left"))]
        if len(base) == 0:
            raise ConfigError(f"--duration: {duration_s:g}s keeps no request")
    return base


_MARK = "\x00replay answer %d\x00"  # stands in for answer k while the body is serialized


def _recorded_text(content: object) -> str:
    """An assistant message's recorded text as one string: a string as it is, a list of parts
    their ``text`` joined, null or absent (an answer that was only tool calls) empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _with_answer_spans(obj: dict) -> tuple[bytes, list[int]]:
    """``obj`` serialized, and the byte spans of its earlier answers' JSON string contents
    (start, end, start, end, ...: oldest first): the assistant messages before the final message,
    which a causal run replaces with its engine's answers to those turns.

    Every such message gets a span, whatever its recorded ``content``: the runner gives span k of
    n the answer of the turn n - k back along the history, so a message left out would shift
    every older answer onto the wrong turn. A content that is null, absent (an answer that was
    only tool calls) or a list of parts is sent as one string (empty, or the parts' text, where
    the engine's answer is missing), which every server takes beside ``tool_calls``; the
    message's ``tool_calls`` and their ids stay as recorded."""
    messages = obj.get("messages")
    if not isinstance(messages, list):
        return body_json(obj).encode(), []
    at = [i for i, m in enumerate(messages[:-1]) if isinstance(m, dict) and m.get("role") == "assistant"]
    if not at:
        return body_json(obj).encode(), []
    recorded = [_recorded_text(messages[i].get("content")) for i in at]
    for k, i in enumerate(at):
        messages[i] = {**messages[i], "content": _MARK % k}
    text = body_json(obj)
    out, spans, done = bytearray(), [], 0
    for k, answer in enumerate(recorded):
        mark = body_json(_MARK % k)[1:-1]
        pos = text.index(mark, done)
        out += text[done:pos].encode()
        piece = body_json(answer)[1:-1].encode()
        spans += [len(out), len(out) + len(piece)]
        out += piece
        done = pos + len(mark)
    out += text[done:].encode()
    return bytes(out), spans


def _rewrite_body(
    body: str | dict | None,
    row: int,
    *,
    model: str | None,
    max_tokens: int | None,
    ignore_eos: bool,
    mark_answers: bool = False,
    api: str = "chat",
) -> tuple[bytes, list[int]]:
    """The body as sent: a stored body (JSON text) or a synthesized one (an object), streaming with
    usage, ``max_tokens`` (with ``ignore_eos``) and ``model`` set; and with ``mark_answers`` the
    byte spans of its earlier answers (:func:`_with_answer_spans`), else none. A Responses API
    request streams (its last event carries the usage) with ``max_output_tokens``; an embeddings
    request is sent as recorded but for the model (it has no answer to stream or limit)."""
    if body is None:
        raise TraceError(f"column 'body' row {row}: null, and the trace has no synthesis rule to build it")
    try:
        obj = json.loads(body) if isinstance(body, str) else body
    except json.JSONDecodeError as e:
        raise TraceError(f"column 'body' row {row}: not JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"column 'body' row {row}: not a JSON object")
    if model is not None:
        obj["model"] = model
    if api == "embeddings":
        return body_json(obj).encode(), []
    obj["stream"] = True
    if api == "responses":
        if max_tokens is not None:
            obj["max_output_tokens"] = int(max_tokens)
    else:
        obj["stream_options"] = {"include_usage": True}
        if max_tokens is not None:
            obj["max_tokens"] = int(max_tokens)
            obj.pop("max_completion_tokens", None)
    if max_tokens is not None and ignore_eos:
        obj["ignore_eos"] = True
    if mark_answers:
        return _with_answer_spans(obj)
    return body_json(obj).encode(), []


def session_mode(config: RunConfig, trace: Trace) -> str:
    """The stage's session mode: ``config.sessions``, where ``auto`` is ``dag`` for a trace with
    dependencies (:func:`replay.dag.has_edges`) in an open-loop stage, else ``open``."""
    from replay.dag import has_edges

    if config.sessions != "auto":
        return config.sessions
    return "dag" if not config.closed_loop and has_edges(trace.df) else "open"


def build_plan(trace: Trace, config: RunConfig, model: str | None = None) -> Plan:
    """Select the rows this stage sends (see :func:`schedule`); their bodies are made as the
    stage runs (:meth:`Plan.body_windows`).

    `model` (or `config.model`, which wins) replaces every body's model name.
    """
    offsets = schedule(trace, config)
    n = len(offsets)
    rows = trace.df.head(n)
    paths = tuple(API_PATHS.values())
    api_codes = {api: i for i, api in enumerate(API_PATHS)}
    path_index = rows["api"].replace_strict(api_codes, return_dtype=pl.UInt8).to_numpy()
    window_s, offered_rate = offered_window(offsets, config.duration_s)
    sessions = session_mode(config, trace)
    return Plan(
        rows=rows.drop("body", strict=False),
        offsets_ns=offsets,
        path_index=path_index,
        paths=paths,
        window_s=window_s,
        offered_rate=offered_rate,
        trace=trace,
        model=config.model or model,
        ignore_eos=config.ignore_eos,
        mark_answers=sessions in ("causal", "dag") and config.answers == "engine",
        sessions=sessions,
        session_header=config.session_header,
    )
