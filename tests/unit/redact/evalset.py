"""A second evaluation set for redaction, made apart from :mod:`examples.pii_corpus`, and its scoring.

Owns the typed values, :data:`CODE_TEXTS`, :data:`TYPES`, :class:`Label`, :class:`CodeText`,
:class:`EvalSet`, :func:`build_evalset`, :func:`value_pattern` (when a value counts as present),
:func:`stored_text`, :class:`Scores`, :func:`score_end_to_end`, :func:`score_analyzer`,
:func:`evaluate` and :func:`format_table` (``python -m tests.unit.redact.evalset`` prints the
table; about 30 s on 2 cores, most of it loading spaCy).

The set (the recognizers were tuned on :mod:`examples.pii_corpus`, which draws from Faker; nothing here
does):

- Every value is typed into this module by hand: names of many origins (with diacritics,
  hyphens, particles), first names and titled surnames that stand alone after a greeting, a
  sign-off, ``cc:``, ``from`` or as ``X's``, cities, street addresses of eight countries, emails
  at non-public suffixes, phones (NANP in every separator style and with unassigned area codes,
  E.164 of many countries, national formats of the most populous ones, some invalid), cards
  (Luhn-valid and not), IBANs, IPv4 and IPv6, US SSNs, provider API keys, JWTs, PEM private keys,
  bearer tokens, passwords inside URLs and secrets introduced by words or secret-named variables.
  The random strings among them (keys, tokens, card and IBAN digits) were made once, offline,
  and pasted in; none of the name words is in the surrogates' Faker name pool, so a surrogate
  never recreates one.
- :func:`build_evalset` fills hand-written chat scenarios with those values, a seeded
  ``random.Random`` choosing the order and the wording, until every value has been used, every
  code text has been sent and there are at least :data:`MIN_REQUESTS` requests. Each session is
  a chat: request k resends the earlier turns and answers; some turns call a tool whose
  ``arguments`` carry PII (the request that asks for the call has no recorded answer, the next
  one carries the call and the tool's result); answers often echo values; some bodies carry a
  ``user`` or ``metadata`` field. The Trace is built by the importers' own
  :func:`capture.importers.logs.build_trace`.
- Labels: one per distinct value (:class:`Label`): its type (:data:`TYPES`; a single name
  standing alone is ``PERSON`` with ``first_name``) and its identifying parts (a full name's
  words of three letters or more that are not particles, an address's house number and street,
  a PEM block's body lines).
- A code sample (:data:`CODE_TEXTS`, 26 texts: Python, JS, Go, Rust, SQL, shell, JSON, YAML,
  logs, stack traces, requirements.txt, git output, diffs) with the strings in each that are not
  PII and must come out unchanged; a few also hold labelled values (a git author and email,
  client IPs, a bearer token, a database URL, a .env file's password and key).

The scoring:

- End to end (:func:`score_end_to_end`): :func:`redact.pipeline.redact_trace` over the trace. A
  value is left when it occurs, not running into a letter or digit (:func:`value_pattern`), in
  any string of the output: every string of every body (and of the JSON inside tool-call
  arguments), every response, every other string column, the trace's metadata; and, JSON-escaped
  once or twice, in their serialized form. Recall
  of a type = share of its distinct values not left; strict recall also counts a value left when
  one of its identifying parts is (the floors in ``test_evalset.py`` apply to strict recall; it
  is recall wherever a type has no parts). Quarantined requests (the report's
  ``quarantine_reasons``) are counted; what they held is not written, so it is not left.
- Analyzer (:func:`score_analyzer`): :meth:`redact.analyzer.TextAnalyzer.analyze_batch` on each
  distinct text of the trace once; precision of a found type = share of its spans that overlap a
  labelled value (of any type) / all its spans; and, per labelled type, the share of its
  occurrences whose every non-space character lies in found spans (partial finds show here, not
  in whole-value recall).
- Over-redaction: the share of (code text, non-PII string) pairs whose string occurs fewer times
  in a redacted copy of the message holding the code than in the raw one (a message lost to the
  quarantine loses them all).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TYPES",
    "MIN_REQUESTS",
    "FIRST_NAME",
    "CODE_TEXTS",
    "Label",
    "CodeText",
    "EvalSet",
    "build_evalset",
    "value_pattern",
    "stored_text",
    "Scores",
    "score_end_to_end",
    "score_analyzer",
    "evaluate",
    "format_table",
]

MIN_REQUESTS = 150
FIRST_NAME = "PERSON (first name)"  # the report's key for single names standing alone
TYPES = (
    "PERSON",
    FIRST_NAME,
    "LOCATION",
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

# -- the values, typed by hand --------------------------------------------------------------------

FULL_NAMES = (
    "Oluwaseun Adeyemi",
    "Chiamaka Okafor",
    "Kwame Mensah-Bonsu",
    "Adaeze Nwachukwu",
    "Abena Owusu-Ansah",
    "Babajide Ogunleye",
    "Fatoumata Diallo",
    "Mamadou Ndiaye",
    "Priya Raghunathan",
    "Venkatesh Subramaniam",
    "Ananya Chatterjee",
    "Harpreet Kaur Dhillon",
    "Siddharth Kulkarni",
    "Lakshmi Narayanaswamy",
    "Zhao Yifei",
    "Guo Xiaoming",
    "Tang Jiayi",
    "Jiang Zhiqiang",
    "Deng Xinyue",
    "Xu Haoran",
    "Nguyễn Thị Lan",
    "Trần Văn Hùng",
    "Phạm Minh Châu",
    "Lê Quang Huy",
    "Đặng Thu Trang",
    "Ahmed Al-Mansouri",
    "Youssef El-Amrani",
    "Layla Haddad",
    "Khalid bin Rashid Al-Nuaimi",
    "Nour El-Din Saleh",
    "Rania Abu-Ghazaleh",
    "Małgorzata Wiśniewska",
    "Jiří Dvořák",
    "Snežana Petrović",
    "Oleksandr Shevchenko",
    "Katarzyna Zielińska",
    "Dmitriy Ovechkin",
    "María José Ibáñez",
    "Joaquín Castañeda-Ruiz",
    "Ximena Echeverría",
    "Guadalupe Ordóñez",
    "Rodrigo Villalobos Peña",
    "Sigríður Jónsdóttir",
    "Bjørn Kristoffersen",
    "Åsa Lindqvist",
    "Søren Kjærgaard",
    "Eero Mäkinen",
    "Takahashi Haruto",
    "Aiko Yamaguchi",
    "Inoue Sakura",
    "Kenji Watanabe",
    "Ryōta Matsumoto",
    "Siobhán Ní Bhriain",
    "Pádraig Ó Súilleabháin",
    "Anouk van den Broek",
    "Tsegaye Bekele",
    "Wanjiru Kamau",
    "Thandiwe Dlamini",
)
# words of a full name that name no one on their own
_PARTICLES = frozenset({"bin", "van", "den", "der", "de", "la", "del", "Thị", "Văn", "Ní", "Ó", "El-Din"})
# given names alone (some are also words of the full names above)
FIRST_NAMES = (
    "Kwame",
    "Priya",
    "Jun",
    "Ahmed",
    "Anouk",
    "Ngozi",
    "Tomasz",
    "Haruto",
    "Ifeoma",
    "Rohan",
    "Dagny",
    "Yusuf",
    "Thandiwe",
    "Oksana",
    "Emeka",
    "Mei",
    "Sunita",
    "Bartosz",
    "Aoife",
    "Farida",
    "Kofi",
    "Ingrid",
    "Lwazi",
    "Nilufar",
    "Tariq",
    "Signe",
)
# a title and a surname (the surname alone is labelled)
TITLED = (
    ("Ms", "Okafor"),
    ("Dr", "Dlamini"),
    ("Mr", "Hoang"),
    ("Mrs", "Sokolova"),
    ("Prof.", "Adebayo"),
    ("Dr.", "Rahimi"),
    ("Ms", "Zielińska"),
    ("Mr", "Nakamura"),
)
CITIES = (
    "Ouagadougou",
    "Thiruvananthapuram",
    "Chengdu",
    "Đà Nẵng",
    "Tromsø",
    "Wrocław",
    "Guadalajara",
    "Kumasi",
    "Asahikawa",
    "Ibadan",
    "Mysuru",
    "Plzeň",
    "Coimbra",
    "Valparaíso",
    "Tabriz",
)
# (address as written, its house number and street)
ADDRESSES = (
    ("4817 Larkspur Hollow Rd, Apt 3B, Bozeman, MT 59715", "4817 Larkspur Hollow Rd"),
    ("1290 Quillback Ave Suite 410, Tulsa, OK 74103", "1290 Quillback Ave"),
    ("77 Wrenfield Terrace Unit 12, Ashland, OR 97520", "77 Wrenfield Terrace"),
    ("Flat 2, 14 Cranbourne Gardens, Leeds LS6 2QT", "14 Cranbourne Gardens"),
    ("9 Ashgrove Close, Norwich NR4 7JS", "9 Ashgrove Close"),
    ("221 Pellow Street, Cardiff CF10 1EP", "221 Pellow Street"),
    ("Schönhauser Allee 144, 10435 Berlin", "Schönhauser Allee 144"),
    ("Lindenstraße 27a, 50674 Köln", "Lindenstraße 27a"),
    ("Am Klostergarten 5, 79098 Freiburg im Breisgau", "Am Klostergarten 5"),
    ("12 rue des Tanneurs, 67000 Strasbourg", "12 rue des Tanneurs"),
    ("48 boulevard de la Croix-Rousse, 69004 Lyon", "48 boulevard de la Croix-Rousse"),
    ("3 bis avenue Jean-Médecin, 06000 Nice", "3 bis avenue Jean-Médecin"),
    ("Calle de Alcalá 214, 3º B, 28028 Madrid", "Calle de Alcalá 214"),
    ("Carrer de Verdi 31, 08012 Barcelona", "Carrer de Verdi 31"),
    ("Avenida de la Constitución 18, 41004 Sevilla", "Avenida de la Constitución 18"),
    ("3-14-2 Kichijoji Honcho, Musashino-shi, Tokyo 180-0004", "3-14-2 Kichijoji Honcho"),
    ("Sakae 2-9-1, Naka-ku, Nagoya 460-0008", "Sakae 2-9-1"),
    ("〒150-0042 東京都渋谷区宇田川町12-3", "宇田川町12-3"),
    ("大阪府大阪市北区梅田1-8-17", "北区梅田1-8-17"),
    ("1875 rue Sherbrooke Ouest, Montréal, QC H3H 1E4", "1875 rue Sherbrooke Ouest"),
    ("402-88 Harbord St, Toronto, ON M5S 1G5", "402-88 Harbord St"),
    ("Unit 7, 1160 Pembina Hwy, Winnipeg, MB R3T 2A7", "1160 Pembina Hwy"),
    ("Unit 4/27 Wattle Grove Rd, Fremantle WA 6160", "27 Wattle Grove Rd"),
    ("88 Brunswick St, Fitzroy VIC 3065", "88 Brunswick St"),
    ("Suite 1203, 60 Margaret Street, Sydney NSW 2000", "60 Margaret Street"),
)
EMAILS = (
    "oluwaseun.adeyemi@payroll.example",
    "p.raghunathan@build01.internal",
    "nas-admin@storage.local",
    "kwame+invoices@homelab.lan",
    "oncall-dba@eu-west.acme.corp",
    "router-alerts@gateway.home.arpa",
    "qa.runner@ci.test",
    "j.dvorak@stavby-brno.cz",
    "lan.nguyen@congty-vantai.com.vn",
    "mj.ibanez@despacho-ibanez.es",
    "siobhan.nibhriain@ollscoil-eile.ie",
    "h.takahashi@dev.kaisha-tech.co.jp",
    "bjorn.k+alerts@mail.fjordkraft-test.no",
    "a.almansouri@treasury.gulf-holding.ae",
    "wanjiru.kamau@sacco-nairobi.co.ke",
    "xu.haoran@lab.sh-robotics.cn",
    "m.wisniewska@biuro.krakow-dev.pl",
    "tsegaye.b@addis-fintech.et",
    "ops+pager@monitoring.svc.cluster.local",
    "finance-team@corp.example",
    "thandiwe.d@joburg-legal.co.za",
    "o.shevchenko@kyiv-logistics.com.ua",
    "ximena.e+recibos@contadores.com.mx",
    "eero.makinen@tampere-soft.fi",
    "noreply-billing@billing.staging.internal",
)
PHONES = (
    # NANP: unassigned area codes (393, 379, 427, 553), every separator style, E.164, bare digits
    "(393) 814-2276",
    "379-402-1189",
    "427.618.3390",
    "553 207 4418",
    "+1 393 726 5501",
    "+1-379-884-2017",
    "1 (415) 867-2309",
    "+14158670391",
    "(646) 412-7789",
    "212.998.4410",
    "4158675512",
    "+1 (604) 718-2290",
    "1-833-204-7781",
    # E.164 of many countries (a Dutch mobile among them)
    "+44 7911 284630",
    "+49 1523 8841207",
    "+33 6 47 21 88 09",
    "+81 90-4417-2285",
    "+91 98450 17263",
    "+86 139 1027 5584",
    "+234 803 417 2290",
    "+55 11 97342-1186",
    "+7 916 204-33-71",
    "+52 55 4128 9073",
    "+63 917 884 2216",
    "+20 10 2284 6617",
    "+84 91 447 2839",
    "+98 912 608 4471",
    "+90 532 417 8823",
    "+66 81 733 2094",
    "+62 812-4471-0932",
    "+92 300 7714552",
    "+880 1712-884306",
    "+31 6 41 88 27 19",
    "+31 6 28471930",
    "+27 82 417 6630",
    "+254 712 448 019",
    "+971 50 418 2276",
    "+353 87 219 4483",
    "+61 412 884 207",
    "+48 601 447 218",
    "+34 612 48 77 31",
    "+39 347 118 2290",
    "+82 10-4417-2286",
    # national formats: India, China, Indonesia, Pakistan, Nigeria, Brazil, Bangladesh, Russia, Mexico,
    # Japan, Ethiopia, Philippines, Egypt, DR Congo, Vietnam, Iran, Turkey, Germany, Thailand, UK, France
    "094480 22715",
    "080-2657 4410",
    "139-1027-6631",
    "(010) 6552 9988",
    "0812-7733-4109",
    "(021) 5790 2231",
    "0300-4417285",
    "(042) 3571 2290",
    "0803 552 1947",
    "0809 118 4426",
    "(11) 98812-3307",
    "(21) 3321-4478",
    "01712-449031",
    "8 (916) 447-21-90",
    "8 495 228-17-44",
    "55 4127 8830",
    "(33) 3614 2297",
    "090-2271-8843",
    "03-5412-7790",
    "091 144 7720",
    "0917 552 1184",
    "(02) 8817 4420",
    "010 1447 2286",
    "02 2735 1184",
    "081 447 2219",
    "091 228 47 13",
    "028 3822 4471",
    "0912 447 1185",
    "021 8844 2279",
    "0532 447 12 90",
    "0212 244 87 13",
    "030 28471930",
    "0151 2284 7719",
    "(089) 4411 2290",
    "081-447-2293",
    "02-118-4470",
    "07911 447 120",
    "020 7946 0183",
    "0113 496 0712",
    "06 47 22 81 93",
    "01.44.27.19.83",
    "04-72-41-88-19",
    # invalid: a digit short, an unused prefix, a trunk 0 after the country code, an exchange starting 0
    "+44 7911 28463",
    "+91 54321 0987",
    "+49 030 2847193",
    "+1 (379) 088-1234",
)
CARDS = (  # Luhn-valid unless marked
    "4202 4441 8521 8672",
    "4264-2848-7826-0689",
    "5170709724494454",
    "5546 1162 1419 5244",
    "2231-4979-0190-7613",
    "3710 396723 66993",
    "6011274831208223",
    "3553 4339 1209 2531",
    "4549 8686 7525 5395",  # not Luhn-valid
    "5490-1987-0215-1706",  # not Luhn-valid
    "3629 084765 4808",
    "4280225179997",
    "6293 8498 0201 7684",
    "4419482856415971",  # not Luhn-valid
)
IBANS = (
    "DE95 0479 1714 7374 8347 76",
    "GB45-CACX-3415-5700-9878-85",
    "FR0398156570 91U961361334272",
    "ES20 0517 8292 3279 1687 1277",
    "NL70FXHL2968775996",
    "IT59 Y818 9553 9109 2160 1922 074",
    "BE16-7481-3854-2565",
    "CH24 9366 4589 2546 4113 7",
    "PL70 3021 8925 5686 8044 2051 5257",
    "SA9163380419229555372397",
    "AE50 5311 4320 9493 0982 033",
    "NO18 7763 7601 281",
    "TR05 6024 7303 1053 2922 5935 466",
    "PK48-KWEZ-5327-1009-7440-6323",
    "IE03 YIVQ 3780 3188 9078 99",
    "AT97 2320 2394 5100 4089",
    "SE63 9178 6220 8083 3492 7729",
    "DE44 5001 0517 5407 3249 31",  # check digits wrong
)
IPS = (
    "10.42.7.19",
    "192.168.178.23",
    "172.31.255.4",
    "203.0.113.77",
    "100.64.12.9",
    "198.51.100.214",
    "10.0.3.41",
    "84.17.220.5",
    "41.203.64.118",
    "145.118.44.20",
    "192.168.1.254",
    "62.210.91.7",
    "2001:0db8:4c2a:0010:0000:0000:0000:00f1",
    "fe80::1ff:fe23:4567:890a",
    "::1",
    "2a02:8109:9c40:1d00:5c3e:8aff:fe12:7b4d",
    "fd12:3456:789a:1::23",
    "2001:db8::8a2e:370:7334",
    "::ffff:10.9.8.7",
    "2606:4700:4400::ac40:9b2f",
)
SSNS = (
    "529-41-7736",
    "612-08-3391",
    "401-77-2948",
    "233-19-8804",
    "587-62-1140",
    "318-45-9027",
    "672-30-5518",
    "145-88-2063",
    "520 14 7739",
    "498-27-6615",
    "049-73-1182",
    "761-52-0394",
)
API_KEYS = (
    "sk-proj-sUDeg4V2Ew1GVSt9q9eNXw00ecbQzckfaFbwdPceHJDUbrmC_CJ3wCvgrAhFyqVmg50Bt",
    "sk-ant-api03-ISw5TLvqz01VPRcJtYu9h0H0N6jJRGLTHOvAxIIs-TaWvlo38Fu4xDi0ijXb8Y2qWo5fBKkAA",
    "ghp_8XvcWNSmsCxRwOVHceni3sYsxf5QaEe7z3Xx",
    "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",
    "AKIAUN63Q3ZY0NFCYIVL",
    "AIzam2hE6U1yOq_MArUaDKmVPURej7HpAZfdj16",
    "xoxb-323937751779-7892215258837-fqDZFHfpKFgWpCXGikofPbrL",
    "sk_live_E15JW7dP2XHBlxJX1Bmxzd5HgEJG1BQW",
    "hf_BxLu0LUBg6knsLXxcaQgffmUeqtLqwKrKx",
    "glpat-wwy22ecKgVFJIBNRMiRL",
    "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",
    "npm_NVUo7LhD3OP8nt9fQcx5AP9VpJyEEQ9js8E9",
    "dop_v1_2a3b1dfb585206ef674ee8002945647fc694229dc9b48346ab6a9be369480236",
    "sk-QLt5nAo2hMBRCTyUANbKGta9wGPhTqdhJvqDi9Db9iSb9LcH",
    "rk_test_WMaVfdHOD1eo3plezMtmb7dr",
)
JWTS = (
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIwOTk4NzAwNSIsImlhdCI6MTczMzUyMjY3OSwic2NvcGUiOiJhZG1pbiJ9."
    "wyMq9c7glQntBBklP2QOzq77e-6jlOBzcFunyTfzQlwwlZr3EczdPAjuKvNIW5iDploQGvXYw19D6I3Ahn4UzA",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIzODIzOTU4NiIsImlhdCI6MTczMzM2ODQ4MCwic2NvcGUiOiJiaWxsaW5nOn"
    "dyaXRlIn0.3eNxRlz5oA8ACfyQL_k20SbG2K7w3B4oy58DZfObTs8",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIyODYxMDk4OSIsImlhdCI6MTczMzAxMzY2OCwic2NvcGUiOiJyZWFkIn0."
    "5gXrGqvibi-mQkKWVyVj6TdF5TQSPe7HzSm4J692rFc",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI2NTY3MzA2OCIsImlhdCI6MTczMzgxMDc5OSwic2NvcGUiOiJiaWxsaW5nOn"
    "dyaXRlIn0.GH2nT639e5N-5IEbeYyMPN49naopAvi9Sp2J9UvT3xA",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxNTYxODE4MCIsImlhdCI6MTczMzgzOTUxOCwic2NvcGUiOiJiaWxsaW5nOn"
    "dyaXRlIn0.mZ4jYawC2VKoK7L0YT4ns9dI2HGK7zJzB5gIkTbs-bxfUulvoByljO7U-JgmgSTCrEeNrcCBaOKkkYURDPfl0Q",
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJzdWIiOiI1ODE3MDM3MiIsImlhdCI6MTczMzgwMzY5MCwic2NvcGUiOiJhZG1pbiJ9."
    "qGZWtcbZ8R203H0pG1QHAKM4vPL6oG1VRnSF7kKY9oL7pY0p0Gqvk3YHzlWY_rKOzQYirCo0iHiJJxuXoXqKwA",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxOTA4NTMyNCIsImlhdCI6MTczMzYzODYzMiwic2NvcGUiOiJyZWFkIn0."
    "5UNOwSodzU2H4XDp4A9mbQOIRS9prQUno0v1iZnjy99MPHD7PsUPCpIOzlQ2W7wnBuhBQdGpAcP7jPe71NvDpQ",
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJzdWIiOiI4MTU1NDM4NCIsImlhdCI6MTczMzA5Mjg3MCwic2NvcGUiOiJyZWFkIn0."
    "HHy_G3OnQa9KAdRtmZsPgvSkgWOshA9MlQL_h-BQ-IrYd4tU2msA8tvaivOs7nxC",
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJzdWIiOiI5MjUzMjE2NiIsImlhdCI6MTczMzQwODMzMCwic2NvcGUiOiJhZG1pbiJ9."
    "2XC9PrHF5cfl6vVnsxzs78ev37DLwFkwgzXMJjVYaRA",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIyNjkxMjUzNyIsImlhdCI6MTczMzMwODg3OSwic2NvcGUiOiJiaWxsaW5nOn"
    "dyaXRlIn0.6FoCEhssF0VUyEnZjZtdRl-u9bKBSxgn2xDncerEyXpxMux9vNWhcG53-wJ8fY3D",
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxOTgwNDcxMiIsImlhdCI6MTczMzk2NzE4MSwic2NvcGUiOiJhZG1pbiJ9."
    "Rtr0SnFujld4W4PbACN3d6Zh-YAjilk1-TkSL9IAMQ2Mh0JHrvFa6C9QQeqj67mYQuEu4jd29AO4MTcq2po_AQ",
)
PEM_KEYS = (
    "-----BEGIN RSA PRIVATE KEY-----\nrDcgLWdejP98m+429YdiI7ofqp/fnqa79b99bSpA9OZxWZUqSsST8KwYJClYw9Vg\n"
    "HOkQftdeP2b+0UaEHcwXowQXsr5sLqUiBGn/QgHy4PSKepEJvP8mguGuND5EQQyO\n"
    "yIdLSUdPcU008YGTs4lrg+zbgY7n52pSHNUsa6rJjNDXGvhC9duTiv8BgNGtYyyK\nmXJfne8Yv1Yk+sD/WOwc+kRHa/Hp5==\n"
    "-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\noxOxhgLl73q559P+BNsPzrYSeA6hWvw8kpIpuTVTDGAn/56bnCQ0ewudwqoCNFt/\n"
    "SRTV0KK1VDtUuq0VMQYnKXA0GzN+FFAqF8eoXMqUGMn7z0rJxWbGorKpOm+m21fk\n"
    "I5uJvPylsjJpMCCQHekQS09zCyuM07GNHpP1AWB7ccOtT2FADagSIg9VXDWqnzbn\n"
    "EzgZqw8kcdZBPVl3yakU7Czg5xCl4ZVE4EaJZKYSq0xnfMtkxlZ+rJHxc66fpKN7\nI01vuJZCgkN4AqQ5xg1r4LKDz5==\n"
    "-----END PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----\nY/SyN8E20LlWZzyx/neMnqMyKiJvtTiDKxY7Q9Z97DeAC/sXGDfOwl6fPhGht7XH\n"
    "2Jvpi1aQb+BpCchM3GL3EatEkoeWOd9NnbQPYm1LRGWebSJ3OAkod9SAAkJkz+dK\nkADsg40PCK5jakXmDNiR4hYVR0ZfBZHytPWIO==\n"
    "-----END EC PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\n7U6ITaZIumJbFdeUwS6wgTCe3AcQ3N9fKoHwEt36wZ8CnurthVTRJoyzCMFkx9FY\n"
    "+uAoU02yrvmHQn/kBhQX7F1v+3LSGC4m2l1ikllH87AQMcGpkmjHESgYNhrhS1pC\n"
    "qpX1GnRa+9Gp0KG62m7rEouuOwsuWU3p9Q5VLmjnoiPYoQnzu0xNq08+FkGfa+N7\n6rRaC9pG9qmyV7EgMU+lMjqZqAMyP0KOmqmL==\n"
    "-----END OPENSSH PRIVATE KEY-----",
)
BEARER_TOKENS = (
    "e1b6b1404961a22692b7aed662650f3589856804",
    "ya29.a0Et0h1Vde4uBJu4g1ncPBMDl_jAqmDJGLhMUHKmafXK3-3kNsJB1B1zcWGebP",
    "Ti02B37unbBcm5VhsxIXSD6J7dqAWGj4.1vLc1pyNpSxA",
    "e4f5da8f7862415829a791a75b3af1e968c6f4d6",
    "ya29.a0RWlnoq82YeLwCG909eOxLM7Dc_D4FtEVViFjg_Y69O9nBWuhCEfHXnkdtbZi",
    "KJCo9yeOfRJ5ofIZ3QQFqQVH3dZWZ0kK.TFKTLJCqeqpj",
    "1a36e776e0013478cd5e2dbb5bb63c2ad5caf9de",
    "ya29.a0e360bGYgtaiBl2GR1F35l5ADHN0V3IN_SrMhZcYT7tG6EjUJ7R-YQAuk-lSk",
    "U85jet2cWq4srO3MZKS0oimGckfjLFMG.qrBg2vkkZnLG",
    "3367592055829ed0cdc29be0f51500c21a9018b2",
    "ya29.a0EIAyw_JiEqZDHhZgfBgIfk6tJNTKTYR2QEWAOwKdrfWElQ0U3I5XqapEjUTA",
    "CDpIgIIQrl82ENENkT4RcPTvCM3HUq4U.eOTkh4oTReU9",
)
# (connection URL with {} where its password goes, the password)
URL_PASSWORDS = (
    ("postgres://app_rw:{}@db-primary.prod.internal:5432/orders", "Hk4vR9wLp2Qz"),
    ("mysql://report:{}@mysql.analytics.corp:3306/bi", "s3cr3t-Bambara-88"),
    ("redis://default:{}@cache.lan:6379/0", "oyster-kettle-1947"),
    ("amqp://ingest:{}@rabbit.queue.internal:5672/%2F", "Tz8mW3qLx0"),
    ("mongodb+srv://svc_reader:{}@cluster0.mongo.example/test", "Sm0kyQuartz2024"),
    ("https://deploy:{}@git.acme.corp/platform/infra.git", "ghq-7h2k-PLmw"),
    ("ftp://uploader:{}@files.partner.example:2121/inbox", "Maputo#2291"),
    ("smtp://alerts:{}@mail.relay.local:587", "winter-Lagoon-58"),
    ("postgresql://analytics:{}@warehouse.home.arpa/dwh", "T4rq!Palm99"),
    ("sftp://backup:{}@nas.lan:22/volume1", "Kilimanjaro_0417"),
    ("http://admin:{}@router.lan/cgi-bin/status", "Fritz-7490-Hx"),
    ("clickhouse://etl:{}@ch.metrics.internal:9000/default", "ZebraCrossing!31"),
)
# secrets that words or a variable's name introduce
PASSWORDS = (
    "Blåbær-Kaffe-2023",
    "Qx8#vLm2!pRt",
    "mango-Tulip-8812",
    "884213",
    "Hw9Zt2Lq",
    "sunrise@Accra77",
    "P4ssphrase-Oslo-19",
    "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "rT5-kM8-pQ2-wX7",
    "Correct-Lantern-41",
    "v3ry-l0ng-s3ss10n-k3y-4-prod",
    "Nk2!Yb7@Wq",
    "tq_live_4PZ8mKc2Rw9Xv",
    "Hummingbird#2290",
    "letmein-Kyoto-88",
    "x9K2mQ7vB4nL",
    "Sapporo.Snow.3321",
    "0p3nSesame!Dhaka",
    "cobalt-River-62",
    "Zz7&Gh3*Lk",
)

# -- the code sample ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeText:
    """A code-heavy text and the strings in it that are not PII. ``«type»`` marks a slot that a
    labelled value of that type fills (a git author, a client IP, a secret in a .env file)."""

    text: str
    keep: tuple[str, ...]


CODE_TEXTS = (
    CodeText(
        """import logging
