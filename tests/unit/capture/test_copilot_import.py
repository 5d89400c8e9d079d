"""GitHub Copilot coding agent dataset (2026) import: sessions written field by field from the
release's schema.json (Azure/AzurePublicDataset, analysis/GitHubCopilotCodingAgents), the DAG
its tool batches give, the prefix sharing its cached tokens give, bad lines, and `auto`."""

from __future__ import annotations

import gzip
import json

import pytest

from capture.importers import import_copilot, tokens
from capture.importers.sniff import sniff
from replay.cli.main import main
from replay.errors import TraceError
from replay.trace import read_trace

T = "2026-06-01T10:{}Z"


def _call(mid, at, ms, initiator, prompt, completion, cached, model="Model A", status="OK"):
    return {
        "message_id": mid,
        "timestamp": T.format(at),
        "duration_ms": ms,
        "initiator_type": initiator,
        "model": model,
        "result": "Success",
        "status_code": status,
        "tokens": {
            "total": prompt + completion,
            "prompt": prompt,
            "completion": completion,
            "cached": cached,
            "cached_pct": round(100 * cached / prompt, 2) if prompt else 0.0,
        },
        "message_metadata": [{"type": "System", "role": "system", "sequenceId": 0, "token_len": 300}],
    }


def _batch(request_id, at, ms, statuses):
    return {
        "timestamp": T.format(at),
        "duration_ms": ms,
        "auto_continue": True,
        "result": "Success",
        "request_id": request_id,
        "function_calls": [{"name": f"tool{i}", "status": s, "duration_ms": 100.0} for i, s in enumerate(statuses)],
    }


# session A: a user call asks for tools (a batch of 3 parallel function calls, one failed); the
# next agent call depends on it; a call with prompt 0; two parallel calls (the second on the
# instant-apply "tool-model") no batch leads to; a second turn started by the user, whose tool
# batch no call follows
SESSION_A = {
    "session_id": "sA",
    "date": "2026-06-01",
    "turns": [
        {
            "turn_id": "t1",
            "llm_calls": [
                _call("a1", "00:00.000", 2000.0, "user", 1000, 50, 0),
                _call("a2", "00:05.000", 1000.0, "agent", 1300, 20, 1000),
                _call("a3", "00:07.000", 500.0, "agent", 0, 0, 0),
                _call("a4", "00:08.000", 1000.0, "agent", 1600, 30, 1300),
                _call("a5", "00:08.200", 1000.0, "agent", 700, 40, 0, model="tool-model"),
            ],
            "tool_batches": [_batch("a1", "00:02.500", 1500.0, [1, 2, 1])],
        },
        {
            "turn_id": "t2",
            "llm_calls": [_call("a6", "01:00.000", 3000.0, "user", 2000, 60, 512, status="500")],
            "tool_batches": [_batch("a6", "01:03.500", 200.0, [1])],
        },
    ],
}
# session B overlaps A in time (its line comes after A's): rows go in arrival order
SESSION_B = {
    "session_id": "sB",
    "date": "2026-06-01",
    "turns": [{"turn_id": "u1", "llm_calls": [_call("b1", "00:03.000", 1000.0, "user", 100, 5, 0)], "tool_batches": []}],
}


def _shards(tmp_path, *sessions, name="shard-0000.jsonl.gz"):
    folder = tmp_path / "ghcp" / "date=2026-06-01"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        for s in sessions:
            f.write((s if isinstance(s, str) else json.dumps(s)) + "\n")
    (folder / "manifest.json").write_text('{"sessions": 2}')
    return tmp_path / "ghcp"


