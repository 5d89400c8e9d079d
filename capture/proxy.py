"""The recording proxy: a compiled reverse proxy (``replay._engine.CaptureServer``, hyper and
tokio in ``rust/capture``) that records what passes through, and its recorder process.

Owns :class:`CaptureProxy` and :func:`run_capture` (what ``replay capture`` runs).

- Passthrough (in Rust, without the GIL). Every request goes to ``upstream`` + its path and query,
  with the client's headers (less the hop-by-hop ones); the upstream's status, headers and body
  come back as they are, passed on a read at a time as they arrive (the bytes are the upstream's:
  nothing is decompressed). One change: a streamed chat / completions request that did not ask
  for ``stream_options.include_usage`` is sent with it (the usage chunk holds the cached tokens),
  and that usage-only chunk is taken out of what the client receives, which then gets whole SSE
  events (an event cut across two reads goes out when its end arrives). The listener speaks TLS
  with ``tls_cert`` / ``tls_key``; an ``https://`` upstream is checked against the system's roots,
  or ``ca_cert``, or not at all (``insecure``).
- Recording. ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` and
  ``/v1/embeddings`` are recorded (a Responses API stream is sent as it came: its last event
  carries the usage): the data
  path notes times and keeps the upstream's bytes in memory while the request lasts, then puts
  the finished exchange on its backlog, a queue bounded in exchanges (``queue_size``) and in bytes
  (``backlog_mb``) that never makes a request wait: an exchange that finds it full is dropped and
  counted (``dropped_queue_full``, ``dropped_backlog``), and so are the later requests of its
  session (by the session header: ``dropped_session_shed``), so that the trace holds whole
  sessions. A thread of this process takes the exchanges off it (:meth:`CaptureProxy._pump`)
  and hands them in lists of up to ``hand_off`` to the recorder process while the recorder's
  small queue has room. The recorder (:func:`capture.recorder.run_recorder`) builds the rows
  (:class:`capture.record.RowBuilder`: sessions, sampling, raw-text tokens and hashes, redaction
  in worker processes), appends them to the spool and fsyncs after each small batch, and rolls
  the spool into Parquet segments (:mod:`capture.spool`). If it falls behind or dies, traffic is
  untouched; records are dropped and counted (those lost with a recorder that died, by the
  proxy, which leaves their count in the folder when it stops).
- Faults. Upstream unreachable or reset before its headers: 502; no connection or no headers
  within the timeouts: 504 (a JSON ``error`` body, type ``proxy_error``); a failure or silence
  mid-body cuts the client's connection (as the upstream's would have been cut). Each is recorded
  with its outcome (``upstream_error``, ``timeout``); a client that goes away is recorded as
  ``client_disconnected`` and the upstream request is closed (one that leaves after the
  ``[DONE]`` event, or after every byte, had the whole answer: it stays ``completed``).
- The proxy's own Prometheus metrics are served at ``metrics_path`` (default ``/metrics``; a GET
  there is not forwarded), among them ``replay_capture_unrecorded``: requests to any other
  endpoint (models, embeddings, ...) pass through as they are and are counted there, not recorded.
- Never stored: request and response headers (the Authorization header, cookies, api keys), the
  query string. Only the session header's value is kept, as the session id.
"""

from __future__ import annotations

import asyncio
import queue as queue_mod
import secrets
import signal
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from capture.record import Exchange
from capture.recorder import COUNTERS, PROXY_COUNTS, CaptureConfig, record_capacity, run_recorder, yield_to_traffic
from redact.lock import LOCK_TYPES

if TYPE_CHECKING:
    import ctypes
    import multiprocessing.context
    import multiprocessing.queues

    from replay._engine import CaptureServer

__all__ = ["CaptureProxy", "run_capture"]

_T = TypeVar("_T")


def _started(part: _T | None, what: str) -> _T:
    """``part`` of a started proxy (:meth:`CaptureProxy.start` made it)."""
    if part is None:
        from replay.errors import ReplayError

        raise ReplayError(f"capture: {what} is used before the proxy started")
    return part


# the longest the pump waits for an exchange before it looks at the recorder again (s)
PUMP_WAIT_S = 0.05
# with the queue to the recorder full, the pump tries again this much later (s); meanwhile the
# exchanges wait in the data path's backlog
PUMP_RETRY_S = 0.005
# lists of exchanges the queue to the recorder holds at most (the backlog is the data path's)
RECORDER_QUEUE_LISTS = 8


# -- the proxy ------------------------------------------------------------------------------------


