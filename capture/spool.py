"""A capture folder: the append-only spool of recorded rows and its Parquet segments.

Owns :class:`Spool`, :func:`open_folder`, :func:`recover` and :func:`write_counts`.

Layout of ``DIR`` (``replay capture --out DIR``):

- ``capture.json``: what every segment shares (``t0_unix_us``, tokenizer, block size, the
  redaction policy and key fingerprint, the upstream, the sample share), written at the first
  start; a restart into the same folder must agree with it.
- ``spool-NNNNNN.jsonl``: rows already redacted (never raw unless ``--no-redact``), one JSON
  object a line, appended and fsynced in small batches; ``{"counts": {...}}`` lines carry what
  was dropped or not sampled since the previous line of counts; ``{"exempt": "..."}`` lines the
  surrogates of the rows appended since the previous one (:class:`redact.lock.Exempt`, digests only),
  which the segment stores as its ``lock_exempt`` (so ``replay audit`` tells them from raw
  values, a recovered segment too).
- ``segment-NNNNNN.parquet``: spool NNNNNN rolled into a Trace file (rows sorted by arrival),
  written beside it and renamed into place (:class:`replay.trace.TraceWriter`); the spool is
  deleted only after the rename. The folder reads as one Trace (:func:`replay.trace.read_trace`).

Recovery (every start, :func:`recover`): a spool whose segment exists is deleted (the crash came
between the rename and the delete); any other spool is rolled into its segment, a torn last line
(the crash came mid-write) ignored; a spool with counts but no rows hands its counts on to the
next spool. Hidden temporary files of an unfinished roll are removed.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from replay.errors import ConfigError, TraceError
from replay.trace import SCHEMA, TraceMeta, TraceWriter

__all__ = ["Spool", "open_folder", "recover", "write_counts", "CAPTURE_FILE", "SOURCE_FORMAT"]

CAPTURE_FILE = "capture.json"
SOURCE_FORMAT = "capture"
_SPOOL = re.compile(r"^spool-(\d{6,})\.jsonl$")
_SEGMENT = re.compile(r"^segment-(\d{6,})\.parquet$")
# the capture.json fields a restart must agree with
_FIXED = ("tokenizer", "block_size_tokens", "redaction_policy", "redaction_key")


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_folder(folder: Path, settings: dict) -> dict:
    """Create ``folder`` (or reopen it) and return its ``capture.json`` (``settings`` plus
    ``t0_unix_us``, kept from the first start); a restart whose settings differ is a
    :class:`ConfigError` naming the field."""
    import time

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CAPTURE_FILE
    if path.exists():
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path}: unreadable ({e})") from None
        for name in _FIXED:
            if saved.get(name) != settings.get(name):
                raise ConfigError(
                    f"--out {folder}: this capture folder has {name}="
                    f"{saved.get(name)!r}, this run {settings.get(name)!r} "
                    "(use a new folder)"
                )
        return {**settings, "t0_unix_us": saved["t0_unix_us"]}
    info = {**settings, "t0_unix_us": time.time_ns() // 1000}
    tmp = path.with_name(f".{CAPTURE_FILE}.tmp")
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, path)
    _fsync_dir(folder)
    return info


def _numbered(folder: Path, pattern: re.Pattern) -> dict[int, Path]:
    out = {}
    for p in folder.iterdir():
        m = pattern.match(p.name)
        if m:
            out[int(m.group(1))] = p
    return out


# rows a roll reads and writes at a time, one Parquet row group each: the roll holds this many
# rows in memory however many the spool has (a spool of 100,000 rows of long prompts is gigabytes)
ROLL_CHUNK_ROWS = 2_000

# where a row line (``DataFrame.write_ndjson``, columns in SCHEMA order) has its arrival
_ARRIVAL = re.compile(rb'"arrival_us":(-?\d+)[,}]')


@dataclass
class _Spooled:
    """A spool read once, its rows left on disk: where each row's line is, in arrival order."""

    rows: list[tuple[int, int, int, int]]  # (arrival_us, line number, offset, length), sorted
    counts: Counter
    exempt: list[str]


def _scan_spool(path: Path) -> _Spooled:
    """Read ``path`` a line at a time: the place and arrival of each row, the counts and the
    surrogates; a torn last line (a crash mid-write) is ignored."""
    rows: list[tuple[int, int, int, int]] = []
    counts: Counter = Counter()
    exempt: list[str] = []
    with path.open("rb") as f:
        offset = 0
        for n, line in enumerate(f):
            at, offset = offset, offset + len(line)
            text = line.strip()
            if not text:
                continue
            torn = not line.endswith(b"\n")
            m = None if torn else _ARRIVAL.search(text)
            if m is not None and text.startswith(b'{"request_id"'):
                rows.append((int(m.group(1)), n, at, len(line)))
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                if torn:  # the torn last line of a crash mid-write
                    break
                raise TraceError(f"{path.name}: line {n + 1}: not valid JSON") from None
            if "counts" in obj:
                counts.update(obj["counts"])
            elif "exempt" in obj:
                exempt.append(obj["exempt"])
            elif isinstance(obj.get("arrival_us"), int):
                rows.append((obj["arrival_us"], n, at, len(line)))
            else:
                raise TraceError(f"{path.name}: line {n + 1}: a row without arrival_us")
    rows.sort()  # by arrival, ties in spool order
    return _Spooled(rows, counts, exempt)


