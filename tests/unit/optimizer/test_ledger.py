"""The ledger's hardware key: what it says about this machine, and that rows measured on other
hardware are not reused."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from optimizer import Campaign, Measurement, Space
from optimizer import ledger as ledger_mod
from optimizer.space import config_key
from replay.sim import KNOBS


@pytest.fixture
def fresh_id():
    ledger_mod.hardware_id.cache_clear()
    yield ledger_mod.hardware_id
    ledger_mod.hardware_id.cache_clear()


def fake_smi(tmp_path, monkeypatch, script: str) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n" + script + "\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ.get('PATH', '')}")


def test_the_hardware_id_names_the_machine_cpu_and_gpus(tmp_path, monkeypatch, fresh_id):
    fake_smi(tmp_path, monkeypatch, 'echo "NVIDIA H200"; echo "NVIDIA H200"; echo "NVIDIA L4"')
    text = fresh_id()
    assert text.startswith(platform.machine() + "; ")
    assert f"; {os.cpu_count()} CPUs; " in text and text.endswith("GPUs: NVIDIA H200 x2, NVIDIA L4")
    cpu = text.split("; ")[1]
    info = Path("/proc/cpuinfo")
    models = (
        [line.split(":", 1)[1] for line in info.read_text().splitlines() if line.startswith("model name")]
        if info.exists()
        else []
    )
    assert cpu == (" ".join(models[0].split()) if models else platform.processor() or "unknown CPU")


@pytest.mark.parametrize("script", ["echo 'NVIDIA-SMI has failed' >&2; exit 9", "exec sleep 5"])
def test_a_failing_or_hanging_nvidia_smi_means_no_gpus(tmp_path, monkeypatch, fresh_id, script):
    fake_smi(tmp_path, monkeypatch, script)
    monkeypatch.setattr(ledger_mod, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    assert fresh_id().endswith("GPUs: none")


def test_other_hardware_does_not_reuse_the_ledger_s_rows(tmp_path, monkeypatch):
    calls: list[str] = []

    def measure(config) -> Measurement:
        calls.append(config_key(config))
        return Measurement(100.0 + len(calls) % 2)

    def judge_once(hardware: str) -> int:
        monkeypatch.setattr("optimizer.campaign.hardware_id", lambda: hardware)
        before = len(calls)
        c = Campaign(
            space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 4]}),
            measure=measure,
            ledger=tmp_path / "ledger.sqlite",
            identity={"engine": "sim", "workload": "w"},
            baseline={"max_num_seqs": 2},
            repeats=2,
        )
        verdict = c.evaluate({"max_num_seqs": 4})
        assert c.ledger.campaign.count(hardware) == 1  # the default hardware key is in the identity
        c.close()
        return len(calls) - before, verdict

    first, _ = judge_once("x86_64; CPU A; 8 CPUs; GPUs: none")
    assert first == 3  # two baseline runs and the candidate
    again, verdict = judge_once("x86_64; CPU A; 8 CPUs; GPUs: none")
    assert again == 0 and "from the ledger" in verdict.reason
    other, verdict = judge_once("x86_64; CPU A; 8 CPUs; GPUs: NVIDIA H200")
    assert other == 3 and "from the ledger" not in verdict.reason
