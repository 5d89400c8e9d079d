"""The labelled synthetic PII corpus: exact spans, determinism, valid numbers, chat shape."""

from __future__ import annotations

import base64
import ipaddress
import json
import re
from collections import Counter, defaultdict

import numpy as np
import pytest

pytest.importorskip("faker")

from examples.pii_corpus import ENTITIES, LabelledText, Span, make_corpus  # noqa: E402
from replay.bodies import text_slots  # noqa: E402

_MIN_PER_ENTITY = 20


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(300, seed=0)


def _spans(corpus, entity: str) -> list[Span]:
    return [s for lt in corpus.iter_labelled() for s in lt.spans if s.entity == entity]


def _luhn(number: str) -> bool:
    total = 0
    for i, d in enumerate(int(c) for c in reversed(number)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "")
    rearranged = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


_IBAN_LEN = {"DE": 22, "GB": 22, "FR": 27, "NL": 18, "ES": 24, "IT": 27, "CH": 21}


def _b64url_json(part: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_spans_are_exact_sorted_and_disjoint(corpus):
    for lt in corpus.iter_labelled():
        assert isinstance(lt, LabelledText)
        end = 0
        for s in lt.spans:
            assert s.entity in ENTITIES
            assert lt.text[s.start : s.end] == s.value and s.value
            assert s.start >= end, (lt.text, lt.spans)
            end = s.end


def test_non_pii_strings_occur_outside_every_span(corpus):
    n = 0
    for lt in corpus.iter_labelled():
        for trap in lt.non_pii:
            n += 1
            hits = [m.start() for m in re.finditer(re.escape(trap), lt.text)]
            assert any(all(i + len(trap) <= s.start or i >= s.end for s in lt.spans) for i in hits), trap
    assert n > 1000
    traps = {t for lt in corpus.iter_labelled() for t in lt.non_pii}
    for expected in (
        '"email"',
        '"user_id"',
        "requests.get",
        "get_user_email",
        "OPENAI_API_KEY",
        "DATABASE_URL",
        "hashlib.sha256",
    ):
        assert expected in traps
    assert any(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", t) for t in traps)
    assert any(re.fullmatch(r"[0-9a-f]{64}", t) for t in traps)


def test_every_text_of_every_body_is_labelled(corpus):
    for body, response in zip(corpus.requests, corpus.responses):
        assert set(body) == {"model", "messages", "max_tokens"}
        for slot in text_slots(body):
            assert slot.text in corpus.labels
        assert response in corpus.labels
    assert corpus.unique_texts() == [lt.text for lt in corpus.iter_labelled()]


def test_same_seed_same_corpus_other_seed_another():
    a, b, c = make_corpus(40, seed=7), make_corpus(40, seed=7), make_corpus(40, seed=8)
    assert a.requests == b.requests and a.responses == b.responses
    assert a.session_ids == b.session_ids and a.turns == b.turns
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert a.labels == b.labels
    assert a.responses != c.responses


def test_every_entity_type_appears(corpus):
    counts = corpus.entity_counts()
    for entity in ENTITIES:
        assert counts[entity] >= _MIN_PER_ENTITY, (entity, counts)
    assert sum(1 for lt in corpus.iter_labelled() if not lt.spans) >= 20  # texts with no PII


def test_cards_are_luhn_valid_with_all_brands_and_formats(corpus):
    cards = _spans(corpus, "CREDIT_CARD")
    brands = Counter()
    seps = Counter()
    for s in cards:
        digits = re.sub(r"[ -]", "", s.value)
        assert digits.isdigit() and _luhn(digits), s.value
        seps[" " if " " in s.value else "-" if "-" in s.value else ""] += 1
        if digits[0] == "4":
            assert len(digits) == 16
            brands["visa"] += 1
        elif digits[:2] in ("34", "37"):
            assert len(digits) == 15
            brands["amex"] += 1
        elif 51 <= int(digits[:2]) <= 55:
            assert len(digits) == 16
            brands["mc5"] += 1
        else:
            assert 2221 <= int(digits[:4]) <= 2720 and len(digits) == 16, s.value
            brands["mc2"] += 1
    assert min(brands[b] for b in ("visa", "amex", "mc5", "mc2")) >= 5, brands
    assert min(seps.values()) >= 5 and len(seps) == 3, seps


def test_ibans_have_valid_checksums(corpus):
    ibans = _spans(corpus, "IBAN_CODE")
    for s in ibans:
        compact = s.value.replace(" ", "")
        assert _iban_ok(s.value), s.value
        assert len(compact) == _IBAN_LEN[compact[:2]]
    assert any(" " in s.value for s in ibans) and any(" " not in s.value for s in ibans)


def test_jwts_have_a_json_header(corpus):
    jwts = _spans(corpus, "JWT")
    for s in jwts:
        header, payload, sig = s.value.split(".")
        assert s.value.startswith("eyJ")
        h = _b64url_json(header)
        assert h["typ"] == "JWT" and h["alg"] in ("HS256", "RS256", "ES256")
        assert "exp" in _b64url_json(payload)
        assert re.fullmatch(r"[A-Za-z0-9_-]+", sig)


def test_secrets_have_realistic_shapes(corpus):
    shapes = [
        r"sk-proj-[A-Za-z0-9_-]{74}T3BlbkFJ[A-Za-z0-9_-]{74}",
        r"sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}",
        r"sk-ant-api03-[A-Za-z0-9_-]{93}AA",
        r"ghp_[A-Za-z0-9]{36}",
        r"github_pat_[A-Z0-9]{22}_[A-Za-z0-9]{59}",
        r"AKIA[0-9A-Z]{16}",
        r"[A-Za-z0-9/+]{40}",
        r"AIza[A-Za-z0-9_-]{35}",
        r"xoxb-\d{11,13}-\d{11,13}-[A-Za-z0-9]{24}",
        r"(sk|rk)_live_([A-Za-z0-9]{24}|[A-Za-z0-9]{99})",
        r"hf_[A-Za-z]{34}",
    ]
    seen = Counter()
    for s in _spans(corpus, "API_KEY"):
        matched = [i for i, p in enumerate(shapes) if re.fullmatch(p, s.value)]
        assert matched, s.value
        seen[matched[0]] += 1
    assert len(seen) == len(shapes), seen
    for lt in corpus.iter_labelled():
        for s in lt.spans:
            if s.entity == "BEARER_TOKEN":
                assert lt.text[s.start - 7 : s.start] == "Bearer ", lt.text
            elif s.entity == "URL_PASSWORD":
                assert lt.text[s.start - 1] == ":" and lt.text[s.end] == "@"
                assert re.search(r"[a-z+]+://[\w-]*:$", lt.text[: s.start])
            elif s.entity == "PRIVATE_KEY":
                lines = s.value.split("\n")
                assert re.fullmatch(r"-----BEGIN ((RSA|EC|OPENSSH) )?PRIVATE KEY-----", lines[0])
                assert lines[-1] == lines[0].replace("BEGIN", "END")
                base64.b64decode("".join(lines[1:-1]), validate=True)


def test_people_numbers_and_addresses_look_right(corpus):
    for s in _spans(corpus, "US_SSN"):
        area, group, serial = s.value.split("-")
        assert len(area) == 3 and len(group) == 2 and len(serial) == 4
        assert area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"
    ips = [ipaddress.ip_address(s.value) for s in _spans(corpus, "IP_ADDRESS")]
    assert sum(ip.version == 6 for ip in ips) >= 20 and sum(ip.version == 4 for ip in ips) >= 20
    for s in _spans(corpus, "EMAIL_ADDRESS"):
        assert re.fullmatch(r"[a-z0-9._]+@[a-z0-9.-]+\.[a-z]+", s.value), s.value
    for s in _spans(corpus, "PHONE_NUMBER"):
        assert 9 <= sum(c.isdigit() for c in s.value) <= 13, s.value
    for s in _spans(corpus, "PERSON"):
        assert s.value[0].isupper() and "@" not in s.value


def test_requests_resend_the_conversation_so_far(corpus):
    by_session: dict[int, list[int]] = defaultdict(list)
    for i, sid in enumerate(corpus.session_ids):
        by_session[sid].append(i)
    assert len(by_session) == 300
    multi = 0
    for idx in by_session.values():
        assert [corpus.turns[i] for i in idx] == list(range(len(idx)))
        first = corpus.requests[idx[0]]["messages"]
        assert [m["role"] for m in first] == ["system", "user"]
        for prev, cur in zip(idx, idx[1:]):
            multi += 1
            before, after = corpus.requests[prev]["messages"], corpus.requests[cur]["messages"]
            assert after[: len(before)] == before
            assert after[len(before)] == {"role": "assistant", "content": corpus.responses[prev]}
            assert after[len(before) + 1]["role"] == "user" and len(after) == len(before) + 2
    assert multi > 1000


def test_arrivals_increase_and_sessions_interleave(corpus):
    a = corpus.arrival_s
    assert a.dtype == np.float64 and a[0] == 0.0 and np.all(np.diff(a) > 0)
    sids = corpus.session_ids
    # some session's requests are interleaved with another's
    first = {s: sids.index(s) for s in set(sids)}
    last = {s: len(sids) - 1 - sids[::-1].index(s) for s in set(sids)}
    assert sum(last[s] - first[s] + 1 > sids.count(s) for s in set(sids)) > 100


def test_system_prompts_are_shared(corpus):
    use = Counter(corpus.requests[i]["messages"][0]["content"] for i, t in enumerate(corpus.turns) if t == 0)
    assert set(use) == set(corpus.system_prompts) and len(use) == 4
    assert min(use.values()) >= 5
    assert all(len(p) > 400 for p in corpus.system_prompts)
    assert any(s.entity == "EMAIL_ADDRESS" for p in corpus.system_prompts for s in corpus.labels[p].spans)


def test_options():
    c = make_corpus(20, seed=1, turns_mean=1, system_prompts=0, model="m")
    assert all(t == 0 for t in c.turns) and len(c) == 20
    assert all(b["model"] == "m" and b["messages"][0]["role"] == "user" for b in c.requests)
    assert len(make_corpus(0).requests) == 0
    for bad in ({"n_sessions": -1}, {"n_sessions": 1, "turns_mean": 0.5}, {"n_sessions": 1, "system_prompts": -1}):
        with pytest.raises(ValueError):
            make_corpus(**bad)


def test_the_corpus_labels_the_analyzer_s_own_entity_types():
    from examples.pii_corpus import NOT_GENERATED, SECRET_ENTITIES
    from redact.analyzer import ENTITIES as ANALYZER
    from redact.recognizers import SECRET_ENTITIES as SECRETS

    assert set(ENTITIES) <= set(ANALYZER) and set(SECRET_ENTITIES) <= set(SECRETS)
    # every type the analyzer looks for is either generated here or named as measured elsewhere
    assert set(ANALYZER) == set(ENTITIES) | set(NOT_GENERATED)
