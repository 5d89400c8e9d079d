"""``replay audit``: what in a stored trace still has a PII shape (the library side).

Owns :data:`DEEP_NOTE`, :class:`Findings`, :class:`AuditResult` and :func:`audit_trace`.

- The input is a Trace file or a capture folder, read a Parquet row batch at a time, segment after
  segment: memory is bounded by one batch (and, with ``deep``, the analyzer's cache of distinct
  texts), not by the trace. Only the metadata is checked first (:func:`replay.trace.read_meta`);
  the rows are read as stored, so traces made by older versions or other tools can be audited.
- The lock (:func:`redact.lock.scan`) runs over every string a row stores: each string of the body
  as JSON (:func:`redact.lock.strings_of`: keys, values, nested; a body that is not JSON is scanned
  as one string), the response and every other string column. A hit whose exact string is in the
  trace's ``lock_exempt`` is a surrogate this project wrote and is skipped.
- With ``deep``, the full analyzer (:class:`redact.analyzer.TextAnalyzer`) also runs over the
  prompt texts (:func:`replay.bodies.text_slots`) and the response, each distinct text once (an
  LRU of :data:`DEEP_CACHE_TEXTS` digests). Found spans whose exact string is in ``lock_exempt``
  are skipped; a text the analyzer fails on is counted as ``ANALYZER_ERROR``. Names and places a
  redaction wrote are real-looking surrogates: ``deep`` cannot tell them from raw ones unless their
  strings are in ``lock_exempt`` (:data:`DEEP_NOTE`).
- Per type, the result counts the strings with a finding and the rows holding one, and keeps the
  first :data:`ROW_IDS_KEPT` row ids (``request_id``; ``row N`` of its segment where that is
  null). Values are never kept or printed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redact.lock import Exempt, scan, strings_of
from replay.errors import TraceError
from replay.trace import SCHEMA, SEGMENT_GLOB, read_meta

__all__ = ["DEEP_NOTE", "ROW_IDS_KEPT", "DEEP_CACHE_TEXTS", "Findings", "AuditResult", "audit_trace"]

ROW_IDS_KEPT = 1000
DEEP_CACHE_TEXTS = 200_000
BATCH_ROWS = 1024
DEEP_NOTE = (
    "names and places a redaction wrote are surrogates that --deep cannot tell from raw ones "
    "unless their strings are in the trace's lock_exempt"
)
# the string columns of a trace, the body first
_STRING_COLUMNS = ("body", *(name for name, kind in SCHEMA.items() if kind == SCHEMA["body"] and name != "body"))


@dataclass
class Findings:
    """One type's findings: strings with it, rows with it, the first row ids."""

    strings: int = 0
    rows: int = 0
    row_ids: list[str] = field(default_factory=list)

    def add(self, row_id: str, strings: int) -> None:
        self.strings += strings
        self.rows += 1
        if len(self.row_ids) < ROW_IDS_KEPT:
            self.row_ids.append(row_id)


