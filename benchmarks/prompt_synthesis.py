"""How fast are the prompts of a token-only trace built, as `replay run` builds them while it sends?

The Azure 2023 conversation trace (../shared/data/traces/azure_llm_2023_conv.csv), imported as
`replay import azure` does (token counts, no text; input p50 about 1,000 tokens), is turned into
the bodies the runner sends by `Plan.body_windows` (ours: the texts drawn in Rust,
rust/core/src/synth.rs, a window at a time, bodies dumped once). Beside it, same rows, same
process: the same texts drawn by numpy (`PromptVocab.sample` from the request's own
`SeedSequence`, rendered in Python, the body dumped, loaded and dumped again as the replay did
before). Both make the same bodies (checked on every row), so the ratio is the speed-up alone.
Printed: rows, mean input tokens, req/s of each, their ratio, peak RSS. Not a pass/fail test;
the target ([9]) is >= 10,000 req/s of 1,000-token prompts on two cores.

usage: python benchmarks/prompt_synthesis.py [--rows 19366] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AZURE = ROOT.parent / "shared" / "data" / "traces" / "azure_llm_2023_conv.csv"


def numpy_bodies(trace, plan) -> list[bytes]:
    """The bodies as numpy draws their texts (the rule in replay.synth, written out in Python)."""
    from replay.plan import _rewrite_body
    from replay.prompts import prompt_vocab
    from replay.synth import _REQUEST_DOMAIN, Synthesis, request_key

    synthesis = Synthesis.parse(trace.meta.synthesis, "trace")
    vocab = prompt_vocab(trace.meta.tokenizer)
    rows = plan.rows.select("request_id", "model", "input_tokens", "max_tokens", "output_tokens").rows()
    out = []
    for i, (rid, model, n, max_tokens, output_tokens) in enumerate(rows):
        seq = np.random.SeedSequence([synthesis.seed % (1 << 64), request_key(rid), _REQUEST_DOMAIN])
        text = vocab.render(vocab.sample(n, np.random.default_rng(seq)))
        mt = max_tokens if max_tokens is not None else output_tokens
        body: dict = {} if model is None else {"model": model}
        body["messages"] = [{"role": "user", "content": text}]
        body["max_tokens"] = int(mt)
        stored = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        out.append(_rewrite_body(stored, i, model=plan.model, max_tokens=mt, ignore_eos=plan.ignore_eos)[0])
    return out


def ours(plan) -> list[bytes]:
    out = []
    for data, offsets in plan.body_windows():
        out.extend(data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=19366)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not AZURE.exists():
        sys.exit(f"{AZURE} is missing: this benchmark builds the public Azure conversation trace's prompts")
    from capture.importers import import_azure
    from replay.config import RunConfig
    from replay.plan import build_plan
    from replay.trace import read_trace

    with tempfile.TemporaryDirectory(prefix="prompt-synthesis-") as tmp:
        path = Path(tmp) / "azure.parquet"
        import_azure(AZURE, path, limit=args.rows)
        trace = read_trace(path)
        plan = build_plan(trace, RunConfig(url="http://127.0.0.1:1"), model="m")
        tokens = float(plan.rows["input_tokens"].mean())
        best = {"ours": float("inf"), "numpy": float("inf")}
        for _ in range(args.repeats):
            for name, make in (("ours", lambda: ours(plan)), ("numpy", lambda: numpy_bodies(trace, plan))):
                t = time.perf_counter()
                bodies = make()
                best[name] = min(best[name], time.perf_counter() - t)
                if name == "ours":
                    mine = bodies
                else:
                    assert bodies == mine, "the two paths made different bodies"
        n = plan.n
        rate = {k: n / v for k, v in best.items()}
        print(
            f"{n} requests, mean {tokens:.0f} input tokens, bodies mean {np.mean([len(b) for b in mine]):.0f} B; "
            f"best of {args.repeats}"
        )
        print(f"  ours (Rust draws, one dump)      {rate['ours']:9.0f} req/s")
        print(f"  numpy draws, Python render, JSON {rate['numpy']:9.0f} req/s")
        print(
            f"  ratio ours / numpy: {rate['ours'] / rate['numpy']:.2f}x;  "
            f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
