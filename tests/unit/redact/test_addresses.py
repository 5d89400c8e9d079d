"""STREET_ADDRESS: whole addresses of eight countries found by the real analyzer, texts that are no
address left alone, and surrogates of the same shape and token count (GPT-2's tokenizer)."""

from __future__ import annotations

import random
import re

import pytest

pytest.importorskip("faker")

from redact.addresses import STREET_WORDS, find_addresses  # noqa: E402
from redact.analyzer import TextAnalyzer  # noqa: E402
from redact.key import RedactionKey  # noqa: E402
from redact.surrogates import Surrogates  # noqa: E402
from replay.tokenizer import load_tokenizer  # noqa: E402

KEY = RedactionKey(b"test-key-0123456789abcdef")

# hand-picked, each to be found as one span exactly
ADDRESSES = {
    "US": [
        "1600 Pennsylvania Avenue NW, Washington, DC 20500",
        "350 5th Ave, New York, NY 10118",
        "123 Main St Apt 4B, Springfield, IL 62704",
        "500 W 34th St #12, New York, NY 10001-2345",
        "7919 Christina Knoll Suite 658, Portland, OR 47456",
        "1234 State Route 7, Athens, OH 45701",
    ],
    "UK": [
        "221B Baker Street, London NW1 6XE",
        "10 Downing Street, London SW1A 2AA",
        "Flat 2, 10 Downing St",
        "Church Lane, Little Snoring NR21 0AA",
        "Studio 14, Jones Rue, London L6 2TH",
    ],
    "DE": [
        "Hauptstraße 12, 10115 Berlin",
        "Am Markt 3a, 28195 Bremen",
        "Karl-Marx-Allee 90, 10243 Berlin",
        "Kurfürstendamm 21, 10719 Berlin",
        "Unter den Linden 5, 10117 Berlin",
        "Berliner Straße 12",
        "Alma-Wende-Ring 4-3, 59115 Berlin",
        "Kaiserring 10, 68161 Mannheim",
    ],
    "FR": [
        "12 rue de la Paix, 75002 Paris",
        "3 bis avenue des Champs-Élysées, 75008 Paris",
        "5, boulevard Saint-Germain",
        "3 place de la Concorde, 75008 Paris",
        "rue Pereira, 82533 Nice",
        "8 rue de l'Église, 69001 Lyon Cedex 01",
    ],
    "ES": [
        "Calle Mayor 5, 3º B, 28013 Madrid",
        "C/ Mayor, 5",
        "C/Alcalá 42, 2º izq., 28014 Madrid",
        "Avda. de la Constitución 12, 41001 Sevilla",
        "Paseo de la Castellana 100, 28046 Madrid",
        "Carrer de Mallorca 401, bajo, 08013 Barcelona",
    ],
    "JP": [
        "1-2-3 Nishi-Shinjuku, Shinjuku-ku, Tokyo 160-0023",
        "1 Chome-1-2 Oshiage, Sumida City, Tokyo 131-0045",
        "Nishi-Shinjuku 2-8-1, Shinjuku-ku, Tokyo 163-8001",
        "〒160-0023 東京都新宿区西新宿2-8-1",
        "東京都千代田区千代田1-1",
        "大阪府大阪市北区梅田3丁目1番3号",
        "神奈川県横浜市中区日本大通1 県庁ビル5階",
    ],
    "CA": [
        "123 Main Street, Toronto, ON M5V 2T6",
        "1234 rue Sherbrooke Ouest, Montréal (Québec) H3A 1A1",
        "456, boul. René-Lévesque Est, Québec, QC G1R 2B5",
        "4-123 Main St, Ottawa ON K1A 0B1",
        "80 montée Paul, Laval, QC H7N 5K1",
    ],
    "AU": [
        "Unit 5, 12 Smith St, Surry Hills NSW 2010",
        "5/12 Smith Street, Surry Hills NSW 2010",
        "Level 3, 100 George St, Sydney NSW 2000",
        "17 Kennedy Laneway, East Tony, VIC, 2609",
    ],
}
UNITS_AND_BOXES = [
    "123 Main St Apt 4B",
    "123 Main St, Suite 200",
    "123 Main St Ste. 5",
    "123 Main St #12",
    "Unit 5, 12 Smith St",
    "Flat 2, 10 Downing St",
    "Apt 4, 123 Main St",
    "88 King St W, 3rd Floor",
    "PO Box 1234, Springfield, IL 62704",
    "P.O. Box 77",
    "GPO Box 1234, Sydney NSW 2001",
    "Postfach 12 34 56, 10115 Berlin",
    "Apartado de Correos 123, 28080 Madrid",
    "B.P. 12, 75001 Paris",
    "PSC 7602, Box 0776, APO AA 95814",
]
NOT_ADDRESSES = [
    "3 Main points to cover",
    "12 Days of Christmas",
    "Python 3.11.4 released, see version 2.0.1 notes",
    "for i in range(10): street = streets[i]",
    "5 Park spaces left",
    "March 5, 2024",
    "on 2024-05-03 at 10:30",
    "Im Jahr 2024 haben wir",
    "via Python 3, we call it",
    "Step 3 Click the Run button",
    "I have 2 Google Drive folders",
    "The meeting is at 5 PM in Room 12",
    "see section 4.2 Main Results",
    "We shipped 10 Route handlers today",
    "Windows 10, 12345 Users",
    "Top 10 Best Places to Visit",
    "We need 3 Square brackets",
    "x = 5  # Place holder",
    "HTTP 404 Not Found",
    "the 3 Rivers project",
    "measure 5 ft 3 in and 12 Square Feet",
    "String 5 and Spring 2024",
    "1-2-3 Go!",
]