from dataclasses import dataclass

logger = logging.getLogger("billing.invoices")


@dataclass
class InvoiceLine:
    sku: str
    quantity: int
    unit_price_cents: int


def total_cents(lines: list[InvoiceLine]) -> int:
    return sum(line.quantity * line.unit_price_cents for line in lines)


def get_user_email(user_id: int) -> str:
    row = db.fetch_one("SELECT email FROM users WHERE id = %s", (user_id,))
    return row["email"]""",
        ("InvoiceLine", "unit_price_cents", "get_user_email", "billing.invoices", "total_cents", "user_id", "db.fetch_one"),
    ),
    CodeText(
        """const API_BASE = "https://api.internal.example.net/v2";

export async function loadOrders(customerId, { page = 1, pageSize = 50 } = {}) {
  const res = await fetch(`${API_BASE}/customers/${customerId}/orders?page=${page}&page_size=${pageSize}`, {
    headers: { "Accept": "application/json", "X-Request-Id": "7c9e6679-7425-40de-944b-e07fc1f90ae7" },
  });
  if (!res.ok) throw new Error(`orders: HTTP ${res.status}`);
  return res.json();
}""",
        (
            "https://api.internal.example.net/v2",
            "loadOrders",
            "customerId",
            "pageSize",
            "X-Request-Id",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "application/json",
        ),
    ),
    CodeText(
        """SELECT o.order_id, o.created_at, c.country_code, SUM(li.amount_cents) AS total_cents
