"""Output equivalence: a lossless knob must not change what the model answers.

A sample of the workload's requests (the first ``SAMPLE`` chat bodies) is sent to the engine
greedily (temperature 0, the fixed ``seed`` ``SEED`` (0), ``TOKENS`` new tokens, not streamed)
once on the baseline and once on each candidate whose changes are all lossless. The seed pins
whatever sampling an engine still does at temperature 0 (the embedded engine, llama-server and
vLLM read a request's ``seed``). The answers are compared token by token (tokenized with the
trace's tokenizer; words, split on white space, for a trace whose tokenizer is not one this
package can load). Greedy decoding can flip at a near-tie (two tokens
within rounding of each other, which batch size and kernel choice move), after which the texts
differ for good. The tolerance for that: a request agrees when its tokens are the same, or first
differ at position ``NEAR_TIE_AFTER`` (8) or later; at most ``NEAR_TIE_REQUESTS`` (1) request of
the sample may differ that way. Any earlier difference, or more late ones, is a changed output.

The sample goes to a freshly started engine before the measured stage (``EngineMeasure``), so
every start answers from the same state: asked after the stage, llama-server answered the same
config differently from token 6, by what its slots still held. Each sample request's first
message starts with ``MARK``, so the sample shares no cached prefix with the workload and leaves
no cache hits behind for the stage.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from replay.errors import TargetError

__all__ = [
    "SAMPLE",
    "TOKENS",
    "SEED",
    "NEAR_TIE_AFTER",
    "NEAR_TIE_REQUESTS",
    "MARK",
    "greedy_answers",
    "marked",
    "compare",
    "encoder",
]

SAMPLE = 8
TOKENS = 16
SEED = 0
NEAR_TIE_AFTER = 8
NEAR_TIE_REQUESTS = 1
MARK = "Greedy sample.\n"


def marked(messages: Sequence[dict]) -> list[dict]:
    """``messages`` with ``MARK`` before the first message's text."""
    if not messages:
        return list(messages)
    first = dict(messages[0])
    content = first.get("content")
    if isinstance(content, list):  # content parts
        first["content"] = [{"type": "text", "text": MARK}, *content]
    else:
        first["content"] = MARK + (content or "")
    return [first, *messages[1:]]


def greedy_answers(url: str, bodies: Sequence[dict], model: str | None, timeout_s: float = 60.0) -> list[str]:
    """The engine's greedy answer to each chat body (its messages, :func:`marked`; everything else
    replaced)."""
    out = []
    for body in bodies:
        request = {"messages": marked(body["messages"]), "max_tokens": TOKENS, "temperature": 0, "seed": SEED, "stream": False}
        if model or body.get("model"):
            request["model"] = model or body.get("model")
        req = urllib.request.Request(
            f"{url.rstrip('/')}/v1/chat/completions",
            data=json.dumps(request).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - loopback engine
                answer = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise TargetError(f"{url}: a greedy sample request failed ({getattr(e, 'reason', e)})") from e
        out.append(answer["choices"][0]["message"].get("content") or "")
    return out


def encoder(tokenizer: str) -> Callable[[str], list]:
    """Text -> tokens under ``tokenizer`` (ids), or words when it cannot be loaded."""
    from replay.errors import ReplayError
    from replay.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(tokenizer)
    except (ReplayError, OSError, ValueError):
        return lambda text: text.split()
    return lambda text: tok.encode(text, add_special_tokens=False).ids


def compare(reference: Sequence[str], answers: Sequence[str], encode: Callable[[str], list[int]]) -> str | None:
    """None when ``answers`` match ``reference`` within the near-tie tolerance, else why not."""
    late = []
    for i, (a, b) in enumerate(zip(reference, answers)):
        ta, tb = encode(a), encode(b)
        if ta == tb:
            continue
        first = next((k for k, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        if first < NEAR_TIE_AFTER:
            return f"request {i} of the greedy sample answered differently from token {first}"
        late.append(i)
    if len(late) > NEAR_TIE_REQUESTS:
        return (
            f"{len(late)} requests of the greedy sample answered differently after {NEAR_TIE_AFTER} tokens "
            f"(at most {NEAR_TIE_REQUESTS} may, at a near-tie)"
        )
    return None
