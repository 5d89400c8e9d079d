"""Structure-aware redaction: JSON inside strings (tool-call arguments, tool results, Responses
items) redacted leaf by leaf with its keys as context and written back as the same JSON, and
tables pasted into a prompt (CSV, TSV, Markdown) redacted column by column, whatever the case of
their names. End to end: nothing planted survives in the stored Parquet's bytes."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("faker")

from capture.importers.logs import build_trace  # noqa: E402
from capture.importers.records import LogRecord  # noqa: E402
from redact import RedactionKey, redact_file  # noqa: E402
from redact.audit import audit_trace  # noqa: E402
from redact.structure import field_entity, is_json, json_unescape, table_hints, view  # noqa: E402
from replay.bodies import prompt_token_ids, text_slots  # noqa: E402
from replay.tokenizer import load_tokenizer  # noqa: E402
from replay.trace import read_trace  # noqa: E402

KEY = RedactionKey(b"structure-test-key-0123456789")

# -- what a key or a header says, and where a table's cells are (no analyzer) ---------------------


@pytest.mark.parametrize(
    "key, entity",
    [
        ("email", "EMAIL_ADDRESS"),
        ("contactEmail", "EMAIL_ADDRESS"),
        ("E-mail", "EMAIL_ADDRESS"),
        ("customer_name", "PERSON"),
        ("firstName", "PERSON"),
        ("Full Name", "PERSON"),
        ("surname", "PERSON"),
        ("phone", "PHONE_NUMBER"),
        ("mobileNumber", "PHONE_NUMBER"),
        ("Tel", "PHONE_NUMBER"),
        ("shipping_address", "STREET_ADDRESS"),
        ("ssn", "US_SSN"),
        ("iban", "IBAN_CODE"),
        ("name", "PERSON?"),
        ("owner", "PERSON?"),
        ("company_name", None),
        ("file_name", None),
        ("product_name", None),
        ("email_subject", None),
        ("is_email_verified", None),
        ("ip_address", None),
        ("phone_country_code", None),
        ("status", None),
        ("sku", None),
    ],
)
def test_what_a_key_says(key, entity):
    assert field_entity(key) == entity


def _cells(text: str) -> dict[str, str]:
    return {text[a:b]: e for e, a, b in table_hints(text)}


def test_a_csv_column_is_redacted_cell_by_cell_in_any_case():
    csv = (
        "Merge these:\nname,email,phone,plan\n"
        "oksana verbitskaya,ov@tallowmere.test,+40 721 555 019,pro\n"
        "TEODORA MIHAILESCU,tm@quillfeather.example,(617) 555-0187,free\n"
        '"Solvang, Ingrid",is@tallowmere.test,0721 555 334,n/a\n'
    )
    got = _cells(csv)
    assert got["oksana verbitskaya"] == got["TEODORA MIHAILESCU"] == got["Solvang, Ingrid"] == "PERSON"
    assert got["ov@tallowmere.test"] == "EMAIL_ADDRESS" and got["0721 555 334"] == "PHONE_NUMBER"
    assert not {"pro", "free", "n/a", "name", "email", "plan", "Merge these:"} & set(got)


def test_names_without_a_header_are_names_beside_contact_data():
    tsv = "ysolde brannigan\tyb@ashcombe.test\t3\nTHADDEUS WOJCIK\ttw@ashcombe.test\t12\n"
    got = _cells(tsv)
    assert got == {
        "ysolde brannigan": "PERSON",
        "THADDEUS WOJCIK": "PERSON",
        "yb@ashcombe.test": "EMAIL_ADDRESS",
        "tw@ashcombe.test": "EMAIL_ADDRESS",
    }
    # the same words without contact data beside them are not a column of names
    assert table_hints("ysolde brannigan\t3\nTHADDEUS WOJCIK\t12\n") == []


def test_a_markdown_table_and_tables_that_hold_no_people():
    md = "| Customer | Contact | Tier |\n|:--|---|---|\n| zofia lindqvist | zl@quillfeather.example | gold |\n"
    assert _cells(md) == {"zofia lindqvist": "PERSON", "zl@quillfeather.example": "EMAIL_ADDRESS"}
    ids = "order_no,placed_at,sku,qty\n100482913,2024-02-29 03:15:00,SKU-AX-2231,2\n100482914,2024-03-01,SKU-BQ-0457,1\n"
    assert table_hints(ids) == []
    prose = "Paris, France\nLondon, United Kingdom\nTokyo, Japan\n"
    assert table_hints(prose) == []


def test_psql_output_keeps_its_header_across_the_rule():
    psql = (
        " name             | tel\n------------------+------------\n"
        " ANSELM GRABOWSKI | 3235306976\n zofia lindqvist  | 0677808886\n(2 rows)\n"
    )
    assert _cells(psql) == {
        "ANSELM GRABOWSKI": "PERSON",
        "zofia lindqvist": "PERSON",
        "3235306976": "PHONE_NUMBER",
        "0677808886": "PHONE_NUMBER",
    }


def test_a_full_name_is_a_mention_in_any_case():
    from redact.mentions import Mentions

    m = Mentions()
    m.learn("PERSON", "TEODORA MIHAILESCU")
    text = "Teodora Mihailescu and teodora mihailescu, not Teodora alone"
    assert [text[a:b] for _, a, b in m.find(text)] == ["Teodora Mihailescu", "teodora mihailescu"]


def test_a_json_view_reads_leaves_decoded_and_maps_back_onto_the_raw_text():
    raw = json.dumps({"customer": {"name": "Radomír Kovačević", "email": "rk@x.test", "n": 3}, "tags": ["vip"]})
    assert "\\u00ed" in raw  # ensure_ascii: the name is escaped in the raw text
    v = view(raw)
    assert "name: Radomír Kovačević" in v.text and "customer" in v.text
    (entity, a, b), *_ = v.to_raw(v.hints)
    assert entity == "PERSON" and json_unescape(raw[a:b]) == "Radomír Kovačević"
    # keys and the layout map to nothing: a span over "tags: vip" keeps only the value
    at = v.text.index("tags: vip")
    assert [raw[a:b] for _, a, b in v.to_raw([("X", at, at + len("tags: vip"))])] == ["vip"]
    assert not is_json('{"a": 1') and not is_json('"just a string"') and is_json(" [1, 2]")


def test_a_surrogate_for_an_escaped_value_is_escaped_to_its_token_count():
    from redact.structure import escaped_like

    tok = load_tokenizer("gpt2")

    def ntok(s: str) -> int:
        return len(tok.encode(s, add_special_tokens=False).ids)

    raw = json.dumps("JOSÉPHINE GRÉGOIRE")[1:-1]  # JOS\u00c9PHINE GR\u00c9GOIRE
    out = escaped_like("ABIGAIL SANDERSON", ntok(raw), ntok)
    assert json_unescape(out) == "ABIGAIL SANDERSON" and "\\u" in out and ntok(out) == ntok(raw)
    assert escaped_like("Zoë", 1, ntok) == "Zo\\u00eb"  # nothing to pad: only non-ASCII escaped


# -- Redactor's JSON handling (no analyzer: values learned by hand) --------------------------------


@pytest.fixture(scope="module")
def redactor():
    from redact.pipeline import Redactor

    with Redactor(KEY, processes=1) as r:
        yield r


def _build(redactor, text: str, found=()):
    from redact.pipeline import _digest, _Entry

    return redactor._build([(text, _Entry(_digest(text), len(text), None, tuple(found)))])[0]


def test_a_value_learned_elsewhere_is_replaced_in_escaped_json_and_keys_stay(redactor):
    redactor.mentions.learn("PERSON", "Héloïse Maréchal")
    redactor.mentions.learn("PERSON", "status")  # a value that is also a key: the key stays
    raw = json.dumps({"status": "ok", "notes": "call Héloïse Maréchal; status unknown"}, indent=1)
    e = _build(redactor, raw)
    out = json.loads(e.text)
    assert list(out) == ["status", "notes"] and out["status"] == "ok"
    assert "Maréchal" not in out["notes"] and "Mar\\u00e9chal" not in e.text and "status" not in out["notes"]
    assert out["notes"].startswith("call ") and out["notes"].endswith(" unknown")
    # the surrogate is the one the same value gets in prose
    prose = _build(redactor, "Héloïse Maréchal called.")
    assert prose.text.split(" called")[0] in out["notes"]
    assert e.lock == ()


def test_a_known_value_as_a_key_stays_a_key(redactor):
    redactor.mentions.learn("PERSON", "Ysolde Brannigan")
    for raw in ('{"Ysolde Brannigan": true}', '{"Ysolde Brannigan": {"seen": 3}}'):
        e = _build(redactor, raw)
        assert e.text == raw and e.lock == ()


def test_a_replacement_that_would_break_the_json_keeps_the_text_out(redactor):
    raw = '{"a": "Ysolde", "b": "Brannigan"}'
    e = _build(redactor, raw, [("PERSON", raw.index("Ysolde"), raw.index("Brannigan") + len("Brannigan"))])
    assert "INVALID_JSON" in e.lock


# -- end to end: a trace of agentic sessions, redacted into a Parquet file -------------------------

NAMES = {
    "args_lower": "oksana verbitskaya",
    "args_escaped": "Radomír Kovačević",
    "crm_upper": "TEODORA MIHAILESCU",
    "crm_first": "ingrid",
    "crm_last": "solvang",
    "nested": "bartholomew okonkwo-reyes",
    "csv_lower": "ysolde brannigan",
    "csv_upper": "LUCINDA FARQUHARSON",
    "md_lower": "cosmin dragomir",
    "md_upper": "MARISOL ETXEBERRIA",
    "tsv": "ottilie haverkamp",
    "responses": "anselm grabowski",
    "prose_later": "zofia lindqvist",
}
STRUCTURED = {
    "o.verbitskaya@tallowmere.test",
    "teodora.m@quillfeather.example",
    "isolvang@quillfeather.example",
    "b.okonkwo@ashcombe.test",
    "ysolde.b@wrenfield.test",
    "lfarq@wrenfield.test",
    "cd@ashcombe.test",
    "marisol.e@wrenfield.test",
    "ottilie@quillfeather.example",
    "anselm.g@tallowmere.test",
    "zofia.l@ashcombe.test",
    "+40 721 555 019",
    "(617) 555-0187",
    "0721 555 334",
    "617.555.0142",
    "+44 7700 900461",
    "219-09-9999",
}
ADDRESS = "44 Wrenfield Lane, Ashcombe"
NON_PII = ("active", "churned", "vip", "pro", "free", "gold", "SKU-AX-2231", "renewal_due")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_customer",
            "description": "Find a customer by email or by name.",
            "parameters": {
                "type": "object",
                "properties": {
                    "email": {"type": "string", "description": "The customer's email address"},
                    "customer_name": {"type": "string", "description": "Full name, as written"},
                    "phone": {"type": "string"},
                },
            },
        },
    }
]


def _sessions() -> tuple[list[dict], list[str]]:
    """The request bodies (each request resends the earlier turns) and the JSON texts planted."""
    args = json.dumps(
        {
            "customer_name": NAMES["args_lower"],
            "email": "o.verbitskaya@tallowmere.test",
            "phone": "+40 721 555 019",
            "notify": True,
        },
        separators=(",", ":"),
    )
    args2 = json.dumps({"contact": {"full_name": NAMES["args_escaped"], "mobile": "0721 555 334"}, "tags": ["vip"], "limit": 5})
    crm = json.dumps(
        [
            {
                "id": 5012,
                "name": NAMES["crm_upper"],
                "email": "teodora.m@quillfeather.example",
                "phone": "(617) 555-0187",
                "status": "active",
                "shipping_address": ADDRESS,
                "ssn": "219-09-9999",
            },
            {
                "id": 5013,
                "firstName": NAMES["crm_first"],
                "lastName": NAMES["crm_last"],
                "emailAddress": "isolvang@quillfeather.example",
                "status": "churned",
                "balance": 12.5,
            },
        ],
        indent=2,
    )
    nested = json.dumps(
        {
            "ok": True,
            "result": json.dumps({"owner": NAMES["nested"], "owner_email": "b.okonkwo@ashcombe.test", "stage": "renewal_due"}),
        }
    )
    csv = (
        "Dedupe this export please:\n\nname,email,phone,plan\n"
        f"{NAMES['csv_lower']},ysolde.b@wrenfield.test,617.555.0142,pro\n"
        f"{NAMES['csv_upper']},lfarq@wrenfield.test,+44 7700 900461,free\n"
    )
    md = (
        "| Customer | Email | Plan |\n|---|---|---|\n"
        f"| {NAMES['md_lower']} | cd@ashcombe.test | gold |\n| {NAMES['md_upper']} | marisol.e@wrenfield.test | pro |\n"
    )
    tsv = (
        f"{NAMES['tsv']}\tottilie@quillfeather.example\tSKU-AX-2231\n{NAMES['csv_lower']}\tysolde.b@wrenfield.test\tSKU-AX-2231\n"
    )
    messages = [
        {"role": "system", "content": "You are a CRM assistant. Use the tools."},
        {"role": "user", "content": csv},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_customer", "arguments": args}},
                {"id": "c2", "type": "function", "function": {"name": "lookup_customer", "arguments": args2}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": crm},
        {"role": "tool", "tool_call_id": "c2", "content": nested},
        {"role": "user", "content": md + "\nAnd these from the old sheet:\n" + tsv},
        {"role": "assistant", "content": "Merged. Anything else?"},
        {"role": "user", "content": f"is {NAMES['prose_later']} on the gold plan?"},
    ]
    chat = [
        {"model": "gpt-4o", "tools": TOOLS, "messages": messages[:2]},
        {"model": "gpt-4o", "tools": TOOLS, "messages": messages[:6]},
        {"model": "gpt-4o", "tools": TOOLS, "messages": messages[:8]},
    ]
    # the name of the last message is learned from a tool call of another session
    lookup = json.dumps({"customer_name": NAMES["prose_later"], "email": "zofia.l@ashcombe.test"})
    out = json.dumps({"records": [{"contact_name": NAMES["responses"], "email": "anselm.g@tallowmere.test", "tier": "gold"}]})
    responses = [
        {
            "model": "gpt-4.1",
            "input": [
                {"role": "user", "content": "Look up the customer."},
                {"type": "function_call", "call_id": "f1", "name": "lookup_customer", "arguments": lookup},
                {"type": "function_call_output", "call_id": "f1", "output": out},
            ],
        }
    ]
    return responses + chat, [args, args2, crm, nested, lookup, out]


@pytest.fixture(scope="module")
def redacted(tmp_path_factory):
    bodies, planted_json = _sessions()
    records = [
        LogRecord(
            arrival_us=1_700_000_000_000_000 + i * 1_000_000,
            api="responses" if "input" in b else "chat",
            model=b["model"],
            body=b,
            request_id=f"r{i}",
        )
        for i, b in enumerate(bodies)
    ]
    raw = build_trace(records, source="structure", source_format="openai-jsonl")
    folder = tmp_path_factory.mktemp("structure")
    src, dst = raw.write(folder / "raw.parquet"), folder / "red.parquet"
    report = redact_file(src, dst, KEY, processes=1)
    return raw, read_trace(dst), report, dst, _plain_bytes(dst), planted_json, _plain_bytes(src)


def _plain_bytes(path) -> bytes:
    """Every byte a trace file stores, uncompressed (a trace is zstd: a grep of it proves
    nothing): its columns and its metadata, rewritten without compression or dictionaries."""
    plain = path.with_suffix(".plain")
    pq.write_table(pq.read_table(path), plain, compression="none", use_dictionary=False)
    return plain.read_bytes()


def _forms(value: str) -> set[str]:
    """A value as stored: as it is, JSON-escaped once (a body) and twice (JSON in a body's
    string), with and without ``\\u`` escapes, in lower case (the bytes are searched so)."""
    once = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    return {f.lower() for f in once | {json.dumps(f)[1:-1] for f in once}}


def test_no_planted_value_survives_in_the_stored_bytes(redacted):
    raw, out, report, _, stored, _, raw_stored = redacted
    assert report.quarantined == 0 and len(out) == len(raw)
    data = stored.lower()
    planted = [*NAMES.values(), *STRUCTURED, ADDRESS]
    # the grep finds every planted value in the raw trace's bytes, read the same way
    assert [v for v in planted if not any(f.encode() in raw_stored.lower() for f in _forms(v))] == []
    left = [v for v in planted if any(f.encode() in data for f in _forms(v))]
    assert left == []
    # nor does any word of a planted full name (a surname left alone names someone)
    words = {w for v in NAMES.values() for w in re.split(r"[ -]", v.lower()) if len(w) > 3}
    assert [w for w in words if re.search(rb"(?<![a-z])" + w.encode() + rb"(?![a-z])", data)] == []


def test_non_pii_cells_keys_and_tools_are_unchanged(redacted):
    raw, out, _, _, stored, *_ = redacted
    for word in NON_PII:
        assert word.encode() in stored
    for a, b in zip(raw.df["body"].to_list(), out.df["body"].to_list()):
        a, b = json.loads(a), json.loads(b)
        assert b.get("tools") == a.get("tools")  # tool definitions stay as they are
        assert {k: v for k, v in a.items() if k not in ("messages", "input")} == {
            k: v for k, v in b.items() if k not in ("messages", "input")
        }
    body = json.loads(out.df["body"].to_list()[-1])
    csv = body["messages"][1]["content"].splitlines()
    assert csv[:3] == ["Dedupe this export please:", "", "name,email,phone,plan"]
    assert [line.count(",") for line in csv[3:]] == [3, 3] and [line.split(",")[3] for line in csv[3:]] == ["pro", "free"]
    md = body["messages"][5]["content"].splitlines()
    assert md[:2] == ["| Customer | Email | Plan |", "|---|---|---|"]
    assert [line.split("|")[3].strip() for line in md[2:4]] == ["gold", "pro"]


def _strings_blanked(text: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _shape(value):
    """A JSON value with every string blanked: keys, numbers, booleans, nesting."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return "" if isinstance(value, str) else value


