"""Weka Claude Code trace import: traces written field by field from the format's specification
(callanjfox/agentic-coding-analysis, docs/TRACE_FORMAT.md), with a subagent, an async subagent,
local hash ids and partial blocks; the DAG, bad input and `auto`."""

from __future__ import annotations

import gzip
import json

import pytest

from capture.importers import import_weka
from capture.importers.sniff import sniff
from capture.importers.weka import _key
from replay.cli.main import main
from replay.errors import TraceError
from replay.trace import read_trace


def _req(t, n_in, n_out, ids, api=None, think=None, kind="n", ttft=None, stop="tool_use"):
    req = {"t": t, "type": kind, "model": "claude-x", "in": n_in, "out": n_out, "hash_ids": ids}
    req.update(input_types=["tool_result"], output_types=["tool_use"], stop=stop)
    for name, value in (("api_time", api), ("think_time", think), ("ttft", ttft)):
        if value is not None:
            req[name] = value
    return req


# blocks of 64 tokens; r0 has floor(150/64) = 2 ids (the partial block left out, as the
# format does), r1 a trailing id for its partial block (tolerated), the subagent's requests
# count from its start (the first is earlier than the spawn), the async one's from the trace's
CONV1 = {
    "id": "conv-1",
    "models": ["claude-x"],
    "block_size": 64,
    "hash_id_scope": "local",
    "tool_tokens": 100,
    "system_tokens": 50,
    "requests": [
        _req(0.0, 150, 20, [1, 2], api=2.0, think=0.0, kind="s", ttft=0.5),
        _req(5.0, 200, 10, [1, 2, 3, 4], api=1.0, think=3.0),
        {
            "t": 6.5,
            "type": "subagent",
            "agent_id": "ag1",
            "subagent_type": "Explore",
            "duration_ms": 1500,
            "total_tokens": 204,
            "tool_use_count": 2,
            "status": "completed",
            "models": ["claude-x"],
            "requests": [_req(0.0, 64, 5, [50], api=0.5, think=0.0), _req(1.0, 130, 5, [50, 51], api=0.5, think=0.5)],
        },
        _req(10.0, 300, 30, [1, 2, 3, 5], api=1.0, think=2.0, stop="end_turn"),
        {"t": 11.5, "type": "subagent", "agent_id": "ag2", "status": "async_launched", "requests": [_req(12.0, 10, 1, [])]},
        _req(13.0, 320, 5, [1, 2, 3, 5, 6], think=1.5),
    ],
    "totals": {"subagent_count": 2},
}
CONV2 = {"id": "conv-2", "models": ["claude-x"], "block_size": 64, "requests": [_req(0.0, 64, 1, [1], api=0.2)]}


def test_traces_become_sessions_with_subagents_field_by_field(tmp_path):
    src = tmp_path / "traces.jsonl"
    src.write_text(json.dumps(CONV1) + "\n" + json.dumps(CONV2) + "\n")
    import_weka(src, tmp_path / "out.parquet")
    trace = read_trace(tmp_path / "out.parquet")
    df = trace.df
    assert trace.meta.source_format == "weka-trace" and trace.meta.block_size_tokens == 64
    assert json.loads(trace.meta.synthesis)["block_tokens"] == 64
    assert df["request_id"].to_list() == [
        "conv-1:0",
        "conv-2:0",
        "conv-1:1",
        "conv-1/ag1:0",
        "conv-1/ag1:1",
        "conv-1:2",
        "conv-1/ag2:0",
        "conv-1:3",
    ]
    assert df["arrival_us"].to_list() == [0, 0, 5_000_000, 6_500_000, 7_500_000, 10_000_000, 12_000_000, 13_000_000]
    assert df["session_id"].to_list() == [
        "conv-1",
        "conv-2",
        "conv-1",
        "conv-1/ag1",
        "conv-1/ag1",
        "conv-1",
        "conv-1/ag2",
        "conv-1",
    ]
    parent = [None, None, None, "conv-1", "conv-1", None, "conv-1", None]
    assert df["parent_session_id"].to_list() == parent
    assert df["agent"].to_list() == [None, None, None, "Explore", "Explore", None, None, None]
    assert df["input_tokens"].to_list() == [150, 64, 200, 64, 130, 300, 10, 320]
    assert df["output_tokens"].to_list() == [20, 1, 10, 5, 5, 30, 1, 5]
    assert df["e2e_us"].to_list() == [2_000_000, 200_000, 1_000_000, 500_000, 500_000, 1_000_000, None, None]
    assert df["ttft_us"].to_list() == [500_000] + [None] * 7
    assert df["model"].unique().to_list() == ["claude-x"] and df["body"].is_null().all()
    # chains within sessions; the subagent follows the parent's request before its spawn; the
    # parent's next request joins the subagent's last; the async subagent is not waited for
    assert df["depends_on"].to_list() == [
        [],
        [],
        ["conv-1:0"],
        ["conv-1:1"],
        ["conv-1/ag1:0"],
        ["conv-1:1", "conv-1/ag1:1"],
        ["conv-1:2"],
        ["conv-1:2"],
    ]
    # from the latest dependency's end (t + api_time); r3's wait from r2's end, 11 s
    assert df["wait_us"].to_list() == [None, None, 3_000_000, 500_000, 500_000, 2_000_000, 1_000_000, 2_000_000]
    k1 = lambda v: _key("conv-1", v)  # noqa: E731
    hashes = dict(zip(df["request_id"], df["hash_ids"].to_list()))
    assert hashes["conv-1:0"] == [k1(1), k1(2), _key("conv-1:0", "partial")]
    assert hashes["conv-1:1"] == [k1(1), k1(2), k1(3), k1(4)]
    assert hashes["conv-1:2"][:4] == [k1(1), k1(2), k1(3), k1(5)] and len(hashes["conv-1:2"]) == 5
    assert hashes["conv-1/ag1:1"][:2] == [k1(50), k1(51)]
    assert hashes["conv-2:0"] == [_key("conv-2", 1)] != [k1(1)]  # local ids: per trace
    report = json.loads(trace.meta.import_report)
    assert report["traces"] == 2 and report["api_calls"] == 8 and report["sessions"] == 4
    assert report["subagents"] == 2 and report["async_subagents"] == 1
    assert report["partial_block_ids_added"] == 4  # r0, ag1's second, r2, the async one's
    assert report["edges"] == {"chain": 4, "spawn": 2, "join": 1}
    assert report["type"] == {"n": 7, "s": 1} and report["stop"] == {"end_turn": 1, "tool_use": 7}
    assert "tool_tokens" in report["not_mapped"]


