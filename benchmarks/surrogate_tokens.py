"""How often a surrogate keeps its value's token count, on values the surrogates were not tuned on.

The corpus (:mod:`examples.pii_corpus`, Faker en_US) and the independent set
(``tests/unit/redact/evalset.py``) are what :mod:`redact.surrogates` was developed against. This
draws fresh values from twelve other Faker locales (names, emails, street addresses, phone
numbers, IBANs) and random ones (cards, IPv4 / IPv6, provider-shaped keys, JWT-shaped tokens), makes
each one's surrogate under GPT-2's and Qwen2's tokenizers, and prints, per type, the share whose
token count is kept bare and after a space (what :meth:`Surrogates.make` checks), and the time a
value.

    PYTHONPATH=. python benchmarks/surrogate_tokens.py [--per-type 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import string
import sys
import time

LOCALES = ["hi_IN", "vi_VN", "pl_PL", "tr_TR", "de_DE", "fr_FR", "es_ES", "pt_BR", "it_IT", "nl_NL", "sv_SE", "cs_CZ"]


def values(per_type: int, seed: int) -> dict[str, list[str]]:
    """``per_type`` distinct values of each type, drawn with ``seed``."""
    from faker import Faker

    fakers = [Faker(loc) for loc in LOCALES]
    for i, f in enumerate(fakers):
        f.seed_instance(seed * 100 + i)
    rng = random.Random(seed)
    out: dict[str, set[str]] = {}

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(rng.randbytes(n)).decode().rstrip("=")

    makers = {
        "PERSON": lambda f: f.name(),
        "EMAIL_ADDRESS": lambda f: rng.choice([f.email, f.company_email, f.free_email])(),
        "STREET_ADDRESS": lambda f: f.street_address() + ", " + f.postcode() + " " + f.city(),
        "PHONE_NUMBER": lambda f: f.phone_number(),
        "IBAN_CODE": lambda f: f.iban(),
        "CREDIT_CARD": lambda f: f.credit_card_number(),
        "IP_ADDRESS": lambda f: rng.choice([f.ipv4, f.ipv6])(),
        "API_KEY": lambda f: (
            rng.choice(["sk-proj-", "ghp_", "AKIA", "xoxb-", "hf_"])
            + "".join(rng.choices(string.ascii_letters + string.digits, k=rng.choice([16, 32, 40])))
        ),
        "JWT": lambda f: ".".join(
            [
                base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()).decode().rstrip("="),
                base64.urlsafe_b64encode(json.dumps({"sub": f.uuid4(), "name": f.name(), "email": f.email()}).encode())
                .decode()
                .rstrip("="),
                b64(32),
            ]
        ),
    }
    for entity, make in makers.items():
        got = out.setdefault(entity, set())
        while len(got) < per_type:
            got.add(make(rng.choice(fakers)))
    return {e: sorted(v) for e, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-type", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from redact.key import RedactionKey
    from redact.surrogates import Surrogates
    from replay.tokenizer import load_tokenizer

    vals = values(args.per_type, args.seed)
    print(
        f"{args.per_type} distinct values a type from Faker locales {', '.join(LOCALES)} "
        f"(seed {args.seed}); kept = token count unchanged bare and after a space"
    )
    print(f"{'type':16s} {'gpt2 kept':>10s} {'qwen2 kept':>11s} {'ms/value':>9s}")
    subs = {
        name: Surrogates(RedactionKey(b"surrogate-benchmark-key-0123456789"), load_tokenizer(name)) for name in ("gpt2", "qwen2")
    }
    totals = {name: [0, 0] for name in subs}
    for entity, vs in vals.items():
        row, spent = [], 0.0
        for name, sur in subs.items():
            started = time.perf_counter()
            kept = sum(not sur.make(entity, v)[1] for v in vs)
            spent += time.perf_counter() - started
            totals[name][0] += kept
            totals[name][1] += len(vs)
            row.append(kept / len(vs))
        print(f"{entity:16s} {row[0]:10.3f} {row[1]:11.3f} {spent / (2 * len(vs)) * 1e3:9.2f}")
    print(f"{'all':16s} " + " ".join(f"{k / n:{w}.3f}" for (k, n), w in zip(totals.values(), (10, 11))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
