"""Errors from the Rust core reach Python as the `replay.errors` classes, with the field (or URL)
at fault as an attribute, never as a bare ValueError; ConfigError is still a ValueError for
callers that catch bad values that way."""

from __future__ import annotations

import numpy as np
import pytest

from replay import _engine
from replay.errors import ConfigError, ReplayError, RunnerError, TargetError

N = 2
URL = "http://127.0.0.1:1"
SCHEDULE = dict(
    paths=["/v1/chat/completions"],
    path_index=np.zeros(N, dtype=np.uint8),
    offsets_ns=np.zeros(N, dtype=np.int64),
)
BODIES = b"{}{}"


def _field(call) -> str | None:
    with pytest.raises(ConfigError) as info:
        call()
    assert isinstance(info.value, ReplayError) and isinstance(info.value, ValueError)
    assert type(info.value) is ConfigError, type(info.value)
    return info.value.field


def test_a_bad_argument_to_the_runner_is_a_config_error_naming_it():
    offsets = np.array([0, 2, 4], dtype=np.uint64)
    options = _engine.RunOptions(URL)
    # a bad setting is refused when the options are made, before any run
    assert _field(lambda: _engine.RunOptions(URL, timeout_s=-1.0)) == "timeout_s"
    assert _field(lambda: _engine.RunOptions(URL, drain_s=float("nan"))) == "drain_s"
    assert _field(lambda: _engine.run(options, **SCHEDULE, bodies=BODIES, body_offsets=offsets[:2])) == "body_offsets"
    assert _field(lambda: _engine.run(options, **SCHEDULE, bodies=BODIES)) == "body_offsets"
    assert _field(lambda: _engine.run(options, **SCHEDULE, bodies=3)) == "bodies"
    too_many = np.zeros(N + 1, dtype=np.int64)
    assert _field(lambda: _engine.run(options, **SCHEDULE, bodies=BODIES, body_offsets=offsets, after=too_many)) == "after"
    # a core error keeps its field too
    no_connections = _engine.RunOptions(URL, max_connections=0)
    assert _field(lambda: _engine.run(no_connections, **SCHEDULE, bodies=BODIES, body_offsets=offsets)) == "max_connections"
    assert _field(lambda: _engine.arrival_offsets("zipf", 3, np.zeros(3, dtype=np.int64))) == "arrivals"


def test_a_bad_url_is_a_target_error_with_the_url():
    offsets = np.array([0, 2, 4], dtype=np.uint64)
    with pytest.raises(TargetError) as info:
        _engine.run(_engine.RunOptions("http://[::1"), **SCHEDULE, bodies=BODIES, body_offsets=offsets)
    assert info.value.url == "http://[::1" and not isinstance(info.value, ValueError)


def test_prefix_cache_and_prompt_helpers_name_their_argument():
    hashes = np.arange(4, dtype=np.uint64)
    assert _field(lambda: _engine.prefix_cache_hits(hashes, np.array([1, 4], dtype=np.uint64), 0)) == "offsets"
    assert _field(lambda: _engine.prefix_cache_hits(hashes, np.array([0, 4], dtype=np.uint64), 0, np.zeros(3))) == "times_s"
    assert _field(lambda: _engine.prompt_units([1], [3], 0)) == "n_words"
    assert (
        _field(lambda: _engine.prompt_texts(["a", "."], 0, np.zeros(2, dtype=np.uint64), np.array([1, -1], dtype=np.int64), 0))
        == "lengths"
    )


def test_the_embedded_engine_names_the_flag_at_fault():
    assert _field(lambda: _engine.SimServer({"max_num_seqs": 0, "profile": "instant"})) == "--max-num-seqs"
    assert _field(lambda: _engine.SimServer({"profile": "no-such-profile"})) == "--profile"


def test_the_classes_stay_apart():
    assert not issubclass(TargetError, ValueError) and not issubclass(RunnerError, ValueError)
    assert issubclass(ConfigError, ReplayError) and ConfigError("x").field is None
