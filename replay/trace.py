"""The Trace: THE one definition of the request-trace file (schema version 3; reads 1 and 2).

Owns :data:`SCHEMA`, :data:`REQUIRED_COLUMNS`, :class:`TraceMeta`, :class:`Trace`,
:func:`validate` and :func:`read_trace`. A trace is one row per request in a Parquet file (zstd)
whose key-value metadata carries the schema version and :class:`TraceMeta`. Times are integer
microseconds since ``t0_unix_us``. Readers reject a bad file with a one-line
:class:`~replay.errors.TraceError` naming the file and the column; rows are counted from 0.

The request bodies are most of a trace's bytes (a few KB a request: a million-request capture
is gigabytes of them). ``read_trace(path, bodies=False)`` keeps every other column in memory and
leaves the bodies in the file, checked as it reads them in row batches; :meth:`Trace.body_batches`
then yields them in order, a batch at a time, whichever way the trace was read.

A row imported from a token-only trace (Azure, BurstGPT, Mooncake, ...) has a null ``body``: its
text is synthesized, so it is not stored. The metadata's ``synthesis`` names the rule, and
``body_batches(..., synthesize=True)`` builds such bodies as it yields them (:mod:`replay.synth`).
Schema 2 added the null body, the ``hash_ids`` column and the ``synthesis`` metadata; a version 1
file reads as a version 2 trace with every body present.

A capture folder (``replay capture --out DIR``: Parquet segments ``segment-*.parquet``, one per
roll of the recorder's spool) is one Trace: :func:`read_trace` and :func:`read_meta` accept the
folder, concatenate its segments and sort the rows by arrival (a segment holds the requests that
*ended* in its window, so neighbouring segments overlap in arrival time). With ``bodies=False``
the bodies stay in the segments and :meth:`Trace.body_batches` merges them in arrival order,
holding only the segments the current batch reaches into. A folder with no segment is not a
trace (a trace has rows); the error names the counts its spools hold, so a capture that recorded
nothing (every record failed redaction, or its recorder died first) still says what it dropped.

Schema 2 also added what a live stream showed, for captured traffic (nullable; null elsewhere
and in version-1 files): ``ttfb_us``, ``chunk_us``, ``finish_reason``, ``outcome``, and the
``capture_report`` metadata.

Schema 3 says what waits for what (agentic traffic): ``depends_on`` (the request ids that must all
have ended before a request is sent; empty in older files), ``wait_us`` (the recorded time from the
last of them ending to its arrival: tool or think time), ``parent_session_id`` (a subagent's session
names the session that spawned it) and ``agent`` (a role name). The rules on them (each dependency
an earlier row of the trace: no dangling id, no cycle) are :mod:`replay.dag`'s. ``tool_calls``
(nullable, filled with nulls where a file lacks it) is the live answer's tool calls: each one's
argument tokens (empty: a text answer), which a replay asks the embedded engine to answer with
(:mod:`replay.plan`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Set as AbstractSet
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from replay import dag
from replay.blocks import BLOCK_SIZE, HASH_ALGO
from replay.errors import TraceError

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "BLOCK_SIZE",
    "SCHEMA_VERSION",
    "SCHEMA",
    "READ_VERSIONS",
    "REQUIRED_COLUMNS",
    "NOT_NULL_COLUMNS",
    "APIS",
    "VERSION_KEY",
    "TraceMeta",
    "Trace",
    "TraceWriter",
    "validate",
    "batch_frame",
    "read_meta",
    "read_trace",
    "SEGMENT_GLOB",
    "OUTCOMES",
]

SCHEMA_VERSION = 3
# versions this build reads (a version 1 file is a version 2 trace whose bodies are all present;
# a version 1 or 2 file is a version 3 trace without dependencies)
READ_VERSIONS = (1, 2, 3)
# a capture folder's Parquet segments, and its spools not yet rolled (written by capture.spool)
SEGMENT_GLOB = "segment-*.parquet"
SPOOL_GLOB = "spool-*.jsonl"
# how a captured request ended (column 'outcome')
OUTCOMES = frozenset({"completed", "upstream_error", "client_disconnected", "timeout"})
VERSION_KEY = "faithful_replay.schema_version"
APIS = frozenset({"chat", "completions", "responses", "embeddings"})

SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "session_id": pl.String(),
    "parent_request_id": pl.String(),
    "turn": pl.Int32(),
    "api": pl.String(),
    "model": pl.String(),
    "arrival_us": pl.Int64(),
    "body": pl.String(),
    "input_tokens": pl.Int32(),
    "output_tokens": pl.Int32(),
    "max_tokens": pl.Int32(),
    "block_hashes": pl.List(pl.UInt64()),
    "cached_tokens": pl.Int32(),
    "status": pl.Int32(),
    "ttft_us": pl.Int64(),
    "e2e_us": pl.Int64(),
    # the answer live traffic got (redacted like the body), where the source recorded it
    "response": pl.String(),
    # schema 2: what a live stream showed (captured traffic; null elsewhere)
    "ttfb_us": pl.Int64(),  # arrival -> the response's first byte
    "chunk_us": pl.List(pl.UInt32()),  # each streamed chunk's arrival, µs after the first token
    "finish_reason": pl.String(),
    "outcome": pl.String(),  # one of OUTCOMES
    # a null body built from blocks (Mooncake): the source's id of each block of
    # ``synthesis.block_tokens`` prompt tokens, the partial last block included (replay.synth)
    "hash_ids": pl.List(pl.UInt64()),
    # schema 3: what waits for what (replay.dag): the request ids that must all have ended before
    # this one is sent (earlier rows; empty: none), the recorded time from the last of them
    # ending to this arrival (tool or think time), the session that spawned this one (a
    # subagent's), and the agent's role name where the source has one
    "depends_on": pl.List(pl.String()),
    "wait_us": pl.Int64(),
    "parent_session_id": pl.String(),
    "agent": pl.String(),
    # the live answer's tool calls: the argument tokens of each, in order (empty: a text
    # answer; null: not known); a replay asks the embedded engine for the same calls
    "tool_calls": pl.List(pl.Int32()),
}
# A frame or file must have these; the other columns may be absent and are then filled
# (nulls; turn 0; no block hashes).
REQUIRED_COLUMNS: tuple[str, ...] = ("request_id", "api", "arrival_us", "body", "input_tokens")
# 'body' may be null only where the metadata has a 'synthesis' rule (see replay.synth)
NOT_NULL_COLUMNS: tuple[str, ...] = (
    "request_id",
    "turn",
    "api",
    "arrival_us",
    "input_tokens",
    "block_hashes",
)
_NON_NEGATIVE = (
    "turn",
    "arrival_us",
    "input_tokens",
    "output_tokens",
    "max_tokens",
    "cached_tokens",
    "ttft_us",
    "e2e_us",
    "ttfb_us",
    "wait_us",
)


_OPTIONAL_META = frozenset({"redaction_key", "redaction_report", "import_report", "synthesis", "capture_report", "lock_exempt"})


@dataclass(frozen=True)
class TraceMeta:
    """The file-level facts of a trace (stored as Parquet key-value metadata, as strings)."""

    t0_unix_us: int = 0
    source_format: str = "unknown"
    tokenizer: str = "gpt2"
    block_size_tokens: int = BLOCK_SIZE
    hash_algo: str = HASH_ALGO
    # "redacted" (Presidio surrogates), "synthetic" (made-up text), "none" (raw text as it
    # arrived: warned about wherever it is used) or "unspecified"
    redaction_policy: str = "unspecified"
    # optional (older files lack them): the redaction key's fingerprint (never the key), the
    # redaction report and the import report (JSON objects; "" when there is none)
    redaction_key: str = ""
    redaction_report: str = ""
    import_report: str = ""
    # how null bodies are built (a JSON object, replay.synth.Synthesis; "" when every body is
    # stored)
    synthesis: str = ""
    # a capture (schema 2): JSON object of what the recording proxy saw, dropped and sampled
    # (a capture folder's is the sum over its segments)
    capture_report: str = ""
    # the surrogates written in this file, for the second lock and `replay audit`
    # (redact.lock.Exempt.to_meta(); "" when none; a capture folder's holds its segments' sets,
    # space-separated); left out of repr, as it can be megabytes
    lock_exempt: str = field(default="", repr=False)
    schema_version: int = SCHEMA_VERSION

    @property
    def raw_text(self) -> bool:
        """True when the bodies hold text as it arrived (imported or captured with --no-redact)."""
        return self.redaction_policy == "none"

    def to_metadata(self) -> dict[str, str]:
        out = {VERSION_KEY: str(self.schema_version)}
        out.update({f.name: str(getattr(self, f.name)) for f in fields(self) if f.name != "schema_version"})
        return out

    @classmethod
    def from_metadata(cls, md: dict[str, str], source: str) -> TraceMeta:
        version = md.get(VERSION_KEY)
        if version is None:
            raise TraceError(f"{source}: not a faithful-replay trace (no '{VERSION_KEY}' metadata)")
        if version not in {str(v) for v in READ_VERSIONS}:
            raise TraceError(
                f"{source}: schema version '{version}' unknown (this build reads {', '.join(map(str, READ_VERSIONS))})"
            )
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name == "schema_version":
                continue
            raw = md.get(f.name)
            if raw is None and f.name in _OPTIONAL_META:
                continue
            if raw is None:
                raise TraceError(f"{source}: metadata '{f.name}' missing (schema {version})")
            if f.type == "int":
                try:
                    values[f.name] = int(raw)
                except ValueError:
                    raise TraceError(f"{source}: metadata '{f.name}' is {raw!r}, expected an integer") from None
            else:
                values[f.name] = raw
        meta = cls(**values)  # type: ignore[arg-type]
        if meta.block_size_tokens <= 0:
            raise TraceError(f"{source}: metadata 'block_size_tokens' must be positive")
        return meta


@dataclass(frozen=True)
class Trace:
    """A validated trace: the request rows and the file-level metadata."""

    df: pl.DataFrame
    meta: TraceMeta
    # where the bodies are when ``df`` has no 'body' column (read with bodies=False): a trace
    # file, or a capture folder (then ``body_index`` is its segments and, for each row, the
    # segment and the row in it that holds the body)
    body_file: Path | None = None
    body_index: tuple[tuple[Path, ...], Any, Any] | None = None

    def __len__(self) -> int:
        return self.df.height

    def body_batches(self, n: int, size: int, synthesize: bool = False) -> Iterator[list[str | None]]:
        """The bodies of the first ``n`` rows, in order, ``size`` at a time (from memory, or
        read from the file a row batch at a time). A null body is None, or with
        ``synthesize=True`` the body the trace's synthesis rule builds for its row."""
        builder = None
        if synthesize and self.meta.synthesis:
            from replay.synth import BodyBuilder

            builder = BodyBuilder(self.meta)
        row = 0
        for values in self._stored_body_batches(n, size):
            if builder is not None and None in values:
                rows = self.df.slice(row, len(values))
                values = builder.fill(values, rows)
            row += len(values)
            yield values

    def _stored_body_batches(self, n: int, size: int) -> Iterator[list[str | None]]:
        if self.body_file is None:
            bodies = self.df.get_column("body")
            for start in range(0, n, size):
                yield bodies.slice(start, min(size, n - start)).to_list()
            return
        if self.body_index is not None:
            yield from _segment_body_batches(self.body_index, n, size)
            return
        left = n
        with _open_parquet(self.body_file) as f:
            for batch in f.iter_batches(batch_size=size, columns=["body"]):
                if left <= 0:
                    break
                values = batch.column(0).to_pylist()[:left]
                left -= len(values)
                yield values

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Validate and write to ``path`` (Parquet, zstd), atomically; return the path."""
        if self.body_file is not None:
            raise TraceError(
                f"{Path(path).name}: this trace was read without its bodies (read_trace(..., bodies=True) to write it)"
            )
        with TraceWriter(path, self.meta) as writer:
            writer.write(self.df)
        return Path(path)


class TraceWriter:
    """Writes a trace a row group at a time, atomically: rows go to a hidden file beside
    ``path``, renamed over it by :meth:`close`; an error (or leaving the ``with`` block by an
    exception) removes it. Each batch is validated; arrival order and unique request ids are
    checked across batches too, and so are dependencies (each an earlier row), except in a
    capture ``segment``, whose dependencies may be in the folder's other segments (the folder is
    checked whole when read). ``close(meta)`` may replace the metadata (a report known only at the
    end)."""

    def __init__(self, path: str | os.PathLike[str], meta: TraceMeta, segment: bool = False):
        self.path = Path(path)
        self.meta = meta
        self.segment = segment
        self.rows = 0
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self._writer: pq.ParquetWriter | None = None
        self._last_arrival: int | None = None
        self._ids: set[str] = set()
        self._finished = False

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self._finished:
            return
        if kind is None:
            self.close()
        else:
            self.abort()

    def write(self, df: pl.DataFrame) -> None:
        import pyarrow.parquet as pq

        source = self.path.name
        # a capture segment's dependencies may be in other segments: checked when the folder is read
        df = validate(df, self.meta, source=source, whole=False, earlier=None if self.segment else self._ids, first_row=self.rows)
        arrival = df.get_column("arrival_us")
        if self._last_arrival is not None and arrival[0] < self._last_arrival:
            raise TraceError(f"{source}: column 'arrival_us' is not sorted (row {self.rows} goes back in time)")
        ids = df.get_column("request_id").to_list()
        for row, rid in enumerate(ids, self.rows):
            if rid in self._ids:
                raise TraceError(f"{source}: column 'request_id' has duplicate {rid!r} at row {row}")
            self._ids.add(rid)
        table = df.to_arrow()
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(self._tmp, table.schema, compression="zstd")
            self._writer.write_table(table)
        except OSError as e:
            self.abort()
            raise TraceError(f"{source}: cannot write ({e.strerror or e})") from e
        self._last_arrival = int(arrival[-1])
        self.rows += df.height

    def close(self, meta: TraceMeta | None = None) -> Path:
        """Finish the file with ``meta`` (default: the one given at the start); return its path."""
        source = self.path.name
        if self._finished:
            raise TraceError(f"{source}: writer already closed")
        if self._writer is None:
            raise TraceError(f"{source}: trace is empty")
        md = (meta or self.meta).to_metadata()
        try:
            self._writer.add_key_value_metadata(md)
            self._writer.close()
            self._writer = None
            os.replace(self._tmp, self.path)
            self._finished = True
        except OSError as e:
            self.abort()
            raise TraceError(f"{source}: cannot write ({e.strerror or e})") from e
        return self.path

    def abort(self) -> None:
        """Drop what was written."""
        self._finished = True
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError:
                pass
            self._writer = None
        self._tmp.unlink(missing_ok=True)


def _cast_column(s: pl.Series, want: pl.DataType, source: str) -> pl.Series:
    got = s.dtype
    if got == want:
        return s
    name = s.name
    ok = (
        got == pl.Null
        or (want.is_integer() and got.is_integer())
        or (isinstance(want, pl.List) and isinstance(got, pl.List) and (got.inner == pl.Null or got.inner.is_integer()))
    )
    if not ok:
        raise TraceError(f"{source}: column '{name}' has type {got}, expected {want}")
    try:
        return s.cast(want, strict=True)
    except pl.exceptions.InvalidOperationError:
        bad = s.cast(want, strict=False).is_null() & s.is_not_null()
        if isinstance(want, pl.List):
            bad = s.cast(want, strict=False).list.eval(pl.element().is_null()).list.any() | bad
        row = int(bad.arg_max() or 0)
        raise TraceError(f"{source}: column '{name}' value at row {row} does not fit {want}") from None


def batch_frame(batch: Any) -> pl.DataFrame:
    """A pyarrow record batch (a Parquet row group read a batch at a time) as a frame."""
    frame = pl.from_arrow(batch)
    if not isinstance(frame, pl.DataFrame):  # pl.from_arrow makes a Series of an array, never of a batch
        raise TraceError(f"a row batch read as {type(frame).__name__}, not a table")
    return frame


def validate(
    df: pl.DataFrame,
    meta: TraceMeta,
    source: str,
    bodies: bool = True,
    whole: bool = True,
    earlier: AbstractSet[str] | None = None,
    first_row: int = 0,
) -> pl.DataFrame:
    """Check ``df`` against schema 3 and return it with exact dtypes and column order.

    Integer columns of another width or signedness are cast when the values fit; absent
    optional columns are filled. With ``bodies=False`` the frame has no 'body' column (the
    bodies are checked elsewhere: :func:`check_bodies`). ``whole=False``: ``df`` is a batch of
    a trace, whose dependencies may be earlier batches' rows: those whose ids are ``earlier``
    (a batch that follows ``first_row`` rows: :class:`TraceWriter`), or any (None: left to a
    check of the whole). Raises :class:`TraceError` naming ``source`` and the column.
    """
    if meta.schema_version not in READ_VERSIONS:
        raise TraceError(
            f"{source}: schema version '{meta.schema_version}' unknown (this build reads {', '.join(map(str, READ_VERSIONS))})"
        )
    schema = SCHEMA if bodies else {k: v for k, v in SCHEMA.items() if k != "body"}
    for name in REQUIRED_COLUMNS:
        if name not in df.columns and name in schema:
            raise TraceError(f"{source}: column '{name}' missing (schema {SCHEMA_VERSION})")
    for name in df.columns:
        if name not in SCHEMA:
            raise TraceError(f"{source}: column '{name}' unknown (schema {SCHEMA_VERSION})")
    if df.height == 0:
        raise TraceError(f"{source}: trace is empty")
    cols: list[pl.Series] = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(_cast_column(df.get_column(name), dtype, source))
        elif name == "turn":
            cols.append(pl.Series(name, [0] * df.height, dtype=dtype))
        elif name in ("block_hashes", "depends_on"):
            cols.append(pl.Series(name, [[]] * df.height, dtype=dtype))
        else:
            cols.append(pl.Series(name, [None] * df.height, dtype=dtype))
    # no dependencies: an empty list (a null one, from a writer that does not know the column, too)
    out = pl.DataFrame(cols).with_columns(pl.col("depends_on").fill_null(pl.lit([], dtype=pl.List(pl.String))))
    _check_values(out, source, synthesis=bool(meta.synthesis))
    dag.check(out, source, whole=whole, earlier=earlier, first_row=first_row)
    if meta.synthesis:
        from replay.synth import Synthesis

        Synthesis.parse(meta.synthesis, source).check_rows(out, source)
    return out


def _first_row(mask: pl.Series) -> int | None:
    idx = mask.arg_true()
    return int(idx[0]) if len(idx) else None


def _check_values(df: pl.DataFrame, source: str, synthesis: bool = False) -> None:
    for name in NOT_NULL_COLUMNS:
        if name not in df.columns:
            continue
        row = _first_row(df.get_column(name).is_null())
        if row is not None:
            raise TraceError(f"{source}: column '{name}' is null at row {row}")
    row = _first_row(df.get_column("block_hashes").list.eval(pl.element().is_null()).list.any())
    if row is not None:
        raise TraceError(f"{source}: column 'block_hashes' has a null hash at row {row}")
    row = _first_row(df.get_column("tool_calls").list.eval(pl.element().is_null() | (pl.element() < 0)).list.any())
    if row is not None:
        raise TraceError(f"{source}: column 'tool_calls' has a null or negative token count at row {row}")
    for name in _NON_NEGATIVE:
        row = _first_row((df.get_column(name) < 0).fill_null(False))
        if row is not None:
            raise TraceError(f"{source}: column '{name}' is negative at row {row}")
    arrival = df.get_column("arrival_us")
    row = _first_row((arrival.diff() < 0).fill_null(False))
    if row is not None:
        raise TraceError(f"{source}: column 'arrival_us' is not sorted (row {row} goes back in time)")
    ids = df.get_column("request_id")
    row = _first_row(ids.is_duplicated())
    if row is not None:
        raise TraceError(f"{source}: column 'request_id' has duplicate {ids[row]!r} at row {row}")
    outcome = df.get_column("outcome")
    row = _first_row(~outcome.is_in(sorted(OUTCOMES)) & outcome.is_not_null())
    if row is not None:
        raise TraceError(
            f"{source}: column 'outcome' is {outcome[row]!r} at row {row}, expected one of {', '.join(sorted(OUTCOMES))}"
        )
    row = _first_row(~df.get_column("api").is_in(sorted(APIS)))
    if row is not None:
        raise TraceError(f"{source}: column 'api' is {df['api'][row]!r} at row {row}, expected one of {', '.join(sorted(APIS))}")
    if "body" in df.columns:
        _check_bodies(df.get_column("body").to_list(), 0, source, synthesis)


def _check_bodies(bodies: list[str | None], first_row: int, source: str, synthesis: bool = False) -> None:
    loads = json.loads
    for row, body in enumerate(bodies, first_row):
        if body is None:
            if synthesis:
                continue
            raise TraceError(
                f"{source}: column 'body' is null at row {row} (and the metadata has no 'synthesis' rule to build it)"
            )
        try:
            ok = isinstance(loads(body), dict)
        except ValueError:
            ok = False
        if not ok:
            raise TraceError(f"{source}: column 'body' is not a JSON object at row {row}")


# rows of bodies read (and checked) at a time from a trace file
BODY_BATCH_ROWS = 1024
# read a trace file's column chunks through a buffer of this size, not a whole row group at once
_READ_BUFFER = 1 << 20


def _open_parquet(path: Path):
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, buffer_size=_READ_BUFFER, pre_buffer=False)


def check_bodies(path: Path, source: str, synthesis: bool = False) -> None:
    """Check every body in the trace file (a JSON object; null only with a ``synthesis``
    rule), a row batch at a time."""
    import pyarrow as pa

    row = 0
    with _open_parquet(path) as f:
        if "body" not in f.schema_arrow.names:
            raise TraceError(f"{source}: column 'body' missing (schema {SCHEMA_VERSION})")
        kind = f.schema_arrow.field("body").type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            raise TraceError(f"{source}: column 'body' has type {kind}, expected String")
        for batch in f.iter_batches(batch_size=BODY_BATCH_ROWS, columns=["body"]):
            values = batch.column(0).to_pylist()
            _check_bodies(values, row, source, synthesis)
            row += len(values)


def read_meta(path: str | os.PathLike[str]) -> tuple[TraceMeta, int]:
    """The metadata and the row count of the trace at ``path`` (a file, or a capture folder),
    from the Parquet footers (the rows are not read)."""
    path = Path(path)
    if path.is_dir():
        segments = _segments(path)
        footers = [_read_footer(p) for p in segments]
        return _folder_meta(path, segments, [m for m, _ in footers]), sum(f.num_rows for _, f in footers)
    meta, footer = _read_footer(path)
    return meta, footer.num_rows


def _segments(folder: Path) -> list[Path]:
    segments = sorted(folder.glob(SEGMENT_GLOB))
    if not segments:
        counts = _spooled_counts(folder)
        said = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v)
        if said and not counts.get("recorded"):
            raise TraceError(
                f"{folder.name}: a capture folder with no trace segments "
                f"({SEGMENT_GLOB}): no request was recorded; its spool counts {said}"
            )
        raise TraceError(
            f"{folder.name}: a folder with no trace segments ({SEGMENT_GLOB}); "
            "a capture writes its first segment within seconds of its first request"
            + (f" (its spool counts {said})" if said else "")
        )
    return segments


def _spooled_counts(folder: Path) -> dict[str, int]:
    """The counts in a capture folder's spools not yet rolled (their ``{"counts": {...}}`` lines,
    written by :mod:`capture.spool`): what a capture dropped when it wrote no segment (every
    record failed redaction, or the recorder died first). Read only to say so in an error: a line
    that does not parse is passed over."""
    counts: dict[str, int] = {}
    for path in sorted(folder.glob(SPOOL_GLOB)):
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            got = obj.get("counts") if isinstance(obj, dict) else None
            for k, v in got.items() if isinstance(got, dict) else ():
                if isinstance(v, int) and not isinstance(v, bool):
                    counts[k] = counts.get(k, 0) + v
    return counts


def _sum_reports(reports: list[dict]) -> dict:
    out: dict = {}
    for rep in reports:
        for k, v in rep.items():
            if isinstance(v, dict):
                out[k] = _sum_reports([out.get(k, {}), v])
            elif isinstance(v, int) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


def _folder_meta(folder: Path, segments: list[Path], metas: list[TraceMeta]) -> TraceMeta:
    """One metadata for a capture folder: its segments must agree on everything but the
    reports and ``lock_exempt``; the capture reports' counts (integers) are summed (their other
    fields are the first segment's), the last segment's redaction report is kept, the segments'
    distinct ``lock_exempt`` sets are kept side by side, space-separated (read as one by
    :meth:`redact.lock.Exempt.from_meta`; the trace layer does not decode them)."""
    first = metas[0]
    for seg, m in zip(segments[1:], metas[1:]):
        for name in ("t0_unix_us", "tokenizer", "block_size_tokens", "hash_algo", "redaction_policy", "redaction_key"):
            if getattr(m, name) != getattr(first, name):
                raise TraceError(
                    f"{folder.name}/{seg.name}: metadata '{name}' is "
                    f"{getattr(m, name)!r}, the folder's first segment has "
                    f"{getattr(first, name)!r}"
                )
    reports = [json.loads(m.capture_report) for m in metas if m.capture_report]
    exempt = dict.fromkeys(m.lock_exempt for m in metas if m.lock_exempt)
    return replace(
        first,
        redaction_report=metas[-1].redaction_report,
        capture_report=json.dumps(_sum_reports(reports), separators=(",", ":")) if reports else "",
        lock_exempt=" ".join(exempt),
    )


def _segment_body_batches(index, n: int, size: int) -> Iterator[list[str | None]]:
    """The bodies of the first ``n`` rows of a capture folder read without them, in the folder's
    (arrival) order: each segment's bodies are loaded when a row first needs one and dropped once
    its last row is served (segments overlap only near their edges, so few are held at once)."""
    import numpy as np

    paths, seg, row = index
    seg = np.asarray(seg)[:n]
    row = np.asarray(row)[:n]
    left = np.bincount(seg, minlength=len(paths))
    held: dict[int, list[str]] = {}
    for start in range(0, n, size):
        out = []
        for s, r in zip(seg[start : start + size].tolist(), row[start : start + size].tolist()):
            bodies = held.get(s)
            if bodies is None:
                with _open_parquet(paths[s]) as f:
                    bodies = held[s] = f.read(columns=["body"]).column(0).to_pylist()
            out.append(bodies[r])
            left[s] -= 1
            if left[s] == 0:
                del held[s]
        yield out


def _read_footer(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    try:
        file_md = pq.read_metadata(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceError(f"{source}: not a Parquet file") from e
    # the file's key-value metadata (written with the schema, or at the end by TraceWriter)
    md = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (file_md.metadata or {}).items()}
    return TraceMeta.from_metadata(md, source), file_md


def read_trace(path: str | os.PathLike[str], bodies: bool = True, whole: bool = True) -> Trace:
    """Read and validate the trace at ``path``. With ``bodies=False`` the bodies stay in the file
    (checked a row batch at a time) and :meth:`Trace.body_batches` reads them when needed.
    ``whole=False``: a capture folder's segment, whose dependencies may be in other segments."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path, bodies)
    source = path.name
    meta, footer = _read_footer(path)
    schema = footer.schema.to_arrow_schema()
    try:
        if bodies:
            df = pl.read_parquet(path)
        else:
            df = pl.read_parquet(path, columns=[c for c in schema.names if c != "body"])
    except (pl.exceptions.PolarsError, OSError) as e:
        raise TraceError(f"{source}: unreadable Parquet ({str(e).splitlines()[0]})") from e
    if bodies:
        return Trace(validate(df, meta, source, whole=whole), meta)
    df = validate(df, meta, source, bodies=False, whole=whole)
    check_bodies(path, source, synthesis=bool(meta.synthesis))
    return Trace(df, meta, body_file=path)


def _read_folder(folder: Path, bodies: bool) -> Trace:
    """A capture folder as one Trace (see the module docstring)."""
    import numpy as np

    segments = _segments(folder)
    parts = [read_trace(p, bodies=bodies, whole=False) for p in segments]
    meta = _folder_meta(folder, segments, [t.meta for t in parts])
    df = pl.concat([t.df for t in parts])
    seg = np.repeat(np.arange(len(parts)), [len(t) for t in parts])
    row = np.concatenate([np.arange(len(t)) for t in parts])
    order = np.argsort(df.get_column("arrival_us").to_numpy(), kind="stable")
    df = df[order]
    source = folder.name
    if bodies:
        return Trace(validate(df, meta, source), meta)
    return Trace(
        validate(df, meta, source, bodies=False), meta, body_file=folder, body_index=(tuple(segments), seg[order], row[order])
    )
