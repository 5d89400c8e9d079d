"""Which session a logged or live request belongs to, and which earlier request it continues.

Owns :class:`SessionLinker`, the one session rule, applied a request at a time in arrival order
(:mod:`capture.importers.logs` over a log, :mod:`capture.record` over live traffic):

A request whose log names a session (``session_id``; else a group id such as
LiteLLM's or Langfuse's trace id, when at least two requests of the file share it: a group id
seen once is no evidence, LiteLLM makes a fresh one per call) is in that session: its turn is
the number of earlier requests of that session and its parent is the latest of them.
Without one, the conversation decides. Each chat request's messages are normalized (each
message is its role and :func:`replay.bodies.message_texts`) and hashed as a chain, one hash
per prefix, so finding the earlier request a conversation continues costs one dictionary
look-up per message (O(total messages), never pairwise). A chat request continues earlier
request P when its messages start with

1. P's messages followed by P's answer (an assistant message whose text is P's recorded
   response text), or, where P has no recorded answer,
2. P's messages followed by any assistant message,

possibly followed by further messages. P's answer matches the assistant message as it is
(its text and its tool calls' arguments, where the log or stream recorded the calls) or by its
text alone (an answer recorded without its calls). The longest such match wins (rule 1 before
rule 2 at the same length); among earlier requests with the very same match, the latest one with
no next turn yet, else the latest. The request then joins P's session as P's next turn
(``parent_request_id`` = P, ``turn`` = P's turn + 1). A request that continues nothing known
begins a new session whose id is its own request id (turn 0). Two conversations that only
share a system prompt (or any prefix that is not a whole earlier request plus an assistant
message) never merge.

What waits for what (schema 3 ``depends_on``, :mod:`replay.dag`), from the same messages:

- a request depends on P, the request it continues (parallel requests that continue the same
  answer are siblings: each depends on P);
- and on every other earlier request whose answer it carries in a ``tool`` message after P's
  part of the conversation (a subagent's final answer returned as a tool result: a join); an
  answer is known by its text's hash, for answers of at least :data:`MIN_ANSWER_CHARS`
  characters (a short "ok" proves nothing);
- a request that continues nothing, whose first user message is the arguments of a tool call an
  earlier answer made (the whole arguments string, or a string value in its JSON object), is a
  subagent's first request: it depends on the request that made the call, and its session's
  ``parent_session_id`` is that request's session (later turns of the subagent inherit it).

``wait_us`` is the request's arrival less the latest end (arrival + ``e2e_us``) of its
dependencies, where each end is known and not after the arrival.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any, NamedTuple

__all__ = ["SessionLinker", "Link", "MIN_ANSWER_CHARS"]

# an answer (or tool call arguments) shorter than this is not evidence of a dependency
MIN_ANSWER_CHARS = 16


def _message_key(message: Any) -> bytes:
    from replay.bodies import message_texts

    role = message.get("role") if isinstance(message, dict) else None
    return json.dumps([role, message_texts(message)], ensure_ascii=False, separators=(",", ":")).encode()


def _chain(parent: bytes, message_key: bytes) -> bytes:
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(message_key)
    return h.digest()


_ROOT = bytes(16)


def _is_assistant(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant"


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _content_only(message: dict) -> dict:
    """An assistant message as its text alone (an answer recorded without its tool calls)."""
    return {"role": "assistant", "content": message.get("content")}


def _call_texts(arguments: str) -> list[str]:
    """What a subagent's first message may be of a tool call: its arguments string, and each
    string value of the JSON object it holds."""
    out = [arguments]
    try:
        obj = json.loads(arguments)
    except ValueError:
        return out
    if isinstance(obj, dict):
        out += [v for v in obj.values() if isinstance(v, str)]
    return out


class Link(NamedTuple):
    """Where a request belongs (:meth:`SessionLinker.add`)."""

    session_id: str
    parent_request_id: str | None
    turn: int
    depends_on: list[str]
    wait_us: int | None
    parent_session_id: str | None


class SessionLinker:
    """The session rule of the module docstring, applied one request at a time (requests in
    arrival order, each with its recorded answer): the log importer runs it over a log,
    the recording proxy (``capture.record``) over live traffic as requests end.

    ``max_requests`` bounds the memory of a long-running linker: the oldest requests are
    forgotten (a conversation continuing one of them starts a new session).
    """

    def __init__(self, max_requests: int | None = None) -> None:
        self.max_requests = max_requests
        self._n = 0
        self._info: dict[int, tuple[str, str, int]] = {}  # index -> (request id, session, turn)
        self._last_of_session: dict[str, int] = {}
        self._turns_in_session: dict[str, int] = defaultdict(int)
        # key -> earlier requests (indices) it continues: after their answer, or (no answer)
        # after any assistant message
        self._answered: dict[bytes, list[int]] = defaultdict(list)
        self._unanswered: dict[bytes, list[int]] = defaultdict(list)
        self._has_child: set[int] = set()
        # the graph: answers and tool call arguments by their text's hash -> the request; each
        # request's end (µs, None: unknown) and its session's parent session
        self._by_answer: dict[bytes, int] = {}
        self._by_call: dict[bytes, int] = {}
        self._texts: dict[int, list[tuple[dict, bytes]]] = {}
        self._end: dict[int, int | None] = {}
        self._parent_session: dict[str, str] = {}
        self.linked = 0
        self.in_log_sessions = 0
        self.joins = 0
        self.subagents = 0

    def add(
        self,
        request_id: str,
        api: str,
        body: dict,
        response: str | None,
        log_session: str | None = None,
        *,
        calls: tuple[str, ...] | list[str] = (),
        arrival_us: int | None = None,
        end_us: int | None = None,
    ) -> Link:
        """Where this request belongs (its session, the request it continues, what it waits for;
        ``calls``: the arguments of its answer's tool calls, ``arrival_us`` / ``end_us``: when it
        arrived and ended, for the waits); it is then known as a conversation later requests may
        continue."""
        i = self._n
        self._n += 1
        messages = body.get("messages") if api == "chat" else None
        prefix: list[bytes] = []
        if isinstance(messages, list):
            h = _ROOT
            for m in messages:
                h = _chain(h, _message_key(m))
                prefix.append(h)
        parent_id: str | None = None
        deps: list[int] = []
        parent, continued = _continued(prefix, messages, self._answered, self._unanswered, self._has_child)
        if log_session is not None:
            self.in_log_sessions += 1
            sid = log_session
            prev = self._last_of_session.get(sid)
            if prev is not None:
                parent_id = self._info[prev][0]
                self._has_child.add(prev)
                deps.append(prev)
            turn = self._turns_in_session[sid]
        elif parent is None:
            sid, turn = request_id, 0
        else:
            self.linked += 1
            parent_id, sid, parent_turn = self._info[parent]
            turn = parent_turn + 1
            self._has_child.add(parent)
            deps.append(parent)
        if isinstance(messages, list):
            deps += self._carried_answers(messages[continued:], deps)
            if not deps and turn == 0:
                caller = self._caller(messages)
                if caller is not None:
                    deps.append(caller)
                    self._parent_session.setdefault(sid, self._info[caller][1])
                    self.subagents += 1
        self._turns_in_session[sid] += 1
        self._last_of_session[sid] = i
        self._info[i] = (request_id, sid, turn)
        self._end[i] = end_us
        self._register(i, prefix, response, calls)
        ends = [self._end.get(d) for d in deps]
        wait = None
        if deps and arrival_us is not None and all(e is not None for e in ends):
            latest = max(e for e in ends if e is not None)
            wait = arrival_us - latest if arrival_us >= latest else None
        link = Link(sid, parent_id, turn, [self._info[d][0] for d in deps], wait, self._parent_session.get(sid))
        if self.max_requests is not None and len(self._info) > self.max_requests:
            self._forget(i - self.max_requests)
        return link

    def _carried_answers(self, messages: list, already: list[int]) -> list[int]:
        """Earlier requests whose answer a ``tool`` message among ``messages`` carries."""
        out: list[int] = []
        for m in messages:
            if not (isinstance(m, dict) and m.get("role") == "tool"):
                continue
            text = "".join(_message_texts(m))
            j = self._by_answer.get(_text_key(text)) if len(text) >= MIN_ANSWER_CHARS else None
            if j is not None and j not in already and j not in out:
                out.append(j)
                self.joins += 1
        return out

    def _caller(self, messages: list) -> int | None:
        """The request whose answer's tool call this conversation's first user message is."""
        first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        if first is None:
            return None
        text = "".join(_message_texts(first))
        return self._by_call.get(_text_key(text)) if len(text) >= MIN_ANSWER_CHARS else None

    def _register(self, i: int, prefix: list[bytes], response: str | None, calls: tuple[str, ...] | list[str]) -> None:
        where: list[tuple[dict, bytes]] = []
        if prefix:
            if response or calls:
                answer: dict[str, Any] = {"role": "assistant", "content": response}
                if calls:
                    answer["tool_calls"] = [{"type": "function", "function": {"arguments": a}} for a in calls]
                keys = {_chain(prefix[-1], _message_key(answer))}
                if response:
                    keys.add(_chain(prefix[-1], _message_key(_content_only(answer))))
                where += [(self._answered, k) for k in keys]
            else:
                where.append((self._unanswered, prefix[-1]))
            for table, key in where:
                table[key].append(i)
        if response and len(response) >= MIN_ANSWER_CHARS:
            k = _text_key(response)
            self._by_answer[k] = i
            where.append((self._by_answer, k))
        for arguments in calls:
            for text in _call_texts(arguments):
                if len(text) >= MIN_ANSWER_CHARS:
                    k = _text_key(text)
                    self._by_call[k] = i
                    where.append((self._by_call, k))
        if self.max_requests is not None:  # kept only to forget it again
            self._texts[i] = where

    def _forget(self, i: int) -> None:
        info = self._info.pop(i, None)
        if info is None:
            return
        for table, key in self._texts.pop(i, []):
            got = table.get(key)
            if isinstance(got, list):
                if i in got:
                    got.remove(i)
                if not got:
                    del table[key]
            elif got == i:
                del table[key]
        self._end.pop(i, None)
        self._has_child.discard(i)
        sid = info[1]
        if self._last_of_session.get(sid) == i:
            del self._last_of_session[sid]
            self._turns_in_session.pop(sid, None)

    @property
    def sessions(self) -> int:
        return len(self._turns_in_session)


def _message_texts(message: Any) -> list[str]:
    from replay.bodies import message_texts

    return message_texts(message)


def _continued(
    prefix: list[bytes], messages: Any, answered: dict, unanswered: dict, has_child: set[int]
) -> tuple[int | None, int]:
    """The earlier request this chat request continues (longest match), and how many of its
    messages that match covers; ``(None, 0)`` when it continues nothing."""
    for k in range(len(prefix), 0, -1):  # k messages matched, the last an assistant message
        candidates = answered.get(prefix[k - 1])
        if not candidates and k >= 2 and _is_assistant(messages[k - 1]):
            candidates = answered.get(_chain(prefix[k - 2], _message_key(_content_only(messages[k - 1]))))
            candidates = candidates or unanswered.get(prefix[k - 2])
        if candidates:
            for j in reversed(candidates):
                if j not in has_child:
                    return j, k
            return candidates[-1], k
    return None, 0
