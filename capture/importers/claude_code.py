"""Importer of Claude Code session logs (JSON Lines, one file per session) into a Trace file.

Owns :func:`import_claude_code` and :func:`session_requests`. Claude Code writes each session to
``~/.claude/projects/<project>/<session id>.jsonl`` (subagents, in recent versions, to files of
their own beside it, their entries marked ``isSidechain``). Each line is an entry; the ones that
make requests are ``type`` ``user`` and ``assistant``, each with ``uuid``, ``parentUuid`` (the
entry before it in its conversation; null for the first), ``sessionId``, ``timestamp`` (ISO 8601)
and ``message``: an Anthropic Messages API message whose ``content`` is a string or a list of
blocks (``text``, ``thinking``, ``tool_use`` with ``id`` / ``name`` / ``input``, ``tool_result``
with ``tool_use_id`` / ``content``). An assistant message carries its ``id``, ``model`` and
``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens``); Claude Code writes one entry per content block of an answer,
all with the same message ``id``. Other entry types (``summary``, ``system``, file snapshots)
are counted and skipped.

One model call is one request: the run of entries of one assistant message. Its history is the
``parentUuid`` chain before it, written as an OpenAI chat body (``messages``: a user entry's text
a ``user`` message, its ``tool_result`` blocks ``tool`` messages answering their ids, an assistant
message's text blocks its ``content`` and its ``tool_use`` blocks its ``tool_calls``, arguments
the input as JSON; ``thinking`` blocks are left out). Its arrival is the timestamp of the entry
it follows (the user's message or the last tool result, written when it was sent); its latency
runs to the timestamp of the answer's last entry. The usage gives the recorded tokens: prompt =
input + cache read + cache creation, cached = cache read, completion = output. The request id is
the entry's ``requestId``, else the message id; the session is the entry's ``sessionId``, a
sidechain's (subagent's) conversation a session of its own (``<sessionId>/<agentId or first
uuid>``). Answers written by Claude Code itself (model ``<synthetic>``, API errors) are not
requests.

The calls are written, a session at a time, as an OpenAI request log (the lines
``replay import openai`` reads: :mod:`capture.importers.openai_log`) beside the output, and that
log is imported: tokens, block hashes, redaction, and the edges (a request depends on the
request whose answer it carries; a subagent's first request on the call that spawned it, its
last answer joined back: :mod:`capture.importers.linker`) are the log importer's. What the log
does not hold, the importer cannot send: Claude Code does not log its system prompt or its tool
definitions, so the replayed prompts are the logged history alone: the import report's
``claude_code.recorded_prompt_tokens`` (the usage's prompt tokens, summed) against the trace's
``input_tokens`` says how much of the prompts that leaves out.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.logs import scan_log, write_log_trace
from capture.importers.openai_log import parse_openai_line
from capture.importers.records import LineError, parse_time_us
from replay.errors import TraceError
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_claude_code", "session_requests", "session_files"]

SOURCE_FORMAT = "claude-code"
SYNTHETIC_MODEL = "<synthetic>"  # an answer Claude Code wrote itself (an API error, an interruption)


def session_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.jsonl`` under the folder ``path`` (sorted)."""
    if path.is_dir():
        files = sorted(path.rglob("*.jsonl"))
        if not files:
            raise TraceError(f"{path}: no Claude Code session files (*.jsonl) in this folder")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such file or folder")
    return [path]


def _entries(path: Path, skipped: Counter, bad: list[str], skip_bad: bool) -> dict[str, dict]:
    """The user and assistant entries of one session file, by uuid, in file order."""
    out: dict[str, dict] = {}
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
                kind = obj.get("type")
                if kind not in ("user", "assistant"):
                    skipped[str(kind)] += 1
                    continue
                for field in ("uuid", "timestamp"):
                    if not isinstance(obj.get(field), str):
                        raise LineError("is missing or not a string", field)
                if not isinstance(obj.get("message"), dict):
                    raise LineError("is missing or not an object", "message")
                obj["_t"] = parse_time_us(obj["timestamp"], "timestamp")
            except LineError as e:
                if not skip_bad:
                    raise TraceError(f"{path}: line {n}: {e.describe()}") from None
                bad.append(f"{path.name}: line {n}: {e.describe()}")
                continue
            out[obj["uuid"]] = obj
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _history(chain: list[dict]) -> list[dict]:
    """The OpenAI chat messages of a chain of entries (oldest first), an assistant message's
    entries merged into one message."""
    messages: list[dict] = []
    last_id = None
    for e in chain:
        msg = e["message"]
        content = msg.get("content")
        if e["type"] == "assistant":
            if msg.get("id") is not None and msg.get("id") == last_id:
                target = messages[-1]
            else:
                target = {"role": "assistant", "content": None}
                messages.append(target)
            last_id = msg.get("id")
            text = _text(content)
            if text:
                target["content"] = (target["content"] or "") + text
            for b in content if isinstance(content, list) else ():
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    call = {
                        "id": b.get("id"),
                        "type": "function",
                        "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
                    }
                    target.setdefault("tool_calls", []).append(call)
            continue
        last_id = None
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _text(b.get("content"))})
        text = _text(blocks)
        if text:
            messages.append({"role": "user", "content": text})
    return messages