class CaptureProxy:
    """The data path and its recorder process. ``await start()``, then ``await stop()``."""

    def __init__(self, cfg: CaptureConfig):
        self.cfg = cfg
        self._server: CaptureServer | None = None  # the data path
        self._proc: multiprocessing.context.SpawnProcess | None = None  # the recorder
        self._queue: multiprocessing.queues.Queue | None = None  # lists of exchanges, to the recorder
        self._shared: ctypes.Array[ctypes.c_longlong] | None = None  # COUNTERS, written by both
        self._pump_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # the pump and a /metrics render both hand off what has ended: one at a time
        self._handing = threading.Lock()
        self.url = ""
        self.address: tuple[str, int] | None = None  # (IP, port) listened on
        self.recovered_rows = 0
        self._handed = 0  # exchanges put on the queue to the recorder
        self._pending: list[Exchange] | None = None  # taken, not yet on the queue to the recorder
        self._recorder_gone = False  # the recorder process has ended (see _recorder_ended)
        self._lost = 0  # records the proxy counted dropped_recorder_error

    # the data path's counts ----------------------------------------------------------------------

    def _proxy_counts(self) -> dict:
        return self._server.counters() if self._server is not None else {"outcomes": {}}

    @property
    def requests(self) -> int:
        """Requests proxied."""
        return self._proxy_counts().get("requests", 0)

    @property
    def unrecorded(self) -> int:
        """Requests passed through without a record: endpoints other than chat / completions."""
        return self._proxy_counts().get("unrecorded", 0)

    @property
    def outcomes(self) -> dict[str, int]:
        """Recorded requests by outcome."""
        return {k: v for k, v in self._proxy_counts()["outcomes"].items() if v}

    # recorder ------------------------------------------------------------------------------------

    def _start_recorder(self) -> None:
        import ctypes
        import multiprocessing

        from capture.spool import open_folder

        info = open_folder(self.cfg.out, self.cfg.settings())
        ctx = multiprocessing.get_context("spawn")
        # the queue holds lists of exchanges (see _hand_off); the backlog waits in the data path
        self._queue = ctx.Queue(maxsize=max(1, min(RECORDER_QUEUE_LISTS, self.cfg.queue_size // self.cfg.hand_off)))
        self._shared = ctx.RawArray(ctypes.c_longlong, len(COUNTERS))
        ready = ctx.Queue()
        proc = self._proc = ctx.Process(
            target=run_recorder, name="capture-recorder", args=(self.cfg, info, self._queue, self._shared, ready)
        )
        proc.start()
        while True:
            try:
                got = ready.get(timeout=1.0)
                if "error" in got:
                    from replay.errors import ConfigError

                    proc.join(timeout=30)
                    raise ConfigError(got["error"])
                self.recovered_rows = got["recovered_rows"]
                return
            except queue_mod.Empty:
                if not proc.is_alive():
                    from replay.errors import ReplayError

                    raise ReplayError(
                        f"capture: the recorder process failed to start (exit {proc.exitcode}; see its error above)"
                    )

    def counters(self) -> dict[str, int]:
        if self._shared is None:
            return {}
        out = dict(zip(COUNTERS, self._shared[:]))
        proxy = self._proxy_counts()
        out.update({name: proxy.get(name, 0) for name in PROXY_COUNTS})
        return out

    def _publish_drops(self) -> None:
        """The data path's drops, where the recorder reads them (it writes them into the trace)."""
        proxy, shared = self._proxy_counts(), _started(self._shared, "the shared counters")
        for name in PROXY_COUNTS:
            shared[COUNTERS.index(name)] = proxy.get(name, 0)

    def _pump(self) -> None:
        """Take what has ended off the data path's queue and hand it to the recorder, until the
        proxy has stopped and its queue is empty. It runs under SCHED_IDLE, as the recorder does:
        the data path's threads take its CPU whenever they wake."""
        yield_to_traffic(threading.get_native_id())
        server, proc = _started(self._server, "the data path"), _started(self._proc, "the recorder")
        while True:
            came = self._pending is not None or server.wait(PUMP_WAIT_S)
            if not self._recorder_gone and not proc.is_alive():
                self._recorder_ended()
            if came:
                self._hand_off()
                if self._pending is not None:  # the recorder is behind: the backlog waits
                    time.sleep(PUMP_RETRY_S)
            else:
                with self._handing:
                    self._publish_drops()
                if self._stopping.is_set():
                    return

    def _hand_off(self) -> None:
        """Give the recorder what has ended, in lists of up to ``hand_off``, while its queue has
        room (never waiting: what does not fit stays in the data path's backlog, which drops and
        counts when full)."""
        with self._handing:
            while True:
                if self._pending is None:
                    rows = _started(self._server, "the data path").take(self.cfg.hand_off)
                    if not rows:
                        break
                    self._pending = [
                        Exchange(
                            secrets.token_hex(12),
                            api,
                            arrival,
                            body,
                            session,
                            stream=stream,
                            status=status,
                            ttfb_us=ttfb,
                            end_us=end,
                            outcome=outcome,
                            chunks=chunks,
                            content_encoding=encoding,
                        )
                        for api, arrival, body, session, stream, status, ttfb, end, outcome, chunks, encoding in rows
                    ]
                if self._recorder_gone:
                    self._count_lost(len(self._pending))
                    self._pending = None
                    continue
                try:
                    _started(self._queue, "the recorder's queue").put_nowait(self._pending)
                except queue_mod.Full:
                    break
                self._handed += len(self._pending)
                self._pending = None
            self._publish_drops()

    def _count_lost(self, n: int) -> None:
        if n > 0:
            _started(self._shared, "the shared counters")[COUNTERS.index("dropped_recorder_error")] += n
            self._lost += n

    def _recorder_ended(self) -> None:
        """The recorder process has ended (it was stopped, or it died): what it was handed and
        never reported on is lost, and so is every record from now on. The proxy counts them as
        ``dropped_recorder_error`` (the recorder, their writer until now, writes no more) and,
        at :meth:`stop`, leaves them in the folder for the next start's trace."""
        with self._handing:
            if self._recorder_gone:
                return
            self._recorder_gone = True
            self._count_lost(self._handed - self.counters()["requests_recorder_saw"])

    # serving -------------------------------------------------------------------------------------

    async def start(self) -> None:
        from replay._engine import CaptureServer

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._start_recorder)
        cfg = self.cfg
        try:
            server = self._server = CaptureServer(
                cfg.upstream,
                f"[{cfg.host}]:{cfg.port}" if ":" in cfg.host else f"{cfg.host}:{cfg.port}",
                self._render_metrics,
                connect_timeout_s=cfg.connect_timeout_s,
                read_timeout_s=cfg.read_timeout_s,
                metrics_path=cfg.metrics_path,
                session_header=cfg.session_header,
                queue_size=cfg.queue_size,
                backlog_bytes=cfg.backlog_mb << 20,
                tls_cert=None if cfg.tls_cert is None else str(cfg.tls_cert),
                tls_key=None if cfg.tls_key is None else str(cfg.tls_key),
                ca_cert=None if cfg.ca_cert is None else str(cfg.ca_cert),
                insecure=cfg.insecure,
                threads=cfg.threads,
            )
        except BaseException:
            await loop.run_in_executor(None, self._end_recorder)
            raise
        self.url = server.url
        self.address = server.address
        self._pump_thread = threading.Thread(target=self._pump, name="capture-pump", daemon=True)
        self._pump_thread.start()

    async def stop(self) -> None:
        """Stop listening, let requests in flight end, hand what they left to the recorder, then
        let the recorder finish (it rolls its spool into a last segment)."""
        loop = asyncio.get_running_loop()
        if self._server is not None:
            await loop.run_in_executor(None, self._server.stop)
        self._stopping.set()
        if self._pump_thread is not None:
            await loop.run_in_executor(None, self._pump_thread.join)
        if self._proc is not None:
            await loop.run_in_executor(None, self._end_recorder)

    def _end_recorder(self) -> None:
        # the end marker, unless the recorder is gone (then nothing reads the queue)
        proc, to_recorder = _started(self._proc, "the recorder"), _started(self._queue, "the recorder's queue")
        while proc.is_alive():
            try:
                to_recorder.put(None, timeout=1.0)
                break
            except queue_mod.Full:
                continue
        proc.join(timeout=120)
        if proc.is_alive():
            proc.kill()
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

    def _render_metrics(self) -> bytes:
        """GET on the metrics path (called by the data path, on one of its blocking threads): what
        has ended is handed off first, so the counts are current."""
        if not self._stopping.is_set():
            self._hand_off()
        return self._metrics()

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
                for reason in ("queue_full", "backlog", "session_shed", "redaction_failed", "recorder_error", "lock"):
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
                yield GaugeMetricFamily(
                    "replay_capture_record_capacity",
                    "Records a second the recorder builds while busy (token counts, hashes, redaction): "
                    "what it keeps up with; 0 until it has built any.",
                    value=record_capacity(c) or 0.0,
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
                # the data path's backlog, the pump's hands and the recorder's queue together:
                # queued by the data path, not yet taken by the recorder (none once it is gone)
                queued = proxy._proxy_counts().get("queued", 0)
                depth = 0 if proxy._recorder_gone else max(0, queued - c.get("requests_recorder_saw", 0))
                yield GaugeMetricFamily("replay_capture_queue_depth", "Exchanges waiting for the recorder.", value=depth)
                yield CounterMetricFamily(
                    "replay_capture_upstream_connections",
                    "Connections opened to the upstream (kept alive and reused).",
                    value=proxy._proxy_counts().get("upstream_connections", 0),
                )
                yield GaugeMetricFamily(
                    "replay_capture_recorder_up",
                    "1 while the recorder process runs.",
                    value=1 if proxy._proc is not None and proxy._proc.is_alive() else 0,
                )

        registry = CollectorRegistry()
        registry.register(_Collector())
        return generate_latest(registry)


def run_capture(cfg: CaptureConfig, on_ready=None) -> dict[str, int]:
    """Run the proxy until SIGINT / SIGTERM; return the final counters. ``on_ready(proxy)`` is
    called once it listens."""

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

    return asyncio.run(main())
