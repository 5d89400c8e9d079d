"""The shared part of the request-log importers: tokens and hashes from the real text, sessions
by id and by conversation, malformed lines, --skip-bad, the import report, times."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from capture.importers import LogRecord, Usage, build_trace, import_log
from capture.importers.records import LineError, parse_time_us
from replay.blocks import block_hashes
from replay.bodies import prompt_token_ids, text_slots
from replay.errors import ConfigError, TraceError
from replay.trace import read_trace

T0 = 1_715_299_200_000_000  # 2024-05-10T00:00:00Z in µs
SYSTEM = {"role": "system", "content": "You are a helpful assistant for a bakery."}


def _chat(rid, t_s, messages, response=None, session=None, **kw) -> LogRecord:
    return LogRecord(
        arrival_us=T0 + int(t_s * 1e6),
        api="chat",
        model="m",
        body={"model": "m", "messages": messages},
        request_id=rid,
        session_id=session,
        response=response,
        **kw,
    )


def _rows(trace) -> dict[str, dict]:
    return {r["request_id"]: r for r in trace.df.iter_rows(named=True)}


def _build(records, **kw):
    return build_trace(records, source="test.jsonl", source_format="test", **kw)


def test_tokens_and_hashes_are_those_of_the_real_text(gpt2):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "order",
                "description": "Place an order for baked goods.",
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string", "description": "What to bake, e.g. a sourdough loaf."}},
                },
            },
        }
    ]
    long_text = "The quick brown fox jumps over the lazy dog. " * 12
    bodies = [
        {
            "model": "m",
            "tools": tools,
            "messages": [
                SYSTEM,
                {
                    "role": "user",
                    "content": [{"type": "text", "text": long_text}, {"type": "image_url", "image_url": {"url": "x"}}],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "order", "arguments": '{"item": "rye"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ordered"},
            ],
        },
        {"model": "m", "prompt": ["Once upon a time", " there was a loaf."], "max_tokens": 7},
    ]
    records = [
        LogRecord(
            arrival_us=T0,
            api="chat",
            model="m",
            body=bodies[0],
            request_id="a",
            response="Your rye is on its way, thank you for ordering!",
        ),
        LogRecord(
            arrival_us=T0 + 5,
            api="completions",
            model="m",
            body=bodies[1],
            request_id="b",
            usage=Usage(prompt_tokens=9, completion_tokens=3),
        ),
    ]
    trace = _build(records, block_size=4)
    rows = _rows(trace)
    for rid, body in zip("ab", bodies):
        ids = prompt_token_ids([s.text for s in text_slots(body)], gpt2)
        assert rows[rid]["input_tokens"] == len(ids) > 4
        assert rows[rid]["block_hashes"] == block_hashes(ids, 4)
        assert json.loads(rows[rid]["body"]) == body
        assert rows[rid]["body"] == json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    # no usage: the recorded answer's token count; usage: the logged completion tokens
    answer = records[0].response
    assert rows["a"]["output_tokens"] == len(gpt2.encode(answer, add_special_tokens=False).ids)
    assert rows["a"]["max_tokens"] == rows["a"]["output_tokens"]
    assert rows["a"]["response"] == answer
    assert rows["b"]["output_tokens"] == 3 and rows["b"]["max_tokens"] == 7
    assert rows["b"]["response"] is None
    assert trace.meta.block_size_tokens == 4 and trace.meta.tokenizer == "gpt2"
    assert trace.meta.redaction_policy == "none" and trace.meta.raw_text
    # a recorded text answer carried no tool calls; a completions answer cannot say
    assert rows["a"]["tool_calls"] == [] and rows["b"]["tool_calls"] is None
    # the hashes follow the block size asked for
    assert len(_rows(_build(records, block_size=16))["a"]["block_hashes"]) == rows["a"]["input_tokens"] // 16


def test_three_turn_conversation_without_session_id_and_a_stranger_sharing_the_system_prompt():
    u1 = {"role": "user", "content": "Do you sell rye bread?"}
    a1 = "Yes, every morning."
    u2 = {"role": "user", "content": "How much is it?"}
    a2 = "Four euros a loaf."
    u3 = {"role": "user", "content": "Can I order two?"}
    other = {"role": "user", "content": "What time do you open?"}
    records = [
        _chat("t1", 0, [SYSTEM, u1], response=a1),
        _chat("x1", 1, [SYSTEM, other], response="At seven."),
        _chat("t2", 2, [SYSTEM, u1, {"role": "assistant", "content": a1}, u2], response=a2),
        # the same answer as content parts still matches (role + message texts)
        _chat(
            "t3",
            3,
            [
                SYSTEM,
                u1,
                {"role": "assistant", "content": a1},
                u2,
                {"role": "assistant", "content": [{"type": "text", "text": a2}]},
                u3,
            ],
        ),
        # a stranger with the same system prompt and nothing else in common
        _chat("x2", 4, [SYSTEM, {"role": "user", "content": "Do you sell cakes?"}]),
    ]
    trace = _build(records)
    rows = _rows(trace)
    assert [rows[r]["session_id"] for r in ("t1", "t2", "t3")] == ["t1"] * 3
    assert [rows[r]["turn"] for r in ("t1", "t2", "t3")] == [0, 1, 2]
    assert [rows[r]["parent_request_id"] for r in ("t1", "t2", "t3")] == [None, "t1", "t2"]
    for stranger in ("x1", "x2"):
        assert rows[stranger]["session_id"] == stranger
        assert rows[stranger]["turn"] == 0 and rows[stranger]["parent_request_id"] is None
    report = json.loads(trace.meta.import_report)
    assert report["sessions"] == 3 and report["turns_linked_by_conversation"] == 2


def test_two_sessions_sharing_a_system_prompt_do_not_merge():
    # both conversations are answered alike at first; each follow-up quotes its own history
    q_a = {"role": "user", "content": "I want bread."}
    q_b = {"role": "user", "content": "I want cake."}
    records = [
        _chat("a1", 0, [SYSTEM, q_a], response="Sure."),
        _chat("b1", 1, [SYSTEM, q_b], response="Sure."),
        _chat(
            "b2",
            2,
            [SYSTEM, q_b, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Chocolate, please."}],
            response="Done.",
        ),
        _chat(
            "a2",
            3,
            [SYSTEM, q_a, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Rye, please."}],
            response="Done.",
        ),
    ]
    rows = _rows(_build(records))
    assert rows["a2"]["session_id"] == "a1" and rows["a2"]["parent_request_id"] == "a1"
    assert rows["b2"]["session_id"] == "b1" and rows["b2"]["parent_request_id"] == "b1"
    assert rows["a2"]["turn"] == rows["b2"]["turn"] == 1


def test_answer_rule_and_no_answer_rule():
    u1 = {"role": "user", "content": "Name a bread."}
    records = [
        # answered "Rye." but the next request quotes another answer: not its next turn
        _chat("p", 0, [SYSTEM, u1], response="Rye."),
        _chat("q", 1, [SYSTEM, u1, {"role": "assistant", "content": "Spelt."}, {"role": "user", "content": "Another?"}]),
        # no recorded answer: any assistant message after its messages continues it
        _chat("r", 2, [{"role": "user", "content": "Hello?"}]),
        _chat(
            "s",
            3,
            [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Bye."}],
        ),
        # ... but a user message alone after them does not
        _chat("t", 4, [{"role": "user", "content": "Hello?"}, {"role": "user", "content": "Anyone?"}]),
    ]
    rows = _rows(_build(records))
    assert rows["q"]["parent_request_id"] is None and rows["q"]["session_id"] == "q"
    assert rows["s"]["parent_request_id"] == "r" and rows["s"]["session_id"] == "r"
    assert rows["s"]["turn"] == 1
    assert rows["t"]["parent_request_id"] is None and rows["t"]["session_id"] == "t"


def test_identical_openings_pair_each_follow_up_with_an_unclaimed_one():
    opening = [SYSTEM, {"role": "user", "content": "Hi"}]
    follow = [*opening, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    records = [
        _chat("a1", 0, opening, response="Hello!"),
        _chat("b1", 1, opening, response="Hello!"),
        _chat("x2", 2, follow),
        _chat("y2", 3, follow),
    ]
    rows = _rows(_build(records))
    # the latest opening without a next turn first, then the other one
    assert rows["x2"]["parent_request_id"] == "b1" and rows["y2"]["parent_request_id"] == "a1"


def test_sessions_from_the_log_and_group_ids():
    records = [
        _chat("s3", 9, [{"role": "user", "content": "c"}], session="S"),
        _chat("s1", 1, [{"role": "user", "content": "a"}], session="S"),
        _chat("s2", 5, [{"role": "user", "content": "b"}], session="S"),
        # a group id shared by two requests is their session; one seen once is no evidence
        _chat("g1", 2, [{"role": "user", "content": "d"}], group_id="G"),
        _chat("g2", 3, [{"role": "user", "content": "e"}], group_id="G"),
        _chat("h1", 4, [{"role": "user", "content": "f"}], group_id="H"),
    ]
    trace = _build(records)
    rows = _rows(trace)
    assert [rows[r]["turn"] for r in ("s1", "s2", "s3")] == [0, 1, 2]
    assert [rows[r]["parent_request_id"] for r in ("s1", "s2", "s3")] == [None, "s1", "s2"]
    assert {rows[r]["session_id"] for r in ("s1", "s2", "s3")} == {"S"}
    assert rows["g1"]["session_id"] == rows["g2"]["session_id"] == "G"
    assert rows["g2"]["parent_request_id"] == "g1" and rows["g2"]["turn"] == 1
    assert rows["h1"]["session_id"] == "h1"
    # rows in arrival order, arrival_us from the first
    assert trace.df["request_id"].to_list() == ["s1", "g1", "g2", "h1", "s2", "s3"]
    assert trace.df["arrival_us"].to_list() == [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 8_000_000]
    assert trace.meta.t0_unix_us == T0 + 1_000_000


def test_equal_arrivals_keep_file_order(jsonl, imported):
    lines = [{"timestamp": 100.0, "request_id": f"r{i}", "body": {"prompt": f"p{i}"}} for i in (3, 1, 2)]
    trace = imported(import_log, "openai", jsonl(lines))
    assert trace.df["request_id"].to_list() == ["r3", "r1", "r2"]


def _good(i: int, t: float = 0.0) -> dict:
    return {
        "timestamp": 1_715_299_200 + t + i,
        "request_id": f"r{i}",
        "body": {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]},
    }


def test_malformed_lines_name_file_line_and_field(jsonl, imported):
    cases = [
        ("{not json", "line 3: not valid JSON"),
        ("[1, 2]", "line 3: not a JSON object"),
        ({"request_id": "x", "body": {"prompt": "p"}}, "line 3: is missing (or 'created') (field 'timestamp')"),
        (
            {"timestamp": "yesterday", "body": {"prompt": "p"}},
            "line 3: time 'yesterday' is not epoch seconds or an ISO 8601 time (field 'timestamp')",
        ),
        ({"timestamp": 5, "body": {"model": "m"}}, "line 3: has none of 'messages' (a list), 'prompt' or 'input' (field 'body')"),
        (
            {"timestamp": 5, "body": {"model": "m", "input": "x"}},
            "line 3: has 'input': a Responses API or embeddings request; say which with the line's 'url' (field 'body')",
        ),
        (
            {"timestamp": 5, "url": "/v1/moderations", "body": {"input": "x"}},
            "line 3: '/v1/moderations' is not one of "
            "/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings (field 'url')",
        ),
        ({"timestamp": 5, "body": {"prompt": "p"}, "ttft_ms": -1}, "line 3: -1 is not a duration in ms >= 0 (field 'ttft_ms')"),
        (
            {"timestamp": 5, "request_id": "r0", "body": {"prompt": "p"}},
            "line 3: request id 'r0' repeats line 1 (field 'request id')",
        ),
    ]
    for bad, message in cases:
        path = jsonl([_good(0), "", bad, _good(1)])  # the blank line 2 is skipped, not a row
        with pytest.raises(TraceError) as e:
            imported(import_log, "openai", path)
        assert str(e.value) == f"log.jsonl: {message}"
        assert "\n" not in str(e.value)


def test_skip_bad_counts_and_reports(jsonl, imported):
    lines = [
        _good(0),
        "{oops",
        _good(1),
        {"timestamp": 1, "body": {"model": "m"}},
        "",
        _good(2),
        "null",
        "[]",
        "7",
        "{",
        "{}",
        _good(3),
    ]
    trace = imported(import_log, "openai", jsonl(lines), skip_bad=True)
    assert trace.df["request_id"].to_list() == ["r0", "r1", "r2", "r3"]
    report = json.loads(trace.meta.import_report)
    assert report["lines_read"] == 11  # the blank line is not read as a line
    assert report["records_imported"] == 4
    assert report["skipped_lines"] == 7
    assert report["first_skipped"] == [
        {"line": 2, "reason": "not valid JSON"},
        {"line": 4, "reason": "has none of 'messages' (a list), 'prompt' or 'input' (field 'body')"},
        {"line": 7, "reason": "not a JSON object"},
        {"line": 8, "reason": "not a JSON object"},
        {"line": 9, "reason": "not a JSON object"},
    ]
    assert report["format"] == "openai-jsonl"


def test_empty_or_all_bad_is_an_error(jsonl, tmp_path, imported):
    with pytest.raises(TraceError, match=r"^log\.jsonl: no requests imported \(0 lines read"):
        imported(import_log, "openai", jsonl(["", "  "]))
    with pytest.raises(TraceError, match=r"^log\.jsonl: no requests imported \(2 lines read, 2 skipped"):
        imported(import_log, "openai", jsonl(["{", "["]), skip_bad=True)
    with pytest.raises(TraceError, match=r"^nope\.jsonl: no such file$"):
        imported(import_log, "openai", tmp_path / "nope.jsonl")


def test_limit_and_bad_arguments(jsonl, imported):
    path = jsonl([_good(i) for i in range(5)])
    assert imported(import_log, "openai", path, limit=2).df["request_id"].to_list() == ["r0", "r1"]
    with pytest.raises(ConfigError, match="--limit"):
        imported(import_log, "openai", path, limit=0)
    with pytest.raises(ConfigError, match="--block-size"):
        imported(import_log, "openai", path, block_size=0)
    with pytest.raises(ConfigError, match="unknown"):
        imported(import_log, "helicone", path)
    with pytest.raises(ConfigError, match="--rate: only for OpenAI Batch"):
        imported(import_log, "litellm", path, rate=2.0)


@pytest.mark.parametrize(
    "value, expected_s",
    [
        (1715299200, 1715299200.0),
        (1715299200.25, 1715299200.25),
        ("2024-05-10T00:00:00Z", 1715299200.0),
        ("2024-05-10T00:00:00.5+00:00", 1715299200.5),
        ("2024-05-10T02:00:00.123456+02:00", 1715299200.123456),
        ("2024-05-09T19:30:00-0430", 1715299200.0),
        ("2024-05-10 00:00:01.963000", 1715299201.963),
        ("2024-05-10T00:00:00.1234567", 1715299200.123456),
        ("2024-05-10", 1715299200.0),
    ],
)
def test_time_formats(value, expected_s):
    assert parse_time_us(value, "t") == round(expected_s * 1_000_000)


@pytest.mark.parametrize("value", [True, -1, "2024-13-01T00:00:00Z", "12:00", "", None, float("nan")])
def test_bad_times(value):
    with pytest.raises(LineError) as e:
        parse_time_us(value, "startTime")
    assert e.value.field == "startTime"


# -- streaming: two passes, chunks, a bounded token cache -------------------------------------


def _conversations(n_sessions: int = 6, turns: int = 4) -> list[dict]:
    """OpenAI log lines of interleaved multi-turn chats (no session ids: linked by conversation),
    in arrival order; each answer is recorded, so each turn continues the one before."""
    lines = []
    for s in range(n_sessions):
        messages = [SYSTEM]
        for k in range(turns):
            messages = [*messages, {"role": "user", "content": f"session {s} question {k}: rye or spelt?"}]
            answer = f"Session {s} answer {k}: " + "spelt " * (k + s)
            lines.append(
                {
                    "timestamp": 1_715_299_200 + 10 * k + 0.5 * s,
                    "request_id": f"s{s}t{k}",
                    "body": {"model": "m", "messages": messages},
                    "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
                }
            )
            messages = [*messages, {"role": "assistant", "content": answer}]
    return sorted(lines, key=lambda line: line["timestamp"])


def _same(a, b) -> None:
    assert a.df.equals(b.df)
    assert a.meta == b.meta


def test_an_out_of_order_log_imports_in_arrival_order_with_the_same_sessions(jsonl, imported):
    lines = _conversations()
    in_order = imported(import_log, "openai", jsonl(lines, "sorted.jsonl"))
    shuffled = [lines[i] for i in (7, 0, 23, 3, 12, 1, 22, 2, 9, 4, 5, 6, 8, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21)]
    assert sorted(shuffled, key=lambda line: line["request_id"]) == sorted(lines, key=lambda line: line["request_id"])
    trace = imported(import_log, "openai", jsonl(["", *shuffled, ""], "shuffled.jsonl"))
    assert trace.df["request_id"].to_list() == [line["request_id"] for line in lines]
    rows = _rows(trace)
    for s in range(6):
        assert [rows[f"s{s}t{k}"]["session_id"] for k in range(4)] == [f"s{s}t0"] * 4
        assert [rows[f"s{s}t{k}"]["parent_request_id"] for k in range(4)] == [None, f"s{s}t0", f"s{s}t1", f"s{s}t2"]
    # each row is its own line, read again where it starts
    for line in lines:
        assert json.loads(rows[line["request_id"]]["body"]) == line["body"]
    # the same trace as the file in order, but for the lines read
    assert trace.df.equals(in_order.df)
    report, in_order_report = (json.loads(t.meta.import_report) for t in (trace, in_order))
    assert report == in_order_report and report["turns_linked_by_conversation"] == 18


def test_a_log_of_many_chunks_gives_the_one_chunk_trace(jsonl, imported, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from capture.importers import logs

    path = jsonl([*_conversations(), {"timestamp": 1_715_299_201, "request_id": "alone", "body": {"prompt": "a loaf"}}])
    whole = imported(import_log, "openai", path)
    monkeypatch.setattr(logs, "CHUNK_ROWS", 5)
    out = tmp_path / "chunks.parquet"
    result = import_log("openai", path, out)
    assert result.rows == 25 and pq.ParquetFile(out).num_row_groups == 5
    _same(read_trace(out), whole)
    # the text bound cuts chunks too
    monkeypatch.setattr(logs, "CHUNK_ROWS", 10_000)
    monkeypatch.setattr(logs, "CHUNK_CHARS", 1)  # each row's body is more
    import_log("openai", path, out)
    assert pq.ParquetFile(out).num_row_groups == 25
    _same(read_trace(out), whole)


def test_the_token_cache_stays_within_its_bound(gpt2, jsonl, imported, monkeypatch):
    from capture.importers import logs

    cache = logs.TokenCache(gpt2, max_bytes=4_000)
    texts = [f"text number {i} " + "rye " * (i % 23) for i in range(60)]
    for i in range(300):
        chosen = [texts[(i * 7) % 60], texts[i % 60], SYSTEM["content"], texts[(i * 13) % 60]]
        assert np.array_equal(cache.prompt_ids(chosen), prompt_token_ids(chosen, gpt2))
        assert 0 < cache.bytes <= cache.max_bytes
        assert cache.bytes == sum(ids.nbytes + logs.TOKEN_CACHE_ENTRY_BYTES for ids in cache._ids.values())
    assert 0 < len(cache) < 60  # it forgot some texts
    one = logs.TokenCache(gpt2, max_bytes=1)  # no text fits: nothing kept, the ids all the same
    assert np.array_equal(one.prompt_ids(texts[:3]), prompt_token_ids(texts[:3], gpt2))
    assert len(one) == 0 and one.bytes == 0
    assert len(cache.prompt_ids([])) == 0
    # an import with a tiny cache: the same trace
    path = jsonl(_conversations())
    whole = imported(import_log, "openai", path)
    monkeypatch.setattr(logs, "TOKEN_CACHE_BYTES", 600)
    _same(imported(import_log, "openai", path), whole)


def test_a_redacting_import_writes_what_redacting_the_raw_import_writes(jsonl, tmp_path, monkeypatch):
    pytest.importorskip("presidio_analyzer")
    import redact.pipeline
    from capture.importers import logs
    from redact import RedactionKey, redact_file

    monkeypatch.setattr(redact.pipeline, "default_processes", lambda: 1)
    key = RedactionKey(b"log-stream-test-key-0123456789")
    pii = [
        {
            "timestamp": 1_715_299_200 + i,
            "request_id": f"p{i}",
            "body": {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": f"I am Ada Lovelace, mail me at ada{i}@example.com or call +44 20 7946 09{i:02d}.",
                    }
                ],
            },
        }
        for i in range(5)
    ]
    path = jsonl(sorted([*_conversations(3, 3), *pii], key=lambda line: line["timestamp"]))
    raw = import_log("openai", path, tmp_path / "raw.parquet").path
    two_steps = redact_file(raw, tmp_path / "two-steps.parquet", key, processes=1)
    monkeypatch.setattr(logs, "CHUNK_ROWS", 3)
    monkeypatch.setattr(redact.pipeline, "ROW_BATCH", 2)
    result = import_log("openai", path, tmp_path / "one-step.parquet", key=key)
    got, want = read_trace(result.path), read_trace(tmp_path / "two-steps.parquet")
    assert got.df.equals(want.df) and result.rows == len(want) == 14
    assert replace(got.meta, redaction_report="") == replace(want.meta, redaction_report="")
    assert got.meta.redaction_policy == "redacted" and got.meta.redaction_key == key.fingerprint
    bodies = "".join(got.df["body"].to_list())
    assert "Ada Lovelace" not in bodies and not any(f"ada{i}@" in bodies for i in range(5))
    # the same report but for the time it took
    report, expected = result.redaction.to_dict(), two_steps.to_dict()
    assert report.pop("seconds") >= 0 and expected.pop("seconds") >= 0
    assert report == expected and report["entities"]


def test_a_bounded_linker_forgets_its_oldest_requests():
    from capture.importers.linker import SessionLinker

    def opening(who):
        return {"messages": [{"role": "user", "content": f"hi from {who}"}]}

    def follow_up(who):
        return {
            "messages": [*opening(who)["messages"], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
        }

    linker = SessionLinker(max_requests=2)
    for who in ("a", "b", "c"):
        assert linker.add(who, "chat", opening(who), "hello")[:3] == (who, None, 0)
    assert linker.add("c2", "chat", follow_up("c"), None)[:3] == ("c", "c", 1)
    assert linker.add("a2", "chat", follow_up("a"), None)[:3] == ("a2", None, 0)  # a is forgotten
    unbounded = SessionLinker()
    for who in ("a", "b", "c"):
        unbounded.add(who, "chat", opening(who), "hello")
    assert unbounded.add("a2", "chat", follow_up("a"), None)[:3] == ("a", "a", 1)


def test_a_line_that_changed_between_the_passes_stops_the_import(jsonl, tmp_path):
    from capture.importers.logs import scan_log, write_log_trace
    from capture.importers.openai_log import parse_openai_line

    path = jsonl([_good(0), _good(1), _good(2)])
    index = scan_log(path, parse_openai_line)
    assert len(index) == 3 and index.lines.tolist() == [1, 2, 3]
    jsonl([_good(0), "{}", _good(2)])  # the same file, rewritten
    out = tmp_path / "t.parquet"
    with pytest.raises(TraceError, match=r"^log\.jsonl: line 2: changed while it was imported$"):
        write_log_trace(index, parse_openai_line, out, source_format="openai-jsonl")
    assert not out.exists() and not list(tmp_path.glob(".t.parquet*"))


def test_an_answers_tool_calls_are_their_argument_tokens_and_unknown_without_an_answer(gpt2):
    args = ['{"item": "rye"}', '{"item": "two sourdough loaves, sliced"}']
    records = [
        replace(_chat("a", 0, [SYSTEM], response=None), calls=tuple(args)),
        _chat("b", 1, [SYSTEM, {"role": "user", "content": "and?"}], response=None),
    ]
    rows = _rows(_build(records))
    assert rows["a"]["tool_calls"] == [len(gpt2.encode(a, add_special_tokens=False).ids) for a in args]
    assert rows["b"]["tool_calls"] is None  # the log holds no answer: not known