@dataclass
class AuditResult:
    """What :func:`audit_trace` found (never a value)."""

    trace: str
    rows: int
    strings: int  # strings the lock scanned
    redaction_policy: str
    exempt: int  # surrogate digests in the trace's lock_exempt
    lock: dict[str, Findings]
    deep: dict[str, Findings] | None = None  # None: not run
    texts_analysed: int = 0

    @property
    def clean(self) -> bool:
        return not self.lock and not self.deep

    def to_dict(self) -> dict[str, Any]:
        def part(found: dict[str, Findings]) -> dict[str, Any]:
            return {t: {"strings": f.strings, "rows": f.rows, "row_ids": f.row_ids} for t, f in sorted(found.items())}

        out: dict[str, Any] = {
            "trace": self.trace,
            "rows": self.rows,
            "strings_scanned": self.strings,
            "redaction_policy": self.redaction_policy,
            "lock_exempt": self.exempt,
            "clean": self.clean,
            "lock": part(self.lock),
        }
        if self.deep is not None:
            out["deep"] = part(self.deep)
            out["texts_analysed"] = self.texts_analysed
            out["deep_note"] = DEEP_NOTE
        return out

    def summary(self, ids_shown: int = 10) -> str:
        lines = [
            f"audit of {self.trace}: {self.rows} rows, {self.strings} strings scanned "
            f"(redaction_policy={self.redaction_policy}, lock_exempt: {self.exempt} surrogate digests)"
        ]
        parts = [("lock (shape scan)", self.lock)]
        if self.deep is not None:
            parts.append((f"analyzer (--deep, {self.texts_analysed} distinct texts)", self.deep))
        for title, found in parts:
            if not found:
                lines.append(f"{title}: nothing found")
                continue
            lines.append(f"{title}: strings with a PII shape, per type")
            for t, f in sorted(found.items()):
                ids = ", ".join(f.row_ids[:ids_shown])
                more = f" and {f.rows - ids_shown} more" if f.rows > ids_shown else ""
                lines.append(f"  {t:<16} {f.strings:>7} strings in {f.rows} rows: {ids}{more}")
        if self.deep is not None:
            lines.append(f"note: {DEEP_NOTE}")
        lines.append(
            "clean: no string has a PII shape" if self.clean else "found: strings with a PII shape remain (values not shown)"
        )
        return "\n".join(lines)


def _exempt_of(meta, source: str) -> Exempt:
    try:
        return Exempt.from_meta(meta.lock_exempt)
    except ValueError as e:
        raise TraceError(f"{source}: metadata 'lock_exempt': {e}") from None


def _batches(path: Path) -> Iterator[tuple[str, dict[str, list[Any]]]]:
    """(source, {column: values}) a row batch at a time over a trace file or the segments of a
    capture folder: the request ids and every string column the file has."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(path.glob(SEGMENT_GLOB)) if path.is_dir() else [path]
    for file in files:
        source = f"{path.name}/{file.name}" if path.is_dir() else file.name
        try:
            with pq.ParquetFile(file, buffer_size=1 << 20, pre_buffer=False) as f:
                names = set(f.schema_arrow.names)
                if "request_id" not in names:
                    raise TraceError(f"{source}: column 'request_id' missing")
                columns = [c for c in _STRING_COLUMNS if c in names]
                for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                    yield source, {c: batch.column(i).to_pylist() for i, c in enumerate(columns)}
        except (pa.ArrowException, OSError) as e:
            raise TraceError(f"{source}: unreadable Parquet ({str(e).splitlines()[0]})") from None


def _body_object(body: Any) -> Any:
    """A body's JSON value, or None when it is not JSON (then it is scanned as one string)."""
    if not isinstance(body, str):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _row_strings(columns: dict[str, list[Any]], bodies: list[Any], i: int) -> Iterator[str]:
    """Every string row ``i`` stores: the body's JSON strings (the body itself where it is not
    JSON), then the other string columns."""
    for name, values in columns.items():
        v = values[i]
        if not isinstance(v, str):
            continue
        if name == "body" and bodies[i] is not None:
            yield from strings_of(bodies[i])
        else:
            yield v


def _prompt_texts(columns: dict[str, list[Any]], bodies: list[Any], i: int) -> list[str]:
    """The texts ``deep`` analyses in row ``i``: its prompt texts and its response."""
    from replay.bodies import text_slots

    texts: list[str] = []
    raw = columns.get("body")
    if isinstance(bodies[i], dict):
        texts.extend(s.text for s in text_slots(bodies[i]))
    elif raw is not None and isinstance(raw[i], str):  # not a JSON object: the whole string
        texts.append(raw[i])
    response = columns.get("response")
    if response is not None and isinstance(response[i], str):
        texts.append(response[i])
    return [t for t in texts if t.strip()]


