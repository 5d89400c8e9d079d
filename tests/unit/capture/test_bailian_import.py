"""Alibaba Bailian (Qwen) trace import: sessions from the parent chain, parent links, turns,
16-token hash-id blocks and their prefix sharing, request types, bad rows, `auto`."""

from __future__ import annotations

import gzip
import json

import pytest

from capture.importers import import_bailian
from capture.importers.bailian import NOT_REPLAYED
from capture.importers.sniff import sniff
from replay.blocks import block_hashes
from replay.cli.main import main
from replay.errors import TraceError
from replay.trace import read_trace
from replay.traffic import trace_summary

BLOCK = 16


def _row(chat, parent, ts, n_in, n_out, kind, turn, ids) -> dict:
    """One line, field by field as alibaba-edu/qwen-bailian-usagetraces-anon's README lists them."""
    return {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": ts,
        "input_length": n_in,
        "output_length": n_out,
        "type": kind,
        "turn": turn,
        "hash_ids": ids,
    }


# Conversation 1: chat 1 (root), 3 follows it, 4 follows 3, and 6 branches from 1 again after 4
# (its parent is not the session's latest request). Each follow-up repeats the history's blocks
# (the parent's last block differs: padding, the README's Q&A). Chat 2 is a root alone; chat 5's
# parent (99) is not in the file, so it is a root too.
ROWS = [
    _row(1, -1, 0.0, 40, 10, "text", 1, [1, 2, 3]),
    _row(2, -1, 0.5, 20, 5, "search", 1, [4, 5]),
    _row(3, 1, 1.25, 70, 8, "text", 2, [1, 2, 6, 7, 8]),
    _row(4, 3, 2.0, 100, 4, "image", 3, [1, 2, 6, 7, 9, 10, 11]),
    _row(5, 99, 3.0, 16, 3, "file", 2, [12]),
    _row(6, 1, 4.0, 48, 2, "text", 2, [1, 2, 13]),
]


