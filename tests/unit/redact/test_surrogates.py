"""Surrogates keep type, format and token count, and one value maps to one surrogate."""

from __future__ import annotations

import ipaddress
import re

import pytest

from redact.key import RedactionKey
from redact.surrogates import Surrogates
from replay.tokenizer import load_tokenizer

pytest.importorskip("faker")

KEY = RedactionKey(b"test-key-0123456789abcdef")
VALUES = {
    "PERSON": ["John Smith", "Maria Gonzalez", "Smith", "Éléonore Voisin"],
    "LOCATION": ["San Francisco", "Boston"],
    "EMAIL_ADDRESS": ["maria.gonzalez@example.org", "j.doe+billing@acme.io"],
    "CREDIT_CARD": ["4111 1111 1111 1111", "2221-0000-0000-0009", "378282246310005"],
    "IBAN_CODE": ["GB82 WEST 1234 5698 7654 32", "DE89370400440532013000"],
    "IP_ADDRESS": ["192.168.10.1", "10.0.0.254"],
    "US_SSN": ["123-45-6789"],
    "PHONE_NUMBER": ["+1 (415) 555-0132", "415.555.0199"],
    "API_KEY": ["sk-proj-abcDEF1234567890abcdEFGH1234", "AKIAQ3EGRT5LXJ7ZK2PM", "ghp_R8kTq2ZxV0mB7nLw4YhC9sDfJ3pG6uAeK1oQ"],
    "JWT": ["eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I3PGYqsvLhL0Ek"],
    "SECRET": ["q8Vn2Lr7XcT0bWzK4mJy9HfD3sGpA6uNeR1oQi5t"],
}


@pytest.fixture(scope="module", params=["gpt2", "qwen2"])
def sur(request):
    return Surrogates(KEY, load_tokenizer(request.param))


def _luhn(digits: str) -> bool:
    total = 0
    for i, d in enumerate(reversed([int(c) for c in digits])):
        total += d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2)
    return total % 10 == 0


@pytest.mark.parametrize("entity", sorted(VALUES))
def test_token_count_kept_alone_and_after_a_space(sur, entity):
    missed = 0
    for value in VALUES[entity]:
        out = sur.surrogate(entity, value)
        assert out != value
        kept = (sur.ntok(out), sur.ntok(" " + out)) == (sur.ntok(value), sur.ntok(" " + value))
        missed += not kept
    assert sur.exceptions[entity] == missed  # every miss is reported
    if sur.tok.get_vocab_size() < 60_000:  # GPT-2's vocabulary: every value here fits
        assert missed == 0
    else:  # Qwen2's has whole tokens such as "@example" that no other domain word matches
        assert missed <= 1


def test_a_surrogate_off_in_length_is_counted(sur):
    # counting digits and the alphabet are few tokens; random ones of that shape are many
    value = "ghp_0123456789abcdefABCDEF0123456789abcd"
    out = sur.surrogate("API_KEY", value)
    matched = (sur.ntok(out), sur.ntok(" " + out)) == (sur.ntok(value), sur.ntok(" " + value))
    assert matched or sur.exceptions["API_KEY"] >= 1


def test_one_value_one_surrogate_and_the_key_matters(sur):
    a = sur.surrogate("PERSON", "John Smith")
    assert sur.surrogate("PERSON", "John Smith") == a
    fresh = Surrogates(KEY, sur.tok)
    assert fresh.surrogate("PERSON", "John Smith") == a  # not just the cache: the key decides
    other = Surrogates(RedactionKey(b"another-key-0123456789"), sur.tok)
    assert other.surrogate("PERSON", "John Smith") != a
    # a name's words map the same alone as inside the full name
    assert sur.surrogate("PERSON", "Smith") == a.split()[-1]


