"""ShareGPT files (one JSON array of ``{"id", "conversations": [{"from", "value"}]}``, built here
field by field from the layout vLLM's ShareGPTDataset and multi-turn converter read): vLLM's
single-turn reading with its length filters, and conversations rejoined into sessions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capture.importers import import_log
from capture.importers.sharegpt import json_array_items
from capture.importers.sniff import sniff
from replay.cli.main import main
from replay.errors import ConfigError, TraceError
from replay.trace import read_trace


def words(n: int, word: str = "word") -> str:
    """A text of exactly ``n`` gpt2 tokens."""
    return word + f" {word}" * (n - 1)


def msg(who: str, value: str) -> dict:
    return {"from": who, "value": value}


Q1, A1, Q2, A2 = words(6, "alpha"), words(9, "beta"), words(5, "cat"), words(7, "dog")
Q3, A3 = words(8, "tree"), words(12, "house")
RECORDS = [
    {"id": "aaa_0", "conversations": [msg("human", Q1), msg("gpt", A1), msg("human", Q2), msg("gpt", A2)]},
    # the next chunk of aaa starts with the role the last ended with: that message is dropped
    {"id": "aaa_4", "conversations": [msg("gpt", words(5, "again")), msg("user", Q3), msg("chatgpt", A3)]},
    # a conversation that continues an earlier one: its leading assistant message is dropped
    {"id": "bbb_0", "conversations": [msg("gpt", words(5, "again")), msg("human", words(6, "ask")), msg("bard", words(8, "ok"))]},
    # a system prompt, and a last user message nobody answered
    {"id": "ccc_0", "conversations": [msg("system", words(5, "sys")), msg("human", words(5, "hi")), msg("gpt", words(6, "yo"))]},
    {"id": "ddd_0", "conversations": [msg("human", "hi"), msg("gpt", words(10))]},  # prompt of 1 token
    {"id": "eee_0", "conversations": [msg("human", words(1100)), msg("gpt", words(10))]},  # prompt over 1024
    {"id": "fff_0", "conversations": [msg("human", words(1000)), msg("gpt", words(1100))]},  # sum over 2048
    {"id": "ggg_0", "conversations": [msg("human", words(10))]},  # one message
    {"id": "aaa_9", "conversations": [msg("human", words(4, "late")), msg("gpt", words(4, "reply"))]},  # apart
]
RECORDS[3]["conversations"].append(msg("human", words(4, "bye")))


@pytest.fixture
def sharegpt(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(RECORDS, indent=2))
    return path


def _import(path, tmp_path, name="out.parquet", **kw):
    kw.setdefault("rate", 2.0)
    result = import_log("sharegpt", path, tmp_path / name, **kw)
    return read_trace(result.path)


def test_streaming_reader_over_a_small_window(sharegpt, monkeypatch):
    from capture.importers import sharegpt as module

    monkeypatch.setattr(module, "READ_CHARS", 7)  # every record spans many reads
    assert [item for _, item in json_array_items(sharegpt)] == RECORDS


def test_single_turn_reading_and_vllm_filters(sharegpt, tmp_path, gpt2):
    trace = _import(sharegpt, tmp_path)
    df = trace.df
    assert trace.meta.source_format == "sharegpt" and trace.meta.redaction_policy == "none"
    # records aaa_0, aaa_4, bbb_0, ccc_0, aaa_9: the first message a user prompt, whatever its role
    assert df["request_id"].to_list() == ["aaa_0@1", "aaa_4@2", "bbb_0@3", "ccc_0@4", "aaa_9@9"]
    prompts = [json.loads(b)["messages"] for b in df["body"]]
    assert prompts[2] == [{"role": "user", "content": words(5, "again")}]
    assert df["input_tokens"].to_list() == [6, 5, 5, 5, 4]
    assert df["output_tokens"].to_list() == [9, 8, 6, 5, 4]  # the second message's tokens
    assert df["max_tokens"].to_list() == df["output_tokens"].to_list()
    assert df["arrival_us"][0] == 0 and (np.diff(df["arrival_us"].to_numpy()) > 0).all()
    report = json.loads(trace.meta.import_report)["sharegpt"]
    assert report["records_read"] == 9 and report["mode"] == "single"
    assert report["not_requests"] == {
        "prompt_or_output_under_4_tokens": 1,
        "prompt_over_1024_tokens": 1,
        "total_over_2048_tokens": 1,
        "fewer_than_2_messages": 1,
    }


def test_poisson_rate_is_seeded(tmp_path):
    path = tmp_path / "many.json"
    path.write_text(
        json.dumps([{"id": f"x{i}_0", "conversations": [msg("human", words(5)), msg("gpt", words(5))]} for i in range(400)])
    )
    a = _import(path, tmp_path, "a.parquet", rate=4.0, seed=7)
    b = _import(path, tmp_path, "b.parquet", rate=4.0, seed=7)
    c = _import(path, tmp_path, "c.parquet", rate=4.0, seed=8)
    assert a.df["arrival_us"].equals(b.df["arrival_us"]) and not a.df["arrival_us"].equals(c.df["arrival_us"])
    gaps = np.diff(a.df["arrival_us"].to_numpy()) / 1e6
    assert abs(gaps.mean() - 0.25) < 0.25 * 0.15  # 399 exponential gaps of mean 1/4 s
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.15


def test_multi_turn_sessions(sharegpt, tmp_path):
    trace = _import(sharegpt, tmp_path, sharegpt_mode="multi", think_s=3.0)
    df = trace.df.sort(["session_id", "turn"])
    by = {s: df.filter(df["session_id"] == s) for s in df["session_id"].unique()}
    assert sorted(by) == ["aaa", "aaa~1", "bbb", "ccc", "ddd", "eee", "fff"]
    aaa = by["aaa"]
    bodies = [json.loads(b)["messages"] for b in aaa["body"]]
    user, bot = "user", "assistant"
    assert bodies == [
        [{"role": user, "content": Q1}],
        [{"role": user, "content": Q1}, {"role": bot, "content": A1}, {"role": user, "content": Q2}],
        [{"role": r, "content": t} for r, t in ((user, Q1), (bot, A1), (user, Q2), (bot, A2), (user, Q3))],
    ]
    assert aaa["output_tokens"].to_list() == [9, 7, 12]
    assert aaa["turn"].to_list() == [0, 1, 2]
    ids = aaa["request_id"].to_list()
    assert aaa["parent_request_id"].to_list() == [None, ids[0], ids[1]]
    assert aaa["depends_on"].to_list() == [None, [ids[0]], [ids[1]]] or aaa["depends_on"].to_list() == [[], [ids[0]], [ids[1]]]
    assert np.diff(aaa["arrival_us"].to_numpy()).tolist() == [3_000_000, 3_000_000]  # the think time
    assert [json.loads(b)["messages"] for b in by["bbb"]["body"]] == [[{"role": user, "content": words(6, "ask")}]]
    ccc = json.loads(by["ccc"]["body"][0])["messages"]
    assert [m["role"] for m in ccc] == ["system", "user"]
    assert len(by["eee"]) == 1  # no length filter in multi-turn
    report = json.loads(trace.meta.import_report)["sharegpt"]
    kinds = report["not_requests"]
    assert kinds["chunks_joined"] == 1 and kinds["conversations_split_apart"] == 1
    assert kinds["leading_assistant_messages_dropped"] == 1 and kinds["messages_after_the_last_answer"] == 2
    assert kinds["conversations_without_an_answer"] == 1 and report["think_time_s"] == 3.0


def test_bad_records(tmp_path):
    path = tmp_path / "bad.json"
    good = {"id": "ok_0", "conversations": [msg("human", words(5)), msg("gpt", words(5))]}
    path.write_text(json.dumps([good, {"id": "b_0", "conversations": [msg("robot", "x"), msg("gpt", "y")]}]))
    with pytest.raises(
        TraceError, match=r"bad.json: record 2: \(id b_0\) 'robot' is not one of .*\(field 'conversations\[0\].from'\)"
    ):
        _import(path, tmp_path, sharegpt_mode="multi")
    trace = _import(path, tmp_path, "skip.parquet", sharegpt_mode="multi", skip_bad=True)
    assert len(trace) == 1 and json.loads(trace.meta.import_report)["sharegpt"]["skipped_lines"] == 1
    path.write_text(json.dumps([good, {"id": "c_0"}]))
    with pytest.raises(TraceError, match=r"record 2: \(id c_0\) is missing or not a list \(field 'conversations'\)"):
        _import(path, tmp_path)
    path.write_text(json.dumps([good])[:-3])
    with pytest.raises(TraceError, match=r"bad.json: record 1: not valid JSON"):
        _import(path, tmp_path)
    path.write_text(json.dumps(good))
    with pytest.raises(TraceError, match="not a JSON array"):
        _import(path, tmp_path)
    with pytest.raises(ConfigError, match="--rate"):
        import_log("sharegpt", path, tmp_path / "x.parquet")


def test_auto_and_cli(sharegpt, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    assert sniff(sharegpt) == "sharegpt"
    out = tmp_path / "cli.parquet"
    argv = ["import", "auto", str(sharegpt), "-o", str(out), "--no-redact", "--rate", "1", "--quiet"]
    assert main([*argv, "--sharegpt-mode", "multi", "--think-time", "2"]) == 0
    assert read_trace(out).df["session_id"].n_unique() == 7
    assert main([*argv, "--duration", "5"]) == 2  # servegen's flag
    assert "--duration: only for servegen" in capsys.readouterr().err


def test_redacted_by_default(sharegpt, tmp_path, monkeypatch, capsys):
    """The text is redacted as any log's is: the key goes to the log pipeline (whose redaction
    tests/unit/capture/test_logs.py checks), and without one the CLI stops before reading."""
    from capture.importers import sharegpt as module

    seen = {}
    monkeypatch.setattr(module, "import_calls", lambda files, calls_of, out, **kw: seen.update(kw))
    key = object()
    import_log("sharegpt", sharegpt, tmp_path / "k.parquet", rate=1.0, key=key)
    assert seen["key"] is key and seen["source_format"] == "sharegpt"
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)
    assert main(["import", "sharegpt", str(sharegpt), "-o", str(tmp_path / "n.parquet"), "--rate", "1"]) == 2
    assert "REPLAY_REDACT_KEY" in capsys.readouterr().err and not (tmp_path / "n.parquet").exists()
