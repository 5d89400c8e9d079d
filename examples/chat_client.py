"""A chat client with PII in its prompts, for trying the capture end to end.

Sessions come from the seeded synthetic corpus the redaction tests use (``examples.pii_corpus``: names,
emails, phone numbers, card numbers, addresses, API keys and JWTs in user turns, shared system
prompts). Each session is a real conversation through the official ``openai`` SDK: its user turns
in order, each sent with the whole history so far, the engine's own streamed answers included,
then a short think time. Sessions start at the corpus's (Poisson) start times, sped up.

    python examples/chat_client.py --base-url http://127.0.0.1:8080/v1 --sessions 30
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass
class Session:
    start_s: float
    system: str | None
    user_turns: list[str]


def sessions_of(n_sessions: int, seed: int = 0) -> list[Session]:
    """The corpus's sessions: start time, system prompt, user turns in order."""
    from pii_corpus import make_corpus  # examples/ is on the path: run from there, or by the quickstart

    corpus = make_corpus(n_sessions, seed=seed, turns_mean=4)
    last: dict[int, int] = {}
    first: dict[int, float] = {}
    for i, sid in enumerate(corpus.session_ids):
        last[sid] = i
        first.setdefault(sid, float(corpus.arrival_s[i]))
    out = []
    for sid, i in last.items():
        messages = corpus.requests[i]["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), None)
        users = [m["content"] for m in messages if m["role"] == "user"]
        out.append(Session(first[sid], system, users))
    return sorted(out, key=lambda s: s.start_s)


def run(
    base_url: str,
    n_sessions: int = 30,
    seed: int = 0,
    speedup: float = 2.0,
    max_tokens: int = 48,
    model: str = "sim",
    think_s: tuple[float, float] = (0.3, 1.5),
) -> dict[str, int]:
    """Play the sessions against ``base_url`` (an OpenAI-compatible /v1); returns counts."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-demo-not-a-real-key", max_retries=0, timeout=120)
    counts = {"requests": 0, "errors": 0}
    lock = threading.Lock()
    t0 = time.monotonic()

    def play(session: Session, rng: random.Random) -> None:
        time.sleep(max(0.0, session.start_s / speedup - (time.monotonic() - t0)))
        history = [{"role": "system", "content": session.system}] if session.system else []
        for text in session.user_turns:
            history.append({"role": "user", "content": text})
            try:
                stream = client.chat.completions.create(model=model, messages=history, stream=True, max_tokens=max_tokens)
                answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            except Exception:  # noqa: BLE001 - a failed request ends its session, as a user would leave
                with lock:
                    counts["errors"] += 1
                return
            with lock:
                counts["requests"] += 1
            history.append({"role": "assistant", "content": answer})
            time.sleep(rng.uniform(*think_s))

    sessions = sessions_of(n_sessions, seed)
    with ThreadPoolExecutor(max_workers=min(64, len(sessions) or 1)) as pool:
        for i, s in enumerate(sessions):
            pool.submit(play, s, random.Random(seed * 1000 + i))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1 (the capture proxy)")
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speedup", type=float, default=2.0, help="session starts this many times faster than the corpus's")
    ap.add_argument("--model", default="sim")
    args = ap.parse_args()
    print(run(args.base_url, args.sessions, args.seed, args.speedup, model=args.model))


if __name__ == "__main__":
    main()
