"""The recorder process of ``replay capture``, and the capture's configuration.

Owns :class:`CaptureConfig`, :data:`COUNTERS` and :func:`run_recorder`. The proxy
(:mod:`capture.proxy`) hands ended exchanges to :func:`run_recorder` over a bounded queue; the
recorder builds the rows (:class:`capture.record.RowBuilder`: sessions, sampling, raw-text tokens
and hashes, redaction in worker processes), appends them to the spool, fsyncs after each small
batch and rolls the spool into Parquet segments (:mod:`capture.spool`). A roll that fails (disk
full, an unwritable folder) is counted (``segment_roll_failed``) and tried again a
``segment_seconds`` later, the rows kept in the spool meanwhile. It runs at a lower CPU priority
than the proxy, holds the folder's lock for its whole life, and stops when the proxy sends its
end marker or dies.
"""

from __future__ import annotations

import json
import os
import queue as queue_mod
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redact.lock import LOCK_TYPES
from replay.blocks import BLOCK_SIZE

__all__ = [
    "CaptureConfig",
    "COUNTERS",
    "PROXY_COUNTS",
    "REDACT_PROCESSES",
    "record_capacity",
    "run_recorder",
    "RECORDER_NICE",
    "LOCK_FILE",
    "yield_to_traffic",
]

# the shared counters (one writer each: the proxy writes PROXY_COUNTS, the recorder the others)
# (segment_roll_failed: rolls of the spool into a segment that failed; their rows stay in the
# spool, rolled at a later roll or recovered at the next start: nothing is lost)
# (dropped_lock: records the second lock kept out, lock_<TYPE>: of those, the ones holding TYPE)
COUNTERS = (
    "dropped_queue_full",
    "dropped_backlog",
    "dropped_session_shed",
    "recorded",
    "dropped_redaction_failed",
    "dropped_recorder_error",
    "not_sampled",
    "segments_written",
    "requests_recorder_saw",
    "segment_roll_failed",
    "dropped_lock",
    *(f"lock_{t}" for t in LOCK_TYPES),
    "recorder_busy_us",
)
# the counters the proxy publishes (its data path's drops: the backlog full in exchanges or in
# bytes, and the later requests of a session one of whose requests was dropped)
PROXY_COUNTS = ("dropped_queue_full", "dropped_backlog", "dropped_session_shed")
# the counters the recorder publishes from its own counts
# (recorder_busy_us: the time it spent building rows, redaction included: with requests, its
# capacity; see record_capacity)
RECORDER_COUNTS = (
    "recorded",
    "recorder_busy_us",
    "dropped_redaction_failed",
    "dropped_recorder_error",
    "not_sampled",
    "segment_roll_failed",
    "dropped_lock",
    *(f"lock_{t}" for t in LOCK_TYPES),
)


# redaction worker processes unless told: the machine's cores less the one the traffic needs
REDACT_PROCESSES = max(1, (os.cpu_count() or 2) - 1)


def record_capacity(counts: dict) -> float | None:
    """Records a second the recorder builds while busy (token counts, hashes, redaction and all):
    what it keeps up with. None until it has built any."""
    busy_s = counts.get("recorder_busy_us", 0) / 1e6
    seen = counts.get("requests_recorder_saw", counts.get("requests", 0))
    return seen / busy_s if busy_s > 0 and seen else None