def test_json_in_strings_stays_the_same_json(redacted):
    raw, out, _, _, _, planted_json, _ = redacted
    changed = 0
    for a, b in zip(raw.df["body"].to_list(), out.df["body"].to_list()):
        for sa, sb in zip(text_slots(json.loads(a)), text_slots(json.loads(b))):
            if sa.text not in planted_json:
                continue
            changed += sa.text != sb.text
            va, vb = json.loads(sa.text), json.loads(sb.text)  # still JSON
            assert _shape(va) == _shape(vb)  # the same keys, numbers and booleans
            # the same layout: compact stays compact, indented stays indented, keys as written
            assert _strings_blanked(sa.text) == _strings_blanked(sb.text)
            if isinstance(va, dict) and isinstance(va.get("result"), str):  # JSON in JSON in JSON
                assert _shape(json.loads(va["result"])) == _shape(json.loads(vb["result"]))
    assert changed >= len(planted_json)


def test_surrogates_keep_the_case_of_the_names(redacted):
    _, out, *_ = redacted
    body = json.loads(out.df["body"].to_list()[-1])
    rows = [line.split(",")[0] for line in body["messages"][1]["content"].splitlines()[3:]]
    assert rows[0] == rows[0].lower() and rows[1] == rows[1].upper() and rows[0] != NAMES["csv_lower"]
    crm = json.loads(body["messages"][3]["content"])
    assert crm[0]["name"].isupper() and crm[1]["firstName"].islower() and crm[1]["firstName"] != NAMES["crm_first"]
    args = json.loads(body["messages"][2]["tool_calls"][1]["function"]["arguments"])
    assert args["contact"]["full_name"].istitle() and args["contact"]["full_name"] != NAMES["args_escaped"]


