"""The asyncio + aiohttp open-loop sender the benchmarks measure the runner against.

Built the way vLLM's `bench serve` sends: sleep until start + offset, then create a task per
request that posts it and reads its SSE stream, parsing each `data:` line as JSON. uvloop runs the
event loop when it is installed (the `bench` extra). Shared by runner_accuracy.py and
runner_memory.py, so both compare against the same peer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence

import numpy as np


async def _send_all(
    url: str, offsets_s: Sequence[float], body_of: Callable[[int], bytes], timeout_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    import aiohttp

    n = len(offsets_s)
    intended = np.zeros(n)
    sent = np.zeros(n)
    ended = np.full(n, np.nan)  # the answer read to its end (200 answers only)
    ok = 0
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:

        async def send(i: int, due: float) -> None:
            nonlocal ok
            intended[i] = due
            sent[i] = time.perf_counter()
            async with session.post(
                url + "/v1/chat/completions", data=body_of(i), headers={"Content-Type": "application/json"}
            ) as resp:
                async for line in resp.content:
                    line = line.strip()
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        json.loads(line[6:])
                if resp.status == 200:
                    ended[i] = time.perf_counter()
                    ok += 1

        start = time.perf_counter()
        tasks = []
        for i, off in enumerate(offsets_s):
            delay = start + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(i, start + off)))
        await asyncio.gather(*tasks, return_exceptions=True)
    return intended, sent, ended, ok


def _run(coro):
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def send_open_loop(
    url: str, offsets_s: Sequence[float], body_of: Callable[[int], bytes], timeout_s: float = 60.0
) -> tuple[np.ndarray, np.ndarray, int]:
    """Send request i (body ``body_of(i)``) at ``offsets_s[i]`` after the start; returns the
    intended and actual send times (perf_counter seconds) and the number of 200 answers."""
    intended, sent, _, ok = _run(_send_all(url, offsets_s, body_of, timeout_s))
    return intended, sent, ok


def e2e_open_loop(
    url: str, offsets_s: Sequence[float], body_of: Callable[[int], bytes], timeout_s: float = 60.0
) -> tuple[np.ndarray, int]:
    """As :func:`send_open_loop`; returns each 200 answer's end to end time from its actual send
    (seconds) and the number of requests without one."""
    _, sent, ended, ok = _run(_send_all(url, offsets_s, body_of, timeout_s))
    done = ~np.isnan(ended)
    return ended[done] - sent[done], len(offsets_s) - ok
