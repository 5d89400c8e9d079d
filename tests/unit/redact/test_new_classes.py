"""Secrets in code and config pastes, national ids beyond the US SSN, and contact data spelled out
to dodge filters: found shape first (a failed checksum lets nothing through), given surrogates of
the same shape, seen by the lock, and gone from every stored byte of a redacted trace when
planted in a chat message, a tool call's arguments and a code paste."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("faker")

from capture.importers.logs import build_trace  # noqa: E402
from capture.importers.records import LogRecord  # noqa: E402
from redact import RedactionKey, redact_file  # noqa: E402
from redact.audit import audit_trace  # noqa: E402
from redact.lock import Exempt, check, scan  # noqa: E402
from redact.national_ids import national_id_recognizers  # noqa: E402
from redact.spelled import spelled_recognizers  # noqa: E402
from replay.trace import read_trace  # noqa: E402
from tests.unit.redact.test_structure import _forms, _plain_bytes  # noqa: E402

KEY = RedactionKey(b"new-classes-test-key-0123456789")

# (type, text around it, the value); checksums valid unless the name says otherwise
IDS = [
    ("UK_NINO", "my NI number is {}", "JG 10 37 44 B"),
    ("UK_NINO", "ni={}", "PR482913C"),
    ("IN_AADHAAR", "Aadhaar: {}", "2345 6789 0124"),
    ("IN_AADHAAR", "aadhaar card {} (checksum fails)", "2345-6789-0125"),
    ("IN_AADHAAR", "my aadhaar no is {}", "934857261034"),
    ("IN_PAN", "PAN {}", "BNZPK4821Q"),
    ("DE_TAX_ID", "Steuer-ID: {}", "47 036 892 516"),
    ("DE_ID_CARD", "Personalausweisnummer {}", "L01X00T47"),
    ("CA_SIN", "SIN: {}", "046-454-286"),
    ("ES_DNI", "DNI {}", "48392751S"),
    ("ES_DNI", "NIE {} (wrong letter)", "Y7381920A"),
    ("FR_NIR", "numéro de sécurité sociale {}", "1 85 05 78 006 084 91"),
    ("FR_NIR", "NIR: {}", "285112A00304847"),
    ("BR_CPF", "CPF {}", "123.456.789-09"),
    ("BR_CPF", "cpf: {}", "52998224725"),
    ("BR_CNPJ", "CNPJ {}", "11.222.333/0001-81"),
    ("PASSPORT", "passport number: {}", "K48213907"),
    ("PASSPORT", "Reisepass Nr. {}", "C01X8R4T2"),
]
SPELLED = [
    ("EMAIL_ADDRESS", "write to {} please", "hedda dot lindqvist at brightmoor dot com"),
    ("EMAIL_ADDRESS", "contact: {}", "hlind [at] brightmoor [dot] org"),
    ("EMAIL_ADDRESS", "mail {}", "h.lind(at)brightmoor(dot)io"),
    ("PHONE_NUMBER", "call me on {}, thanks", "five five five, one two three four"),
    ("PHONE_NUMBER", "my cell is {}", "zero seven seven zero nine zero zero four six one"),
    ("PHONE_NUMBER", "phone: {}", "0 7 7 0 0 9 0 0 4 6 1"),
]
# near misses that stay: no shape, or a context-only shape without its context
KEPT = [
    "order 48213907 shipped",
    "build ABCDE12345 passed",
    "the 11 teams scored 61 204 377 915 points",
    "batch 118-902-335 was restocked",
    "at least one two three four five six seven of them",
    "meet at noon",
    "version 2.3.4.5.6.7.8 is out",
]


def _found(text: str) -> dict[str, str]:
    recs = [*national_id_recognizers(), *spelled_recognizers()]
    return {text[a:b]: r.ENTITY for r in recs for a, b, _ in r.spans(text)}


@pytest.mark.parametrize("entity, around, value", IDS + SPELLED)
def test_each_value_is_found_whole_as_its_type(entity, around, value):
    assert _found(around.format(value)).get(value) == entity


@pytest.mark.parametrize("text", KEPT)
def test_near_misses_are_not_found(text):
    assert _found(text) == {}


def test_the_lock_sees_the_shaped_ids_and_spelled_emails_and_exempts_surrogates():
    locked = ("JG 10 37 44 B", "PR482913C", "2345 6789 0124", "BNZPK4821Q", "48392751S", "1 85 05 78 006 084 91")
    locked += ("123.456.789-09", "11.222.333/0001-81", *(v for e, _, v in SPELLED if e == "EMAIL_ADDRESS"))
    valid = [(e, a.format(v), v) for e, a, v in IDS + SPELLED if v in locked]
    assert len(valid) == len(locked)
    for entity, text, value in valid:
        hits = [(h.entity, text[h.start : h.end]) for h in scan(text)]
        assert (entity, value) in hits, text
        assert check([text], Exempt([value])) == {}
        assert check([text]) == {entity: 1}
    assert [scan(t) for t in KEPT] == [[] for _ in KEPT]


AKIA = "AKIA" + "Q7RZ3KX2M4NB8VLP"
SECRETS = [
    AKIA,
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lk2VtWm",
    "AIzaSyD4kq9Vx2LmP7rT1nB8wQ3zE6uY0cR5fHj",
    "Zm9yZXN0Z2F0ZXF1aWxsc3RvbmVtYXJibGVoYXJib3I2OQ==",
    "ghp_R8kLm2Qz7VxN4tB9wP3yH6jF1cD5sA0gE2uK",
    "github_pat_11ABCDE2F0q8RkLm2Qz7VxN4tB9wP3yH6jF1cD5sA0gE2uKx",
    "xoxb-284719305512-4827193055123-Rk8Lm2Qz7VxN4tB9wP3yH6jF",
    "sk_live_51Hq8RkLm2Qz7VxN4tB9wP3yH",
    "rk_live_51Hq8RkLm2Qz7VxN4tB9wP3yJ",
    "sk-proj-Rk8Lm2Qz7VxN4tB9wP3yH6jF1cD5sA0gE2uK",
    "sk-ant-api03-Rk8Lm2Qz7VxN4tB9wP3yH6jF1cD5sA0gE2uKxLm",
    "ya29.a0AfH6SMBx3kQ9vL2mN8pR4tY7uI1oP5sD6fG9hJ0kL3zX",
    "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiNDgyMSJ9.Rk8Lm2Qz7VxN4tB9wP3yH6jF1cD5s",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    "Tr0ub4dor-h0rse-9",
    "Vq3Lz8Rk2NwT6pXb",
    "s3cr3tP4ssW0rd",
]


def _code_paste() -> str:
    s = SECRETS
    return (
        "Here is my config, why does it fail?\n```\n"
        f"AWS_ACCESS_KEY_ID={s[0]}\nAWS_SECRET_ACCESS_KEY={s[1]}\nGOOGLE_API_KEY={s[2]}\n"
        f"AZURE_STORAGE=DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s[3]};EndpointSuffix=core.windows.net\n"
        f"GITHUB_TOKEN={s[4]}\ngh_fine = {s[5]}\nslack: {s[6]}\nstripe_key: {s[7]}\nrestricted = {s[8]}\n"
        f"OPENAI_API_KEY={s[9]}\nANTHROPIC_API_KEY={s[10]}\n"
        f"-----BEGIN PRIVATE KEY-----\n{s[13]}\n{s[13][::-1]}\n-----END PRIVATE KEY-----\n"
        f"DB_PASSWORD={s[14]}\n```\n"
        f'curl -H "Authorization: Bearer {s[11]}" https://api.example.test/v1\n'
        f"curl -H 'Authorization: Bearer {s[12]}' https://api.example.test/v2\n"
        f"SESSION_SECRET={s[15]}\nDATABASE_URL=postgres://admin:{s[16]}@db.internal:5432/app\n"
    )


@pytest.fixture(scope="module")
def redacted(tmp_path_factory):
    planted = [(e, a, v) for e, a, v in IDS + SPELLED]
    prose = " ".join(a.format(v) + "." for _, a, v in planted)
    args = json.dumps({"note": prose, "ids": {e: v for e, _, v in planted}})
    kept = "Also: " + "; ".join(KEPT)
    messages = [
        {"role": "user", "content": prose + "\n" + kept},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "save_profile", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"ok": True, "echo": prose})},
        {"role": "user", "content": _code_paste() + "\nAnd my ids again:\n```\n" + prose.replace(". ", ".\n") + "\n```"},
    ]
    bodies = [{"model": "gpt-4o", "messages": messages[:1]}, {"model": "gpt-4o", "messages": messages}]
    records = [
        LogRecord(arrival_us=1_700_000_000_000_000 + i * 1_000_000, api="chat", model="gpt-4o", body=b, request_id=f"r{i}")
        for i, b in enumerate(bodies)
    ]
    raw = build_trace(records, source="classes", source_format="openai-jsonl")
    folder = tmp_path_factory.mktemp("classes")
    src, dst = raw.write(folder / "raw.parquet"), folder / "red.parquet"
    report = redact_file(src, dst, KEY, processes=1)
    return raw, read_trace(dst), report, _plain_bytes(dst), _plain_bytes(src), dst


def test_no_planted_value_survives_in_the_stored_bytes(redacted):
    raw, out, report, stored, raw_stored, _ = redacted
    assert report.quarantined == 0 and len(out) == len(raw)
    values = [v for _, _, v in IDS + SPELLED] + SECRETS
    assert [v for v in values if not any(f.encode() in raw_stored.lower() for f in _forms(v))] == []
    assert [v for v in values if any(f.encode() in stored.lower() for f in _forms(v))] == []


def test_near_misses_and_the_spelling_are_kept(redacted):
    _, out, _, stored, *_ = redacted
    for text in KEPT:
        assert text.encode() in stored
    body = json.loads(out.df["body"].to_list()[-1])["messages"][0]["content"]
    assert " dot " in body and " [at] " in body and "(dot)io" in body  # spelled surrogates stay spelled
    assert "AKIA" in json.loads(out.df["body"].to_list()[-1])["messages"][-1]["content"]  # a key keeps its prefix


def test_audit_passes_the_redacted_trace_and_flags_the_raw_ones_new_types(redacted):
    *_, dst = redacted
    assert audit_trace(dst).lock == {}
    raw = audit_trace(dst.with_name("raw.parquet"))
    ids = {"UK_NINO", "IN_AADHAAR", "IN_PAN", "ES_DNI", "FR_NIR", "BR_CPF", "BR_CNPJ"}
    assert ids | {"EMAIL_ADDRESS", "API_KEY"} <= set(raw.lock)