@dataclass
class CaptureConfig:
    """What ``replay capture`` runs with (see ``replay capture --help``)."""

    upstream: str
    out: Path
    host: str = "127.0.0.1"
    port: int = 8080
    sample: float = 1.0
    session_header: str = "X-Session-Id"
    tokenizer: str = "gpt2"
    block_size: int = BLOCK_SIZE
    key: Any = None  # a redact.key.RedactionKey; None: --no-redact
    redact_processes: int = field(default_factory=lambda: REDACT_PROCESSES)
    # analyse on a Ray cluster (redact.ray_pool: "local" starts one), redact_processes actors
    # there, in place of worker processes
    redact_ray: str | None = None
    redact_timeout_s: float = 60.0
    queue_size: int = 10_000  # exchanges waiting for the recorder before drops begin
    backlog_mb: int = 256  # ... and the megabytes they may hold (bodies and answers)
    batch_size: int = 256  # exchanges the recorder takes at once (then fsync)
    # exchanges are handed to the recorder in lists of up to this many (one queue put per list,
    # not per request)
    hand_off: int = 32
    segment_rows: int = 100_000
    segment_seconds: float = 60.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0  # no byte from the upstream for this long: timeout
    metrics_path: str = "/metrics"
    tls_cert: Path | None = None  # serve TLS with this certificate chain (PEM) ...
    tls_key: Path | None = None  # ... and its private key
    ca_cert: Path | None = None  # an https upstream's certificate is checked against these alone
    insecure: bool = False  # an https upstream's certificate is not checked
    threads: int = 0  # the data path's worker threads (0: one per CPU)
    extra_recognizers: tuple = field(default_factory=tuple)  # library use: more Presidio recognizers

    def settings(self) -> dict:
        """What the capture folder records (and a restart must agree with)."""
        return {
            "upstream": self.upstream,
            "sample": self.sample,
            "tokenizer": self.tokenizer,
            "block_size_tokens": self.block_size,
            "redaction_policy": "redacted" if self.key is not None else "none",
            "redaction_key": self.key.fingerprint if self.key is not None else "",
            "session_header": self.session_header,
        }


# the recorder's CPU priority below the proxy's (nice increment), where SCHED_IDLE is not to be had
RECORDER_NICE = 10


def yield_to_traffic(tid: int = 0) -> None:
    """Put thread ``tid`` (0: the calling process's main thread; what it starts inherits it) under
    SCHED_IDLE: it runs on CPU time nothing else wants, and any thread of the data path that
    wakes takes its CPU at once. Where that policy is not available, ``RECORDER_NICE``."""
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        if tid == 0:
            os.nice(RECORDER_NICE)


# held (flock) by the recorder writing into a capture folder: one capture a folder
LOCK_FILE = ".lock"