def _write(tmp_path, rows, name: str = "b.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _import(tmp_path, path, **kwargs):
    out = tmp_path / "out.parquet"
    result = import_bailian(path, out, **kwargs)
    return read_trace(out), json.loads(result.meta.import_report)


def _prefix_reuse(rows) -> float:
    """Infinite-cache reuse straight from the rows: tokens of full blocks whose id prefix was seen."""
    seen: set[tuple[int, ...]] = set()
    reused = 0
    for r in rows:
        ids = r["hash_ids"]
        for k in range(r["input_length"] // BLOCK):
            reused += BLOCK * (tuple(ids[: k + 1]) in seen)
            seen.add(tuple(ids[: k + 1]))
    return reused / sum(r["input_length"] for r in rows)


def test_oracle_facts_of_a_sample(tmp_path, gpt2):
    trace, report = _import(tmp_path, _write(tmp_path, ROWS))
    df = trace.df
    assert df.height == 6
    assert trace.meta.source_format == "bailian-jsonl"
    assert trace.meta.block_size_tokens == BLOCK
    assert df["request_id"].to_list() == [f"bailian-{i}" for i in range(1, 7)]
    assert df["arrival_us"].to_list() == [0, 500_000, 1_250_000, 2_000_000, 3_000_000, 4_000_000]
    assert df["input_tokens"].to_list() == [40, 20, 70, 100, 16, 48]
    assert df["max_tokens"].to_list() == df["output_tokens"].to_list() == [10, 5, 8, 4, 3, 2]
    assert df["hash_ids"].to_list() == [r["hash_ids"] for r in ROWS]
    assert df["body"].is_null().all() and (df["api"] == "completions").all()
    # sessions: the root reached through the parents; the parent's request; the source's turn - 1
    assert df["session_id"].to_list() == ["1", "2", "1", "1", "5", "1"]
    assert df["parent_request_id"].to_list() == [None, None, "bailian-1", "bailian-3", None, "bailian-1"]
    assert df["turn"].to_list() == [0, 0, 1, 2, 1, 1]
    s = trace_summary(trace)
    assert s["mean_rate_rps"] == pytest.approx(5 / 4.0)
    # 2 + 4 + 2 full blocks of earlier prefixes: 128 of 294 tokens
    assert _prefix_reuse(ROWS) == pytest.approx(128 / 294)
    assert s["prefix_reuse_share"] == pytest.approx(128 / 294)
    assert report["sessions"] == 3 and report["parent_missing"] == 1
    assert report["types"] == {"file": 1, "image": 1, "search": 1, "text": 3}
    assert report["not_replayed"] == NOT_REPLAYED and report["records_imported"] == 6
    # rows sharing an id share its 16 tokens of text: chat 3 starts with chat 1's first 32 tokens
    texts = [json.loads(b)["prompt"] for batch in trace.body_batches(6, 6, synthesize=True) for b in batch]
    ids = [gpt2.encode(t, add_special_tokens=False).ids for t in texts]
    assert [len(x) for x in ids] == [40, 20, 70, 100, 16, 48]
    assert ids[2][:32] == ids[0][:32] and ids[2][32:48] != ids[0][32:40]
    assert ids[3][:64] == ids[2][:64]
    assert block_hashes(ids[3], BLOCK) == df["block_hashes"][3].to_list()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{", "b.jsonl: line 2: not valid JSON"),
        ({**ROWS[1], "chat_id": 1}, "b.jsonl: line 2: 1 is the chat_id of an earlier line (field 'chat_id')"),
        ({**ROWS[1], "chat_id": "2"}, "b.jsonl: line 2: '2' is not an integer >= 0 (field 'chat_id')"),
        ({**ROWS[1], "parent_chat_id": -2}, "b.jsonl: line 2: -2 is not an integer >= -1 (field 'parent_chat_id')"),
        ({**ROWS[1], "timestamp": "0.5"}, "b.jsonl: line 2: '0.5' is not a time in seconds >= 0 (field 'timestamp')"),
        ({**ROWS[1], "turn": 0}, "b.jsonl: line 2: 0 is not an integer >= 1 (field 'turn')"),
        ({**ROWS[1], "type": 3}, "b.jsonl: line 2: 3 is not a string (field 'type')"),
        (
            {k: v for k, v in ROWS[1].items() if k != "output_length"},
            "b.jsonl: line 2: is missing (field 'output_length')",
        ),
        (
            {**ROWS[1], "hash_ids": [4]},
            "b.jsonl: line 2: has 1 ids, expected ceil(input_length / 16) = 2 "
            "(a file hashed at another block size needs --hash-block) (field 'hash_ids')",
        ),
        ({**ROWS[1], "hash_ids": [4, -5]}, "b.jsonl: line 2: is not a list of integers >= 0 (field 'hash_ids')"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, line, expected):
    with pytest.raises(TraceError) as info:
        _import(tmp_path, _write(tmp_path, [ROWS[0], line]))
    assert str(info.value) == expected
    assert not (tmp_path / "out.parquet").exists()


def test_skip_bad_counts_and_a_skipped_parent_makes_a_root(tmp_path):
    rows = [ROWS[0], {**ROWS[1], "turn": "x"}, ROWS[2], "not json", ROWS[4]]
    trace, report = _import(tmp_path, _write(tmp_path, rows), skip_bad=True)
    assert trace.df["request_id"].to_list() == ["bailian-1", "bailian-3", "bailian-5"]
    assert report["skipped_lines"] == 2
    assert [s["line"] for s in report["first_skipped"]] == [2, 4]
    # chat 3's parent (1) was read: linked; chat 5's (99) is not in the file
    assert trace.df["parent_request_id"].to_list() == [None, "bailian-1", None]
    assert report["parent_missing"] == 1 and report["sessions"] == 2
    # a skipped parent: its child is a root of its own
    trace, report = _import(tmp_path, _write(tmp_path, [{**ROWS[0], "turn": 0}, ROWS[2]]), skip_bad=True)
    assert trace.df["session_id"].to_list() == ["3"] and trace.df["parent_request_id"].to_list() == [None]
    assert report["parent_missing"] == 1


def test_hash_block_and_limit(tmp_path):
    # the same rows hashed at 8 tokens an id: refused at the default, read with --hash-block 8
    rows = [_row(1, -1, 0.0, 20, 1, "text", 1, [1, 2, 3]), _row(2, 1, 1.0, 24, 1, "text", 2, [1, 2, 4])]
    with pytest.raises(TraceError, match=r"line 1: has 3 ids, expected ceil\(input_length / 16\) = 2"):
        _import(tmp_path, _write(tmp_path, rows))
    trace, _ = _import(tmp_path, _write(tmp_path, rows), hash_block=8, block_size=8)
    assert trace.df["block_hashes"][1].to_list()[:2] == trace.df["block_hashes"][0].to_list()[:2]
    trace, report = _import(tmp_path, _write(tmp_path, ROWS), limit=3)
    assert trace.df.height == 3 and report["sessions"] == 2


def test_auto_and_the_cli(tmp_path, capsys):
    path = _write(tmp_path, ROWS)
    assert sniff(path) == "bailian"
    out = tmp_path / "cli.parquet"
    assert main(["import", "auto", str(path), "-o", str(out), "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "importing as bailian" in printed.err
    assert NOT_REPLAYED in printed.out
    assert read_trace(out).df["session_id"].to_list() == ["1", "2", "1", "1", "5", "1"]
    assert main(["import", "bailian", str(path), "-o", str(out), "--quiet", "--hash-block", "16"]) == 0
    assert main(["import", "azure", str(path), "-o", str(out), "--quiet", "--hash-block", "16"]) == 2
    assert "--hash-block: only for mooncake, bailian" in capsys.readouterr().err


def test_a_gzipped_file_streams(tmp_path):
    path = tmp_path / "qwen_traceA_blksz_16.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in ROWS).encode()))
    assert sniff(path) == "bailian"
    trace, report = _import(tmp_path, path)
    assert trace.df["parent_request_id"].to_list() == [None, None, "bailian-1", "bailian-3", None, "bailian-1"]
    assert report["sessions"] == 3
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(TraceError, match=r"^qwen_traceA_blksz_16.jsonl.gz: cannot read \(Compressed file ended"):
        _import(tmp_path, path)
