"""The experiment ledger: every measurement a campaign made, failures included, in SQLite.

Rows are keyed by the campaign's identity (engine and its version, hardware, workload hash,
objective) and the config's canonical text (:func:`optimizer.space.config_key`). The hardware
is :func:`hardware_id` unless the identity names it: the machine type, the CPU model, the logical
CPU count and the GPUs ``nvidia-smi`` lists, so a ledger moved to other hardware measures again. A campaign run
again with the same identity finds what it measured before: a config already measured is not run
again, a config that failed is a dead end, and the baseline's noise floor is reused. Each row is
committed as soon as it is measured, so a killed campaign loses at most the experiment in flight.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from optimizer.space import config_key
from optimizer.verdict import Measurement

__all__ = ["Ledger", "Entry", "SCHEMA", "hardware_id", "NVIDIA_SMI_TIMEOUT_S"]

NVIDIA_SMI_TIMEOUT_S = 10.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign TEXT NOT NULL,          -- identity: engine, version, hardware, workload, objective (JSON)
    config TEXT NOT NULL,            -- canonical JSON of the config
    role TEXT NOT NULL,              -- baseline | candidate | confirm | recheck | diagnosis
    hypothesis TEXT,                 -- JSON: optimizer.hypotheses.hypothesis, with checks and diagnosis once judged
    value REAL,                      -- the objective, NULL when invalid
    invalid TEXT,                    -- why the measurement cannot be trusted
    details TEXT,                    -- JSON: stage summaries, engine metrics, ...
    verdict TEXT,                    -- better | same | worse | invalid (candidates)
    reason TEXT,
    started REAL NOT NULL,
    finished REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS by_config ON experiments (campaign, config);
"""


def _cpu_model() -> str:
    """/proc/cpuinfo's first "model name", else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _gpus() -> str:
    """The GPUs ``nvidia-smi`` names (``NVIDIA H200 x2``), or "none" when it is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "none"
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "none"
    names = Counter(line.strip() for line in done.stdout.splitlines() if line.strip()) if done.returncode == 0 else Counter()
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in names.items()) or "none"


@lru_cache(maxsize=1)
def hardware_id() -> str:
    """This machine as a ledger key: machine type, CPU model, logical CPUs, GPUs, e.g.
    ``x86_64; AMD EPYC 7B13; 2 CPUs; GPUs: none``."""
    return f"{platform.machine()}; {_cpu_model()}; {os.cpu_count() or 0} CPUs; GPUs: {_gpus()}"


@dataclass(frozen=True)
class Entry:
    id: int
    config: dict[str, Any]
    role: str
    hypothesis: dict | None
    measurement: Measurement
    verdict: str | None
    reason: str | None


class Ledger:
    """One SQLite file; ``campaign`` is the identity every row is written and read under."""

    def __init__(self, path: str | Path, campaign: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.campaign = json.dumps(dict(campaign), sort_keys=True, separators=(",", ":"))
        self._db = sqlite3.connect(self.path)
        self._db.executescript(SCHEMA)
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def record(
        self,
        config: Mapping[str, Any],
        role: str,
        measurement: Measurement,
        *,
        hypothesis: Mapping[str, Any] | None = None,
        verdict: str | None = None,
        reason: str | None = None,
        started: float | None = None,
        finished: float | None = None,
    ) -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO experiments (campaign, config, role, hypothesis, value, invalid, details, verdict, reason, "
            "started, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.campaign,
                config_key(config),
                role,
                json.dumps(hypothesis) if hypothesis else None,
                measurement.value,
                measurement.invalid,
                json.dumps(measurement.details, default=str),
                verdict,
                reason,
                started or now,
                finished or now,
            ),
        )
        self._db.commit()
        row = cur.lastrowid
        assert row is not None  # set by every INSERT
        return row

    def set_verdict(self, row: int, verdict: str, reason: str, hypothesis: Mapping[str, Any] | None = None) -> None:
        """The verdict on row ``row``, and its hypothesis with what was checked (when given)."""
        if hypothesis is not None:
            self._db.execute("UPDATE experiments SET hypothesis = ? WHERE id = ?", (json.dumps(hypothesis), row))
        self._db.execute("UPDATE experiments SET verdict = ?, reason = ? WHERE id = ?", (verdict, reason, row))
        self._db.commit()

    def entries(self, config: Mapping[str, Any] | None = None, role: str | None = None) -> list[Entry]:
        """This campaign's rows (of ``config`` / ``role`` when given), oldest first."""
        sql = "SELECT id, config, role, hypothesis, value, invalid, details, verdict, reason FROM experiments WHERE campaign = ?"
        args: list[Any] = [self.campaign]
        if config is not None:
            sql += " AND config = ?"
            args.append(config_key(config))
        if role is not None:
            sql += " AND role = ?"
            args.append(role)
        rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [
            Entry(
                id=r[0],
                config=json.loads(r[1]),
                role=r[2],
                hypothesis=json.loads(r[3]) if r[3] else None,
                measurement=Measurement(r[4], r[5], json.loads(r[6]) if r[6] else {}),
                verdict=r[7],
                reason=r[8],
            )
            for r in rows
        ]

    def judged(self, config: Mapping[str, Any]) -> Entry | None:
        """The candidate row of ``config`` that got a verdict, if any (a config is judged once)."""
        done = [e for e in self.entries(config, "candidate") if e.verdict is not None]
        return done[-1] if done else None
