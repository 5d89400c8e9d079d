"""TraceLab round trace import: rounds written field by field from TraceLab's normalized trace
description (uw-syfi/TraceLab, example_sessions/derived/README.md), the DAG and prefix sharing
they give, bad input and `auto`."""

from __future__ import annotations

import gzip
import json

import pytest

from capture.importers import import_tracelab
from capture.importers.sniff import sniff
from replay.errors import TraceError
from replay.trace import read_trace


def _at(s):
    return f"2026-06-01T05:{int(s) // 60:02d}:{s % 60:06.3f}Z"


def _round(sid, index, total, prefix, out, inputs, outputs, first="tool_result", tools=()):
    events = [{"event_type": kind, "timestamp": _at(t), "source": "x"} for kind, t in inputs]
    events += [{"event_type": kind, "timestamp": _at(t), "source": "y"} for kind, t in outputs]
    return {
        "provider": sid.split(":")[0],
        "project": "p",
        "session_id": sid,
        "round_index": index,
        "round_id": f"r{index}",
        "model": "claude-opus-4-8",
        "input_tokens_total": total,
        "prefix_tokens": prefix,
        "newly_append_tokens": total - prefix,
        "output_tokens": out,
        "reasoning_output_tokens": None,
        "timing_events": events,
        "tools": [
            {"tool_index": i, "tool_name": "Bash", "emitted_at": _at(0), "result_at": _at(1), "is_error": err}
            for i, err in enumerate(tools)
        ],
        "first_input_event_type": first,
        "trace_key": f"{sid}:r{index}",
    }


# session c: a user round asking for two parallel tools; the next round fed by both results
# (submitted at the later one); a compaction (a small prefix); a new user message (think time).
# session x (codex) interleaves in time; a round with no timed event is skipped.
ROWS = [
    _round("claude:c", 0, 1000, 0, 50, [("user_message", 0)], [("text", 2), ("tool_call", 2.5)], "user_message", (False, True)),
    _round("claude:c", 1, 1600, 1000, 40, [("tool_result", 3.0), ("tool_result", 4.0)], [("tool_call", 6.0)]),
    _round("codex:x", 0, 300, 0, 10, [("user_message", 1.0)], [("text", 1.5)], "user_message"),
    _round("claude:c", 2, 900, 300, 30, [("tool_result", 7.0)], [("text", 8.0)]),
    _round("claude:c", 3, 1200, 900, 20, [("user_message", 30.0)], [("reasoning", 31.0), ("text", 32.0)], "user_message"),
    _round("codex:x", 1, 350, 300, 5, [], []),
]


def _write(tmp_path, rows, name="syfi_coding_trace.jsonl.gz"):
    src = tmp_path / name
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if name.endswith(".gz"):
        with gzip.open(src, "wt") as f:
            f.write(text)
    else:
        src.write_text(text)
    return src


def test_rounds_become_sessions_field_by_field(tmp_path):
    import_tracelab(_write(tmp_path, ROWS), tmp_path / "out.parquet")
    trace = read_trace(tmp_path / "out.parquet")
    df = trace.df
    assert trace.meta.source_format == "tracelab-jsonl"
    assert df["request_id"].to_list() == ["claude:c:0", "codex:x:0", "claude:c:1", "claude:c:2", "claude:c:3"]
    assert df["arrival_us"].to_list() == [0, 1_000_000, 4_000_000, 7_000_000, 30_000_000]  # the latest input event
    assert df["e2e_us"].to_list() == [2_500_000, 500_000, 2_000_000, 1_000_000, 2_000_000]  # to the last output event
    assert df["session_id"].to_list() == ["claude:c", "codex:x", "claude:c", "claude:c", "claude:c"]
    assert df["input_tokens"].to_list() == [1000, 300, 1600, 900, 1200]
    assert df["cached_tokens"].to_list() == [0, 0, 1000, 300, 900]
    assert df["output_tokens"].to_list() == [50, 10, 40, 30, 20]
    assert df["depends_on"].to_list() == [[], [], ["claude:c:0"], ["claude:c:1"], ["claude:c:2"]]
    # tool time (from 2.5 s to the last result at 4 s), then the user's think time (8 s to 30 s)
    assert df["wait_us"].to_list() == [None, None, 1_500_000, 1_000_000, 22_000_000]
    # 512-token blocks from the prefix split: round 1 extends round 0 whole; the compaction
    # (prefix 300 < 512) starts fresh; round 3 extends round 2 whole
    assert df["hash_ids"].to_list() == [[1, 2], [5], [1, 2, 3, 4], [6, 7], [6, 7, 8]]
    report = json.loads(trace.meta.import_report)
    assert report["rounds"] == 6 and report["rounds_without_time"] == 1 and report["records_imported"] == 5
    assert report["rounds_user_initiated"] == 3 and report["rounds_tool_initiated"] == 2
    assert report["edges"] == 3 and report["sessions"] == 2
    assert report["tool_calls"] == 2 and report["tool_calls_failed"] == 1
    assert report["providers"] == {"claude": 4, "codex": 2} and "tools" in report["not_mapped"]


@pytest.mark.parametrize(
    "mutate, field, what",
    [
        (lambda r: r.update(input_tokens_total=-1), "input_tokens_total", "not a count"),
        (lambda r: r.update(session_id=None), "session_id", "not a session id"),
        (lambda r: r["timing_events"][0].update(timestamp="soon"), "timing_events[0].timestamp", "not epoch seconds"),
        (lambda r: r.update(tools={}), "tools", "is not a list"),
    ],
)
def test_a_bad_round_is_one_line_naming_file_line_and_field(tmp_path, mutate, field, what):
    rows = json.loads(json.dumps(ROWS))
    mutate(rows[2])
    with pytest.raises(TraceError) as err:
        import_tracelab(_write(tmp_path, rows), tmp_path / "out.parquet")
    msg = str(err.value)
    assert msg.startswith("syfi_coding_trace.jsonl.gz: line 3: ") and f"(field '{field}')" in msg and what in msg
    assert not (tmp_path / "out.parquet").exists()


def test_skip_bad_and_auto(tmp_path):
    src = _write(tmp_path, ["{oops", *ROWS], name="rounds.jsonl")
    import_tracelab(src, tmp_path / "out.parquet", skip_bad=True)
    report = json.loads(read_trace(tmp_path / "out.parquet").meta.import_report)
    assert report["skipped_lines"] == 1 and report["records_imported"] == 5
    assert sniff(_write(tmp_path, ROWS)) == "tracelab" and sniff(_write(tmp_path, ROWS, name="r.jsonl")) == "tracelab"
