"""`replay audit`: planted values found in a raw import (types and request ids, never values), a
redacted import clean, capture folders read segment by segment with their exemptions united, bad
input exit 2; and the `lock_exempt` metadata field it reads."""

from __future__ import annotations

import json
from dataclasses import replace

import polars as pl
import pytest

from redact.lock import Exempt
from replay.cli.main import main
from replay.trace import TraceMeta, read_meta, read_trace

PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----"
)
# request id -> (the type planted, the value, where it stands in the request)
PLANTED = {
    "r-email": ("EMAIL_ADDRESS", "ops.lead@billing.internal", "Please write to {} about the outage."),
    "r-phone": ("PHONE_NUMBER", "+31 6 12345678", "Call me on {} tomorrow."),
    "r-nanp": ("PHONE_NUMBER", "(393) 555-0142", "My desk line is {}."),
    "r-card": ("CREDIT_CARD", "4111 1111 1111 1111", "Charge {} for the renewal."),
    "r-key": ("API_KEY", "sk-proj-Q8vN2lR7xCt0bWzK4mJy9HfD3sGp", "Why does {} return 401?"),
    "r-jwt": (
        "JWT",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I3PGYqsvLhL0Ek",
        "Decode {} please.",
    ),
    "r-pem": ("PRIVATE_KEY", PEM, "Is this key still valid?\n{}"),
    "r-ip6": ("IP_ADDRESS", "2001:db8:85a3::8a2e:370:7334", "The host {} is down."),
}
CLEAN = "Explain numpy 1.26.4 broadcasting; run 123e4567-e89b-12d3-a456-426614174000 took 12.5 s."


def _log(tmp_path):
    """A request log (OpenAI JSON Lines) with the planted values, and one clean request."""
    lines = []
    for i, (rid, (_, value, template)) in enumerate(PLANTED.items()):
        lines.append(
            {
                "timestamp": 1715299200.0 + i,
                "request_id": rid,
                "session_id": f"s{i}",
                "body": {"model": "m", "messages": [{"role": "user", "content": template.format(value)}]},
            }
        )
    lines[0]["response"] = "I will write to ops.lead@billing.internal now."
    lines.append(
        {
            "timestamp": 1715299300.0,
            "request_id": "r-clean",
            "session_id": "s-clean",
            "body": {"model": "m", "messages": [{"role": "user", "content": CLEAN}]},
            "response": "Broadcasting stretches size-1 axes.",
        }
    )
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv("REPLAY_REDACT_KEY", raising=False)


