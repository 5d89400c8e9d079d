"""One source per default: a flag of run / sweep / optimize that sets a RunConfig (or Slo) field
defaults to what the library defaults it to, so the CLI and a library caller replay alike."""

from __future__ import annotations

import dataclasses

from replay.cli.main import build_parser
from replay.config import LAG_BOUND_MS, SLO_ATTAINMENT, RunConfig, Slo
from tests.unit.replay.test_cli_help import _subcommands


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def test_cli_flags_default_to_the_library_s_defaults():
    run, slo = _defaults(RunConfig), _defaults(Slo)
    commands = _subcommands(build_parser())
    checked = 0
    for name in ("run", "sweep", "optimize"):
        for action in commands[name]._actions:
            if action.dest == "slo_attainment":
                assert action.default == slo["attainment"] == SLO_ATTAINMENT, name
                checked += 1
            # flags whose value is the field's value as is (others are parsed: durations, SLO text)
            elif action.dest in run and isinstance(action.default, (bool, int, float)):
                assert action.default == run[action.dest], (name, action.dest)
                checked += 1
    assert checked >= 3 * 2 and run["lag_bound_ms"] == LAG_BOUND_MS


def test_retry_invalid_defaults_to_one_value_everywhere():
    import inspect

    from optimizer.measure import EngineMeasure, measure_on_engine
    from replay.config import RETRY_INVALID
    from replay.sweep import sweep

    commands = _subcommands(build_parser())
    for name in ("run", "sweep", "optimize"):
        (flag,) = [a for a in commands[name]._actions if a.dest == "retry_invalid"]
        assert flag.default == RETRY_INVALID, name
        assert f"(default {RETRY_INVALID}" in " ".join(commands[name].format_help().split()), name
    for fn in (sweep, measure_on_engine, EngineMeasure.__init__):
        assert inspect.signature(fn).parameters["retry_invalid"].default == RETRY_INVALID, fn.__qualname__


def test_the_timeouts_shown_by_run_s_help_are_the_runner_s():
    from replay.config import RUNNER_DEFAULTS

    text = " ".join(_subcommands(build_parser())["run"].format_help().split())
    for flag, key in (("--max-connections", "max_connections"), ("--worker-threads", "worker_threads")):
        assert f"(default {RUNNER_DEFAULTS[key]})" in text, flag


def test_the_embedded_engine_s_defaults_come_from_the_engine():
    import json

    from replay import _engine
    from replay.sim import KNOBS, PROFILES, SIM_DEFAULTS, SimConfig

    engine = json.loads(_engine.sim_defaults())  # EngineConfig::default() in rust/sim
    assert engine == SIM_DEFAULTS and engine["max_num_seqs"] > 0
    config = SimConfig()
    for key, value in engine.items():
        if key not in ("tokenizer", "port"):  # a tokenizer name, resolved to the engine's path; any free port
            assert getattr(config, key) == value, key
    for knob in KNOBS:
        assert str(knob.default) == str(engine[knob.name]) if knob.default is not None else engine[knob.name] is None
    serve = _subcommands(build_parser())["serve-sim"]
    for action in serve._actions:
        if action.dest in engine and action.dest not in ("tokenizer", "port"):  # serve-sim listens on 8000
            assert action.default == engine[action.dest], action.dest
    # the profile the embedded engine starts with when run / sweep / optimize start it
    assert PROFILES[0] == engine["profile"] == SimConfig().profile
    commands = _subcommands(build_parser())
    (flag,) = [a for a in commands["optimize"]._actions if a.dest == "sim_profile"]
    assert flag.default == engine["profile"]
    # run and sweep pick by the trace: the engine's default, or the long-context preset for a
    # trace whose longest request the default does not hold
    from replay.sim import LONG_CONTEXT_PROFILE, embedded_profile

    for name in ("run", "sweep"):
        (flag,) = [a for a in commands[name]._actions if a.dest == "sim_profile"]
        assert flag.default is None, name
    assert embedded_profile(100_000) == engine["profile"] and LONG_CONTEXT_PROFILE in PROFILES
    assert embedded_profile(150_000) == LONG_CONTEXT_PROFILE


def test_one_block_size_default_for_traces():
    import inspect

    from capture.importers import TOKEN_FORMATS, import_log
    from capture.recorder import CaptureConfig
    from replay.generate import GenerateConfig
    from replay.trace import BLOCK_SIZE, TraceMeta

    assert TraceMeta.__dataclass_fields__["block_size_tokens"].default == BLOCK_SIZE
    assert GenerateConfig.__dataclass_fields__["block_size"].default == BLOCK_SIZE
    assert CaptureConfig.__dataclass_fields__["block_size"].default == BLOCK_SIZE
    # formats with hash ids default to the ids' own block: mooncake's 512 tokens, weka's the
    # file's, copilot's and tracelab's the 512-token blocks their prompts are chained in (at 16, a
    # 100k-token agent prompt would store 6,250 hashes a row)
    own_block = {"mooncake", "weka", "copilot", "tracelab"}
    for fn in (import_log, *(f for name, f in TOKEN_FORMATS.items() if name not in own_block)):
        param = inspect.signature(fn).parameters.get("block_size")
        assert param is None or param.default == BLOCK_SIZE, fn.__name__
    commands = _subcommands(build_parser())
    for name in ("capture", "generate"):
        (flag,) = [a for a in commands[name]._actions if a.dest == "block_size"]
        assert flag.default == BLOCK_SIZE, name


def test_capture_flags_default_to_the_capture_config():
    from dataclasses import fields

    from capture.recorder import REDACT_PROCESSES, CaptureConfig

    config = {f.name: f.default for f in fields(CaptureConfig)}
    config["redact_processes"] = REDACT_PROCESSES
    flag_of = {"queue": "queue_size", "timeout": "read_timeout_s"}
    capture = _subcommands(build_parser())["capture"]
    checked = set()
    for action in capture._actions:
        name = flag_of.get(action.dest, action.dest)
        if name in config and action.default is not None and not isinstance(action.default, bool):
            assert action.default == config[name], action.dest
            checked.add(name)
    assert {"queue_size", "backlog_mb", "redact_processes", "read_timeout_s", "segment_rows", "sample"} <= checked
