"""The recording proxy: an aiohttp reverse proxy (on uvloop) that records what passes through.

Owns :class:`CaptureProxy` and :func:`run_capture` (what ``replay capture``
runs).

- Passthrough. Every request goes to ``upstream`` + its path and query, with the client's headers
  (less the hop-by-hop ones); the upstream's status, headers and body come back as they are,
  written to the client a read at a time as they arrive (``auto_decompress`` off: the bytes are
  the upstream's). One change: a streamed chat / completions request that did not ask for
  ``stream_options.include_usage`` is sent with it (the usage chunk holds the cached tokens), and
  that usage-only chunk is taken out of what the client receives. The proxy then forwards whole
  SSE events (an event cut across two reads goes out when its end arrives).
- Recording. ``POST /v1/chat/completions`` and ``/v1/completions`` are recorded: the proxy notes
  times and keeps the upstream's bytes in memory while the request lasts, then puts one
  :class:`capture.record.Exchange` on a bounded queue to the recorder process (never waiting: a
  full queue drops the record and counts it; ended requests are handed over in small lists).
  The recorder (:func:`capture.recorder.run_recorder`) builds the
  rows (:class:`capture.record.RowBuilder`: sessions, sampling, raw-text tokens and hashes,
  redaction in worker processes), appends them to the spool and fsyncs after each small batch,
  and rolls the spool into Parquet segments (:mod:`capture.spool`). If it falls behind or dies,
  traffic is untouched; records are dropped and counted (those lost with a recorder that died,
  by the proxy, which leaves their count in the folder when it stops).
- Faults. Upstream unreachable or reset before its headers: 502; no headers within the
  timeout: 504; a failure mid-body cuts the client's connection (as the upstream's would have
  been cut). Each is recorded with its outcome (``upstream_error``, ``timeout``); a client that
  goes away mid-stream is recorded as ``client_disconnected`` and the upstream request is closed
  (one that leaves after the ``[DONE]`` event, or after every byte, had the whole answer: it
  stays ``completed``).
- The proxy's own Prometheus metrics are served at ``metrics_path`` (default ``/metrics``; that
  path is not forwarded), among them ``replay_capture_unrecorded``: requests to any other endpoint
  (models, embeddings, ...) pass through as they are and are counted there, not recorded.
- Never stored: request and response headers (the Authorization header, cookies, api keys), the
  query string. Only the session header's value is kept, as the session id.
"""

from __future__ import annotations

import asyncio
import json
import queue as queue_mod
import re
import secrets
import signal
import time
from collections import Counter

from capture.record import API_OF_PATH, Exchange
from capture.recorder import COUNTERS, CaptureConfig, run_recorder
from redact.lock import LOCK_TYPES

__all__ = ["CaptureProxy", "run_capture"]

# hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp sets itself: never forwarded
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# the longest an ended exchange waits in the proxy before it is handed to the recorder (s)
HAND_OFF_S = 0.005


def _now_us() -> int:
    return time.perf_counter_ns() // 1000


# -- the proxy ------------------------------------------------------------------------------------


