"""An evaluation set of agentic traffic for redaction, made apart from what structure-aware
redaction was developed against, and its scoring.

Owns :data:`SEED`, :class:`Planted`, :class:`AgenticSet`, :func:`build_agentic_set`,
:class:`AgenticScores`, :func:`score` and :func:`format_table`. ``python -m
tests.unit.redact.agentic_evalset [--seed N] [--sessions N]`` prints the table (about a minute on 2
cores, most of it loading spaCy and redacting).

How it is made apart: :mod:`redact.structure` was developed against the hand-typed values,
field names and tables of ``tests/unit/redact/test_structure.py`` (and the chat set of
:mod:`tests.unit.redact.evalset`). Here nothing is typed by hand: a seeded generator
(:data:`SEED`, never used in development) draws

- people from Faker's locales other than en_US (German, Dutch, Swedish, Danish, Polish, Italian,
  Spanish, French, Portuguese, Irish, British), first and last names whose words are not in the
  surrogates' pool (so a surrogate never recreates one), written in lower case, CAPITALS or title
  case at random; their emails from their names at made-up company domains; phones in each
  locale's own formats (Faker's); street addresses;
- field names from lists written for this set (``fullName``, ``clientName``, ``requester``,
  ``holder``, ``fname`` / ``lname``, ``primary_email``, ``msisdn``, ``mobile_no``, ``line1``...),
  some that :func:`redact.structure.field_entity` does not know;
- table layouts: comma CSV (plain, and every cell quoted), semicolon CSV, TSV, Markdown (with
  alignment rows), psql output (`` a | b `` and a ``---+---`` rule), header-less CSV, with columns
  in a random order beside ids, cities, plans, amounts and dates;
- agentic sessions: chat requests that resend their history, with tool calls whose ``arguments``
  carry contacts (compact, spaced or indented JSON, ``\\u`` escapes or not), tool results of CRM,
  order and ticket systems (records in lists, nested objects, a JSON string inside the JSON),
  pasted tables, answers that echo names, later turns that name a person in prose; and
  Responses API requests with ``function_call`` / ``function_call_output`` items.

The scoring: :func:`redact.pipeline.redact_trace` over the trace; a planted value is left when
it occurs anywhere in what the trace stores (:func:`tests.unit.redact.evalset.stored_text`:
every string column, every string inside a body and inside the JSON a string holds, the
metadata), in any letter case, as written or JSON-escaped (:func:`tests.unit.redact.evalset.
value_pattern`). A person is left (strict) when any word of four or more letters of the name is
(so split ``first`` / ``last`` fields count); people are also counted apart by where they
stand: in keys and tables (the structure), or only in a record's free-text ``notes`` ("Spouse:
X", in the same mix of cases: what only the NER and the name shapes can find). Also: requests
quarantined, the JSON strings that no longer parse or whose keys changed, the non-PII strings
planted (plans, SKUs, statuses, product names) that changed, and requests whose token count
moved.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEED", "Planted", "AgenticSet", "build_agentic_set", "AgenticScores", "score", "format_table"]

SEED = 730_113
LOCALES = ("de_DE", "nl_NL", "sv_SE", "da_DK", "pl_PL", "it_IT", "es_ES", "fr_FR", "pt_BR", "en_IE", "en_GB")
DOMAINS = ("brightwell-logistics.test", "kestrel.example", "orbis-health.internal", "maplecrest.co.uk", "voltaro.io")
PLANS = ("Starter", "Growth", "Enterprise", "Legacy-Basic")
STATUSES = ("open", "pending_review", "escalated", "resolved")
SKUS = ("SKU-4471-B", "SKU-1180-K", "AX-22-RED", "PN-90331")
PRODUCTS = ("Standing Desk", "Ergonomic Chair", "Monitor Arm", "Cable Tray")
KINDS = ("PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "STREET_ADDRESS")

PERSON_KEYS = (
    "name", "fullName", "full_name", "customerName", "contact_name", "clientName", "displayName", "requester",
    "holder", "patient_name", "assignee", "Name", "legal_name", "owner_name", "contact", "recipient",
)  # fmt: skip
SPLIT_KEYS = (
    ("first_name", "last_name"),
    ("firstName", "lastName"),
    ("given_name", "family_name"),
    ("fname", "lname"),
    ("forename", "surname"),
)
EMAIL_KEYS = ("email", "mail", "emailAddress", "email_address", "contactEmail", "work_email", "primary_email", "e_mail", "EMAIL")
PHONE_KEYS = (
    "phone",
    "phoneNumber",
    "phone_number",
    "mobile",
    "tel",
    "telephone",
    "cell",
    "contact_phone",
    "msisdn",
    "mobile_no",
)
ADDRESS_KEYS = ("address", "street", "address_line1", "line1", "street_address", "addr")
PERSON_HEADERS = ("Name", "Full name", "Customer", "Contact", "Client", "Attendee", "Employee", "CUSTOMER NAME", "name")
EMAIL_HEADERS = ("Email", "E-mail", "email", "Email address", "MAIL")
PHONE_HEADERS = ("Phone", "Mobile", "Tel.", "phone_number", "Phone No.")
LAYOUTS = ("csv", "csv_quoted", "semicolon", "tsv", "markdown", "psql", "csv_headerless")


@dataclass(frozen=True)
class Planted:
    """One distinct value planted: its type, and the words of a name (strict recall)."""

    kind: str
    value: str
    parts: tuple[str, ...] = ()
    prose_only: bool = False  # a person named only inside free text (a record's "notes")


@dataclass
class AgenticSet:
    trace: Any  # replay.trace.Trace
    planted: dict[str, Planted]  # value -> label
    non_pii: set[str]  # strings that must come out unchanged
    json_texts: set[str]  # the JSON strings planted (tool arguments, results)
    layouts: Counter = field(default_factory=Counter)


class _Gen:
    def __init__(self, seed: int):
        from faker import Faker

        from redact.surrogates import _pools

        self.rng = random.Random(seed)
        self.fakers = {loc: Faker(loc) for loc in LOCALES}
        for i, f in enumerate(self.fakers.values()):
            f.seed_instance(seed * 31 + i)
        pool = {w.lower() for words in _pools().values() for w in words}
        self.pool = pool
        self.planted: dict[str, Planted] = {}
        self.non_pii: set[str] = set()
        self.json_texts: set[str] = set()
        self.layouts: Counter = Counter()
        self.records: list = []
        self.clock = 1_750_000_000_000_000

    def faker(self):
        return self.fakers[self.rng.choice(LOCALES)]

    def person(self, prose_only: bool = False) -> dict[str, str]:
        """A person: first, last, full (in one case style), email, phone, address, city."""
        while True:
            f = self.faker()
            first, last = f.first_name(), f.last_name()
            words = [w for w in re.split(r"[\s'-]+", f"{first} {last}") if w]
            if all(w.lower() not in self.pool for w in words) and all(len(w) >= 3 for w in words):
                break
        style = self.rng.choices(("lower", "upper", "title"), (0.35, 0.25, 0.4))[0]
        case = {"lower": str.lower, "upper": str.upper, "title": lambda s: s}[style]
        first, last = case(first), case(last)
        full = f"{first} {last}"
        ascii_first = re.sub(r"[^a-z]", "", _fold(first).lower()) or "x"
        ascii_last = re.sub(r"[^a-z]", "", _fold(last).lower()) or "y"
        local = self.rng.choice(
            (
                f"{ascii_first}.{ascii_last}",
                f"{ascii_first[0]}{ascii_last}",
                f"{ascii_first}_{ascii_last[0]}",
                f"{ascii_last}{self.rng.randint(1, 99)}",
            )
        )
        email = f"{local}@{self.rng.choice(DOMAINS)}"
        phone = f.phone_number()
        address = f.street_address().replace("\n", ", ")
        parts = tuple(w for w in re.split(r"[\s'-]+", full) if len(w) >= 4)
        self.planted[full] = Planted("PERSON", full, parts, prose_only)
        self.planted[email] = Planted("EMAIL_ADDRESS", email)
        self.planted[phone] = Planted("PHONE_NUMBER", phone)
        self.planted[address] = Planted("STREET_ADDRESS", address)
        return {"first": first, "last": last, "full": full, "email": email, "phone": phone, "address": address, "city": f.city()}

    def keep(self, value: str) -> str:
        self.non_pii.add(value)
        return value

    def dumps(self, obj: Any) -> str:
        style = self.rng.choice(("compact", "spaced", "indent2", "indent4"))
        ascii_only = self.rng.random() < 0.5
        if style == "compact":
            text = json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only)
        elif style == "spaced":
            text = json.dumps(obj, ensure_ascii=ascii_only)
        else:
            text = json.dumps(obj, indent=int(style[-1]), ensure_ascii=ascii_only)
        self.json_texts.add(text)
        return text

    def contact_record(self, p: dict[str, str], fields: int) -> dict[str, Any]:
        rec: dict[str, Any] = {"id": self.rng.randint(10_000, 99_999)}
        if self.rng.random() < 0.25:
            k1, k2 = self.rng.choice(SPLIT_KEYS)
            rec[k1], rec[k2] = p["first"], p["last"]
        else:
            rec[self.rng.choice(PERSON_KEYS)] = p["full"]
        rec[self.rng.choice(EMAIL_KEYS)] = p["email"]
        if fields >= 3:
            rec[self.rng.choice(PHONE_KEYS)] = p["phone"]
        if fields >= 4:
            rec[self.rng.choice(ADDRESS_KEYS)] = p["address"]
        rec["plan"] = self.keep(self.rng.choice(PLANS))
        rec["status"] = self.keep(self.rng.choice(STATUSES))
        if self.rng.random() < 0.5:
            rec["active"] = self.rng.random() < 0.5
        return rec

    def table(self, people: list[dict[str, str]]) -> str:
        layout = self.rng.choice(LAYOUTS)
        self.layouts[layout] += 1
        cols = ["person", "email", "phone"] + self.rng.sample(["id", "city", "plan", "amount", "signup", "product"], 2)
        self.rng.shuffle(cols)
        heads = {
            "person": self.rng.choice(PERSON_HEADERS),
            "email": self.rng.choice(EMAIL_HEADERS),
            "phone": self.rng.choice(PHONE_HEADERS),
            "id": "ID",
            "city": "City",
            "plan": "Plan",
            "amount": "Amount (EUR)",
            "signup": "Signed up",
            "product": "Product",
        }

        def cell(c: str, p: dict[str, str]) -> str:
            if c in ("person", "email", "phone"):
                return p["full" if c == "person" else c]
            if c == "id":
                return str(self.rng.randint(1000, 9999))
            if c == "city":
                return p["city"]
            if c == "plan":
                return self.keep(self.rng.choice(PLANS))
            if c == "amount":
                return f"{self.rng.randint(10, 9999)}.{self.rng.randint(0, 99):02d}"
            if c == "signup":
                return f"2025-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"
            return self.keep(self.rng.choice(PRODUCTS))

        rows = [[cell(c, p) for c in cols] for p in people]
        header = [heads[c] for c in cols]
        if layout in ("csv", "csv_headerless", "csv_quoted", "semicolon"):
            sep = ";" if layout == "semicolon" else ","

            def line(cells: list[str]) -> str:
                if layout == "csv_quoted":
                    return sep.join('"' + c.replace('"', '""') + '"' for c in cells)
                return sep.join('"' + c + '"' if sep in c or '"' in c else c for c in cells)

            body = [line(r) for r in rows]
            return "\n".join(body if layout == "csv_headerless" else [line(header), *body])
        if layout == "tsv":
            return "\n".join("\t".join(r) for r in [header, *rows])
        widths = [max(len(x) for x in col) for col in zip(header, *rows)]
        if layout == "markdown":
            fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
            rule = "|" + "|".join(self.rng.choice((":", "")) + "-" * max(3, w) + self.rng.choice((":", "")) for w in widths) + "|"
            return "\n".join([fmt(header), rule, *(fmt(r) for r in rows)])
        fmt = lambda r: " " + " | ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
        rule = "+".join("-" * (w + 2) for w in widths)
        return "\n".join([fmt(header), rule, *(fmt(r) for r in rows), f"({len(rows)} rows)"])

    def send(self, body: dict, response: str | None, api: str = "chat", session: str | None = None) -> None:
        from capture.importers.records import LogRecord

        self.clock += self.rng.randint(200_000, 4_000_000)
        self.records.append(
            LogRecord(
                arrival_us=self.clock,
                api=api,
                model=body.get("model"),
                body=json.loads(json.dumps(body)),
                request_id=f"ag{len(self.records):05d}",
                session_id=session,
                response=response,
            )
        )


def _fold(s: str) -> str:
    import unicodedata

    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "crm_search",
            "description": "Search the CRM for contacts.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "email": {"type": "string"}, "fullName": {"type": "string"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_ticket",
            "description": "Open a support ticket for a customer.",
            "parameters": {"type": "object", "properties": {"requester": {"type": "object"}, "summary": {"type": "string"}}},
        },
    },
]


def _crm_session(g: _Gen, n: int) -> None:
    people = [g.person() for _ in range(g.rng.randint(1, 4))]
    p = people[0]
    messages: list[dict] = [
        {"role": "system", "content": "You are the sales-ops agent. Use the CRM tools; never guess contact data."},
        {"role": "user", "content": f"Find everything we have on {p['full'].title()} and check the plan."},
    ]
    g.send({"model": "gpt-4o-mini", "tools": _TOOLS, "messages": messages}, None, session=f"s{n}")
    args = g.dumps({g.rng.choice(("fullName", "query", "name")): p["full"], g.rng.choice(EMAIL_KEYS): p["email"]})
    result = g.dumps({"total": len(people), "results": [g.contact_record(q, g.rng.randint(2, 4)) for q in people]})
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {"name": "crm_search", "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": f"call_{n}", "content": result},
    ]
    answer = f"{p['full'].title()} is on the {g.keep(g.rng.choice(PLANS))} plan; reach them at {p['email']}."
    g.send({"model": "gpt-4o-mini", "tools": _TOOLS, "messages": messages}, answer, session=f"s{n}")
    messages += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": f"ok, open a ticket for {p['full']} about the invoice"},
    ]
    g.send({"model": "gpt-4o-mini", "tools": _TOOLS, "messages": messages}, None, session=f"s{n}")
    requester: dict[str, Any] = {g.rng.choice(PERSON_KEYS): p["full"], g.rng.choice(PHONE_KEYS): p["phone"]}
    args2 = g.dumps({"requester": requester, "summary": g.keep("Invoice total does not match the order"), "priority": 2})
    nested = g.dumps(
        {
            "ok": True,
            "ticket": g.keep(f"T-{g.rng.randint(1000, 9999)}"),
            "payload": g.dumps({"requester": requester, "state": "open"}),
        }
    )
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}b", "type": "function", "function": {"name": "create_ticket", "arguments": args2}}],
        },
        {"role": "tool", "tool_call_id": f"call_{n}b", "content": nested},
    ]
    g.send({"model": "gpt-4o-mini", "tools": _TOOLS, "messages": messages}, "Done: the ticket is open.", session=f"s{n}")


def _order_session(g: _Gen, n: int) -> None:
    p = g.person()
    order = {
        "order": {
            "number": f"SO-{g.rng.randint(100000, 999999)}",
            "customer": {g.rng.choice(PERSON_KEYS): p["full"], g.rng.choice(EMAIL_KEYS): p["email"]},
            "shipping": {
                g.rng.choice(("recipient", "holder", "name")): p["full"],
                g.rng.choice(ADDRESS_KEYS): p["address"],
                "city": p["city"],
                g.rng.choice(PHONE_KEYS): p["phone"],
            },
            "items": [
                {"sku": g.keep(g.rng.choice(SKUS)), "qty": g.rng.randint(1, 5), "product_name": g.keep(g.rng.choice(PRODUCTS))}
            ],
        }
    }
    messages = [
        {"role": "user", "content": "Where is order " + order["order"]["number"] + "?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"o{n}",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": g.dumps({"order_number": order["order"]["number"]})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"o{n}", "content": g.dumps(order)},
    ]
    g.send({"model": "gpt-4o", "messages": messages}, f"It ships to {p['full']} at {p['address']}.", session=f"o{n}")


def _table_session(g: _Gen, n: int) -> None:
    people = [g.person() for _ in range(g.rng.randint(3, 7))]
    table = g.table(people)
    intro = g.rng.choice(
        ("Clean up this export and flag duplicates:", "Here are the attendees, draft a reminder:", "Import these contacts:")
    )
    messages: list[dict] = [{"role": "user", "content": f"{intro}\n\n{table}\n"}]
    g.send({"model": "gpt-4o", "messages": messages}, "Sure. Two rows look like duplicates.", session=f"t{n}")
    if g.rng.random() < 0.6:
        q = people[-1]
        rows = g.dumps({"rows": [{"name": x["full"], "email": x["email"]} for x in people[:2]], "dedupe": True})
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"t{n}", "type": "function", "function": {"name": "import_rows", "arguments": rows}}],
            },
            {"role": "tool", "tool_call_id": f"t{n}", "content": g.dumps({"imported": 2, "skipped": []})},
            {"role": "user", "content": f"also drop {q['full']} from the list"},
        ]
        g.send({"model": "gpt-4o", "messages": messages}, "Removed.", session=f"t{n}")


def _responses_session(g: _Gen, n: int) -> None:
    p = g.person()
    lookup = g.dumps({g.rng.choice(EMAIL_KEYS): p["email"]})
    output = g.dumps(
        {
            "data": {
                "contact": g.contact_record(p, 4),
                "notes": f"Prefers calls after 3pm. Spouse: {g.person(prose_only=True)['full']}.",
            }
        }
    )
    body = {
        "model": "gpt-4.1",
        "instructions": "Answer from the directory only.",
        "input": [
            {"role": "user", "content": f"Who owns the account {p['email']}?"},
            {"type": "function_call", "call_id": f"r{n}", "name": "directory_lookup", "arguments": lookup},
            {"type": "function_call_output", "call_id": f"r{n}", "output": output},
        ],
    }
    g.send(body, f"The account belongs to {p['full']}.", api="responses", session=f"r{n}")


_SESSIONS = (_crm_session, _order_session, _table_session, _responses_session)


def build_agentic_set(seed: int = SEED, sessions: int = 80) -> AgenticSet:
    """``sessions`` sessions of the four kinds in turn (see the module docstring)."""
    from capture.importers.logs import build_trace

    g = _Gen(seed)
    for n in range(sessions):
        _SESSIONS[n % len(_SESSIONS)](g, n)
    trace = build_trace(g.records, source="agentic-evalset", source_format="openai-jsonl")
    return AgenticSet(trace, g.planted, g.non_pii, g.json_texts, g.layouts)


@dataclass
class AgenticScores:
    requests: int = 0
    values: Counter = field(default_factory=Counter)
    left: dict[str, list[str]] = field(default_factory=dict)
    strict_left: dict[str, list[str]] = field(default_factory=dict)
    quarantined: int = 0
    quarantine_reasons: dict = field(default_factory=dict)
    json_slots: int = 0
    json_broken: int = 0  # no longer parses, or its keys changed
    non_pii: int = 0
    non_pii_changed: list[str] = field(default_factory=list)
    token_exact: float = float("nan")
    seconds: float = 0.0
    layouts: Counter = field(default_factory=Counter)


def _keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keys(v) for v in value]
    return None if isinstance(value, str) else value


# PERSON, split by where the name stands
_PERSON_SPLIT = ("PERSON in keys and tables", "PERSON only in prose")


def _kind(p: Planted) -> str:
    if p.kind != "PERSON":
        return p.kind
    return _PERSON_SPLIT[1] if p.prose_only else _PERSON_SPLIT[0]


def score(s: AgenticSet, processes: int | None = None) -> AgenticScores:
    """Redact the set's trace and score it (see the module docstring)."""
    from redact import RedactionKey
    from redact.pipeline import redact_trace
    from replay.bodies import text_slots
    from tests.unit.redact.evalset import stored_text, value_pattern

    out = AgenticScores(requests=len(s.trace), layouts=s.layouts)
    started = time.perf_counter()
    red, report = redact_trace(s.trace, RedactionKey(b"agentic-evalset-key-0123456789"), processes=processes)
    out.seconds = time.perf_counter() - started
    out.quarantined, out.quarantine_reasons = report.quarantined, dict(report.quarantine_reasons)
    out.token_exact = report.to_dict()["requests_token_exact"]
    stored = stored_text(red).lower()
    for kind in (*KINDS, *_PERSON_SPLIT):
        labels = [p for p in s.planted.values() if _kind(p) == kind or (kind == "PERSON" and p.kind == kind)]
        out.values[kind] = len(labels)
        out.left[kind] = [p.value for p in labels if re.search(value_pattern(p.value.lower()), stored)]
        out.strict_left[kind] = [
            p.value
            for p in labels
            if p.value in out.left[kind] or any(re.search(value_pattern(w.lower()), stored) for w in p.parts)
        ]
    raw_bodies = dict(zip(s.trace.df["request_id"].to_list(), s.trace.df["body"].to_list()))
    seen: set[str] = set()
    for rid, body in zip(red.df["request_id"].to_list(), red.df["body"].to_list()):
        for a, b in zip(text_slots(json.loads(raw_bodies[rid])), text_slots(json.loads(body))):
            if a.text in s.json_texts and a.text not in seen:
                seen.add(a.text)
                out.json_slots += 1
                try:
                    same = _keys(json.loads(a.text)) == _keys(json.loads(b.text))
                except ValueError:
                    same = False
                out.json_broken += not same
    red_text = "\x00".join(red.df["body"].to_list())
    raw_text = "\x00".join(raw_bodies[rid] for rid in red.df["request_id"].to_list())
    for value in sorted(s.non_pii):
        out.non_pii += 1
        if red_text.count(value) < raw_text.count(value):
            out.non_pii_changed.append(value)
    return out