FROM orders o
JOIN customers c ON c.customer_id = o.customer_id
JOIN line_items li ON li.order_id = o.order_id
WHERE o.created_at >= '2024-03-01' AND o.status IN ('paid', 'shipped')
GROUP BY 1, 2, 3
HAVING SUM(li.amount_cents) > 100000
ORDER BY total_cents DESC
LIMIT 20;""",
        ("order_id", "customer_id", "'2024-03-01'", "amount_cents", "line_items", "country_code", "100000"),
    ),
    CodeText(
        """$ python3 --version
Python 3.11.7
$ pip install "fastapi==0.110.0" "uvicorn[standard]>=0.27.1"
$ uvicorn app.main:app --host localhost --port 8443 --workers 4
INFO:     Started server process [48213]
INFO:     Waiting for application startup.
INFO:     Uvicorn running on http://localhost:8443 (Press CTRL+C to quit)""",
        ("3.11.7", "fastapi==0.110.0", "0.27.1", "app.main:app", "--port 8443", "[48213]", "http://localhost:8443"),
    ),
    CodeText(
        """{
  "service": "ledger-sync",
  "version": "v2.10.0",
  "listen_port": 9091,
  "retry": {"max_attempts": 5, "backoff_ms": 250},
  "features": {"dedupe_by_idempotency_key": true},
  "schedule": "0 */6 * * *",
  "build_sha": "9fceb02d0ae598e95dc970b74767f19372d61af8"
}""",
        (
            '"ledger-sync"',
            '"v2.10.0"',
            '"listen_port": 9091',
            '"max_attempts"',
            '"backoff_ms"',
            '"dedupe_by_idempotency_key"',
            "9fceb02d0ae598e95dc970b74767f19372d61af8",
            '"0 */6 * * *"',
        ),
    ),
    CodeText(
        """2024-11-07T14:03:22.118Z INFO  worker-3 job=reindex shard=12 took_ms=842
2024-11-07T14:03:22.904Z WARN  worker-1 retrying request_id=5f0c2a9e-1b7d-4c3e-9a55-0d2f8e6b7c41 attempt=2
2024-11-07T14:03:23.377Z ERROR worker-1 upstream timeout after 30000ms url=https://search.example.org/_bulk
ts=1730988203 level=info msg="flush complete" segments=48 bytes=73400320""",
        (
            "2024-11-07T14:03:22.118Z",
            "5f0c2a9e-1b7d-4c3e-9a55-0d2f8e6b7c41",
            "ts=1730988203",
            "bytes=73400320",
            "https://search.example.org/_bulk",
            "took_ms=842",
            "2024-11-07T14:03:23.377Z",
        ),
    ),
    CodeText(
        """Traceback (most recent call last):
  File "/srv/app/venv/lib/python3.11/site-packages/httpx/_transports/default.py", line 69, in map_httpcore_exceptions
    yield
  File "/srv/app/orders/sync.py", line 214, in push_batch
    resp.raise_for_status()
httpx.HTTPStatusError: Server error '503 Service Unavailable' for url 'https://partners.example.com/api/v1/orders/batch'""",
        (
            "map_httpcore_exceptions",
            "push_batch",
            "raise_for_status",
            '"/srv/app/orders/sync.py", line 214',
            "httpx.HTTPStatusError",
            "https://partners.example.com/api/v1/orders/batch",
            "/srv/app/venv/lib/python3.11/site-packages/httpx/_transports/default.py",
        ),
    ),
    CodeText(
        """numpy==1.26.4
pandas==2.2.1
pydantic>=2.6,<3
requests==2.31.0
SQLAlchemy==2.0.28
torch==2.2.1+cu121
-e git+https://github.com/acme-labs/tinyqueue.git@3e1f9c7b2d4a5e6f708192a3b4c5d6e7f8091a2b#egg=tinyqueue""",
        (
            "numpy==1.26.4",
            "pandas==2.2.1",
            "requests==2.31.0",
            "SQLAlchemy==2.0.28",
            "torch==2.2.1+cu121",
            "3e1f9c7b2d4a5e6f708192a3b4c5d6e7f8091a2b",
            "git+https://github.com/acme-labs/tinyqueue.git",
        ),
    ),
    CodeText(
        """$ git log --oneline -3
a1b2c3d (HEAD -> main, origin/main) Bump tokenizers to 0.15.2
e4f5a6b Fix off-by-one in RingBuffer.pop_front
0c9d8e7 Merge pull request #4182 from acme-labs/fix-flaky-retry
$ git show --stat 9c1d4e2
commit 9c1d4e2f7a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d
Author: «PERSON» <«EMAIL_ADDRESS»>
Date:   Tue Mar 12 09:41:07 2024 +0100

    Retry idempotent PUTs on 502 and 503

 src/http/retry.py | 14 +++++++++-----""",
        (
            "a1b2c3d",
            "e4f5a6b",
            "RingBuffer.pop_front",
            "0.15.2",
            "#4182",
            "9c1d4e2f7a8b6c5d4e3f2a1b0c9d8e7f6a5b4c3d",
            "09:41:07",
            "src/http/retry.py",
        ),
    ),
    CodeText(
        """services:
  api:
    image: ghcr.io/acme-labs/api:1.8.3
    ports: ["8080:8080"]
    environment:
      LOG_LEVEL: debug
      DATABASE_URL: «URL_PASSWORD»
      REDIS_URL: redis://cache:6379/0
  db:
    image: postgres:16.2""",
        (
            "ghcr.io/acme-labs/api:1.8.3",
            "LOG_LEVEL: debug",
            "redis://cache:6379/0",
            "postgres:16.2",
            "DATABASE_URL",
            '"8080:8080"',
        ),
    ),
    CodeText(
        """func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"status":   "ok",
		"uptime_s": time.Since(s.started).Seconds(),
		"build":    buildVersion,
	})
}""",
        ("handleHealth", "http.ResponseWriter", '"Content-Type"', '"uptime_s"', "buildVersion", "s.started"),
    ),
    CodeText(
        """#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 3, base_delay_ms: 200 }
    }
}""",
        ("RetryPolicy", "max_retries", "base_delay_ms", "PartialEq", "impl Default for RetryPolicy"),
    ),
    CodeText(
        """$ kubectl get pods -n payments
NAME                          READY   STATUS    RESTARTS   AGE
api-7d9f8b6c5d-x2k4p          1/1     Running   0          3d4h
worker-5c6b7d8e9f-q8w7e       1/1     Running   2          3d4h
migrate-28519440-zt9kd        0/1     Completed 0          41m""",
        ("api-7d9f8b6c5d-x2k4p", "worker-5c6b7d8e9f-q8w7e", "migrate-28519440-zt9kd", "3d4h", "-n payments"),
    ),
    CodeText(
        """POST /v1/payments HTTP/1.1
Host: pay.example.com
Authorization: Bearer «BEARER_TOKEN»
Content-Type: application/json
Idempotency-Key: 3f2b8c1e-6d4a-4e9b-8f7c-2a1d0e9b8c7d

{"amount": 4599, "currency": "EUR", "order_ref": "ORD-2024-118734"}""",
        (
            "/v1/payments",
            "Idempotency-Key",
            "3f2b8c1e-6d4a-4e9b-8f7c-2a1d0e9b8c7d",
            "ORD-2024-118734",
            '"amount": 4599',
            "pay.example.com",
        ),
    ),
    CodeText(
        """order_no,placed_at_epoch,sku,qty,unit_price
100482913,1709251200,SKU-AX-2231,2,19.99
100482914,1709254800,SKU-BQ-0457,1,249.00
100482915,1709258400,SKU-AX-2231,5,19.99""",
        (
            "100482913",
            "1709251200",
            "SKU-AX-2231",
            "100482914,1709254800",
            "SKU-BQ-0457",
            "1709258400",
            "order_no,placed_at_epoch,sku,qty,unit_price",
        ),
    ),
    CodeText(
        """@pytest.mark.parametrize("raw, expected", [
    ("1.2.3", (1, 2, 3)),
    ("v2.10.0", (2, 10, 0)),
    ("3.11.7", (3, 11, 7)),
])
def test_parse_version(raw, expected):
    assert parse_version(raw) == expected""",
        ('"1.2.3"', '"v2.10.0"', '"3.11.7"', "test_parse_version", "parse_version(raw)"),
    ),
    CodeText(
        """{"name": "@acme/web-console", "version": "4.3.0-beta.2",
 "scripts": {"build": "vite build", "test": "vitest run"},
 "dependencies": {"react": "^18.2.0", "zod": "3.22.4"},
 "engines": {"node": ">=20.11.1"}}""",
        ('"@acme/web-console"', '"4.3.0-beta.2"', '"^18.2.0"', '"3.22.4"', '">=20.11.1"', '"vitest run"'),
    ),
    CodeText(
        """«IP_ADDRESS» - - [12/Mar/2024:09:41:07 +0000] "GET /api/v1/status?verbose=1 HTTP/1.1" 200 512 "-" "curl/8.4.0" rt=0.004
«IP_ADDRESS» - - [12/Mar/2024:09:41:09 +0000] "POST /api/v1/jobs HTTP/1.1" 201 88 "-" "python-requests/2.31.0" rt=0.131""",
        (
            "[12/Mar/2024:09:41:07 +0000]",
            "/api/v1/status?verbose=1",
            "curl/8.4.0",
            "rt=0.004",
            "python-requests/2.31.0",
            "/api/v1/jobs",
        ),
    ),
    CodeText(
        """java.lang.IllegalStateException: Cursor window full (rows=4096)
	at com.acme.store.CursorPager.next(CursorPager.java:118)
	at com.acme.store.ExportJob.run(ExportJob.java:77)
	at java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1136)""",
        (
            "java.lang.IllegalStateException",
            "com.acme.store.CursorPager.next",
            "CursorPager.java:118",
            "ExportJob.java:77",
            "ThreadPoolExecutor.java:1136",
            "rows=4096",
        ),
    ),
    CodeText(
        """APP_ENV=staging
APP_PORT=8000
LOG_FORMAT=json
DB_HOST=db.staging.internal
DB_USER=app_rw
DB_PASSWORD=«PASSWORD»
OPENAI_API_KEY=«API_KEY»
FEATURE_FLAGS=search_v2,new_checkout""",
        (
            "APP_ENV=staging",
            "APP_PORT=8000",
            "LOG_FORMAT=json",
            "DB_HOST=db.staging.internal",
            "DB_USER=app_rw",
            "FEATURE_FLAGS=search_v2,new_checkout",
        ),
    ),
    CodeText(
        """resource "aws_s3_bucket" "artifacts" {
  bucket = "acme-build-artifacts-eu-west-1"
  tags = {
    team        = "platform"
    cost_center = "cc-4410"
  }
}""",
        ('"aws_s3_bucket"', '"acme-build-artifacts-eu-west-1"', '"cc-4410"', "cost_center"),
    ),
    CodeText(
        """from datetime import datetime, timezone
import uuid

RUN_ID = uuid.UUID("c0a80164-3b2a-4f1e-9d8c-7b6a5f4e3d2c")
CUTOFF = datetime(2023, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
print(f"{RUN_ID} cutoff={CUTOFF.isoformat()} sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")""",
        (
            "c0a80164-3b2a-4f1e-9d8c-7b6a5f4e3d2c",
            "datetime(2023, 12, 31, 23, 59, 59",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "RUN_ID",
            "CUTOFF.isoformat()",
        ),
    ),
    CodeText(
        """+----------+---------------------+------------+
| job_id   | started_at          | duration_s |
+----------+---------------------+------------+
| 88120457 | 2024-02-29 03:15:00 |       1834 |
| 88120458 | 2024-02-29 03:45:00 |         92 |
+----------+---------------------+------------+
2 rows in set (0.01 sec)""",
        ("88120457", "2024-02-29 03:15:00", "88120458", "2024-02-29 03:45:00", "duration_s"),
    ),
    CodeText(
        """$ curl -s http://localhost:9200/_cluster/health | jq .status
"green"
$ docker run -d -p 5432:5432 -e POSTGRES_DB=analytics postgres:15.6-alpine
3b5d0f7e9a1c2e4f6a8b0c1d3e5f7a9b1c3d5e7f9a0b2c4d6e8f0a1b3c5d7e9f""",
        (
            "http://localhost:9200/_cluster/health",
            "5432:5432",
            "POSTGRES_DB=analytics",
            "postgres:15.6-alpine",
            "3b5d0f7e9a1c2e4f6a8b0c1d3e5f7a9b1c3d5e7f9a0b2c4d6e8f0a1b3c5d7e9f",
        ),
    ),
    CodeText(
        """# TODO(ops): rotate the relay credentials before 2025-01-15; questions to «EMAIL_ADDRESS»
SMTP_HOST = "smtp.relay.internal"
SMTP_PORT = 587
SMTP_TIMEOUT_S = 12.5
MAX_RECIPIENTS_PER_BATCH = 250""",
        ('"smtp.relay.internal"', "SMTP_PORT = 587", "2025-01-15", "SMTP_TIMEOUT_S = 12.5", "MAX_RECIPIENTS_PER_BATCH = 250"),
    ),
    CodeText(
        """diff --git a/src/cache.py b/src/cache.py
index 3f4e5d6..7a8b9c0 100644
--- a/src/cache.py
+++ b/src/cache.py
@@ -41,7 +41,7 @@ class LruCache:
     def __init__(self) -> None:
-        self.max_items = 1024
+        self.max_items = 4096
         self._hits = 0""",
        ("3f4e5d6..7a8b9c0", "@@ -41,7 +41,7 @@", "LruCache", "self.max_items = 4096", "self.max_items = 1024", "src/cache.py"),
    ),
)

