"""Does a causal replay at ``--speedup K`` keep live's times between reuses of a prefix? (issue [10])

A causal stage (``--sessions causal``) compresses the think times between a session's turns, not
the answers: those take what the target takes. This script measures what that does to the fidelity
report's ``cache.reuse_time.ks`` (the KS distance between live's and the replay's times from one
use of a prompt prefix to the next, in live seconds) on the quickstart's capture:

1. a capture made exactly as examples/quickstart.py's step 1 makes it (its ``capture()``: the
   bundled chat client with PII -> ``replay capture`` with Presidio -> ``replay serve-sim`` at
   the quickstart's time scale, 0.2), ``--sessions`` chats (default 1,000, about 4,000 requests);
2. ``replay run`` of every captured request, ``--sessions causal --retry-invalid 2``, once per
   case, each against its own embedded engine (``--sim-config '{"time_scale": ...}'``), then
   ``replay fidelity`` of the capture against it:

   * ``xK, engine as captured``: ``--speedup K`` (default 2) on an engine at the captured scale:
     think times compressed K times, answers not;
   * ``xK, engine K x faster``: ``--speedup K`` on an engine at the captured scale / K (what the
     quickstart's step 4a runs): the whole captured system compressed K times;
   * ``x1, engine as captured``: the captured pace.

Printed for each case: ``cache.reuse_time.ks`` with its A/A distance and bound, the verdict of that
metric and of the report, the interarrival CV distance beside its bound, the replay's wall time
and peak RSS (``ru_maxrss`` of the ``replay run`` process, from ``wait4``; the embedded engine runs
inside it), and the fidelity command's peak RSS. Not a pass/fail test; about 8 minutes on a 2-core
machine with the default 1,000 chats. docs/latency.md ("Causal sessions") quotes its figures.

    python benchmarks/causal_speedup.py [--sessions 1000] [--speedup 2] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import quickstart  # noqa: E402  (examples/quickstart.py: the capture of step 1, the engine's flag)

CLIENT_SPEEDUP = 15.0  # the quickstart's full run drives its chats this many times faster than their think times
REPORTED = ("cache.reuse_time.ks", "arrivals.interarrival_cv")


def timed(args: list[str], log: Path) -> tuple[int, float, float]:
    """Run one `replay` command with its output to `log`: (exit code, wall s, peak RSS MiB)."""
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen([*quickstart.REPLAY, *args], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.monotonic() - t0, usage.ru_maxrss / 1024


def metrics_of(report: Path) -> tuple[str, dict[str, dict]]:
    """The report's state and, for each REPORTED metric, its entry in the (single) stage."""
    doc = json.loads(report.read_text())
    (stage,) = doc["stages"]
    return doc["state"], {m["name"]: m for m in stage["metrics"] if m["name"] in REPORTED}


def num(metric: dict, field: str) -> str:
    value = metric.get(field)
    return "-" if value is None else f"{value:.3f}"


def run_case(trace: Path, work: Path, name: str, speedup: float, time_scale: float) -> dict:
    replay, fid = work / f"replay-{name}", work / f"fidelity-{name}"
    what = f"replay run --speedup {speedup:g} --sessions causal, engine at time scale {time_scale:g}"
    print(f"[{name}] {what}", file=sys.stderr, flush=True)
    rc, wall_s, rss = timed(
        [
            "run",
            str(trace),
            "--speedup",
            f"{speedup:g}",
            "--sessions",
            "causal",
            "--retry-invalid",
            "2",
            *quickstart.sim_args(time_scale),
            "--out",
            str(replay),
        ],
        work / f"replay-{name}.log",
    )
    if rc != 0:
        raise SystemExit(f"causal_speedup: `replay run` of case {name} exited {rc} (see {work / f'replay-{name}.log'})")
    frc, _, fid_rss = timed(["fidelity", str(trace), str(replay), "--out", str(fid)], work / f"fidelity-{name}.log")
    if frc not in (0, 1, 3):
        raise SystemExit(f"causal_speedup: `replay fidelity` of case {name} exited {frc} (see {work / f'fidelity-{name}.log'})")
    state, metrics = metrics_of(fid / "fidelity.json")
    return {
        "case": name,
        "speedup": speedup,
        "time_scale": time_scale,
        "report": state,
        "metrics": {k: {f: m.get(f) for f in ("distance", "aa", "bound", "ceiling", "state")} for k, m in metrics.items()},
        "replay_s": round(wall_s, 1),
        "replay_rss_mib": round(rss),
        "fidelity_rss_mib": round(fid_rss),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1000, help="chats in the capture (default 1000, the quickstart's)")
    ap.add_argument(
        "--speedup", type=float, default=float(quickstart.WHOLE_SPEEDUP), help="K of the compressed cases (default 2)"
    )
    ap.add_argument("--out", type=Path, help="keep the capture, replays and reports here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    if args.sessions < 1 or args.speedup <= 1:
        ap.error("--sessions must be >= 1 and --speedup > 1")
    if args.out is not None and args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out}: not empty (the capture and replays are written there afresh)")
    with tempfile.TemporaryDirectory(prefix="causal-speedup-") as tmp:
        work = (args.out or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        key = work / "demo-redaction.key"
        key.write_text(secrets.token_hex(32))
        os.chmod(key, 0o600)
        trace = work / "capture"
        t0 = time.monotonic()
        quickstart.capture(trace, key, args.sessions, CLIENT_SPEEDUP)
        capture_s = time.monotonic() - t0
        k, scale = args.speedup, quickstart.TIME_SCALE
        cases = [
            run_case(trace, work, f"x{k:g}-engine-as-captured", k, scale),
            run_case(trace, work, f"x{k:g}-engine-{k:g}x-faster", k, scale / k),
            run_case(trace, work, "x1-engine-as-captured", 1.0, scale),
        ]
    result = {"sessions": args.sessions, "captured_time_scale": scale, "capture_s": round(capture_s, 1), "cases": cases}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"capture: {args.sessions} chats through the embedded engine at time scale {scale:g} in {capture_s:.0f} s")
    print(
        f"{'case':<26} {'reuse_time.ks':>13} {'A/A':>6} {'bound':>6} {'state':>11}  {'CV dist':>7} {'bound':>6}  "
        f"{'report':>11} {'replay s':>8} {'RSS MiB':>7} {'fid. RSS':>8}"
    )
    for c in cases:
        r, cv = (c["metrics"].get(name, {}) for name in REPORTED)  # a metric a small capture lacks prints as -
        print(
            f"{c['case']:<26} {num(r, 'distance'):>13} {num(r, 'aa'):>6} {num(r, 'bound'):>6} {r.get('state', '-'):>11}  "
            f"{num(cv, 'distance'):>7} {num(cv, 'bound'):>6}  {c['report']:>11} {c['replay_s']:>8.0f} "
            f"{c['replay_rss_mib']:>7} {c['fidelity_rss_mib']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
