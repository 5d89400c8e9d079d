"""replay.fleet: the targets file, the names, what the router reads of each request, and the
per-replica table with its imbalance flag."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from replay.config import RunConfig
from replay.dag import root_sessions
from replay.errors import ConfigError
from replay.fleet import (
    Target,
    fleet_targets,
    read_targets,
    replica_breakdown,
    replica_lines,
    route_keys,
)
from replay.metrics import completed
from replay.sweep_html import sweep_html


def test_targets_file_lines_names_and_comments(tmp_path):
    f = tmp_path / "fleet.txt"
    f.write_text("# the fleet\nleft http://10.0.0.1:8000\n\n  http://10.0.0.2:8000/v1  # no name\nhttp://10.0.0.2:8000/v1\n")
    assert read_targets(f) == (
        Target("left", "http://10.0.0.1:8000"),
        Target("10.0.0.2:8000/v1", "http://10.0.0.2:8000/v1"),
        Target("10.0.0.2:8000/v1#2", "http://10.0.0.2:8000/v1"),
    )


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("a http://h:1\nb h:2\n", 2, "not an http"),
        ("a http://h:1 extra\n", 1, "NAME URL"),
        ("a http://h:1\na http://h:2\n", 2, "twice"),
        ("# only comments\n\n", None, "names no URL"),
        ("b!d http://h:1\n", 1, "replica name"),
    ],
)
def test_a_bad_targets_file_names_file_and_line(tmp_path, text, line, says):
    f = tmp_path / "t.txt"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_targets(f)
    msg = str(e.value)
    assert says in msg and str(f) in msg and "\n" not in msg
    if line is not None:
        assert f"{f}:{line}" in msg


def test_url_flags_or_a_file_not_both(tmp_path):
    assert [t.name for t in fleet_targets(["http://a:1", "http://b:2"])] == ["a:1", "b:2"]
    with pytest.raises(ConfigError, match="--targets and --url"):
        fleet_targets(["http://a:1"], tmp_path / "x")
    with pytest.raises(ConfigError, match="--targets: cannot read"):
        fleet_targets([], tmp_path / "missing.txt")


def test_route_needs_a_fleet_and_a_known_policy():
    with pytest.raises(ConfigError, match="--route session"):
        RunConfig(url="http://a:1", route="session")
    targets = (Target("a", "http://a:1"), Target("b", "http://b:2"))
    with pytest.raises(ConfigError, match="--route: unknown policy 'random'"):
        RunConfig(url="http://a:1", targets=targets, route="random")
    assert RunConfig(url="http://a:1", targets=targets).routing == "round-robin"
    assert RunConfig(url="http://a:1").routing is None and not RunConfig(url="http://a:1").fleet
    with pytest.raises(ConfigError, match="first replica"):
        RunConfig(url="http://c:3", targets=targets)


def test_a_subagent_goes_with_its_root_session():
    rows = pl.DataFrame(
        {
            "session_id": ["s1", "sub1", "s2", "subsub", None, "sub1"],
            "parent_session_id": [None, "s1", None, "sub1", None, "s1"],
        }
    )
    assert root_sessions(rows) == ["s1", "s1", "s2", "s1", None, "s1"]
    keys = route_keys(rows, "session")["route_sessions"]
    assert keys.dtype == np.uint64 and keys[4] == 0
    assert keys[0] == keys[1] == keys[3] == keys[5] != keys[2] and keys[0] != 0
    assert route_keys(rows, "round-robin") == {} and route_keys(rows, None) == {}


def test_prefix_keys_are_block_hashes_else_hash_ids():
    rows = pl.DataFrame(
        {
            "block_hashes": [[1, 2, 3], None, [], None],
            "hash_ids": [None, [7, 8], [9], None],
        },
        schema={"block_hashes": pl.List(pl.UInt64), "hash_ids": pl.List(pl.UInt64)},
    )
    k = route_keys(rows, "prefix")
    assert k["route_blocks"].tolist() == [1, 2, 3, 7, 8, 9]
    assert k["route_block_offsets"].tolist() == [0, 3, 5, 6, 6]


def _results(replicas: list[str], errors: list[str] | None = None) -> pl.DataFrame:
    n = len(replicas)
    return pl.DataFrame(
        {
            "replica": replicas,
            "error": errors or ["none"] * n,
            "intended_ns": [0] * n,
            "sent_ns": [0] * n,
            "first_token_ns": [i * 1_000_000 for i in range(1, n + 1)],
            "end_ns": [i * 2_000_000 for i in range(1, n + 1)],
            "completion_tokens": [2] * n,
            "output_chunks": [2] * n,
            "prompt_tokens": [100] * n,
            "cached_tokens": [50] * n,
        }
    )


def test_per_replica_table_and_the_imbalance_rule():
    even = _results(["a", "b", "a", "b"])
    t = replica_breakdown(even, completed(even), "round-robin")
    assert [r["replica"] for r in t["rows"]] == ["a", "b"] and t["imbalance"] is None
    assert t["rows"][0]["share"] == 0.5 and t["rows"][0]["cache_hit_rate"] == 0.5
    assert t["rows"][0]["ttft_p50_ms"] == 2.0  # requests 1 and 3: 1 and 3 ms
    # 4 of 5 on a: 80% > 1.5 x 50%
    skewed = _results(["a", "a", "a", "a", "b"])
    t = replica_breakdown(skewed, completed(skewed), "session")
    assert "a got 80% of the requests (even share 50%)" in t["imbalance"]
    # errors on one replica only
    failing = _results(["a", "b", "a", "b"], ["none", "timeout", "none", "none"])
    t = replica_breakdown(failing, completed(failing))
    assert t["imbalance"] == "b had 1 errors, a none"
    assert any(line.startswith("imbalanced") for line in replica_lines(t))
    # one target: no table
    one = _results(["a", "a"])
    assert replica_breakdown(one, completed(one)) is None
    assert replica_breakdown(one.drop("replica"), completed(one)) is None


def test_the_sweep_page_shows_the_replicas():
    rows = _results(["a", "a", "a", "a", "b"])
    table = replica_breakdown(rows, completed(rows), "prefix")
    stage = {"requested_rate": 2.0, "concurrency": None, "replicas": table, "valid": True}
    page = sweep_html(
        {"stages": [stage], "saturation": {}, "targets": [{"name": "a", "url": "http://a:1"}], "route": "prefix"},
        plots=False,
    )
    assert "Per replica (route: prefix)" in page and "imbalanced" in page and "a http://a:1" in page
    assert "Per replica" not in sweep_html({"stages": [{**stage, "replicas": None}], "saturation": {}}, plots=False)


def test_compare_shows_both_sides_replicas_and_fidelity_shows_them_beside_live():
    from replay.ab import Comparison, StagePair, markdown
    from replay.fleet import replica_vs_live, replica_vs_live_lines

    rows = _results(["a", "b", "a", "b"])
    table = replica_breakdown(rows, completed(rows), "session")
    pair = StagePair("2 req/s", ("a.parquet",), ("b.parquet",), "bootstrap over requests", (), {"a": table, "b": None})
    text = markdown(Comparison("A", "B", (pair,)))
    assert "- A replica a: 50% of requests (2)" in text and "- B replica" not in text
    assert pair.to_json()["replicas"]["a"] == table
    stage = rows.with_columns(request_id=pl.Series(["r0", "r1", "r2", "r3"]))
    live = pl.DataFrame({"request_id": ["r0", "r1", "r2", "r3"], "ttft_us": [500, 600, 700, 800], "e2e_us": [900] * 4})
    side = replica_vs_live(stage, live)
    assert [(r["replica"], r["requests"], r["live_ttft_p50_ms"]) for r in side] == [("a", 2, 0.6), ("b", 2, 0.7)]
    assert side[0]["ttft_p50_ms"] == 2.0
    assert replica_vs_live_lines(side)[1].startswith("replica b: 2 requests, 0 errors, TTFT p50 3.00 ms (live 0.70)")
    assert replica_vs_live(stage.drop("replica"), live) is None
