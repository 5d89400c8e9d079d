"""What the importers of agent session logs share (:mod:`capture.importers.claude_code`,
:mod:`capture.importers.codex`): finding the session files, reading their JSON lines, and turning
the model calls found in them into a Trace through the request log importer.

Owns :func:`session_files`, :func:`json_lines`, :func:`import_sessions` and :func:`import_calls`. An agent's log holds no
request as it was sent: each format's module rebuilds every model call as an OpenAI request log
line (``body``: the chat history the call was made with; ``response``: its answer and usage;
``timestamp`` and ``latency_ms``; ``session_id``), a session at a time, into a file beside the
output, and :func:`import_calls` imports that file as ``replay import openai`` does
(:mod:`capture.importers.logs`: tokens, block hashes, redaction, and the edges of
:mod:`capture.importers.linker`), then removes it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.logs import scan_log, write_log_trace
from capture.importers.openai_log import parse_openai_line
from capture.importers.records import LineError
from replay.errors import TraceError
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["session_files", "json_lines", "import_sessions", "import_calls", "chat_completion", "Skips"]


class Skips:
    """What an import of session files left out: entries that are not model calls (by kind) and
    malformed lines (with the first few, named by file and line)."""

    def __init__(self) -> None:
        self.kinds: Counter = Counter()
        self.bad: list[str] = []

    def report(self, files: int, recorded_prompt: int) -> dict:
        return {
            "files": files,
            "not_requests": dict(self.kinds),
            "skipped_lines": len(self.bad),
            "first_skipped": self.bad[:5],
            "recorded_prompt_tokens": recorded_prompt,
        }


def session_files(path: Path, pattern: str, what: str) -> list[Path]:
    """``path`` itself, or every file matching ``pattern`` under the folder ``path`` (sorted)."""
    if path.is_dir():
        files = sorted(path.rglob(pattern))
        if not files:
            raise TraceError(f"{path}: no {what} ({pattern}) in this folder")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such file or folder")
    return [path]


def json_lines(path: Path, skips: Skips, skip_bad: bool, check: Callable[[dict], None]) -> Iterator[dict]:
    """The JSON objects of ``path``, a line each (blank lines skipped), each passed through
    ``check`` (raising :class:`LineError`). A malformed line stops with ``FILE: line N: <what>
    (field 'x')``, or with ``skip_bad`` is counted in ``skips`` and left out."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise LineError("is not JSON") from None
                if not isinstance(obj, dict):
                    raise LineError("is not a JSON object")
                check(obj)
            except LineError as e:
                if not skip_bad:
                    raise TraceError(f"{path}: line {n}: {e.describe()}") from None
                skips.bad.append(f"{path.name}: line {n}: {e.describe()}")
                continue
            yield obj


def import_sessions(
    path: Path,
    pattern: str,
    what: str,
    calls_of: Callable[[Path, Skips, bool], Iterable[dict]],
    out: str | os.PathLike[str],
    *,
    skip_bad: bool = False,
    **kwargs: Any,
) -> ImportResult:
    """Import the session file ``path``, or the files matching ``pattern`` under the folder
    ``path`` (``what`` they are, for the error when there are none): :func:`import_calls` of the
    calls ``calls_of(file, skips, skip_bad)`` finds in each."""
    files = session_files(path, pattern, what)
    return import_calls(files, lambda file, skips: calls_of(file, skips, skip_bad), out, **kwargs)


def import_calls(
    files: list[Path],
    calls_of: Callable[[Path, Skips], Iterable[dict]],
    out: str | os.PathLike[str],
    *,
    source_format: str,
    report_key: str,
    report: dict | None = None,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Write the model calls ``calls_of(file, skips)`` finds in each of ``files`` (OpenAI request
    log lines) beside ``out``, import them into the Trace file ``out`` and remove them; the
    import report's ``report_key`` entry says what the session files held besides (:class:`Skips`)
    and the prompt tokens their usage recorded, and holds ``report``'s entries (read once the
    calls are written)."""
    out = Path(out)
    skips = Skips()
    recorded_prompt = 0
    log = out.with_name(f".{out.name}.{source_format}.jsonl")
    try:
        with log.open("w") as f:
            for file in files:
                for line in calls_of(file, skips):
                    usage = line["response"].get("usage")
                    recorded_prompt += usage["prompt_tokens"] if usage else 0
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
        index = scan_log(log, parse_openai_line, skip_bad=False, limit=limit)
        index.report[report_key] = {**skips.report(len(files), recorded_prompt), **(report or {})}
        return write_log_trace(
            index,
            parse_openai_line,
            out,
            source_format=source_format,
            tokenizer=tokenizer,
            block_size=block_size,
            key=key,
            progress=progress,
        )
    finally:
        log.unlink(missing_ok=True)


def chat_completion(call_id: str | None, model: str | None, answer: dict, usage: dict | None) -> dict:
    """The ``chat.completion`` object an OpenAI request log line holds for an answer."""
    return {
        "id": call_id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": answer, "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop"}],
        "usage": usage,
    }
