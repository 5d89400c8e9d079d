"""capture.record: reading the upstream's response, sampling whole sessions, building rows from
the raw text (no proxy, no processes: the recorder's logic on its own)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from capture.importers.logs import build_trace
from capture.importers.records import LogRecord
from capture.record import SAMPLE_SEED, Exchange, RowBuilder, parse_response


def _sse(*objs, crlf: bool = False) -> bytes:
    end = b"\r\n\r\n" if crlf else b"\n\n"
    return b"".join(b"data: " + json.dumps(o).encode() + end for o in objs) + b"data: [DONE]" + end


def _chunk(text=None, finish=None):
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {} if text is None else {"content": text}, "finish_reason": finish}],
    }


USAGE = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}}


@pytest.mark.parametrize("crlf", [False, True])
def test_a_stream_split_anywhere_gives_the_text_usage_finish_and_chunk_times(crlf):
    raw = _sse(_chunk(""), _chunk("Hel"), _chunk("lo"), _chunk(" you", "stop"), USAGE, crlf=crlf)
    # cut the bytes into reads at awkward places: events end in later reads than they began
    cuts = [0, 5, *(raw.find(s) + 2 for s in (b'"Hel"', b'"lo"', b'" you"')), len(raw)]
    reads = [(1000 + 10 * i, raw[a:b]) for i, (a, b) in enumerate(zip(cuts, cuts[1:])) if b > a]
    ex = Exchange("r", "chat", 0, b"{}", None, stream=True, chunks=reads)
    ans = parse_response(ex)
    assert ans.text == "Hello you"
    assert ans.finish_reason == "stop"
    assert ans.usage["prompt_tokens_details"]["cached_tokens"] == 4
    # the empty first delta carries no token; each token chunk is timed by the read holding its
    # event's last byte
    sep = b"\r\n\r\n" if crlf else b"\n\n"
    spans = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    last = [raw.find(sep, raw.find(s)) + len(sep) - 1 for s in (b'"Hel"', b'"lo"', b'" you"')]
    times = [next(t for (t, _), (a, b) in zip(reads, spans) if a <= e < b) for e in last]
    assert len(set(times)) > 1
    assert ans.first_token_us == times[0]
    assert ans.chunk_us == [t - times[0] for t in times]


def test_the_recorder_frames_a_stream_by_the_sse_rules_the_runner_uses():
    # comments, event / id fields, data without its space, one event's JSON over two data lines,
    # lone CR line ends, and a last event the server never closed with a blank line
    raw = (
        b": keep-alive\n\n"
        b"event: message\nid: 1\ndata:" + json.dumps(_chunk("Hel")).encode() + b"\n\n"
        b'data: {"object": "chat.completion.chunk",\ndata: "choices": [{"delta": {"content": "lo"}}]}\r\r'
        b"data: " + json.dumps(_chunk(None, "stop")).encode() + b"\r\n\r\n"
        b"data: " + json.dumps(USAGE).encode() + b"\n"
    )
    reads = [(100 + i, raw[i : i + 7]) for i in range(0, len(raw), 7)]
    ans = parse_response(Exchange("r", "chat", 0, b"{}", None, stream=True, chunks=reads))
    assert (ans.text, ans.finish_reason) == ("Hello", "stop")
    assert ans.usage == USAGE["usage"]  # the unclosed last event, taken at the stream's end
    assert len(ans.chunk_us) == 2 and ans.chunk_us[1] > 0


def test_events_that_are_not_json_objects_are_skipped_and_the_rest_still_read():
    good = _sse(_chunk("Hel"), _chunk("lo", "stop"), USAGE)
    for bad in (b"data: {not json}\n\n", b"data: 17\n\n", b'data: {"a": 1},{"b": 2}\n\n', b"data: ping\n\n"):
        raw = bad + good
        ans = parse_response(Exchange("r", "chat", 0, b"{}", None, stream=True, chunks=[(10, raw[:9]), (20, raw[9:])]))
        assert (ans.text, ans.finish_reason, ans.usage) == ("Hello", "stop", USAGE["usage"]), bad
        assert ans.chunk_us == [0, 0]


def test_a_json_answer_plain_or_gzipped():
    body = json.dumps(
        {
            "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "length"}],
            "usage": {"completion_tokens": 1},
        }
    ).encode()
    for data, enc in ((body, None), (gzip.compress(body), "gzip")):
        ans = parse_response(Exchange("r", "chat", 0, b"{}", None, chunks=[(5, data[:7]), (6, data[7:])], content_encoding=enc))
        assert (ans.text, ans.finish_reason, ans.usage) == ("Hi", "length", {"completion_tokens": 1})
        assert ans.first_token_us is None and ans.chunk_us is None


def _ex(rid, body, answer, t, session=None):
    data = json.dumps(
        {
            "choices": [{"message": {"content": answer}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 3}},
        }
    )
    return Exchange(
        rid, "chat", t, json.dumps(body).encode(), session, status=200, ttfb_us=50, end_us=90, chunks=[(90, data.encode())]
    )


def test_rows_count_tokens_and_hash_blocks_like_import_and_link_turns():
    sys_msg = {"role": "system", "content": "You are a careful assistant. " * 20}
    b1 = {"model": "m", "messages": [sys_msg, {"role": "user", "content": "first question"}], "max_tokens": 5}
    b2 = {
        "model": "m",
        "messages": [*b1["messages"], {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "second"}],
    }
    b3 = {"model": "m", "messages": [sys_msg, {"role": "user", "content": "unrelated"}]}
    exs = [
        _ex("a", b1, "an answer", 1_000),
        _ex("b", b2, "ok", 2_000),
        _ex("c", b3, "x", 3_000),
        _ex("d", b3, "y", 4_000, session="S1"),
        _ex("e", b1, "z", 5_000, session="S1"),
    ]
    builder = RowBuilder(0, tokenizer="gpt2", block_size=16, sample=1.0, redactor=None)
    df = builder.build(exs[:2])
    df2 = builder.build(exs[2:])
    import polars as pl

    rows = pl.concat([df, df2])
    # the import rule, over the same requests: the same counts, hashes and sessions
    recs = [
        LogRecord(
            arrival_us=e.arrival_unix_us,
            api="chat",
            model="m",
            body=json.loads(e.body),
            request_id=e.request_id,
            session_id=e.session_header,
            response=r,
        )
        for e, r in zip(exs, ["an answer", "ok", "x", "y", "z"])
    ]
    ref = build_trace(recs, source="t", source_format="openai-jsonl").df
    for col in ("input_tokens", "block_hashes", "session_id", "parent_request_id", "turn"):
        assert rows[col].to_list() == ref[col].to_list(), col
    assert rows["parent_request_id"].to_list() == [None, "a", None, None, "d"]
    assert rows["input_tokens"][0] > 100 and len(rows["block_hashes"][0]) == rows["input_tokens"][0] // 16
    assert rows["cached_tokens"].to_list() == [3] * 5
    assert rows["max_tokens"].to_list()[:2] == [5, 2]
    assert rows["response"].to_list()[0] == "an answer"
    assert builder.counts["recorded"] == 5


def test_the_recorders_token_cache_gives_each_prompts_ids_within_its_bound():
    from capture.record import TOKEN_CACHE_BYTES
    from replay.bodies import prompt_token_ids

    builder = RowBuilder(0, tokenizer="gpt2", block_size=16, sample=1.0, redactor=None)
    assert builder.tokens.max_bytes == TOKEN_CACHE_BYTES
    builder.tokens.max_bytes = 3_000  # a few texts fit
    texts = [f"turn {i}: " + "a longer history line " * (i % 9) for i in range(40)]
    # a batch of requests: texts repeated within a prompt and across prompts, an empty prompt
    prompts = [[texts[i % 40], texts[(i * 7) % 40], texts[i % 40]] for i in range(50)] + [[]]
    for _ in range(3):
        got = builder.tokens.prompts_ids(prompts)
        for texts_of, ids in zip(prompts, got):
            assert np.array_equal(ids, prompt_token_ids(texts_of, builder.tok))
        assert 0 < builder.tokens.bytes <= 3_000 and 0 < len(builder.tokens) < 40


def test_a_body_that_is_not_json_is_counted_not_recorded():
    builder = RowBuilder(0, tokenizer="gpt2", block_size=16, sample=1.0, redactor=None)
    ex = Exchange("x", "chat", 0, b"{not json", None, status=400)
    assert builder.build([ex]) is None
    assert builder.counts["not_json"] == 1 and builder.counts["recorded"] == 0


def test_an_unsampled_session_is_left_out_but_still_linked():
    body = {"messages": [{"role": "user", "content": "hi"}]}
    builder = RowBuilder(0, tokenizer="gpt2", block_size=16, sample=1e-9, redactor=None)
    assert builder.build([_ex("a", body, "yo", 10)]) is None
    assert builder.counts["not_sampled"] == 1
    np.testing.assert_equal(builder.linker.sessions, 1)


def test_a_sample_keeps_whole_conversations():
    builder = RowBuilder(0, tokenizer="gpt2", block_size=16, sample=0.5, redactor=None)
    exs, t = [], 0
    # 40 conversations of 3 turns, interleaved as live traffic is
    convs = [[{"role": "user", "content": f"conversation {c} opens"}] for c in range(40)]
    for turn in range(3):
        for c, msgs in enumerate(convs):
            t += 1
            answer = f"answer {turn} to {c}"
            exs.append(_ex(f"c{c}t{turn}", {"messages": list(msgs)}, answer, t))
            msgs += [{"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}]
    df = builder.build(exs)
    kept = {}
    for rid, sid, turn in zip(df["request_id"], df["session_id"], df["turn"]):
        kept.setdefault(sid, []).append((rid, turn))
    assert 8 < len(kept) < 32
    for sid, turns in kept.items():  # every turn of a kept conversation, none of the others
        c = sid[1 : sid.index("t")]
        assert turns == [(f"c{c}t{k}", k) for k in range(3)]
    assert builder.counts["not_sampled"] == 120 - df.height
    # the same sessions `replay sample --sessions 0.5 --seed 0` keeps
    from replay.subsets import session_kept

    assert all(session_kept(sid, 0.5, SAMPLE_SEED) for sid in kept)
