"""The OTLP/HTTP span receiver: ``replay capture --otlp HOST:PORT --out DIR``.

Owns :class:`OtlpConfig`, :class:`OtlpReceiver`, :func:`finish` and :func:`run_otlp`.

An application's OpenTelemetry exporter (``OTLPSpanExporter(endpoint="http://HOST:PORT/v1/traces")``,
or ``OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT``) sends its spans here instead of (or besides)
a collector. The receiver speaks OTLP/HTTP (open-telemetry/opentelemetry-proto@03dcdb93
``docs/specification.md``, "OTLP/HTTP"):

- ``POST /v1/traces`` with ``Content-Type: application/x-protobuf`` (an
  ``ExportTraceServiceRequest``) or ``application/json`` (its OTLP/JSON form), plain or with
  ``Content-Encoding: gzip``, and a ``Content-Length`` (the Python, Go and Java exporters send
  one; a chunked body is answered 411). At most ``max_body_bytes`` (default 20 MiB, the
  collector's default), compressed or not: 413 past it. At most ``max_inflight`` requests are read
  and decoded at once (the others wait for their turn), so memory holds at most that many bodies.
- Answers: 200 with an ``ExportTraceServiceResponse`` in the request's encoding (empty when every
  span was kept; ``partial_success`` with ``rejected_spans`` and the first span's error when some
  were malformed for the import: no ids, a bad time, a request span without an input token count);
  400 for a body that cannot be decoded (not protobuf, not JSON, not an object with a
  ``resourceSpans`` list, a gzip stream cut short), with a ``google.rpc.Status`` whose message says
  what is wrong; 415 for another content type or content encoding; 404 for another path. Each
  error is one line.
- Durability: the spans of each request are appended to ``DIR/spool.jsonl`` as one OTLP/JSON line
  (a ``TracesData`` object, ids in hex: the format ``replay import otel`` reads) and fsynced
  before the 200 goes out, so an exporter never hears "delivered" for spans that a crash could
  lose. Concurrent requests share an fsync (group commit: a request whose line an fsync already
  covered does not wait for another). A crash can leave at most a torn last line, one never
  acknowledged, so its exporter never counted it delivered; the next start into ``DIR`` cuts it off and appends
  after the rest.
- Text: by default a span is spooled with only what the import reads and no text: ids, the first
  word of its name, kind, times, status code and an allow-list of attributes (operation, model,
  token counts, max tokens, time to first chunk, agent name, conversation id, the OpenInference /
  OpenLLMetry kinds); message content, tool arguments, resource attributes, events, links and
  status messages are dropped before anything is written, and the requests become token-only
  rows. With a redaction key (``key``: ``$REPLAY_REDACT_KEY`` or ``--key-file``) a request span's
  content is kept, redacted before it is spooled (:class:`_LiveRedaction`), with the counts of
  its raw text; the Trace is then redacted once more by the import (its report, the second
  lock). ``keep_content`` (``--no-redact``) spools the spans whole and the Trace keeps their
  raw text (``redaction_policy=none``).
- On stop (SIGINT / SIGTERM, or :meth:`OtlpReceiver.stop`): the listener closes, requests being
  handled finish and are fsynced, and :func:`finish` imports the spool
  (:func:`capture.importers.otel.import_otel`) into ``DIR/trace.parquet`` (written beside it and
  renamed into place). The spool stays: after a crash, start the receiver again into ``DIR`` (it
  continues the spool, and its stop writes the Trace of all of it) or run
  ``replay import otel DIR/spool.jsonl -o trace.parquet --skip-bad`` (the torn line skipped).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from capture.importers.otel import (
    AGENT_NAME,
    CACHED_TOKENS,
    CONVERSATION,
    INPUT_TOKENS,
    MODEL,
    OUTPUT_TOKENS,
    RAW_COUNTS,
    RawCounts,
    check_span,
    span_content,
    traces_from_protobuf,
)
from capture.importers.records import LineError
from capture.recorder import LOCK_FILE
from capture.spool import CAPTURE_FILE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["OtlpConfig", "OtlpReceiver", "finish", "run_otlp", "SPOOL_FILE", "TRACE_FILE", "PATH"]

SPOOL_FILE = "spool.jsonl"
TRACE_FILE = "trace.parquet"
PATH = "/v1/traces"
PROTOBUF_TYPE = "application/x-protobuf"
JSON_TYPE = "application/json"
# google.rpc.Code INVALID_ARGUMENT, the code of a 400's Status
_INVALID_ARGUMENT = 3

# the attributes a spooled span keeps without --no-redact: what the import reads, never text
KEPT_ATTRIBUTES = frozenset(
    (
        "gen_ai.operation.name",
        "gen_ai.request.max_tokens",
        "gen_ai.response.time_to_first_chunk",
        "openinference.span.kind",
        "llm.request.type",
        *INPUT_TOKENS,
        *OUTPUT_TOKENS,
        *CACHED_TOKENS,
        *MODEL,
        *CONVERSATION,
        *AGENT_NAME,
    )
)
_KEPT_FIELDS = ("traceId", "spanId", "parentSpanId", "kind", "startTimeUnixNano", "endTimeUnixNano")
# OpenInference's llm.invocation_parameters (a JSON object) keeps only its output limit
_LIMIT_PARAMETERS = ("max_completion_tokens", "max_tokens")


@dataclass
class OtlpConfig:
    """What ``replay capture --otlp`` runs with."""

    out: Path
    host: str = "127.0.0.1"
    port: int = 4318
    keep_content: bool = False
    tokenizer: str = "gpt2"
    block_size: int = 16
    seed: int = 0
    max_body_bytes: int = 20 << 20
    max_inflight: int = 8
    read_timeout_s: float = 30.0
    grpc: bool = False  # speak OTLP/gRPC (TraceService/Export) instead of OTLP/HTTP
    key: Any = None  # a redact.key.RedactionKey: span text is redacted before it is spooled
    redact_processes: int | None = None  # the redaction's analyser processes (None: its default)


class BadRequest(Exception):
    """A request answered with ``status`` and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------------------------------------