def session_requests(path: Path, skipped: Counter, bad: list[str], skip_bad: bool = False) -> Iterator[dict]:
    """The model calls of one session file, each as an OpenAI request log line (see the module
    docstring)."""
    entries = _entries(path, skipped, bad, skip_bad)
    ordered = list(entries.values())
    k = 0
    while k < len(ordered):
        first = ordered[k]
        if first["type"] != "assistant":
            k += 1
            continue
        msg_id = first["message"].get("id")
        group = [first]
        while k + 1 < len(ordered) and ordered[k + 1]["type"] == "assistant" and ordered[k + 1]["message"].get("id") == msg_id:
            k += 1
            group.append(ordered[k])
        k += 1
        model = first["message"].get("model")
        if model == SYNTHETIC_MODEL or first.get("isApiErrorMessage"):
            skipped["synthetic answer"] += 1
            continue
        chain: list[dict] = []
        parent = entries.get(first.get("parentUuid") or "")
        while parent is not None:
            chain.append(parent)
            parent = entries.get(parent.get("parentUuid") or "")
        if not chain:
            skipped["answer without a request"] += 1
            continue
        chain.reverse()
        root = chain[0]
        session = str(first.get("sessionId") or path.stem)
        if first.get("isSidechain"):
            session = f"{session}/{first.get('agentId') or root['uuid']}"
        usage: dict = {}
        for e in group:
            usage.update({k2: v for k2, v in (e["message"].get("usage") or {}).items() if v is not None})
        answer = _history(group)[0]
        prompt = sum(int(usage.get(f) or 0) for f in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        line = {
            "request_id": first.get("requestId") or msg_id or first["uuid"],
            "session_id": session,
            "timestamp": chain[-1]["_t"] / 1e6,
            "latency_ms": max(0.0, (group[-1]["_t"] - chain[-1]["_t"]) / 1e3),
            "body": {"model": model, "messages": _history(chain)},
            "response": {
                "id": msg_id,
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {"index": 0, "message": answer, "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop"}
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": int(usage.get("output_tokens") or 0),
                    "prompt_tokens_details": {"cached_tokens": int(usage.get("cache_read_input_tokens") or 0)},
                }
                if usage
                else None,
            },
        }
        yield line


def import_claude_code(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    block_size: int = BLOCK_SIZE,
    skip_bad: bool = False,
    limit: int | None = None,
    key: Any | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import a Claude Code session file, or a folder of them, into the Trace file ``out`` (see
    the module docstring; raw text unless ``key`` is given)."""
    path, out = Path(path), Path(out)
    files = session_files(path)
    skipped: Counter = Counter()
    bad: list[str] = []
    recorded_prompt = 0
    log = out.with_name(f".{out.name}.claude-code.jsonl")
    try:
        with log.open("w") as f:
            for file in files:
                for line in session_requests(file, skipped, bad, skip_bad):
                    usage = line["response"]["usage"]
                    recorded_prompt += usage["prompt_tokens"] if usage else 0
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
        index = scan_log(log, parse_openai_line, skip_bad=False, limit=limit)
        index.report["claude_code"] = {
            "files": len(files),
            "not_requests": dict(skipped),
            "skipped_lines": len(bad),
            "first_skipped": bad[:5],
            "recorded_prompt_tokens": recorded_prompt,
        }
        return write_log_trace(
            index,
            parse_openai_line,
            out,
            source_format=SOURCE_FORMAT,
            tokenizer=tokenizer,
            block_size=block_size,
            key=key,
            progress=progress,
        )
    finally:
        log.unlink(missing_ok=True)