class CaptureProxy:
    """The proxy and its recorder process. ``await start()``, then ``await stop()``."""

    def __init__(self, cfg: CaptureConfig):
        self.cfg = cfg
        self.upstream = cfg.upstream.rstrip("/")
        self.requests = 0
        # requests passed through without a record: endpoints other than chat / completions
        self.unrecorded = 0
        self.outcomes: Counter = Counter()
        self._proc = None
        self._queue = None
        self._shared = None
        self._runner = None
        self._session = None
        self.url = ""
        self.recovered_rows = 0
        self._pending: list[Exchange] = []
        self._flush: asyncio.TimerHandle | None = None
        self._handed = 0  # exchanges put on the queue to the recorder
        self._recorder_gone = False  # the recorder process has ended (see _recorder_ended)
        self._lost = 0  # records the proxy counted dropped_recorder_error

    # recorder ------------------------------------------------------------------------------------

    def _start_recorder(self) -> None:
        import ctypes
        import multiprocessing

        from capture.spool import open_folder

        info = open_folder(self.cfg.out, self.cfg.settings())
        ctx = multiprocessing.get_context("spawn")
        # the queue holds lists of exchanges (see hand_off)
        self._queue = ctx.Queue(maxsize=max(1, self.cfg.queue_size // self.cfg.hand_off))
        self._shared = ctx.RawArray(ctypes.c_longlong, len(COUNTERS))
        ready = ctx.Queue()
        self._proc = ctx.Process(
            target=run_recorder, name="capture-recorder", args=(self.cfg, info, self._queue, self._shared, ready)
        )
        self._proc.start()
        while True:
            try:
                got = ready.get(timeout=1.0)
                if "error" in got:
                    from replay.errors import ConfigError

                    self._proc.join(timeout=30)
                    raise ConfigError(got["error"])
                self.recovered_rows = got["recovered_rows"]
                return
            except queue_mod.Empty:
                if not self._proc.is_alive():
                    from replay.errors import ReplayError

                    raise ReplayError(
                        f"capture: the recorder process failed to start (exit {self._proc.exitcode}; see its error above)"
                    )

    def counters(self) -> dict[str, int]:
        return dict(zip(COUNTERS, self._shared[:])) if self._shared is not None else {}

    def _enqueue(self, ex: Exchange) -> None:
        self._pending.append(ex)
        if len(self._pending) >= self.cfg.hand_off:
            self._hand_off()
        elif self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(HAND_OFF_S, self._hand_off)

    def _hand_off(self) -> None:
        """Give the recorder what has ended (never waiting: a full queue drops it, counted)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        batch, self._pending = self._pending, []
        if not batch:
            return
        if self._recorder_gone:
            self._count_lost(len(batch))
            return
        try:
            self._queue.put_nowait(batch)
            self._handed += len(batch)
        except queue_mod.Full:
            self._shared[0] += len(batch)

    def _count_lost(self, n: int) -> None:
        if n > 0:
            self._shared[COUNTERS.index("dropped_recorder_error")] += n
            self._lost += n

    def _recorder_ended(self) -> None:
        """The recorder process has ended (it was stopped, or it died): what it was handed and
        never reported on is lost, and so is every record from now on. The proxy counts them as
        ``dropped_recorder_error`` (the recorder, their writer until now, writes no more) and,
        at :meth:`stop`, leaves them in the folder for the next start's trace."""
        asyncio.get_running_loop().remove_reader(self._proc.sentinel)
        self._recorder_gone = True
        self._count_lost(self._handed - self.counters()["requests_recorder_saw"])

    # http ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        import aiohttp
        from aiohttp import web

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._start_recorder)
        loop.add_reader(self._proc.sentinel, self._recorder_ended)
        timeout = aiohttp.ClientTimeout(total=None, connect=self.cfg.connect_timeout_s, sock_read=self.cfg.read_timeout_s)
        self._session = aiohttp.ClientSession(
            timeout=timeout,
            auto_decompress=False,
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # a client that goes away cancels its handler: the upstream request is closed at once
        # (as a proxy does), whether the answer was streaming or not yet begun
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.host, self.cfg.port, backlog=1024)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.cfg.host}:{port}"

    async def stop(self) -> None:
        """Stop listening, let requests in flight end, then let the recorder finish (it rolls its
        spool into a last segment)."""
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        self._hand_off()
        if self._proc is not None:

            def finish():
                # the end marker, unless the recorder is gone (then nothing reads the queue)
                while self._proc.is_alive():
                    try:
                        self._queue.put(None, timeout=1.0)
                        break
                    except queue_mod.Full:
                        continue
                self._proc.join(timeout=120)
                if self._proc.is_alive():
                    self._proc.kill()

            await asyncio.get_running_loop().run_in_executor(None, finish)
            if not self._recorder_gone:
                self._recorder_ended()
            if self._lost:
                self._leave_lost_counts()

    def _leave_lost_counts(self) -> None:
        """Write the records lost with the recorder into the folder (a spool of counts that the
        next start carries into its trace), unless another capture holds the folder now."""
        import fcntl
        import sys

        from capture.recorder import LOCK_FILE
        from capture.spool import write_counts

        with open(self.cfg.out / LOCK_FILE, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(
                    f"capture: {self._lost} records lost with the recorder are not in {self.cfg.out} (another capture holds it)",
                    file=sys.stderr,
                    flush=True,
                )
                return
            write_counts(self.cfg.out, {"dropped_recorder_error": self._lost})

    def _metrics(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        proxy = self

        class _Collector:
            def collect(self):
                c = proxy.counters()
                yield CounterMetricFamily("replay_capture_requests", "Requests proxied.", value=proxy.requests)
                yield CounterMetricFamily(
                    "replay_capture_unrecorded",
                    "Requests passed through without a record (an endpoint other than chat / completions).",
                    value=proxy.unrecorded,
                )
                out = CounterMetricFamily("replay_capture_outcomes", "Recorded requests by outcome.", labels=["outcome"])
                for k, v in sorted(proxy.outcomes.items()):
                    out.add_metric([k], v)
                yield out
                dropped = CounterMetricFamily(
                    "replay_capture_records_dropped", "Records dropped (never written), by reason.", labels=["reason"]
                )
                for reason in ("queue_full", "redaction_failed", "recorder_error", "lock"):
                    dropped.add_metric([reason], c.get(f"dropped_{reason}", 0))
                yield dropped
                locked = CounterMetricFamily(
                    "replay_capture_lock_records",
                    "Records the second lock kept out (a PII shape left after redaction), by the type found in them.",
                    labels=["type"],
                )
                for t in LOCK_TYPES:
                    locked.add_metric([t], c.get(f"lock_{t}", 0))
                yield locked
                yield CounterMetricFamily(
                    "replay_capture_records_written", "Records written to the spool.", value=c.get("recorded", 0)
                )
                yield CounterMetricFamily(
                    "replay_capture_records_not_sampled", "Records of sessions --sample left out.", value=c.get("not_sampled", 0)
                )
                yield CounterMetricFamily(
                    "replay_capture_segments", "Parquet segments written.", value=c.get("segments_written", 0)
                )
                yield CounterMetricFamily(
                    "replay_capture_segment_roll_failures",
                    "Rolls of the spool into a segment that failed (the rows stay in the spool and roll later).",
                    value=c.get("segment_roll_failed", 0),
                )
                try:
                    depth = proxy._queue.qsize()
                except (NotImplementedError, AttributeError):
                    depth = 0
                yield GaugeMetricFamily("replay_capture_queue_depth", "Exchanges waiting for the recorder.", value=depth)
                yield GaugeMetricFamily(
                    "replay_capture_recorder_up",
                    "1 while the recorder process runs.",
                    value=1 if proxy._proc is not None and proxy._proc.is_alive() else 0,
                )

        registry = CollectorRegistry()
        registry.register(_Collector())
        return generate_latest(registry)

    async def _handle(self, request):
        import aiohttp
        from aiohttp import web

        if request.method == "GET" and request.path == self.cfg.metrics_path:
            return web.Response(body=self._metrics(), content_type="text/plain", charset="utf-8")
        start = _now_us()
        arrival_unix_us = time.time_ns() // 1000
        self.requests += 1
        body = await request.read()
        api = API_OF_PATH.get(request.path) if request.method == "POST" else None
        self.unrecorded += api is None
        send = body
        stream = strip = False
        if api is not None and b'"stream"' in body:
            try:
                obj = json.loads(body)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and obj.get("stream") is True:
                stream = True
                opts = obj.get("stream_options")
                if not (isinstance(opts, dict) and opts.get("include_usage") is True):
                    obj["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
                    send = json.dumps(obj, ensure_ascii=False).encode()
                    strip = True
        ex = None
        if api is not None:
            ex = Exchange(
                request_id=secrets.token_hex(12),
                api=api,
                arrival_unix_us=arrival_unix_us,
                body=body,
                session_header=request.headers.get(self.cfg.session_header),
                stream=stream,
            )
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        resp = None
        outcome = "completed"
        # the answer is with the client: every byte written, or (streamed) the [DONE] event
        delivered = False
        tail = b""
        try:
            async with self._session.request(
                request.method, self.upstream + request.path_qs, data=send, headers=headers, allow_redirects=False
            ) as up:
                first = _now_us()
                if ex is not None:
                    ex.status = up.status
                    ex.ttfb_us = first - start
                    ex.content_encoding = up.headers.get("Content-Encoding")
                    if up.status >= 500:
                        outcome = "upstream_error"
                # only an event stream has a usage chunk to take out (an error answer passes as is)
                strip = strip and up.headers.get("Content-Type", "").startswith("text/event-stream")
                resp = web.StreamResponse(status=up.status, reason=up.reason)
                for k, v in up.headers.items():
                    if k.lower() not in _HOP:
                        resp.headers.add(k, v)
                if up.content_length is not None and not strip:
                    resp.content_length = up.content_length
                await resp.prepare(request)
                pending = b""
                async for data in up.content.iter_any():
                    if ex is not None:
                        ex.chunks.append((_now_us() - start, data))
                    if strip:
                        data, pending = _without_usage_events(pending + data)
                        if not data:
                            continue
                    await _to_client(resp, data)
                    tail = (tail + data)[-_TAIL:]
                    delivered = delivered or tail.rstrip().endswith(_DONE_EVENT)
                if pending:
                    await _to_client(resp, pending)
                delivered = True
                await _to_client(resp, None)
            return resp
        except _ClientGone:
            outcome = outcome if delivered else "client_disconnected"
            return resp
        except asyncio.TimeoutError:
            outcome = "timeout"
            return self._failed(request, resp, 504, "upstream timed out")
        except (aiohttp.ClientError, ConnectionResetError) as e:
            outcome = "upstream_error"
            return self._failed(request, resp, 502, f"upstream: {type(e).__name__}")
        except asyncio.CancelledError:
            # the client went away (aiohttp cancels the handler); after [DONE] it had the answer
            outcome = outcome if delivered else "client_disconnected"
            raise
        finally:
            if ex is not None:
                ex.end_us = _now_us() - start
                ex.outcome = outcome
                self.outcomes[outcome] += 1
                self._enqueue(ex)

    def _failed(self, request, resp, status: int, why: str):
        """The answer to a request whose upstream failed: ``status`` if nothing was sent yet,
        else the client's connection is cut (as the upstream's was)."""
        from aiohttp import web

        if resp is None or not resp.prepared:
            return web.Response(
                status=status,
                text=json.dumps({"error": {"message": f"capture proxy: {why}", "type": "proxy_error", "code": status}}),
                content_type="application/json",
            )
        if request.transport is not None:
            request.transport.abort()
        return resp


class _ClientGone(Exception):
    """A write to the proxy's client failed: it hung up."""


async def _to_client(resp, data: bytes | None) -> None:
    """Write ``data`` to the client (None: end the answer); raises ``_ClientGone`` if it left
    (aiohttp raises ``ClientConnectionResetError``, a ``ConnectionResetError``, since 3.10; a
    plain ``ConnectionResetError`` before)."""
    try:
        if data is None:
            await resp.write_eof()
        else:
            await resp.write(data)
    except ConnectionResetError as e:
        raise _ClientGone from e


# A client that hangs up once it has read this event (the openai SDK stops reading there) had
# the whole answer: the exchange is recorded "completed", not "client_disconnected".
_DONE_EVENT = b"data: [DONE]"
_TAIL = len(_DONE_EVENT) + 8

_EVENT_END = re.compile(rb"\r?\n\r?\n")


def _without_usage_events(data: bytes) -> tuple[bytes, bytes]:
    """``data``'s whole SSE events less the usage-only ones (``choices`` empty, ``usage`` set:
    the chunk ``include_usage`` adds), and the unfinished rest."""
    out = []
    at = 0
    for m in _EVENT_END.finditer(data):
        event = data[at : m.end()]
        at = m.end()
        if b'"usage"' not in event or not _usage_only(event):
            out.append(event)
    return b"".join(out), data[at:]


def _usage_only(event: bytes) -> bool:
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                obj = json.loads(line[5:])
            except ValueError:
                return False
            return isinstance(obj, dict) and obj.get("choices") == [] and isinstance(obj.get("usage"), dict)
    return False


def run_capture(cfg: CaptureConfig, on_ready=None) -> dict[str, int]:
    """Run the proxy until SIGINT / SIGTERM (on uvloop); return the final counters.
    ``on_ready(proxy)`` is called once it listens."""
    import uvloop

    async def main() -> dict[str, int]:
        proxy = CaptureProxy(cfg)
        await proxy.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if on_ready is not None:
            on_ready(proxy)
        await stop.wait()
        await proxy.stop()
        return proxy.counters()

    return uvloop.run(main())
