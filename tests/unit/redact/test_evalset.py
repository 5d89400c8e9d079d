"""Floors per type on the independent evaluation set (:mod:`tests.unit.redact.evalset`), and
checks of the set itself.

The floors are the issue's ("[8] Redaction fails closed"): every structured type (street
addresses and secrets introduced by words included) recall >= 0.995 of distinct values, full
names >= 0.95, single names after a greeting >= 0.90, and at most 3% of the code sample's non-PII
strings changed. Recall is the strict one (a value counts as left when it, or one of its
identifying parts, is still stored anywhere). Precision floors are set for the types whose false
positives the set can show (pattern types, names, addresses, prose secrets), not for LOCATION
(countries and acronyms are not labelled here) nor SECRET (the entropy catch-all). The slow run
(redact_trace, then the analyzer on each distinct text) is done once per module; ``-s`` prints
its table (also ``python -m tests.unit.redact.evalset``).
"""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.unit.redact import evalset as ev

STRUCTURED = (
    "STREET_ADDRESS",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "API_KEY",
    "JWT",
    "PRIVATE_KEY",
    "BEARER_TOKEN",
    "URL_PASSWORD",
    "PASSWORD",
)
RECALL_FLOOR = {**dict.fromkeys(STRUCTURED, 0.995), "PERSON": 0.95, ev.FIRST_NAME: 0.90}
PRECISION_FLOOR = {
    **dict.fromkeys(STRUCTURED, 0.95),
    "PHONE_NUMBER": 0.90,
    "STREET_ADDRESS": 0.90,
    "PASSWORD": 0.90,
    "PERSON": 0.90,
}
OVER_REDACTION_CEILING = 0.03
# distinct values each type must have in the set (PEM keys are few in prompts)
MIN_VALUES = {**dict.fromkeys(ev.TYPES, 10), "PRIVATE_KEY": 3}


@pytest.fixture(scope="module")
def evalset() -> ev.EvalSet:
    return ev.build_evalset()


@pytest.fixture(scope="module")
def scores(evalset) -> ev.Scores:
    s = ev.evaluate(evalset)
    print("\n" + ev.format_table(s))
    return s


# -- the set ----------------------------------------------------------------------------------------


def test_the_set_has_enough_requests_in_multi_turn_chats(evalset):
    df = evalset.trace.df
    assert len(df) >= ev.MIN_REQUESTS
    assert df["turn"].max() >= 3 and (df["turn"] > 0).sum() >= len(df) // 2  # later turns resend earlier ones
    bodies = [json.loads(b) for b in df["body"].to_list()]
    assert sum(1 for b in bodies for m in b["messages"] if m.get("tool_calls")) >= 20
    assert sum(1 for b in bodies if "metadata" in b or "user" in b) >= 10
    assert df["response"].is_not_null().sum() >= ev.MIN_REQUESTS


@pytest.mark.parametrize("kind", ev.TYPES)
def test_each_type_has_enough_distinct_values(evalset, kind):
    assert len(evalset.by_kind().get(kind, [])) >= MIN_VALUES[kind]


def test_every_labelled_value_occurs_in_the_raw_trace(evalset):
    raw = ev.stored_text(evalset.trace)
    missing = [v for v in evalset.labels if not re.search(ev.value_pattern(v), raw)]
    assert missing == []
    # and in the strings that are redacted (prompts, responses), not only in metadata
    texts = "\x00".join(evalset.texts())
    assert [v for v in evalset.labels if not re.search(ev.value_pattern(v), texts)] == []


def test_every_typed_value_is_used(evalset):
    typed = {
        *ev.FULL_NAMES,
        *ev.FIRST_NAMES,
        *(surname for _, surname in ev.TITLED),
        *ev.CITIES,
        *(address for address, _ in ev.ADDRESSES),
        *ev.EMAILS,
        *ev.PHONES,
        *ev.CARDS,
        *ev.IBANS,
        *ev.IPS,
        *ev.SSNS,
        *ev.API_KEYS,
        *ev.JWTS,
        *ev.PEM_KEYS,
        *ev.BEARER_TOKENS,
        *(password for _, password in ev.URL_PASSWORDS),
        *ev.PASSWORDS,
    }
    assert sorted(typed - set(evalset.labels)) == []
    assert sorted(set(evalset.labels) - typed) == []


def test_values_are_found_as_whole_words_in_any_json_escaping():
    assert re.search(ev.value_pattern("Lan"), "Nguyễn Thị Lan, hi")
    assert not re.search(ev.value_pattern("Lan"), "Landlord in Lanh")
    assert re.search(ev.value_pattern("宇田川町12-3"), "東京都渋谷区宇田川町12-3")
    pem = ev.PEM_KEYS[0]
    assert re.search(ev.value_pattern(pem), json.dumps({"a": json.dumps({"key": pem})}))


def test_no_name_word_is_a_surrogate_word(evalset):
    """A surrogate name never recreates a labelled name (which would read as a leak)."""
    from redact import RedactionKey
    from redact.surrogates import Surrogates
    from replay.tokenizer import load_tokenizer

    pool = set(Surrogates(RedactionKey(b"x" * 32), load_tokenizer("gpt2")).pools["name"])
    words = {
        w for lab in evalset.labels.values() if lab.entity in ("PERSON", "LOCATION") for w in (*lab.value.split(), *lab.parts)
    }
    assert sorted(words & pool) == []


def test_code_sample_strings_are_in_their_texts_and_not_pii(evalset):
    assert len(ev.CODE_TEXTS) >= 20 and len(evalset.code) == len(ev.CODE_TEXTS)
    labelled = re.compile("|".join(ev.value_pattern(v) for v in evalset.labels))
    for content, code in evalset.code:
        assert code.keep
        for s in code.keep:
            assert s in content, s
            assert not labelled.search(s), s
            assert not any(s in v for v in evalset.labels), s


def test_the_set_is_the_same_for_a_seed(evalset):
    again = ev.build_evalset()
    assert again.trace.df["body"].to_list() == evalset.trace.df["body"].to_list()
    assert ev.build_evalset(1).trace.df["body"].to_list() != evalset.trace.df["body"].to_list()


# -- the floors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(RECALL_FLOOR))
def test_recall_per_type(scores, kind):
    recall = scores.recall(kind)
    assert recall >= RECALL_FLOOR[kind], (
        f"{kind}: recall {recall:.3f} ({scores.recall(kind, strict=False):.3f} for whole values) < "
        f"{RECALL_FLOOR[kind]}; left: {scores.strict_left[kind]}"
    )


def test_over_redaction_on_code(scores):
    assert scores.code_pairs >= 100
    assert scores.over_redaction <= OVER_REDACTION_CEILING, scores.mangled


@pytest.mark.parametrize("entity", sorted(PRECISION_FLOOR))
def test_precision_per_type(scores, entity):
    precision = scores.precision(entity)
    if math.isnan(precision):
        pytest.skip(f"the analyzer found no {entity} span (its recall test says whether that is a miss)")
    assert precision >= PRECISION_FLOOR[entity], (
        f"{entity}: precision {precision:.3f} of {scores.found[entity]} spans; not on a label: "
        f"{scores.false_positives[entity][:10]}"
    )


def test_no_analysis_errors(scores):
    assert scores.analysis_errors == 0
