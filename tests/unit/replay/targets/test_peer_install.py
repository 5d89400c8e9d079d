"""Where the peer tools' venvs are found: a complete install (its marker written last), an env var
naming a python, never a half-finished venv."""

from __future__ import annotations

import pytest

from replay.errors import TargetError
from replay.targets.peer_install import PEERS, peer_dir, peer_python


def test_a_peer_counts_only_once_its_install_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("FAITHFUL_REPLAY_CACHE", str(tmp_path))
    monkeypatch.delenv("FAITHFUL_REPLAY_INFERENCE_PERF_PYTHON", raising=False)
    root = peer_dir("inference-perf")
    assert root == tmp_path / "peers" / f"inference-perf-{PEERS['inference-perf'].version}"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    assert peer_python("inference-perf") is None  # no marker: an interrupted install
    (root / "INSTALLED").write_text("inference-perf==0.7.0\n")
    assert peer_python("inference-perf") == root / "bin" / "python"


def test_the_env_var_names_a_python_and_unknown_peers_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("FAITHFUL_REPLAY_AIPERF_PYTHON", str(tmp_path / "nope"))
    with pytest.raises(TargetError, match=r"\$FAITHFUL_REPLAY_AIPERF_PYTHON=.*nope: no such file"):
        peer_python("aiperf")
    (tmp_path / "py").write_text("")
    monkeypatch.setenv("FAITHFUL_REPLAY_AIPERF_PYTHON", str(tmp_path / "py"))
    assert peer_python("aiperf") == tmp_path / "py"
    with pytest.raises(TargetError, match="peer 'genai-perf' unknown"):
        peer_python("genai-perf")
