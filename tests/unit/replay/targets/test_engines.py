"""Engine adapters without engines: knob spaces, config checks, command lines, metric names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from replay.errors import ConfigError
from replay.targets import ENGINES, Engine, LlamaServer, SGLang, SimEngine, Vllm
from replay.targets.engine import Knob, check_config
from replay.targets.prometheus import parse
from replay.targets.vllm_engine import VLLM_SCHEDULER_KNOBS

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "metrics"
LOSSY = {"kv_cache_dtype", "cache_type_k", "cache_type_v", "dtype"}


def _engines():
    return [
        SimEngine(),
        LlamaServer(model="m.gguf", binary="/opt/llama-server"),
        Vllm(model="/models/tiny", python="/venv/bin/python"),
        SGLang(model="/models/tiny", python="py"),
    ]


@pytest.mark.parametrize("engine", _engines(), ids=lambda e: e.name)
def test_every_adapter_meets_the_protocol_and_declares_a_sound_knob_space(engine):
    assert isinstance(engine, Engine)
    names = [k.name for k in engine.knobs]
    flags = [k.flag for k in engine.knobs]
    assert len(names) == len(set(names)) and len(flags) == len(set(flags))
    for knob in engine.knobs:
        assert knob.doc, knob.name
        assert knob.lossless == (knob.name not in LOSSY), knob.name
        if knob.default is not None:
            assert knob.check(knob.default) == knob.default, knob.name
        if knob.kind in ("int", "float"):
            assert knob.range is not None and knob.range[0] <= knob.range[1]
    assert set(ENGINES) == {"sim", "llama-server", "vllm", "sglang"}


def test_knob_checks_coerce_and_reject_with_the_flag_named():
    knob = Knob("n", "--n", "int", range=(1, 8), doc="d")
    assert knob.check("4") == 4 and knob.check(4.0) == 4
    for bad, msg in (
        (0, r"--n: 0 outside \[1, 8\]"),
        ("x", "--n: expected an integer"),
        (2.5, "expected an integer"),
        (True, "expected an integer"),
    ):
        with pytest.raises(ConfigError, match=msg):
            knob.check(bad)
    flag = Knob("b", "--b", "bool", off_flag="--no-b", doc="d")
    assert flag.check("false") is False and flag.check("on") is True
    assert flag.args(True) == ["--b"] and flag.args(False) == ["--no-b"]
    assert Knob("e", "--e", "bool", doc="d").args(False) == []
    with pytest.raises(ConfigError, match="--b: expected true or false"):
        flag.check("maybe")
    choice = Knob("c", "--c", "choice", choices=("x", "y"), doc="d")
    with pytest.raises(ConfigError, match="--c: 'z' not one of x, y"):
        choice.check("z")
    js = Knob("j", "--j", "json", doc="d")
    assert js.args(js.check('{"b": 1, "a": 2}')) == ["--j", '{"a":2,"b":1}']
    with pytest.raises(ConfigError, match="--j: not JSON"):
        js.check("{oops")
    with pytest.raises(ValueError):
        Knob("c", "--c", "choice", doc="no choices")
    assert Knob("f", "--f", "float", range=(0, 1), doc="d").args(0.5) == ["--f", "0.5"]


def test_unknown_knobs_are_config_errors_listing_the_known_ones():
    with pytest.raises(ConfigError, match=r"vllm: unknown knob 'max_seqs' \(known: .*max_num_seqs"):
        check_config("vllm", Vllm.knobs, {"max_seqs": 4})


def test_llama_server_command_line():
    engine = LlamaServer(model="/m/tiny.gguf", binary="/opt/llama-server", defaults={"threads": 1})
    config = engine.check(
        {
            "ctx_size": 8192,
            "parallel": 4,
            "cont_batching": False,
            "flash_attn": "on",
            "cache_type_k": "q8_0",
            "cache_reuse": 256,
            "batch_size": 512,
            "ubatch_size": 128,
        }
    )
    assert engine.command(config, 8080) == [
        "/opt/llama-server",
        "-m",
        "/m/tiny.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "--metrics",
        "--no-webui",
        "-c",
        "8192",
        "-np",
        "4",
        "-b",
        "512",
        "-ub",
        "128",
        "-t",
        "1",
        "--cache-reuse",
        "256",
        "-fa",
        "on",
        "--no-cont-batching",
        "-ctk",
        "q8_0",
    ]
    assert engine.command(engine.check({"cont_batching": True}), 1)[-3:] == ["-t", "1", "--cont-batching"]
    templated = LlamaServer(model="/m/tiny.gguf", binary="/opt/llama-server", chat_template="/t/qwen.jinja")
    assert templated.command({}, 1)[9:11] == ["--chat-template-file", "/t/qwen.jinja"]


def test_vllm_command_line_defaults_to_eager_mode_and_reports_cached_tokens():
    engine = Vllm(model="/models/tiny", python="/venv/bin/python", served_model_name="tiny")
    config = engine.check(
        {
            "max_num_seqs": 2,
            "enable_prefix_caching": False,
            "block_size": "16",
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
            "kv_cache_dtype": "fp8",
            "gpu_memory_utilization": 0.5,
        }
    )
    assert engine.command(config, 8000) == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
        "--served-model-name",
        "tiny",
        "--max-num-seqs",
        "2",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization",
        "0.5",
        "--block-size",
        "16",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":4}',
        "--kv-cache-dtype",
        "fp8",
        "--enforce-eager",
    ]
    assert "--enforce-eager" not in engine.command(engine.check({"enforce_eager": False}), 1)
    # tools without tool_choice are "auto" to vLLM: a 400 unless a parser is set
    tools = Vllm(model="/models/tiny", python="p", tool_call_parser="hermes", chat_template="/t/qwen.jinja")
    assert tools.command({}, 1)[11:16] == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--chat-template",
        "/t/qwen.jinja",
    ]


def test_vllm_environment_keeps_caches_in_the_scratch_folder(tmp_path):
    env = Vllm(model="m", python="p", kv_cache_space_gib=2).environment(tmp_path)
    assert env["TMPDIR"].startswith(str(tmp_path)) and env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_sglang_command_line():
    engine = SGLang(model="Qwen/Qwen2.5-0.5B-Instruct", python="/usr/bin/python3")
    config = engine.check(
        {
            "max_running_requests": 64,
            "chunked_prefill_size": 4096,
            "mem_fraction_static": 0.85,
            "schedule_policy": "lpm",
            "disable_radix_cache": True,
            "kv_cache_dtype": "fp8_e5m2",
        }
    )
    assert engine.command(config, 30000) == [
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--enable-metrics",
        "--enable-cache-report",
        "--max-running-requests",
        "64",
        "--chunked-prefill-size",
        "4096",
        "--mem-fraction-static",
        "0.85",
        "--schedule-policy",
        "lpm",
        "--disable-radix-cache",
        "--kv-cache-dtype",
        "fp8_e5m2",
    ]
    assert "--disable-radix-cache" not in engine.command(engine.check({"disable_radix_cache": False}), 1)


def test_sim_takes_vllm_flag_names():
    engine = SimEngine(profile="a100-80g/llama-3-8b", served_model_name="m", time_scale=0.1, python="py")
    config = engine.check(
        {"max_num_seqs": 8, "enable_prefix_caching": False, "kv_cache_dtype": "fp8", "long_prefill_token_threshold": 512}
    )
    assert engine.command(config, 0) == [
        "py",
        "-m",
        "replay.cli.main",
        "serve-sim",
        "--port",
        "0",
        "--priority",
        "idle",  # below the runner's priority (replay.sim.ENGINE_PRIORITY)
        "--profile",
        "a100-80g/llama-3-8b",
        "--served-model-name",
        "m",
        "--time-scale",
        "0.1",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
        "--long-prefill-token-threshold",
        "512",
        "--kv-cache-dtype",
        "fp8",
    ]
    # vLLM's names, besides the fleet's (N engines behind the sim's own router: docs/sim-engine.md)
    assert {k.flag for k in SimEngine.knobs} - {k.flag for k in VLLM_SCHEDULER_KNOBS} == {"--replicas", "--router"}
    assert all(k.lossless for k in SimEngine.knobs if k.name in ("replicas", "router"))
    (kv,) = [k for k in SimEngine.knobs if k.name == "kv_cache_dtype"]
    assert "fp8" in kv.choices and not kv.lossless
    with pytest.raises(ConfigError, match="--kv-cache-dtype: 'int4' not one of auto, fp8"):
        engine.check({"kv_cache_dtype": "int4"})


def test_the_sim_knob_space_matches_serve_sim_flags():
    from replay.cli.main import build_parser

    parser = build_parser()
    flags = {
        opt for action in parser._subparsers._group_actions[0].choices["serve-sim"]._actions for opt in action.option_strings
    }
    for knob in SimEngine.knobs:
        assert knob.flag in flags, knob.flag
        assert knob.off_flag is None or knob.off_flag in flags, knob.off_flag


def _fixture(name: str):
    return parse((FIXTURES / name).read_text(), source=name)


def test_sglang_metrics_map_onto_the_common_names():
    m = SGLang(model="x").common_metrics(_fixture("sglang.txt"))
    assert m["running"] == 12 and m["waiting"] == 3
    assert m["kv_usage"] == 0.37
    assert m["prefix_cache_hit_rate"] == 0.6123046875  # SGLang's own gauge wins
    assert m["prefix_cache_queries"] == 80737 and m["prefix_cache_hits"] == 49400
    assert m["prompt_tokens"] == 80737 and m["generation_tokens"] == 25600
    assert m["cached_prompt_tokens"] == 49400 and m["requests_finished"] == 200
    assert m["preemptions"] == 2 and m["gen_throughput"] == pytest.approx(1843.2561918)
    scrape = _fixture("sglang.txt")
    assert math.isnan(scrape.value("sglang:spec_accept_length"))
    ttft = scrape.histogram("sglang:time_to_first_token_seconds")
    assert ttft.count == 200 and ttft.quantile(0.5) == pytest.approx(0.1 + 0.1 * 40 / 60)
    assert scrape.value("sglang:realtime_tokens", mode="prefill_cache") == 49400


def test_sglang_metrics_add_data_parallel_ranks_and_average_ratios():
    m = SGLang(model="x").common_metrics(_fixture("sglang_dp2.txt"))
    assert m["running"] == 12 and m["waiting"] == 1 and m["gen_throughput"] == 2000
    assert m["kv_usage"] == pytest.approx(0.3) and m["prefix_cache_hit_rate"] == pytest.approx(0.375)
    assert "preemptions" not in m


def test_vllm_metrics_from_a_real_scrape():
    m = Vllm(model="x").common_metrics(_fixture("vllm.txt"))
    assert m["running"] == 0 and m["waiting"] == 0 and m["kv_usage"] == 0
    assert m["prefix_cache_queries"] == 822 and m["prefix_cache_hits"] == 384
    assert m["prefix_cache_hit_rate"] == pytest.approx(384 / 822)
    assert m["prompt_tokens"] == 822 and m["generation_tokens"] == 16
    assert m["cached_prompt_tokens"] == 384 and m["requests_finished"] == 2 and m["preemptions"] == 0
    # the prefill / decode histograms' sums and counts (the optimizer's diagnosis splits the time)
    assert m["prefill_time_s"] == pytest.approx(0.04666076500006966) and m["prefill_requests"] == 2
    assert m["decode_time_s"] == pytest.approx(0.10399444799941193) and m["decode_requests"] == 2
    assert SimEngine().common_metrics(_fixture("vllm.txt")) == m  # the simulator speaks vLLM's names


def test_llamacpp_metrics_from_a_real_scrape():
    m = LlamaServer(model="x").common_metrics(_fixture("llamacpp.txt"))
    assert m["running"] == 0 and m["waiting"] == 0 and m["generation_tokens"] == 24
    # llama.cpp's prompt_tokens_total excludes cached tokens; the common name counts them all
    assert m["prefix_cache_hits"] == m["cached_prompt_tokens"] == 614
    assert m["prompt_tokens"] == m["prefix_cache_queries"] == 322 + 614
    assert m["prefix_cache_hit_rate"] == pytest.approx(614 / 936)
    # prompt processing and generation time: prefill and decode, with no request counts
    assert m["prefill_time_s"] == 0.01838 and m["decode_time_s"] == 0.051703 and "prefill_requests" not in m


@pytest.mark.parametrize("name", ["llama-server", "vllm", "sglang"])
def test_replay_optimize_builds_each_engine_from_its_flags(name):
    # `replay optimize --engine NAME --model M` makes the engine that serves M (sglang's used to
    # be a TypeError), and keys the ledger by that engine's own version
    from replay.cli.main import build_parser
    from replay.cli.optimize_cmds import _engine, _version

    args = build_parser().parse_args(["optimize", "t.parquet", "--engine", name, "--model", "/models/m", "--rate", "1"])
    engine = _engine(args)
    assert engine.name == name and str(engine.model) == "/models/m"
    assert _version(name) != _version("sim")  # not this package's version