def test_a_name_learned_from_a_tool_call_is_replaced_in_later_prose(redacted):
    _, out, *_ = redacted
    responses, *_, last = [json.loads(b) for b in out.df["body"].to_list()]
    surrogate = json.loads(responses["input"][1]["arguments"])["customer_name"]
    assert surrogate != NAMES["prose_later"]
    # lower case in prose: the NER misses it; the value found under the key is replaced at its mention
    assert last["messages"][-1]["content"] == f"is {surrogate} on the gold plan?"


def test_tokens_are_kept(redacted):
    raw, out, report, *_ = redacted
    for col in ("input_tokens", "block_hashes", "request_id", "session_id"):
        assert out.df[col].to_list() == raw.df[col].to_list(), col
    tok = load_tokenizer(raw.meta.tokenizer)
    lengths = [len(prompt_token_ids([s.text for s in text_slots(json.loads(b))], tok)) for b in out.df["body"].to_list()]
    delta = np.array(lengths) - raw.df["input_tokens"].to_numpy()
    # the requests without a name written in \u escapes keep their count exactly; that name's
    # surrogate keeps the count of the name as it reads, not of its escapes, and is counted off
    escaped = np.array(["\\\\u" in b for b in raw.df["body"].to_list()])
    assert escaped.any() and not escaped.all()
    assert (delta[~escaped] == 0).all(), delta
    assert (delta[escaped] != 0).any() <= (report.token_exceptions.get("PERSON", 0) >= 1)


def test_the_lock_and_audit_see_the_surrogates_as_ours(redacted):
    _, out, _, dst, *_ = redacted
    result = audit_trace(dst)
    assert result.rows == len(out) and result.lock == {}
    # the same scan sees the raw values inside the tool calls' JSON: the clean result is earned
    raw = audit_trace(dst.with_name("raw.parquet"))
    assert {"EMAIL_ADDRESS", "PHONE_NUMBER"} <= set(raw.lock)