def test_sessions_become_a_dag_field_by_field(tmp_path):
    src = _shards(tmp_path, SESSION_A, SESSION_B)
    import_copilot(src, tmp_path / "out.parquet")
    trace = read_trace(tmp_path / "out.parquet")
    df = trace.df
    assert trace.meta.source_format == "copilot-agent-jsonl"
    assert trace.meta.t0_unix_us == 1_780_308_000_000_000  # 2026-06-01T10:00:00Z
    assert df["request_id"].to_list() == ["a1", "b1", "a2", "a4", "a5", "a6"]  # a3 (prompt 0) skipped
    assert df["arrival_us"].to_list() == [0, 3_000_000, 5_000_000, 8_000_000, 8_200_000, 60_000_000]
    assert df["session_id"].to_list() == ["sA", "sB", "sA", "sA", "sA", "sA"]
    assert df["turn"].to_list() == [0, 0, 1, 2, 3, 4]
    assert df["input_tokens"].to_list() == [1000, 100, 1300, 1600, 700, 2000]
    assert df["output_tokens"].to_list() == [50, 5, 20, 30, 40, 60]
    assert df["max_tokens"].to_list() == [50, 5, 20, 30, 40, 60]
    assert df["cached_tokens"].to_list() == [0, 0, 1000, 1300, 0, 512]
    assert df["e2e_us"].to_list() == [2_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000, 3_000_000]
    assert df["status"].to_list() == [200, 200, 200, 200, 200, 500]
    assert df["model"].to_list() == ["Model A", "Model A", "Model A", "Model A", "tool-model", "Model A"]
    assert df["body"].is_null().all()
    # a2 waits for a1 through the tool batch (a1 ended at 2 s, a2 arrived at 5 s); a4 and a5
    # overlap and are not linked: both follow a2 (ended 6 s); a6 starts turn 2 after the call
    # that ended last (a5, 9.2 s): the user's think time
    assert df["depends_on"].to_list() == [[], [], ["a1"], ["a2"], ["a2"], ["a5"]]
    assert df["wait_us"].to_list() == [None, None, 3_000_000, 2_000_000, 2_200_000, 50_800_000]
    # prefix sharing from the cached tokens, 512-token blocks: a2 extends a1 whole (its partial
    # last block too), a4 extends a2, the tool-model call starts fresh, a6 keeps one block of
    # a4; ids are numbered as the sessions are read (session B's line comes second)
    assert df["hash_ids"].to_list() == [[1, 2], [10], [1, 2, 3], [1, 2, 3, 4], [5, 6], [1, 7, 8, 9]]
    report = json.loads(trace.meta.import_report)
    assert report["records_imported"] == 6 and report["sessions"] == 2 and report["copilot_sessions"] == 2
    assert report["llm_calls"] == 7 and report["calls_prompt_zero_skipped"] == 1 and report["turns"] == 3
    assert report["tool_batches"] == 2 and report["tool_batches_linked"] == 1
    assert report["tool_batches_without_next_call"] == 1
    assert report["function_calls"] == 4 and report["function_calls_failed"] == 1
    assert report["edges"] == {"tool": 1, "turn": 1, "temporal": 2}
    assert report["status_codes"] == {"500": 1, "OK": 6} and report["initiators"] == {"user": 3, "agent": 4}
    assert "message_metadata" in report["not_mapped"] and report["files"] == 1


def test_synthesized_prompts_extend_each_other(tmp_path, gpt2):
    import_copilot(_shards(tmp_path, SESSION_A), tmp_path / "out.parquet", block_size=16)
    trace = read_trace(tmp_path / "out.parquet")
    bodies = [b for batch in trace.body_batches(len(trace), 64, synthesize=True) for b in batch]
    texts = dict(zip(trace.df["request_id"], (json.loads(b)["messages"][0]["content"] for b in bodies)))
    for rid, n in zip(trace.df["request_id"], trace.df["input_tokens"]):
        assert len(gpt2.encode(texts[rid], add_special_tokens=False).ids) == n
    assert texts["a2"].startswith(texts["a1"]) and texts["a4"].startswith(texts["a2"])  # whole extensions
    assert not texts["a5"].startswith(texts["a1"][:50])  # another model: fresh text
    hashes = dict(zip(trace.df["request_id"], trace.df["block_hashes"].to_list()))
    assert hashes["a4"][: len(hashes["a2"])] == hashes["a2"]
    shared = sum(1 for x, y in zip(hashes["a6"], hashes["a4"]) if x == y)
    assert shared == 512 // 16  # a6 shares one 512-token block (its 512 cached tokens) with a4


def test_a_join_waits_for_every_batch_asker(tmp_path):
    # two parallel agent calls each ask for tools; the next call waits for both batches
    session = {
        "session_id": "sJ",
        "turns": [
            {
                "turn_id": "t",
                "llm_calls": [
                    _call("j1", "00:00.000", 1000.0, "user", 600, 10, 0),
                    _call("j2", "00:00.100", 1500.0, "agent", 600, 10, 0, model="Model B"),
                    _call("j3", "00:04.000", 500.0, "agent", 900, 10, 600),
                ],
                "tool_batches": [_batch("j1", "00:01.200", 800.0, [1]), _batch("j2", "00:01.700", 1000.0, [1, 1])],
            }
        ],
    }
    import_copilot(_shards(tmp_path, session), tmp_path / "out.parquet")
    df = read_trace(tmp_path / "out.parquet").df
    assert df["depends_on"].to_list() == [[], [], ["j1", "j2"]]
    assert df["wait_us"].to_list() == [None, None, 4_000_000 - 1_600_000]  # from j2's end, the later


def test_one_shard_plain_jsonl_and_limit(tmp_path):
    plain = tmp_path / "one.jsonl"
    plain.write_text(json.dumps(SESSION_A) + "\n" + json.dumps(SESSION_B) + "\n")
    result = import_copilot(plain, tmp_path / "out.parquet", limit=2)
    assert result.rows == 2 and read_trace(tmp_path / "out.parquet").df["request_id"].to_list() == ["a1", "b1"]


