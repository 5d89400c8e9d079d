"""The main job on a fresh clone: generate a production-shaped workload and sweep it at rising rates.

No server is needed: without --url, `replay sweep` starts the embedded simulated engine (an
OpenAI-compatible server with a real tokenizer, prefix cache and continuous batching, timed like a
Llama-3-8B on an A100). It replays the workload at 1, 2, 4 and 8 req/s for 20 s each, prints the
stage table with the saturation point and leaves the results in results/quickstart/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    trace = out / "quickstart.parquet"
    replay = [sys.executable, "-m", "replay.cli.main"]
    subprocess.run([*replay, "generate", "-o", str(trace), "--requests", "400", "--seed", "1"], check=True)
    subprocess.run([*replay, "inspect", str(trace)], check=True)
    return subprocess.run(
        [*replay, "sweep", str(trace), "--rates", "1,2,4,8", "--duration", "20s",
         "--slo", "ttft=1s,tpot=50ms", "--out", str(out / "quickstart")],
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