# -- the labels and the builder -------------------------------------------------------------------


@dataclass(frozen=True)
class Label:
    """One distinct PII value of the set."""

    value: str
    entity: str  # a type of TYPES (PERSON also for single names)
    first_name: bool = False  # a single name standing alone (a first name, or a surname after a title)
    parts: tuple[str, ...] = ()  # identifying pieces: each one left counts as the value left (strict recall)

    @property
    def kind(self) -> str:
        """The type the report counts it under."""
        return FIRST_NAME if self.first_name else self.entity


def _name_parts(name: str) -> tuple[str, ...]:
    return tuple(w for w in name.split() if len(w) >= 3 and w not in _PARTICLES)


def _pem_parts(pem: str) -> tuple[str, ...]:
    return tuple(line for line in pem.splitlines() if not line.startswith("-----"))


_POOLS: dict[str, tuple] = {
    "PERSON": FULL_NAMES,
    "FIRST": FIRST_NAMES,
    "TITLED": TITLED,
    "LOCATION": CITIES,
    "STREET_ADDRESS": ADDRESSES,
    "EMAIL_ADDRESS": EMAILS,
    "PHONE_NUMBER": PHONES,
    "CREDIT_CARD": CARDS,
    "IBAN_CODE": IBANS,
    "IP_ADDRESS": IPS,
    "US_SSN": SSNS,
    "API_KEY": API_KEYS,
    "JWT": JWTS,
    "PRIVATE_KEY": PEM_KEYS,
    "BEARER_TOKEN": BEARER_TOKENS,
    "URL_PASSWORD": URL_PASSWORDS,
    "PASSWORD": PASSWORDS,
}
_TOOLS = {
    "update_contact": "Update a customer's contact details.",
    "check_db": "Try a database connection and return the server's answer.",
    "set_secret": "Store a secret in the team vault.",
    "issue_refund": "Refund a card payment to a bank account.",
    "run_ssh": "Run a read-only command on a host.",
    "save_contacts": "Save contacts to the CRM.",
    "create_shipment": "Create a shipment and return its tracking number.",
    "create_employee": "Create an employee record in the HR system.",
    "book_trip": "Book a flight and a hotel.",
}
_SYSTEM = {
    "support": "You are the support assistant of an online store. Be brief and friendly. Never ask for card numbers in chat.",
    "writing": "You help people write clear, short emails. Keep the author's voice.",
    "dev": "You are a senior engineer helping with debugging. Answer with concrete steps and code.",
    "ops": "You are an SRE assistant with tools to inspect hosts. Prefer read-only commands.",
    "assistant": "You are a helpful assistant.",
    "hr": "You are the HR operations assistant. Create records exactly as given.",
}
_SECRET_INTROS = (
    "my password is {}",
    "the password is {}",
    "pw: {}",
    "passcode {}",
    "password: {}",
    "secret: {}",
    "token={}",
    "api key: {}",
    "PIN and passcode: {}",
    "the login is admin / {}",
)
T0_US = 1_733_140_800_000_000