def test_sessions_out_of_order_past_one_run_are_merged(tmp_path, monkeypatch):
    # runs of 2 records spill to temporary files and are merged back in arrival order
    import capture.importers.copilot as copilot

    monkeypatch.setattr(tokens, "CHUNK_ROWS", 2)
    real = tokens.time_ordered
    monkeypatch.setattr(copilot, "time_ordered", lambda recs: real(recs, run_rows=2))
    early_call = _call("c1", "00:00.500", 10.0, "user", 10, 1, 0)
    late = {"session_id": "sC", "turns": [{"turn_id": "v", "llm_calls": [early_call], "tool_batches": []}]}
    import_copilot(_shards(tmp_path, SESSION_A, SESSION_B, late), tmp_path / "out.parquet")
    df = read_trace(tmp_path / "out.parquet").df
    assert df["request_id"].to_list() == ["a1", "c1", "b1", "a2", "a4", "a5", "a6"]
    assert df["arrival_us"].is_sorted()


def _first(session):
    return session["turns"][0]["llm_calls"][0]


@pytest.mark.parametrize(
    "mutate, field, what",
    [
        (lambda s: _first(s)["tokens"].update(prompt=-3), "turns[0].llm_calls[0].tokens.prompt", "-3 is not a count"),
        (lambda s: _first(s).update(timestamp="yesterday"), "turns[0].llm_calls[0].timestamp", "not epoch seconds"),
        (lambda s: _first(s).update(initiator_type="bot"), "turns[0].llm_calls[0].initiator_type", "neither"),
        (lambda s: s["turns"][0]["tool_batches"][0].update(duration_ms=-1), "turns[0].tool_batches[0].duration_ms", "duration"),
        (lambda s: s["turns"][1]["llm_calls"][0].update(message_id="a1"), "turns[1].llm_calls[0].message_id", "twice"),
        (lambda s: s.update(turns={}), "turns", "is not a list"),
    ],
)
def test_a_bad_session_is_one_line_naming_file_line_and_field(tmp_path, capsys, mutate, field, what):
    bad = json.loads(json.dumps(SESSION_A))
    mutate(bad)
    src = _shards(tmp_path, SESSION_B, bad)
    with pytest.raises(TraceError) as err:
        import_copilot(src, tmp_path / "out.parquet")
    msg = str(err.value)
    assert msg.startswith("date=2026-06-01/shard-0000.jsonl.gz: line 2: session sA: ") and "\n" not in msg
    assert f"(field '{field}')" in msg and what in msg
    assert not (tmp_path / "out.parquet").exists()
    assert main(["import", "copilot", str(src), "-o", str(tmp_path / "out.parquet"), "--quiet"]) != 0
    assert capsys.readouterr().err.strip().endswith(msg) and not (tmp_path / "out.parquet").exists()


def test_skip_bad_counts_and_keeps_going(tmp_path):
    bad = json.loads(json.dumps(SESSION_A))
    bad["turns"][0]["llm_calls"][0]["tokens"]["prompt"] = "many"
    src = _shards(tmp_path, "{not json", bad, SESSION_B)
    import_copilot(src, tmp_path / "out.parquet", skip_bad=True)
    trace = read_trace(tmp_path / "out.parquet")
    report = json.loads(trace.meta.import_report)
    assert trace.df["request_id"].to_list() == ["b1"]
    assert report["skipped_lines"] == 2 and report["llm_calls"] == 1  # the bad session's calls are not counted
    assert [s["line"] for s in report["first_skipped"]] == [1, 2]
    assert report["first_skipped"][0]["file"] == "date=2026-06-01/shard-0000.jsonl.gz"


def test_auto_finds_the_folder_and_a_shard(tmp_path, capsys):
    src = _shards(tmp_path, SESSION_A)
    shard = src / "date=2026-06-01" / "shard-0000.jsonl.gz"
    assert sniff(src) == "copilot" and sniff(shard) == "copilot"
    # a session longer than the sniffed head is still found from its first characters
    huge = json.loads(json.dumps(SESSION_A))
    huge["turns"] = huge["turns"] * 4000
    long_src = tmp_path / "long.jsonl"
    long_src.write_text(json.dumps(huge) + "\n")
    assert long_src.stat().st_size > (1 << 20) and sniff(long_src) == "copilot"
    assert main(["import", "auto", str(src), "-o", str(tmp_path / "t.parquet"), "--quiet"]) == 0
    assert "importing as copilot (found by `auto`)" in capsys.readouterr().err
    assert len(read_trace(tmp_path / "t.parquet")) == 5


def test_a_truncated_shard_is_one_line_naming_it(tmp_path):
    src = _shards(tmp_path, SESSION_A, SESSION_B)
    shard = src / "date=2026-06-01" / "shard-0000.jsonl.gz"
    shard.write_bytes(shard.read_bytes()[:-20])
    with pytest.raises(TraceError, match=r"^date=2026-06-01/shard-0000.jsonl.gz: cannot read"):
        import_copilot(src, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()
