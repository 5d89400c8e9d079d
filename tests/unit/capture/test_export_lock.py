"""`replay export` behind the second lock: a record with a PII shape that is not a surrogate of the
trace is not written (counted per type); a raw trace bypasses the lock and says so."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capture.exporters import export_trace
from redact.lock import Exempt
from replay.cli.main import main
from replay.trace import TraceMeta

SURROGATE = "kim.berg@corp.example"  # written by this trace's redaction: exempt
ROWS = {  # request id -> (user text, response)
    "ok": (f"Please mail {SURROGATE} the notes.", "Done."),
    "card": ("Charge 4111 1111 1111 1111 again.", "Charged."),
    "answer": ("What is Ana's address?", "It is ana.souza@clinic.internal."),  # a raw value in the response
    "id": ("Hello.", "Hi."),  # a raw value in a JSON key of the body's metadata
}


@pytest.fixture
def trace_with(make_trace, tmp_path):
    def write(policy: str, exempt: Exempt | None = None):
        bodies = [{"model": "m", "messages": [{"role": "user", "content": text}]} for text, _ in ROWS.values()]
        bodies[3]["metadata"] = {"+1 (415) 555-0132": "caller"}
        meta = TraceMeta(
            t0_unix_us=1_700_000_000_000_000,
            source_format="test",
            redaction_policy=policy,
            lock_exempt=(exempt or Exempt()).to_meta(),
        )
        n = len(ROWS)
        path = tmp_path / f"{policy}.parquet"
        make_trace(
            n,
            meta,
            request_id=pl.Series(list(ROWS)),
            api=pl.Series(["chat"] * n),
            body=pl.Series([json.dumps(b) for b in bodies]),
            response=pl.Series([r for _, r in ROWS.values()]),
        ).write(path)
        return path

    return write


@pytest.mark.parametrize("fmt", ["openai", "aiperf"])
def test_records_with_a_pii_shape_are_not_written(trace_with, tmp_path, fmt):
    path = trace_with("redacted", Exempt([SURROGATE]))
    out = tmp_path / "out.jsonl"
    result = export_trace(fmt, path, out)
    text = out.read_text()
    assert result.locked and result.written == len(text.splitlines())
    if fmt == "openai":  # the response is written: the raw email there keeps its record out
        assert result.written == 1 and result.quarantined == {"CREDIT_CARD": 1, "EMAIL_ADDRESS": 1, "PHONE_NUMBER": 1}
        assert json.loads(text)["request_id"] == "ok"
    else:  # aiperf writes the messages only (not the response, not the body's metadata)
        assert result.written == 3 and result.quarantined == {"CREDIT_CARD": 1}
    assert SURROGATE in text  # the surrogate passes by its exemption
    for raw in ("4111 1111 1111 1111", "ana.souza@clinic.internal", "555-0132"):
        assert raw not in text


def test_without_the_exemption_a_surrogate_is_kept_out_too(trace_with, tmp_path):
    # a trace redacted before lock_exempt existed: its surrogates cannot be told from raw values
    result = export_trace("openai", trace_with("redacted"), tmp_path / "out.jsonl")
    assert result.written == 0 and result.quarantined["EMAIL_ADDRESS"] == 2


def test_mooncake_lines_hold_no_text_and_pass(trace_with, tmp_path):
    result = export_trace("mooncake", trace_with("redacted"), tmp_path / "out.jsonl", block_size=16)
    assert result.locked and result.written == len(ROWS) and not result.quarantined


def test_a_raw_trace_bypasses_the_lock_and_says_so(trace_with, tmp_path, capsys):
    path = trace_with("none")
    out = tmp_path / "out.jsonl"
    result = export_trace("openai", path, out)
    assert not result.locked and result.written == len(ROWS) and not result.quarantined
    assert "4111 1111 1111 1111" in out.read_text()
    assert main(["export", "openai", str(path), "-o", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert f"({len(ROWS)} requests)" in captured.out
    assert "second lock is bypassed" in captured.err and "raw request text" in captured.err


def test_the_cli_prints_what_the_lock_kept_out(trace_with, tmp_path, capsys):
    path = trace_with("redacted", Exempt([SURROGATE]))
    assert main(["export", "openai", str(path), "-o", str(tmp_path / "out.jsonl"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "records per type: CREDIT_CARD 1, EMAIL_ADDRESS 1, PHONE_NUMBER 1" in captured.out
    assert "(1 requests)" in captured.out and "bypassed" not in captured.err