# the spool


class _Spool:
    """``DIR/spool.jsonl``, appended a line a request; :meth:`append` returns once the line is
    on disk (fsynced; one fsync covers every line written before it started)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn_bytes = _cut_torn_tail(path)
        new = not path.exists()
        self.f = path.open("ab")
        if new:
            _fsync_dir(path.parent)
        self.lock = threading.Lock()  # the file and ``written``
        self.sync_lock = threading.Lock()  # one fsync at a time
        self.written = 0
        self.synced = 0

    def append(self, line: bytes) -> None:
        with self.lock:
            self.f.write(line)
            self.f.flush()
            self.written += 1
            mine = self.written
        with self.sync_lock:
            if self.synced >= mine:
                return  # an fsync that started after this line was written covered it
            with self.lock:
                upto = self.written
            os.fsync(self.f.fileno())
            self.synced = upto

    def close(self) -> None:
        with self.lock:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()


def _cut_torn_tail(path: Path) -> int:
    """Cut a last line without its newline (a crash mid-write: never acknowledged) off
    ``path``; the bytes cut."""
    if not path.exists():
        return 0
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            chunk = f.read(end - start)
            at = chunk.rfind(b"\n")
            if at >= 0:
                end = start + at + 1
                break
            end = start
        if end < size:
            f.truncate(end)
            os.fsync(f.fileno())
        return size - end


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# a request's body


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadRequest(415, f"Content-Encoding {encoding!r} is not gzip or identity")
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadRequest(400, f"the body is not gzip ({e})") from None
    if len(out) > limit:
        raise BadRequest(413, f"the body is over {limit} bytes once decompressed")
    if not d.eof:
        raise BadRequest(400, "the gzip body is cut short")
    return out


def _decode(body: bytes, protobuf: bool) -> dict:
    """The request as an OTLP/JSON ``TracesData`` object."""
    if protobuf:
        try:
            return traces_from_protobuf(body)
        except LineError:
            raise BadRequest(400, "the body is not an OTLP protobuf ExportTraceServiceRequest") from None
    try:
        obj = json.loads(body)
    except ValueError as e:
        raise BadRequest(400, f"the body is not JSON ({e})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("resourceSpans", []), list):
        raise BadRequest(400, "the body is not an OTLP/JSON ExportTraceServiceRequest (field 'resourceSpans')")
    return obj


def _span_lists(obj: dict) -> Iterator[tuple[dict, dict, list]]:
    """``(resource spans, scope spans, spans)`` of each scope (checked to be objects and lists)."""
    for i, rs in enumerate(obj.get("resourceSpans") or []):
        if not isinstance(rs, dict):
            raise BadRequest(400, f"resourceSpans[{i}] is not an object")
        scopes = rs.get("scopeSpans") or []
        if not isinstance(scopes, list):
            raise BadRequest(400, f"resourceSpans[{i}].scopeSpans is not a list")
        for j, ss in enumerate(scopes):
            spans = ss.get("spans") if isinstance(ss, dict) else None
            if not isinstance(ss, dict) or not isinstance(spans if spans is not None else [], list):
                raise BadRequest(400, f"resourceSpans[{i}].scopeSpans[{j}] is not an object with a list of spans")
            yield rs, ss, spans or []


def _strip(span: Any) -> Any:
    """``span`` with only what the import reads and no text (the module docstring)."""
    if not isinstance(span, dict):
        return span
    out = {k: span[k] for k in _KEPT_FIELDS if k in span}
    name = span.get("name")
    if isinstance(name, str):
        out["name"] = name.split(" ", 1)[0]
    attrs = []
    for kv in span.get("attributes") or []:
        key = kv.get("key") if isinstance(kv, dict) else None
        if key in KEPT_ATTRIBUTES:
            attrs.append(kv)
        elif key == "llm.invocation_parameters":
            limit = _limit_parameter(kv.get("value"))
            if limit is not None:
                attrs.append({"key": key, "value": {"stringValue": limit}})
    out["attributes"] = attrs
    status = span.get("status")
    if isinstance(status, dict) and "code" in status:
        out["status"] = {"code": status["code"]}
    return out


def _limit_parameter(value: Any) -> str | None:
    raw = value.get("stringValue") if isinstance(value, dict) else None
    try:
        params = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(params, dict):
        return None
    kept = {k: params[k] for k in _LIMIT_PARAMETERS if isinstance(params.get(k), int)}
    return json.dumps(kept) if kept else None


def _status_protobuf(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (``code`` = 1, varint; ``message`` = 2, string) on the wire."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    text = message.encode()
    return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text


class _LiveRedaction:
    """Span text redacted before it is spooled (``cfg.key``): each request span with content is
    spooled as :func:`_strip` leaves it plus its content, redacted by
    :class:`redact.pipeline.Redactor` as an imported request log's rows are (keyed surrogates
    of the same type and token count, the same value the same surrogate everywhere, the second
    lock), in the attributes the import reads (``gen_ai.input.messages`` as OpenAI messages,
    ``gen_ai.tool.definitions``, ``gen_ai.output.messages``), and :data:`RAW_COUNTS`: the
    tokens and block hashes of the raw text (and of its answer and calls), which the import
    takes, so that tokens and prefix sharing are those of the raw text. A span whose text the
    redaction quarantines (its analysis failed, or the second lock hit) keeps no text: it is
    spooled stripped, with the raw text's input token count. One request's spans are redacted
    at a time (the analysers are shared)."""

    def __init__(self, cfg: OtlpConfig) -> None:
        from capture.importers.logs import TokenCache
        from redact.pipeline import Redactor
        from replay.tokenizer import load_tokenizer

        self.block_size = cfg.block_size
        self.redactor = Redactor(cfg.key, cfg.tokenizer, processes=cfg.redact_processes)
        self.redactor._get_pool()
        self.tokens = TokenCache(load_tokenizer(cfg.tokenizer))
        self.lock = threading.Lock()
        self.counts: Counter = Counter()

    def close(self) -> None:
        self.redactor.close()

    def spans(self, spans: list) -> list:
        """``spans`` as they are spooled: stripped, those with content given it back redacted."""
        out = [_strip(span) for span in spans]  # nothing raw is kept, whatever follows
        todo: list[tuple[int, dict, str | None, list[str]]] = []
        for k, span in enumerate(spans):
            try:
                got = span_content(span)
            except LineError:
                continue  # malformed (check_span rejects it) or content that does not parse: none kept
            if got is not None:
                todo.append((k, *got))
        if not todo:
            return out
        import numpy as np
        import polars as pl

        from replay.bodies import body_json, text_slots
        from replay.blocks import block_hashes

        with self.lock:
            counts = []
            for _, body, answer, arguments in todo:
                ids = self.tokens.prompt_ids([s.text for s in text_slots(body)])
                answered = answer is not None or bool(arguments)
                counts.append(
                    RawCounts(
                        self.block_size,
                        len(ids),
                        block_hashes(ids, self.block_size),
                        len(self.tokens.prompt_ids([answer])) if answer is not None else None,
                        [len(self.tokens.prompt_ids([a])) for a in arguments] if answered else None,
                    )
                )
            frame = pl.DataFrame(
                {
                    "request_id": [str(spans[k].get("spanId")) for k, *_ in todo],
                    "body": [body_json(body) for _, body, _, _ in todo],
                    "response": [answer for _, _, answer, _ in todo],
                    "block_hashes": pl.Series([np.asarray(c.block_hashes, np.uint64) for c in counts], dtype=pl.List(pl.UInt64)),
                }
            )
            redacted, _ = self.redactor.redact_rows(frame, self.block_size)
            calls = self.redactor.redact_texts([a for _, _, _, arguments in todo for a in arguments])
        for (k, _, _, arguments), counted, body, answer in zip(
            todo, counts, redacted["body"].to_list(), redacted["response"].to_list()
        ):
            attrs = out[k]["attributes"]
            if body is None or any(calls[a].failed for a in arguments):
                self.counts["spans_quarantined"] += 1
                if not any(kv.get("key") in INPUT_TOKENS for kv in attrs):
                    attrs.append({"key": INPUT_TOKENS[0], "value": {"intValue": str(counted.input_tokens)}})
                continue
            self.counts["spans_redacted"] += 1
            request = json.loads(body)
            messages = request.get("messages")
            if messages is None:  # a completions request: its prompt as one message
                messages = [{"role": "user", "content": request.get("prompt", "")}]
            attrs.append({"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(messages)}})
            if request.get("tools"):
                attrs.append({"key": "gen_ai.tool.definitions", "value": {"stringValue": json.dumps(request["tools"])}})
            if answer is not None or arguments:
                message: dict[str, Any] = {"role": "assistant", "content": answer}
                if arguments:
                    message["tool_calls"] = [
                        {"id": f"call_{n}", "type": "function", "function": {"name": "", "arguments": calls[a].text}}
                        for n, a in enumerate(arguments)
                    ]
                attrs.append({"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps([message])}})
            attrs.append({"key": RAW_COUNTS, "value": {"stringValue": counted.to_json()}})
        return out


# ---------------------------------------------------------------------------------------------
# the server


class OtlpReceiver:
    """The receiver (the module docstring): :meth:`start`, then :meth:`stop`."""

    def __init__(self, cfg: OtlpConfig) -> None:
        self.cfg = cfg
        self.counts: Counter = Counter()
        self.counts_lock = threading.Lock()
        self.first_rejection: str | None = None
        self.spool: _Spool | None = None
        self.server: ThreadingHTTPServer | None = None
        self.grpc_server: Any = None  # a grpc.Server (cfg.grpc)
        self.grpc_port = 0
        self.thread: threading.Thread | None = None
        self.inflight = threading.BoundedSemaphore(cfg.max_inflight)
        self.lock: IO[str] | None = None  # DIR/.lock, flocked: one receiver (or proxy) a folder
        self.redaction: _LiveRedaction | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (OTLP/HTTP), or ``HOST:PORT`` (gRPC: the exporter's endpoint)."""
        if self.grpc_server is not None:
            return f"{self.cfg.host}:{self.grpc_port}"
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        from replay.errors import ConfigError

        out = self.cfg.out
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out}: exists and is not a folder")
        if (out / CAPTURE_FILE).exists():
            raise ConfigError(f"--out {out}: a folder of the recording proxy ({CAPTURE_FILE}); use a new folder")
        out.mkdir(parents=True, exist_ok=True)
        import fcntl

        self.lock = open(out / LOCK_FILE, "a")  # noqa: SIM115 (held until stop, or release)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise ConfigError(f"--out {out}: another capture is receiving into this folder") from None
        self.spool = _Spool(out / SPOOL_FILE)
        if self.cfg.key is not None and not self.cfg.keep_content:
            # the analysers start (and load Presidio) before the receiver listens
            self.redaction = _LiveRedaction(self.cfg)
        if self.cfg.grpc:
            self._start_grpc()
            return
        handler = type("Handler", (_Handler,), {"receiver": self, "timeout": self.cfg.read_timeout_s})
        try:
            server = ThreadingHTTPServer((self.cfg.host, self.cfg.port), handler)
        except OSError as e:
            self.stop()
            raise ConfigError(f"--otlp {self.cfg.host}:{self.cfg.port}: cannot listen ({e.strerror or e})") from None
        server.daemon_threads = False  # server_close() joins the requests being handled
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="otlp-receiver", daemon=True)
        self.thread.start()

    def _start_grpc(self) -> None:
        """Serve ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` (OTLP/gRPC): the
        request's bytes go through :meth:`receive` as an OTLP/HTTP protobuf body's do."""
        from concurrent.futures import ThreadPoolExecutor

        from replay.errors import ConfigError

        try:
            import grpc
        except ImportError:
            self.stop()
            raise ConfigError("--otlp-grpc: needs grpcio (pip install 'faithful-replay[otlp-grpc]')") from None

        def export(request: bytes, context: Any) -> bytes:
            try:
                rejected, error = self.receive(request, True)
            except BadRequest as e:
                self.count(**{f"answered_{e.status}": 1})
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
            return _export_response(rejected, error).SerializeToString()

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": grpc.unary_unary_rpc_method_handler(export)}
        )
        limit = self.cfg.max_body_bytes
        server = grpc.server(
            ThreadPoolExecutor(max_workers=self.cfg.max_inflight, thread_name_prefix="otlp-grpc"),
            handlers=[handler],
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_concurrent_streams", self.cfg.max_inflight)],
        )
        try:
            self.grpc_port = server.add_insecure_port(f"{self.cfg.host}:{self.cfg.port}")
        except RuntimeError as e:
            self.stop()
            raise ConfigError(f"--otlp-grpc {self.cfg.host}:{self.cfg.port}: cannot listen ({e})") from None
        server.start()
        self.grpc_server = server

    def release(self) -> None:
        """Let another receiver into the folder."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def stop(self, keep_lock: bool = False) -> dict[str, int]:
        """Stop listening, let the requests being handled finish, close the spool (and, unless
        ``keep_lock``, release the folder); the counts."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=self.cfg.read_timeout_s).wait()  # the calls being handled finish
            self.grpc_server = None
        if self.redaction is not None:
            self.count(**self.redaction.counts)
            self.redaction.close()
            self.redaction = None
        if self.spool is not None:
            self.spool.close()
            self.counts["torn_bytes_cut"] = self.spool.torn_bytes
            self.spool = None
        if not keep_lock:
            self.release()
        return dict(self.counts)

    def count(self, **add: int) -> None:
        with self.counts_lock:
            self.counts.update(add)

    def receive(self, body: bytes, protobuf: bool) -> tuple[int, str | None]:
        """Spool one decoded request's spans; ``(spans rejected, the first one's error)``."""
        obj = _decode(body, protobuf)
        kept_spans, rejected, error = 0, 0, None
        resource_spans = []
        for rs, ss, spans in _span_lists(obj):
            keep = []
            if self.redaction is not None:
                spans = self.redaction.spans(spans)
            for span in spans:
                if not self.cfg.keep_content and self.redaction is None:
                    span = _strip(span)
                try:
                    check_span(span)
                except LineError as e:
                    rejected += 1
                    if error is None:
                        sid = span.get("spanId") if isinstance(span, dict) else None
                        error = e.describe() if e.what.startswith("span ") else f"span {sid}: {e.describe()}"
                    continue
                keep.append(span)
            if not keep:
                continue
            kept_spans += len(keep)
            if self.cfg.keep_content:  # the resource and scope as they came
                scope = {k: v for k, v in ss.items() if k != "spans"}
                resource_spans.append(
                    {**{k: v for k, v in rs.items() if k != "scopeSpans"}, "scopeSpans": [{**scope, "spans": keep}]}
                )
            else:
                resource_spans.append({"scopeSpans": [{"spans": keep}]})
        if kept_spans:
            assert self.spool is not None
            line = json.dumps({"resourceSpans": resource_spans}, separators=(",", ":")) + "\n"
            self.spool.append(line.encode())
        self.count(requests=1, spans_received=kept_spans + rejected, spans_spooled=kept_spans, spans_rejected=rejected)
        if error is not None and self.first_rejection is None:
            self.first_rejection = error
        return rejected, error