def test_formats_survive(sur):
    email = sur.surrogate("EMAIL_ADDRESS", "maria.gonzalez@example.org")
    assert re.fullmatch(r"[a-z]+\.[a-z]+@[a-z]+\.org", email), email
    for card in VALUES["CREDIT_CARD"]:
        out = sur.surrogate("CREDIT_CARD", card)
        assert out[0] == card[0] and _luhn(re.sub(r"\D", "", out))
        assert re.sub(r"\d", "9", out) == re.sub(r"\d", "9", card)  # separators where they were
    for iban in VALUES["IBAN_CODE"]:
        out = sur.surrogate("IBAN_CODE", iban)
        compact = out.replace(" ", "")
        assert compact[:2] == iban[:2] and len(out) == len(iban)
        assert int("".join(str(int(c, 36)) for c in compact[4:] + compact[:4])) % 97 == 1
    for ip in VALUES["IP_ADDRESS"]:
        ipaddress.IPv4Address(sur.surrogate("IP_ADDRESS", ip))
    ssn = sur.surrogate("US_SSN", "123-45-6789")
    assert re.fullmatch(r"\d{3}-\d{2}-\d{4}", ssn) and ssn[:3] not in ("000", "666") and ssn[0] != "9"
    assert sur.surrogate("PHONE_NUMBER", "+1 (415) 555-0132").startswith("+1 (")
    for key in VALUES["API_KEY"]:
        out = sur.surrogate("API_KEY", key)
        assert out[:4] == key[:4] and len(out) == len(key)
    jwt = sur.surrogate("JWT", VALUES["JWT"][0])
    assert jwt.split(".")[0] == VALUES["JWT"][0].split(".")[0] and jwt.count(".") == 2
    assert sur.surrogate("PERSON", "Maria Gonzalez").istitle()


def test_the_bounded_cache_forgets_values_not_their_surrogates(sur, monkeypatch):
    import redact.surrogates

    monkeypatch.setattr(redact.surrogates, "CACHE_VALUES", 2)
    small = Surrogates(KEY, sur.tok)
    names = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra"]
    first = [small.surrogate("PERSON", n) for n in names]
    assert len(small._cache) == 2  # the first two were evicted
    assert [small.surrogate("PERSON", n) for n in names] == first


def test_ipv6_addresses_keep_their_routing_prefix_and_token_count(sur):
    # cloud addresses (one provider's /32) were the most frequent IP token exceptions: the
    # random hex of their first groups rarely tokenized like "2600:1f18"
    values = [
        f"2600:1f18:{a:x}:{b:x}::{c:x}"
        for a, b, c in [(0x1937, 0x540E, 0xB646), (0x34F4, 0x8663, 0x8268), (0x759F, 0xA6D9, 0xB257), (0xE583, 0xBAB6, 0xCF40)]
    ]
    values += ["2600:1f18:634f:afb3:6851:443d:6a21:92bf", "2600:1f18:e29:d34e:a317:4334:222a:8399"]
    for v in values:
        out, off = sur.make("IP_ADDRESS", v)
        assert out.startswith("2600:1f18:") and out != v and not off, (v, out)
        ipaddress.ip_address(out)  # still a valid address
    # a compressed address right after its first two groups has no full /32 to keep
    assert not sur.surrogate("IP_ADDRESS", "2001:db8::8a2e:370:7334").startswith("2001:db8:")


def test_token_count_kept_on_values_of_other_locales(sur):
    # the pools are en_US names and words; names, emails and addresses from other locales have
    # pieces no pool word matches (before the vocabulary build and the pool index: 0.78-0.91 of
    # them kept with GPT-2), and a UK postcode's letters must be counted with the space before them
    from faker import Faker

    values = {"PERSON": [], "EMAIL_ADDRESS": [], "STREET_ADDRESS": []}
    for i, loc in enumerate(["hi_IN", "vi_VN", "pl_PL", "tr_TR", "sv_SE", "cs_CZ"]):
        f = Faker(loc)
        f.seed_instance(7 + i)
        for _ in range(12):
            values["PERSON"].append(f.name())
            values["EMAIL_ADDRESS"].append(f.email())
            values["STREET_ADDRESS"].append(f"{f.street_address()}, {f.postcode()} {f.city()}")
    values["STREET_ADDRESS"].append("7 Burgess Skyway, London ZE6B 0HD")
    values["IP_ADDRESS"] = ["2001:0db8:4c2a:0010:0000:0000:0000:00f1", "fe80:0000:0000:0000:0202:b3ff:fe1e:8329"]
    values["CREDIT_CARD"] = ["347429019621658", "2232255437816800", "5344430838213257"]
    for entity, vs in values.items():
        kept = [v for v in vs if not sur.make(entity, v)[1]]
        assert len(kept) >= len(vs) - 1, (entity, sorted(set(vs) - set(kept)))