def test_prefix_sharing_survives_into_the_text(tmp_path, gpt2):
    src = tmp_path / "conv-1.json"
    src.write_text(json.dumps(CONV1, indent=2))
    import_weka(src, tmp_path / "out.parquet", block_size=16)
    trace = read_trace(tmp_path / "out.parquet")
    bodies = [b for batch in trace.body_batches(len(trace), 64, synthesize=True) for b in batch]
    texts = dict(zip(trace.df["request_id"], (json.loads(b)["messages"][0]["content"] for b in bodies)))
    for rid, n in zip(trace.df["request_id"], trace.df["input_tokens"]):
        assert len(gpt2.encode(texts[rid], add_special_tokens=False).ids) == n
    ids = lambda r: gpt2.encode(texts[r], add_special_tokens=False).ids  # noqa: E731
    assert ids("conv-1:1")[:128] == ids("conv-1:0")[:128]  # two shared 64-token blocks
    assert ids("conv-1:1")[128:150] != ids("conv-1:0")[128:150]  # r0's partial block is its own
    assert ids("conv-1:2")[:192] == ids("conv-1:1")[:192]  # three shared blocks
    assert ids("conv-1:2")[192:200] != ids("conv-1:1")[192:200]  # block 4 differs (id 5 vs 4)


def test_a_folder_of_traces_and_global_ids(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.json").write_text(json.dumps({**CONV2, "hash_id_scope": "global"}, indent=1))
    (tmp_path / "t" / "b.json").write_text(json.dumps({**CONV2, "id": "conv-3", "hash_id_scope": "global"}, indent=1))
    assert sniff(tmp_path / "t") == "weka"
    import_weka(tmp_path / "t", tmp_path / "out.parquet")
    df = read_trace(tmp_path / "out.parquet").df
    assert df["hash_ids"].to_list() == [[1], [1]]  # global ids: shared across traces as they are


@pytest.mark.parametrize(
    "mutate, field, what",
    [
        (lambda c: c["requests"][1].update(hash_ids=[1]), "requests[1].hash_ids", "has 1 ids for 200 tokens"),
        (lambda c: c["requests"][0].update(t=-1), "requests[0].t", "not a time"),
        (lambda c: c["requests"][2]["requests"][1].update(out="x"), "requests[2].requests[1].out", "not a count"),
        (lambda c: c["requests"][3].update(type="q"), "requests[3].type", "'q' is not"),
        (lambda c: c.update(block_size=0), "block_size", "not a block size"),
        (lambda c: c.update(hash_id_scope="team"), "hash_id_scope", "neither"),
    ],
)
def test_a_bad_trace_is_one_line_naming_file_line_and_field(tmp_path, mutate, field, what):
    bad = json.loads(json.dumps(CONV1))
    mutate(bad)
    src = tmp_path / "traces.jsonl.gz"
    with gzip.open(src, "wt") as f:
        f.write(json.dumps(CONV2) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TraceError) as err:
        import_weka(src, tmp_path / "out.parquet")
    msg = str(err.value)
    assert msg.startswith("traces.jsonl.gz: line 2: trace conv-1: ") and "\n" not in msg
    assert f"(field '{field}')" in msg and what in msg
    assert not (tmp_path / "out.parquet").exists()


def test_skip_bad_and_block_sizes_that_differ(tmp_path):
    src = tmp_path / "traces.jsonl"
    other = {**CONV2, "id": "conv-9", "block_size": 16}
    late_bad = json.loads(json.dumps(CONV1))
    late_bad["requests"][3]["type"] = "q"  # bad after three good requests and a subagent
    src.write_text("[1, 2]\n" + json.dumps(CONV2) + "\n" + json.dumps(other) + "\n" + json.dumps(late_bad) + "\n")
    import_weka(src, tmp_path / "out.parquet", skip_bad=True)
    trace = read_trace(tmp_path / "out.parquet")
    report = json.loads(trace.meta.import_report)
    assert trace.df["request_id"].to_list() == ["conv-2:0"]
    assert report["skipped_lines"] == 3 and [s["line"] for s in report["first_skipped"]] == [1, 3, 4]
    assert report["traces"] == 1 and report["api_calls"] == 1  # the skipped traces count for nothing
    assert "one block size an import" in report["first_skipped"][1]["reason"]


def test_auto_finds_a_trace_file(tmp_path, capsys):
    src = tmp_path / "conv-1.json"
    src.write_text(json.dumps(CONV1, indent=2))
    lines = tmp_path / "traces.jsonl"
    lines.write_text(json.dumps(CONV1) + "\n")
    assert sniff(src) == "weka" and sniff(lines) == "weka"
    assert main(["import", "auto", str(src), "-o", str(tmp_path / "t.parquet"), "--quiet"]) == 0
    assert "importing as weka (found by `auto`)" in capsys.readouterr().err
    assert len(read_trace(tmp_path / "t.parquet")) == 7