@pytest.fixture(scope="module")
def analyzer():
    return TextAnalyzer()


def _addresses(analyzer, texts):
    out = []
    for text, spans in zip(texts, analyzer.analyze_batch(texts)):
        assert isinstance(spans, list), spans
        out.append([text[f.start : f.end] for f in spans if f.entity == "STREET_ADDRESS"])
    return out


@pytest.mark.parametrize("country", sorted(ADDRESSES))
def test_whole_addresses_of_each_country(analyzer, country):
    texts = [f"Please ship the package to {a} by Friday, thanks." for a in ADDRESSES[country]]
    for address, found in zip(ADDRESSES[country], _addresses(analyzer, texts)):
        assert found == [address], (address, found)


def test_units_po_boxes_and_a_street_line_alone(analyzer):
    texts = [f'{{"note": "my address is {a}"}}' for a in UNITS_AND_BOXES]
    for address, found in zip(UNITS_AND_BOXES, _addresses(analyzer, texts)):
        assert found == [address], (address, found)


def test_an_address_over_lines_and_in_json(analyzer):
    texts = [
        "Ship to:\nJohn Smith\n123 Main St\nSpringfield, IL 62704\nThanks",
        '{"name": "Ana", "address": "Calle Mayor 5, 3º B, 28013 Madrid", "plan": "pro"}',
    ]
    assert _addresses(analyzer, texts) == [["123 Main St\nSpringfield, IL 62704"], ["Calle Mayor 5, 3º B, 28013 Madrid"]]


def test_texts_that_are_no_address(analyzer):
    for text, found in zip(NOT_ADDRESSES, _addresses(analyzer, NOT_ADDRESSES)):
        assert found == [], (text, found)


def test_a_whole_address_wins_over_the_ner_pieces_in_it(analyzer):
    text = "I met Sarah at 221B Baker Street, London NW1 6XE, then we walked to Hyde Park."
    spans = analyzer.analyze(text)
    address = [f for f in spans if f.entity == "STREET_ADDRESS"]
    assert [text[f.start : f.end] for f in address] == ["221B Baker Street, London NW1 6XE"]
    inside = [f for f in spans if f.start < address[0].end and f.end > address[0].start]
    assert inside == address  # no LOCATION piece ("Baker Street", "London") left inside it
    # a name the NER reads into the street keeps its words outside the address
    text = "Contact Hans Müller Hauptstraße 12, 10115 Berlin for details."
    found = {(f.entity, text[f.start : f.end]) for f in analyzer.analyze(text)}
    assert ("STREET_ADDRESS", "Hauptstraße 12, 10115 Berlin") in found
    assert ("PERSON", "Hans Müller") in found


# -- surrogates ----------------------------------------------------------------------------------


def _faker_addresses(per_locale: int = 30) -> dict[str, list[str]]:
    """Faker's addresses of the eight countries (one line each), and romaji ones of our own."""
    from faker import Faker

    out = {}
    for loc in ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "ja_JP", "en_CA", "en_AU"):
        fake = Faker(loc)
        fake.seed_instance(7)
        out[loc] = [re.sub(r"\s+,", ",", " ".join(fake.address().replace("\n", ", ").split())) for _ in range(per_locale)]
    r = random.Random(5)
    towns = ["Nishi-Shinjuku", "Marunouchi", "Roppongi", "Shibuya", "Umeda", "Namba", "Sakae", "Tenjin"]
    wards = ["Shinjuku-ku", "Chiyoda-ku", "Minato-ku", "Kita-ku", "Naka-ku", "Sumida City", "Yokohama-shi"]
    cities = ["Tokyo", "Osaka", "Nagoya", "Fukuoka", "Yokohama"]
    out["ja_romaji"] = [
        f"{r.randint(1, 9)}-{r.randint(1, 30)}-{r.randint(1, 20)} {r.choice(towns)}, "
        f"{r.choice(wards)}, {r.choice(cities)} {r.randint(100, 999)}-{r.randint(0, 9999):04d}"
        for _ in range(per_locale)
    ]
    return out


