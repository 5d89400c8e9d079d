"""The text inside a request body: where it is, in prompt order, and its token ids.

Owns :class:`Slot`, :func:`text_slots`, :func:`replace_texts` and :func:`prompt_token_ids`: the one
rule for which strings of an OpenAI request are prompt text. Redaction rewrites exactly these
strings (roles, structure and sampling parameters are never touched), and importers count a
request's ``input_tokens`` and its ``block_hashes`` over them. Also :func:`body_json`, the one way
a body is written as JSON text (stored in a trace, sent by a replay).

Prompt order, like a chat template's: the tools' descriptions (functions and their parameters),
then each message in turn: its content (a string, or the ``text`` of each content part), then
the arguments of each of its tool calls. A completions request's text is its ``prompt`` (a string,
or each string of a list). A Responses API request's is its ``instructions``, then its ``input``: a
string, or each item of the list in turn (a message's content as above, a function call's
``arguments``, a function call output's ``output``); an embeddings request's is its ``input`` (a
string, or each string of a list; token ids are not text). Responses API tools name their
``description`` beside ``name``, not under ``function``. The token ids of a request are each slot's text encoded on its own
(no special tokens) and concatenated, so a message repeated in a later request yields the same
ids wherever it appears. A chat template adds a few tokens per message; an engine's reported
``prompt_tokens`` is that much larger than ``input_tokens``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.errors import ConfigError

__all__ = [
    "Slot",
    "text_slots",
    "name_slots",
    "replace_texts",
    "prompt_token_ids",
    "text_token_ids",
    "message_texts",
    "body_json",
]


@dataclass(frozen=True)
class Slot:
    """One string of prompt text in a request body."""

    path: tuple[str | int, ...]  # keys and indices from the body's root
    text: str
    # "content" (a message's text), "prompt" (completions), "tool_description",
    # "tool_arguments" (an assistant's tool call, a JSON string); "name" (a message's
    # participant name: name_slots, not prompt text)
    kind: str


def _tool_descriptions(tools: Any, path: tuple) -> Iterator[Slot]:
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        fn, where = tool.get("function"), (*path, i, "function")
        if not isinstance(fn, dict) and tool.get("type") == "function":  # the Responses API's flat shape
            fn, where = tool, (*path, i)
        if not isinstance(fn, dict):
            continue
        if isinstance(fn.get("description"), str):
            yield Slot((*where, "description"), fn["description"], "tool_description")
        props = fn.get("parameters", {}).get("properties") if isinstance(fn.get("parameters"), dict) else None
        if isinstance(props, dict):
            for name, spec in props.items():
                if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                    yield Slot((*where, "parameters", "properties", name, "description"), spec["description"], "tool_description")


def _message_slots(message: Any, path: tuple) -> Iterator[Slot]:
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        yield Slot((*path, "content"), content, "content")
    elif isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield Slot((*path, "content", j, "text"), part["text"], "content")
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                yield Slot((*path, "tool_calls", j, "function", "arguments"), fn["arguments"], "tool_arguments")


def text_slots(body: dict) -> list[Slot]:
    """Every string of prompt text in ``body``, in prompt order (see the module docstring)."""
    slots = list(_tool_descriptions(body.get("tools"), ("tools",)))
    messages = body.get("messages")
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            slots.extend(_message_slots(message, ("messages", i)))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        slots.append(Slot(("prompt",), prompt, "prompt"))
    elif isinstance(prompt, list):
        slots.extend(Slot(("prompt", i), p, "prompt") for i, p in enumerate(prompt) if isinstance(p, str))
    if isinstance(body.get("instructions"), str):
        slots.append(Slot(("instructions",), body["instructions"], "content"))
    slots.extend(_input_slots(body.get("input")))
    return slots


def _input_slots(value: Any) -> Iterator[Slot]:
    """The text of a Responses API or embeddings ``input`` (see the module docstring)."""
    if isinstance(value, str):
        yield Slot(("input",), value, "prompt")
        return
    if not isinstance(value, list):
        return
    for i, item in enumerate(value):
        if isinstance(item, str):
            yield Slot(("input", i), item, "prompt")
        elif isinstance(item, dict) and item.get("type") == "function_call":
            if isinstance(item.get("arguments"), str):
                yield Slot(("input", i, "arguments"), item["arguments"], "tool_arguments")
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            if isinstance(item.get("output"), str):
                yield Slot(("input", i, "output"), item["output"], "content")
        else:
            yield from _message_slots(item, ("input", i))


def name_slots(body: dict) -> list[Slot]:
    """The ``name`` of each chat message that names a participant (a person's or an agent's
    name: every role but ``function`` and ``tool``, whose names are code's). Not prompt text in
    :func:`text_slots`; redaction replaces them whole (:mod:`redact.pipeline`)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [
        Slot(("messages", i, "name"), m["name"], "name")
        for i, m in enumerate(messages)
        if isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"] and m.get("role") not in ("function", "tool")
    ]


def message_texts(message: Any) -> list[str]:
    """The prompt texts of one chat message (its content, then its tool calls' arguments)."""
    return [s.text for s in _message_slots(message, ())]


def replace_texts(body: dict, slots: Sequence[Slot], texts: Sequence[str]) -> dict:
    """A copy of ``body`` with each slot's string replaced by the matching one of ``texts``."""
    if len(slots) != len(texts):
        raise ConfigError(f"{len(slots)} slots but {len(texts)} texts")
    out = copy.deepcopy(body)
    for slot, text in zip(slots, texts):
        node: Any = out
        for key in slot.path[:-1]:
            node = node[key]
        node[slot.path[-1]] = text
    return out


def prompt_token_ids(texts: Sequence[str], tokenizer: Any) -> np.ndarray:
    """The prompt's token ids: each text encoded on its own (no special tokens), concatenated.

    ``tokenizer`` is a loaded :class:`tokenizers.Tokenizer` (:func:`replay.tokenizer.load_tokenizer`).
    """
    if not texts:
        return np.zeros(0, np.uint32)
    return np.concatenate(text_token_ids(texts, tokenizer))


def text_token_ids(texts: Sequence[str], tokenizer: Any) -> list[np.ndarray]:
    """Each text's token ids on its own (no special tokens): :func:`prompt_token_ids` is their
    concatenation, so a caller may cache them per text."""
    encoded = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [np.asarray(e.ids, dtype=np.uint32) for e in encoded]


def body_json(obj: Any) -> str:
    """``obj`` as compact JSON text, non-ASCII characters as they are (not ``\\u`` escapes).

    CPython's encoder is about twice as fast with ``ensure_ascii`` (a replay serializes every
    body it sends), and its output is the same text wherever it holds no ``\\u`` escape: control
    characters are escaped alike either way, so an escape there means a non-ASCII character (or
    a backslash before a ``u``), and only then is the text made again without it."""
    text = json.dumps(obj, separators=(",", ":"))
    if "\\u" in text:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text
