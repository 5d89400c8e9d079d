"""`replay optimize`'s engine names (llama.cpp is llama-server) and a campaign stopped after its
start: the library keeps what was judged and says why, the CLI writes that report and exits 1."""

from __future__ import annotations

import json

import pytest

from optimizer import Budget, Campaign, CampaignStopped, Measurement, Space
from optimizer.space import config_key
from replay.cli.main import build_parser, main
from replay.errors import ConfigError
from replay.sim import KNOBS
from replay.targets.llamacpp import LlamaServer
from replay.targets.registry import ALIASES, ENGINES, engine_class

BASE = {"max_num_seqs": 2}


# -- --engine llama.cpp ---------------------------------------------------------------------------
def test_llama_cpp_is_llama_server_on_the_command_line_and_in_the_registry():
    from replay.cli import optimize_cmds

    assert engine_class("llama.cpp") is LlamaServer and engine_class("llama-server") is LlamaServer
    assert set(optimize_cmds.ENGINE_CHOICES) == {*ENGINES, *ALIASES}
    args = build_parser().parse_args(["optimize", "t.parquet", "--engine", "llama.cpp", "--model", "m.gguf", "--rate", "1"])
    engine = optimize_cmds._engine(args)
    assert isinstance(engine, LlamaServer) and engine.name == "llama-server" and engine.model == "m.gguf"
    with pytest.raises(ConfigError, match="--model: llama-server needs a model"):
        optimize_cmds._engine(build_parser().parse_args(["optimize", "t.parquet", "--engine", "llama.cpp", "--rate", "1"]))
    with pytest.raises(ConfigError, match=r"unknown \(one of .*llama\.cpp"):
        engine_class("llamacpp")


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_engine_has_a_default_space_of_its_own_knobs(name):
    # `replay optimize --engine llama-server` without --knobs once asked for vLLM's max_num_seqs
    cls = ENGINES[name]
    assert len(cls.default_knobs) >= 2
    space = Space.of(name, cls.knobs, {k: None for k in cls.default_knobs})
    assert [d.knob.name for d in space.dimensions] == list(cls.default_knobs)
    assert all(len(d.values) >= 2 for d in space.dimensions)


# -- a stop during run() ------------------------------------------------------------------------------
def breaks_after(n: int, calls: list):
    """Candidates measure 100 + their max_num_seqs / 100; the baseline 100 until ``n`` measurements
    were made, then its engine no longer starts."""

    def measure(config) -> Measurement:
        calls.append(config_key(config))
        if config == BASE and len(calls) > n:
            return Measurement(None, "the engine failed to start: the GPU fell off the bus")
        return Measurement(100.0 + config.get("max_num_seqs", 2) / 100 + 0.01 * (len(calls) % 2))

    return measure


def test_a_baseline_that_turns_invalid_on_a_recheck_stops_run_with_what_was_judged(tmp_path):
    calls: list[str] = []
    c = Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 4, 8, 16, 32, 64]}),
        measure=breaks_after(2, calls),
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline=BASE,
        repeats=2,
        recheck_every=2,
        searcher="random",
        budget=Budget(trials=5),
    )
    with pytest.raises(CampaignStopped, match="turned invalid when measured again") as info:
        c.run()
    c.close()
    result = c.result
    assert result.stopped == str(info.value) and "fell off the bus" in result.stopped
    assert len(result.steps) == 2 and all(s.verdict.kind == "same" for s in result.steps)
    assert result.best == BASE


def test_a_new_baseline_whose_floor_fails_stops_the_campaign_and_is_not_adopted(tmp_path):
    calls: list[str] = []
    seen: dict[str, int] = {}

    def measure(config) -> Measurement:
        calls.append(config_key(config))
        seen[config_key(config)] = seen.get(config_key(config), 0) + 1
        if config.get("max_num_seqs") == 8:
            if seen[config_key(config)] > 2:  # its floor's third run fails
                return Measurement(None, "the engine failed to start: out of memory")
            return Measurement(150.0)
        return Measurement(100.0 + 0.1 * (len(calls) % 2))

    c = Campaign(
        space=Space.of("sim", KNOBS, {"max_num_seqs": [2, 8]}),
        measure=measure,
        ledger=tmp_path / "ledger.sqlite",
        identity={"engine": "sim", "workload": "w"},
        baseline=BASE,
        repeats=3,
        recheck_every=0,
    )
    with pytest.raises(CampaignStopped, match="out of memory"):
        c.run()
    c.close()
    assert c.result.steps[0].verdict.kind == "better" and "out of memory" in c.result.stopped
    assert not c.result.accepted and c.result.best == BASE


def test_the_cli_writes_the_report_of_a_campaign_stopped_mid_run_and_exits_1(tmp_path, monkeypatch, capsys):
    import optimizer
    from replay.generate import GenerateConfig, generate

    trace = tmp_path / "work.parquet"
    generate(GenerateConfig(n_requests=20, seed=1, rate=5.0)).write(trace)
    calls: list[str] = []
    monkeypatch.setattr(optimizer, "measure_on_engine", lambda *a, **k: breaks_after(2, calls))
    out = tmp_path / "out"
    space = tmp_path / "space.toml"
    space.write_text("[knobs.max_num_seqs]\nvalues = [2, 4, 8, 16, 32]\n")
    code = main(
        [
            "optimize",
            str(trace),
            "--engine",
            "sim",
            "--rate",
            "5",
            "--objective",
            "throughput",
            "--space",
            str(space),
            "--baseline",
            json.dumps(BASE),
            "--repeats",
            "2",
            "--recheck-every",
            "2",
            "--search",
            "random",
            "--budget",
            "trials=5",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "turned invalid when measured again" in errors[0] and "fell off the bus" in errors[0]
    data = json.loads((out / "optimize.json").read_text())
    assert "fell off the bus" in data["stopped"] and len(data["steps"]) == 2
    assert "fell off the bus" in (out / "optimize.md").read_text()
    assert "fell off the bus" in (out / "optimize.html").read_text()