def _write_segment(path: Path, spool: Path, spooled: _Spooled, meta: TraceMeta, report_base: dict) -> None:
    """The segment of ``spool``: its rows in arrival order, ``ROLL_CHUNK_ROWS`` at a time."""
    report = {**report_base, **{k: int(v) for k, v in sorted(spooled.counts.items())}}
    lock_exempt = ""
    if spooled.exempt:
        from redact.lock import Exempt

        lock_exempt = Exempt.union_meta(spooled.exempt)
    with spool.open("rb") as f, TraceWriter(path, meta, segment=True) as writer:
        for start in range(0, len(spooled.rows), ROLL_CHUNK_ROWS):
            chunk = []
            for _, n, offset, length in spooled.rows[start : start + ROLL_CHUNK_ROWS]:
                f.seek(offset)
                try:
                    chunk.append(json.loads(f.read(length)))
                except ValueError:
                    raise TraceError(f"{spool.name}: line {n + 1}: not valid JSON") from None
            writer.write(pl.DataFrame(chunk, schema=SCHEMA))
        writer.close(replace(meta, capture_report=json.dumps(report, separators=(",", ":")), lock_exempt=lock_exempt))


def recover(folder: Path, meta: TraceMeta, report_base: dict) -> tuple[int, Counter, int]:
    """Roll what a crash left in ``folder`` (see the module docstring). Returns the next spool
    number, the counts to carry into it, and the rows recovered."""
    for p in folder.glob(".segment-*.tmp"):
        p.unlink(missing_ok=True)
    segments = _numbered(folder, _SEGMENT)
    spools = _numbered(folder, _SPOOL)
    carry: Counter = Counter()
    recovered = 0
    for n, path in sorted(spools.items()):
        if n not in segments:
            spooled = _scan_spool(path)
            spooled.counts.update(carry)
            carry = Counter()
            if spooled.rows:
                _write_segment(folder / f"segment-{n:06d}.parquet", path, spooled, meta, report_base)
                recovered += len(spooled.rows)
            else:
                carry = spooled.counts
        path.unlink()
    _fsync_dir(folder)
    last = max([*segments, *spools], default=0)
    return last + 1, carry, recovered


def write_counts(folder: Path, counts: dict) -> Path:
    """A spool holding only ``counts``, numbered after every spool and segment in ``folder``: what
    was dropped when no recorder was there to write it (the proxy's records lost with a recorder
    that died). The next start's :func:`recover` carries the counts into its trace."""
    numbers = [*_numbered(folder, _SEGMENT), *_numbered(folder, _SPOOL)]
    path = folder / f"spool-{max(numbers, default=0) + 1:06d}.jsonl"
    with path.open("xb") as f:  # a crash mid-write leaves a torn line: ignored, as any
        f.write(json.dumps({"counts": counts}).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(folder)
    return path


class Spool:
    """The append-only spool of one capture run: :meth:`append` rows and counts, :meth:`sync`
    (flush + fsync) after each small batch, :meth:`roll` into a segment when due."""

    def __init__(
        self, folder: Path, meta: TraceMeta, report_base: dict, number: int, carry: Counter | None = None, redaction_report=None
    ):
        self.folder = folder
        self.meta = meta
        # () -> the redaction report so far (JSON), written in each segment's metadata
        self.redaction_report = redaction_report
        self.report_base = report_base
        self.number = number
        self.rows = 0
        self.segments_written = 0
        self._counts: Counter = Counter(carry or {})
        self._open()

    def _open(self) -> None:
        self.path = self.folder / f"spool-{self.number:06d}.jsonl"
        self._f = self.path.open("ab")
        _fsync_dir(self.folder)
        if self._counts:
            self.append_counts(self._counts)

    def append_rows(self, df: pl.DataFrame) -> None:
        """Append ``df``'s rows (already redacted) as JSON lines (not yet durable: :meth:`sync`)."""
        if df.height:
            self._f.write(df.write_ndjson().encode())
            self.rows += df.height

    def append_counts(self, counts: Counter) -> None:
        if counts:
            self._f.write(json.dumps({"counts": dict(counts)}).encode() + b"\n")

    def append_exempt(self, exempt: str) -> None:
        """Append the surrogates (``Exempt.to_meta()``) of the rows appended since the last call."""
        if exempt:
            self._f.write(json.dumps({"exempt": exempt}).encode() + b"\n")

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def roll(self) -> Path | None:
        """Turn the spool into its segment (nothing when it has no rows yet) and start the next.
        A roll that fails (disk full, an unwritable folder) raises and changes nothing: the spool
        stays open with its rows, to be rolled again (or recovered at the next start)."""
        if self.rows == 0:
            return None
        self.sync()
        spooled = _scan_spool(self.path)
        seg = self.folder / f"segment-{self.number:06d}.parquet"
        meta = self.meta
        if self.redaction_report is not None:
            meta = replace(meta, redaction_report=self.redaction_report())
        _write_segment(seg, self.path, spooled, meta, self.report_base)
        # the segment holds the spool's rows now (a crash from here on: recover deletes the spool)
        self._f.close()
        self.segments_written += 1
        self.number += 1
        self.rows = 0
        self._counts = Counter()
        try:
            self.path.unlink()
            _fsync_dir(self.folder)
        finally:
            self._open()
        return seg

    def close(self, roll: bool = True) -> None:
        """Roll what is left (unless ``roll`` is False: the rows stay in the spool for the next
        start's recovery); remove an empty spool (its counts go into the last segment's
        neighbour at the next start: they stay in the spool then)."""
        if roll:
            self.roll()
        self.sync()
        self._f.close()
        if self.path.stat().st_size == 0:
            self.path.unlink()
