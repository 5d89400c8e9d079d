"""Token-only traces into a Trace file, in one streaming pass with bounded memory.

Owns :class:`TokenRecord` (one request of a public trace: times and token counts, maybe block
ids or real text), :func:`read_csv_rows` / :func:`read_jsonl_rows` (numbered lines, for the
format modules) and :func:`write_token_trace`, the one writer every token-only importer (Azure,
BurstGPT, vidur, Mooncake) ends in.

The writer takes records in file order and writes them a chunk (:data:`CHUNK_ROWS`) at a time as
Parquet row groups through :class:`replay.trace.TraceWriter`, so memory holds one chunk, never
the file. Each chunk is put in time order (stably); a record earlier than a row already written
(a file out of time order by more than a chunk) stops the import with its line number. Rows
without real text get a null body: the replay builds their text (:mod:`replay.synth`), and the
writer stores only what that text hashes to (``block_hashes``), so nothing that can be
regenerated is stored. A row with real text (AIPerf's ``text_input`` / ``messages``) keeps it as
its body; its ``input_tokens`` and ``block_hashes`` come from that text under the tokenizer, as
for request logs. Sessions: a record naming a session is that session's next turn (``turn``
counts its earlier requests, ``parent_request_id`` is the latest of them), unless it states its
``turn`` and ``parent_request_id`` itself (a conversation tree, Bailian's). A record may also
carry what waits for what (``depends_on``, ``wait_us``, ``parent_session_id``: schema 3) and
observed ``cached_tokens`` / ``ttft_us``; the writer stores them as given. A chunk ends at
:data:`CHUNK_ROWS` rows or :data:`CHUNK_BLOCKS` blocks (of ``block_hashes`` and ``hash_ids``), so
an agent's long prompts do not fill memory.

Two helpers for traces of agent sessions: :func:`time_ordered` puts records in arrival order
when the file is not (one line a session: sorted runs spilled to temporary files, then merged),
and :class:`PrefixChain` is the one rule that makes prefix sharing for token-only prompts from a
count of shared tokens (cached tokens, an engine's prefix split) where the source has no hash ids.
"""

from __future__ import annotations

import csv
import gzip
import heapq
import json
import os
import pickle
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from capture.importers.records import BadLines, LineError
from replay.blocks import HASH_ALGO
from replay.bodies import body_json
from replay.errors import ConfigError, TraceError
from replay.synth import Synthesis, Synthesizer
from replay.trace import BLOCK_SIZE, TraceMeta, TraceWriter, read_meta

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "CHUNK_ROWS",
    "CHUNK_BLOCKS",
    "TokenRecord",
    "PrefixChain",
    "read_csv_rows",
    "read_jsonl_rows",
    "time_ordered",
    "write_token_trace",
    "ImportResult",
]

# rows written per Parquet row group (and held in memory at once)
CHUNK_ROWS = 65_536
# ... or fewer: a chunk ends once its rows hold this many blocks (block_hashes and hash_ids)
CHUNK_BLOCKS = 1 << 22
# records a spilled run of :func:`time_ordered` is read back in at a time
RUN_READ_ROWS = 64


@dataclass(slots=True)
class TokenRecord:
    """One request of a token-only trace."""

    line: int  # 1-based line of the file (for errors)
    arrival_us: int  # absolute µs (any origin; the first arrival becomes t0)
    input_tokens: int
    output_tokens: int | None
    request_id: str
    api: str = "chat"
    model: str | None = None
    session_id: str | None = None
    hash_ids: list[int] | None = None  # block ids (Mooncake), one per synthesis.block_tokens
    # the record's own place in its session (Bailian), where the source states it; None: the
    # session's next turn, after its latest request (see the module docstring)
    turn: int | None = None
    parent_request_id: str | None = None
    body: dict | None = None  # real request text, where the source has it (stored as is)
    max_tokens: int | None = None  # the limit to send (None: output_tokens)
    status: int | None = None
    e2e_us: int | None = None
    ttft_us: int | None = None
    cached_tokens: int | None = None
    depends_on: list[str] | None = None  # request ids that must have ended first (schema 3)
    wait_us: int | None = None  # from the last of them ending to this arrival
    parent_session_id: str | None = None  # a subagent's session: the session that spawned it
    agent: str | None = None