class _Deep:
    """The analyzer over each distinct text, with an LRU of what it found (types not exempt)."""

    def __init__(self, exempt: Exempt, analyzer: Any = None) -> None:
        if analyzer is None:
            from redact.analyzer import TextAnalyzer

            analyzer = TextAnalyzer()
        self.analyzer = analyzer
        self.exempt = exempt
        self.cache: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
        self.analysed = 0

    def _found(self, text: str, found: Any) -> tuple[str, ...]:
        if isinstance(found, BaseException):
            return ("ANALYZER_ERROR",)
        return tuple(sorted({f.entity for f in found if text[f.start : f.end] not in self.exempt}))

    def types(self, rows: list[list[str]]) -> list[Counter[str]]:
        """Per row, per type: how many of its texts hold a finding of that type."""
        digest = hashlib.blake2b
        keys = [[digest(t.encode("utf-8", "surrogatepass"), digest_size=16).digest() for t in row] for row in rows]
        todo: dict[bytes, str] = {}
        for row, row_keys in zip(rows, keys):
            for t, k in zip(row, row_keys):
                if k not in self.cache and k not in todo:
                    todo[k] = t
        fresh = {}
        if todo:
            results = self.analyzer.analyze_batch(list(todo.values()))
            self.analysed += len(todo)
            fresh = {k: self._found(t, r) for (k, t), r in zip(todo.items(), results)}
        out = []
        for row_keys in keys:
            got: Counter[str] = Counter()
            for k in row_keys:
                hit = fresh.get(k)
                if hit is None:
                    hit = self.cache[k]
                    self.cache.move_to_end(k)
                got.update(hit)
            out.append(got)
        for k, hit in fresh.items():
            self.cache[k] = hit
            if len(self.cache) > DEEP_CACHE_TEXTS:
                self.cache.popitem(last=False)
        return out


def audit_trace(
    path: str | os.PathLike[str], *, deep: bool = False, analyzer: Any = None, progress: Callable[[int, int], None] | None = None
) -> AuditResult:
    """Audit the trace at ``path`` (see the module docstring). ``analyzer``: a
    :class:`redact.analyzer.TextAnalyzer` to use with ``deep`` (default: a new one).
    ``progress(rows done, rows in all)``. Raises TraceError naming the file on bad input."""
    path = Path(path)
    meta, total = read_meta(path)
    exempt = _exempt_of(meta, path.name)
    lock: dict[str, Findings] = {}
    deep_found: dict[str, Findings] | None = {} if deep else None
    deeper = _Deep(exempt, analyzer) if deep else None
    rows = strings = 0
    in_source: Counter[str] = Counter()  # rows read so far from each file
    for source, columns in _batches(path):
        ids = columns["request_id"]
        first = in_source[source]
        in_source[source] += len(ids)
        row_ids = [rid if isinstance(rid, str) else f"{source} row {first + i}" for i, rid in enumerate(ids)]
        bodies = [_body_object(b) for b in columns.get("body", [None] * len(ids))]
        for i, row_id in enumerate(row_ids):
            per_type: Counter[str] = Counter()
            for s in _row_strings(columns, bodies, i):
                strings += 1
                per_type.update({h.entity for h in scan(s) if s[h.start : h.end] not in exempt})
            for t, n in per_type.items():
                lock.setdefault(t, Findings()).add(row_id, n)
        if deeper is not None and deep_found is not None:  # both with --deep
            texts = [_prompt_texts(columns, bodies, i) for i in range(len(ids))]
            for row_id, per_type in zip(row_ids, deeper.types(texts)):
                for t, n in per_type.items():
                    deep_found.setdefault(t, Findings()).add(row_id, n)
        rows += len(ids)
        if progress is not None:
            progress(rows, total)
    return AuditResult(
        trace=str(path),
        rows=rows,
        strings=strings,
        redaction_policy=meta.redaction_policy,
        exempt=len(exempt),
        lock=lock,
        deep=deep_found,
        texts_analysed=deeper.analysed if deeper is not None else 0,
    )
