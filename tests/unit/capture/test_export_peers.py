"""`replay export` for the peers' own formats: AIPerf ``dag_jsonl`` (sessions, subagent spawns and
their joins, waits as delays), vLLM ``timed_trace`` and GuideLLM (seconds, 16- and 512-token ids),
inference-perf's OTel replay folder; what each cannot say is counted. The peers' own readers
read these files in tests/integration/test_export_peers.py."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capture.exporters import export_trace
from replay.cli.main import main
from replay.errors import ConfigError

DEPS = pl.List(pl.String)
# main: m0 -> m1, which spawns sub-a (a0 -> a1) and sub-b (b0); m2 joins a1 and b0; m3 follows m2.
# "other" is a second root session. Times in ms; every e2e is recorded.
IDS = ["m0", "m1", "a0", "b0", "a1", "m2", "c0", "m3"]
SESSIONS = ["main", "main", "sub-a", "sub-b", "sub-a", "main", "other", "main"]
PARENTS = [None, None, "main", "main", None, None, None, None]
EDGES = [[], ["m0"], ["m1"], ["m1"], ["a0"], ["a1", "b0"], [], ["m2"]]
WAIT_MS = [None, 200, 100, 100, 200, 200, None, 100]
ARRIVAL_MS = [0, 1200, 2100, 2100, 3300, 4000, 4500, 5100]
E2E_MS = [1000, 800, 1000, 1500, 500, 1000, 300, 500]


def _body(rid: str, **extra) -> str:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": f"question {rid}"}], "max_tokens": 50, **extra})


def agent_trace(make_trace, **columns):
    n = len(IDS)
    base = {
        "request_id": pl.Series(IDS),
        "session_id": pl.Series(SESSIONS),
        "api": pl.Series(["chat"] * n),
        "body": pl.Series([_body(r, temperature=0.5) for r in IDS]),
        "arrival_us": pl.Series([a * 1000 for a in ARRIVAL_MS], dtype=pl.Int64),
        "e2e_us": pl.Series([e * 1000 for e in E2E_MS], dtype=pl.Int64),
        "output_tokens": pl.Series([5 + i for i in range(n)], dtype=pl.Int32),
        "depends_on": pl.Series(EDGES, dtype=DEPS),
        "wait_us": pl.Series([None if w is None else w * 1000 for w in WAIT_MS], dtype=pl.Int64),
        "parent_session_id": pl.Series(PARENTS, dtype=pl.String),
    }
    base.update(columns)
    return make_trace(n=n, **base)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_dag_sessions_spawns_joins_and_delays(make_trace, tmp_path):
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", agent_trace(make_trace), out)
    lines = {x["session_id"]: x for x in _lines(out)}
    assert result.written == 4 and set(lines) == {"main", "sub-a", "sub-b", "other"}
    assert {x["context_mode"] for x in lines.values()} == {"message_array_with_responses"}
    main_turns = lines["main"]["turns"]
    assert [t["messages"][0]["content"] for t in main_turns] == ["question m0", "question m1", "question m2", "question m3"]
    # m1 spawns both subagents; m2 (turn 2) is the first turn that waits for them
    assert main_turns[1]["spawns"] == [{"children": ["sub-a", "sub-b"], "join_at": 2}]
    assert all("spawns" not in t for i, t in enumerate(main_turns) if i != 1)
    # delays are the waits (ms after the previous / spawning turn ended); a root's first turn has none
    assert [t.get("delay") for t in main_turns] == [None, 200, 200, 100]
    assert [t.get("delay") for t in lines["sub-a"]["turns"]] == [100, 200]
    assert [t.get("delay") for t in lines["sub-b"]["turns"]] == [100]
    # output_tokens are the limits; the body's other parameters go in extra
    assert [t["max_tokens"] for t in main_turns] == [5, 6, 10, 12]
    assert main_turns[0]["extra"] == {"temperature": 0.5}
    # a session line is written when its last request is read: subagents before main
    assert [x["session_id"] for x in _lines(out)] == ["sub-b", "sub-a", "other", "main"]
    assert result.unmapped == {"root sessions whose arrival times are not expressible (AIPerf paces roots itself)": 2}


def test_dag_says_what_it_cannot_express(make_trace, tmp_path):
    # m2 waits for m0 and m1 (a join inside the session), m3 for c0 of a session it did not spawn;
    # sub-b is not joined by anything and was spawned before main's last turn
    edges = [[], ["m0"], ["m1"], ["m1"], ["a0"], ["a1", "m0", "m1"], [], ["m2", "c0"]]
    trace = agent_trace(make_trace, depends_on=pl.Series(edges, dtype=DEPS))
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", trace, out)
    assert result.unmapped == {
        "turns whose in-session dependencies are not just the previous turn (serialized)": 1,
        "dependencies on a session the turn's session did not spawn (dropped)": 1,
        "subagents nothing joins, spawned before the parent's last turn (joined at it)": 1,
        "root sessions whose arrival times are not expressible (AIPerf paces roots itself)": 2,
    }
    spawns = {x["session_id"]: x for x in _lines(out)}["main"]["turns"][1]["spawns"]
    assert spawns == [{"children": ["sub-a"], "join_at": 2}, {"children": ["sub-b"], "join_at": 3}]


def test_dag_a_subagent_without_edges_spawns_from_its_parent_session(make_trace, tmp_path):
    # no depends_on at all: sub-a and sub-b name main in parent_session_id; a subagent spawned by
    # main's turn 1 (the latest to arrive before it); a non-chat body is one user message
    bodies = [_body(r) for r in IDS]
    bodies[6] = json.dumps({"prompt": "complete this", "max_tokens": 3})
    trace = agent_trace(
        make_trace,
        depends_on=pl.Series([[]] * len(IDS), dtype=DEPS),
        wait_us=pl.Series([None] * len(IDS), dtype=pl.Int64),
        body=pl.Series(bodies),
        api=pl.Series(["chat"] * 6 + ["completions", "chat"]),
    )
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", trace, out)
    lines = {x["session_id"]: x for x in _lines(out)}
    # terminal-looking spawns are joined at the parent's last turn (nothing says when it waits)
    assert lines["main"]["turns"][1]["spawns"] == [{"children": ["sub-a", "sub-b"], "join_at": 3}]
    # without wait_us: the gap from the previous turn's recorded end (m1 ended at 2000 ms)
    assert lines["sub-a"]["turns"][0]["delay"] == 100 and lines["main"]["turns"][2]["delay"] == 4000 - 2000
    assert lines["other"]["turns"][0]["messages"] == [{"role": "user", "content": "complete this"}]
    assert result.unmapped["non-chat bodies sent as one user message"] == 1


def test_dag_lock_keeps_a_session_out_and_its_spawn_with_it(make_trace, tmp_path):
    bodies = [_body(r) for r in IDS]
    bodies[3] = _body("b0 mail me at jane.doe@example.com")
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", agent_trace(make_trace, body=pl.Series(bodies)), out)
    lines = {x["session_id"]: x for x in _lines(out)}
    assert result.written == 3 and "sub-b" not in lines and sum(result.quarantined.values()) == 1
    assert lines["main"]["turns"][1]["spawns"] == [{"children": ["sub-a"], "join_at": 2}]
    assert "jane.doe" not in out.read_text()


@pytest.mark.parametrize(("format", "block", "ids"), [("vllm", 16, 4), ("guidellm", 512, 1), ("vllm", 512, 1)])
def test_timed_trace_seconds_and_the_readers_block(tmp_path, format, block, ids):
    # token-only rows from Mooncake ids of 32 tokens: 50-token prompts sharing their first 32
    from capture.importers import import_mooncake

    rows = [
        {"timestamp": 0, "input_length": 50, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 50, "output_length": 4, "hash_ids": [1, 3]},
        {"timestamp": 2250, "input_length": 50, "output_length": 4, "hash_ids": [1, 2]},
    ]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import_mooncake(src, tmp_path / "m.parquet", hash_block=32)
    trace, n = tmp_path / "m.parquet", 3
    out = tmp_path / "t.jsonl"
    kwargs = {} if block == {"vllm": 16, "guidellm": 512}[format] else {"block_size": block}
    assert export_trace(format, trace, out, **kwargs).written == n
    lines = _lines(out)
    assert [x["timestamp"] for x in lines] == [0.0, 1.5, 2.25]  # seconds: the readers' unit
    assert set(lines[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}
    # GuideLLM's mooncake kind checks ceil(input_length / block) == len(hash_ids); vLLM stops at the last id
    assert all(len(x["hash_ids"]) == -(-x["input_length"] // block) == ids for x in lines)
    assert [x["input_length"] for x in lines] == [50] * n
    # the same prompt gets the same ids; prompts sharing 32 tokens share their first two 16-token ids
    assert lines[2]["hash_ids"] == lines[0]["hash_ids"]
    if block == 16:
        assert lines[1]["hash_ids"][:2] == lines[0]["hash_ids"][:2] and lines[1]["hash_ids"][2] != lines[0]["hash_ids"][2]


def test_guidellm_durations_are_the_recorded_latencies(make_trace, tmp_path):
    out = tmp_path / "g.jsonl"
    export_trace("guidellm", agent_trace(make_trace), out)
    lines = _lines(out)
    assert [x["duration"] for x in lines] == [e / 1000 for e in E2E_MS]
    assert [x["timestamp"] for x in lines] == [a / 1000 for a in ARRIVAL_MS]


def test_inference_perf_folder_one_file_per_root_session(make_trace, tmp_path):
    out = tmp_path / "otel"
    out.mkdir()
    (out / "stale.json").write_text("{}")  # an earlier export's folder is replaced whole
    result = export_trace("inference-perf", agent_trace(make_trace, response=pl.Series([f"answer {r}" for r in IDS])), out)
    files = sorted(out.iterdir())
    assert result.written == 2 and [f.name for f in files] == ["000000-other.json", "000001-main.json"]
    doc = json.loads(files[1].read_text())
    assert doc["trace_id"] == "main" and doc["span_count"] == 7 == len(doc["spans"])
    spans = {s["span_id"]: s for s in doc["spans"]}
    assert set(spans) == set(IDS) - {"c0"}
    m2 = spans["m2"]
    assert m2["start_time"] == "2023-11-14T22:13:24.000000Z" and m2["end_time"] == "2023-11-14T22:13:25.000000Z"
    attrs = m2["attributes"]
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.conversation.id"] == "main"
    assert json.loads(attrs["gen_ai.input.messages"]) == [{"role": "user", "content": "question m2"}]
    assert attrs["gen_ai.output.text"] == "answer m2" and attrs["gen_ai.usage.output_tokens"] == 10
    assert spans["a0"]["attributes"]["gen_ai.conversation.id"] == "sub-a" and m2["status"] == {"code": 1}


def test_export_cli_formats_and_block_size(make_trace, tmp_path, capsys):
    path = agent_trace(make_trace).write(tmp_path / "t.parquet")
    assert main(["export", "dag", str(path), "-o", str(tmp_path / "d.jsonl"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "(4 sessions)" in captured.out
    assert "dag cannot express: root sessions whose arrival times are not expressible" in captured.err
    assert main(["export", "dag", str(path), "-o", str(tmp_path / "x.jsonl"), "--block-size", "16", "--quiet"]) != 0
    assert "--block-size: only for mooncake, vllm, guidellm" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="must be positive"):
        export_trace("vllm", path, tmp_path / "v.jsonl", block_size=0)
    assert not (tmp_path / "x.jsonl").exists() and not list(tmp_path.glob(".*.tmp*"))


def test_dag_a_subagent_starting_before_its_parent_is_a_pre_session_spawn(make_trace, tmp_path):
    trace = make_trace(
        n=3,
        request_id=pl.Series(["e0", "m0", "m1"]),
        session_id=pl.Series(["early", "main", "main"]),
        parent_session_id=pl.Series(["main", None, None], dtype=pl.String),
        api=pl.Series(["chat"] * 3),
        body=pl.Series([_body(r) for r in ("e0", "m0", "m1")]),
        arrival_us=pl.Series([0, 0, 1_000_000], dtype=pl.Int64),
        depends_on=pl.Series([[], [], ["m0", "e0"]], dtype=DEPS),
    )
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", trace, out)
    lines = {x["session_id"]: x for x in _lines(out)}
    assert lines["main"]["pre_session_spawns"] == ["early"]
    assert all("spawns" not in t for t in lines["main"]["turns"])
    assert result.unmapped == {"joins on subagents that start before their parent (pre_session_spawns are not joined)": 1}


def test_dag_a_subagent_waiting_on_two_sessions_is_spawned_by_the_later(make_trace, tmp_path):
    # b0 waits for m1 and a0: sub-b becomes sub-a's spawn (a0 is the later), so main's join on b0 is
    # on a session main did not spawn, and nothing in sub-a joins it
    edges = [[], ["m0"], ["m1"], ["m1", "a0"], ["a0"], ["a1", "b0"], [], ["m2"]]
    out = tmp_path / "dag.jsonl"
    result = export_trace("dag", agent_trace(make_trace, depends_on=pl.Series(edges, dtype=DEPS)), out)
    lines = {x["session_id"]: x for x in _lines(out)}
    assert lines["sub-a"]["turns"][0]["spawns"] == [{"children": ["sub-b"], "join_at": 1}]
    assert lines["main"]["turns"][1]["spawns"] == [{"children": ["sub-a"], "join_at": 2}]
    assert result.unmapped == {
        "cross-session dependencies of a subagent's first request beyond its spawn (dropped)": 1,
        "dependencies on a session the turn's session did not spawn (dropped)": 1,
        "subagents nothing joins, spawned before the parent's last turn (joined at it)": 1,
        "root sessions whose arrival times are not expressible (AIPerf paces roots itself)": 2,
    }


def test_dag_round_trips_through_our_dag_importer(make_trace, tmp_path, imported):
    from capture.importers import import_log
    from capture.importers.sniff import sniff

    out = tmp_path / "dag.jsonl"
    export_trace("dag", agent_trace(make_trace), out)
    assert sniff(out) == "aiperf-dag"
    back = imported(import_log, "aiperf-dag", out, rate=1.0).df
    name = {r: f"{s}:{SESSIONS[:i].count(s)}" for i, (r, s) in enumerate(zip(IDS, SESSIONS, strict=True))}
    got = dict(zip(back["request_id"].to_list(), back["depends_on"].to_list(), strict=True))
    # the same graph, plus each turn's previous turn (implicit in dag_jsonl: m2 also waits for m1)
    want = {name[r]: sorted(name[d] for d in e) for r, e in zip(IDS, EDGES, strict=True)}
    want["main:2"] = sorted([*want["main:2"], "main:1"])
    assert {r: sorted(d) for r, d in got.items()} == want
    waits = dict(zip(back["request_id"].to_list(), back["wait_us"].to_list(), strict=True))
    assert {name[r]: waits[name[r]] for r, w in zip(IDS, WAIT_MS, strict=True) if w} == {
        name[r]: w * 1000 for r, w in zip(IDS, WAIT_MS, strict=True) if w
    }
    parents = dict(zip(back["session_id"].to_list(), back["parent_session_id"].to_list(), strict=True))
    assert parents == {"main": None, "sub-a": "main", "sub-b": "main", "other": None}