@pytest.fixture(scope="module")
def sample():
    values = [a for group in ADDRESSES.values() for a in group] + UNITS_AND_BOXES
    values += [a for group in _faker_addresses().values() for a in group]
    found = [v for v in values if find_addresses(v) == [(0, len(v))]]
    assert len(found) >= 0.98 * len(values)  # Faker's odd ones aside, the sample is of addresses
    return values, found


@pytest.fixture(scope="module")
def sur():
    return Surrogates(KEY, load_tokenizer("gpt2"))


def test_token_count_kept_in_97_percent(sur, sample):
    sample = sample[0]
    kept = 0
    for value in sample:
        out = sur.surrogate("STREET_ADDRESS", value)
        assert out != value
        kept += (sur.ntok(out), sur.ntok(" " + out)) == (sur.ntok(value), sur.ntok(" " + value))
    assert len(sample) >= 280
    assert sur.exceptions["STREET_ADDRESS"] == len(sample) - kept  # every miss is reported
    assert kept / len(sample) >= 0.97, (kept, len(sample))


def test_a_surrogate_is_an_address_again(analyzer, sur, sample):
    sample = sample[1]
    outs = [sur.surrogate("STREET_ADDRESS", v) for v in sample]
    texts = [f"Please ship the package to {o} by Friday, thanks." for o in outs]
    for value, out, found in zip(sample, outs, _addresses(analyzer, texts)):
        assert found == [out], (value, out, found)


def test_the_surrogate_keeps_each_part_s_format(sur):
    def make(v):
        return sur.surrogate("STREET_ADDRESS", v)

    uk = make("221B Baker Street, London NW1 6XE")
    assert re.fullmatch(r"\d{3}[A-Z] [A-Z][a-z]+ Street, [A-Z][a-z]+ [A-Z]{2}\d \d[A-Z]{2}", uk), uk
    assert "Baker" not in uk and "London" not in uk and "NW1 6XE" not in uk
    ca = make("123 Main Street, Toronto, ON M5V 2T6")
    assert re.fullmatch(r"\d{3} [A-Z][a-z]+ Street, [A-Z][a-z]+, ON [A-Z]\d[A-Z] \d[A-Z]\d", ca), ca
    jp = make("1-2-3 Nishi-Shinjuku, Shinjuku-ku, Tokyo 160-0023")
    assert re.fullmatch(r"\d-\d-\d [A-Z][a-z]+-[A-Z][a-z]+, [A-Z][a-z]+-ku, [A-Z][a-z]+ \d{3}-\d{4}", jp), jp
    de = make("Hauptstraße 12, 10115 Berlin")
    assert re.fullmatch(r"[A-Z][a-z]+straße \d\d, \d{5} [A-Z][a-z]+", de) and not de.startswith("Haupt"), de
    es = make("Calle Mayor 5, 3º B, 28013 Madrid")
    assert re.fullmatch(r"Calle [A-Z][a-z]+ \d, \dº B, \d{5} [A-Z][a-z]+", es) and "Mayor" not in es, es
    fr = make("12 rue de la Paix, 75002 Paris")
    assert re.fullmatch(r"\d\d rue de la [A-Z][a-z]+, \d{5} [A-Z][a-z]+", fr) and "Paix" not in fr, fr
    au = make("Unit 5, 12 Smith St, Surry Hills NSW 2010")
    assert re.fullmatch(r"Unit \d, \d\d [A-Z][a-z]+ St, [A-Z][a-z]+ Hills NSW \d{4}", au), au
    kanji = make("〒160-0023 東京都新宿区西新宿2-8-1")
    assert re.fullmatch(r"〒\d{3}-\d{4} \w\w都\w\w区\w\w\w\d-\d-\d", kanji), kanji
    assert kanji[11:] != "東京都新宿区西新宿2-8-1"
    assert make("Hauptstraße 12, 10115 Berlin") == de  # one value, one surrogate


def test_street_words_are_kept_in_places_not_in_names(sur):
    assert {"street", "rue", "straße", "calle", "apt", "suite", "unit", "flat", "ku", "shi"} <= STREET_WORDS
    person = sur.surrogate("PERSON", "Grace Park")
    assert "Park" not in person.split()  # a surname, though "Park" is a street word
    assert sur.surrogate("STREET_ADDRESS", "12 Grace Park").endswith(" Park")