def format_table(sc: AgenticScores) -> str:
    lines = [
        f"agentic set: {sc.requests} requests, redact_trace {sc.seconds:.1f} s; table layouts {dict(sorted(sc.layouts.items()))}",
        f"{'type':26s} {'values':>6s} {'left':>5s} {'left %':>7s} {'strict left':>11s} {'strict %':>8s}  examples (strict)",
    ]
    for kind in ("PERSON", *_PERSON_SPLIT, *KINDS[1:]):
        n = sc.values[kind]
        left, strict = len(sc.left[kind]), len(sc.strict_left[kind])
        shown = "; ".join(repr(v) for v in sc.strict_left[kind][:4])
        lines.append(f"{kind:26s} {n:6d} {left:5d} {100 * left / n:6.1f}% {strict:11d} {100 * strict / n:7.1f}%  {shown}")
    lines.append(f"quarantined: {sc.quarantined} of {sc.requests} {sc.quarantine_reasons or ''}")
    lines.append(f"JSON strings (tool arguments and results) no longer the same JSON: {sc.json_broken} of {sc.json_slots}")
    lines.append(f"non-PII strings changed: {len(sc.non_pii_changed)} of {sc.non_pii} {sc.non_pii_changed[:6]}")
    lines.append(f"requests whose token count is unchanged: {sc.token_exact:.3f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="Score redaction on a generated set of agentic sessions.")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--sessions", type=int, default=80)
    ap.add_argument("--processes", type=int, default=None)
    a = ap.parse_args()
    print(format_table(score(build_agentic_set(a.seed, a.sessions), a.processes)))


if __name__ == "__main__":
    main()