class _Builder:
    """Values drawn in a seeded order (each pool exhausted before any value repeats), their labels,
    and the requests of the chats made from them."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.pools = {kind: self.rng.sample(values, len(values)) for kind, values in _POOLS.items()}
        self.drawn = Counter()
        self.labels: dict[str, Label] = {}
        self.records: list[Any] = []
        self.code: list[tuple[str, CodeText]] = []
        self.now_us = T0_US

    def exhausted(self) -> bool:
        return all(self.drawn[kind] >= len(pool) for kind, pool in self.pools.items())

    def _label(self, label: Label) -> None:
        old = self.labels.setdefault(label.value, label)
        if old != label:
            raise ValueError(f"evalset: {label.value!r} labelled twice ({old.kind}, {label.kind})")

    def take(self, kind: str) -> Any:
        pool = self.pools[kind]
        value = pool[self.drawn[kind] % len(pool)]
        self.drawn[kind] += 1
        if kind == "PERSON":
            self._label(Label(value, "PERSON", parts=_name_parts(value)))
        elif kind == "FIRST":
            self._label(Label(value, "PERSON", first_name=True))
        elif kind == "TITLED":
            self._label(Label(value[1], "PERSON", first_name=True))
            return f"{value[0]} {value[1]}"
        elif kind == "STREET_ADDRESS":
            self._label(Label(value[0], kind, parts=(value[1],)))
            return value[0]
        elif kind == "URL_PASSWORD":
            self._label(Label(value[1], kind))
            return value[0].format(value[1]), value[1]
        elif kind == "PRIVATE_KEY":
            self._label(Label(value, kind, parts=_pem_parts(value)))
        else:
            self._label(Label(value, kind))
        return value

    def takes(self, kind: str, n: int) -> list[Any]:
        return [self.take(kind) for _ in range(n)]

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def chat(self, system: str, tools: tuple[str, ...] = (), **fields: Any) -> _Chat:
        self.now_us += self.rng.randint(5, 90) * 1_000_000
        return _Chat(self, _SYSTEM[system], tools, fields)

    def send(self, body: dict, response: str | None) -> None:
        from capture.importers.records import LogRecord

        self.now_us += self.rng.randint(2, 40) * 1_000_000
        self.records.append(
            LogRecord(
                arrival_us=self.now_us,
                api="chat",
                model=body["model"],
                body=body,
                request_id=f"ev{len(self.records):04d}",
                response=response,
            )
        )


class _Chat:
    """One chat session: each turn sends the whole conversation so far (and, for a tool call,
    first the request that asks for it, with no recorded answer)."""

    def __init__(self, b: _Builder, system: str, tools: tuple[str, ...], fields: dict[str, Any]):
        self.b = b
        self.messages: list[dict] = [{"role": "system", "content": system}]
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": _TOOLS[name],
                    "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
                },
            }
            for name in tools
        ]
        self.fields = fields

    def _send(self, response: str | None) -> None:
        body: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "messages": json.loads(json.dumps(self.messages)),
            "max_tokens": 400,
            "temperature": 0.3,
        }
        if self.tools:
            body["tools"] = self.tools
        body.update(self.fields)
        self.b.send(body, response)

    def turn(self, text: str, answer: str, tool: tuple[str, dict, str] | None = None) -> None:
        self.messages.append({"role": "user", "content": text})
        if tool is not None:
            name, args, result = tool
            self._send(None)
            call_id = f"call_{len(self.b.records):04d}"
            self.messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                        }
                    ],
                }
            )
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        self._send(answer)
        self.messages.append({"role": "assistant", "content": answer})


# -- the scenarios --------------------------------------------------------------------------------


def _support(b: _Builder) -> None:
    name, addr, email, city = b.take("PERSON"), b.take("STREET_ADDRESS"), b.take("EMAIL_ADDRESS"), b.take("LOCATION")
    phone, phone2 = b.takes("PHONE_NUMBER", 2)
    fields: dict[str, Any] = {"user": email} if b.rng.random() < 0.5 else {"metadata": {"customer_name": name, "channel": "web"}}
    c = b.chat("support", ("update_contact",), **fields)
    c.turn(
        b.pick(
            f"Hi, I'm {name}. I moved and need my shipping address changed to {addr}. The account email is {email}.",
            f"hello, this is {name} ({email}). Please send future orders to {addr} instead of the old place.",
        ),
        f"Thanks, {name}. I can update the address to {addr}. Could you confirm the phone number on the account?",
    )
    c.turn(
        f"Sure, it's {phone}. When I'm travelling I'm on {phone2}.",
        f"Done: the profile now lists {phone} (alternate {phone2}) and {addr}. Ticket CS-48812.",
        (
            "update_contact",
            {"customer": name, "email": email, "phone": phone, "alt_phone": phone2, "address": addr},
            '{"status": "ok", "ticket": "CS-48812"}',
        ),
    )
    if b.rng.random() < 0.5:
        ssn = b.take("US_SSN")
        c.turn(
            f"For the verification step they asked for my SSN: {ssn}. The old address was in {city}.",
            f"Thanks. Please don't send your SSN in chat; I have not stored {ssn}. The {city} address is removed.",
        )
    else:
        c.turn(
            f"Great, thanks! The old address was in {city}, in case the courier asks.",
            f"Noted: the old address was in {city}. Anything else I can help with?",
        )


def _email_draft(b: _Builder) -> None:
    f1, f2, f3, f4, f5 = b.takes("FIRST", 5)
    titled, city, email = b.take("TITLED"), b.take("LOCATION"), b.take("EMAIL_ADDRESS")
    greet = b.pick(f"Hi {f1},", f"Hello {f1}!", f"Hey {f1} -", f"Dear {f1},")
    sign = b.pick(f"Thanks, {f5}", f"Thanks,\n{f5}", f"Cheers,\n{f5}", f"Best regards,\n{f5}", f"Regards, {f5}")
    c = b.chat("writing")
    c.turn(
        f"Can you tighten this email?\n\n{greet}\n\nThe Q3 numbers are attached. {f2}'s report has the regional "
        f"split and there is a note from {f3} on freight costs, which went up again this quarter because of the "
        f"port delays.\ncc: {f4}\n\n{sign}",
        f"Here's a tighter version:\n\n{greet}\n\nQ3 numbers attached; {f2}'s report has the regional split, and "
        f"the note from {f3} covers freight (up again, port delays).\n\n{sign}",
    )
    c.turn(
        f"Good. Now a formal version for {titled}, and say the {city} office closes early on Friday. It goes to {email}.",
        f"Dear {titled},\n\nPlease find the Q3 figures attached. {f2}'s report sets out the regional split. "
        f"Please note that the {city} office closes early on Friday.\n\nKind regards,\n{f5}\n\n(To: {email})",
    )
    if b.rng.random() < 0.5:
        c.turn(
            f"And a one-line reply to this:\n\n> Hi {f5}, could you send the slides before Thursday? Thanks, {f2}",
            f"Hi {f2}, sure, the slides will be with you by Wednesday evening. Thanks, {f5}",
        )


def _db_debug(b: _Builder) -> None:
    (url, pw), new_pw, ip = b.take("URL_PASSWORD"), b.take("PASSWORD"), b.take("IP_ADDRESS")
    c = b.chat("dev", ("check_db",))
    c.turn(
        b.pick(
            f"My service can't reach the database. DATABASE_URL is {url}\nI typed the password {pw} by hand "
            f"in the client too and got 'password authentication failed'.",
            f"Connection string: {url} - it fails, and logging in by hand with {pw} fails as well. Why?",
        ),
        f"If the client rejects {pw} as well, the role's password on the server differs from the one in the "
        f"URL. Let's test the connection.",
    )
    c.turn(
        "Yes please, run the check.",
        f"The server rejected {pw}. Reset the role's password and update DATABASE_URL.",
        ("check_db", {"dsn": url, "password": pw, "timeout_s": 5}, 'FATAL: password authentication failed for user "app"'),
    )
    intro = b.pick(*_SECRET_INTROS[:5]).format(new_pw)
    c.turn(
        f"Reset done, {intro} now (the old one, {pw}, is revoked). The database host is {ip}.",
        f"Good. Keep {new_pw} in the secret store rather than in the URL in your repository, and allow {ip} in the firewall.",
    )


def _deploy_secrets(b: _Builder) -> None:
    k1, k2 = b.takes("API_KEY", 2)
    pw, jwt, refresh, pem = b.take("PASSWORD"), b.take("JWT"), b.take("JWT"), b.take("PRIVATE_KEY")
    (url, url_pw), bearer = b.take("URL_PASSWORD"), b.take("BEARER_TOKEN")
    c = b.chat("dev", ("set_secret",))
    c.turn(
        f"Why does my deploy fail? This is the .env:\n\nAPP_ENV=production\nOPENAI_API_KEY={k1}\n"
        f"SESSION_SECRET={pw}\nPAYMENTS_KEY={k2}\nREDIS_URL={url}\nLOG_LEVEL=info",
        f"The .env parses, but PAYMENTS_KEY={k2} is a live key in a file you commit, and REDIS_URL carries the "
        f"password {url_pw}. Move them and SESSION_SECRET to the secret store.",
    )
    c.turn(
        f"The job calls the API with\nAuthorization: Bearer {jwt}\nrefresh token {refresh}\nand clones with this "
        f"deploy key:\n\n{pem}",
        "That access token has expired (see its exp claim). Rotate the deploy key: it has been pasted in a chat.",
    )
    c.turn(
        "Store the deploy key in the vault for me.",
        "Stored as DEPLOY_KEY, version 7.",
        ("set_secret", {"name": "DEPLOY_KEY", "value": pem, "owner": "platform"}, '{"ok": true, "version": 7}'),
    )
    c.turn(
        f"export API_TOKEN={bearer}\nexport DB_PASSWORD={url_pw}\nWith those two, curl -H 'Authorization: Bearer "
        f"{bearer}' https://api.acme.corp/v1/jobs works locally; why not in CI?",
        f"CI does not read your shell: add API_TOKEN and DB_PASSWORD as masked CI variables (and rotate {url_pw}).",
    )


def _billing(b: _Builder) -> None:
    name, email = b.take("PERSON"), b.take("EMAIL_ADDRESS")
    card, old_card = b.takes("CREDIT_CARD", 2)
    iban, iban2 = b.takes("IBAN_CODE", 2)
    c = b.chat("support", ("issue_refund",), metadata={"account_email": email, "tier": "gold"})
    c.turn(
        f"I was charged twice on my card {card}. Please refund to my IBAN {iban}; the account holder is {name}. "
        f"My old card {old_card} was cancelled last month, in case it still shows up.",
        f"Sorry about that, {name}. I see two charges on the card {card}. I'll refund one to {iban}.",
    )
    c.turn(
        f"Go ahead. If that account doesn't work, use my partner's: {iban2}. Receipt to {email} please.",
        f"Refund rf_20931 is pending to {iban}; it takes 3-5 working days. The receipt goes to {email}.",
        (
            "issue_refund",
            {"card_number": card, "iban": iban, "fallback_iban": iban2, "holder": name, "amount_eur": 42.10, "receipt_to": email},
            '{"refund_id": "rf_20931", "status": "pending"}',
        ),
    )
    ssn = b.take("US_SSN")
    c.turn(
        f"The tax form also wants my SSN, it's {ssn}. Is it OK to send it here?",
        f"Please don't send it in chat; I haven't stored {ssn}. Use the secure upload form instead.",
    )


def _network(b: _Builder) -> None:
    gw, client, other, peer = b.takes("IP_ADDRESS", 4)
    token = b.take("JWT") if b.rng.random() < 0.3 else b.take("BEARER_TOKEN")
    c = b.chat("ops", ("run_ssh",))
    c.turn(
        f"Our VPN gateway {gw} keeps dropping clients from {client}. Firewall log:\n"
        f"DROP src={client} dst={gw} proto=udp dport=51820\nDROP src={other} dst={gw} proto=udp dport=51820",
        f"Both {client} and {other} are dropped on UDP 51820; the allow rule probably covers only the old range.",
    )
    c.turn(
        f"curl -H 'Authorization: Bearer {token}' https://vpn-admin.corp.example/api/peers returns 401.",
        "The admin API rejects that token: it has expired or lacks the peers scope. Issue a new one.",
    )
    c.turn(
        "Check the interface on the gateway.",
        f"wg0 is up and {peer} completed a handshake 2 minutes ago, so the tunnel works: the drops are the firewall rule.",
        (
            "run_ssh",
            {"host": gw, "command": "wg show wg0"},
            f"interface: wg0\n  listening port: 51820\n\npeer endpoint: {peer}\n  latest handshake: 2 minutes ago",
        ),
    )


def _contacts(b: _Builder) -> None:
    n1, n2, n3, n4, n5 = b.takes("PERSON", 5)
    p = b.takes("PHONE_NUMBER", 7)
    city, email = b.take("LOCATION"), b.take("EMAIL_ADDRESS")
    c = b.chat("assistant", ("save_contacts",))
    c.turn(
        f"Turn these into a table (name, phone):\n{n1} - {p[0]}\n{n2}: mobile {p[1]}, office {p[2]}\n"
        f"{n3} ({city}) {p[3]}\ncall {n4} on {p[4]} or {p[5]}",
        f"| name | phone |\n|---|---|\n| {n1} | {p[0]} |\n| {n2} | {p[1]} (mobile), {p[2]} (office) |\n"
        f"| {n3} | {p[3]} |\n| {n4} | {p[4]}, {p[5]} |",
    )
    c.turn(f"Add {n5}, phone {p[6]}, email {email}.", f"Added: | {n5} | {p[6]} | ({email})")
    c.turn(
        "Save them to the CRM.",
        "Saved 5 contacts.",
        (
            "save_contacts",
            {"contacts": [{"name": n, "phone": ph} for n, ph in ((n1, p[0]), (n2, p[1]), (n3, p[3]), (n4, p[4]), (n5, p[6]))]},
            '{"saved": 5}',
        ),
    )


def _phone_normalize(b: _Builder) -> None:
    p = b.takes("PHONE_NUMBER", 10)
    c = b.chat("assistant")
    c.turn(
        "Normalize these numbers to E.164 and tell me which country each is from:\n" + "\n".join(f"- {x}" for x in p),
        "Here is what I can tell from the formats:\n"
        + "\n".join(f"- {x}: needs its country code checked" for x in p[:4])
        + "\n- the rest look national.",
    )
    c.turn(
        f"Which of them look invalid? I'm not sure about {p[7]} and {p[8]}.",
        f"{p[7]} and {p[8]} have a plausible shape; only the carrier can say whether they are assigned.",
    )


def _shipping(b: _Builder) -> None:
    names = b.takes("PERSON", 4)
    addrs = b.takes("STREET_ADDRESS", 4)
    phone = b.take("PHONE_NUMBER")
    c = b.chat("assistant", ("create_shipment",))
    c.turn(
        "Make shipping labels for:\n" + "\n".join(f"{i}. {n}, {a}" for i, (n, a) in enumerate(zip(names, addrs), 1)),
        "Labels:\n\n" + "\n\n".join(f"{n}\n{a}" for n, a in zip(names, addrs)),
    )
    c.turn(
        f"Ship the first one express; the recipient's phone is {phone}.",
        f"Shipment created for {names[0]}, tracking TRK-7731-0092.",
        (
            "create_shipment",
            {"recipient": names[0], "address": addrs[0], "phone": phone, "service": "express"},
            '{"tracking": "TRK-7731-0092"}',
        ),
    )


def _meeting(b: _Builder) -> None:
    n1, n2, n3 = b.takes("PERSON", 3)
    first, titled = b.take("FIRST"), b.take("TITLED")
    email, phone, city = b.take("EMAIL_ADDRESS"), b.take("PHONE_NUMBER"), b.take("LOCATION")
    c = b.chat("assistant")
    c.turn(
        f"Summarize these notes:\n\nAttendees: {n1}, {n2}, {n3}\n- {n2} will send the contract to {email} by "
        f"Friday.\n- Landlord in {city}: call {phone}.\n- Budget approved; {n3}'s team owns the rollout.\n"
        f"- Legal review by {titled}.\n\nNotes from {first}",
        f"Summary: {n2} sends the contract to {email} by Friday; call the landlord in {city} at {phone}; "
        f"{n3}'s team owns the rollout; {titled} reviews the legal side.",
    )
    c.turn(
        f"Write a short thank-you note to {n1} from me.",
        f"Dear {n1},\n\nThank you for hosting the planning session; the budget is approved and the rollout "
        f"has an owner.\n\nBest regards,\n{first}",
    )


def _prose_secrets(b: _Builder) -> None:
    pws = b.takes("PASSWORD", 5)
    key = b.take("API_KEY")
    intros = b.rng.sample(_SECRET_INTROS, 5)
    said = [i.format(p) for i, p in zip(intros, pws)]
    c = b.chat("assistant")
    c.turn(
        f"I keep forgetting my logins: for the VPN {said[0]}, for the wifi {said[1]}, and for the NAS "
        f"{said[2]}. Can you make a mnemonic for each?",
        f"Mnemonics:\n- {pws[0]}: read it as a short story, one word per chunk\n- {pws[1]}: split it in pairs\n"
        f"- {pws[2]}: start from the symbols",
    )
    c.turn(
        f"Also {said[3]} for the weather service and {said[4]} for the webhook. Where should I keep them?",
        f"Use a password manager, and never paste {pws[3]} or {pws[4]} into chats or tickets.",
    )
    c.turn(
        f"Is this key still valid? {key}", f"I can't check {key} from here; revoke it, since it has now been pasted into a chat."
    )


def _hr_onboarding(b: _Builder) -> None:
    name, addr, email, phone = b.take("PERSON"), b.take("STREET_ADDRESS"), b.take("EMAIL_ADDRESS"), b.take("PHONE_NUMBER")
    ssn, iban, iban2 = b.take("US_SSN"), b.take("IBAN_CODE"), b.take("IBAN_CODE")
    first, titled = b.take("FIRST"), b.take("TITLED")
    c = b.chat("hr", ("create_employee",), user=email)
    c.turn(
        f"New hire: {name}, starts 2025-02-03. Home address {addr}, phone {phone}, personal email {email}, "
        f"SSN {ssn}. Salary to {iban}, expenses to {iban2}.",
        f"Creating the record for {name} (start 2025-02-03, salary to {iban}).",
        (
            "create_employee",
            {
                "name": name,
                "address": addr,
                "phone": phone,
                "email": email,
                "ssn": ssn,
                "salary_iban": iban,
                "expenses_iban": iban2,
            },
            '{"employee_id": "E-30917"}',
        ),
    )
    c.turn(
        f"Draft the welcome email, signed by me.\n\nFrom {first}",
        f"Hi {name},\n\nWelcome aboard! Your employee id is E-30917; {titled} will meet you on your first "
        f"morning.\n\nCheers,\n{first}",
    )


def _travel(b: _Builder) -> None:
    name, card, email = b.take("PERSON"), b.take("CREDIT_CARD"), b.take("EMAIL_ADDRESS")
    phone, city, city2 = b.take("PHONE_NUMBER"), b.take("LOCATION"), b.take("LOCATION")
    c = b.chat("assistant", ("book_trip",))
    c.turn(
        f"Book me a flight from {city} to {city2} on 14 March and two nights in a hotel near the station. "
        f"Traveller: {name}, {phone}.",
        f"I found a morning flight from {city} to {city2} and a hotel 300 m from the station. Shall I book?",
    )
    c.turn(
        f"Yes, pay with {card} and send the confirmation to {email}.",
        f"Booked for {name}; the confirmation goes to {email}.",
        (
            "book_trip",
            {"traveller": name, "from": city, "to": city2, "date": "2025-03-14", "card": card, "email": email, "phone": phone},
            '{"booking": "BK-55102", "status": "confirmed"}',
        ),
    )


_CODE_INTROS = (
    "Why does this fail?",
    "Can you review this?",
    "What does this output mean?",
    "How can I make this cleaner?",
    "Explain this to me:",
)


def _code_help(b: _Builder, code: CodeText) -> None:
    text = code.text
    for kind in ("PERSON", "EMAIL_ADDRESS", "IP_ADDRESS", "BEARER_TOKEN", "PASSWORD", "API_KEY"):
        while f"«{kind}»" in text:
            text = text.replace(f"«{kind}»", b.take(kind), 1)
    if "«URL_PASSWORD»" in text:
        text = text.replace("«URL_PASSWORD»", b.take("URL_PASSWORD")[0])
    content = f"{b.pick(*_CODE_INTROS)}\n\n```\n{text}\n```"
    b.code.append((content, code))
    c = b.chat("dev")
    c.turn(
        content,
        "The snippet itself is fine; the problem is in how it is called. Add logging around the call and check the inputs first.",
    )
    if b.rng.random() < 0.5:
        c.turn(
            "Thanks. Anything to improve in it?",
            "Name the constants, add type hints where they are missing, and cover the edge cases with a test.",
        )


_SCENARIOS = (
    _support,
    _email_draft,
    _db_debug,
    _deploy_secrets,
    _billing,
    _network,
    _contacts,
    _phone_normalize,
    _shipping,
    _meeting,
    _prose_secrets,
    _hr_onboarding,
    _travel,
)


@dataclass
class EvalSet:
    """The trace, the label of each distinct value in it, and the code sample as sent."""

    trace: Any  # replay.trace.Trace (raw text)
    labels: dict[str, Label]  # value -> its label
    code: list[tuple[str, CodeText]]  # (the message content holding the code, the code text)

    def texts(self) -> list[str]:
        """Each distinct prompt string and recorded response of the trace, once."""
        from replay.bodies import text_slots

        out: dict[str, None] = {}
        for body, response in zip(self.trace.df["body"].to_list(), self.trace.df["response"].to_list()):
            out.update(dict.fromkeys(s.text for s in text_slots(json.loads(body))))
            if response:
                out[response] = None
        return list(out)

    def by_kind(self) -> dict[str, list[Label]]:
        out: dict[str, list[Label]] = defaultdict(list)
        for label in self.labels.values():
            out[label.kind].append(label)
        return out


def build_evalset(seed: int = 0) -> EvalSet:
    """The set (see the module docstring): scenarios in a seeded order, round after round, until
    every value and code text is used and there are :data:`MIN_REQUESTS` requests."""
    from capture.importers.logs import build_trace

    b = _Builder(seed)
    code = b.rng.sample(CODE_TEXTS, len(CODE_TEXTS))
    scenarios: list = []
    while not b.exhausted() or code or len(b.records) < MIN_REQUESTS:
        if not scenarios:
            scenarios = b.rng.sample(_SCENARIOS, len(_SCENARIOS))
        if code and b.rng.random() < 0.35:
            _code_help(b, code.pop())
        else:
            scenarios.pop()(b)
    trace = build_trace(b.records, source="evalset", source_format="openai-jsonl")
    return EvalSet(trace, b.labels, b.code)


# -- scoring --------------------------------------------------------------------------------------

# letters and digits a value must not run into to count as found (ASCII, Latin-1 and Latin
# Extended, Vietnamese); CJK neighbours do not count, as Japanese writes words without spaces
_WORD = "A-Za-z0-9À-ÖØ-öø-ɏḀ-ỿ"


def _forms(value: str) -> set[str]:
    """``value`` as written, and JSON-escaped once (a body's string) and twice (a tool call's
    arguments inside a body), with and without ``\\u`` escapes."""
    once = {value, json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1]}
    return once | {json.dumps(f, ensure_ascii=False)[1:-1] for f in once}


def value_pattern(value: str) -> str:
    """A regex matching any form of ``value`` that does not run into a letter or digit."""
    before = rf"(?<![{_WORD}])" if re.match(rf"[{_WORD}]", value) else ""
    after = rf"(?![{_WORD}])" if re.search(rf"[{_WORD}]$", value) else ""
    forms = sorted(_forms(value), key=len, reverse=True)
    return before + "(?:" + "|".join(re.escape(f) for f in forms) + ")" + after


def _strings(node: Any, out: list[str]) -> None:
    """Every string in a JSON value (keys too), and in the JSON held by a string."""
    if isinstance(node, str):
        out.append(node)
        if node[:1] in "{[":
            try:
                _strings(json.loads(node), out)
            except ValueError:
                pass
    elif isinstance(node, dict):
        for k, v in node.items():
            out.append(k)
            _strings(v, out)
    elif isinstance(node, list):
        for v in node:
            _strings(v, out)


def stored_text(trace: Any) -> str:
    """Everything a trace stores as text, in one string: every string column's values (the
    bodies as serialized), every string inside each body and each tool call's arguments, the
    metadata."""
    import polars as pl

    out: list[str] = []
    for name, dtype in trace.df.schema.items():
        if dtype == pl.String:
            out.extend(v for v in trace.df[name].to_list() if v)
    for body in trace.df["body"].to_list():
        if body:
            _strings(json.loads(body), out)
    out.extend(trace.meta.to_metadata().values())
    return "\x00".join(out)


@dataclass
class Scores:
    """What :func:`evaluate` measured (see the module docstring)."""

    requests: int = 0
    texts: int = 0
    values: Counter = field(default_factory=Counter)  # kind -> distinct values
    left: dict[str, list[str]] = field(default_factory=dict)  # kind -> values left verbatim
    strict_left: dict[str, list[str]] = field(default_factory=dict)  # kind -> values or a part left
    quarantined: int = 0
    quarantine_reasons: Counter = field(default_factory=Counter)
    code_pairs: int = 0
    mangled: list[tuple[str, str]] = field(default_factory=list)  # (non-PII string, its code's 1st line)
    found: Counter = field(default_factory=Counter)  # found type -> spans
    right: Counter = field(default_factory=Counter)  # found type -> spans on a label
    false_positives: dict[str, list[str]] = field(default_factory=dict)  # found type -> what it covered
    occurrences: Counter = field(default_factory=Counter)  # kind -> labelled occurrences in texts
    covered: Counter = field(default_factory=Counter)  # kind -> those inside found spans
    analysis_errors: int = 0
    seconds_redact: float = 0.0
    seconds_analyze: float = 0.0

    def recall(self, kind: str, strict: bool = True) -> float:
        left = (self.strict_left if strict else self.left).get(kind, [])
        return 1 - len(left) / self.values[kind] if self.values[kind] else float("nan")

    def precision(self, entity: str) -> float:
        return self.right[entity] / self.found[entity] if self.found[entity] else float("nan")

    @property
    def over_redaction(self) -> float:
        return len(self.mangled) / self.code_pairs if self.code_pairs else float("nan")


def score_end_to_end(es: EvalSet, scores: Scores, processes: int | None = None) -> None:
    """Redact the trace with :func:`redact.pipeline.redact_trace`; fill in recall, the
    quarantine and the over-redaction."""
    from redact import RedactionKey
    from redact.pipeline import redact_trace
    from replay.bodies import text_slots
    from replay.errors import RedactionError

    started = time.perf_counter()
    try:
        out, report = redact_trace(es.trace, RedactionKey(b"x" * 32), processes=processes)
    except RedactionError as e:  # every request quarantined: nothing written
        out, report = None, None
        scores.quarantined, scores.quarantine_reasons = len(es.trace), Counter({str(e): len(es.trace)})
    scores.seconds_redact = time.perf_counter() - started
    scores.requests = len(es.trace)
    if report is not None:
        scores.quarantined, scores.quarantine_reasons = report.quarantined, Counter(report.quarantine_reasons)
    stored = stored_text(out) if out is not None else ""
    for kind, labels in es.by_kind().items():
        scores.values[kind] = len(labels)
        left = [lab.value for lab in labels if re.search(value_pattern(lab.value), stored)]
        scores.left[kind] = left
        scores.strict_left[kind] = [
            lab.value for lab in labels if lab.value in left or any(re.search(value_pattern(p), stored) for p in lab.parts)
        ]
    versions: dict[str, set[str]] = defaultdict(set)  # raw prompt string -> its redacted copies
    if out is not None:
        raw = dict(zip(es.trace.df["request_id"].to_list(), es.trace.df["body"].to_list()))
        for rid, body in zip(out.df["request_id"].to_list(), out.df["body"].to_list()):
            for a, r in zip(text_slots(json.loads(raw[rid])), text_slots(json.loads(body))):
                versions[a.text].add(r.text)
    for content, code in es.code:
        for s in code.keep:
            scores.code_pairs += 1
            n = content.count(s)
            if not versions[content] or any(v.count(s) < n for v in versions[content]):
                scores.mangled.append((s, code.text.splitlines()[0]))


def score_analyzer(es: EvalSet, scores: Scores, analyzer: Any = None) -> None:
    """Run the analyzer on each distinct text once; fill in precision per found type, and how
    many labelled occurrences its spans cover whole."""
    from redact.analyzer import TextAnalyzer

    texts = es.texts()
    scores.texts = len(texts)
    by_form = {f: lab for lab in es.labels.values() for f in _forms(lab.value)}
    labelled = re.compile("|".join(value_pattern(v) for v in sorted(es.labels, key=len, reverse=True)))
    analyzer = analyzer or TextAnalyzer()
    started = time.perf_counter()
    results = analyzer.analyze_batch(texts)
    scores.seconds_analyze = time.perf_counter() - started
    for text, found in zip(texts, results):
        if isinstance(found, BaseException):
            scores.analysis_errors += 1
            continue
        spans = [m.span() for m in labelled.finditer(text)]
        for f in found:
            scores.found[f.entity] += 1
            if any(f.start < end and f.end > start for start, end in spans):
                scores.right[f.entity] += 1
            else:
                scores.false_positives.setdefault(f.entity, []).append(text[f.start : f.end])
        for start, end in spans:
            kind = by_form[text[start:end]].kind
            scores.occurrences[kind] += 1
            if all(any(f.start <= i < f.end for f in found) for i in range(start, end) if not text[i].isspace()):
                scores.covered[kind] += 1


def evaluate(es: EvalSet | None = None, processes: int | None = None) -> Scores:
    """Both scorings of ``es`` (the seed 0 set by default)."""
    es = es or build_evalset()
    scores = Scores()
    score_end_to_end(es, scores, processes)
    score_analyzer(es, scores)
    return scores


def _short(values: list[str], n: int = 4, width: int = 40) -> str:
    shown = [v if len(v) <= width else v[: width - 3] + "..." for v in values[:n]]
    return "; ".join(repr(v) for v in shown) + (f" (+{len(values) - n})" if len(values) > n else "")


def format_table(s: Scores) -> str:
    """The scores as a printable table."""
    lines = [
        f"end to end: redact_trace over {s.requests} requests ({s.seconds_redact:.0f} s); "
        f"recall = share of distinct values no longer stored (strict: nor any identifying part)",
        f"{'type':22s} {'values':>6s} {'recall':>7s} {'strict':>7s}  left (strict)",
    ]
    for kind in TYPES:
        if s.values[kind]:
            lines.append(
                f"{kind:22s} {s.values[kind]:6d} {s.recall(kind, strict=False):7.3f} "
                f"{s.recall(kind):7.3f}  {_short(s.strict_left.get(kind, []))}"
            )
    lines.append(
        f"quarantined: {s.quarantined} of {s.requests} requests"
        + (f" {dict(s.quarantine_reasons)}" if s.quarantine_reasons else "")
    )
    lines.append(
        f"over-redaction on the code sample: {len(s.mangled)} of {s.code_pairs} non-PII strings changed ({s.over_redaction:.3f})"
    )
    lines.extend(f"  changed: {v!r}  (in: {where[:50]!r})" for v, where in s.mangled)
    lines.append(
        f"analyzer: TextAnalyzer.analyze_batch on {s.texts} distinct texts ({s.seconds_analyze:.0f} s, "
        f"{s.analysis_errors} errors); precision = found spans on a labelled value / found spans"
    )
    lines.append(f"{'found type':22s} {'spans':>6s} {'precision':>9s}  not on a label")
    for entity in sorted(s.found):
        lines.append(
            f"{entity:22s} {s.found[entity]:6d} {s.precision(entity):9.3f}  {_short(s.false_positives.get(entity, []), 6, 30)}"
        )
    lines.append(f"{'labelled type':22s} {'occurrences':>11s} {'covered whole by found spans':>29s}")
    for kind in TYPES:
        if s.occurrences[kind]:
            lines.append(f"{kind:22s} {s.occurrences[kind]:11d} {s.covered[kind] / s.occurrences[kind]:29.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(evaluate()))