def run_recorder(cfg: CaptureConfig, info: dict, q: Any, shared: Any, ready: Any) -> None:
    """Record exchanges from ``q`` until a None arrives or the proxy is gone (runs in its own
    process)."""
    # the proxy decides when the recorder stops (Ctrl-C and a service manager's SIGTERM reach the
    # whole process group: the recorder and its redaction workers, which inherit this, finish the
    # work the proxy hands them first); it stops on its own if the proxy dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # traffic first: the recorder and its redaction workers (which inherit it) yield the CPU to
    # the proxy
    yield_to_traffic()
    from capture.record import Exchange, RowBuilder
    from capture.spool import SOURCE_FORMAT, Spool, recover
    from replay.trace import TraceMeta

    parent = os.getppid()
    import fcntl

    lock = open(cfg.out / LOCK_FILE, "a")  # noqa: SIM115 (held for the recorder's whole life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        ready.put({"error": f"--out {cfg.out}: another capture is recording into this folder"})
        return
    redactor = None
    if cfg.key is not None:
        from redact.pipeline import Redactor

        redactor = Redactor(
            cfg.key,
            cfg.tokenizer,
            processes=cfg.redact_processes,
            timeout_s=cfg.redact_timeout_s,
            extra_recognizers=cfg.extra_recognizers,
            ray_address=cfg.redact_ray,
        )
        redactor._get_pool()  # the workers load Presidio before the proxy says it is ready
    meta = TraceMeta(
        t0_unix_us=info["t0_unix_us"],
        source_format=SOURCE_FORMAT,
        tokenizer=cfg.tokenizer,
        block_size_tokens=cfg.block_size,
        redaction_policy=info["redaction_policy"],
        redaction_key=info["redaction_key"],
    )
    base = {"upstream": cfg.upstream, "sample": cfg.sample, "no_redact": cfg.key is None}
    number, carry, recovered = recover(cfg.out, meta, base)
    builder = RowBuilder(
        info["t0_unix_us"], tokenizer=cfg.tokenizer, block_size=cfg.block_size, sample=cfg.sample, redactor=redactor
    )
    spool = Spool(
        cfg.out,
        meta,
        base,
        number,
        carry,
        redaction_report=None
        if (accounts := builder.accounts) is None
        else (lambda: json.dumps(accounts.report.to_dict(), separators=(",", ":"))),
    )
    idx = {name: i for i, name in enumerate(COUNTERS)}
    reported: Counter = Counter()
    seen_proxy = dict.fromkeys(PROXY_COUNTS, 0)  # the proxy's drops as last written
    saw = 0  # exchanges taken off the queue (each is recorded, dropped or not sampled)
    last_roll = time.monotonic()
    rolled = True  # the last roll succeeded (or none was tried yet)

    def report(force: bool) -> None:
        """Append the counts changed since the last report to the spool (fsynced; ``force``:
        fsync even when none changed) and publish the counters to the proxy."""
        delta = Counter({k: v - reported[k] for k, v in builder.counts.items() if v != reported[k]})
        for name in PROXY_COUNTS:
            now = shared[idx[name]]
            if now != seen_proxy[name]:
                delta[name] = now - seen_proxy[name]
                seen_proxy[name] = now
        if delta or force:
            spool.append_counts(delta)
            spool.sync()
            reported.update({k: v for k, v in delta.items() if k not in PROXY_COUNTS})
        for name in RECORDER_COUNTS:
            shared[idx[name]] = builder.counts[name]
        shared[idx["requests_recorder_saw"]] = saw
        shared[idx["segments_written"]] = spool.segments_written

    def roll() -> bool:
        """Roll the spool; a failure is counted and leaves the rows in the spool."""
        try:
            spool.roll()
            return True
        except Exception as e:  # noqa: BLE001 (never fatal: the rows stay in the spool)
            builder.counts["segment_roll_failed"] += 1
            print(
                f"capture: recorder: rolling {spool.path.name} failed (its rows are kept in it "
                f"and rolled later): {type(e).__name__}: {e}",
                file=sys.stderr,
                flush=True,
            )
            return False

    ready.put({"recovered_rows": recovered})
    stop = False
    while not stop:
        batch: list[Exchange] = []
        try:
            item = q.get(timeout=0.2)
            while item is not None:
                batch.extend(item)
                if len(batch) >= cfg.batch_size:
                    break
                item = q.get_nowait()
            stop = item is None
        except queue_mod.Empty:
            pass
        if os.getppid() != parent:  # the proxy died: keep what is here and stop
            stop = True
        if batch:
            saw += len(batch)
            began = time.perf_counter()
            try:
                df = builder.build(batch)
                # the surrogates first, then the rows that hold them: a crash between the two
                # leaves no row whose surrogates the segment cannot name
                if builder.accounts is not None:
                    spool.append_exempt(builder.accounts.take_exempt().to_meta())
                if df is not None:
                    spool.append_rows(df)
            except Exception as e:  # noqa: BLE001 (never raw, never fatal: count and go on)
                builder.counts["dropped_recorder_error"] += len(batch)
                print(f"capture: recorder: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            builder.counts["recorder_busy_us"] += int((time.perf_counter() - began) * 1e6)
        report(force=bool(batch))
        # a roll is due after segment_seconds or segment_rows; one that failed is tried again
        # segment_seconds later, however many rows wait
        since = time.monotonic() - last_roll
        if spool.rows and (since >= cfg.segment_seconds or (rolled and spool.rows >= cfg.segment_rows)):
            rolled = roll()
            last_roll = time.monotonic()
            report(force=False)
    # the last roll; if it fails, the rows and the count of the failure stay in the spool, and
    # the next start recovers them
    roll()
    report(force=False)
    spool.close(roll=False)
    if redactor is not None:
        redactor.close()
