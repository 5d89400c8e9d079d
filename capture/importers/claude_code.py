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
``replay import openai`` reads) beside the output, and that log is imported
(:mod:`capture.importers.agent_logs`): tokens, block hashes, redaction, and the edges (a request depends on the
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.agent_logs import Skips, chat_completion, import_sessions, json_lines
from capture.importers.records import LineError, parse_time_us
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_claude_code", "session_requests"]

SOURCE_FORMAT = "claude-code"
SYNTHETIC_MODEL = "<synthetic>"  # an answer Claude Code wrote itself (an API error, an interruption)


def _check(obj: dict) -> None:
    if obj.get("type") not in ("user", "assistant"):
        return
    for field in ("uuid", "timestamp"):
        if not isinstance(obj.get(field), str):
            raise LineError("is missing or not a string", field)
    if not isinstance(obj.get("message"), dict):
        raise LineError("is missing or not an object", "message")
    obj["_t"] = parse_time_us(obj["timestamp"], "timestamp")


def _entries(path: Path, skips: Skips, skip_bad: bool) -> dict[str, dict]:
    """The user and assistant entries of one session file, by uuid, in file order."""
    out: dict[str, dict] = {}
    for obj in json_lines(path, skips, skip_bad, _check):
        if obj.get("type") in ("user", "assistant"):
            out[obj["uuid"]] = obj
        else:
            skips.kinds[str(obj.get("type"))] += 1
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
                    arguments = json.dumps(b.get("input", {}))
                    call = {"id": b.get("id"), "type": "function", "function": {"name": b.get("name"), "arguments": arguments}}
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


def session_requests(path: Path, skips: Skips, skip_bad: bool = False) -> Iterator[dict]:
    """The model calls of one session file, each as an OpenAI request log line (see the module
    docstring)."""
    entries = _entries(path, skips, skip_bad)
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
            skips.kinds["synthetic answer"] += 1
            continue
        chain: list[dict] = []
        parent = entries.get(first.get("parentUuid") or "")
        while parent is not None:
            chain.append(parent)
            parent = entries.get(parent.get("parentUuid") or "")
        if not chain:
            skips.kinds["answer without a request"] += 1
            continue
        chain.reverse()
        session = str(first.get("sessionId") or path.stem)
        if first.get("isSidechain"):
            session = f"{session}/{first.get('agentId') or chain[0]['uuid']}"
        usage: dict = {}
        for e in group:
            usage.update({name: v for name, v in (e["message"].get("usage") or {}).items() if v is not None})
        prompt = sum(int(usage.get(f) or 0) for f in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        openai_usage = {
            "prompt_tokens": prompt,
            "completion_tokens": int(usage.get("output_tokens") or 0),
            "prompt_tokens_details": {"cached_tokens": int(usage.get("cache_read_input_tokens") or 0)},
        }
        yield {
            "request_id": first.get("requestId") or msg_id or first["uuid"],
            "session_id": session,
            "timestamp": chain[-1]["_t"] / 1e6,
            "latency_ms": max(0.0, (group[-1]["_t"] - chain[-1]["_t"]) / 1e3),
            "body": {"model": model, "messages": _history(chain)},
            "response": chat_completion(msg_id, model, _history(group)[0], openai_usage if usage else None),
        }


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
    return import_sessions(
        Path(path),
        "*.jsonl",
        "Claude Code session files",
        session_requests,
        out,
        skip_bad=skip_bad,
        source_format=SOURCE_FORMAT,
        report_key="claude_code",
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )
