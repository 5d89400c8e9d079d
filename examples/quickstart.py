"""The main job on a fresh clone: generate a production-shaped workload and sweep it at rising rates.

It starts a local streaming target itself (the workspace's `sse-bench-server`, built by the README's
first command), replays the workload at 1, 2, 4 and 8 req/s for 10 s each, prints the stage table
and leaves the results in results/quickstart/. (A later issue switches the target to the embedded
simulated engine.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "target" / "release" / "sse-bench-server"


def main() -> int:
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    trace = out / "quickstart.parquet"
    replay = [sys.executable, "-m", "replay.cli.main"]
    subprocess.run([*replay, "generate", "-o", str(trace), "--requests", "400", "--seed", "1"], check=True)
    subprocess.run([*replay, "inspect", str(trace)], check=True)
    if not SERVER.exists():
        print(f"error: {SERVER} missing: run `cargo build --release -p sse-bench-server` first", file=sys.stderr)
        return 2
    server = subprocess.Popen(
        [str(SERVER), "--host", "127.0.0.1", "--port", "0", "--chunks", "20", "--chunk-delay-us", "2000"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = server.stdout.readline().strip()  # "listening on 127.0.0.1:PORT"
        url = "http://" + line.rsplit(" ", 1)[-1]
        return subprocess.run(
            [*replay, "sweep", str(trace), "--url", url, "--rates", "1,2,4,8", "--duration", "10s",
             "--slo", "ttft=500ms,tpot=50ms", "--out", str(out / "quickstart")],
        ).returncode
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    sys.exit(main())
