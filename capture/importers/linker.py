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

possibly followed by further messages. The longest such match wins (rule 1 before rule 2 at
the same length); among earlier requests with the very same match, the latest one with no
next turn yet, else the latest. The request then joins P's session as P's next turn
(``parent_request_id`` = P, ``turn`` = P's turn + 1). A request that continues nothing known
begins a new session whose id is its own request id (turn 0). Two conversations that only
share a system prompt (or any prefix that is not a whole earlier request plus an assistant
message) never merge.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

__all__ = ["SessionLinker"]


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
        self._keys: dict[int, tuple[dict, bytes]] = {}  # index -> where it is registered
        self._last_of_session: dict[str, int] = {}
        self._turns_in_session: dict[str, int] = defaultdict(int)
        # key -> earlier requests (indices) it continues: after their answer, or (no answer)
        # after any assistant message
        self._answered: dict[bytes, list[int]] = defaultdict(list)
        self._unanswered: dict[bytes, list[int]] = defaultdict(list)
        self._has_child: set[int] = set()
        self.linked = 0
        self.in_log_sessions = 0

    def add(
        self, request_id: str, api: str, body: dict, response: str | None, log_session: str | None = None
    ) -> tuple[str, str | None, int]:
        """``(session_id, parent_request_id, turn)`` of this request; it is then known as a
        conversation later requests may continue."""
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
        if log_session is not None:
            self.in_log_sessions += 1
            sid = log_session
            prev = self._last_of_session.get(sid)
            if prev is not None:
                parent_id = self._info[prev][0]
                self._has_child.add(prev)
            turn = self._turns_in_session[sid]
        else:
            parent = _continued(prefix, messages, self._answered, self._unanswered, self._has_child)
            if parent is None:
                sid, turn = request_id, 0
            else:
                self.linked += 1
                parent_id, sid, parent_turn = self._info[parent]
                turn = parent_turn + 1
                self._has_child.add(parent)
        self._turns_in_session[sid] += 1
        self._last_of_session[sid] = i
        self._info[i] = (request_id, sid, turn)
        if prefix:
            if response:
                table = self._answered
                key = _chain(prefix[-1], _message_key({"role": "assistant", "content": response}))
            else:
                table, key = self._unanswered, prefix[-1]
            table[key].append(i)
            if self.max_requests is not None:  # kept only to forget it again
                self._keys[i] = (table, key)
        if self.max_requests is not None and len(self._info) > self.max_requests:
            self._forget(i - self.max_requests)
        return sid, parent_id, turn

    def _forget(self, i: int) -> None:
        info = self._info.pop(i, None)
        if info is None:
            return
        where = self._keys.pop(i, None)
        if where is not None:
            table, key = where
            table[key].remove(i)
            if not table[key]:
                del table[key]
        self._has_child.discard(i)
        sid = info[1]
        if self._last_of_session.get(sid) == i:
            del self._last_of_session[sid]
            self._turns_in_session.pop(sid, None)

    @property
    def sessions(self) -> int:
        return len(self._turns_in_session)


def _continued(prefix: list[bytes], messages: Any, answered: dict, unanswered: dict, has_child: set[int]) -> int | None:
    """The earlier request this chat request continues (longest match), or None."""
    for k in range(len(prefix), 0, -1):  # k messages matched, the last an assistant message
        candidates = answered.get(prefix[k - 1])
        if not candidates and k >= 2 and _is_assistant(messages[k - 1]):
            candidates = unanswered.get(prefix[k - 2])
        if candidates:
            for j in reversed(candidates):
                if j not in has_child:
                    return j
            return candidates[-1]
    return None
