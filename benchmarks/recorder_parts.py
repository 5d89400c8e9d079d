"""Two parts of a capture record, compiled against their pure-Python spelling, side by side.

- SSE framing of a streamed answer (`capture.record._sse_events`, the runner's `SseParser` through
  `replay._engine.sse_events`) against the splitter the recorder had in Python (blank-line cuts,
  `data:` lines joined), on the 21-event answer the capture benchmarks' upstream sends.
- Chained block hashes (`replay.blocks.block_hashes`, `replay_core::blocks`) against the same
  chain spelled with `hashlib.blake2b` (the documented rule, as the recorder computed it before),
  on `--tokens` ids in blocks of 16.

Both outputs are checked equal first. Then each is timed over `--repeats` calls, the best of
`--rounds` such runs kept, and the ratio printed. Then the whole recorder without redaction (`benchmarks/recorder_cost.py`'s
measure) with the Python parts put back in place of the compiled ones, rounds alternating, on
`--workload`: what the two parts save of a record.

usage: python benchmarks/recorder_parts.py [--repeats 3000] [--tokens 2000] [--rounds 3]
                                           [--workload pii|generated] [--requests 1500]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def python_sse_events(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The recorder's Python splitter before the compiled one (the peer)."""
    out: list[tuple[int, bytes]] = []
    pending = b""
    for t, data in chunks:
        pending += data
        while True:
            cuts = [(at, len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (at := pending.find(sep)) >= 0]
            if not cuts:
                break
            at, width = min(cuts)
            event, pending = pending[:at], pending[at + width :]
            payload = b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
            if payload:
                out.append((t, payload))
    return out


def python_block_hashes(ids: np.ndarray, block_size: int) -> list[int]:
    """The block-hash chain spelled with hashlib (the peer)."""
    n = len(ids) // block_size
    data = np.ascontiguousarray(np.asarray(ids)[: n * block_size].astype("<u4")).tobytes()
    parent, digests = bytes(8), []
    for start in range(0, n * block_size * 4, block_size * 4):
        parent = hashlib.blake2b(parent + data[start : start + block_size * 4], digest_size=8).digest()
        digests.append(parent)
    return np.frombuffer(b"".join(digests), dtype="<u8").tolist()


def timed(fn, arg, *rest, repeats: int) -> float:
    began = time.perf_counter()
    for _ in range(repeats):
        fn(arg, *rest)
    return (time.perf_counter() - began) / repeats * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3000)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", choices=("pii", "generated"), default="pii")
    ap.add_argument("--requests", type=int, default=1500)
    args = ap.parse_args()

    import capture.record as record
    import replay.blocks as blocks
    from recorder_cost import measure, workload_bodies
    from tests.integration.nginx import sse_events

    chunks = [(100 + j * 10, e.encode()) for j, e in enumerate(sse_events())]
    ids = np.random.default_rng(0).integers(0, 50_000, args.tokens).astype("<u4")
    compiled_sse, compiled_hashes = record._sse_events, blocks.block_hashes
    assert compiled_sse(chunks) == python_sse_events(chunks)
    assert compiled_hashes(ids, 16) == python_block_hashes(ids, 16)
    print("| part | Python (µs) | compiled (µs) | ratio |")
    print("|---|---|---|---|")
    for name, py, ours, arg, rest in (
        (f"SSE framing, {len(chunks)} reads", python_sse_events, compiled_sse, chunks, ()),
        (f"block hashes, {args.tokens} ids", python_block_hashes, compiled_hashes, ids, (16,)),
    ):
        a = min(timed(py, arg, *rest, repeats=args.repeats) for _ in range(args.rounds))
        b = min(timed(ours, arg, *rest, repeats=args.repeats) for _ in range(args.rounds))
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |")

    print(f"\nthe recorder without redaction, {args.requests} requests of the {args.workload} workload:")
    bodies = workload_bodies(args.workload, args.requests)
    print("| round | CPU / record, Python parts (ms) | compiled parts (ms) |")
    print("|---|---|---|")
    try:
        for r in range(args.rounds):
            got = []
            for sse, hashes in ((python_sse_events, python_block_hashes), (compiled_sse, compiled_hashes)):
                record._sse_events, blocks.block_hashes = sse, hashes  # type: ignore[assignment]
                got.append(measure(0, bodies, 64)["cpu_ms"])
            print(f"| {r + 1} | {got[0]:.3f} | {got[1]:.3f} |")
    finally:
        record._sse_events, blocks.block_hashes = compiled_sse, compiled_hashes  # type: ignore[assignment]


if __name__ == "__main__":
    main()