def test_audit_finds_every_planted_type_in_a_no_redact_import(tmp_path, capsys, no_key):
    out = tmp_path / "raw.parquet"
    assert main(["import", "openai", str(_log(tmp_path)), "-o", str(out), "--no-redact", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["audit", str(out), "--quiet"]) == 1
    text = capsys.readouterr().out
    assert main(["audit", str(out), "--json", "--quiet"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["clean"] is False and report["rows"] == len(PLANTED) + 1
    want: dict[str, set[str]] = {}
    for rid, (entity, _, _) in PLANTED.items():
        want.setdefault(entity, set()).add(rid)
    assert {t: set(f["row_ids"]) for t, f in report["lock"].items()} == want
    assert report["lock"]["EMAIL_ADDRESS"]["strings"] == 2  # the prompt and the recorded response
    for entity, rids in want.items():
        line = next(x for x in text.splitlines() if x.strip().startswith(entity))
        assert all(rid in line for rid in rids)
    for _, value, _ in PLANTED.values():  # never a value
        for piece in value.splitlines():
            assert piece not in text and piece not in json.dumps(report)


def test_audit_of_a_redacted_import_is_clean(tmp_path, capsys, monkeypatch):
    """Depends on the redaction pipeline filling the trace's lock_exempt with its surrogates."""
    monkeypatch.setenv("REPLAY_REDACT_KEY", "test-key-0123456789abcdef0123456789")
    out = tmp_path / "redacted.parquet"
    assert main(["import", "openai", str(_log(tmp_path)), "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    meta, rows = read_meta(out)
    assert meta.redaction_policy == "redacted" and meta.lock_exempt
    code = main(["audit", str(out), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["lock"], report["rows"]) == (0, {}, rows)


def _segment(
    make_trace, path, rows: dict[str, str], exempt: Exempt, t0: int = 1_700_000_000_000_000, first_arrival: int = 0
) -> None:
    """A trace file of one chat request per (request id, user text), its lock_exempt ``exempt``."""
    n = len(rows)
    meta = TraceMeta(t0_unix_us=t0, source_format="capture", redaction_policy="redacted", lock_exempt=exempt.to_meta())
    bodies = [json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}) for text in rows.values()]
    make_trace(
        n,
        meta,
        request_id=pl.Series(list(rows)),
        body=pl.Series(bodies),
        api=pl.Series(["chat"] * n),
        parent_request_id=pl.Series([None] * n, dtype=pl.String),
        arrival_us=pl.Series([first_arrival + 1000 * i for i in range(n)]),
    ).write(path)


def test_a_capture_folder_is_audited_with_the_union_of_its_segments_exemptions(make_trace, tmp_path, capsys):
    folder = tmp_path / "cap"
    folder.mkdir()
    # two surrogates, each written (and exempted) in its own segment; the second segment also
    # holds a raw value that no segment exempts
    _segment(
        make_trace,
        folder / "segment-000001.parquet",
        {"a1": "Mail kim.berg@corp.example today."},
        Exempt(["kim.berg@corp.example"]),
    )
    _segment(
        make_trace,
        folder / "segment-000002.parquet",
        {"b1": "Ring +44 20 7946 0958, or mail kim.berg@corp.example.", "b2": "Card 4111 1111 1111 1111."},
        Exempt(["+44 20 7946 0958"]),
        first_arrival=500,
    )
    meta, rows = read_meta(folder)
    united = Exempt.from_meta(meta.lock_exempt)
    assert rows == 3 and len(united) == 2 and "kim.berg@corp.example" in united and "+44 20 7946 0958" in united
    assert read_trace(folder, bodies=False).meta.lock_exempt == meta.lock_exempt
    assert main(["audit", str(folder), "--json", "--quiet"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["lock_exempt"] == 2
    assert {t: f["row_ids"] for t, f in report["lock"].items()} == {"CREDIT_CARD": ["b2"]}


def test_lock_exempt_is_optional_and_never_printed(make_trace, tmp_path, capsys):
    exempt = Exempt(["kim.berg@corp.example"])
    path = tmp_path / "t.parquet"
    _segment(make_trace, path, {"a": "Mail kim.berg@corp.example."}, exempt)
    meta, _ = read_meta(path)
    assert meta.lock_exempt == exempt.to_meta() and "lock_exempt" not in repr(meta)
    assert main(["inspect", str(path), "--json"]) == 0
    assert exempt.to_meta()[5:] not in capsys.readouterr().out
    assert main(["audit", str(path), "--quiet"]) == 0
    assert "clean" in capsys.readouterr().out
    # a file written before the field existed reads as having no surrogates
    md = meta.to_metadata()
    del md["lock_exempt"]
    assert TraceMeta.from_metadata(md, "old.parquet").lock_exempt == ""


def test_bad_input_exits_2_with_one_line_naming_the_file(make_trace, tmp_path, capsys):
    (tmp_path / "notes.parquet").write_text("not parquet")
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad.parquet"
    make_trace(2, replace(TraceMeta(source_format="test"), lock_exempt="b2b8:???")).write(bad)
    for path, name in (
        (tmp_path / "nope.parquet", "nope.parquet"),
        (tmp_path / "notes.parquet", "notes.parquet"),
        (tmp_path / "empty", "empty"),
        (bad, "bad.parquet"),
    ):
        assert main(["audit", str(path), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {name}"), err


def test_deep_runs_the_analyzer_and_skips_exempt_surrogates(make_trace, tmp_path):
    from redact.analyzer import TextAnalyzer
    from redact.audit import DEEP_NOTE, audit_trace

    path = tmp_path / "t.parquet"
    # a name the lock cannot see; the email is a surrogate of this trace
    _segment(
        make_trace,
        path,
        {"a": "Please ask Margaret Thompson to mail kim.berg@corp.example.", "b": "Broadcasting stretches size-1 axes."},
        Exempt(["kim.berg@corp.example"]),
    )
    result = audit_trace(path, deep=True, analyzer=TextAnalyzer())
    assert result.lock == {} and result.texts_analysed == 2
    assert {t: f.row_ids for t, f in result.deep.items()} == {"PERSON": ["a"]}
    assert DEEP_NOTE in result.summary() and not result.clean
    _segment(
        make_trace,
        path,
        {"a": "Please ask Margaret Thompson to mail kim.berg@corp.example."},
        Exempt(["kim.berg@corp.example", "Margaret Thompson"]),
    )  # the name is a surrogate too
    result = audit_trace(path, deep=True, analyzer=TextAnalyzer())
    assert result.clean and result.deep == {}
