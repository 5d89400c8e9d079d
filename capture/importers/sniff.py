"""Which format a file (or folder) to import is in: ``replay import auto PATH``.

Owns :func:`sniff`. It reads the head of the input only (a CSV's header line; the first JSON
object of a JSON Lines file, or of the first file of a folder), never the whole of it, and
decides by the fields each format requires (the importers' own column and field names):

- a folder: ``servegen`` when it holds ServeGen client files (``chunk-*-trace.csv``), else
  ``copilot`` when it holds ``date=*/shard-*.jsonl.gz`` files (the GitHub Copilot coding agent
  dataset), else ``codex`` when it holds ``rollout-*.jsonl`` files, else ``weka`` when its first
  ``*.json`` file is a Weka trace (below), else ``claude-code`` when its ``*.jsonl`` files are
  Claude Code sessions (below);
- before any JSON is parsed, from the first :data:`KEYS_HEAD` characters (one Copilot session or
  Weka trace can be longer than the head): ``copilot`` when they open an object with
  ``session_id``, ``turns`` (a list) and a turn's ``turn_id`` or ``llm_calls``; ``weka`` when they
  open an object with ``block_size`` and ``requests`` (a list): a ``.json`` trace (often
  indented) or JSON Lines of traces;
- a JSON array (the file starts with ``[``) whose first object has ``conversations``: ``sharegpt``;
- CSV (the first line has commas and no ``{``; a gzipped one is read decompressed): ``azure``
  (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``), ``burstgpt`` (``Timestamp``,
  ``Request tokens``, ``Response tokens``), ``vidur`` (``arrived_at``, ``num_prefill_tokens``, ``num_decode_tokens``);
- JSON Lines, by the first object's keys: ``otel`` (``resourceSpans``, or ``resourceLogs``), ``codex``
  (``type`` ``session_meta`` / ``response_item`` / ``turn_context`` / ``event_msg`` with a
  ``payload``), ``claude-code`` (``type`` ``user`` / ``assistant`` / ``summary`` with ``uuid`` or
  ``leafUuid``), ``tracelab`` (``session_id``, ``round_index``, ``input_tokens_total``,
  ``prefix_tokens``, ``timing_events``: the keys AIPerf detects it by), ``bailian`` (``chat_id``
  and ``parent_chat_id``), ``mooncake``
  (``input_length`` and ``output_length``), ``litellm``
  (``call_type``), ``langfuse`` (``type`` an observation kind with ``startTime``/``start_time``,
  or ``traceId`` with ``startTime``), ``openai`` (``body``, or a Batch line's ``custom_id``);
- Parquet or Arrow IPC (its magic bytes): ``baseten`` when its schema has a Baseten trace's
  required columns (``timestamp_start_unix_ms``, ``prompt``, ``input_tokens``, ...);
- JSON Lines, also: ``sagemaker`` (``captureData`` and ``eventMetadata``; a folder of them too),
  ``aiperf-dag`` (``session_id`` with ``orchestrator`` or ``turns`` whose first has
  ``messages``), ``aiperf-multi-turn`` (``turns`` whose first has ``text`` / ``texts`` or
  anything but ``messages``);
- an OTLP protobuf file (binary, not text: its first byte below 0x09, a length prefix, or bytes
  that are not UTF-8) is ``otel``.

Anything else is a one-line error naming the file and what was looked at.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from capture.importers.azure import AZURE_COLUMNS
from capture.importers.baseten import BASETEN_COLUMNS
from capture.importers.burstgpt import BURSTGPT_COLUMNS
from capture.importers.servegen import SERVEGEN_TRACE_GLOB
from capture.importers.sharegpt import first_array_item
from capture.importers.vidur import VIDUR_COLUMNS
from replay.errors import TraceError

__all__ = ["sniff"]

HEAD_BYTES = 1 << 20  # the most read to find the first line / object
_CODEX_TYPES = frozenset({"session_meta", "response_item", "turn_context", "event_msg", "compacted"})
_CLAUDE_TYPES = frozenset({"user", "assistant", "summary", "system"})
_LANGFUSE_TYPES = frozenset({"GENERATION", "SPAN", "EVENT"})
_TRACELAB_KEYS = frozenset({"session_id", "round_index", "input_tokens_total", "prefix_tokens", "timing_events"})
# the characters of the text's start in which a Copilot session's or a Weka trace's keys are looked for
KEYS_HEAD = 4096
_OBJECT = re.compile(r'^\s*\{\s*"')
_HEAD_KEYS = {
    "copilot": (
        _OBJECT,
        re.compile(r'"session_id"\s*:'),
        re.compile(r'"turns"\s*:\s*\['),
        re.compile(r'"(turn_id|llm_calls)"\s*:'),
    ),
    "weka": (_OBJECT, re.compile(r'"block_size"\s*:'), re.compile(r'"requests"\s*:\s*\[')),
}


def _head_format(text: str) -> str | None:
    """``copilot`` or ``weka`` where the text's start has that format's keys (module docstring)."""
    start = text[:KEYS_HEAD]
    return next((name for name, keys in _HEAD_KEYS.items() if all(k.search(start) for k in keys)), None)


def sniff(path: Path) -> str:
    """The import format of ``path`` (an ``IMPORT_FORMATS`` name): see the module docstring."""
    if path.is_dir():
        if next(path.glob(SERVEGEN_TRACE_GLOB), None) is not None:
            return "servegen"
        if next(path.glob("**/date=*/shard-*.jsonl.gz"), None) is not None or next(path.glob("shard-*.jsonl.gz"), None):
            return "copilot"
        if next(path.rglob("rollout-*.jsonl"), None) is not None:
            return "codex"
        first_json = next(iter(sorted(path.rglob("*.json"))), None)
        if first_json is not None:
            with first_json.open("rb") as f:
                if _head_format(f.read(KEYS_HEAD).decode("utf-8", "replace")) == "weka":
                    return "weka"
        first = next(iter(sorted(path.rglob("*.jsonl"))), None)
        if first is not None and _json_format(first) in ("claude-code", "sagemaker"):
            return _json_format(first)
        raise TraceError(
            f"{path}: a folder of neither Codex rollouts (rollout-*.jsonl), Claude Code sessions nor "
            "SageMaker Data Capture files (*.jsonl)"
        )
    if not path.is_file():
        raise TraceError(f"{path}: no such file or folder")
    with path.open("rb") as f:
        head = f.read(HEAD_BYTES)
    if head[:2] == b"\x1f\x8b":  # gzip: the head of what it holds
        import gzip

        with gzip.open(path, "rb") as f:
            try:
                head = f.read(HEAD_BYTES)
            except (OSError, EOFError) as e:
                raise TraceError(f"{path}: a gzip file that cannot be read ({e})") from None
    if head[:4] in (b"PAR1", b"\xff\xff\xff\xff") or head[:6] == b"ARROW1":
        return _columnar_format(path, head)
    if head and head[0] < 0x09:
        return "otel"  # a big-endian length prefix: OTLP protobuf (capture.importers.otel.framing)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:
            return "otel"  # OTLP protobuf (binary); the importer checks its framing
        text = head[: e.start].decode("utf-8")  # the head cut a character in two
    found = _head_format(text)
    if found is not None:
        return found
    line = next((x for x in text.splitlines() if x.strip()), "")
    if not line:
        raise TraceError(f"{path}: empty: no format to find")
    if line.lstrip().startswith("["):
        first = first_array_item(text)
        if isinstance(first, dict) and "conversations" in first:
            return "sharegpt"
        raise TraceError(f"{path}: a JSON array, but its first item has no 'conversations' (sharegpt)")
    if not line.lstrip().startswith("{"):
        columns = {c.strip() for c in line.split(",")}
        for name, need in (("azure", AZURE_COLUMNS), ("burstgpt", BURSTGPT_COLUMNS), ("vidur", VIDUR_COLUMNS)):
            if set(need) <= columns:
                return name
        raise TraceError(f"{path}: a header of {sorted(columns)[:6]} is none of the CSV formats (azure, burstgpt, vidur)")
    return _json_format(path, line)


def _json_format(path: Path, line: str | None = None) -> str:
    if line is None:
        with path.open("rb") as f:
            line = next((x.decode("utf-8", "replace") for x in f if x.strip()), "")
    try:
        obj = json.loads(line)
    except ValueError:
        raise TraceError(f"{path}: line 1 is neither a CSV header nor a JSON object") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{path}: line 1 is not a JSON object")
    kind = obj.get("type")
    if "resourceSpans" in obj or "resourceLogs" in obj:  # spans, or their log records first
        return "otel"
    if _TRACELAB_KEYS <= obj.keys():
        return "tracelab"
    if "captureData" in obj and "eventMetadata" in obj:
        return "sagemaker"
    turns = obj.get("turns")
    first = turns[0] if isinstance(turns, list) and turns and isinstance(turns[0], dict) else None
    if "session_id" in obj and obj.get("orchestrator") or first is not None and "messages" in first and "session_id" in obj:
        return "aiperf-dag"
    if first is not None:
        return "aiperf-multi-turn"
    if kind in _CODEX_TYPES and "payload" in obj:
        return "codex"
    if kind in _CLAUDE_TYPES and ("uuid" in obj or "leafUuid" in obj):
        return "claude-code"
    if "chat_id" in obj and "parent_chat_id" in obj:
        return "bailian"
    if "input_length" in obj and "output_length" in obj:
        return "mooncake"
    if "call_type" in obj:
        return "litellm"
    if (kind in _LANGFUSE_TYPES or "traceId" in obj or "trace_id" in obj) and ("startTime" in obj or "start_time" in obj):
        return "langfuse"
    if "body" in obj or "custom_id" in obj:
        return "openai"
    raise TraceError(f"{path}: line 1's fields ({', '.join(sorted(obj)[:8])}) are none of the formats replay imports")


def _columnar_format(path: Path, head: bytes) -> str:
    """``baseten`` for a Parquet or Arrow IPC file with a Baseten trace's columns (its schema
    only is read: a Parquet file's footer, an Arrow file's or stream's schema message)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if head[:4] == b"PAR1":
            names = pq.read_schema(path).names
        else:
            with pa.memory_map(str(path)) as source:
                reader = pa.ipc.open_file(source) if head[:6] == b"ARROW1" else pa.ipc.open_stream(source)
                names = reader.schema.names
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceError(f"{path}: not a readable Parquet or Arrow IPC file ({e})") from None
    if set(BASETEN_COLUMNS) <= set(names):
        return "baseten"
    raise TraceError(f"{path}: a columnar file whose columns ({', '.join(names[:8])}) are not a Baseten trace's")