def _blocks(rec: TokenRecord, block_size: int) -> int:
    """The blocks a record holds in a chunk (its block hashes and hash ids), at least 1."""
    return 1 + -(-rec.input_tokens // block_size) + len(rec.hash_ids or ())


class PrefixChain:
    """Block ids (``hash_ids``, ``block_tokens`` tokens each, the partial last block included) for
    token-only prompts that extend earlier ones, where the source counts shared tokens but has no
    hash ids: :meth:`extend` gives a prompt of ``total`` tokens whose first ``shared`` tokens are
    those of an earlier prompt. It keeps that prompt's first ``shared // block_tokens`` ids (and
    its partial last one too when the whole earlier prompt is shared: that block's text is then a
    prefix of the same id's longer cut, :mod:`replay.synth`), and new ids for the rest, numbered
    from ``first_id`` up, unique in one import. The earlier prompt is the importer's choice (the
    same model's previous call of the session for Copilot, the previous round for TraceLab), and
    so is the evidence for ``shared`` (cached tokens, an engine's prefix split): sharing is exact
    to the block, never more than either prompt holds."""

    def __init__(self, block_tokens: int, first_id: int = 1) -> None:
        self.block_tokens = block_tokens
        self.next_id = first_id

    def kept(self, prev_ids: int, prev_total: int, shared: int, total: int) -> int:
        """How many of an earlier prompt's ``prev_ids`` ids (``prev_total`` tokens) a prompt of
        ``total`` tokens sharing its first ``shared`` tokens with it keeps (the rule above)."""
        bt = self.block_tokens
        shared = max(0, min(shared, prev_total, total))
        keep = shared // bt + (1 if shared == prev_total and prev_total % bt else 0)
        return min(keep, prev_ids, -(-total // bt))

    def fresh(self, n: int) -> range:
        """``n`` new ids, never given before in this import."""
        ids = range(self.next_id, self.next_id + n)
        self.next_id += n
        return ids

    def extend(self, prev: tuple[list[int], int] | None, shared: int, total: int) -> list[int]:
        """The ids of a prompt of ``total`` tokens sharing its first ``shared`` tokens with
        ``prev`` (its ids and token count; None: nothing shared)."""
        n = -(-total // self.block_tokens)
        if prev is None:
            return list(self.fresh(n))
        prev_ids, prev_total = prev
        keep = self.kept(len(prev_ids), prev_total, shared, total)
        return prev_ids[:keep] + list(self.fresh(n - keep))


def _arrival(rec: TokenRecord) -> int:
    return rec.arrival_us


def time_ordered(
    records: Iterable[TokenRecord], *, run_rows: int = CHUNK_ROWS, run_blocks: int = CHUNK_BLOCKS
) -> Iterator[TokenRecord]:
    """``records`` in arrival order (stable: equal arrivals keep their order), for a format whose
    file is not in time order (one line a session, sessions overlapping in time). Memory holds one
    run (``run_rows`` records or ``run_blocks`` hash ids); an input longer than one run is sorted
    run by run into temporary files (pickled, :data:`RUN_READ_ROWS` records a piece) and merged
    from them, deleted when the merge ends."""
    buf: list[TokenRecord] = []
    held = 0
    runs: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="replay-import-") as tmp:
        for rec in records:
            buf.append(rec)
            held += 1 + len(rec.hash_ids or ())
            if len(buf) >= run_rows or held >= run_blocks:
                runs.append(_spill(buf, Path(tmp) / f"run-{len(runs):05d}"))
                buf, held = [], 0
        buf.sort(key=_arrival)
        if not runs:
            yield from buf
            return
        if buf:
            runs.append(_spill(buf, Path(tmp) / f"run-{len(runs):05d}"))
        yield from heapq.merge(*(_read_run(p) for p in runs), key=_arrival)


def _spill(buf: list[TokenRecord], path: Path) -> Path:
    buf.sort(key=_arrival)
    with path.open("wb") as f:
        for i in range(0, len(buf), RUN_READ_ROWS):
            pickle.dump(buf[i : i + RUN_READ_ROWS], f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _read_run(path: Path) -> Iterator[TokenRecord]:
    with path.open("rb") as f:
        while True:
            try:
                part = pickle.load(f)
            except EOFError:
                return
            yield from part


@dataclass(frozen=True)
class ImportResult:
    path: Path
    rows: int
    meta: TraceMeta
    redaction: Any = None  # the RedactionReport of a log redacted as it was imported


def read_csv_rows(
    path: Path,
    columns: tuple[str, ...],
    format_name: str,
) -> Iterator[tuple[int, dict[str, str] | LineError]]:
    """``(line, {column: text})`` for each data row of a CSV file with a header (blank lines
    skipped), or ``(line, LineError)`` for a row with the wrong number of fields; a missing
    required column is an error naming the file. A ``.gz`` file is decompressed as it is read."""
    source = path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    try:
        if path.suffix == ".gz":
            f = gzip.open(path, "rt", newline="", encoding="utf-8-sig")
        else:
            f = path.open("r", newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError, OSError, EOFError) as e:
            raise TraceError(f"{source}: not a readable CSV ({e})") from None
        if header is None:
            raise TraceError(f"{source}: trace is empty")
        header = [h.strip() for h in header]
        for name in columns:
            if name not in header:
                raise TraceError(f"{source}: column '{name}' missing ({format_name})")
        index = {h: i for i, h in enumerate(header)}
        width = len(header)
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError, OSError, EOFError) as e:  # OSError, EOFError: a bad .gz
                raise TraceError(f"{source}: line {reader.line_num}: not readable CSV ({e})") from None
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if len(cells) != width:
                yield reader.line_num, LineError(f"{len(cells)} fields, the header has {width}")
                continue
            yield reader.line_num, {name: cells[i] for name, i in index.items()}


def csv_records(
    path: Path,
    columns: tuple[str, ...],
    format_name: str,
    parse: Callable[[int, dict[str, str], int], TokenRecord],
    bad: BadLines,
) -> Iterator[tuple[dict[str, str], TokenRecord]]:
    """Each good row's cells and its record, ``parse(line, cells, row)`` (``row`` counts the good
    rows from 0). A row with the wrong number of fields, or one ``parse`` refuses with a
    LineError, goes to ``bad`` (an error, or skipped and counted with ``--skip-bad``)."""
    row = 0
    for line, cells in read_csv_rows(path, columns, format_name):
        try:
            if isinstance(cells, LineError):
                raise cells
            rec = parse(line, cells, row)
        except LineError as e:
            bad.bad(line, e)
            continue
        row += 1
        yield cells, rec


def read_jsonl_rows(path: Path, source: str | None = None) -> Iterator[tuple[int, object]]:
    """``(line, parsed JSON or a LineError)`` for each non-blank line of a JSON Lines file (a
    ``.gz`` file decompressed as it is read); ``source`` names it in errors (default its name)."""
    source = source or path.name
    if not path.is_file():
        raise TraceError(f"{source}: no such file")
    try:
        f = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as e:
        raise TraceError(f"{source}: cannot read ({e.strerror or e})") from e
    loads = json.loads
    with f:
        lines = enumerate(f, start=1)
        while True:
            try:
                number, raw = next(lines)
            except StopIteration:
                return
            except (OSError, EOFError, zlib.error) as e:  # a damaged .gz
                raise TraceError(f"{source}: cannot read ({e})") from None
            if not raw.strip():
                continue
            try:
                yield number, loads(raw)
            except ValueError:
                yield number, LineError("not valid JSON")


def write_token_trace(
    records: Iterable[TokenRecord],
    out: str | os.PathLike[str],
    *,
    source: str,
    source_format: str,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    synthesis: Synthesis | None = None,
    bad: BadLines,
    report: dict | Callable[[], dict] | None = None,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Write ``records`` (file order) to the Trace file ``out``, a chunk at a time (see the
    module docstring); ``bad`` collects malformed lines, ``report`` adds to the import report (a
    callable is called once the records are read: counts made as they went by).
    ``progress(rows_written)`` is called after each chunk."""
    if block_size <= 0:
        raise ConfigError(f"--block-size: must be positive, got {block_size}")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    synthesis = synthesis or Synthesis()
    synth = Synthesizer(tokenizer, synthesis)
    meta = TraceMeta(
        t0_unix_us=0,
        source_format=source_format,
        tokenizer=tokenizer,
        block_size_tokens=block_size,
        hash_algo=HASH_ALGO,
        redaction_policy="synthetic",
        synthesis=synthesis.to_json(),
    )
    state = _State(synth, block_size, tokenizer)
    out = Path(out)
    chunk: list[TokenRecord] = []
    taken = 0
    held = 0
    with TraceWriter(out, meta) as writer:
        for rec in records:
            chunk.append(rec)
            taken += 1
            held += _blocks(rec, block_size)
            if len(chunk) >= CHUNK_ROWS or held >= CHUNK_BLOCKS:
                writer.write(state.frame(chunk, source))
                chunk, held = [], 0
                if progress is not None:
                    progress(writer.rows)
            if limit is not None and taken >= limit:
                break
        if chunk:
            writer.write(state.frame(chunk, source))
            if progress is not None:
                progress(writer.rows)
        if writer.rows == 0:
            writer.abort()
            raise TraceError(f"{source}: no requests imported ({bad.count} lines skipped as malformed)")
        full_report = {
            "format": source_format,
            "records_imported": writer.rows,
            **bad.report(),
            "real_text_rows": state.real_text,
            "synthesized_rows": writer.rows - state.real_text,
            "sessions": len(state.sessions),
            **(report() if callable(report) else report or {}),
        }
        final = TraceMeta(
            t0_unix_us=state.t0 or 0,
            source_format=source_format,
            tokenizer=tokenizer,
            block_size_tokens=block_size,
            hash_algo=HASH_ALGO,
            redaction_policy="none" if state.real_text else "synthetic",
            import_report=json.dumps(full_report, separators=(",", ":")),
            synthesis=synthesis.to_json() if writer.rows > state.real_text else "",
        )
        writer.close(final)
    meta, rows = read_meta(out)
    return ImportResult(out, rows, meta)


class _State:
    """What the writer carries from chunk to chunk: t0, the last arrival, the sessions."""

    def __init__(self, synth: Synthesizer, block_size: int, tokenizer: str) -> None:
        self.synth = synth
        self.block_size = block_size
        self.tokenizer = tokenizer
        self.t0: int | None = None
        self.last: tuple[int, int] | None = None  # (arrival_us, line) of the last row written
        self.sessions: dict[str, tuple[int, str]] = {}  # session -> (turns so far, last request)
        self.real_text = 0
        self._tok: Tokenizer | None = None

    def _text_ids(self, body: dict):
        from replay.bodies import prompt_token_ids, text_slots
        from replay.tokenizer import load_tokenizer

        if self._tok is None:
            self._tok = load_tokenizer(self.tokenizer)
        return prompt_token_ids([s.text for s in text_slots(body)], self._tok)

    def frame(self, chunk: list[TokenRecord], source: str) -> pl.DataFrame:
        from replay.blocks import block_hashes

        chunk.sort(key=lambda r: r.arrival_us)  # stable
        first = chunk[0]
        if self.last is not None and first.arrival_us < self.last[0]:
            raise TraceError(
                f"{source}: line {first.line}: time is earlier than line {self.last[1]}, already "
                f"written (the file is out of time order by more than {CHUNK_ROWS} rows; sort it by time)"
            )
        if self.t0 is None:
            self.t0 = first.arrival_us
        t0 = self.t0
        n = len(chunk)
        sessions: list[str | None] = [None] * n
        parents: list[str | None] = [None] * n
        turns = [0] * n
        bodies: list[str | None] = [None] * n
        inputs = [0] * n
        hashes: list[list[int] | None] = [None] * n
        for i, r in enumerate(chunk):
            if r.turn is not None:
                sessions[i], parents[i], turns[i] = r.session_id, r.parent_request_id, r.turn
            elif r.session_id is not None:
                count, prev = self.sessions.get(r.session_id, (0, None))
                sessions[i], parents[i], turns[i] = r.session_id, prev, count
                self.sessions[r.session_id] = (count + 1, r.request_id)
            if r.body is not None:
                ids = self._text_ids(r.body)
                inputs[i] = len(ids)
                hashes[i] = block_hashes(ids, self.block_size)
                bodies[i] = body_json(r.body)
                self.real_text += 1
            else:
                inputs[i] = r.input_tokens
                hashes[i] = self.synth.block_hashes(r.request_id, r.input_tokens, r.hash_ids, self.block_size)
        self.last = (chunk[-1].arrival_us, chunk[-1].line)
        outputs = [r.output_tokens for r in chunk]
        limits = [r.output_tokens if r.max_tokens is None else r.max_tokens for r in chunk]
        return pl.DataFrame(
            {
                "request_id": [r.request_id for r in chunk],
                "session_id": pl.Series(sessions, dtype=pl.String),
                "parent_request_id": pl.Series(parents, dtype=pl.String),
                "turn": pl.Series(turns, dtype=pl.Int32),
                "api": [r.api for r in chunk],
                "model": pl.Series([r.model for r in chunk], dtype=pl.String),
                "arrival_us": pl.Series([r.arrival_us - t0 for r in chunk], dtype=pl.Int64),
                "body": pl.Series(bodies, dtype=pl.String),
                "input_tokens": pl.Series(inputs, dtype=pl.Int64),
                "output_tokens": pl.Series(outputs, dtype=pl.Int64),
                "max_tokens": pl.Series(limits, dtype=pl.Int64),
                "block_hashes": pl.Series(hashes, dtype=pl.List(pl.UInt64)),
                "status": pl.Series([r.status for r in chunk], dtype=pl.Int64),
                "e2e_us": pl.Series([r.e2e_us for r in chunk], dtype=pl.Int64),
                "hash_ids": pl.Series([r.hash_ids if r.body is None else None for r in chunk], dtype=pl.List(pl.UInt64)),
                "ttft_us": pl.Series([r.ttft_us for r in chunk], dtype=pl.Int64),
                "cached_tokens": pl.Series([r.cached_tokens for r in chunk], dtype=pl.Int64),
                "depends_on": pl.Series([r.depends_on or [] for r in chunk], dtype=pl.List(pl.String)),
                "wait_us": pl.Series([r.wait_us for r in chunk], dtype=pl.Int64),
                "parent_session_id": pl.Series([r.parent_session_id for r in chunk], dtype=pl.String),
                "agent": pl.Series([r.agent for r in chunk], dtype=pl.String),
            }
        )
