"""Importer of Codex CLI rollouts (JSON Lines, one file per session) into a Trace file.

Owns :func:`import_codex` and :func:`rollout_requests`. Codex writes each session to
``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (a subagent to a file of its own).
Each line is ``{"timestamp": RFC 3339, "type": ..., "payload": {...}}`` (openai/codex,
``codex-rs/protocol``: ``RolloutLine`` / ``RolloutItem``):

- ``session_meta``: ``id`` (the session), ``source`` (a subagent's names its
  ``parent_thread_id``), ``base_instructions``;
- ``turn_context``: the turn's ``model``;
- ``response_item``: the model's history, a ``ResponseItem``: ``message`` (``role``; ``content``
  items ``input_text`` / ``output_text``), ``function_call`` (``name``, ``arguments`` as a JSON
  string, ``call_id``), ``function_call_output`` (``call_id``, ``output``), ``custom_tool_call``
  / ``custom_tool_call_output`` (``input`` / ``output``), ``reasoning`` and others;
- ``event_msg``: runtime events; ``token_count`` carries ``info.last_token_usage``
  (``input_tokens``, its ``cached_input_tokens``, ``output_tokens``) of the model call that just
  ended.

One model call is one request. A ``token_count`` event with usage closes a call: the items the
model wrote since the previous call (assistant messages, tool calls, reasoning) are its answer,
and every item before the first of them its history, written as an OpenAI chat body (a
``developer`` or ``system`` message ``system``, a user message ``user``, the assistant's text
``content`` and its calls ``tool_calls``, each output a ``tool`` message answering its
``call_id``; reasoning left out). Its arrival is the timestamp of the last item before the answer
(the user's message or the last tool output); its latency runs to the ``token_count`` event.
Tokens: prompt = ``input_tokens``, cached = ``cached_input_tokens``, completion =
``output_tokens``. The request id is ``<session>/call-<k>``; the model the turn's. A
``token_count`` with no answer since the last (a rate-limit update) is not a call; answer items
that no ``token_count`` closes are counted and left out.

The calls go through the request log importer as Claude Code's do
(:mod:`capture.importers.agent_logs`): tokens and block hashes from the text, redaction, and the
edges (the request a call continues; a subagent's first request spawned by the call whose
arguments hold its task; its last answer joined back). Codex does not log the tool definitions
it sends, so the bodies have none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture.importers.agent_logs import Skips, chat_completion, import_sessions, json_lines
from capture.importers.records import LineError, content_text, parse_time_us
from replay.trace import BLOCK_SIZE

if TYPE_CHECKING:
    from capture.importers.tokens import ImportResult

__all__ = ["import_codex", "rollout_requests"]

SOURCE_FORMAT = "codex"
# the response items the model writes (its answer); every other kind is input to the next call
_ANSWER_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call"})


def _check(obj: dict) -> None:
    if not isinstance(obj.get("timestamp"), str):
        raise LineError("is missing or not a string", "timestamp")
    if not isinstance(obj.get("payload"), dict):
        raise LineError("is missing or not an object", "payload")
    obj["_t"] = parse_time_us(obj["timestamp"], "timestamp")


def _text(content: Any) -> str:
    return content_text(content) or ""


def _is_answer(item: dict) -> bool:
    kind = item.get("type")
    return kind in _ANSWER_ITEMS or (kind == "message" and item.get("role") == "assistant")


def _messages(items: list[dict]) -> list[dict]:
    """The OpenAI chat messages of response items (oldest first): an assistant's text and the
    calls that follow it one message."""
    out: list[dict] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            text = _text(item.get("content"))
            if role == "assistant":
                out.append({"role": "assistant", "content": text or None})
            elif text:
                out.append({"role": "system" if role in ("developer", "system") else "user", "content": text})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") if kind == "function_call" else item.get("input")
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {
                    "name": item.get("name"),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": None})
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            if isinstance(output, dict):  # FunctionCallOutputPayload: {content, success} in some versions
                output = output.get("content", json.dumps(output))
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(output)})
    return out


def rollout_requests(path: Path, skips: Skips, skip_bad: bool = False) -> Iterator[dict]:
    """The model calls of one rollout file, each as an OpenAI request log line (see the module
    docstring)."""
    session = path.stem
    model: str | None = None
    history: list[dict] = []  # response items, each with its line's time
    answer_from: int | None = None  # where the answer being written starts in history
    calls = 0
    for obj in json_lines(path, skips, skip_bad, _check):
        kind, payload, t = obj.get("type"), obj["payload"], obj["_t"]
        if kind == "session_meta":
            session = str(payload.get("id") or session)
        elif kind == "turn_context":
            model = payload.get("model") if isinstance(payload.get("model"), str) else model
        elif kind == "response_item":
            payload = {**payload, "_t": t}
            if _is_answer(payload):
                if answer_from is None:
                    answer_from = len(history)
            elif answer_from is not None:
                # input after an answer no token count closed: that answer is not a call we can time
                skips.kinds["answer without a token count"] += 1
                answer_from = None
            history.append(payload)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            usage = info.get("last_token_usage") if isinstance(info, dict) else None
            if answer_from is None or not isinstance(usage, dict):
                skips.kinds["token count without an answer"] += 1
                continue
            before, answer = history[:answer_from], history[answer_from:]
            answer_from = None
            if not before:
                skips.kinds["answer without a request"] += 1
                continue
            sent = before[-1]["_t"]
            reply = _messages(answer)
            message = next((m for m in reply if m["role"] == "assistant"), {"role": "assistant", "content": None})
            calls += 1
            yield {
                "request_id": f"{session}/call-{calls}",
                "session_id": session,
                "timestamp": sent / 1e6,
                "latency_ms": max(0.0, (t - sent) / 1e3),
                "body": {"model": model, "messages": _messages(before)},
                "response": chat_completion(
                    f"{session}/call-{calls}",
                    model,
                    message,
                    {
                        "prompt_tokens": int(usage.get("input_tokens") or 0),
                        "completion_tokens": int(usage.get("output_tokens") or 0),
                        "prompt_tokens_details": {"cached_tokens": int(usage.get("cached_input_tokens") or 0)},
                    },
                ),
            }
        else:
            skips.kinds[f"{kind}" if kind != "event_msg" else f"event_msg {payload.get('type')}"] += 1
    if answer_from is not None:
        skips.kinds["answer without a token count"] += 1


def import_codex(
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
    """Import a Codex CLI rollout file, or a folder of them (``rollout-*.jsonl`` under it), into
    the Trace file ``out`` (see the module docstring; raw text unless ``key`` is given)."""
    return import_sessions(
        Path(path),
        "rollout-*.jsonl",
        "Codex rollout files",
        rollout_requests,
        out,
        skip_bad=skip_bad,
        source_format=SOURCE_FORMAT,
        report_key="codex",
        tokenizer=tokenizer,
        block_size=block_size,
        limit=limit,
        key=key,
        progress=progress,
    )