def _export_response(rejected: int, error: str | None) -> Any:
    """The ``ExportTraceServiceResponse``: empty, or a ``partial_success`` naming the rejected."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTracePartialSuccess,
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=error or ""))
    return response


class _Handler(BaseHTTPRequestHandler):
    receiver: OtlpReceiver
    server_version = "faithful-replay-otlp"
    # HTTP/1.0: a connection per request, so a stop never waits on an idle keep-alive connection

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        protobuf = ctype == PROTOBUF_TYPE  # the encoding of the answer (JSON for a type not served)
        limit = self.receiver.cfg.max_body_bytes
        length = (self.headers.get("Content-Length") or "").strip()
        unread = int(length) if length.isdigit() else 0  # the body's bytes not read yet
        try:
            if self.path.split("?", 1)[0] != PATH:
                raise BadRequest(404, f"{self.path}: not found (spans go to POST {PATH})")
            if ctype not in (PROTOBUF_TYPE, JSON_TYPE):
                raise BadRequest(415, f"Content-Type {ctype or '(none)'!r} is not {PROTOBUF_TYPE} or {JSON_TYPE}")
            if not length.isdigit():
                raise BadRequest(411, "a body needs a Content-Length (chunked bodies are not read)")
            if unread > limit:
                raise BadRequest(413, f"the body's {unread} bytes are over {limit}")
            encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
            with self.receiver.inflight:
                try:
                    body = self.rfile.read(unread)
                except OSError as e:
                    raise BadRequest(408, f"the body did not arrive ({e})") from None
                if len(body) < unread:
                    raise BadRequest(400, f"the body is cut short: {len(body)} of {unread} bytes")
                unread = 0
                rejected, error = self.receiver.receive(_decompress(body, encoding, limit), protobuf)
        except BadRequest as e:
            self.receiver.count(**{f"answered_{e.status}": 1})
            if 0 < unread <= limit:
                self._drain(unread)  # so that closing the connection does not reset it under the answer
            self._error(e.status, e.message, protobuf)
            return
        self._ok(rejected, error, protobuf)

    def _drain(self, n: int) -> None:
        try:
            while n > 0:
                got = self.rfile.read(min(n, 1 << 16))
                if not got:
                    return
                n -= len(got)
        except OSError:
            pass

    def _ok(self, rejected: int, error: str | None, protobuf: bool) -> None:
        response = _export_response(rejected, error)
        if protobuf:
            self._send(200, PROTOBUF_TYPE, response.SerializeToString())
        else:
            from google.protobuf.json_format import MessageToDict

            self._send(200, JSON_TYPE, json.dumps(MessageToDict(response)).encode())

    def _error(self, status: int, message: str, protobuf: bool) -> None:
        if protobuf:
            self._send(status, PROTOBUF_TYPE, _status_protobuf(_INVALID_ARGUMENT, message))
        else:
            self._send(status, JSON_TYPE, json.dumps({"code": _INVALID_ARGUMENT, "message": message}).encode())

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


# ---------------------------------------------------------------------------------------------
# the Trace


def finish(cfg: OtlpConfig, key: Any | None = None) -> ImportResult | None:
    """Import ``DIR/spool.jsonl`` into ``DIR/trace.parquet``; None when it holds no spans."""
    from capture.importers.otel import import_otel

    spool = cfg.out / SPOOL_FILE
    if not spool.exists() or spool.stat().st_size == 0:
        return None
    # with a key, the spooled (redacted) text goes through the import's redaction too: the Trace
    # is marked redacted with its report and second lock, as every redacted Trace is
    return import_otel(
        spool,
        cfg.out / TRACE_FILE,
        tokenizer=cfg.tokenizer,
        block_size=cfg.block_size,
        seed=cfg.seed,
        key=key if key is not None else cfg.key,
    )


def run_otlp(
    cfg: OtlpConfig, on_ready: Callable[[OtlpReceiver], None] | None = None
) -> tuple[dict[str, int], ImportResult | None]:
    """Receive until SIGINT / SIGTERM, then write the Trace; the counts and the import's result.
    ``on_ready(receiver)`` is called once it listens."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    receiver = OtlpReceiver(cfg)
    try:
        receiver.start()
        if on_ready is not None:
            on_ready(receiver)
        while not stop.wait(0.5):
            pass
        counts = receiver.stop(keep_lock=True)
        return counts, finish(cfg)
    finally:
        receiver.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
